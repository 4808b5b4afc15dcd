// Symmetric eigensolvers: LAPACK (host) and the batched Kokkos Jacobi solver, against closed
// forms (the [-1,2,-1] tridiagonal matrix, diagonal and rank-one-update matrices), the
// spec's published eigenvalues, and each other on random symmetric matrices.
#include <koptim/linalg/koptim_Eigensolver.hpp>

#include "koptim_TestDense.hpp"

#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <new>
#include <random>
#include <string>
#include <vector>

namespace {

using koptim::linalg::batched_eigh_jacobi;
using koptim::linalg::batched_eigh_lapack;
using koptim::linalg::eigh_info_nonfinite_input;
using koptim::linalg::eigh_info_not_converged;
using koptim::linalg::eigh_lapack;
using koptim::linalg::JacobiOptions;

using koptim_test::Dense;
using koptim_test::tridiagonal;
using koptim_test::tridiagonal_eigenvalue;
using koptim_test::tridiagonal_vector;

Dense random_symmetric(int n, std::mt19937& gen, double diag_shift) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  Dense A(n);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j <= i; ++j) A(i, j) = A(j, i) = u(gen);
    A(i, i) += diag_shift;
  }
  return A;
}

// G G^T + n I / 4: symmetric positive definite, eigenvalues generically apart.
Dense random_spd(int n, std::mt19937& gen) { return koptim_test::random_spd(n, gen, 1.0, 0.25 * n); }

template <class T>
double tol_of() {
  return std::is_same<T, float>::value ? 1e-5 : 1e-13;
}

// Checks that (w, V) is an eigendecomposition of A: ascending w, orthonormal columns, and
// residual A V - V diag(w) small against max|A|. V is accessed through get(i, k).
template <class Get>
void expect_eigendecomposition(const Dense& A, const std::vector<double>& w, Get get, double tol,
                               const std::string& what) {
  const int n = A.n;
  double amax = 0;
  for (double x : A.a) amax = std::max(amax, std::fabs(x));
  amax = std::max(amax, 1e-300);
  for (int k = 0; k + 1 < n; ++k) EXPECT_LE(w[k], w[k + 1]) << what << ": not ascending at " << k;
  double orth = 0, res = 0;
  for (int k = 0; k < n; ++k) {
    for (int l = 0; l < n; ++l) {
      double s = 0;
      for (int i = 0; i < n; ++i) s += get(i, k) * get(i, l);
      orth = std::max(orth, std::fabs(s - (k == l ? 1.0 : 0.0)));
    }
    for (int i = 0; i < n; ++i) {
      double s = 0;
      for (int j = 0; j < n; ++j) s += A(i, j) * get(j, k);
      res = std::max(res, std::fabs(s - w[k] * get(i, k)));
    }
  }
  EXPECT_LE(orth, tol * n) << what << ": columns not orthonormal";
  EXPECT_LE(res, tol * n * amax) << what << ": residual too large";
}

template <class T, class Layout>
void lapack_tridiagonal(int n) {
  Kokkos::View<T**, Layout, Kokkos::HostSpace> A("A", n, n);
  Kokkos::View<T*, Kokkos::HostSpace> w("w", n);
  const Dense R = tridiagonal(n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) A(i, j) = static_cast<T>(R(i, j));
  ASSERT_EQ(eigh_lapack(A, w), 0);
  const double tol = std::is_same<T, float>::value ? 2e-6 : 1e-14;
  for (int k = 0; k < n; ++k) {
    EXPECT_NEAR(w(k), tridiagonal_eigenvalue(n, k), 4 * tol) << "n " << n << " k " << k;
    double dot = 0;
    for (int j = 0; j < n; ++j) dot += A(j, k) * tridiagonal_vector(n, j, k);
    EXPECT_NEAR(std::fabs(dot), 1.0, 100 * tol) << "eigenvector " << k << " of n " << n;
  }
}

