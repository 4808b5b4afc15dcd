// Small dense symmetric matrices on the host, in double, for building eigensolver and matrix-root
// inputs and their closed-form references.
#ifndef KOPTIM_TEST_DENSE_HPP
#define KOPTIM_TEST_DENSE_HPP

#include <cmath>
#include <random>
#include <vector>

namespace koptim_test {

// Row-major n x n matrix.
struct Dense {
  int n = 0;
  std::vector<double> a;
  explicit Dense(int n_) : n(n_), a(static_cast<std::size_t>(n_) * n_, 0.0) {}
  double& operator()(int i, int j) { return a[static_cast<std::size_t>(i) * n + j]; }
  double operator()(int i, int j) const { return a[static_cast<std::size_t>(i) * n + j]; }
};

// The [-1, 2, -1] tridiagonal matrix.
inline Dense tridiagonal(int n) {
  Dense A(n);
  for (int i = 0; i < n; ++i) {
    A(i, i) = 2.0;
    if (i + 1 < n) A(i, i + 1) = A(i + 1, i) = -1.0;
  }
  return A;
}

// Eigenpair k (0-based, ascending) of tridiagonal(n): 2 - 2 cos((k+1) pi / (n+1)) and the unit
// vector sqrt(2/(n+1)) sin((j+1)(k+1) pi / (n+1)).
inline double tridiagonal_eigenvalue(int n, int k) { return 2.0 - 2.0 * std::cos((k + 1) * M_PI / (n + 1)); }
inline double tridiagonal_vector(int n, int j, int k) {
  return std::sqrt(2.0 / (n + 1)) * std::sin((j + 1) * (k + 1) * M_PI / (n + 1));
}

// G G^T / divisor + shift I with G uniform in [-1, 1): symmetric positive definite, eigenvalues
// generically apart.
inline Dense random_spd(int n, std::mt19937& gen, double divisor, double shift) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  Dense G(n), A(n);
  for (auto& x : G.a) x = u(gen);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int k = 0; k < n; ++k) s += G(i, k) * G(j, k);
      A(i, j) = s / divisor + (i == j ? shift : 0.0);
    }
  return A;
}

// h(b, i, j) = mats[b](i, j) for a host-accessible batch h (rank 3, batch x n x n), in h's scalar type.
template <class Batch>
void fill_batch(const Batch& h, const std::vector<Dense>& mats) {
  using T = typename Batch::non_const_value_type;
  for (std::size_t b = 0; b < mats.size(); ++b)
    for (int i = 0; i < mats[b].n; ++i)
      for (int j = 0; j < mats[b].n; ++j) h(b, i, j) = static_cast<T>(mats[b](i, j));
}

}  // namespace koptim_test

#endif
