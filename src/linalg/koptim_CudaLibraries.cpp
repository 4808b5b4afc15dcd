// koptim's calls into CUDA's libraries, where Kokkos runs on CUDA and Kokkos Kernels brings them
// (its cuBLAS and cuSOLVER TPLs link libcublas and libcusolver into every consumer): cuBLAS's
// batched GEMM for koptim_BatchedGemm.hpp, cuSOLVER's symmetric eigensolvers for the root path
// (koptim_Eigensolver.hpp); answers that say "not here" elsewhere. koptim keeps a handle of each
// library per CUDA stream it is called on (up to a few streams), created at the stream's first
// call and destroyed at Kokkos::finalize; a call sets its handle's stream to the instance's and
// holds the library's lock, so that threads with instances of their own can call at once.
#include <koptim/linalg/koptim_BatchedGemm.hpp>
#include <koptim/linalg/koptim_Eigensolver.hpp>
#include <koptim/linalg/koptim_Gemm.hpp>
#include "koptim_HandleCache.hpp"

#include <climits>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>

#if defined(KOKKOS_ENABLE_CUDA) && \
    (defined(KOKKOSKERNELS_ENABLE_TPL_CUBLAS) || defined(KOKKOSKERNELS_ENABLE_TPL_CUSOLVER))
#include <cublas_v2.h>
#endif
#if defined(KOKKOS_ENABLE_CUDA) && defined(KOKKOSKERNELS_ENABLE_TPL_CUSOLVER)
#include <cusolverDn.h>
#endif

