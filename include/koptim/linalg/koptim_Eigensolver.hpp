// Symmetric eigensolvers for koptim's preconditioners: eigenvalues in ascending order and an
// orthonormal set of eigenvectors, stored as columns (V(i,k) is entry i of eigenvector k).
//
// Two paths:
// - eigh_lapack / batched_eigh_lapack: LAPACK's divide-and-conquer ?syevd for matrices in
//   host-accessible memory, float or double, any layout. The fastest choice on a CPU and the
//   only one meant for large blocks. Nothing else in koptim calls LAPACK (the Fortran calls
//   live in src/linalg/koptim_Lapack.cpp, link with -llapack).
// - batched_eigh_jacobi: a parallel-order (round-robin) two-sided Jacobi solver written in
//   Kokkos, one team per matrix, for batches of small blocks in any memory space, device
//   memory included. Its stopping test is relative to the diagonal, which gives small
//   eigenvalues of positive definite matrices to high relative accuracy (Demmel and Veselic
//   1992), the ones an inverse root magnifies most. It reports per matrix whether it
//   converged and how many sweeps it used.
//
// Both report the same kind of code per matrix: 0 is success, a positive value is a solver
// failure (no convergence), eigh_info_nonfinite_input flags a NaN or infinity in the input
// (the solvers never run on such a matrix), any other negative value is LAPACK's report of an
// invalid argument.
#ifndef KOPTIM_LINALG_EIGENSOLVER_HPP
#define KOPTIM_LINALG_EIGENSOLVER_HPP

