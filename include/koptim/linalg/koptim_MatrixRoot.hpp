// Inverse matrix roots X = (L + eps I)^(-a) of symmetric positive semidefinite factor
// matrices, the core of Shampoo's "amortized computation" (docs/shampoo.md, "What one step does", step 2).
//
// batched_inverse_root() takes a batch of same-size factors (batch x n x n, any memory space)
// with one exponent per matrix and returns one RootInfo per matrix, so that the optimizer can
// apply its failure rules: nonfinite_input and nonfinite_output are errors, solver_failure
// keeps the previous root and counts. X(b) is written only when matrix b succeeds, so the
// previous root survives every failure. inverse_root() is the same for one matrix.
//
// Default method: eigendecomposition of L + eps I (LAPACK for host memory, the batched Jacobi
// solver otherwise or on request), the shift rule "if lambda_min < eps, lambda <- lambda -
// lambda_min + eps", X = Q diag(lambda^-a) Q^T. A factor that is exactly diagonal skips the
// solver; a single-precision solver failure is retried in double; the pseudo-inverse option
// (eps must be 0) gives 0 for eigenvalues at or below max(rank_rtol max(lambda_max, 0),
// rank_atol). Exponent 0 gives the identity whatever the factor holds (that dimension is not
// preconditioned, its factor is never looked at). Alternative method: the coupled Newton iteration,
// built from KokkosBlas::gemm only, for exponents a = 1/p with p a positive integer; where it
// diverges on a finite factor (rank-deficient or ill-conditioned in this precision) that factor's
// root comes from the eigendecomposition (RootInfo::newton_fell_back).
#ifndef KOPTIM_LINALG_MATRIXROOT_HPP
#define KOPTIM_LINALG_MATRIXROOT_HPP

#include <koptim/core/koptim_Error.hpp>
#include <koptim/core/koptim_Kokkos.hpp>
#include <koptim/core/impl/koptim_Math.hpp>
#include <koptim/core/impl/koptim_Profiling.hpp>
#include <koptim/linalg/koptim_Eigensolver.hpp>
#include <koptim/linalg/koptim_BatchedGemm.hpp>
#include <koptim/linalg/koptim_Gemm.hpp>
#include <koptim/linalg/koptim_RootOptions.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace koptim {
namespace linalg {

enum class RootStatus {
  success,
  solver_failure,    // the eigensolver failed (after the retry in double): keep the previous root
  nonfinite_input,   // the factor holds a NaN or an infinity: an error
  nonfinite_output,  // the root would not be finite (e.g. a zero eigenvalue with eps = 0): an error
};

inline const char* to_string(RootStatus s) {
  switch (s) {
    case RootStatus::success:
      return "success";
    case RootStatus::solver_failure:
      return "solver failure";
    case RootStatus::nonfinite_input:
      return "non-finite input";
    case RootStatus::nonfinite_output:
      return "non-finite output";
  }
  return "unknown";
}

struct InverseRootOptions {
  RootMethod method = RootMethod::eigen;
  EighSolver solver = EighSolver::automatic;
  // Added to the diagonal before the decomposition; also the floor of the shift rule.
  double epsilon = 1e-12;
  // Pseudo-inverse root for rank-deficient factors; requires epsilon == 0.
  bool use_pseudo_inverse = false;
  double rank_rtol        = 0.0;
  double rank_atol        = 0.0;
  // Retry a failed single-precision eigendecomposition in double precision.
  bool retry_double_precision = true;
  // An exactly diagonal factor is inverted elementwise (both methods).
  bool skip_diagonal        = true;
  int newton_max_iterations = 100;
  double newton_tolerance   = 1e-6;
  JacobiOptions jacobi;
  // The batched GEMMs of the roots' reconstruction and of the coupled Newton iteration (portable:
  // koptim's kernel even where host BLAS or cuBLAS would take them; for tests).
  BatchedGemmBackend products = BatchedGemmBackend::automatic;
};

struct RootInfo {
  RootStatus status = RootStatus::success;
  // Code of the last eigensolver run (see koptim_Eigensolver.hpp); 0 when none ran.
  int solver_info = 0;
  // Jacobi sweeps or Newton iterations of the run that produced the result.
  int iterations         = 0;
  bool retried_in_double = false;
  bool diagonal_shortcut = false;
  bool identity          = false;  // exponent 0
  // Coupled Newton only: whether max|M - I| reached newton_tolerance, and its final value.
  // Without convergence the result is still used (status success); callers report it (Shampoo:
  // StepStatus::unconverged_roots).
  bool newton_converged = true;
  double newton_error   = 0.0;
  // Coupled Newton only: the iteration diverged on this (finite) factor, and the root was computed
  // by the eigendecomposition instead (status is that computation's).
  bool newton_fell_back = false;

  bool ok() const { return status == RootStatus::success; }
};

// The work buffers of batched_inverse_root, kept from one call to the next: a caller that
// computes roots of the same batch sizes again and again (Shampoo's amortized computation) passes
// the same workspace, and only its first call allocates. Each named buffer grows to the largest
// size asked for and is handed out as an unmanaged View of the extents asked; a buffer is in use
// only during the call that asked for it.
template <class MemorySpace>
class RootWorkspace {
 public:
  template <class T>
  using Vector = Kokkos::View<T*, MemorySpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  template <class T, class Layout = Kokkos::LayoutRight>
  using Matrix = Kokkos::View<T**, Layout, MemorySpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  template <class T>
  using Batch = Kokkos::View<T***, Kokkos::LayoutRight, MemorySpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

  using execution_space = typename MemorySpace::execution_space;
  // zero: filled with 0 (as a freshly allocated Kokkos View is) on the instance space.
  template <class T, class Space = execution_space>
  Vector<T> vector(const std::string& label, std::size_t n, bool zero = false, const Space& space = Space()) {
    return fill(Vector<T>(static_cast<T*>(storage<T>(buffers_, label, n)), n), zero, space);
  }
  template <class T, class Layout = Kokkos::LayoutRight, class Space = execution_space>
  Matrix<T, Layout> matrix(const std::string& label, std::size_t m, std::size_t n, bool zero = false,
                           const Space& space = Space()) {
    return fill(Matrix<T, Layout>(static_cast<T*>(storage<T>(buffers_, label, m * n)), m, n), zero, space);
  }
  template <class T, class Space = execution_space>
  Batch<T> batch(const std::string& label, std::size_t m, std::size_t n, std::size_t k, bool zero = false,
                 const Space& space = Space()) {
    return fill(Batch<T>(static_cast<T*>(storage<T>(buffers_, label, m * n * k)), m, n, k), zero, space);
  }
  // Where the host reads and writes a View v of this memory space (a host copy, LAPACK's input):
  // v's own memory when the host can access it (the copies to and from it are then no-ops), else
  // a host buffer of the workspace (one per label, kept like the others), so that a computation
  // that goes through the host allocates nothing after its first run.
  template <class V>
  using HostView = Kokkos::View<typename V::non_const_data_type, typename V::array_layout, Kokkos::HostSpace,
                                Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  template <class V>
  HostView<V> host_mirror(const std::string& label, const V& v) {
    using T = typename V::non_const_value_type;
    if constexpr (Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename V::memory_space>::accessible) {
      (void)label;
      return HostView<V>(const_cast<T*>(v.data()), v.layout());
    } else {
      return HostView<V>(static_cast<T*>(storage<T>(host_buffers_, label, v.span())), v.layout());
    }
  }
  // A host buffer of n elements for label, the source of an asynchronous copy to this memory
  // space (an operand table): unlike a local std::vector it outlives the call that fills it, as
  // the copy needs on a backend whose copies from host memory run after the call returns. A
  // label's buffer is written again only by a later call, after a fence of the instance (every
  // root computation ends with one; Newton's iterations fence between their products).
  template <class T>
  Kokkos::View<T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> host_vector(const std::string& label,
                                                                                           std::size_t n) {
    return Kokkos::View<T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
        static_cast<T*>(storage<T>(host_buffers_, label, n)), n);
  }
  // Bytes held (device and host buffers).
  std::size_t bytes() const {
    std::size_t b = 0;
    for (const auto& kv : buffers_) b += kv.second.extent(0);
    for (const auto& kv : host_buffers_) b += kv.second.extent(0);
    return b;
  }

