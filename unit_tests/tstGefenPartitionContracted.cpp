// The partition rules compiled as a GPU compiler compiles device code by default: with
// floating-point contraction (fused multiply-adds formed from a*b + c wherever the target has
// them; CMake gives this file -ffp-contract=fast, and the test preset's -march=native has FMA on
// x86-64 since Haswell). The rules' promise that equal inputs cancel exactly, so that constant
// gradients share nothing, must not depend on how the compiler rounds: g^2 - c fused into one
// fma(g, g, -c) leaves the rounding error of c in every term, and the variance-drop rule then
// picked partitions of 30 and 2048 for a constant gradient.
#include <koptim/gefen/koptim_GefenPartition.hpp>

#include <Kokkos_Core.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace {

template <class T>
Kokkos::View<T*> device_copy(const std::vector<double>& g) {
  Kokkos::View<T*> v("g", g.size());
  auto h = Kokkos::create_mirror_view(v);
  for (std::size_t i = 0; i < g.size(); ++i) h(i) = static_cast<T>(g[i]);
  Kokkos::deep_copy(v, h);
  return v;
}

TEST(GefenPartitionContracted, ConstantGradientsGive1) {
  for (double value : {1e-3, -2.5, 0.1, 1e10, 1.0 / 3.0}) {
    for (std::int64_t n : {60, 64 * 96, 4096, 7000, 3 * 5 * 7 * 11 * 13}) {
      const std::vector<double> g(n, value);
      EXPECT_EQ(koptim::gefen::choose_partition(g.data(), n), 1) << "value " << value << ", n " << n;
      EXPECT_EQ(koptim::gefen::choose_partition(device_copy<float>(g)), 1) << "value " << value << ", n " << n;
      EXPECT_EQ(koptim::gefen::choose_partition_variance_drop(g.data(), n), 1) << "value " << value << ", n " << n;
      EXPECT_EQ(koptim::gefen::choose_partition_variance_drop(device_copy<double>(g)), 1)
          << "value " << value << ", n " << n;
      EXPECT_EQ(koptim::gefen::choose_partition_variance_drop(device_copy<float>(g)), 1)
          << "value " << value << ", n " << n;
    }
  }
}

// The terms themselves: every shifted square of a constant gradient is exactly 0, fused or not.
TEST(GefenPartitionContracted, ShiftedSquaresOfEqualValuesAreZero) {
  namespace gimpl = koptim::gefen::Impl;
  for (double value : {1e-3, 0.1, 1.0 / 3.0, -7.77e5}) {
    const std::int64_t n = 1000;
    const auto g         = device_copy<double>(std::vector<double>(n, value));
    using View           = Kokkos::View<const double*>;
    const double x0      = gimpl::first_on_device(View(g), gimpl::AsDouble());
    const auto p1        = gimpl::device_prefix(n, gimpl::ShiftedSquare<View>{g, x0});
    const auto p2        = gimpl::device_prefix(n, gimpl::ShiftedSquareSquared<View>{g, x0});
    for (std::int64_t i = 0; i <= n; ++i) {
      ASSERT_EQ(p1(i), 0.0) << "value " << value << ", prefix " << i;
      ASSERT_EQ(p2(i), 0.0) << "value " << value << ", prefix " << i;
    }
  }
}

}  // namespace
