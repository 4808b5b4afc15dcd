// A warm-started refresh of an eigenbasis by orthogonal iteration (the "QR algorithm" that SOAP and
// the eigenvalue-corrected Shampoo of distributed_shampoo use between exact eigendecompositions):
// cheaper than a full symmetric eigensolver when the matrix has moved little since its eigenvectors
// were last computed, as a preconditioner's factor between two refreshes.
//
// For a symmetric A and V, the previous eigenvectors as columns (V(i,k) is entry i of vector k,
// orthonormal):
//   B = V^T A V; while iterations < max_iterations and ||B - diag(B)||_F > tolerance ||B||_F:
//     V <- Q of the Householder QR decomposition of A V (one step of orthogonal iteration),
//     B = V^T A V;
//   then the columns of V are put in ascending order of diag(B), the eigenvalue estimates (a stable
//   sort, so that equal estimates keep their order). When the first test passes, no QR is done and
//   only the order may change. For an orthonormal V, ||B||_F = ||A||_F and ||A - V diag(B) V^T||_F =
//   ||B - diag(B)||_F: the test bounds the relative error of the approximation A ~ V diag(B) V^T.
//   It is computed as ||A||_F^2 - sum diag(B)^2 (as the reference computes ||B||_F^2 - sum diag(B)^2),
//   which resolves tolerances down to about sqrt(n eps) of the scalar type (3e-3 in float at n = 128,
//   2e-7 in double): below that, the decision is rounding.
//   The signs of the columns are LAPACK's (a column may come back negated; the preconditioners that
//   use these bases do not depend on the signs).
//
// Two forms: batched_eigenbasis_qr for host-accessible memory (LAPACK ?geqrf/?ormqr and BLAS ?gemm,
// one matrix per host thread), and batched_eigenbasis_qr_team for any memory space (one Kokkos team
// per matrix: the product, the estimates, an unblocked Householder QR with LAPACK's reflector
// convention (?geqr2, then ?org2r's backward accumulation) and the ordering in one kernel). Both
// take the same decisions and give the same bases up to rounding.
#ifndef KOPTIM_LINALG_EIGENBASISQR_HPP
#define KOPTIM_LINALG_EIGENBASISQR_HPP

#include <koptim/linalg/koptim_Eigensolver.hpp>
#include <koptim/linalg/koptim_Gemm.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