 private:
  template <class View, class Space>
  static View fill(const View& v, bool zero, const Space& space) {
    if (zero && v.size() > 0) Kokkos::deep_copy(space, v, typename View::non_const_value_type{});
    return v;
  }
  // Room for count elements of T in the buffer of buffers (the device or the host buffers) for
  // label, grown when needed.
  template <class T, class Space>
  static void* storage(std::map<std::string, Kokkos::View<unsigned char*, Space>>& buffers, const std::string& label,
                       std::size_t count) {
    // One buffer per label and element size: the double-precision retry of a float batch uses
    // the same labels.
    auto& buf                = buffers[label + "/" + std::to_string(sizeof(T))];
    const std::size_t needed = std::max<std::size_t>(count * sizeof(T), 1);
    if (buf.extent(0) < needed) {
      buf = Kokkos::View<unsigned char*, Space>();  // free the old buffer first
      buf = Kokkos::View<unsigned char*, Space>(Kokkos::view_alloc(Kokkos::WithoutInitializing, label), needed);
    }
    return buf.data();
  }
  std::map<std::string, Kokkos::View<unsigned char*, MemorySpace>> buffers_;
  std::map<std::string, Kokkos::View<unsigned char*, Kokkos::HostSpace>> host_buffers_;
};

namespace Impl {

enum : int { class_general = 0, class_diagonal = 1, class_nonfinite = 2, class_identity = 3 };

template <class T, class MemorySpace>
using Batch = Kokkos::View<T***, Kokkos::LayoutRight, MemorySpace>;
template <class T, class MemorySpace>
using Batch2 = Kokkos::View<T**, Kokkos::LayoutRight, MemorySpace>;

// v in a workspace vector of the memory space (copied from host without a host mirror), on the
// instance space (v must live until space has run the copy: the caller's vectors outlive the call).
template <class ExecSpace, class MemorySpace>
typename RootWorkspace<MemorySpace>::template Vector<int> to_device(const ExecSpace& space,
                                                                    RootWorkspace<MemorySpace>& ws,
                                                                    const std::vector<int>& v,
                                                                    const std::string& label) {
  auto d = ws.template vector<int>(label, v.size());
  Kokkos::deep_copy(
      space, d,
      Kokkos::View<const int*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(v.data(), v.size()));
  return d;
}

// A rank-1 View of integers to the host, without a host mirror: a copy on space, then a fence of
// it (the host reads the values next).
template <class ExecSpace, class ViewType>
std::vector<int> to_host_vector(const ExecSpace& space, const ViewType& d) {
  using V = typename ViewType::non_const_value_type;
  std::vector<V> h(d.extent(0));
  Kokkos::deep_copy(
      space, Kokkos::View<V*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(h.data(), h.size()), d);
  koptim::Impl::fence(space, "koptim::linalg: integers to the host");
  return std::vector<int>(h.begin(), h.end());
}

// lambda^-a under the shift rule of docs/shampoo.md ("What one step does", step 2), given the smallest and largest
// eigenvalue of the same matrix; ok becomes false when the weight would not be finite.
// Every comparison here is on finite values.
template <class T>
KOKKOS_INLINE_FUNCTION T inverse_power(T lam, T lam_min, T lam_max, T eps, bool pinv, T rtol, T atol, T a, bool& ok) {
  if (pinv) {
    const T top    = lam_max > T(0) ? lam_max : T(0);
    const T cutoff = koptim::Impl::max(rtol * top, atol);
    if (lam <= cutoff) return T(0);
  } else if (lam_min < eps) {
    lam = lam - lam_min + eps;
  }
  if (!(lam > T(0))) {
    ok = false;
    return T(0);
  }
  const T r = koptim::Impl::pow(lam, -a);
  if (!koptim::Impl::is_finite(r)) {
    ok = false;
    return T(0);
  }
  return r;
}

// One team per matrix: non-finite entries, exactly diagonal, or exponent 0. One pass over the
// matrix, rows across the team and columns across the vector lanes, whose flags are or-ed
// together (a flat index would cost an integer division per entry). Here and in the other
// row-wise kernels, the inner loop goes through a row subview: with the rank-3 View indexed
// directly, GCC does not vectorize it (3-5x slower on one CPU core at n = 256).
// (The return type is spelled out: CUDA allows no extended lambda in a function whose return
// type is deduced.)
template <class ExecSpace, class LView, class ExpView>
typename RootWorkspace<typename LView::memory_space>::template Vector<int> classify(
    const ExecSpace& space, RootWorkspace<typename LView::memory_space>& ws, const LView& L, const ExpView& a,
    bool skip_diagonal) {
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = typename Policy::member_type;
  using Flags  = Kokkos::BOr<int>;
  enum : int { has_nonfinite = 1, has_offdiagonal = 2 };
  const int nb   = static_cast<int>(L.extent(0));
  const int n    = static_cast<int>(L.extent(1));
  const auto cls = ws.template vector<int>("koptim::linalg::classify", nb, true, space);
  Kokkos::parallel_for(
      "koptim::linalg::classify_factors", Policy(space, nb, Kokkos::AUTO, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Member& team) {
        const int b = team.league_rank();
        int flags   = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, n),
            [&](const int i, int& row_flags) {
              const auto row = Kokkos::subview(L, b, i, Kokkos::ALL());
              int f          = 0;
              Kokkos::parallel_reduce(
                  Kokkos::ThreadVectorRange(team, n),
                  [&](const int j, int& v) {
                    const auto x = row(j);
                    v |= (koptim::Impl::is_finite(x) ? 0 : has_nonfinite) | (i != j && x != 0 ? has_offdiagonal : 0);
                  },
                  Flags(f));
              row_flags |= f;
            },
            Flags(flags));
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          if (a(b) == 0.0)
            cls(b) = class_identity;
          else if (flags & has_nonfinite)
            cls(b) = class_nonfinite;
          else if (skip_diagonal && !(flags & has_offdiagonal))
            cls(b) = class_diagonal;
          else
            cls(b) = class_general;
        });
      });
  return cls;
}

// For every g with ok(g) != 0: X(idx[g]) = Y(g) when every entry of Y(g) is finite, otherwise
// ok(g) = 0 and X(idx[g]) is left alone (Y may be of another precision). One team per matrix,
// which checks and copies while Y(g) is still in cache.
template <class ExecSpace, class XView, class YView, class IdxView, class OkView>
void write_finite_roots(const ExecSpace& space, const XView& X, const YView& Y, const IdxView& idx, const OkView& ok) {
  using T      = typename XView::non_const_value_type;
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = typename Policy::member_type;
  const int m  = static_cast<int>(Y.extent(0));
  const int n  = static_cast<int>(Y.extent(1));
  Kokkos::parallel_for(
      "koptim::linalg::write_finite_roots", Policy(space, m, Kokkos::AUTO, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Member& team) {
        const int g = team.league_rank();
        if (ok(g) == 0) return;
        int bad = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, n),
            [&](const int i, int& cnt) {
              const auto y = Kokkos::subview(Y, g, i, Kokkos::ALL());
              int row      = 0;
              Kokkos::parallel_reduce(
                  Kokkos::ThreadVectorRange(team, n),
                  [&](const int j, int& c) { c += koptim::Impl::is_finite(static_cast<T>(y(j))) ? 0 : 1; }, row);
              cnt += row;
            },
            bad);
        if (bad > 0) {
          Kokkos::single(Kokkos::PerTeam(team), [&]() { ok(g) = 0; });
          return;
        }
        const int b = idx(g);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n), [&](const int i) {
          const auto y = Kokkos::subview(Y, g, i, Kokkos::ALL());
          const auto x = Kokkos::subview(X, b, i, Kokkos::ALL());
          Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, n), [&](const int j) { x(j) = static_cast<T>(y(j)); });
        });
      });
}