#include <koptim/core/koptim_Error.hpp>
#include <koptim/core/koptim_Kokkos.hpp>
#include <koptim/core/koptim_Tensor.hpp>
#include <koptim/core/impl/koptim_Instance.hpp>
#include <koptim/core/impl/koptim_Math.hpp>
#include <koptim/core/impl/koptim_Profiling.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace koptim {
namespace linalg {

// The input held a NaN or an infinity; no solver was run.
constexpr int eigh_info_nonfinite_input = -1000;
// batched_eigh_jacobi's code for a matrix that did not converge within max_sweeps.
constexpr int eigh_info_not_converged = 1;

struct JacobiOptions {
  // A sweep visits every off-diagonal pair once; well-separated spectra need 6 to 10.
  int max_sweeps = 50;
  // Pair (p,q) is rotated while |a_pq| > tolerance * sqrt(|a_pp| |a_qq|). 0 means the
  // machine epsilon of the matrix's scalar type.
  double tolerance = 0.0;
  // Threads per matrix; 0 lets Kokkos choose. Tests set it above 1 on threaded backends, whose
  // automatic choice is one thread per team, to exercise the in-team synchronisation.
  int team_size = 0;
  // Solve in level-0 team scratch when the matrix fits; off, the caller's A is the workspace.
  bool use_team_scratch = true;
  // Bytes of level-0 team scratch the solver may take (0: what the execution space allows; with
  // CUDA, a block's 48 KiB of shared memory less Kokkos' reserve, about 40 KiB; 32 KiB on the
  // host backends). The work arrays of one solve (about 34 n bytes in double, 22 n in float) go
  // to level-1 scratch (global memory) where they do not fit: with CUDA beyond n of about 1200
  // in double, 1850 in float. A smaller value here takes that path at small orders (tests).
  std::size_t team_scratch_limit = 0;
};

namespace Impl {

// cuSOLVER for m symmetric n x n matrices in device memory, contiguous (n x n each, so the
// row-major and the column-major matrix are the same), on exec's stream
// (src/linalg/koptim_CudaLibraries.cpp): ?syevjBatched where cuSOLVER allows it (n <= 32), else
// ?syevd matrix after matrix. Each matrix is overwritten by its eigenvectors, which come as
// columns of the column-major storage, i.e. as rows of the row-major matrix (LAPACK's layout
// in koptim's root path); w (m x n) receives the eigenvalues in ascending order, info (m) each
// matrix's code (0, or a positive value: not converged). cusolver_eigh_work returns the
// workspace elements the call needs, or -1 where koptim has no cuSOLVER (not a CUDA build, or
// Kokkos Kernels without its cuSOLVER TPL): then cusolver_eigh must not be called. Throws on a
// cuSOLVER error.
std::int64_t cusolver_eigh_work(const ExecutionSpace& exec, int m, int n, float* a, float* w);
std::int64_t cusolver_eigh_work(const ExecutionSpace& exec, int m, int n, double* a, double* w);
void cusolver_eigh(const ExecutionSpace& exec, int m, int n, float* a, float* w, int* info, float* work,
                   std::int64_t lwork);
void cusolver_eigh(const ExecutionSpace& exec, int m, int n, double* a, double* w, int* info, double* work,
                   std::int64_t lwork);

// Thin wrappers over LAPACK ?syevd (compiled in src/linalg/koptim_Lapack.cpp). The matrix
// is column-major with leading dimension lda; on success it holds the eigenvectors.
int lapack_syevd(int n, float* a, int lda, float* w);
int lapack_syevd(int n, double* a, int lda, double* w);

// A host work buffer kept between calls by its caller (`kept`, typically thread_local, grown to the
// largest request) up to kept_buffer_limit elements (1 MiB of float); a larger request gets
// `once`, which the caller frees: a buffer kept per thread must not pin 4n^2 entries per thread
// for large n, where the allocation costs little next to the O(n^3) work it serves.
constexpr std::size_t kept_buffer_limit = std::size_t(1) << 18;
template <class T>
T* host_buffer(std::vector<T>& kept, std::vector<T>& once, std::size_t n) {
  if (n > kept_buffer_limit) {
    once.resize(n);
    return once.data();
  }
  if (kept.size() < n) kept.resize(n);
  return kept.data();
}

template <class T>
struct is_lapack_scalar
    : std::integral_constant<bool, std::is_same<T, float>::value || std::is_same<T, double>::value> {};

// Pair k of round r of the round-robin ("circle") ordering of m = n rounded up to even
// players: player 0 stays put and the others rotate, so that m-1 rounds of m/2 disjoint pairs
// visit every pair once. A pair holding the padding player n (odd n) is idle in that round.
KOKKOS_INLINE_FUNCTION void jacobi_pair(int r, int k, int m, int& p, int& q) {
  const int a = k == 0 ? 0 : 1 + (k - 1 + r) % (m - 1);
  const int j = m - 1 - k;
  const int b = 1 + (j - 1 + r) % (m - 1);
  p           = a < b ? a : b;
  q           = a < b ? b : a;
}

// The rotation that zeroes a_pq of a symmetric 2x2 block (Golub and Van Loan, sym.schur2),
// with J = [[c, s], [-s, c]] so that J^T A J is diagonal with entries app - t apq and
// aqq + t apq (Rutishauser's update, more accurate than recomputing them). For |theta| > 1
// theta^2 is kept out of the formula so that it cannot overflow.
template <class T>
KOKKOS_INLINE_FUNCTION void jacobi_rotation(T app, T apq, T aqq, T& c, T& s, T& t) {
  const T theta = (aqq - app) / (T(2) * apq);
  const T sgn   = theta < T(0) ? T(-1) : T(1);
  const T ath   = koptim::Impl::abs(theta);
  if (ath > T(1)) {
    const T inv = T(1) / ath;
    t           = sgn / (ath * (T(1) + koptim::Impl::sqrt(T(1) + inv * inv)));
  } else {
    t = sgn / (ath + koptim::Impl::sqrt(T(1) + ath * ath));
  }
  c = T(1) / koptim::Impl::sqrt(T(1) + t * t);
  s = t * c;
}

template <class T, class ExecSpace>
using ScratchView = Kokkos::View<T*, typename ExecSpace::scratch_memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// A double as a user wrote it (1e-12, not std::to_string's 0.000000), for error messages.
inline std::string num(double x) {
  std::ostringstream os;
  os << x;
  return os.str();
}

template <class View2>
void check_square(const View2& A, const char* who, const char* name) {
  if (A.extent(0) != A.extent(1)) {
    throw koptim::ShapeError(std::string(who) + ": " + name + " must be square, got " + std::to_string(A.extent(0)) +
                             " x " + std::to_string(A.extent(1)));
  }
}

// LAPACK takes the order n (and workspaces of about 2n^2) as an int.
// The largest n whose ?syevd workspace (1 + 6n + 2n^2 entries) LAPACK's int can count.
constexpr std::size_t max_lapack_order = 32766;
inline void check_lapack_order(std::size_t n, const char* who) {
  if (n > max_lapack_order)
    throw koptim::ShapeError(std::string(who) + ": n = " + std::to_string(n) +
                             " exceeds what LAPACK's int can count (the eigensolver's workspace of 1 + 6n + 2n^2 "
                             "entries; n <= " +
                             std::to_string(max_lapack_order) + ")");
}

}  // namespace Impl

// Eigendecomposition of the symmetric matrix A (host-accessible, rank 2, float or double,
// any layout) with LAPACK ?syevd: on return A holds the eigenvectors as columns and w the
// eigenvalues in ascending order. A must hold the whole symmetric matrix: LAPACK reads one
// triangle of the storage, the lower one of a column-major A, the upper one of a row-major A.
// Returns 0, LAPACK's info, or eigh_info_nonfinite_input (A and w then unchanged).
template <class MatrixView, class ValuesView>
int eigh_lapack(const MatrixView& A, const ValuesView& w) {
  using T = typename MatrixView::non_const_value_type;
  static_assert(Kokkos::is_view<MatrixView>::value && MatrixView::rank == 2, "eigh_lapack: A must be a rank-2 View");
  static_assert(Kokkos::is_view<ValuesView>::value && ValuesView::rank == 1, "eigh_lapack: w must be a rank-1 View");
  static_assert(Impl::is_lapack_scalar<T>::value, "eigh_lapack: the scalar type must be float or double");
  static_assert(std::is_same<typename ValuesView::non_const_value_type, T>::value,
                "eigh_lapack: A and w must have the same scalar type");
  static_assert(Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename MatrixView::memory_space>::accessible &&
                    Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename ValuesView::memory_space>::accessible,
                "eigh_lapack: A and w must be in host-accessible memory (use batched_eigh_jacobi elsewhere)");
  Impl::check_square(A, "koptim::linalg::eigh_lapack", "A");
  const std::size_t n = A.extent(0);
  if (w.extent(0) != n) {
    throw koptim::ShapeError("koptim::linalg::eigh_lapack: w has length " + std::to_string(w.extent(0)) +
                             ", expected " + std::to_string(n));
  }
  Impl::check_lapack_order(n, "koptim::linalg::eigh_lapack");
  if (n == 0) return 0;
  const int ni = static_cast<int>(n);

  // Column-major storage is passed as is. Row-major storage of a symmetric matrix is the same
  // matrix to LAPACK, but the eigenvectors come back as rows, so they are transposed in place.
  // Anything else (strided subviews) goes through a contiguous copy.
  const bool col_major = A.stride(0) == 1 && A.stride(1) >= n;
  const bool row_major = !col_major && A.stride(1) == 1 && A.stride(0) >= n;
  // The check runs in storage order: across it, every entry would be a cache miss for large n.
  for (std::size_t outer = 0; outer < n; ++outer) {
    for (std::size_t inner = 0; inner < n; ++inner) {
      const T x = row_major ? A(outer, inner) : A(inner, outer);
      if (!koptim::Impl::is_finite(x)) return eigh_info_nonfinite_input;
    }
  }
  std::vector<T> wtmp(n);
  int info = 0;
  if (col_major || row_major) {
    info = Impl::lapack_syevd(ni, A.data(), static_cast<int>(col_major ? A.stride(1) : A.stride(0)), wtmp.data());
    if (info == 0 && row_major) {
      for (std::size_t i = 0; i < n; ++i) {
        for (std::size_t j = i + 1; j < n; ++j) {
          const T tmp = A(i, j);
          A(i, j)     = A(j, i);
          A(j, i)     = tmp;
        }
      }
    }
  } else {
    std::vector<T> a(n * n);
    for (std::size_t j = 0; j < n; ++j) {
      for (std::size_t i = 0; i < n; ++i) a[i + j * n] = A(i, j);
    }
    info = Impl::lapack_syevd(ni, a.data(), ni, wtmp.data());
    if (info == 0) {
      for (std::size_t j = 0; j < n; ++j) {
        for (std::size_t i = 0; i < n; ++i) A(i, j) = a[i + j * n];
      }
    }
  }
  if (info == 0) {
    for (std::size_t i = 0; i < n; ++i) w(i) = wtmp[i];
  }
  return info;
}

// eigh_lapack on every matrix of a batch (rank 3, batch x n x n, host-accessible); w is
// batch x n and info(b) receives matrix b's code. The matrices run concurrently on the threads of
// the host instance `host` (the default one unless given).
template <class BatchView, class ValuesView, class InfoView>
void batched_eigh_lapack(const Kokkos::DefaultHostExecutionSpace& host, const BatchView& A, const ValuesView& w,
                         const InfoView& info) {
  static_assert(Kokkos::is_view<BatchView>::value && BatchView::rank == 3,
                "batched_eigh_lapack: A must be a rank-3 View (batch x n x n)");
  static_assert(Kokkos::is_view<ValuesView>::value && ValuesView::rank == 2,
                "batched_eigh_lapack: w must be a rank-2 View (batch x n)");
  static_assert(Kokkos::is_view<InfoView>::value && InfoView::rank == 1, "batched_eigh_lapack: info must be rank 1");
  koptim::Impl::ScopedRegion region("koptim::linalg::batched_eigh_lapack");
  const std::size_t nb = A.extent(0);
  if (A.extent(1) != A.extent(2) || w.extent(0) != nb || w.extent(1) != A.extent(1) || info.extent(0) != nb) {
    throw koptim::ShapeError("koptim::linalg::batched_eigh_lapack: extents do not match: A " + std::to_string(nb) +
                             " x " + std::to_string(A.extent(1)) + " x " + std::to_string(A.extent(2)) + ", w " +
                             std::to_string(w.extent(0)) + " x " + std::to_string(w.extent(1)) + ", info " +
                             std::to_string(info.extent(0)));
  }
  // Before the parallel loop: nothing may throw inside it.
  Impl::check_lapack_order(A.extent(1), "koptim::linalg::batched_eigh_lapack");
  const auto solve = [=](const std::size_t b) {
    auto Ab = Kokkos::subview(A, b, Kokkos::ALL(), Kokkos::ALL());
    auto wb = Kokkos::subview(w, b, Kokkos::ALL());
    info(b) = eigh_lapack(Ab, wb);
  };
  koptim::Impl::host_batch(host, "koptim::linalg::batched_eigh_lapack", nb, solve);
}

template <class BatchView, class ValuesView, class InfoView>
void batched_eigh_lapack(const BatchView& A, const ValuesView& w, const InfoView& info) {
  batched_eigh_lapack(Kokkos::DefaultHostExecutionSpace(), A, w, info);
}

namespace Impl {

// How many of f(0), ..., f(count - 1) are not finite, over a team (the result on every thread).
template <class Member, class F>
KOKKOS_INLINE_FUNCTION int team_count_nonfinite(const Member& team, int count, const F& f) {
  int c = 0;
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, count),
      [&](const int e, int& s) {
        if (!koptim::Impl::is_finite(f(e))) ++s;
      },
      c);
  return c;
}

