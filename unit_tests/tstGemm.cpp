// The mode-j products of koptim_Gemm.hpp against sums over explicit multi-indices, for every
// mode of tensors of order 2 to 4, in float and double: Gram matrices of unfoldings
// (L <- beta L + alpha G_(j) G_(j)^T; through BLAS syrk and a mirrored triangle in host
// memory, GEMM elsewhere: the result must be exactly symmetric either way) and mode products;
// with host memory also their host-serial forms.
#include <koptim/linalg/koptim_Gemm.hpp>

#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace {

using Shape = std::vector<std::int64_t>;

std::int64_t product(const Shape& s) {
  std::int64_t p = 1;
  for (auto d : s) p *= d;
  return p;
}

// Row-major multi-index of flat index e.
std::vector<std::int64_t> unflatten(std::int64_t e, const Shape& s) {
  std::vector<std::int64_t> idx(s.size());
  for (int d = static_cast<int>(s.size()) - 1; d >= 0; --d) {
    idx[d] = e % s[d];
    e /= s[d];
  }
  return idx;
}

template <class T>
Kokkos::View<T*> device_copy(const std::vector<double>& x) {
  Kokkos::View<T*> v("v", x.size());
  auto h = Kokkos::create_mirror_view(v);
  for (std::size_t i = 0; i < x.size(); ++i) h(i) = static_cast<T>(x[i]);
  Kokkos::deep_copy(v, h);
  return v;
}

template <class T>
std::vector<double> host_values(const Kokkos::View<T*>& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return std::vector<double>(h.data(), h.data() + h.size());
}

constexpr bool host_memory = Kokkos::SpaceAccessibility<Kokkos::HostSpace, koptim::MemorySpace>::accessible;

template <class T>
void check_mode_products(double tol) {
  std::mt19937 rng(7);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (const Shape& shape : {Shape{5, 7}, Shape{3, 4, 6}, Shape{2, 3, 4, 5}, Shape{1, 9}, Shape{9, 1}}) {
    const std::int64_t n = product(shape);
    std::vector<double> g(n);
    for (auto& x : g) x = static_cast<double>(static_cast<T>(normal(rng)));
    const auto G = device_copy<T>(g);
    for (int j = 0; j < static_cast<int>(shape.size()); ++j) {
      SCOPED_TRACE(::testing::Message() << "order " << shape.size() << " mode " << j << " shape[0] " << shape[0]);
      const std::int64_t d = shape[j];
      // A symmetric starting L and a general A, as values of T.
      std::vector<double> L0(d * d), A(d * d);
      for (std::int64_t a = 0; a < d; ++a) {
        for (std::int64_t b = 0; b <= a; ++b)
          L0[a * d + b] = L0[b * d + a] = static_cast<double>(static_cast<T>(normal(rng)));
        for (std::int64_t b = 0; b < d; ++b) A[a * d + b] = static_cast<double>(static_cast<T>(normal(rng)));
      }
      const double alpha = 0.25, beta = 0.5;
      std::vector<double> expect(L0);
      for (auto& x : expect) x *= beta;
      for (std::int64_t e = 0; e < n; ++e) {
        for (std::int64_t f = 0; f < n; ++f) {
          auto ie = unflatten(e, shape), jf = unflatten(f, shape);
          bool same_rest = true;
          for (std::size_t k = 0; k < shape.size(); ++k)
            same_rest = same_rest && (k == std::size_t(j) || ie[k] == jf[k]);
          if (same_rest) expect[ie[j] * d + jf[j]] += alpha * g[e] * g[f];
        }
      }
      auto L = device_copy<T>(L0);
      koptim::linalg::gram_of_unfolding<T>(koptim::ExecutionSpace(), G.data(), shape, j, static_cast<T>(alpha),
                                           static_cast<T>(beta), L.data());
      const auto got = host_values(L);
      for (std::int64_t a = 0; a < d; ++a) {
        for (std::int64_t b = 0; b < d; ++b) {
          EXPECT_NEAR(got[a * d + b], expect[a * d + b], tol * (1.0 + std::abs(expect[a * d + b]))) << a << ", " << b;
          EXPECT_EQ(got[a * d + b], got[b * d + a]) << a << ", " << b;  // exactly symmetric
        }
      }
      // The host-serial form (what Shampoo's batches of blocks call on each host thread): the
      // same BLAS calls, so the same matrix to the bit.
      if constexpr (host_memory) {
        auto Ls = device_copy<T>(L0);
        koptim::linalg::host_gram_of_unfolding<T>(G.data(), shape, j, static_cast<T>(alpha), static_cast<T>(beta),
                                                  Ls.data());
        EXPECT_EQ(host_values(Ls), got);
      }
      // Y = M x_j op(A): Y[.. a ..] = sum_b op(A)_ab M[.. b ..]; A is handed over column-major.
      for (char trans : {'N', 'T'}) {
        std::vector<double> Acm(d * d);
        for (std::int64_t a = 0; a < d; ++a)
          for (std::int64_t b = 0; b < d; ++b) Acm[a + b * d] = A[a * d + b];
        const auto Ad = device_copy<T>(Acm);
        Kokkos::View<T*> Y("Y", n), Ys("Ys", n);
        koptim::linalg::mode_product<T>(koptim::ExecutionSpace(), G.data(), shape, j, Ad.data(), trans, Y.data());
        const auto y = host_values(Y);
        std::vector<double> ys;
        if constexpr (host_memory) {
          koptim::linalg::host_mode_product<T>(G.data(), shape, j, Ad.data(), trans, Ys.data());
          ys = host_values(Ys);
        }
        for (std::int64_t e = 0; e < n; ++e) {
          auto idx       = unflatten(e, shape);
          const auto row = idx[j];
          double sum     = 0;
          for (std::int64_t b = 0; b < d; ++b) {
            idx[j]          = b;
            std::int64_t fl = 0;
            for (std::size_t k = 0; k < shape.size(); ++k) fl = fl * shape[k] + idx[k];
            sum += (trans == 'N' ? A[row * d + b] : A[b * d + row]) * g[fl];
          }
          EXPECT_NEAR(y[e], sum, tol * (1.0 + std::abs(sum))) << "trans " << trans << " element " << e;
          if (host_memory)
            EXPECT_NEAR(ys[e], sum, tol * (1.0 + std::abs(sum))) << "host-serial, trans " << trans << " element " << e;
        }
      }
    }
  }
}

TEST(Gemm, ModeProductsFloat) { check_mode_products<float>(2e-5); }
TEST(Gemm, ModeProductsDouble) { check_mode_products<double>(1e-13); }

}  // namespace