struct RootScalars {
  double eps, rtol, atol;
  bool pinv;
};

// Diagonal factors: the eigenvalues are the diagonal entries (+ eps), the eigenvectors the
// unit vectors, so the root is diagonal too. Roots are written for successes only.
template <class ExecSpace, class LView, class XView, class ExpView>
std::vector<int> diagonal_roots(const ExecSpace& space, RootWorkspace<typename LView::memory_space>& ws, const LView& L,
                                const XView& X, const ExpView& a, const std::vector<int>& which,
                                const RootScalars& rs) {
  using T       = typename XView::non_const_value_type;
  using Policy  = Kokkos::TeamPolicy<ExecSpace>;
  using Member  = typename Policy::member_type;
  const int m   = static_cast<int>(which.size());
  const int n   = static_cast<int>(L.extent(1));
  auto idx      = to_device(space, ws, which, "koptim::linalg::diag_idx");
  const auto d  = ws.template matrix<T>("koptim::linalg::diag_weights", m, n);
  const auto ok = ws.template vector<int>("koptim::linalg::diag_ok", m, true, space);
  const T eps = static_cast<T>(rs.eps), rtol = static_cast<T>(rs.rtol), atol = static_cast<T>(rs.atol);
  const bool pinv = rs.pinv;
  Kokkos::parallel_for(
      "koptim::linalg::diagonal_roots", Policy(space, m, Kokkos::AUTO), KOKKOS_LAMBDA(const Member& team) {
        const int g = team.league_rank(), b = idx(g);
        T lo = 0, hi = 0;
        if (n > 0) lo = hi = static_cast<T>(L(b, 0, 0)) + eps;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, n),
            [&](const int i, T& v) {
              const T x = static_cast<T>(L(b, i, i)) + eps;
              if (x < v) v = x;
            },
            Kokkos::Min<T>(lo));
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, n),
            [&](const int i, T& v) {
              const T x = static_cast<T>(L(b, i, i)) + eps;
              if (v < x) v = x;
            },
            Kokkos::Max<T>(hi));
        int bad    = 0;
        const T ag = static_cast<T>(a(b));
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, n),
            [&](const int i, int& cnt) {
              bool good = true;
              d(g, i)   = inverse_power(static_cast<T>(L(b, i, i)) + eps, lo, hi, eps, pinv, rtol, atol, ag, good);
              if (!good) ++cnt;
            },
            bad);
        Kokkos::single(Kokkos::PerTeam(team), [&]() { ok(g) = bad == 0 ? 1 : 0; });
      });
  // MDRange: m n^2 can exceed the int range of a flat index (2048 factors of 1024).
  Kokkos::parallel_for(
      "koptim::linalg::write_diagonal_roots",
      Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<3>>(space, {0, 0, 0}, {m, n, n}),
      KOKKOS_LAMBDA(const int g, const int i, const int j) {
        if (ok(g) != 0) X(idx(g), i, j) = i == j ? d(g, i) : T(0);
      });
  return to_host_vector(space, ok);
}

template <class ExecSpace, class XView>
void identity_roots(const ExecSpace& space, RootWorkspace<typename XView::memory_space>& ws, const XView& X,
                    const std::vector<int>& which) {
  using T     = typename XView::non_const_value_type;
  auto idx    = to_device(space, ws, which, "koptim::linalg::identity_idx");
  const int m = static_cast<int>(which.size());
  const int n = static_cast<int>(X.extent(1));
  Kokkos::parallel_for(
      "koptim::linalg::identity_roots", Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<3>>(space, {0, 0, 0}, {m, n, n}),
      KOKKOS_LAMBDA(const int g, const int i, const int j) { X(idx(g), i, j) = i == j ? T(1) : T(0); });
}

// Per-matrix outcome of the general eigen path in precision Tw.
struct EigenOutcome {
  std::vector<int> info;    // solver code
  std::vector<int> sweeps;  // Jacobi sweeps (0 for LAPACK)
  std::vector<int> ok;      // root computed and finite
};

// The eigendecompositions of the LAPACK path (eigenvectors in the rows of W, eigenvalues
// ascending in E, codes in info) by cuSOLVER on the device (Impl::cusolver_eigh), where the
// matrices are in device memory and koptim has cuSOLVER; false, with nothing done, elsewhere.
// As on the host, a matrix with an entry that is not finite is not solved: a kernel first
// replaces it by the identity, and its code becomes eigh_info_nonfinite_input afterwards. Only
// the diagonal is checked where the caller knows the rest finite (diagonal_only: the root path's
// factors were classified, and only a shift can have overflowed), every entry otherwise.
template <class ExecSpace, class Mem, class WorkBatch, class Values, class Info>
bool cusolver_eigh_batch(const ExecSpace& space, RootWorkspace<Mem>& ws, const WorkBatch& W, const Values& E,
                         const Info& info, bool diagonal_only) {
  if constexpr (!std::is_same<ExecSpace, ExecutionSpace>::value ||
                Kokkos::SpaceAccessibility<Kokkos::HostSpace, Mem>::accessible) {
    return false;
  } else {
    using T     = typename WorkBatch::non_const_value_type;
    using Team  = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
    const int m = static_cast<int>(W.extent(0)), n = static_cast<int>(W.extent(1));
    const std::int64_t lwork = cusolver_eigh_work(space, m, n, W.data(), E.data());
    if (lwork < 0) return false;
    const auto bad = ws.template vector<int>("koptim::linalg::cusolver_nonfinite", m);
    Kokkos::parallel_for(
        "koptim::linalg::cusolver_inputs", Kokkos::TeamPolicy<ExecSpace>(space, m, Kokkos::AUTO),
        KOKKOS_LAMBDA(const Team& team) {
          const int g     = team.league_rank();
          const int count = diagonal_only
                                ? team_count_nonfinite(team, n, [&](const int i) { return W(g, i, i); })
                                : team_count_nonfinite(team, n * n, [&](const int e) { return W(g, e / n, e % n); });
          if (count > 0)
            Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n * n),
                                 [&](const int t) { W(g, t / n, t % n) = t / n == t % n ? T(1) : T(0); });
          Kokkos::single(Kokkos::PerTeam(team), [&]() { bad(g) = count > 0 ? 1 : 0; });
        });
    const auto work = ws.template vector<T>("koptim::linalg::cusolver_work", std::max<std::int64_t>(lwork, 1));
    cusolver_eigh(space, m, n, W.data(), E.data(), info.data(), work.data(), lwork);
    Kokkos::parallel_for(
        "koptim::linalg::cusolver_codes", Kokkos::RangePolicy<ExecSpace>(space, 0, m), KOKKOS_LAMBDA(const int g) {
          if (bad(g) != 0) info(g) = eigh_info_nonfinite_input;
        });
    return true;
  }
}

