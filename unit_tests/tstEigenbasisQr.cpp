// linalg::batched_eigenbasis_qr, the warm-started refresh of eigenbases (orthogonal iteration):
// against closed forms (the [-1, 2, -1] matrix's eigenvectors, a plane rotation of a diagonal
// matrix whose off-diagonal norm is known) and a brute-force oracle (the power step A V and a
// Gram-Schmidt orthonormalisation in long double: the QR factor is unique up to column signs).
#include <koptim/linalg/koptim_EigenbasisQr.hpp>

#include "koptim_TestDense.hpp"

#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace {

using koptim::linalg::batched_eigenbasis_qr;
using koptim::linalg::batched_eigenbasis_qr_team;
using koptim::linalg::QrRefreshOptions;
using koptim_test::Dense;

template <class T>
using Batch = Kokkos::View<T***, Kokkos::LayoutRight, Kokkos::HostSpace>;

struct Run {
  std::vector<int> info, iterations;
};

// A and V (column k of V(b) = vector k) for every matrix b, then the refresh: the LAPACK form on
// host views, or (team) the team form on views of the default execution space. V is replaced with
// the result.
template <class T>
Run run_refresh(const std::vector<Dense>& A, Batch<T>& V, const QrRefreshOptions& o, bool team) {
  const int nb = static_cast<int>(A.size()), n = A.empty() ? 0 : A[0].n;
  Kokkos::View<T***> a("A", nb, n, n), v("V", nb, n, n);
  Kokkos::View<int*> info("info", nb), it("iterations", nb);
  auto ah = Kokkos::create_mirror_view(a);
  auto vh = Kokkos::create_mirror_view(v);
  auto ih = Kokkos::create_mirror_view(info);
  auto th = Kokkos::create_mirror_view(it);
  koptim_test::fill_batch(ah, A);
  Kokkos::deep_copy(vh, V);
  if (team) {
    Kokkos::View<T***> q("Q", nb, n, n), p("P", nb, n, n);
    Kokkos::View<T**> tau("tau", nb, n);
    Kokkos::View<double**> d("d", nb, n);
    Kokkos::deep_copy(a, ah);
    Kokkos::deep_copy(v, vh);
    batched_eigenbasis_qr_team(Kokkos::DefaultExecutionSpace(), a, v, info, it, o, q, p, tau, d);
    Kokkos::deep_copy(vh, v);
    Kokkos::deep_copy(ih, info);
    Kokkos::deep_copy(th, it);
  } else {
    batched_eigenbasis_qr(ah, vh, ih, th, o);
  }
  Kokkos::deep_copy(V, vh);
  Run r;
  for (int b = 0; b < nb; ++b) {
    r.info.push_back(ih(b));
    r.iterations.push_back(th(b));
  }
  return r;
}
template <class T>
Run refresh(const std::vector<Dense>& A, Batch<T>& V, const QrRefreshOptions& o) {
  return run_refresh<T>(A, V, o, false);
}
template <class T>
Run refresh_team(const std::vector<Dense>& A, Batch<T>& V, const QrRefreshOptions& o) {
  return run_refresh<T>(A, V, o, true);
}

// The closed-form eigenvectors of tridiagonal(n), ascending (or descending) eigenvalues.
template <class T>
Batch<T> tridiagonal_basis(int n, bool descending) {
  Batch<T> V("V", 1, n, n);
  for (int k = 0; k < n; ++k)
    for (int i = 0; i < n; ++i)
      V(0, i, descending ? n - 1 - k : k) = static_cast<T>(koptim_test::tridiagonal_vector(n, i, k));
  return V;
}

template <class T>
void exact_basis_needs_no_step() {
  const int n        = 9;
  const auto A       = koptim_test::tridiagonal(n);
  const auto ordered = tridiagonal_basis<T>(n, false);
  for (const bool descending : {false, true}) {
    auto V = tridiagonal_basis<T>(n, descending);
    QrRefreshOptions o;
    // Above the test's resolution, about sqrt(n eps) (7e-4 in float, 3e-8 in double at n = 9).
    o.tolerance  = std::is_same<T, float>::value ? 1e-2 : 1e-6;
    const auto r = refresh<T>({A}, V, o);
    EXPECT_EQ(r.info[0], 0);
    EXPECT_EQ(r.iterations[0], 0);
    // Only the order changes: the same numbers, bit for bit, in ascending order.
    for (int i = 0; i < n; ++i)
      for (int k = 0; k < n; ++k) ASSERT_EQ(V(0, i, k), ordered(0, i, k)) << descending << " " << i << " " << k;
  }
}
TEST(EigenbasisQr, ExactBasisNeedsNoStepOnlyTheOrderDouble) { exact_basis_needs_no_step<double>(); }