TEST(EigensolverLapack, TridiagonalClosedFormAllLayouts) {
  for (int n : {1, 2, 10, 33}) {
    lapack_tridiagonal<double, Kokkos::LayoutLeft>(n);
    lapack_tridiagonal<double, Kokkos::LayoutRight>(n);
    lapack_tridiagonal<float, Kokkos::LayoutLeft>(n);
    lapack_tridiagonal<float, Kokkos::LayoutRight>(n);
  }
  // A strided window of a larger matrix goes through a contiguous copy.
  const int n = 10;
  Kokkos::View<double**, Kokkos::LayoutRight, Kokkos::HostSpace> big("big", 2 * n, 2 * n);
  Kokkos::View<double**, Kokkos::LayoutStride, Kokkos::HostSpace> S(
      big.data(), Kokkos::LayoutStride(n, 2 * 2 * n, n, 2));  // every other row and column
  const Dense R = tridiagonal(n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) S(i, j) = R(i, j);
  Kokkos::View<double*, Kokkos::HostSpace> w("w", n);
  ASSERT_EQ(eigh_lapack(S, w), 0);
  for (int k = 0; k < n; ++k) {
    EXPECT_NEAR(w(k), tridiagonal_eigenvalue(n, k), 1e-13);
    double dot = 0;
    for (int j = 0; j < n; ++j) dot += S(j, k) * tridiagonal_vector(n, j, k);
    EXPECT_NEAR(std::fabs(dot), 1.0, 1e-12);
  }
  EXPECT_EQ(big(1, 1), 0.0);  // entries between the strided ones are untouched
}

TEST(EigensolverLapack, ShampooExampleEigenvalues) {
  // Reference values: eigenvalues (double) 2.896398e-3, 0.1741237, 1982.823.
  const double a[3][3] = {{1195, -944, -224}, {-944, 746, 177}, {-224, 177, 42}};
  Kokkos::View<double**, Kokkos::LayoutLeft, Kokkos::HostSpace> A("A", 3, 3);
  Kokkos::View<double*, Kokkos::HostSpace> w("w", 3);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) A(i, j) = a[i][j];
  ASSERT_EQ(eigh_lapack(A, w), 0);
  EXPECT_NEAR(w(0) / 2.896398e-3, 1.0, 2e-6);
  EXPECT_NEAR(w(1) / 0.1741237, 1.0, 2e-6);
  EXPECT_NEAR(w(2) / 1982.823, 1.0, 2e-6);
}

TEST(EigensolverLapack, NonFiniteInputIsReportedAndLeftAlone) {
  Kokkos::View<double**, Kokkos::HostSpace> A("A", 3, 3);
  Kokkos::View<double*, Kokkos::HostSpace> w("w", 3);
  Kokkos::deep_copy(w, -7.0);
  for (int i = 0; i < 3; ++i) A(i, i) = 1.0;
  A(2, 1) = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(eigh_lapack(A, w), eigh_info_nonfinite_input);
  EXPECT_EQ(A(0, 0), 1.0);
  EXPECT_EQ(w(0), -7.0);
  A(2, 1) = std::numeric_limits<double>::infinity();
  EXPECT_EQ(eigh_lapack(A, w), eigh_info_nonfinite_input);
}

// An exception thrown by an item of a host batch (a failed workspace allocation) reaches the
// caller; on a threaded backend it used to end the process (an exception cannot leave an OpenMP
// parallel region). The items after it may be skipped; the ones that ran are complete.
TEST(EigensolverLapack, HostBatchRethrowsAnItemsException) {
  std::vector<int> done(64, 0);
  try {
    koptim::Impl::host_batch(Kokkos::DefaultHostExecutionSpace(), "test::host_batch", 64, [&](const int i) {
      if (i == 5) throw std::bad_alloc();
      done[static_cast<std::size_t>(i)] = 1;
    });
    ADD_FAILURE() << "no exception";
  } catch (const std::bad_alloc&) {
  }
  EXPECT_EQ(done[5], 0);
  // A batch that throws nothing runs every item.
  koptim::Impl::host_batch(Kokkos::DefaultHostExecutionSpace(), "test::host_batch", 64,
                           [&](const int i) { done[static_cast<std::size_t>(i)] = 2; });
  EXPECT_TRUE(std::all_of(done.begin(), done.end(), [](int d) { return d == 2; }));
  // ?syevd's workspace (1 + 6n + 2n^2 entries) must fit LAPACK's int.
  EXPECT_NO_THROW(koptim::linalg::Impl::check_lapack_order(32766, "test"));
  EXPECT_THROW(koptim::linalg::Impl::check_lapack_order(32767, "test"), koptim::ShapeError);
}