// P(g) = Q(g)^T B(g) (eigenvectors in rows) or B(g) Q(g)^T (in columns) for the matrices g with
// ok[g] != 0 (host values), every matrix n x n, row-major and contiguous in its batch. Row-major
// storage of M is column-major M^T, so the products are P^T = B^T Q (a column-major GEMM 'N', 'T'
// of the storages of B and Q) or P^T = Q B^T ('T', 'N' of Q and B). With host memory one BLAS
// gemm per matrix, the matrices at once on the host threads (one on the calling thread, left to
// a threaded BLAS); otherwise one batched GEMM over the matrices (gemm_batched: cuBLAS on a CUDA
// build), its operand table in the workspace.
template <class ExecSpace, class Mem, class BatchView>
void root_products(const ExecSpace& space, RootWorkspace<Mem>& ws, const BatchView& Q, const BatchView& B,
                   const BatchView& P, const std::vector<int>& ok, bool vectors_in_rows, BatchedGemmBackend backend) {
  using T       = typename BatchView::non_const_value_type;
  const int n   = static_cast<int>(P.extent(1));
  const auto nn = static_cast<std::int64_t>(n) * n;
  const char ta = vectors_in_rows ? 'N' : 'T', tb = vectors_in_rows ? 'T' : 'N';
  const T* const qs = Q.data();
  const T* const bs = B.data();
  T* const ps       = P.data();
  std::vector<std::int64_t> g;
  for (std::size_t i = 0; i < ok.size(); ++i)
    if (ok[i] != 0) g.push_back(static_cast<std::int64_t>(i));
  if (g.empty() || n == 0) return;
  const auto first  = [&](std::int64_t i) { return vectors_in_rows ? bs + i * nn : qs + i * nn; };
  const auto second = [&](std::int64_t i) { return vectors_in_rows ? qs + i * nn : bs + i * nn; };
  if constexpr (Kokkos::SpaceAccessibility<Kokkos::HostSpace, Mem>::accessible) {
    if (backend == BatchedGemmBackend::automatic) {
      // The caller fenced space after the kernels that wrote B (it read ok).
      koptim::Impl::host_batch(
          koptim::Impl::host_instance(space), "koptim::linalg::root_products", g.size(), [=](const std::size_t k) {
            const std::int64_t i = g[k];
            Impl::blas_gemm(ta, tb, n, n, n, T(1), first(i), n, second(i), n, T(0), ps + i * nn, n);
          });
      return;
    }
  }
  const auto k     = static_cast<std::int64_t>(g.size());
  const auto table = ws.template host_vector<std::uintptr_t>("koptim::linalg::root_product_operands/host", 3 * k);
  for (std::int64_t j = 0; j < k; ++j) {
    table(j)         = reinterpret_cast<std::uintptr_t>(first(g[j]));
    table(k + j)     = reinterpret_cast<std::uintptr_t>(second(g[j]));
    table(2 * k + j) = reinterpret_cast<std::uintptr_t>(ps + g[j] * nn);
  }
  auto d = ws.template vector<std::uintptr_t>("koptim::linalg::root_product_operands", table.size());
  Kokkos::deep_copy(space, d, table);
  gemm_batched(space, GemmShape{ta, tb, n, n, n, n, n, n}, T(1), Impl::GemmOperands<T>{d.data(), k, 0, k}, T(0),
               backend);
}

// The general eigen path for the matrices `which` of L, in precision Tw; successful roots go
// to X.
template <class Tw, class ExecSpace, class LView, class XView, class ExpView>
EigenOutcome eigen_roots(const ExecSpace& space, RootWorkspace<typename LView::memory_space>& ws, const LView& L,
                         const XView& X, const ExpView& a, const std::vector<int>& which, const RootScalars& rs,
                         bool use_lapack, const JacobiOptions& jopt,
                         BatchedGemmBackend products = BatchedGemmBackend::automatic) {
  using Mem    = typename LView::memory_space;
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = typename Policy::member_type;
  const int m  = static_cast<int>(which.size());
  const int n  = static_cast<int>(L.extent(1));
  EigenOutcome out;
  using WorkBatch = typename RootWorkspace<Mem>::template Batch<Tw>;
  auto idx        = to_device(space, ws, which, "koptim::linalg::eigen_idx");

  const WorkBatch W = ws.template batch<Tw>("koptim::linalg::eigen_work", m, n, n);
  const auto E      = ws.template matrix<Tw>("koptim::linalg::eigenvalues", m, n);
  const Tw eps      = static_cast<Tw>(rs.eps);
  Kokkos::parallel_for(
      "koptim::linalg::shifted_factors", Policy(space, m, Kokkos::AUTO, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Member& team) {
        const int g = team.league_rank(), b = idx(g);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n), [&](const int i) {
          const auto l = Kokkos::subview(L, b, i, Kokkos::ALL());
          const auto w = Kokkos::subview(W, g, i, Kokkos::ALL());
          Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, n),
                               [&](const int j) { w(j) = static_cast<Tw>(l(j)) + (i == j ? eps : Tw(0)); });
        });
      });

  WorkBatch Q;
  const auto info = ws.template vector<int>("koptim::linalg::eigen_info", m, true, space);
  if (use_lapack && cusolver_eigh_batch(space, ws, W, E, info, true)) {
    Q = W;
    out.sweeps.assign(m, 0);
  } else if (use_lapack) {
    Impl::check_lapack_order(static_cast<std::size_t>(n), "koptim::linalg::eigen_roots");
    // Host-accessible memory is used in place; device memory goes through the workspace's host
    // buffers.
    const auto Wh = ws.host_mirror("koptim::linalg::eigen_matrices/host", W);
    const auto Eh = ws.host_mirror("koptim::linalg::eigen_values/host", E);
    const auto Ih = ws.host_mirror("koptim::linalg::eigen_info/host", info);
    Kokkos::deep_copy(space, Wh, W);
    koptim::Impl::fence(
        space, "koptim::linalg::eigen_roots: the matrices to the host for LAPACK");  // LAPACK reads Wh on the host
    // Each matrix goes to LAPACK as the column-major matrix its memory also holds (the same
    // matrix, being symmetric), so that the eigenvectors come back as columns of that storage,
    // i.e. as rows of W, and need no transposition (a strided pass over n^2 entries). The
    // factors were classified finite, so only a shifted diagonal entry can have overflowed:
    // eigh_lapack's check of all n^2 entries is not needed.
    // The matrices are solved concurrently on the host threads (host_batch).
    const auto solve = [=](const int g) {
      bool finite = true;
      for (int i = 0; i < n; ++i) finite = finite && koptim::Impl::is_finite(Wh(g, i, i));
      if (!finite)
        Ih(g) = eigh_info_nonfinite_input;
      else
        Ih(g) = n == 0 ? 0 : lapack_syevd(n, &Wh(g, 0, 0), n, &Eh(g, 0));
    };
    koptim::Impl::host_batch(koptim::Impl::host_instance(space), "koptim::linalg::eigen_roots", m, solve);
    Kokkos::deep_copy(space, W, Wh);
    Kokkos::deep_copy(space, E, Eh);
    Kokkos::deep_copy(space, info, Ih);
    Q = W;
    out.sweeps.assign(m, 0);
  } else {
    Q             = ws.template batch<Tw>("koptim::linalg::eigenvectors", m, n, n);
    const auto sw = ws.template vector<int>("koptim::linalg::jacobi_sweeps", m, true, space);
    batched_eigh_jacobi(space, W, E, Q, info, sw, jopt);
    out.sweeps = to_host_vector(space, sw);
  }
  out.info = to_host_vector(space, info);

  // LAPACK leaves eigenvector k in row k of Q, Jacobi in column k.
  const bool vectors_in_rows = use_lapack;

  // Weights lambda^-a, then B = Q diag(weights) and X = B Q^T (vectors in columns), or
  // B = diag(weights) Q and X = Q^T B (vectors in rows).
  const auto ok = ws.template vector<int>("koptim::linalg::eigen_ok", m, true, space);
  const auto D  = ws.template matrix<Tw>("koptim::linalg::weights", m, n);
  const Tw rtol = static_cast<Tw>(rs.rtol), atol = static_cast<Tw>(rs.atol);
  const bool pinv = rs.pinv;
  Kokkos::parallel_for(
      "koptim::linalg::root_weights", Policy(space, m, Kokkos::AUTO), KOKKOS_LAMBDA(const Member& team) {
        const int g = team.league_rank();
        if (info(g) != 0) return;
        const Tw lo = n > 0 ? E(g, 0) : Tw(0), hi = n > 0 ? E(g, n - 1) : Tw(0);
        const Tw ag = static_cast<Tw>(a(idx(g)));
        int bad     = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, n),
            [&](const int k, int& cnt) {
              bool good = true;
              D(g, k)   = inverse_power(E(g, k), lo, hi, eps, pinv, rtol, atol, ag, good);
              if (!good) ++cnt;
            },
            bad);
        Kokkos::single(Kokkos::PerTeam(team), [&]() { ok(g) = bad == 0 ? 1 : 0; });
      });
  const WorkBatch B = ws.template batch<Tw>("koptim::linalg::scaled_vectors", m, n, n);
  Kokkos::parallel_for(
      "koptim::linalg::scale_vectors", Policy(space, m, Kokkos::AUTO, Kokkos::AUTO), KOKKOS_LAMBDA(const Member& team) {
        const int g = team.league_rank();
        if (ok(g) == 0) return;
        const auto d = Kokkos::subview(D, g, Kokkos::ALL());
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n), [&](const int i) {
          const auto q = Kokkos::subview(Q, g, i, Kokkos::ALL());
          const auto s = Kokkos::subview(B, g, i, Kokkos::ALL());
          if (vectors_in_rows) {
            const Tw di = d(i);
            Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, n), [&](const int k) { s(k) = q(k) * di; });
          } else {
            Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, n), [&](const int k) { s(k) = q(k) * d(k); });
          }
        });
      });
  auto okh = to_host_vector(space, ok);
  // Jacobi leaves W free (Q is separate), so it takes the products.
  const WorkBatch P = use_lapack ? ws.template batch<Tw>("koptim::linalg::root_products", m, n, n) : W;
  root_products(space, ws, Q, B, P, okh, vectors_in_rows, products);
  write_finite_roots(space, X, P, idx, ok);
  out.ok = to_host_vector(space, ok);
  return out;
}