// Tolerance 0: every refresh takes max_iterations steps, even from an exact basis (which the steps
// keep, up to rounding and signs).
TEST(EigenbasisQr, ZeroToleranceAlwaysTakesEveryStep) {
  const int n = 9;
  auto V      = tridiagonal_basis<double>(n, false);
  QrRefreshOptions o;
  o.tolerance      = 0.0;
  o.max_iterations = 3;
  const auto r     = refresh<double>({koptim_test::tridiagonal(n)}, V, o);
  EXPECT_EQ(r.info[0], 0);
  EXPECT_EQ(r.iterations[0], 3);
  for (int k = 0; k < n; ++k)
    for (int i = 0; i < n; ++i)
      EXPECT_NEAR(std::fabs(V(0, i, k)), std::fabs(koptim_test::tridiagonal_vector(n, i, k)), 1e-10);
}
TEST(EigenbasisQr, ExactBasisNeedsNoStepOnlyTheOrderFloat) { exact_basis_needs_no_step<float>(); }

// One step against the oracle: Q = GramSchmidt(A V) (long double), columns ordered by q^T A q.
template <class T>
void one_step_is_orthogonal_iteration() {
  std::mt19937 gen(11);
  const int n = 7, nb = 3;
  std::vector<Dense> A;
  for (int b = 0; b < nb; ++b) A.push_back(koptim_test::random_spd(n, gen, 1.0, 0.25 * n));
  // Start: the [-1, 2, -1] basis, orthonormal and far from A's eigenvectors.
  Batch<T> V("V", nb, n, n);
  const auto start = tridiagonal_basis<T>(n, false);
  for (int b = 0; b < nb; ++b)
    for (int i = 0; i < n; ++i)
      for (int k = 0; k < n; ++k) V(b, i, k) = start(0, i, k);
  QrRefreshOptions o;
  o.tolerance      = 0.0;
  const auto r     = refresh<T>(A, V, o);
  const double tol = std::is_same<T, float>::value ? 2e-4 : 1e-11;
  for (int b = 0; b < nb; ++b) {
    EXPECT_EQ(r.info[b], 0);
    EXPECT_EQ(r.iterations[b], 1);
    // P = A V0, then modified Gram-Schmidt twice.
    std::vector<std::vector<long double>> q(n, std::vector<long double>(n, 0.0L));
    for (int k = 0; k < n; ++k)
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) q[k][i] += static_cast<long double>(A[b](i, j)) * start(0, j, k);
    for (int k = 0; k < n; ++k) {
      for (int pass = 0; pass < 2; ++pass) {
        for (int l = 0; l < k; ++l) {
          long double d = 0;
          for (int i = 0; i < n; ++i) d += q[l][i] * q[k][i];
          for (int i = 0; i < n; ++i) q[k][i] -= d * q[l][i];
        }
      }
      long double nrm = 0;
      for (int i = 0; i < n; ++i) nrm += q[k][i] * q[k][i];
      for (int i = 0; i < n; ++i) q[k][i] /= std::sqrt(nrm);
    }
    std::vector<long double> est(n, 0.0L);
    for (int k = 0; k < n; ++k)
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) est[k] += q[k][i] * A[b](i, j) * q[k][j];
    std::vector<int> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return est[x] < est[y]; });
    for (int k = 0; k < n; ++k) {
      const auto& e   = q[order[k]];
      long double dot = 0;
      for (int i = 0; i < n; ++i) dot += e[i] * V(b, i, k);
      const long double sign = dot < 0 ? -1.0L : 1.0L;
      for (int i = 0; i < n; ++i)
        EXPECT_NEAR(static_cast<double>(V(b, i, k)), static_cast<double>(sign * e[i]), tol)
            << "matrix " << b << " column " << k << " entry " << i;
    }
  }
}
TEST(EigenbasisQr, OneStepIsOrthogonalIterationDouble) { one_step_is_orthogonal_iteration<double>(); }
TEST(EigenbasisQr, OneStepIsOrthogonalIterationFloat) { one_step_is_orthogonal_iteration<float>(); }