namespace koptim {
namespace linalg {

struct QrRefreshOptions {
  // QR steps at most, >= 0 (0: only the ordering).
  int max_iterations = 1;
  // In [0, 1]: the relative off-diagonal norm of B that counts as converged; 0: never (every
  // refresh takes max_iterations steps).
  double tolerance = 0.01;
};

// The code of a refresh whose result was not finite (A V overflowed): V is kept.
constexpr int eigenbasis_info_nonfinite_result = 2;

namespace Impl {

// Q of A = QR (n x n, column-major) into q; a is overwritten by the factorization. LAPACK's info.
int lapack_qr_q(int n, float* a, float* q);
int lapack_qr_q(int n, double* a, double* q);

// The options both forms accept (thrown before any work: nothing may throw inside their loops).
inline void check_qr_options(const QrRefreshOptions& o, const char* who) {
  if (o.max_iterations < 0 || !(o.tolerance >= 0.0 && o.tolerance <= 1.0)) {
    throw koptim::ConfigError(std::string(who) + ": max_iterations = " + std::to_string(o.max_iterations) +
                              ", tolerance = " + num(o.tolerance) +
                              "; allowed: max_iterations >= 0 and tolerance in [0, 1]");
  }
}

// One matrix, all column-major n x n: a (symmetric, both triangles), v (orthonormal columns; replaced
// on success), work (2 n^2). Returns 0, LAPACK's info or eigenbasis_info_nonfinite_result (v then
// unchanged); iterations receives the QR steps done.
//
// The test needs no B = V^T A V: for an orthonormal V, ||B||_F = ||A||_F and the diagonal of B is
// d_k = v_k . (A v_k), so ||B - diag(B)||_F^2 = ||A||_F^2 - sum d_k^2 (in double; the reference's
// own formula is this difference, with ||B||_F). A refresh with s QR steps costs s + 1 products
// A V and s QR decompositions.
template <class T>
int eigenbasis_qr_one(int n, const T* a, T* v, T* work, const QrRefreshOptions& o, int& iterations) {
  iterations           = 0;
  const std::size_t nn = static_cast<std::size_t>(n) * n;
  T* const q           = work;    // the current basis
  T* const p           = q + nn;  // A q
  std::copy(v, v + nn, q);
  double a2 = 0.0;
  for (std::size_t e = 0; e < nn; ++e) a2 += static_cast<double>(a[e]) * a[e];
  std::vector<double> d(static_cast<std::size_t>(n));
  // p = A q and the estimates d; false when p is not finite (no QR of an overflowed product).
  const auto estimate = [&]() {
    blas_gemm('N', 'N', n, n, n, T(1), a, n, q, n, T(0), p, n);
    for (std::size_t e = 0; e < nn; ++e)
      if (!koptim::Impl::is_finite(p[e])) return false;
    for (int k = 0; k < n; ++k) {
      double s          = 0.0;
      const T* const qk = q + static_cast<std::size_t>(k) * n;
      const T* const pk = p + static_cast<std::size_t>(k) * n;
      for (int i = 0; i < n; ++i) s += static_cast<double>(qk[i]) * pk[i];
      d[k] = s;
    }
    return true;
  };
  const auto converged = [&]() {
    if (o.tolerance == 0.0) return false;  // 0: every refresh takes max_iterations steps
    double d2 = 0.0;
    for (double x : d) d2 += x * x;
    return std::sqrt(std::max(a2 - d2, 0.0)) <= o.tolerance * std::sqrt(a2);
  };
  if (!estimate()) return eigenbasis_info_nonfinite_result;
  while (iterations < o.max_iterations && !converged()) {
    const int info = lapack_qr_q(n, p, q);  // p is recomputed by the next estimate
    if (info != 0) return info;
    ++iterations;
    if (!estimate()) return eigenbasis_info_nonfinite_result;
  }
  for (std::size_t e = 0; e < nn; ++e)
    if (!koptim::Impl::is_finite(q[e])) return eigenbasis_info_nonfinite_result;
  for (double x : d)
    if (!std::isfinite(x)) return eigenbasis_info_nonfinite_result;
  std::vector<int> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return d[x] < d[y]; });
  for (int k = 0; k < n; ++k)
    std::copy(q + static_cast<std::size_t>(order[k]) * n, q + static_cast<std::size_t>(order[k] + 1) * n,
              v + static_cast<std::size_t>(k) * n);
  return 0;
}

// Column j of matrix a of C <- H_k C(:, j), with H_k = I - t v v^T the reflector stored in column
// k of matrix a of R below its diagonal (v = (0, ..., 0, 1, R(k+1:n, k)), LAPACK's convention).
template <class R, class C, class T>
KOKKOS_INLINE_FUNCTION void apply_reflector(const R& r, const C& c, int a, int k, int j, int n, T t) {
  T w = c(a, k, j);
  for (int i = k + 1; i < n; ++i) w += r(a, i, k) * c(a, i, j);
  w *= t;
  c(a, k, j) -= w;
  for (int i = k + 1; i < n; ++i) c(a, i, j) -= w * r(a, i, k);
}

// The power of two s with s * m in [1, 2) for a finite m > 0 (1 otherwise), within 2^-1000 ..
// 2^1000 (beyond, m is scaled as far as that goes).
KOKKOS_INLINE_FUNCTION double power_of_two_to_unit(double m) {
  if (!koptim::Impl::is_finite(m) || !(m > 0.0)) return 1.0;
  double s = 1.0;
  for (int e = 0; e < 1000 && m * s >= 2.0; ++e) s *= 0.5;
  for (int e = 0; e < 1000 && m * s < 1.0; ++e) s *= 2.0;
  return s;
}

}  // namespace Impl