// The same with buffers of its own.
template <class Tw, class ExecSpace, class LView, class XView, class ExpView>
EigenOutcome eigen_roots(const ExecSpace& space, const LView& L, const XView& X, const ExpView& a,
                         const std::vector<int>& which, const RootScalars& rs, bool use_lapack,
                         const JacobiOptions& jopt, BatchedGemmBackend products = BatchedGemmBackend::automatic) {
  RootWorkspace<typename LView::memory_space> ws;
  return eigen_roots<Tw>(space, ws, L, X, a, which, rs, use_lapack, jopt, products);
}

// C = A B for n x n column-major matrices (leading dimension n), in steps: the products of a step
// are independent of each other, steps run in order; each product is three addresses (A, B, C).
// With host memory one BLAS gemm per product, a step's products at once on the host threads;
// otherwise one batched GEMM per step (gemm_batched), the operand table of all steps copied to
// the device in one copy (into the workspace).
template <class T, class ExecSpace, class Mem>
void square_product_steps(const ExecSpace& space, RootWorkspace<Mem>& ws,
                          const std::vector<std::vector<std::array<std::uintptr_t, 3>>>& steps, int n,
                          BatchedGemmBackend backend) {
  std::int64_t total = 0;
  for (const auto& s : steps) total += static_cast<std::int64_t>(s.size());
  if (total == 0 || n == 0) return;
  if constexpr (Kokkos::SpaceAccessibility<Kokkos::HostSpace, Mem>::accessible) {
    if (backend == BatchedGemmBackend::automatic) {
      // A step's products read the previous step's: each step is a batch, fenced.
      for (const auto& s : steps) {
        const std::array<std::uintptr_t, 3>* const q = s.data();
        koptim::Impl::host_batch(
            koptim::Impl::host_instance(space), "koptim::linalg::newton_products", s.size(), [=](const std::size_t i) {
              Impl::blas_gemm('N', 'N', n, n, n, T(1), reinterpret_cast<const T*>(q[i][0]), n,
                              reinterpret_cast<const T*>(q[i][1]), n, T(0), reinterpret_cast<T*>(q[i][2]), n);
            });
      }
      return;
    }
  }
  const auto table = ws.template host_vector<std::uintptr_t>("koptim::linalg::newton_operands/host", 3 * total);
  std::int64_t at  = 0;
  for (const auto& s : steps)
    for (const auto& q : s) {
      for (int c = 0; c < 3; ++c) table(c * total + at) = q[c];
      ++at;
    }
  auto d = ws.template vector<std::uintptr_t>("koptim::linalg::newton_operands", table.size());
  Kokkos::deep_copy(space, d, table);
  std::int64_t first = 0;
  for (const auto& s : steps) {
    const auto count = static_cast<std::int64_t>(s.size());
    gemm_batched(space, GemmShape{'N', 'N', n, n, n, n, n, n}, T(1),
                 Impl::GemmOperands<T>{d.data(), total, first, count}, T(0), backend);
    first += count;
  }
}

// Bytes of work buffers the coupled Newton iteration may use at once (seven n x n matrices per
// factor): the factors of a batch go through it in chunks of at most this much, at least one.
constexpr std::size_t newton_chunk_bytes = std::size_t(256) << 20;

// The scalars of one factor's coupled Newton iteration (newton_roots).
template <class T>
struct NewtonScalars {
  T eps, zr, zt, inv_p, one_p1;
  double diverged, tolerance;
};

