// The element-wise and lane-parallel helpers of koptim's kernels: every element visited exactly
// once whatever n is against the host chunk (empty, one element, chunk boundaries, a tail), and
// lane sums equal to exact integer sums.
#include <koptim/core/impl/koptim_Elementwise.hpp>
#include "core/koptim_Lanes.hpp"

#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <vector>

namespace {

using koptim::ExecutionSpace;
using koptim::MemorySpace;

std::vector<std::int64_t> sizes() {
  const std::int64_t c = koptim::Impl::host_chunk;
  return {0, 1, 7, c - 1, c, c + 1, 3 * c + 5, 100003};
}

// The kernels are launched from free functions: CUDA refuses extended lambdas in a gtest TEST
// body (a private member function of the generated class).
void add_index_plus_one(const Kokkos::View<std::int64_t*, MemorySpace>& hits, std::int64_t n) {
  koptim::Impl::for_each_element(
      koptim::ExecutionSpace(), "test::for_each_element", n, KOKKOS_LAMBDA(const std::int64_t i) {
        hits(i) += i + 1;  // each index once: no two iterations touch the same element
      });
}

double lane_sum_of_indices(std::int64_t n) {
  return koptim::Impl::lane_sum(
      koptim::ExecutionSpace(), "test::lane_sum", n,
      KOKKOS_LAMBDA(const std::int64_t i) { return static_cast<double>(i); });
}

// team_sums(t) = sum over i < n of i (t + 1), one team per entry.
void team_lane_sums(const Kokkos::View<double*, MemorySpace>& team_sums, std::int64_t n) {
  using Policy = Kokkos::TeamPolicy<ExecutionSpace>;
  // Two threads a team where the backend has them, so that partial lanes are joined.
  const int team_size = ExecutionSpace().concurrency() >= 2 ? 2 : 1;
  Kokkos::parallel_for(
      "test::team_lane_sum", Policy(static_cast<int>(team_sums.extent(0)), team_size),
      KOKKOS_LAMBDA(const Policy::member_type& team) {
        const int t    = team.league_rank();
        const double s = koptim::Impl::team_lane_sum(team, n, [&](std::int64_t i) { return double(i * (t + 1)); });
        Kokkos::single(Kokkos::PerTeam(team), [&]() { team_sums(t) = s; });
      });
}

TEST(Elementwise, VisitsEveryElementOnce) {
  for (const std::int64_t n : sizes()) {
    Kokkos::View<std::int64_t*, MemorySpace> hits("hits", n);
    add_index_plus_one(hits, n);
    const auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), hits);
    for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(h(i), i + 1) << "n " << n << " element " << i;
  }
}

// Sums of integers below 2^53 are exact in double whatever the order: lane sums must equal them.
TEST(Elementwise, LaneSumsAreExact) {
  for (const std::int64_t n : sizes()) {
    const double sum = lane_sum_of_indices(n);
    EXPECT_EQ(sum, static_cast<double>(n) * static_cast<double>(n - 1) / 2.0) << "n " << n;
    Kokkos::View<double*, MemorySpace> team_sums("team_sums", 3);
    team_lane_sums(team_sums, n);
    const auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), team_sums);
    for (int t = 0; t < 3; ++t)
      EXPECT_EQ(h(t), (t + 1) * static_cast<double>(n) * static_cast<double>(n - 1) / 2.0)
          << "n " << n << " team " << t;
  }
}

}  // namespace