// Work buffers kept by their caller: the same storage from one call to the next (grown when asked
// for more) up to the limit; beyond it a buffer of the caller's own, the kept one untouched.
TEST(EigensolverLapack, HostBufferKeepsWorkspacesUpToItsLimit) {
  using koptim::linalg::Impl::host_buffer;
  using koptim::linalg::Impl::kept_buffer_limit;
  std::vector<float> kept, once;
  float* const first = host_buffer(kept, once, 1000);
  EXPECT_EQ(host_buffer(kept, once, 10), first);
  EXPECT_EQ(kept.size(), 1000u);
  float* const grown = host_buffer(kept, once, 5000);
  EXPECT_EQ(grown, kept.data());
  EXPECT_EQ(kept.size(), 5000u);
  float* const at_limit = host_buffer(kept, once, kept_buffer_limit);
  EXPECT_EQ(at_limit, kept.data());
  EXPECT_TRUE(once.empty());
  float* const large = host_buffer(kept, once, kept_buffer_limit + 1);
  EXPECT_EQ(large, once.data());
  EXPECT_EQ(once.size(), kept_buffer_limit + 1);
  EXPECT_EQ(kept.size(), kept_buffer_limit);
}

TEST(EigensolverLapack, BatchedMatchesSingleAndChecksExtents) {
  std::mt19937 gen(7);
  const int nb = 5, n = 9;
  Kokkos::View<double***, Kokkos::LayoutRight, Kokkos::HostSpace> A("A", nb, n, n);
  Kokkos::View<double**, Kokkos::HostSpace> w("w", nb, n);
  Kokkos::View<int*, Kokkos::HostSpace> info("info", nb);
  std::vector<Dense> mats;
  for (int b = 0; b < nb; ++b) {
    mats.push_back(random_symmetric(n, gen, 0.0));
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) A(b, i, j) = mats[b](i, j);
  }
  batched_eigh_lapack(A, w, info);
  for (int b = 0; b < nb; ++b) {
    ASSERT_EQ(info(b), 0);
    std::vector<double> wb(n);
    for (int k = 0; k < n; ++k) wb[k] = w(b, k);
    expect_eigendecomposition(
        mats[b], wb, [&](int i, int k) { return A(b, i, k); }, 1e-14, "lapack batch " + std::to_string(b));
  }
  Kokkos::View<double**, Kokkos::HostSpace> wbad("w", nb, n + 1);
  try {
    batched_eigh_lapack(A, wbad, info);
    FAIL() << "mismatched w accepted";
  } catch (const koptim::ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("w 5 x 10"), std::string::npos) << e.what();
  }
}

// Runs the batched Jacobi solver on host matrices through device views; returns eigenvalues,
// eigenvectors (as host mirrors), info and sweeps.
template <class T>
struct JacobiRun {
  typename Kokkos::View<T**>::HostMirror w;
  typename Kokkos::View<T***>::HostMirror V;
  typename Kokkos::View<int*>::HostMirror info, sweeps;
};