// Coupled Newton iteration for A^(-1/p), A = L(b) + eps I (Higham's coupled form as in the
// reference Shampoo): z = (p+1) / (2 ||A||_F), X = z^(1/p) I, M = z A; repeat
// M_p = ((p+1) I - M) / p, X <- X M_p, M <- M_p^p M while max|M - I| > tolerance; for the factors
// which[k] of L, each with its own p[k], results[k] their outcome and X(which[k]) their root on
// success. The factors go in chunks (chunk_bytes of buffers): per iteration, GEMMs (one per
// product per factor: Kokkos Kernels) form the running factors' products, then one kernel over
// the chunk takes every new max|M - I|, decides which factors keep running and builds their next
// M_p, and one copy brings the residuals to the host: the host waits once per iteration of a
// chunk, not once per factor and iteration. X and M live in two buffers each, read and written
// alternately (a factor's last X is in the one of the iteration it stopped at).
template <class ExecSpace, class LView, class XView>
std::vector<RootInfo> newton_roots(const ExecSpace& space, RootWorkspace<typename LView::memory_space>& ws,
                                   const LView& L, const XView& X, const std::vector<int>& which,
                                   const std::vector<int>& p, const RootScalars& rs, int max_iterations,
                                   double tolerance, std::size_t chunk_bytes = newton_chunk_bytes,
                                   BatchedGemmBackend products = BatchedGemmBackend::automatic) {
  using T      = typename XView::non_const_value_type;
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = typename Policy::member_type;
  const int n  = static_cast<int>(L.extent(1));
  std::vector<RootInfo> results(which.size());
  if (which.empty()) return results;
  const std::size_t per_factor = std::max<std::size_t>(7 * sizeof(T) * static_cast<std::size_t>(n) * n, 1);
  const int chunk   = static_cast<int>(std::max<std::size_t>(1, std::min(which.size(), chunk_bytes / per_factor)));
  const T eps       = static_cast<T>(rs.eps);
  using HostDoubles = Kokkos::View<double*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  using HostInts    = Kokkos::View<int*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  using HostInput   = Kokkos::View<const int*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  for (std::size_t first = 0; first < which.size(); first += chunk) {
    const int c = static_cast<int>(std::min<std::size_t>(chunk, which.size() - first));
    // Matrix g of a buffer is columns [g n, (g + 1) n) of an n x (c n) column-major matrix.
    auto buffer = [&](const char* label) {
      return ws.template matrix<T, Kokkos::LayoutLeft>(label, n, static_cast<std::size_t>(n) * c);
    };
    using Buffer       = decltype(buffer(""));
    const Buffer Ys[2] = {buffer("koptim::linalg::newton_X"), buffer("koptim::linalg::newton_X2")};
    const Buffer Ms[2] = {buffer("koptim::linalg::newton_M"), buffer("koptim::linalg::newton_M2")};
    // M_p, its powers and their product.
    const Buffer B[3] = {buffer("koptim::linalg::newton_Mp"), buffer("koptim::linalg::newton_power"),
                         buffer("koptim::linalg::newton_square")};
    const Buffer B1   = B[0];
    const std::vector<int> mine(which.begin() + first, which.begin() + first + c);
    const auto idx         = to_device(space, ws, mine, "koptim::linalg::newton_idx");
    const auto fro2        = ws.template vector<double>("koptim::linalg::newton_norm", c);
    const auto err         = ws.template vector<double>("koptim::linalg::newton_error", c);
    const auto active      = ws.template vector<int>("koptim::linalg::newton_running", c);
    const auto from_second = ws.template vector<int>("koptim::linalg::newton_from_second", c);
    // ||A||_F^2 of every factor of the chunk, in double.
    Kokkos::parallel_for(
        "koptim::linalg::newton_norm", Policy(space, c, Kokkos::AUTO), KOKKOS_LAMBDA(const Member& team) {
          const int g = team.league_rank(), b = idx(g);
          double sum = 0.0;
          Kokkos::parallel_reduce(
              Kokkos::TeamThreadRange(team, n * n),
              [&](const int t, double& acc) {
                const int i = t / n, j = t % n;
                const double v = static_cast<double>(static_cast<T>(L(b, i, j)) + (i == j ? eps : T(0)));
                acc += v * v;
              },
              sum);
          Kokkos::single(Kokkos::PerTeam(team), [&]() { fro2(g) = sum; });
        });
    std::vector<double> fro2_h(c), err_h(c);
    Kokkos::deep_copy(space, HostDoubles(fro2_h.data(), c), fro2);
    koptim::Impl::fence(space, "koptim::linalg::newton_roots: the norms to the host");
    std::vector<NewtonScalars<T>> sc(c);
    std::vector<int> running(c, 0);
    for (int g = 0; g < c; ++g) {
      const double fro = std::sqrt(fro2_h[g]);
      const int pg     = p[first + g];
      if (!(fro > 0.0) || !koptim::Impl::is_finite(fro)) {
        results[first + g].status = RootStatus::nonfinite_output;
        continue;
      }
      const double z = (pg + 1.0) / (2.0 * fro);
      // M starts with entries of at most (p + 1) / 2 and, in exact arithmetic, its eigenvalues
      // then stay in (0, 1]: max|M - I| stays below 1. An eigenvalue pushed below 0 by rounding (a
      // rank-deficient or ill-conditioned A) grows in magnitude faster than exponentially instead.
      // Stopping once the residual passes 2 (p + 1) ends a diverging run before its products
      // overflow (Inf - Inf in a GEMM would raise FE_INVALID, and a NaN has no use to anyone).
      sc[g]      = NewtonScalars<T>{eps,
                                    static_cast<T>(std::pow(z, 1.0 / pg)),
                                    static_cast<T>(z),
                                    static_cast<T>(1.0 / pg),
                                    static_cast<T>((pg + 1.0) / pg),
                                    2.0 * (pg + 1.0),
                                    tolerance};
      running[g] = 1;
    }
    const std::vector<int> started(running);
    const auto scalars = ws.template vector<NewtonScalars<T>>("koptim::linalg::newton_scalars", c);
    Kokkos::deep_copy(space, scalars,
                      Kokkos::View<const NewtonScalars<T>*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                          sc.data(), c));
    Kokkos::deep_copy(space, active, HostInput(running.data(), c));
    // X = z^(1/p) I, M = z A (the first buffers).
    {
      const Buffer Y = Ys[0], M = Ms[0];
      Kokkos::parallel_for(
          "koptim::linalg::newton_start", Policy(space, c, Kokkos::AUTO), KOKKOS_LAMBDA(const Member& team) {
            const int g = team.league_rank(), b = idx(g);
            if (active(g) == 0) return;
            const NewtonScalars<T> s = scalars(g);
            Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n * n), [&](const int t) {
              const int i = t % n, j = t / n;
              Y(i, g * n + j) = i == j ? s.zr : T(0);
              M(i, g * n + j) = s.zt * (static_cast<T>(L(b, i, j)) + (i == j ? s.eps : T(0)));
            });
          });
    }
    // For the running factors, with M in buffer `cur`: err(g) = max|M - I| (-1 when M holds a NaN
    // or an infinity: the max would compare a NaN, which traps under FE_INVALID), whether the
    // factor keeps running (the host counts the iterations), and then its next
    // M_p = ((p + 1) I - M) / p into B1. The residuals come to the host; the factors that stop
    // keep their last X in buffer `cur`.
    std::vector<int> parity(c, 0);
    std::vector<double> last_err(c, 0.0);
    const auto residuals = [&](int cur) {
      const Buffer M = Ms[cur];
      Kokkos::parallel_for(
          "koptim::linalg::newton_residual", Policy(space, c, Kokkos::AUTO), KOKKOS_LAMBDA(const Member& team) {
            const int g = team.league_rank();
            if (active(g) == 0) return;
            int bad = 0;
            T mx    = 0;
            Kokkos::parallel_reduce(
                Kokkos::TeamThreadRange(team, n * n),
                [&](const int t, int& cnt) {
                  if (!koptim::Impl::is_finite(M(t % n, g * n + t / n))) ++cnt;
                },
                bad);
            if (bad == 0) {
              Kokkos::parallel_reduce(
                  Kokkos::TeamThreadRange(team, n * n),
                  [&](const int t, T& m) {
                    const int i = t % n, j = t / n;
                    const T v = koptim::Impl::abs(M(i, g * n + j) - (i == j ? T(1) : T(0)));
                    if (m < v) m = v;
                  },
                  Kokkos::Max<T>(mx));
            }
            const NewtonScalars<T> s = scalars(g);
            const double e           = static_cast<double>(mx);
            const bool next          = bad == 0 && e > s.tolerance && e <= s.diverged;
            team.team_barrier();
            Kokkos::single(Kokkos::PerTeam(team), [&]() {
              err(g)    = bad > 0 ? -1.0 : e;
              active(g) = next ? 1 : 0;
            });
            if (!next) return;
            Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n * n), [&](const int t) {
              const int i = t % n, j = g * n + t / n;
              B1(i, j) = (t % n == t / n ? s.one_p1 : T(0)) - s.inv_p * M(i, j);
            });
          });
      Kokkos::deep_copy(space, HostDoubles(err_h.data(), c), err);
      koptim::Impl::fence(space, "koptim::linalg::newton_roots: the errors to the host");
      for (int g = 0; g < c; ++g) {
        if (!running[g]) continue;
        const double e = err_h[g] < 0.0 ? std::numeric_limits<double>::infinity() : err_h[g];
        last_err[g]    = e;
        parity[g]      = cur;
        // The same decision as the kernel's, on the same values.
        running[g] = koptim::Impl::is_finite(e) && e > sc[g].tolerance && e <= sc[g].diverged;
      }
    };
    std::vector<int> iterations(c, 0);
    int cur = 0;
    residuals(cur);
    for (int it = 1; it <= max_iterations; ++it) {
      if (std::none_of(running.begin(), running.end(), [](int r) { return r != 0; })) break;
      // Per running factor: Y M_p into the other Y buffer; M_p^p by repeated squaring in the
      // three buffers B (the product Pw, while M_p is squared, each result into the buffer neither
      // holds; Pw starts as M_p itself); Pw M into the other M buffer. As steps of independent
      // products: every running factor's Y M_p; then the k-th product of the repeated squaring
      // of each factor that has one, k = 1, 2, ... (factors of different p have different
      // sequences); then every Pw M.
      const auto at = [&](const Buffer& V, int g) {
        return reinterpret_cast<std::uintptr_t>(V.data() + static_cast<std::size_t>(g) * n * n);
      };
      std::vector<std::vector<std::array<std::uintptr_t, 3>>> steps(1);
      std::vector<std::array<std::uintptr_t, 3>> last;
      for (int g = 0; g < c; ++g) {
        if (!running[g]) continue;
        ++iterations[g];
        steps[0].push_back({at(Ys[cur], g), at(B1, g), at(Ys[1 - cur], g)});
        const auto other = [](int a, int b) { return a != 0 && b != 0 ? 0 : (a != 1 && b != 1 ? 1 : 2); };
        std::size_t k    = 1;
        const auto add   = [&](const std::array<std::uintptr_t, 3>& product) {
          if (steps.size() <= k) steps.resize(k + 1);
          steps[k++].push_back(product);
        };
        int mp = 0, pw = -1;
        for (int e = p[first + g]; e > 0; e >>= 1) {
          if (e & 1) {
            if (pw < 0) {
              pw = mp;
            } else {
              const int t = other(mp, pw);
              add({at(B[pw], g), at(B[mp], g), at(B[t], g)});
              pw = t;
            }
          }
          if (e > 1) {
            const int t = other(mp, pw);
            add({at(B[mp], g), at(B[mp], g), at(B[t], g)});
            mp = t;
          }
        }
        last.push_back({at(B[pw], g), at(Ms[cur], g), at(Ms[1 - cur], g)});
      }
      steps.push_back(last);
      square_product_steps<T>(space, ws, steps, n, products);
      cur = 1 - cur;
      residuals(cur);
    }
    // The outcome per factor; the roots that are finite go to X.
    std::vector<int> ok(c, 0);
    for (int g = 0; g < c; ++g) {
      RootInfo& r = results[first + g];
      if (!started[g]) continue;  // a zero or non-finite norm: nonfinite_output above
      const double e = last_err[g];
      r.iterations   = iterations[g];
      r.newton_error = e;
      if (!koptim::Impl::is_finite(e) || e > sc[g].diverged) {
        r.newton_converged = false;
        r.status           = RootStatus::nonfinite_output;
        continue;
      }
      r.newton_converged = e <= tolerance;
      ok[g]              = 1;
    }
    // The finite roots to X (write_finite_roots), from the buffer each factor stopped in: the
    // factors to write from the first buffer flagged in `active`, from the second in `from_second`.
    std::vector<int> from[2] = {std::vector<int>(c, 0), std::vector<int>(c, 0)};
    for (int g = 0; g < c; ++g) from[parity[g]][g] = ok[g];
    const decltype(active) flags[2] = {active, from_second};
    for (int k = 0; k < 2; ++k) {
      // Matrix g, entry (i, j) of buffer k is at i + (g n + j) n: a batch with those strides.
      const Kokkos::View<const T***, Kokkos::LayoutStride, typename LView::memory_space,
                         Kokkos::MemoryTraits<Kokkos::Unmanaged>>
          Yk(Ys[k].data(), Kokkos::LayoutStride(c, static_cast<std::size_t>(n) * n, n, 1, n, n));
      Kokkos::deep_copy(space, flags[k], HostInput(from[k].data(), c));
      write_finite_roots(space, X, Yk, idx, flags[k]);
      Kokkos::deep_copy(space, HostInts(from[k].data(), c), flags[k]);
    }
    koptim::Impl::fence(space, "koptim::linalg::newton_roots: the roots written");
    for (int g = 0; g < c; ++g)
      if (ok[g] != 0 && from[parity[g]][g] == 0)  // a finite iteration whose X is not finite
        results[first + g].status = RootStatus::nonfinite_output;
  }
  return results;
}