// From the identity, repeated steps converge to the closed-form eigenvectors of tridiagonal(6)
// (eigenvalue ratio at most 0.854 per step: about 150 steps to 1e-10).
TEST(EigenbasisQr, ConvergesToTheEigenvectors) {
  const int n = 6;
  Batch<double> V("V", 1, n, n);
  for (int i = 0; i < n; ++i) V(0, i, i) = 1.0;
  QrRefreshOptions o;
  o.max_iterations = 1000;
  o.tolerance      = 1e-10;
  const auto r     = refresh<double>({koptim_test::tridiagonal(n)}, V, o);
  EXPECT_EQ(r.info[0], 0);
  EXPECT_GT(r.iterations[0], 50);
  EXPECT_LT(r.iterations[0], 1000);
  for (int k = 0; k < n; ++k) {
    double dot = 0;
    for (int i = 0; i < n; ++i) dot += V(0, i, k) * koptim_test::tridiagonal_vector(n, i, k);
    EXPECT_NEAR(std::fabs(dot), 1.0, 1e-9) << k;
  }
}

// D = diag(1, 2, 3, 4) seen through a rotation by theta in the plane of e0 and e1: B = V^T D V has
// off-diagonal norm sqrt(2) |sin cos| (2 - 1) and ||B||_F = sqrt(30). The tolerance decides, on
// either side of that ratio.
TEST(EigenbasisQr, ToleranceDecidesAtTheClosedFormRatio) {
  const int n = 4;
  Dense D(n);
  for (int i = 0; i < n; ++i) D(i, i) = i + 1.0;
  const double th = 0.3, c = std::cos(th), s = std::sin(th);
  const double ratio = std::sqrt(2.0) * std::fabs(s * c) / std::sqrt(30.0);
  for (const double f : {1.0 + 1e-9, 1.0 - 1e-9}) {
    Batch<double> V("V", 1, n, n);
    V(0, 0, 0) = c;
    V(0, 1, 0) = s;
    V(0, 0, 1) = -s;
    V(0, 1, 1) = c;
    V(0, 2, 2) = V(0, 3, 3) = 1.0;
    QrRefreshOptions o;
    o.tolerance  = ratio * f;
    const auto r = refresh<double>({D}, V, o);
    EXPECT_EQ(r.info[0], 0);
    EXPECT_EQ(r.iterations[0], f > 1.0 ? 0 : 1) << f;
  }
}

// A NaN in the input (lower triangle) is reported and V kept; a zero matrix is already "converged"
// and keeps V; a result that overflows is reported and V kept. refresh_with: refresh or refresh_team.
template <class Refresh>
void expect_reports_and_keeps(const Refresh& refresh_with) {
  const int n = 4;
  Dense nan   = koptim_test::tridiagonal(n), zero(n), huge(n);
  nan(2, 1)   = std::nan("");
  for (auto& x : huge.a) x = 1e308;
  Batch<double> V("V", 3, n, n);
  for (int b = 0; b < 3; ++b)
    for (int i = 0; i < n; ++i)
      for (int k = 0; k < n; ++k) V(b, i, k) = 0.5 * ((i * k) % 2 == 0 || i == 0 ? 1.0 : -1.0);
  Batch<double> before("before", 3, n, n);
  Kokkos::deep_copy(before, V);
  const Run r = refresh_with({nan, zero, huge}, V, QrRefreshOptions{});
  EXPECT_EQ(r.info[0], koptim::linalg::eigh_info_nonfinite_input);
  EXPECT_EQ(r.info[1], 0);
  EXPECT_EQ(r.iterations[1], 0);
  EXPECT_EQ(r.info[2], koptim::linalg::eigenbasis_info_nonfinite_result);
  for (int b = 0; b < 3; ++b)
    for (int i = 0; i < n; ++i)
      for (int k = 0; k < n; ++k) ASSERT_EQ(V(b, i, k), before(b, i, k)) << b;
}

