// The only place where koptim calls LAPACK and BLAS directly (syevd; geqrf and ormqr for the QR refresh of
// eigenbases; syrk, which Kokkos Kernels lacks; gemm for the host-serial products that a batch of blocks runs on
// several host threads at once). The Fortran prototypes are declared here rather than taken from lapacke, so a plain
// -llapack is enough; they stay out of the public headers so that they cannot clash with a user's own LAPACK
// declarations.
#include <koptim/linalg/koptim_Eigensolver.hpp>
#include <koptim/linalg/koptim_Gemm.hpp>

#include <algorithm>
#include <cstddef>
#include <limits>
#include <vector>

extern "C" {
// gfortran passes the lengths of character arguments as trailing hidden arguments; passing
// them is harmless for compilers that do not expect them and required for strict ones.
void ssyevd_(const char* jobz, const char* uplo, const int* n, float* a, const int* lda, float* w, float* work,
             const int* lwork, int* iwork, const int* liwork, int* info, std::size_t jobz_len, std::size_t uplo_len);
void dsyevd_(const char* jobz, const char* uplo, const int* n, double* a, const int* lda, double* w, double* work,
             const int* lwork, int* iwork, const int* liwork, int* info, std::size_t jobz_len, std::size_t uplo_len);
void ssyrk_(const char* uplo, const char* trans, const int* n, const int* k, const float* alpha, const float* a,
            const int* lda, const float* beta, float* c, const int* ldc, std::size_t uplo_len, std::size_t trans_len);
void sgemm_(const char* ta, const char* tb, const int* m, const int* n, const int* k, const float* alpha,
            const float* a, const int* lda, const float* b, const int* ldb, const float* beta, float* c, const int* ldc,
            std::size_t ta_len, std::size_t tb_len);
void dgemm_(const char* ta, const char* tb, const int* m, const int* n, const int* k, const double* alpha,
            const double* a, const int* lda, const double* b, const int* ldb, const double* beta, double* c,
            const int* ldc, std::size_t ta_len, std::size_t tb_len);
void dsyrk_(const char* uplo, const char* trans, const int* n, const int* k, const double* alpha, const double* a,
            const int* lda, const double* beta, double* c, const int* ldc, std::size_t uplo_len, std::size_t trans_len);
void sgeqrf_(const int* m, const int* n, float* a, const int* lda, float* tau, float* work, const int* lwork,
             int* info);
void dgeqrf_(const int* m, const int* n, double* a, const int* lda, double* tau, double* work, const int* lwork,
             int* info);
void sormqr_(const char* side, const char* trans, const int* m, const int* n, const int* k, const float* a,
             const int* lda, const float* tau, float* c, const int* ldc, float* work, const int* lwork, int* info,
             std::size_t side_len, std::size_t trans_len);
void dormqr_(const char* side, const char* trans, const int* m, const int* n, const int* k, const double* a,
             const int* lda, const double* tau, double* c, const int* ldc, double* work, const int* lwork, int* info,
             std::size_t side_len, std::size_t trans_len);
}