template <class T>
JacobiRun<T> run_jacobi(const std::vector<Dense>& mats, const JacobiOptions& opt = {}) {
  const int nb = static_cast<int>(mats.size());
  const int n  = nb > 0 ? mats[0].n : 0;
  Kokkos::View<T***> A("A", nb, n, n), V("V", nb, n, n);
  Kokkos::View<T**> w("w", nb, n);
  Kokkos::View<int*> info("info", nb), sweeps("sweeps", nb);
  auto Ah = Kokkos::create_mirror_view(A);
  koptim_test::fill_batch(Ah, mats);
  Kokkos::deep_copy(A, Ah);
  batched_eigh_jacobi(A, w, V, info, sweeps, opt);
  JacobiRun<T> r;
  r.w      = Kokkos::create_mirror_view(w);
  r.V      = Kokkos::create_mirror_view(V);
  r.info   = Kokkos::create_mirror_view(info);
  r.sweeps = Kokkos::create_mirror_view(sweeps);
  Kokkos::deep_copy(r.w, w);
  Kokkos::deep_copy(r.V, V);
  Kokkos::deep_copy(r.info, info);
  Kokkos::deep_copy(r.sweeps, sweeps);
  return r;
}

// More than one thread per team where the backend has threads, so that the team barriers
// and the one-owner-per-entry rule are actually exercised.
int test_team_size() { return std::min(2, Kokkos::DefaultExecutionSpace().concurrency()); }

template <class T>
void jacobi_tridiagonal() {
  JacobiOptions opt;
  opt.team_size = test_team_size();
  for (int n : {1, 2, 3, 10, 33, 64}) {
    const auto r     = run_jacobi<T>({tridiagonal(n), tridiagonal(n)}, opt);
    const double tol = std::is_same<T, float>::value ? 2e-6 : 1e-14;
    for (int b = 0; b < 2; ++b) {
      ASSERT_EQ(r.info(b), 0) << "n " << n;
      EXPECT_LE(r.sweeps(b), 12) << "n " << n;
      for (int k = 0; k < n; ++k) {
        EXPECT_NEAR(r.w(b, k), tridiagonal_eigenvalue(n, k), 8 * tol) << "n " << n << " k " << k;
        double dot = 0;
        for (int j = 0; j < n; ++j) dot += r.V(b, j, k) * tridiagonal_vector(n, j, k);
        EXPECT_NEAR(std::fabs(dot), 1.0, 200 * tol) << "eigenvector " << k << " of n " << n;
      }
    }
  }
}

TEST(EigensolverJacobi, TridiagonalClosedFormDouble) { jacobi_tridiagonal<double>(); }
TEST(EigensolverJacobi, TridiagonalClosedFormFloat) { jacobi_tridiagonal<float>(); }

template <class T>
void jacobi_vs_lapack(bool scratch) {
  std::mt19937 gen(2024);
  JacobiOptions opt;
  opt.team_size        = test_team_size();
  opt.use_team_scratch = scratch;
  for (int n : {2, 3, 7, 16, 31, 64}) {
    std::vector<Dense> mats;
    for (int b = 0; b < 6; ++b) mats.push_back(b % 2 ? random_spd(n, gen) : random_symmetric(n, gen, 0.0));
    const auto r = run_jacobi<T>(mats, opt);
    for (int b = 0; b < 6; ++b) {
      ASSERT_EQ(r.info(b), 0);
      Kokkos::View<T**, Kokkos::LayoutLeft, Kokkos::HostSpace> A("A", n, n);
      Kokkos::View<T*, Kokkos::HostSpace> w("w", n);
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) A(i, j) = static_cast<T>(mats[b](i, j));
      ASSERT_EQ(eigh_lapack(A, w), 0);
      double scale = 0, gap = std::numeric_limits<double>::max();
      for (int k = 0; k < n; ++k) scale = std::max(scale, std::fabs(static_cast<double>(w(k))));
      for (int k = 0; k + 1 < n; ++k) gap = std::min(gap, static_cast<double>(w(k + 1) - w(k)));
      const double tol = tol_of<T>();
      for (int k = 0; k < n; ++k) {
        EXPECT_NEAR(r.w(b, k), w(k), tol * scale) << "n " << n << " matrix " << b << " k " << k;
        double dot = 0;
        for (int i = 0; i < n; ++i) dot += static_cast<double>(r.V(b, i, k)) * A(i, k);
        // Eigenvectors agree up to sign; the bound grows as the spectral gap shrinks.
        EXPECT_NEAR(std::fabs(dot), 1.0, 10 * tol * scale / gap) << "n " << n << " matrix " << b << " k " << k;
      }
      std::vector<double> wb(n);
      for (int k = 0; k < n; ++k) wb[k] = r.w(b, k);
      expect_eigendecomposition(
          mats[b], wb, [&](int i, int k) { return static_cast<double>(r.V(b, i, k)); }, tol,
          "jacobi n " + std::to_string(n));
    }
  }
}

