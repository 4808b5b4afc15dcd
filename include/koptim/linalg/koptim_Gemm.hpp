// Matrix products of koptim's preconditioners through Kokkos Kernels.
//
// A row-major (m x n) block of memory is a column-major (n x m) matrix: koptim keeps its block
// tensors row-major (as torch does) and hands Kokkos Kernels LayoutLeft views of them, so the
// products run through the LayoutLeft instantiations (and the BLAS TPL) every Kokkos Kernels
// build has. Mode-j products and Gram matrices of mode-j unfoldings are built on that.
#ifndef KOPTIM_LINALG_GEMM_HPP
#define KOPTIM_LINALG_GEMM_HPP

#include <koptim/core/impl/koptim_Instance.hpp>

#include <KokkosBlas3_gemm.hpp>
#include <KokkosKernels_config.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

namespace koptim {
namespace linalg {

template <class T>
using ColMajor = Kokkos::View<T**, Kokkos::LayoutLeft, MemorySpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// The shape of a row-major tensor seen around dimension j: pre x d_j x post.
struct ModeSplit {
  std::int64_t pre = 1, dim = 1, post = 1;
  ModeSplit(const std::vector<std::int64_t>& shape, int j) {
    dim = shape[j];
    for (int i = 0; i < j; ++i) pre *= shape[i];
    for (std::size_t i = j + 1; i < shape.size(); ++i) post *= shape[i];
  }
};

namespace Impl {
// Held around every koptim call of Kokkos Kernels' GEMM on CUDA. Kokkos Kernels' cuBLAS GEMM
// goes through its one handle for the process, setting the handle's stream before the call and
// back to the null stream after it, without a lock: two host threads stepping on instances of
// their own would launch on each other's stream. (Defined in koptim_CudaLibraries.cpp.)
std::mutex& kokkos_kernels_gemm_mutex();

// Kokkos Kernels' GEMM, C <- alpha op(A) op(B) + beta C, on the instance space. Kokkos Kernels
// takes the instance from 4.1 on; an older one runs GEMM on the default instance, after a fence
// of space (the inputs ready) and before a fence of the default instance (the result ready for
// space's next kernels).
template <class ExecSpace, class AView, class BView, class CView>
void gemm(const ExecSpace& space, const char ta[], const char tb[], typename AView::const_value_type alpha,
          const AView& A, const BView& B, typename CView::const_value_type beta, const CView& C) {
#if defined(KOKKOSKERNELS_VERSION) && KOKKOSKERNELS_VERSION >= 40100
#if defined(KOKKOS_ENABLE_CUDA)
  if constexpr (std::is_same<ExecSpace, Kokkos::Cuda>::value) {
    std::lock_guard<std::mutex> lock(kokkos_kernels_gemm_mutex());
    KokkosBlas::gemm(space, ta, tb, alpha, A, B, beta, C);
    return;
  }
#endif
  KokkosBlas::gemm(space, ta, tb, alpha, A, B, beta, C);
#else
  koptim::Impl::fence(space, "koptim::linalg::gemm: before the default instance's GEMM");
  KokkosBlas::gemm(ta, tb, alpha, A, B, beta, C);
  koptim::Impl::fence(ExecSpace(), "koptim::linalg::gemm: after the default instance's GEMM");
#endif
}

// BLAS syrk on host memory, lower triangle of the column-major n x n C:
// C <- alpha op(A) op(A)^T + beta C, op(A) = A (n x k, trans 'N') or A^T (A k x n, trans 'T').
void blas_syrk_lower(char trans, int n, int k, float alpha, const float* a, int lda, float beta, float* c, int ldc);
void blas_syrk_lower(char trans, int n, int k, double alpha, const double* a, int lda, double beta, double* c, int ldc);
// BLAS gemm on host memory, column-major: C <- alpha op(A) op(B) + beta C, C m x n.
void blas_gemm(char ta, char tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
               float beta, float* c, int ldc);
void blas_gemm(char ta, char tb, int m, int n, int k, double alpha, const double* a, int lda, const double* b, int ldb,
               double beta, double* c, int ldc);

// L <- beta L + alpha G_(j) G_(j)^T into L's lower triangle (column-major d x d) by BLAS syrk:
// one call, or one per slice when dimension j is not the last.
template <class T>
void gram_lower(const T* G, std::int64_t pre, std::int64_t dim, std::int64_t post, T alpha, T beta, T* L) {
  const int n = static_cast<int>(dim);
  if (post == 1) {
    // G is (pre x d) row-major = (d x pre) column-major Gt; G_(j) = Gt.
    blas_syrk_lower('N', n, static_cast<int>(pre), alpha, G, n, beta, L, n);
    return;
  }
  // Slice p is (d x post) row-major = (post x d) column-major S_p; G_(j) G_(j)^T = sum_p S_p^T S_p.
  for (std::int64_t p = 0; p < pre; ++p)
    blas_syrk_lower('T', n, static_cast<int>(post), alpha, G + p * dim * post, static_cast<int>(post),
                    p == 0 ? beta : T(1), L, n);
}
}  // namespace Impl

// The upper triangle of the d x d matrix L (host memory) set from its lower triangle, in tiles
// of 32 x 32: the strided reads of a tile stay in cache while its columns are written.
constexpr std::int64_t mirror_tile = 32;

// Tile (ti, tj), ti <= tj, of the upper triangle.
template <class T>
void mirror_lower_tile(T* L, std::int64_t d, std::int64_t ti, std::int64_t tj) {
  const std::int64_t i_end = std::min(d, (ti + 1) * mirror_tile), j_end = std::min(d, (tj + 1) * mirror_tile);
  for (std::int64_t j = tj * mirror_tile; j < j_end; ++j)
    for (std::int64_t i = ti * mirror_tile; i < std::min(i_end, j); ++i) L[i + j * d] = L[j + i * d];
}

// The tiles in parallel on the host execution space (exec's instance on a CPU build).
template <class T>
void mirror_lower(const ExecutionSpace& exec, T* L, std::int64_t d) {
  const std::int64_t tiles = (d + mirror_tile - 1) / mirror_tile;
  Kokkos::parallel_for(
      "koptim::linalg::mirror_lower",
      Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(koptim::Impl::host_instance(exec), 0, tiles * tiles),
      [=](const std::int64_t t) {
        const std::int64_t ti = t / tiles, tj = t % tiles;  // upper tiles only
        if (ti <= tj) mirror_lower_tile(L, d, ti, tj);
      });
}

// The tiles on the calling thread alone (no kernel: the host-serial products below run inside a
// parallel loop over blocks).
template <class T>
void mirror_lower_serial(T* L, std::int64_t d) {
  const std::int64_t tiles = (d + mirror_tile - 1) / mirror_tile;
  for (std::int64_t tj = 0; tj < tiles; ++tj)
    for (std::int64_t ti = 0; ti <= tj; ++ti) mirror_lower_tile(L, d, ti, tj);
}

// Before a host BLAS call reads what kernels on exec wrote, and after it, before kernels read its
// result: named, so that a count of a step's fences (unit_tests/tstSteadyStateAllocations.cpp)
// can tell these per-call fences of the host path, which device memory does not need, from waits
// on the device.
inline void host_blas_fence(const ExecutionSpace& exec, const char* when) {
  koptim::Impl::fence(exec, std::string("koptim::linalg::host BLAS: ") + when);
}

// L <- beta L + alpha G_(j) G_(j)^T, with G a row-major tensor of the given shape (data in
// device memory) and L a d_j x d_j symmetric matrix. In host memory through BLAS syrk (half the
// flops of a GEMM: only the lower triangle, then mirrored); elsewhere through Kokkos Kernels
// GEMM (Kokkos Kernels has no syrk). On the instance exec.
template <class T>
void gram_of_unfolding(const ExecutionSpace& exec, const T* G, const std::vector<std::int64_t>& shape, int j, T alpha,
                       T beta, T* L) {
  const ModeSplit s(shape, j);
  constexpr bool host  = Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemorySpace>::accessible;
  const std::int64_t k = s.post == 1 ? s.pre : s.post;
  if (host && s.dim <= INT_MAX && k <= INT_MAX) {
    host_blas_fence(exec, "before syrk");  // G was written by kernels
    Impl::gram_lower(G, s.pre, s.dim, s.post, alpha, beta, L);
    mirror_lower(exec, L, s.dim);
    host_blas_fence(exec, "after syrk");  // before kernels read L
    return;
  }
  ColMajor<T> Lm(L, s.dim, s.dim);
  if (s.post == 1) {
    ColMajor<T> Gt(const_cast<T*>(G), s.dim, s.pre);
    Impl::gemm(exec, "N", "T", alpha, Gt, Gt, beta, Lm);
    return;
  }
  for (std::int64_t p = 0; p < s.pre; ++p) {
    ColMajor<T> Sp(const_cast<T*>(G) + p * s.dim * s.post, s.post, s.dim);
    Impl::gemm(exec, "T", "N", alpha, Sp, Sp, p == 0 ? beta : T(1), Lm);
  }
}

// Y = M x_j op(A): Y_(j) = op(A) M_(j), op(A) = A or A^T (trans = 'T'), A a d_j x d_j matrix in
// column-major order, M and Y row-major tensors of the given shape (Y must not alias M). On the
// instance exec.
template <class T>
void mode_product(const ExecutionSpace& exec, const T* M, const std::vector<std::int64_t>& shape, int j, const T* A,
                  char trans, T* Y) {
  const ModeSplit s(shape, j);
  ColMajor<T> Am(const_cast<T*>(A), s.dim, s.dim);
  const char ta[2] = {trans, '\0'};
  if (s.post == 1) {
    // Yt (d x pre) = op(A) Mt.
    ColMajor<T> Mt(const_cast<T*>(M), s.dim, s.pre), Yt(Y, s.dim, s.pre);
    Impl::gemm(exec, ta, "N", T(1), Am, Mt, T(0), Yt);
    return;
  }
  // Per slice: Y_p (d x post) = op(A) M_p, i.e. Yt_p (post x d) = Mt_p op(A)^T.
  const char tb[2] = {trans == 'T' ? 'N' : 'T', '\0'};
  for (std::int64_t p = 0; p < s.pre; ++p) {
    ColMajor<T> Mt(const_cast<T*>(M) + p * s.dim * s.post, s.post, s.dim), Yt(Y + p * s.dim * s.post, s.post, s.dim);
    Impl::gemm(exec, "N", tb, T(1), Mt, Am, T(0), Yt);
  }
}

// Host-serial forms of gram_of_unfolding and mode_product, for host memory: BLAS calls on the
// calling thread, no kernel and no fence, so that the blocks of a batch can run them at once on
// the host threads (the caller fences before and after the batch). Every extent must fit in an
// int (fits_host_blas). The same BLAS calls, and so the same results, as the forms above.
inline bool fits_host_blas(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (const auto d : shape) n *= d;
  return n <= INT_MAX;
}

template <class T>
void host_gram_of_unfolding(const T* G, const std::vector<std::int64_t>& shape, int j, T alpha, T beta, T* L) {
  const ModeSplit s(shape, j);
  Impl::gram_lower(G, s.pre, s.dim, s.post, alpha, beta, L);
  mirror_lower_serial(L, s.dim);
}

template <class T>
void host_mode_product(const T* M, const std::vector<std::int64_t>& shape, int j, const T* A, char trans, T* Y) {
  const ModeSplit s(shape, j);
  const int d = static_cast<int>(s.dim);
  if (s.post == 1) {
    // Yt (d x pre) = op(A) Mt.
    Impl::blas_gemm(trans, 'N', d, static_cast<int>(s.pre), d, T(1), A, d, M, d, T(0), Y, d);
    return;
  }
  // Per slice: Yt_p (post x d) = Mt_p op(A)^T.
  const char tb  = trans == 'T' ? 'N' : 'T';
  const int post = static_cast<int>(s.post);
  for (std::int64_t p = 0; p < s.pre; ++p)
    Impl::blas_gemm('N', tb, post, d, d, T(1), M + p * s.dim * s.post, post, A, d, T(0), Y + p * s.dim * s.post, post);
}

}  // namespace linalg
}  // namespace koptim

#endif