// ... and bad options and extents are refused.
TEST(EigenbasisQr, ReportsAndKeepsTheBasis) {
  expect_reports_and_keeps(refresh<double>);
  const int n = 4;
  Batch<double> V("V", 3, n, n);
  Batch<double> a("A", 3, n, n);
  Kokkos::View<int*, Kokkos::HostSpace> info("info", 3), it("it", 2);
  EXPECT_THROW(batched_eigenbasis_qr(a, V, info, it), koptim::ShapeError);
  Kokkos::View<int*, Kokkos::HostSpace> it3("it", 3);
  QrRefreshOptions bad;
  bad.tolerance = 1.5;
  EXPECT_THROW(batched_eigenbasis_qr(a, V, info, it3, bad), koptim::ConfigError);
}

// The team form takes the same decisions as the LAPACK form and gives the same bases up to
// rounding and column signs: a batch of an exact basis (no step) and bases far from the answer
// (one or more steps), with the default tolerance and with 0.
template <class T>
void team_form_agrees_with_lapack() {
  std::mt19937 gen(23);
  const int n          = 9;
  std::vector<Dense> A = {koptim_test::tridiagonal(n)};
  for (int b = 0; b < 3; ++b) A.push_back(koptim_test::random_spd(n, gen, 1.0, 0.25 * n));
  const auto start = tridiagonal_basis<T>(n, true);  // descending: the exact basis needs ordering
  const double tol = std::is_same<T, float>::value ? 5e-4 : 1e-11;
  for (const double tolerance : {0.01, 0.0}) {
    for (const int steps : {1, 3}) {
      Batch<T> V1("V1", A.size(), n, n), V2("V2", A.size(), n, n);
      for (std::size_t b = 0; b < A.size(); ++b)
        for (int i = 0; i < n; ++i)
          for (int k = 0; k < n; ++k) V1(b, i, k) = V2(b, i, k) = start(0, i, k);
      QrRefreshOptions o;
      o.tolerance      = tolerance;
      o.max_iterations = steps;
      const auto r1    = refresh<T>(A, V1, o);
      const auto r2    = refresh_team<T>(A, V2, o);
      EXPECT_EQ(r1.info, r2.info) << tolerance << " " << steps;
      EXPECT_EQ(r1.iterations, r2.iterations) << tolerance << " " << steps;
      if (tolerance > 0) EXPECT_EQ(r2.iterations[0], 0);
      for (std::size_t b = 0; b < A.size(); ++b) {
        for (int k = 0; k < n; ++k) {
          double dot = 0;
          for (int i = 0; i < n; ++i) dot += static_cast<double>(V1(b, i, k)) * V2(b, i, k);
          const double sign = dot < 0 ? -1.0 : 1.0;
          for (int i = 0; i < n; ++i)
            ASSERT_NEAR(static_cast<double>(V2(b, i, k)), sign * V1(b, i, k), tol)
                << "matrix " << b << " column " << k << " tolerance " << tolerance << " steps " << steps;
        }
      }
    }
  }
}
TEST(EigenbasisQr, TeamFormAgreesWithLapackDouble) { team_form_agrees_with_lapack<double>(); }
TEST(EigenbasisQr, TeamFormAgreesWithLapackFloat) { team_form_agrees_with_lapack<float>(); }