// Team scratch of one Jacobi solve: rotation parameters and pair indices of the current
// round, and the eigenvalues and their ranks for the final sort.
template <class T, class ExecSpace>
struct JacobiScratch {
  ScratchView<T, ExecSpace> cs, sn, dpp, dqq, diag;
  ScratchView<int, ExecSpace> pp, qq, rot, rnk;

  static std::size_t bytes(int n, int np) {
    return 4 * ScratchView<T, ExecSpace>::shmem_size(np) + ScratchView<T, ExecSpace>::shmem_size(n) +
           3 * ScratchView<int, ExecSpace>::shmem_size(np) + ScratchView<int, ExecSpace>::shmem_size(n) + 64;
  }
  // In the team scratch of the given level.
  template <class ScratchSpace>
  KOKKOS_INLINE_FUNCTION JacobiScratch(const ScratchSpace& scratch, int n, int np)
      : cs(scratch, np),
        sn(scratch, np),
        dpp(scratch, np),
        dqq(scratch, np),
        diag(scratch, n),
        pp(scratch, np),
        qq(scratch, np),
        rot(scratch, np),
        rnk(scratch, n) {}
};

// 2x2 block (k1, k2) of A <- J^T A J and its mirror. The rotations of one round act on
// disjoint index pairs, so this block depends only on its own old values and the rotations
// of pairs k1 and k2: each block has exactly one owner.
template <class T, class Mat, class S>
KOKKOS_INLINE_FUNCTION void jacobi_block(const Mat& A, const S& s, int n, int k1, int k2) {
  if (s.rot[k1] == 0 && s.rot[k2] == 0) return;
  const int p1 = s.pp[k1], q1 = s.qq[k1], p2 = s.pp[k2], q2 = s.qq[k2];
  if (k1 == k2) {
    A(p1, p1) = s.dpp[k1];
    A(q1, q1) = s.dqq[k1];
    A(p1, q1) = T(0);
    A(q1, p1) = T(0);
    return;
  }
  const bool h1 = q1 < n, h2 = q2 < n;  // the padding index of odd n has no row or column
  const T c1 = s.rot[k1] ? s.cs[k1] : T(1), s1 = s.rot[k1] ? s.sn[k1] : T(0);
  const T c2 = s.rot[k2] ? s.cs[k2] : T(1), s2 = s.rot[k2] ? s.sn[k2] : T(0);
  const T x00 = A(p1, p2);
  const T x01 = h2 ? A(p1, q2) : T(0);
  const T x10 = h1 ? A(q1, p2) : T(0);
  const T x11 = h1 && h2 ? A(q1, q2) : T(0);
  const T y00 = c1 * x00 - s1 * x10, y01 = c1 * x01 - s1 * x11;
  const T y10 = s1 * x00 + c1 * x10, y11 = s1 * x01 + c1 * x11;
  const T z00 = c2 * y00 - s2 * y01, z01 = s2 * y00 + c2 * y01;
  const T z10 = c2 * y10 - s2 * y11, z11 = s2 * y10 + c2 * y11;
  A(p1, p2) = z00;
  A(p2, p1) = z00;
  if (h2) {
    A(p1, q2) = z01;
    A(q2, p1) = z01;
  }
  if (h1) {
    A(q1, p2) = z10;
    A(p2, q1) = z10;
  }
  if (h1 && h2) {
    A(q1, q2) = z11;
    A(q2, q1) = z11;
  }
}