TEST(EigensolverJacobi, AgreesWithLapackOnRandomSymmetricDouble) {
  jacobi_vs_lapack<double>(true);
  jacobi_vs_lapack<double>(false);
}
TEST(EigensolverJacobi, AgreesWithLapackOnRandomSymmetricFloat) {
  jacobi_vs_lapack<float>(true);
  jacobi_vs_lapack<float>(false);
}

TEST(EigensolverJacobi, MixedBatch) {
  const int n = 12;
  std::mt19937 gen(99);
  std::vector<Dense> mats;
  std::vector<std::vector<double>> expected;  // known spectra, empty where only checked
  mats.push_back(Dense(n));                   // zero matrix
  expected.push_back(std::vector<double>(n, 0.0));
  Dense I(n);
  for (int i = 0; i < n; ++i) I(i, i) = 1.0;
  mats.push_back(I);
  expected.push_back(std::vector<double>(n, 1.0));
  Dense D(n);  // diagonal, unsorted, with a negative entry
  std::vector<double> dvals;
  for (int i = 0; i < n; ++i) dvals.push_back(D(i, i) = ((i * 7) % n) - 3.5);
  mats.push_back(D);
  std::sort(dvals.begin(), dvals.end());
  expected.push_back(dvals);
  mats.push_back(tridiagonal(n));
  std::vector<double> tri;
  for (int k = 0; k < n; ++k) tri.push_back(tridiagonal_eigenvalue(n, k));
  expected.push_back(tri);
  Dense R1(n), IU(n);  // rank one u u^T, and I + u u^T with an (n-1)-fold eigenvalue 1
  std::vector<double> u(n);
  double uu = 0;
  for (int i = 0; i < n; ++i) uu += (u[i] = 0.5 + 0.1 * i) * u[i];
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      R1(i, j) = u[i] * u[j];
      IU(i, j) = u[i] * u[j] + (i == j ? 1.0 : 0.0);
    }
  mats.push_back(R1);
  std::vector<double> r1(n, 0.0);
  r1[n - 1] = uu;
  expected.push_back(r1);
  mats.push_back(IU);
  std::vector<double> iu(n, 1.0);
  iu[n - 1] = 1.0 + uu;
  expected.push_back(iu);
  mats.push_back(random_spd(n, gen));
  expected.push_back({});
  mats.push_back(random_symmetric(n, gen, -0.5));  // indefinite
  expected.push_back({});
  Dense tiny = random_spd(n, gen), huge = tiny;  // scale invariance far from 1
  for (auto& x : tiny.a) x *= 1e-150;
  for (auto& x : huge.a) x *= 1e150;
  mats.push_back(tiny);
  expected.push_back({});
  mats.push_back(huge);
  expected.push_back({});
  Dense bad = random_spd(n, gen);
  bad(3, 5) = std::numeric_limits<double>::quiet_NaN();
  mats.push_back(bad);
  expected.push_back({});
  const int nbad = static_cast<int>(mats.size()) - 1;

  JacobiOptions opt;
  opt.team_size = test_team_size();
  const auto r  = run_jacobi<double>(mats, opt);
  for (int b = 0; b < static_cast<int>(mats.size()); ++b) {
    const std::string what = "matrix " + std::to_string(b);
    if (b == nbad) {
      EXPECT_EQ(r.info(b), eigh_info_nonfinite_input) << what;
      EXPECT_EQ(r.sweeps(b), 0) << what;
      continue;
    }
    ASSERT_EQ(r.info(b), 0) << what;
    EXPECT_LE(r.sweeps(b), 12) << what;
    if (b <= 2) {
      EXPECT_EQ(r.sweeps(b), 0) << what << ": a diagonal matrix needs no rotation";
    }
    std::vector<double> wb(n);
    for (int k = 0; k < n; ++k) wb[k] = r.w(b, k);
    double amax = 0;
    for (double x : mats[b].a) amax = std::max(amax, std::fabs(x));
    for (std::size_t k = 0; k < expected[b].size(); ++k) {
      EXPECT_NEAR(wb[k], expected[b][k], 1e-14 * std::max(amax, 1.0) * n) << what << " k " << k;
    }
    expect_eigendecomposition(
        mats[b], wb, [&](int i, int k) { return r.V(b, i, k); }, 1e-14, what);
  }
}

