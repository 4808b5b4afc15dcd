// cuBLAS's batched GEMM for koptim's batches (koptim_BatchedGemm.hpp), where Kokkos runs on CUDA
// and Kokkos Kernels brings cuBLAS (its cuBLAS TPL links libcublas into every consumer); an
// empty answer (false) elsewhere. koptim keeps one cuBLAS handle of its own for the process,
// created at the first batch and destroyed at Kokkos::finalize; a call sets the handle's stream to
// the instance's and holds a lock, so that threads with instances of their own can share it.
#include <koptim/linalg/koptim_BatchedGemm.hpp>

#if defined(KOKKOS_ENABLE_CUDA) && defined(KOKKOSKERNELS_ENABLE_TPL_CUBLAS)
#include <cublas_v2.h>

#include <climits>
#include <mutex>
#include <string>
#include <type_traits>
#endif

namespace koptim {
namespace linalg {
namespace Impl {

#if defined(KOKKOS_ENABLE_CUDA) && defined(KOKKOSKERNELS_ENABLE_TPL_CUBLAS)
namespace {

std::mutex& cublas_mutex() {
  static std::mutex m;
  return m;
}

// Under cublas_mutex().
cublasHandle_t& cublas_handle() {
  static cublasHandle_t handle = nullptr;
  if (handle == nullptr) {
    const cublasStatus_t status = cublasCreate(&handle);
    if (status != CUBLAS_STATUS_SUCCESS) {
      handle = nullptr;
      throw Error("koptim::linalg::gemm_batched: cublasCreate failed (cuBLAS status " + std::to_string(status) + ")");
    }
    Kokkos::push_finalize_hook([] {
      std::lock_guard<std::mutex> lock(cublas_mutex());
      cublasDestroy(cublas_handle());
      cublas_handle() = nullptr;
    });
  }
  return handle;
}

cublasOperation_t op(char t) { return t == 'T' ? CUBLAS_OP_T : CUBLAS_OP_N; }

template <class T>
bool cublas_batched(const ExecutionSpace& exec, const GemmShape& s, T alpha, const GemmOperands<T>& ops, T beta) {
  if constexpr (!std::is_same<ExecutionSpace, Kokkos::Cuda>::value) {
    return false;
  } else {
    if (ops.count > INT_MAX)
      throw Error("koptim::linalg::gemm_batched: a batch of " + std::to_string(ops.count) +
                  " products, beyond cuBLAS's int");
    std::lock_guard<std::mutex> lock(cublas_mutex());
    cublasHandle_t h      = cublas_handle();
    cublasStatus_t status = cublasSetStream(h, exec.cuda_stream());
    // The three address arrays of the batch, in device memory.
    const T* const* a = reinterpret_cast<const T* const*>(ops.table + ops.first);
    const T* const* b = reinterpret_cast<const T* const*>(ops.table + ops.stride + ops.first);
    T* const* c       = reinterpret_cast<T* const*>(ops.table + 2 * ops.stride + ops.first);
    const int count   = static_cast<int>(ops.count);
    if (status == CUBLAS_STATUS_SUCCESS) {
      if constexpr (std::is_same<T, float>::value)
        status = cublasSgemmBatched(h, op(s.ta), op(s.tb), s.m, s.n, s.k, &alpha, a, s.lda, b, s.ldb, &beta, c, s.ldc,
                                    count);
      else
        status = cublasDgemmBatched(h, op(s.ta), op(s.tb), s.m, s.n, s.k, &alpha, a, s.lda, b, s.ldb, &beta, c, s.ldc,
                                    count);
    }
    if (status != CUBLAS_STATUS_SUCCESS)
      throw Error("koptim::linalg::gemm_batched: cuBLAS failed (status " + std::to_string(status) + ") on " +
                  std::to_string(count) + " products of " + std::to_string(s.m) + " x " + std::to_string(s.n) + " x " +
                  std::to_string(s.k));
    return true;
  }
}

}  // namespace

bool cublas_gemm_batched(const ExecutionSpace& exec, const GemmShape& s, float alpha, const GemmOperands<float>& ops,
                         float beta) {
  return cublas_batched(exec, s, alpha, ops, beta);
}
bool cublas_gemm_batched(const ExecutionSpace& exec, const GemmShape& s, double alpha, const GemmOperands<double>& ops,
                         double beta) {
  return cublas_batched(exec, s, alpha, ops, beta);
}
#else
bool cublas_gemm_batched(const ExecutionSpace&, const GemmShape&, float, const GemmOperands<float>&, float) {
  return false;
}
bool cublas_gemm_batched(const ExecutionSpace&, const GemmShape&, double, const GemmOperands<double>&, double) {
  return false;
}
#endif

}  // namespace Impl
}  // namespace linalg
}  // namespace koptim