namespace koptim {
namespace linalg {
namespace Impl {

std::mutex& kokkos_kernels_gemm_mutex() {
  static std::mutex m;
  return m;
}

#if defined(KOKKOS_ENABLE_CUDA) && \
    (defined(KOKKOSKERNELS_ENABLE_TPL_CUBLAS) || defined(KOKKOSKERNELS_ENABLE_TPL_CUSOLVER))
namespace {

// The process's one object of a kind (cuSOLVER's syevj parameters) and its lock.
template <class Handle, class Status>
struct Library {
  std::mutex mutex;
  Handle handle = nullptr;
  // Under mutex: the object, created at the first call (create(&handle) must return ok), and
  // destroyed at Kokkos::finalize.
  Handle get(Status (*create)(Handle*), Status (*destroy)(Handle), Status ok, const char* what) {
    if (handle == nullptr) {
      const Status status = create(&handle);
      if (status != ok) {
        handle = nullptr;
        throw Error(std::string("koptim::linalg: ") + what + " failed (status " +
                    std::to_string(static_cast<int>(status)) + ")");
      }
      Kokkos::push_finalize_hook([this, destroy] {
        std::lock_guard<std::mutex> lock(mutex);
        destroy(handle);
        handle = nullptr;
      });
    }
    return handle;
  }
};

// Waits for every stream of the device: before a handle that is no longer kept is destroyed.
void device_synchronize() { cudaDeviceSynchronize(); }

}  // namespace
#endif

#if defined(KOKKOS_ENABLE_CUDA) && defined(KOKKOSKERNELS_ENABLE_TPL_CUBLAS)
namespace {

HandleCache<cudaStream_t, cublasHandle_t, cublasStatus_t>& cublas() {
  static HandleCache<cudaStream_t, cublasHandle_t, cublasStatus_t> library(
      cublasCreate, cublasDestroy, CUBLAS_STATUS_SUCCESS, "cublasCreate", device_synchronize);
  return library;
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
    std::lock_guard<std::mutex> lock(cublas().mutex);
    cublasHandle_t h      = cublas().get(exec.cuda_stream());
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

#if defined(KOKKOS_ENABLE_CUDA) && defined(KOKKOSKERNELS_ENABLE_TPL_CUSOLVER)
namespace {

HandleCache<cudaStream_t, cusolverDnHandle_t, cusolverStatus_t>& cusolver() {
  static HandleCache<cudaStream_t, cusolverDnHandle_t, cusolverStatus_t> library(
      cusolverDnCreate, cusolverDnDestroy, CUSOLVER_STATUS_SUCCESS, "cusolverDnCreate", device_synchronize);
  return library;
}

void check(cusolverStatus_t status, const char* what, int n) {
  if (status != CUSOLVER_STATUS_SUCCESS)
    throw Error(std::string("koptim::linalg::cusolver_eigh: ") + what + " failed (cuSOLVER status " +
                std::to_string(status) + ", n = " + std::to_string(n) + ")");
}

// cuSOLVER's syevjBatched takes matrices up to 32 x 32.
constexpr int syevj_batched_max_n = 32;

// The syevjBatched parameters (sorted eigenvalues, cuSOLVER's default tolerance and sweeps), one
// object for the process beside the handle, kept as a Library (created at the first call,
// destroyed at Kokkos::finalize): a call that is still running on the device when the host
// returns keeps valid parameters, and no call creates one. Called under cusolver().mutex.
syevjInfo_t syevj_params() {
  static Library<syevjInfo_t, cusolverStatus_t> params;
  std::lock_guard<std::mutex> lock(params.mutex);
  const bool fresh    = params.handle == nullptr;
  const syevjInfo_t p = params.get(cusolverDnCreateSyevjInfo, cusolverDnDestroySyevjInfo, CUSOLVER_STATUS_SUCCESS,
                                   "cusolverDnCreateSyevjInfo");
  if (fresh) cusolverDnXsyevjSetSortEig(p, 1);
  return p;
}

// The workspace sizes cuSOLVER gave, by scalar, batch and order (under the handle's lock): a
// Shampoo step with amortized roots asks for the same few sizes at every computation.
std::map<std::tuple<bool, int, int>, int>& workspace_sizes() {
  static std::map<std::tuple<bool, int, int>, int> sizes;
  return sizes;
}

constexpr cusolverEigMode_t vectors = CUSOLVER_EIG_MODE_VECTOR;
constexpr cublasFillMode_t lower    = CUBLAS_FILL_MODE_LOWER;

template <class T>
std::int64_t eigh_work(const ExecutionSpace& exec, int m, int n, T* a, T* w) {
  std::lock_guard<std::mutex> lock(cusolver().mutex);
  cusolverDnHandle_t h = cusolver().get(exec.cuda_stream());
  check(cusolverDnSetStream(h, exec.cuda_stream()), "cusolverDnSetStream", n);
  const auto key  = std::make_tuple(std::is_same<T, double>::value, n <= syevj_batched_max_n ? m : 1, n);
  const auto seen = workspace_sizes().find(key);
  if (seen != workspace_sizes().end()) return seen->second;
  int lwork = 0;
  if (n <= syevj_batched_max_n) {
    if constexpr (std::is_same<T, float>::value)
      check(cusolverDnSsyevjBatched_bufferSize(h, vectors, lower, n, a, n, w, &lwork, syevj_params(), m),
            "cusolverDnSsyevjBatched_bufferSize", n);
    else
      check(cusolverDnDsyevjBatched_bufferSize(h, vectors, lower, n, a, n, w, &lwork, syevj_params(), m),
            "cusolverDnDsyevjBatched_bufferSize", n);
  } else if constexpr (std::is_same<T, float>::value) {
    check(cusolverDnSsyevd_bufferSize(h, vectors, lower, n, a, n, w, &lwork), "cusolverDnSsyevd_bufferSize", n);
  } else {
    check(cusolverDnDsyevd_bufferSize(h, vectors, lower, n, a, n, w, &lwork), "cusolverDnDsyevd_bufferSize", n);
  }
  workspace_sizes()[key] = lwork;
  return lwork;
}

template <class T>
void eigh(const ExecutionSpace& exec, int m, int n, T* a, T* w, int* info, T* work, std::int64_t lwork) {
  if (m == 0 || n == 0) return;
  if (lwork > INT_MAX) throw Error("koptim::linalg::cusolver_eigh: a workspace beyond cuSOLVER's int");
  const int lw = static_cast<int>(lwork);
  std::lock_guard<std::mutex> lock(cusolver().mutex);
  cusolverDnHandle_t h = cusolver().get(exec.cuda_stream());
  check(cusolverDnSetStream(h, exec.cuda_stream()), "cusolverDnSetStream", n);
  if (n <= syevj_batched_max_n) {
    if constexpr (std::is_same<T, float>::value)
      check(cusolverDnSsyevjBatched(h, vectors, lower, n, a, n, w, work, lw, info, syevj_params(), m),
            "cusolverDnSsyevjBatched", n);
    else
      check(cusolverDnDsyevjBatched(h, vectors, lower, n, a, n, w, work, lw, info, syevj_params(), m),
            "cusolverDnDsyevjBatched", n);
    return;
  }
  const std::int64_t nn = static_cast<std::int64_t>(n) * n;
  for (int g = 0; g < m; ++g) {
    if constexpr (std::is_same<T, float>::value)
      check(cusolverDnSsyevd(h, vectors, lower, n, a + g * nn, n, w + std::int64_t(g) * n, work, lw, info + g),
            "cusolverDnSsyevd", n);
    else
      check(cusolverDnDsyevd(h, vectors, lower, n, a + g * nn, n, w + std::int64_t(g) * n, work, lw, info + g),
            "cusolverDnDsyevd", n);
  }
}

}  // namespace

std::int64_t cusolver_eigh_work(const ExecutionSpace& exec, int m, int n, float* a, float* w) {
  return eigh_work(exec, m, n, a, w);
}
std::int64_t cusolver_eigh_work(const ExecutionSpace& exec, int m, int n, double* a, double* w) {
  return eigh_work(exec, m, n, a, w);
}
void cusolver_eigh(const ExecutionSpace& exec, int m, int n, float* a, float* w, int* info, float* work,
                   std::int64_t lwork) {
  eigh(exec, m, n, a, w, info, work, lwork);
}
void cusolver_eigh(const ExecutionSpace& exec, int m, int n, double* a, double* w, int* info, double* work,
                   std::int64_t lwork) {
  eigh(exec, m, n, a, w, info, work, lwork);
}
#else
std::int64_t cusolver_eigh_work(const ExecutionSpace&, int, int, float*, float*) { return -1; }
std::int64_t cusolver_eigh_work(const ExecutionSpace&, int, int, double*, double*) { return -1; }
void cusolver_eigh(const ExecutionSpace&, int, int, float*, float*, int*, float*, std::int64_t) {
  throw Error("koptim::linalg::cusolver_eigh: koptim was built without cuSOLVER");
}
void cusolver_eigh(const ExecutionSpace&, int, int, double*, double*, int*, double*, std::int64_t) {
  throw Error("koptim::linalg::cusolver_eigh: koptim was built without cuSOLVER");
}
#endif

}  // namespace Impl
}  // namespace linalg
}  // namespace koptim