// The refresh above for every matrix of a batch: A (batch x n x n, symmetric; only its lower
// triangle, in A's own indexing, is read) and V (batch x n x n, V(b,i,k) entry i of vector k of
// matrix b, replaced where info(b) = 0) in host-accessible memory; info(b) receives 0, LAPACK's
// info, eigh_info_nonfinite_input (A held a NaN or Inf) or eigenbasis_info_nonfinite_result, and
// iterations(b) the QR steps done. The matrices run concurrently on the threads of the host
// instance `host` (the default one unless given).
template <class BatchView, class VectorsView, class InfoView, class IterationsView>
void batched_eigenbasis_qr(const Kokkos::DefaultHostExecutionSpace& host, const BatchView& A, const VectorsView& V,
                           const InfoView& info, const IterationsView& iterations, const QrRefreshOptions& o = {}) {
  using T = typename VectorsView::non_const_value_type;
  static_assert(Kokkos::is_view<BatchView>::value && BatchView::rank == 3 && Kokkos::is_view<VectorsView>::value &&
                    VectorsView::rank == 3,
                "batched_eigenbasis_qr: A and V must be rank-3 Views (batch x n x n)");
  static_assert(InfoView::rank == 1 && IterationsView::rank == 1,
                "batched_eigenbasis_qr: info and iterations must be rank 1");
  static_assert(std::is_same<typename BatchView::non_const_value_type, T>::value,
                "batched_eigenbasis_qr: A and V must have the same scalar type");
  static_assert(Impl::is_lapack_scalar<T>::value, "batched_eigenbasis_qr: the scalar type must be float or double");
  static_assert(Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename BatchView::memory_space>::accessible &&
                    Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename VectorsView::memory_space>::accessible,
                "batched_eigenbasis_qr: A and V must be in host-accessible memory");
  koptim::Impl::ScopedRegion region("koptim::linalg::batched_eigenbasis_qr");
  const std::size_t nb = A.extent(0), n = A.extent(1);
  if (A.extent(2) != n || V.extent(0) != nb || V.extent(1) != n || V.extent(2) != n || info.extent(0) != nb ||
      iterations.extent(0) != nb) {
    throw koptim::ShapeError("koptim::linalg::batched_eigenbasis_qr: extents do not match: A " + std::to_string(nb) +
                             " x " + std::to_string(n) + " x " + std::to_string(A.extent(2)) + ", V " +
                             std::to_string(V.extent(0)) + " x " + std::to_string(V.extent(1)) + " x " +
                             std::to_string(V.extent(2)) + ", info " + std::to_string(info.extent(0)) +
                             ", iterations " + std::to_string(iterations.extent(0)));
  }
  Impl::check_qr_options(o, "koptim::linalg::batched_eigenbasis_qr");
  // Before the parallel loop: nothing may throw inside it.
  Impl::check_lapack_order(n, "koptim::linalg::batched_eigenbasis_qr");
  const auto solve = [=](const std::size_t m) {
    iterations(m) = 0;
    if (n == 0) {
      info(m) = 0;
      return;
    }
    const std::size_t nn = n * n;
    // One buffer per host thread, kept between calls up to Impl::host_buffer's limit (n <= 256): a
    // fresh 4 n^2 allocation per matrix (256 KB at n = 128, page faults included) cost as much as a
    // GEMM; for larger n the QR steps dwarf it, and a kept buffer would pin 4 n^2 per thread.
    static thread_local std::vector<T> kept;
    std::vector<T> once;
    T* const a = Impl::host_buffer(kept, once, 4 * nn);
    T* const v = a + nn;
    for (std::size_t j = 0; j < n; ++j) {
      for (std::size_t i = j; i < n; ++i) {
        const T x = static_cast<T>(A(m, i, j));
        if (!koptim::Impl::is_finite(x)) {
          info(m) = eigh_info_nonfinite_input;
          return;
        }
        a[i + j * n] = a[j + i * n] = x;
      }
    }
    for (std::size_t k = 0; k < n; ++k)
      for (std::size_t i = 0; i < n; ++i) v[i + k * n] = V(m, i, k);
    int it        = 0;
    const int rc  = Impl::eigenbasis_qr_one<T>(static_cast<int>(n), a, v, v + nn, o, it);
    info(m)       = rc;
    iterations(m) = it;
    if (rc != 0) return;
    for (std::size_t k = 0; k < n; ++k)
      for (std::size_t i = 0; i < n; ++i) V(m, i, k) = v[i + k * n];
  };
  koptim::Impl::host_batch(host, "koptim::linalg::batched_eigenbasis_qr", nb, solve);
}

template <class BatchView, class VectorsView, class InfoView, class IterationsView>
void batched_eigenbasis_qr(const BatchView& A, const VectorsView& V, const InfoView& info,
                           const IterationsView& iterations, const QrRefreshOptions& o = {}) {
  batched_eigenbasis_qr(Kokkos::DefaultHostExecutionSpace(), A, V, info, iterations, o);
}

// The same refresh as one kernel, a team per matrix, in any memory space: A and V as above
// (rank 3, LayoutRight or not), info and iterations (rank 1) in the execution space's memory;
// Q, P (batch x n x n), tau (batch x n) and d (batch x n, double: the estimates) are workspace. Only the lower triangle
// of A is read. Meant for device memory and small blocks (the product costs n^3 per matrix on one team, the QR n steps
// with three team synchronisations each). Before each QR, A V is scaled by a power of two to a
// largest entry in [1, 2), and the reflectors' norms are summed in double, so that a factor of any
// scale (float entries of 1e-30 or 1e30) gives an orthonormal basis, as LAPACK's does.
template <class ExecSpace, class BatchView, class VectorsView, class InfoView, class IterationsView, class Work3,
          class Work2, class Estimates>