// p when the exponent a is 1/p for a positive integer p (below 10^6), to rounding: 1 / a within
// two units in the last place of p (the double nearest 1/p gives p back within one), else 0. An
// exponent that is only close to 1/p (0.3333333333) is not taken for it.
inline int newton_root_index(double a) {
  const double p = 1.0 / a;
  const double r = std::floor(p + 0.5);
  return (r >= 1.0 && r < 1e6 && std::fabs(p - r) <= 2.0 * std::numeric_limits<double>::epsilon() * r)
             ? static_cast<int>(r)
             : 0;
}

}  // namespace Impl

// Inverse roots of a batch of symmetric PSD factors: X(b) = (L(b) + eps I)^(-exponents[b]).
// L and X are rank-3 Views (batch x n x n) of the same scalar type (float or double) in one
// memory space; L is not modified, X(b) is written only when result b is success.
// workspace: buffers kept for the next call with the same batch (null: allocated for this call).
// Every kernel and copy runs on the instance space, which the call fences before it returns (the
// results, one per matrix, are the host's). Without an instance: the default one.
template <class ExecSpace, class LView, class XView>
std::vector<RootInfo> batched_inverse_root(const ExecSpace& space, const LView& L, const XView& X,
                                           const std::vector<double>& exponents, const InverseRootOptions& options = {},
                                           RootWorkspace<typename LView::memory_space>* workspace = nullptr) {
  static_assert(Kokkos::is_execution_space<ExecSpace>::value,
                "batched_inverse_root: the first argument must be an execution space instance");
  using T   = typename XView::non_const_value_type;
  using Mem = typename LView::memory_space;
  static_assert(Kokkos::is_view<LView>::value && LView::rank == 3,
                "batched_inverse_root: L must be a rank-3 View (batch x n x n)");
  static_assert(Kokkos::is_view<XView>::value && XView::rank == 3,
                "batched_inverse_root: X must be a rank-3 View (batch x n x n)");
  static_assert(std::is_same<typename LView::non_const_value_type, T>::value,
                "batched_inverse_root: L and X must have the same scalar type");
  static_assert(Impl::is_lapack_scalar<T>::value, "batched_inverse_root: the scalar type must be float or double");
  static_assert(std::is_same<Mem, typename XView::memory_space>::value,
                "batched_inverse_root: L and X must be in the same memory space");
  const std::string who = "koptim::linalg::batched_inverse_root";
  const std::size_t nb  = L.extent(0);
  const std::size_t n   = L.extent(1);
  if (L.extent(2) != n || X.extent(0) != nb || X.extent(1) != n || X.extent(2) != n) {
    throw koptim::ShapeError(who + ": extents do not match: L " + std::to_string(nb) + " x " + std::to_string(n) +
                             " x " + std::to_string(L.extent(2)) + ", X " + std::to_string(X.extent(0)) + " x " +
                             std::to_string(X.extent(1)) + " x " + std::to_string(X.extent(2)) +
                             " (both must be batch x n x n)");
  }
  // The kernels index a matrix's n^2 entries with int (as LAPACK and the batched GEMM do).
  if (n > 46340) {
    throw koptim::ShapeError(who + ": matrices of " + std::to_string(n) + " x " + std::to_string(n) +
                             ": n^2 is beyond the 2^31 - 1 entries a matrix may have here (n <= 46340)");
  }
  if (exponents.size() != nb) {
    throw koptim::ShapeError(who + ": " + std::to_string(exponents.size()) + " exponents for a batch of " +
                             std::to_string(nb) + " matrices");
  }
  for (std::size_t b = 0; b < nb; ++b) {
    if (!koptim::Impl::is_finite(exponents[b]) || exponents[b] < 0.0) {
      throw koptim::ConfigError(who + ": exponent " + Impl::num(exponents[b]) + " of matrix " + std::to_string(b) +
                                " is invalid; it must be finite and >= 0");
    }
  }
  if (!koptim::Impl::is_finite(options.epsilon) || options.epsilon < 0.0) {
    throw koptim::ConfigError(who + ": epsilon = " + Impl::num(options.epsilon) +
                              " is invalid; it must be finite and >= 0");
  }
  if (options.use_pseudo_inverse) {
    if (options.epsilon != 0.0) {
      throw koptim::ConfigError(
          who + ": use_pseudo_inverse requires epsilon = 0, got epsilon = " + Impl::num(options.epsilon));
    }
    if (options.method != RootMethod::eigen) {
      throw koptim::ConfigError(who + ": use_pseudo_inverse requires the eigen method");
    }
    if (!koptim::Impl::is_finite(options.rank_rtol) || options.rank_rtol < 0.0 ||
        !koptim::Impl::is_finite(options.rank_atol) || options.rank_atol < 0.0) {
      throw koptim::ConfigError(who + ": rank_rtol = " + Impl::num(options.rank_rtol) +
                                " and rank_atol = " + Impl::num(options.rank_atol) + " must be finite and >= 0");
    }
  }
  if (options.method == RootMethod::coupled_newton) {
    if (options.newton_max_iterations < 0) {
      throw koptim::ConfigError(who + ": newton_max_iterations = " + std::to_string(options.newton_max_iterations) +
                                " is invalid; it must be >= 0");
    }
    if (!koptim::Impl::is_finite(options.newton_tolerance) || options.newton_tolerance < 0.0) {
      throw koptim::ConfigError(who + ": newton_tolerance = " + Impl::num(options.newton_tolerance) +
                                " is invalid; it must be finite and >= 0");
    }
    for (std::size_t b = 0; b < nb; ++b) {
      if (exponents[b] != 0.0 && Impl::newton_root_index(exponents[b]) == 0) {
        throw koptim::ConfigError(who + ": the coupled Newton method needs exponents 1/p with p a positive " +
                                  "integer; matrix " + std::to_string(b) + " has exponent " + Impl::num(exponents[b]));
      }
    }
  }
  constexpr bool host_memory = Kokkos::SpaceAccessibility<Kokkos::HostSpace, Mem>::accessible;
  const bool use_lapack =
      options.solver == EighSolver::lapack || (options.solver == EighSolver::automatic && host_memory);

  std::vector<RootInfo> results(nb);
  if (nb == 0) return results;
  koptim::Impl::ScopedRegion region(who);

  RootWorkspace<Mem> local;
  RootWorkspace<Mem>& ws = workspace != nullptr ? *workspace : local;
  const auto a           = ws.template vector<double>("koptim::linalg::exponents", nb);
  Kokkos::deep_copy(
      space, a,
      Kokkos::View<const double*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(exponents.data(), nb));
  const auto cls = Impl::to_host_vector(space, Impl::classify(space, ws, L, a, options.skip_diagonal));
  std::vector<int> identity, diagonal, general;
  for (std::size_t b = 0; b < nb; ++b) {
    switch (cls[b]) {
      case Impl::class_identity:
        results[b].identity = true;
        identity.push_back(static_cast<int>(b));
        break;
      case Impl::class_nonfinite:
        results[b].status = RootStatus::nonfinite_input;
        break;
      case Impl::class_diagonal:
        results[b].diagonal_shortcut = true;
        diagonal.push_back(static_cast<int>(b));
        break;
      default:
        general.push_back(static_cast<int>(b));
    }
  }
  const Impl::RootScalars rs{options.epsilon, options.rank_rtol, options.rank_atol, options.use_pseudo_inverse};
  if (!identity.empty()) Impl::identity_roots(space, ws, X, identity);
  if (!diagonal.empty()) {
    const auto ok = Impl::diagonal_roots(space, ws, L, X, a, diagonal, rs);
    for (std::size_t g = 0; g < diagonal.size(); ++g) {
      if (ok[g] == 0) results[diagonal[g]].status = RootStatus::nonfinite_output;
    }
  }
  if (!general.empty() && options.method == RootMethod::coupled_newton) {
    std::vector<int> p, diverged;
    for (int b : general) p.push_back(Impl::newton_root_index(exponents[b]));
    const auto newton = Impl::newton_roots(space, ws, L, X, general, p, rs, options.newton_max_iterations,
                                           options.newton_tolerance, Impl::newton_chunk_bytes, options.products);
    for (std::size_t k = 0; k < general.size(); ++k) {
      results[general[k]] = newton[k];
      // The input is finite (classify() set non-finite factors apart): a non-finite iterate means
      // the iteration diverged, which a rank-deficient or ill-conditioned factor does once its
      // smallest eigenvalue plus epsilon is lost in rounding (epsilon = 1e-12 next to entries of
      // order 1 in float). The eigendecomposition with its shift rule handles such factors.
      if (newton[k].status == RootStatus::nonfinite_output) diverged.push_back(general[k]);
    }
    general = diverged;
    for (int b : general) results[b].newton_fell_back = true;
  }
  if (!general.empty()) {
    const auto out =
        Impl::eigen_roots<T>(space, ws, L, X, a, general, rs, use_lapack, options.jacobi, options.products);
    std::vector<int> retry;
    for (std::size_t g = 0; g < general.size(); ++g) {
      RootInfo& r   = results[general[g]];
      r.status      = RootStatus::success;  // a Newton fallback arrives with Newton's status
      r.solver_info = out.info[g];
      r.iterations  = out.sweeps[g];
      if (out.info[g] != 0) {
        r.status = RootStatus::solver_failure;
        if (options.retry_double_precision && std::is_same<T, float>::value && out.info[g] > 0) {
          retry.push_back(general[g]);
        }
      } else if (out.ok[g] == 0) {
        r.status = RootStatus::nonfinite_output;
      }
    }
    if (!retry.empty()) {
      const auto out2 =
          Impl::eigen_roots<double>(space, ws, L, X, a, retry, rs, use_lapack, options.jacobi, options.products);
      for (std::size_t g = 0; g < retry.size(); ++g) {
        RootInfo& r         = results[retry[g]];
        r.retried_in_double = true;
        r.solver_info       = out2.info[g];
        r.iterations        = out2.sweeps[g];
        r.status            = out2.info[g] != 0 ? RootStatus::solver_failure
                                                : (out2.ok[g] != 0 ? RootStatus::success : RootStatus::nonfinite_output);
      }
    }
  }
  koptim::Impl::fence(space, "koptim::linalg::batched_inverse_root: the roots written");
  return results;
}