// The team form at any scale of A: its Householder norms were sums of squares in T, which for a
// float factor with entries of 1e-16 (a rank-2 factor: the columns of A V that span its null space
// are 1e-7 times smaller still) fell below the smallest normal float and gave a Q far from
// orthogonal, reported as a success; at 1e20 they overflowed (NaN). One QR step on a rank-2
// factor (its basis orthonormal) and on a full-rank one (the same basis as the LAPACK form, up to
// signs), from an unrelated orthonormal start.
template <class T>
void team_form_at_any_scale(const std::vector<double>& scales) {
  std::mt19937 gen(5);
  const int n = 16;
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  Dense low(n);
  std::vector<double> g(2 * n);
  for (auto& x : g) x = u(gen);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) low(i, j) = g[i] * g[j] + g[n + i] * g[n + j];
  const Dense full = koptim_test::random_spd(n, gen, 1.0, 0.25 * n);
  const double tol = std::is_same<T, float>::value ? 1e-4 : 1e-12;
  QrRefreshOptions o;
  o.tolerance      = 0.0;  // one step, whatever the start
  o.max_iterations = 1;
  for (const double scale : scales) {
    std::vector<Dense> A = {low, full};
    for (auto& m : A)
      for (auto& x : m.a) x *= scale;
    const auto start = tridiagonal_basis<T>(n, false);
    Batch<T> V1("V1", 2, n, n), V2("V2", 2, n, n);
    for (int b = 0; b < 2; ++b)
      for (int i = 0; i < n; ++i)
        for (int k = 0; k < n; ++k) V1(b, i, k) = V2(b, i, k) = start(0, i, k);
    const auto r1 = refresh<T>(A, V1, o);
    const auto r2 = refresh_team<T>(A, V2, o);
    EXPECT_EQ(r2.info, std::vector<int>({0, 0})) << "scale " << scale;
    EXPECT_EQ(r2.iterations, std::vector<int>({1, 1})) << "scale " << scale;
    for (int b = 0; b < 2; ++b) {
      double worst = 0;
      for (int k = 0; k < n; ++k)
        for (int l = 0; l < n; ++l) {
          double dot = 0;
          for (int i = 0; i < n; ++i) dot += static_cast<double>(V2(b, i, k)) * V2(b, i, l);
          worst = std::max(worst, std::abs(dot - (k == l ? 1.0 : 0.0)));
        }
      EXPECT_LE(worst, tol) << "matrix " << b << ", scale " << scale << ": V^T V - I";
    }
    ASSERT_EQ(r1.info[1], 0);
    for (int k = 0; k < n; ++k) {
      double dot = 0;
      for (int i = 0; i < n; ++i) dot += static_cast<double>(V1(1, i, k)) * V2(1, i, k);
      const double sign = dot < 0 ? -1.0 : 1.0;
      for (int i = 0; i < n; ++i)
        ASSERT_NEAR(static_cast<double>(V2(1, i, k)), sign * V1(1, i, k), 50 * tol) << "scale " << scale;
    }
  }
}
// A factor whose parts differ in scale: after P is scaled to its largest entry, a column of 1e-40
// (subnormal in float) had a reflector scale 1 / (alpha - beta) beyond the largest float (Inf,
// then NaN: a failure where LAPACK's form succeeds). The block [[1, .5], [.5, 1]] is not yet
// diagonal in V = I, so the QR step runs.
TEST(EigenbasisQr, TeamFormWithATinyBlockFloat) {
  const double s = 1e-40;
  Dense A(4);
  A(0, 0) = A(1, 1) = 1.0;
  A(0, 1) = A(1, 0) = 0.5;
  A(2, 2) = A(2, 3) = A(3, 2) = A(3, 3) = s;
  Batch<float> V("V", 1, 4, 4);
  for (int i = 0; i < 4; ++i) V(0, i, i) = 1.0f;
  QrRefreshOptions o;
  o.tolerance      = 0.0;
  o.max_iterations = 1;
  const auto r     = refresh_team<float>({A}, V, o);
  EXPECT_EQ(r.info, std::vector<int>({0}));
  for (int k = 0; k < 4; ++k)
    for (int l = 0; l < 4; ++l) {
      double dot = 0;
      for (int i = 0; i < 4; ++i) dot += static_cast<double>(V(0, i, k)) * V(0, i, l);
      EXPECT_NEAR(dot, k == l ? 1.0 : 0.0, 1e-6) << k << "," << l;
    }
}

TEST(EigenbasisQr, TeamFormAtAnyScaleFloat) { team_form_at_any_scale<float>({1.0, 1e-16, 1e-30, 1e20, 1e30}); }
TEST(EigenbasisQr, TeamFormAtAnyScaleDouble) { team_form_at_any_scale<double>({1.0, 1e-170, 1e170}); }

TEST(EigenbasisQr, TeamFormReportsAndKeepsTheBasis) { expect_reports_and_keeps(refresh_team<double>); }

}  // namespace