namespace koptim {
namespace linalg {
namespace Impl {

namespace {

template <class T, class F>
int syevd(F fn, int n, T* a, int lda, T* w) {
  const char jobz = 'V', uplo = 'L';
  int info = 0;
  // Workspace query first, keeping at least the documented minimum (1 + 6n + 2n^2 reals,
  // 3 + 5n integers): a single-precision query returns the size as a float, which is not
  // exact above 2^24.
  T wq       = 0;
  int iwq    = 0;
  int lwork  = -1;
  int liwork = -1;
  fn(&jobz, &uplo, &n, a, &lda, w, &wq, &lwork, &iwq, &liwork, &info, 1, 1);
  if (info != 0) return info;
  const long long lmin  = 1 + 6LL * n + 2LL * n * n;
  const long long lq    = static_cast<long long>(wq) + 1;
  const long long limin = 3 + 5LL * n;
  // The query's optimum where int holds it, else the documented minimum (enough).
  lwork  = static_cast<int>(lq > lmin && lq <= std::numeric_limits<int>::max() ? lq : lmin);
  liwork = static_cast<int>(iwq > limin ? iwq : limin);
  std::vector<T> work(static_cast<std::size_t>(lwork));
  std::vector<int> iwork(static_cast<std::size_t>(liwork));
  fn(&jobz, &uplo, &n, a, &lda, w, work.data(), &lwork, iwork.data(), &liwork, &info, 1, 1);
  return info;
}

// Q of A = QR (Householder), n x n, column-major (leading dimension n): ?geqrf factors a in place (a is
// overwritten), then ?ormqr applies Q to the identity in q. Chosen by measurement (n = 128, float, OpenBLAS
// 0.3.21, per matrix, 1 / 2 threads each solving its own matrices): ?geqrf + ?ormqr 312 / 182 us, ?geqrf +
// ?orgqr 369 / 183, ?geqrt + ?gemqrt 222 / 187: the last is the fastest alone but does not scale (its recursive
// panels make many small level-3 calls, which this OpenBLAS serializes across threads), and the result must not
// depend on the thread count.
template <class T, class Geqrf, class Ormqr>
int qr_q(Geqrf geqrf, Ormqr ormqr, int n, T* a, T* q) {
  if (n == 0) return 0;
  // Kept per host thread between calls (the refresh runs one matrix per thread, many per step), up
  // to host_buffer's limit.
  static thread_local std::vector<T> kept_tau, kept_work;
  std::vector<T> once_tau, once_work;
  T* const tau = host_buffer(kept_tau, once_tau, static_cast<std::size_t>(n));
  std::fill(q, q + static_cast<std::size_t>(n) * n, T(0));
  for (int i = 0; i < n; ++i) q[static_cast<std::size_t>(i) * n + i] = T(1);
  const char side = 'L', trans = 'N';
  int info = 0, lwork = -1;
  T q1 = 0, q2 = 0;
  geqrf(&n, &n, a, &n, tau, &q1, &lwork, &info);
  if (info != 0) return info;
  ormqr(&side, &trans, &n, &n, &n, a, &n, tau, q, &n, &q2, &lwork, &info, 1, 1);
  if (info != 0) return info;
  // The queried sizes come back as reals (exact far beyond any n here); at least n, the minimum.
  const long long lq = static_cast<long long>(q1 > q2 ? q1 : q2) + 1;
  lwork              = static_cast<int>(lq > n ? lq : n);
  T* const work      = host_buffer(kept_work, once_work, static_cast<std::size_t>(lwork));
  geqrf(&n, &n, a, &n, tau, work, &lwork, &info);
  if (info != 0) return info;
  ormqr(&side, &trans, &n, &n, &n, a, &n, tau, q, &n, work, &lwork, &info, 1, 1);
  return info;
}

}  // namespace

int lapack_qr_q(int n, float* a, float* q) { return qr_q<float>(sgeqrf_, sormqr_, n, a, q); }
int lapack_qr_q(int n, double* a, double* q) { return qr_q<double>(dgeqrf_, dormqr_, n, a, q); }

int lapack_syevd(int n, float* a, int lda, float* w) { return syevd<float>(ssyevd_, n, a, lda, w); }
int lapack_syevd(int n, double* a, int lda, double* w) { return syevd<double>(dsyevd_, n, a, lda, w); }

void blas_syrk_lower(char trans, int n, int k, float alpha, const float* a, int lda, float beta, float* c, int ldc) {
  const char uplo = 'L';
  ssyrk_(&uplo, &trans, &n, &k, &alpha, a, &lda, &beta, c, &ldc, 1, 1);
}
void blas_syrk_lower(char trans, int n, int k, double alpha, const double* a, int lda, double beta, double* c,
                     int ldc) {
  const char uplo = 'L';
  dsyrk_(&uplo, &trans, &n, &k, &alpha, a, &lda, &beta, c, &ldc, 1, 1);
}

void blas_gemm(char ta, char tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
               float beta, float* c, int ldc) {
  sgemm_(&ta, &tb, &m, &n, &k, &alpha, a, &lda, b, &ldb, &beta, c, &ldc, 1, 1);
}
void blas_gemm(char ta, char tb, int m, int n, int k, double alpha, const double* a, int lda, const double* b, int ldb,
               double beta, double* c, int ldc) {
  dgemm_(&ta, &tb, &m, &n, &k, &alpha, a, &lda, b, &ldb, &beta, c, &ldc, 1, 1);
}

}  // namespace Impl
}  // namespace linalg
}  // namespace koptim