template <class LView, class XView>
std::vector<RootInfo> batched_inverse_root(const LView& L, const XView& X, const std::vector<double>& exponents,
                                           const InverseRootOptions& options                      = {},
                                           RootWorkspace<typename LView::memory_space>* workspace = nullptr) {
  return batched_inverse_root(typename LView::execution_space(), L, X, exponents, options, workspace);
}

template <class LView, class XView>
std::vector<RootInfo> batched_inverse_root(const LView& L, const XView& X, double exponent,
                                           const InverseRootOptions& options                      = {},
                                           RootWorkspace<typename LView::memory_space>* workspace = nullptr) {
  return batched_inverse_root(L, X, std::vector<double>(L.extent(0), exponent), options, workspace);
}

// One factor: X = (L + eps I)^(-exponent), L and X rank-2 (n x n, any layout, same memory
// space); X is written only on success.
template <class LView, class XView>
RootInfo inverse_root(const LView& L, const XView& X, double exponent, const InverseRootOptions& options = {}) {
  using T         = typename XView::non_const_value_type;
  using Mem       = typename LView::memory_space;
  using ExecSpace = typename LView::execution_space;
  static_assert(Kokkos::is_view<LView>::value && LView::rank == 2, "inverse_root: L must be a rank-2 View (n x n)");
  static_assert(Kokkos::is_view<XView>::value && XView::rank == 2, "inverse_root: X must be a rank-2 View (n x n)");
  static_assert(std::is_same<Mem, typename XView::memory_space>::value,
                "inverse_root: L and X must be in the same memory space");
  // (A double L with a float X was rounded to float before the root without a word.)
  static_assert(std::is_same<typename LView::non_const_value_type, T>::value,
                "inverse_root: L and X must have the same scalar type");
  const std::size_t n = L.extent(0);
  if (L.extent(1) != n || X.extent(0) != n || X.extent(1) != n) {
    throw koptim::ShapeError("koptim::linalg::inverse_root: L is " + std::to_string(L.extent(0)) + " x " +
                             std::to_string(L.extent(1)) + " and X is " + std::to_string(X.extent(0)) + " x " +
                             std::to_string(X.extent(1)) + "; both must be the same square size");
  }
  Impl::Batch<T, Mem> L3(Kokkos::view_alloc(Kokkos::WithoutInitializing, "koptim::linalg::inverse_root_L"), 1, n, n);
  Impl::Batch<T, Mem> X3(Kokkos::view_alloc(Kokkos::WithoutInitializing, "koptim::linalg::inverse_root_X"), 1, n, n);
  using Square = Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>;
  const Square square({0, 0}, {static_cast<std::int64_t>(n), static_cast<std::int64_t>(n)});
  Kokkos::parallel_for(
      "koptim::linalg::inverse_root_in", square,
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) { L3(0, i, j) = L(i, j); });
  const auto res = batched_inverse_root(L3, X3, std::vector<double>{exponent}, options);
  if (res[0].ok()) {
    Kokkos::parallel_for(
        "koptim::linalg::inverse_root_out", square,
        KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) { X(i, j) = X3(0, i, j); });
    koptim::Impl::fence(ExecSpace(), "koptim::linalg::inverse_root: the root written");
  }
  return res[0];
}

}  // namespace linalg
}  // namespace koptim

#endif