void batched_eigenbasis_qr_team(const ExecSpace& space, const BatchView& A, const VectorsView& V, const InfoView& info,
                                const IterationsView& iterations, const QrRefreshOptions& o, const Work3& Q,
                                const Work3& P, const Work2& tau, const Estimates& d) {
  using T = typename VectorsView::non_const_value_type;
  static_assert(
      BatchView::rank == 3 && VectorsView::rank == 3 && Work3::rank == 3 && Work2::rank == 2 && Estimates::rank == 2,
      "batched_eigenbasis_qr_team: A, V, Q, P rank 3; tau, d rank 2");
  static_assert(std::is_same<typename Estimates::non_const_value_type, double>::value,
                "batched_eigenbasis_qr_team: the estimates d are double, as in batched_eigenbasis_qr");
  static_assert(std::is_floating_point<T>::value, "batched_eigenbasis_qr_team: the scalar type must be floating point");
  static_assert(std::is_same<typename BatchView::non_const_value_type, T>::value,
                "batched_eigenbasis_qr_team: A and V must have the same scalar type");
  koptim::Impl::ScopedRegion region("koptim::linalg::batched_eigenbasis_qr_team");
  const int nb = static_cast<int>(A.extent(0)), n = static_cast<int>(A.extent(1));
  if (A.extent(2) != A.extent(1) || V.extent(0) != A.extent(0) || V.extent(1) != A.extent(1) ||
      V.extent(2) != A.extent(1) || info.extent(0) != A.extent(0) || iterations.extent(0) != A.extent(0) ||
      Q.extent(0) < A.extent(0) || Q.extent(1) < A.extent(1) || Q.extent(2) < A.extent(1) ||
      P.extent(0) < A.extent(0) || P.extent(1) < A.extent(1) || P.extent(2) < A.extent(1) ||
      tau.extent(0) < A.extent(0) || tau.extent(1) < A.extent(1) || d.extent(0) < A.extent(0) ||
      d.extent(1) < A.extent(1)) {
    throw koptim::ShapeError("koptim::linalg::batched_eigenbasis_qr_team: extents do not match (A " +
                             std::to_string(nb) + " x " + std::to_string(n) + " x " + std::to_string(A.extent(2)) +
                             ")");
  }
  Impl::check_qr_options(o, "koptim::linalg::batched_eigenbasis_qr_team");
  if (nb == 0) return;
  using Policy           = Kokkos::TeamPolicy<ExecSpace>;
  using Member           = typename Policy::member_type;
  const int max_it       = o.max_iterations;
  const double tolerance = o.tolerance;
  Kokkos::parallel_for(
      "koptim::linalg::eigenbasis_qr_team", Policy(space, nb, Kokkos::AUTO), KOKKOS_LAMBDA(const Member& team) {
        const int a = team.league_rank();
        // A symmetric from its lower triangle; its Frobenius norm and finiteness.
        const auto sym = [&](int i, int j) { return i >= j ? A(a, i, j) : A(a, j, i); };
        if (Impl::team_count_nonfinite(team, n * n, [&](const int e) { return sym(e / n, e % n); }) != 0) {
          Kokkos::single(Kokkos::PerTeam(team), [&]() {
            info(a)       = eigh_info_nonfinite_input;
            iterations(a) = 0;
          });
          return;
        }
        double a2 = 0.0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, n * n),
            [&](const int e, double& s) {
              const double x = sym(e / n, e % n);
              s += x * x;
            },
            a2);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n * n),
                             [&](const int e) { Q(a, e / n, e % n) = V(a, e / n, e % n); });
        team.team_barrier();
        // P = A Q and the estimates d_k = Q(:,k) . P(:,k); false when P is not finite.
        const auto estimate = [&]() {
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n * n), [&](const int e) {
            const int i = e / n, k = e % n;
            T s = 0;
            for (int j = 0; j < n; ++j) s += sym(i, j) * Q(a, j, k);
            P(a, i, k) = s;
          });
          team.team_barrier();
          const int nonfinite =
              Impl::team_count_nonfinite(team, n * n, [&](const int e) { return P(a, e / n, e % n); });
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n), [&](const int k) {
            double s = 0.0;
            for (int i = 0; i < n; ++i) s += static_cast<double>(Q(a, i, k)) * P(a, i, k);
            d(a, k) = s;
          });
          team.team_barrier();
          return nonfinite == 0;
        };
        const auto converged = [&]() {
          if (tolerance == 0.0) return false;
          double d2 = 0.0;
          Kokkos::parallel_reduce(
              Kokkos::TeamThreadRange(team, n),
              [&](const int k, double& s) {
                const double x = d(a, k);
                s += x * x;
              },
              d2);
          const double off2 = a2 - d2 > 0.0 ? a2 - d2 : 0.0;
          return koptim::Impl::sqrt(off2) <= tolerance * koptim::Impl::sqrt(a2);
        };
        int it = 0, code = 0;
        if (!estimate()) code = eigenbasis_info_nonfinite_result;
        while (code == 0 && it < max_it && !converged()) {
          // P scaled by a power of two to a largest entry in [1, 2) (Q does not change; exact but
          // for entries far below the largest), and the column norms summed in double: a float P
          // of a small factor (entries of 1e-20, or the columns of 1e-7 times it that span its
          // null space) had squares below the smallest normal float, and a large one (1e20)
          // squares beyond the largest, which gave a Q that was not orthogonal, or NaN.
          T pmax = 0;
          Kokkos::parallel_reduce(
              Kokkos::TeamThreadRange(team, n * n),
              [&](const int e, T& mx) { mx = koptim::Impl::max(mx, koptim::Impl::abs(P(a, e / n, e % n))); },
              Kokkos::Max<T>(pmax));
          const double to_unit = Impl::power_of_two_to_unit(static_cast<double>(pmax));
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n * n), [&](const int e) {
            P(a, e / n, e % n) = static_cast<T>(static_cast<double>(P(a, e / n, e % n)) * to_unit);
          });
          team.team_barrier();
          // Householder QR of P in place (?geqr2): reflector k zeroes P(k+1:n, k).
          for (int k = 0; k < n; ++k) {
            double x2 = 0;
            Kokkos::parallel_reduce(
                Kokkos::TeamThreadRange(team, k + 1, n),
                [&](const int i, double& s) {
                  const double x = P(a, i, k);
                  s += x * x;
                },
                x2);
            const double alpha = P(a, k, k);
            double beta = alpha, scale = 0.0;  // scale in double: a column far below P's largest
            T t = 0;                           // entry has a reciprocal norm beyond T's range
            if (x2 > 0.0) {
              beta  = alpha >= 0.0 ? -koptim::Impl::sqrt(alpha * alpha + x2) : koptim::Impl::sqrt(alpha * alpha + x2);
              t     = static_cast<T>((beta - alpha) / beta);
              scale = 1.0 / (alpha - beta);
            }
            team.team_barrier();  // every thread has read alpha
            if (t != T(0))
              Kokkos::parallel_for(Kokkos::TeamThreadRange(team, k + 1, n), [&](const int i) {
                P(a, i, k) = static_cast<T>(static_cast<double>(P(a, i, k)) * scale);
              });
            Kokkos::single(Kokkos::PerTeam(team), [&]() {
              P(a, k, k) = static_cast<T>(beta);
              tau(a, k)  = t;
            });
            team.team_barrier();
            if (t != T(0))
              Kokkos::parallel_for(Kokkos::TeamThreadRange(team, k + 1, n),
                                   [&](const int j) { Impl::apply_reflector(P, P, a, k, j, n, t); });
            team.team_barrier();
          }
          // Q = H_0 ... H_{n-1} applied to the identity, last reflector first (?org2r).
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n * n),
                               [&](const int e) { Q(a, e / n, e % n) = e / n == e % n ? T(1) : T(0); });
          team.team_barrier();
          for (int k = n - 1; k >= 0; --k) {
            const T t = tau(a, k);
            if (t != T(0))
              Kokkos::parallel_for(Kokkos::TeamThreadRange(team, k, n),
                                   [&](const int j) { Impl::apply_reflector(P, Q, a, k, j, n, t); });
            team.team_barrier();
          }
          ++it;
          if (!estimate()) code = eigenbasis_info_nonfinite_result;
        }
        if (code == 0 && Impl::team_count_nonfinite(team, n * n, [&](const int e) { return Q(a, e / n, e % n); }) != 0)
          code = eigenbasis_info_nonfinite_result;
        if (code == 0) {
          // Ascending estimates, stable: column k goes to its rank.
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n), [&](const int k) {
            const double dk = d(a, k);
            int r           = 0;
            for (int j = 0; j < n; ++j) r += (d(a, j) < dk || (d(a, j) == dk && j < k)) ? 1 : 0;
            for (int i = 0; i < n; ++i) V(a, i, r) = Q(a, i, k);
          });
        }
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          info(a)       = code;
          iterations(a) = it;
        });
      });
}

}  // namespace linalg
}  // namespace koptim

#endif