TEST(EigensolverJacobi, SmallEigenvaluesKeepRelativeAccuracy) {
  // A graded positive definite matrix: D H D with D = diag(1, 1e-3, 1e-6) and H well
  // conditioned, so the eigenvalues span 12 orders of magnitude. Jacobi's relative stopping
  // test recovers even the smallest to a few ulps of double, where an absolute test
  // (and LAPACK's tridiagonal reduction) only guarantees accuracy relative to the largest.
  const double d[3]    = {1.0, 1e-3, 1e-6};
  const double h[3][3] = {{2.0, 0.5, 0.25}, {0.5, 2.0, 0.5}, {0.25, 0.5, 2.0}};
  Dense A(3);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) A(i, j) = d[i] * h[i][j] * d[j];
  // The determinant is det(H) prod(d)^2 exactly; the eigenvalue product must reproduce it.
  const double detH = 2.0 * (4.0 - 0.25) - 0.5 * (1.0 - 0.125) + 0.25 * (0.25 - 0.5);
  const double det  = detH * 1e-18;
  JacobiOptions opt;
  const auto r = run_jacobi<double>({A}, opt);
  ASSERT_EQ(r.info(0), 0);
  EXPECT_NEAR(r.w(0, 0) * r.w(0, 1) * r.w(0, 2) / det, 1.0, 1e-13);
  EXPECT_GT(r.w(0, 0), 0.0);
}

TEST(EigensolverJacobi, ReportsNonConvergence) {
  std::mt19937 gen(5);
  JacobiOptions opt;
  opt.max_sweeps = 1;
  const auto r   = run_jacobi<double>({random_symmetric(16, gen, 0.0), tridiagonal(16)}, opt);
  for (int b = 0; b < 2; ++b) {
    EXPECT_EQ(r.info(b), eigh_info_not_converged);
    EXPECT_EQ(r.sweeps(b), 1);
  }
  // max_sweeps 0 still recognises a matrix that is already diagonal.
  opt.max_sweeps = 0;
  Dense D(4);
  for (int i = 0; i < 4; ++i) D(i, i) = 4.0 - i;
  const auto d = run_jacobi<double>({D}, opt);
  EXPECT_EQ(d.info(0), 0);
  EXPECT_EQ(d.w(0, 0), 1.0);
  EXPECT_EQ(d.V(0, 3, 0), 1.0);
}