// The sweeps and the sorted output of one matrix, on any 2D storage of A (the caller's
// memory or a team-scratch copy). Every phase that reads what another thread wrote is
// separated from it by a team barrier.
template <class T, class Member, class MatA, class MatV, class WVec, class S>
KOKKOS_INLINE_FUNCTION void jacobi_solve(const Member& team, const MatA& A, const MatV& V, const WVec& w, const S& s,
                                         int n, T tol, T floor, int max_sweeps, int& used, bool& converged) {
  const int m  = n + (n & 1);
  const int np = m / 2;
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n), [&](const int i) {
    for (int j = 0; j < n; ++j) V(i, j) = i == j ? T(1) : T(0);
  });
  team.team_barrier();
  used      = 0;
  converged = false;
  for (;;) {
    int rotated = 0;
    for (int r = 0; r < m - 1; ++r) {
      // Phase 1: one thread per pair decides and computes its rotation.
      int nrot = 0;
      Kokkos::parallel_reduce(
          Kokkos::TeamThreadRange(team, np),
          [&](const int k, int& cnt) {
            int p, q;
            jacobi_pair(r, k, m, p, q);
            s.pp[k]  = p;
            s.qq[k]  = q;
            s.rot[k] = 0;
            if (q >= n) return;
            const T apq = A(p, q);
            const T app = A(p, p);
            const T aqq = A(q, q);
            const T mag = koptim::Impl::abs(apq);
            if (mag <= floor ||
                mag <= tol * koptim::Impl::sqrt(koptim::Impl::abs(app)) * koptim::Impl::sqrt(koptim::Impl::abs(aqq)))
              return;
            T c, sn, t;
            jacobi_rotation(app, apq, aqq, c, sn, t);
            s.cs[k]  = c;
            s.sn[k]  = sn;
            s.dpp[k] = app - t * apq;
            s.dqq[k] = aqq + t * apq;
            s.rot[k] = 1;
            ++cnt;
          },
          nrot);
      team.team_barrier();
      if (nrot == 0) continue;  // the reduction gives every thread of the team the same value
      rotated += nrot;
      // Phase 2: A <- J^T A J over the blocks k1 <= k2 (rows folded in pairs, h with
      // np-1-h, so that every thread gets np+1 blocks), and V <- V J by rows.
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, (np + 1) / 2), [&](const int h) {
        for (int k2 = h; k2 < np; ++k2) jacobi_block<T>(A, s, n, h, k2);
        const int k1 = np - 1 - h;
        if (k1 != h) {
          for (int k2 = k1; k2 < np; ++k2) jacobi_block<T>(A, s, n, k1, k2);
        }
      });
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n), [&](const int i) {
        for (int k = 0; k < np; ++k) {
          if (s.rot[k] == 0) continue;
          const int p = s.pp[k], q = s.qq[k];
          const T vp = V(i, p), vq = V(i, q);
          V(i, p) = s.cs[k] * vp - s.sn[k] * vq;
          V(i, q) = s.sn[k] * vp + s.cs[k] * vq;
        }
      });
      team.team_barrier();
    }
    if (rotated == 0) {
      converged = true;
      break;
    }
    if (++used >= max_sweeps) break;
  }

  // Sort ascending: rank every eigenvalue (ties by index), then scatter. A is free now and
  // holds the unsorted eigenvectors while V receives them in order.
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n), [&](const int i) { s.diag[i] = A(i, i); });
  team.team_barrier();
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n), [&](const int i) {
    int rank = 0;
    for (int j = 0; j < n; ++j) rank += (s.diag[j] < s.diag[i] || (s.diag[j] == s.diag[i] && j < i)) ? 1 : 0;
    s.rnk[i] = rank;
    for (int j = 0; j < n; ++j) A(j, i) = V(j, i);
  });
  team.team_barrier();
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n), [&](const int k) {
    for (int i = 0; i < n; ++i) V(i, s.rnk[k]) = A(i, k);
    w(s.rnk[k]) = s.diag[k];
  });
}

}  // namespace Impl