TEST(EigensolverJacobi, ResultsDoNotDependOnTeamSizeScratchOrBatch) {
  // Every entry has one owner and a fixed sequence of operations, so a correct kernel gives
  // bitwise the same output for any team size, storage (team scratch, the caller's A, or the
  // work arrays in level-1 scratch, as for orders whose work arrays exceed a GPU block's shared
  // memory) and batch composition; a race would not.
  std::mt19937 gen(31);
  const int n = 17;
  std::vector<Dense> mats;
  for (int b = 0; b < 8; ++b) mats.push_back(random_symmetric(n, gen, 0.3 * b));
  JacobiOptions one, many, global, level1;
  one.team_size             = 1;
  many.team_size            = test_team_size();
  global.team_size          = test_team_size();
  global.use_team_scratch   = false;
  level1.team_size          = test_team_size();
  level1.team_scratch_limit = 64;  // less than the work arrays of one solve
  const auto r1             = run_jacobi<double>(mats, one);
  const auto rm             = run_jacobi<double>(mats, many);
  const auto rg             = run_jacobi<double>(mats, global);
  const auto r2             = run_jacobi<double>(mats, level1);
  const auto rs             = run_jacobi<double>({mats[5]}, many);
  for (int b = 0; b < 8; ++b) {
    ASSERT_EQ(r1.info(b), 0);
    EXPECT_EQ(r1.sweeps(b), rm.sweeps(b));
    EXPECT_EQ(r1.sweeps(b), rg.sweeps(b));
    EXPECT_EQ(r1.sweeps(b), r2.sweeps(b));
    for (int k = 0; k < n; ++k) {
      EXPECT_EQ(r1.w(b, k), rm.w(b, k));
      EXPECT_EQ(r1.w(b, k), rg.w(b, k));
      EXPECT_EQ(r1.w(b, k), r2.w(b, k));
      for (int i = 0; i < n; ++i) {
        EXPECT_EQ(r1.V(b, i, k), rm.V(b, i, k));
        EXPECT_EQ(r1.V(b, i, k), rg.V(b, i, k));
        EXPECT_EQ(r1.V(b, i, k), r2.V(b, i, k));
      }
    }
  }
  for (int k = 0; k < n; ++k) EXPECT_EQ(rs.w(0, k), rm.w(5, k));
}

TEST(EigensolverJacobi, LayoutLeftBatchGivesTheSameResult) {
  // GPU builds default to LayoutLeft, where one matrix's entries are strided by the batch
  // size; the solver indexes through the views, so the result must not change.
  std::mt19937 gen(41);
  const int nb = 3, n = 9;
  std::vector<Dense> mats;
  for (int b = 0; b < nb; ++b) mats.push_back(random_symmetric(n, gen, 0.0));
  Kokkos::View<double***, Kokkos::LayoutLeft> A("A", nb, n, n), V("V", nb, n, n);
  Kokkos::View<double**, Kokkos::LayoutLeft> w("w", nb, n);
  Kokkos::View<int*> info("info", nb), sweeps("sweeps", nb);
  auto Ah = Kokkos::create_mirror_view(A);
  for (int b = 0; b < nb; ++b)
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) Ah(b, i, j) = mats[b](i, j);
  for (bool scratch : {true, false}) {
    JacobiOptions opt;
    opt.team_size        = test_team_size();
    opt.use_team_scratch = scratch;
    Kokkos::deep_copy(A, Ah);
    batched_eigh_jacobi(A, w, V, info, sweeps, opt);
    const auto r = run_jacobi<double>(mats, opt);
    auto Vh      = Kokkos::create_mirror_view(V);
    auto wh      = Kokkos::create_mirror_view(w);
    Kokkos::deep_copy(Vh, V);
    Kokkos::deep_copy(wh, w);
    for (int b = 0; b < nb; ++b)
      for (int k = 0; k < n; ++k) {
        EXPECT_EQ(wh(b, k), r.w(b, k));
        for (int i = 0; i < n; ++i) EXPECT_EQ(Vh(b, i, k), r.V(b, i, k));
      }
  }
}

TEST(EigensolverJacobi, RejectsBadInput) {
  Kokkos::View<double***> A("A", 2, 3, 3), V("V", 2, 3, 3), Vbad("V", 2, 3, 4);
  Kokkos::View<double**> w("w", 2, 3);
  Kokkos::View<int*> info("info", 2), sweeps("sweeps", 2);
  try {
    batched_eigh_jacobi(A, w, Vbad, info, sweeps);
    FAIL() << "mismatched V accepted";
  } catch (const koptim::ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("V 2 x 3 x 4"), std::string::npos) << e.what();
  }
  JacobiOptions opt;
  opt.max_sweeps = -1;
  try {
    batched_eigh_jacobi(A, w, V, info, sweeps, opt);
    FAIL() << "negative max_sweeps accepted";
  } catch (const koptim::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("max_sweeps = -1"), std::string::npos) << e.what();
  }
}

}  // namespace