// Batched Jacobi eigensolver: A (batch x n x n, symmetric) is the input and may be used as
// workspace (its contents are unspecified afterwards), w (batch x n) receives the ascending
// eigenvalues, V (batch x n x n) the eigenvectors as columns, info(b) the code (0,
// eigh_info_not_converged, eigh_info_nonfinite_input), sweeps(b) the sweeps that rotated at
// least once (0 for a diagonal matrix). All views must be accessible from ExecSpace and V
// must not alias A. Asynchronous on `space`, like a Kokkos kernel. A matrix that fits in
// level-0 team scratch (on a GPU: shared memory; about 64 x 64 floats) is solved there.
template <class ExecSpace, class BatchView, class ValuesView, class VectorsView, class InfoView, class SweepsView>
void batched_eigh_jacobi(const ExecSpace& space, const BatchView& A, const ValuesView& w, const VectorsView& V,
                         const InfoView& info, const SweepsView& sweeps, const JacobiOptions& options = {}) {
  using T = typename BatchView::non_const_value_type;
  static_assert(Kokkos::is_view<BatchView>::value && BatchView::rank == 3,
                "batched_eigh_jacobi: A must be a rank-3 View (batch x n x n)");
  static_assert(Kokkos::is_view<ValuesView>::value && ValuesView::rank == 2,
                "batched_eigh_jacobi: w must be a rank-2 View (batch x n)");
  static_assert(Kokkos::is_view<VectorsView>::value && VectorsView::rank == 3,
                "batched_eigh_jacobi: V must be a rank-3 View (batch x n x n)");
  static_assert(InfoView::rank == 1 && SweepsView::rank == 1, "batched_eigh_jacobi: info and sweeps must be rank 1");
  static_assert(std::is_floating_point<T>::value, "batched_eigh_jacobi: the scalar type must be floating point");
  static_assert(Kokkos::SpaceAccessibility<ExecSpace, typename BatchView::memory_space>::accessible &&
                    Kokkos::SpaceAccessibility<ExecSpace, typename ValuesView::memory_space>::accessible &&
                    Kokkos::SpaceAccessibility<ExecSpace, typename VectorsView::memory_space>::accessible,
                "batched_eigh_jacobi: the views must be accessible from the execution space");
  const char* who = "koptim::linalg::batched_eigh_jacobi";
  const int nb    = static_cast<int>(A.extent(0));
  const int n     = static_cast<int>(A.extent(1));
  if (A.extent(2) != A.extent(1) || w.extent(0) != A.extent(0) || w.extent(1) != A.extent(1) ||
      V.extent(0) != A.extent(0) || V.extent(1) != A.extent(1) || V.extent(2) != A.extent(1) ||
      info.extent(0) != A.extent(0) || sweeps.extent(0) != A.extent(0)) {
    throw koptim::ShapeError(std::string(who) + ": extents do not match: A " + std::to_string(A.extent(0)) + " x " +
                             std::to_string(A.extent(1)) + " x " + std::to_string(A.extent(2)) + ", w " +
                             std::to_string(w.extent(0)) + " x " + std::to_string(w.extent(1)) + ", V " +
                             std::to_string(V.extent(0)) + " x " + std::to_string(V.extent(1)) + " x " +
                             std::to_string(V.extent(2)) + ", info " + std::to_string(info.extent(0)) + ", sweeps " +
                             std::to_string(sweeps.extent(0)));
  }
  if (options.max_sweeps < 0) {
    throw koptim::ConfigError(std::string(who) + ": max_sweeps = " + std::to_string(options.max_sweeps) +
                              " is invalid; it must be >= 0");
  }
  if (!(options.tolerance >= 0.0) || !(options.tolerance < 1.0)) {
    throw koptim::ConfigError(std::string(who) + ": tolerance = " + Impl::num(options.tolerance) +
                              " is invalid; it must be in [0, 1) (0: machine epsilon)");
  }
  if (options.team_size < 0) {
    throw koptim::ConfigError(std::string(who) + ": team_size = " + std::to_string(options.team_size) +
                              " is invalid; it must be >= 0 (0: automatic)");
  }
  if (nb == 0) return;
  koptim::Impl::ScopedRegion region(who);

  using Policy         = Kokkos::TeamPolicy<ExecSpace>;
  using Member         = typename Policy::member_type;
  using Scratch        = Impl::JacobiScratch<T, ExecSpace>;
  using ScratchMat     = Kokkos::View<T**, Kokkos::LayoutRight, typename ExecSpace::scratch_memory_space,
                                  Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  const T eps          = std::numeric_limits<T>::epsilon();
  const T tol          = options.tolerance > 0.0 ? static_cast<T>(options.tolerance) : eps;
  const int maxsw      = options.max_sweeps;
  const int np         = (n + 1) / 2;
  const std::size_t sb = Scratch::bytes(n, np);
  const std::size_t mb = ScratchMat::shmem_size(n, n);
  // Level 0 (a GPU block's shared memory) for the work arrays, and for the matrix when both fit;
  // the work arrays in level 1 (global memory) when they alone do not.
  const auto level_max = [](int level) { return static_cast<std::size_t>(Policy::scratch_size_max(level)); };
  const std::size_t max0 =
      options.team_scratch_limit > 0 ? std::min(options.team_scratch_limit, level_max(0)) : level_max(0);
  const int work_level  = sb <= max0 ? 0 : 1;
  const bool in_scratch = options.use_team_scratch && work_level == 0 && sb + mb <= max0;
  if (work_level == 1 && sb > level_max(1)) {
    throw koptim::ShapeError(std::string(who) + ": matrices of order " + std::to_string(n) + " need " +
                             std::to_string(sb) + " bytes of team scratch per matrix; this execution space allows " +
                             std::to_string(level_max(1)) + " (use the LAPACK/cuSOLVER solver)");
  }
  Policy policy = options.team_size > 0 ? Policy(space, nb, options.team_size) : Policy(space, nb, Kokkos::AUTO);
  policy.set_scratch_size(work_level, Kokkos::PerTeam(sb + (in_scratch ? mb : 0)));

  Kokkos::parallel_for(
      "koptim::linalg::batched_eigh_jacobi", policy, KOKKOS_LAMBDA(const Member& team) {
        const int b = team.league_rank();
        Scratch s(team.team_scratch(work_level), n, np);
        auto Ab = Kokkos::subview(A, b, Kokkos::ALL(), Kokkos::ALL());
        auto Vb = Kokkos::subview(V, b, Kokkos::ALL(), Kokkos::ALL());
        auto wb = Kokkos::subview(w, b, Kokkos::ALL());

        // Nothing below may see a NaN: the test suite traps invalid operations.
        if (Impl::team_count_nonfinite(team, n * n, [&](const int e) { return Ab(e / n, e % n); }) > 0) {
          Kokkos::single(Kokkos::PerTeam(team), [&]() {
            info(b)   = eigh_info_nonfinite_input;
            sweeps(b) = 0;
          });
          return;
        }
        T amax = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, n),
            [&](const int i, T& mx) {
              for (int j = 0; j < n; ++j) {
                const T v = koptim::Impl::abs(Ab(i, j));
                if (mx < v) mx = v;
              }
            },
            Kokkos::Max<T>(amax));
        // Off-diagonal entries below eps^2 max|a| cannot move any eigenvalue by more than the
        // rounding of the input; without this floor an exactly singular matrix could keep
        // rotating noise against zero diagonal entries.
        const T floor = amax * eps * eps;
        int used      = 0;
        bool conv     = false;
        if (in_scratch) {
          ScratchMat As(team.team_scratch(0), n, n);
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n), [&](const int i) {
            for (int j = 0; j < n; ++j) As(i, j) = Ab(i, j);
          });
          team.team_barrier();
          Impl::jacobi_solve(team, As, Vb, wb, s, n, tol, floor, maxsw, used, conv);
        } else {
          Impl::jacobi_solve(team, Ab, Vb, wb, s, n, tol, floor, maxsw, used, conv);
        }
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          info(b)   = conv ? 0 : eigh_info_not_converged;
          sweeps(b) = used;
        });
      });
}

// The same on the views' default execution space instance.
template <class BatchView, class ValuesView, class VectorsView, class InfoView, class SweepsView>
void batched_eigh_jacobi(const BatchView& A, const ValuesView& w, const VectorsView& V, const InfoView& info,
                         const SweepsView& sweeps, const JacobiOptions& options = {}) {
  batched_eigh_jacobi(typename BatchView::execution_space(), A, w, V, info, sweeps, options);
}

}  // namespace linalg
}  // namespace koptim

#endif
