// The distributor that the sharded element-wise optimizers, Gefen and Shampoo share: the plan
// (each rank's pieces in order in its segment, segments of each rank's own size, one after
// another), the in-place all-gather of unequal segments in the values' precision and in
// bfloat16, the sharing of parts of parameters, and the agreement on errors. Run at 1-4 ranks.
#include "comm/koptim_Distributor.hpp"
#include "koptim_TestMpi.hpp"
#include "koptim_TestTensor.hpp"

#include <koptim/comm/koptim_BF16.hpp>
#include <koptim/koptim.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace {

using koptim::Impl::Distributor;
using koptim_test::world;

// Pieces of assorted sizes (an empty one among them) over the world's ranks, round-robin from
// the back so that no rank's pieces are contiguous in the piece order.
struct Plan {
  std::vector<std::int64_t> sizes{3, 5, 0, 4, 2, 7, 1, 6};
  std::vector<int> owners;
  // empty_rank: that rank owns the empty piece only (its segment is empty), its other pieces go
  // to the next rank (-1: none; at least 2 ranks).
  explicit Plan(int ranks, int empty_rank = -1) {
    for (std::size_t p = 0; p < sizes.size(); ++p) {
      owners.push_back(static_cast<int>((sizes.size() - 1 - p) % static_cast<std::size_t>(ranks)));
      if (empty_rank >= 0 && owners.back() == empty_rank) owners.back() = (empty_rank + 1) % ranks;
    }
    if (empty_rank >= 0) owners[2] = empty_rank;
  }
};

// One value whose nearest float is a tie between two bf16 values that its own nearest bf16 is not
// (a double is rounded to bf16 once, not through float).
double value(std::size_t piece, std::int64_t e) {
  if (piece == 1 && e == 0) return 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30);
  return 1.0 + 0.1234567 * static_cast<double>(piece) + 1e-3 * e;
}

TEST(Distributor, EachRanksPiecesLieInOrderInItsSegment) {
  for (int ranks : {1, 2, 3, 5}) {
    Plan plan(ranks);
    Distributor<float> d("test", plan.sizes, plan.owners, 0, ranks);
    std::vector<std::int64_t> fill(ranks, 0);
    for (std::size_t p = 0; p < plan.sizes.size(); ++p) {
      const int r = plan.owners[p];
      EXPECT_EQ(d.position(p), d.segment_start(r) + fill[r]) << "piece " << p << " at " << ranks << " ranks";
      EXPECT_EQ(d.piece(p).extent(0), static_cast<std::size_t>(plan.sizes[p]));
      fill[r] += plan.sizes[p];
    }
    // Segments of each rank's own total, one after another, nothing between them.
    std::int64_t start = 0;
    for (int r = 0; r < ranks; ++r) {
      EXPECT_EQ(d.segment_start(r), start) << "rank " << r << " at " << ranks << " ranks";
      EXPECT_EQ(d.segment_size(r), fill[r]) << "rank " << r << " at " << ranks << " ranks";
      start += fill[r];
    }
    EXPECT_EQ(start, 28);
    EXPECT_EQ(d.gathered().extent(0), 28u);
    EXPECT_EQ(d.exchange_bytes(), 28 * sizeof(float));
  }
}

// One piece far larger than the others (Gefen's whole tensors): the buffer and the bytes gathered
// are the pieces' total, not the number of ranks times the largest rank's share.
TEST(Distributor, OneLargePieceCostsItsOwnSizeOnly) {
  const std::vector<std::int64_t> sizes{65536, 100, 200, 300, 400, 500, 600, 700};
  for (int ranks : {2, 4, 8}) {
    std::vector<double> costs(sizes.begin(), sizes.end());
    const auto owners = koptim::Impl::assign_blocks(costs, ranks);
    for (int me = 0; me < ranks; ++me) {
      Distributor<float> d("test", sizes, owners, me, ranks, koptim::Impl::Wire::bfloat16);
      EXPECT_EQ(d.gathered().extent(0), 68336u) << ranks << " ranks";
      EXPECT_EQ(d.exchange_bytes(), 68336u * 2) << ranks << " ranks";
      EXPECT_EQ(d.buffer_bytes(), 68336u * (4 + 2)) << ranks << " ranks";
    }
  }
}

template <class T>
void exchange_and_check(koptim::Impl::Wire wire, const koptim::comm::Communicator* comm, int empty_rank = -1) {
  const int ranks = comm ? comm->size() : 1, me = comm ? comm->rank() : 0;
  Plan plan(ranks, empty_rank);
  if (empty_rank >= 0) {
    ASSERT_EQ(Distributor<T>("test", plan.sizes, plan.owners, me, ranks).segment_size(empty_rank), 0);
  }
  Distributor<T> d("test", plan.sizes, plan.owners, me, ranks, wire);
  for (std::size_t p = 0; p < d.num_pieces(); ++p) {
    if (!d.mine(p)) continue;
    Kokkos::View<T*, koptim::MemorySpace> src("src", plan.sizes[p]);
    auto h = Kokkos::create_mirror_view(src);
    for (std::int64_t e = 0; e < plan.sizes[p]; ++e) h(e) = static_cast<T>(value(p, e));
    Kokkos::deep_copy(src, h);
    Kokkos::deep_copy(d.piece(p), src);
  }
  d.exchange(koptim::ExecutionSpace(), comm);
  for (std::size_t p = 0; p < d.num_pieces(); ++p) {
    Kokkos::View<T*, koptim::MemorySpace> dst("dst", plan.sizes[p]);
    Kokkos::deep_copy(dst, d.piece(p));
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dst);
    for (std::int64_t e = 0; e < plan.sizes[p]; ++e) {
      T want = static_cast<T>(value(p, e));
      // The bf16 wire rounds every value, this rank's own included (one rank equals N).
      if (wire == koptim::Impl::Wire::bfloat16)
        want = static_cast<T>(koptim::comm::from_bf16(koptim::comm::to_bf16(want)));
      ASSERT_EQ(h(e), want) << "piece " << p << " element " << e << " on rank " << me;
    }
  }
  // The pieces cover the gathered buffer exactly once: no padding travels.
  std::vector<int> used(d.gathered().extent(0), 0);
  for (std::size_t p = 0; p < d.num_pieces(); ++p)
    for (std::int64_t e = 0; e < plan.sizes[p]; ++e) ++used[d.position(p) + e];
  for (std::size_t i = 0; i < used.size(); ++i) EXPECT_EQ(used[i], 1) << "element " << i;
}

TEST(Distributor, ExchangeGivesEveryRankEveryPiece) {
  exchange_and_check<float>(koptim::Impl::Wire::native, world().get());
  exchange_and_check<double>(koptim::Impl::Wire::native, world().get());
  // A rank with nothing to send (Gefen with more ranks than large tensors): the last, or rank 0.
  if (world()->size() > 1) {
    exchange_and_check<float>(koptim::Impl::Wire::native, world().get(), world()->size() - 1);
    exchange_and_check<float>(koptim::Impl::Wire::bfloat16, world().get(), world()->size() - 1);
    exchange_and_check<double>(koptim::Impl::Wire::native, world().get(), 0);
  }
  exchange_and_check<float>(koptim::Impl::Wire::native, nullptr);
}

TEST(Distributor, Bfloat16WireRoundsEveryValueOnEveryRankCount) {
  exchange_and_check<float>(koptim::Impl::Wire::bfloat16, world().get());
  exchange_and_check<double>(koptim::Impl::Wire::bfloat16, world().get());
  exchange_and_check<float>(koptim::Impl::Wire::bfloat16, nullptr);
  // Half the bytes on the wire.
  Plan plan(world()->size());
  Distributor<float> d("test", plan.sizes, plan.owners, world()->rank(), world()->size(), koptim::Impl::Wire::bfloat16);
  EXPECT_EQ(d.exchange_bytes(), 28u * 2);
}

// Parts of parameters (a slice of one, a whole other) updated by their owners reach every rank.
TEST(Distributor, ParameterSharingCopiesEveryPartToEveryRank) {
  const int ranks = world()->size(), me = world()->rank();
  koptim_test::TestTensor<float> a({5, 7}, "a"), b({4}, "b");
  koptim::ParameterSet ps;
  a.add_to(ps, "a");
  b.add_to(ps, "b");
  // a in pieces of 9 elements, owned round-robin; b whole, owned by the last rank.
  std::vector<koptim::Impl::ParameterPart> parts;
  for (std::int64_t off = 0, k = 0; off < 35; off += 9, ++k)
    parts.push_back({0, off, std::min<std::int64_t>(9, 35 - off), static_cast<int>(k % ranks)});
  parts.push_back({1, 0, 4, ranks - 1});
  // Each rank writes its own parts (value 100 * (part + 1) + element); the others hold -1.
  auto fill = [&](std::int64_t param, std::int64_t i) {
    for (std::size_t k = 0; k < parts.size(); ++k)
      if (parts[k].param == param && i >= parts[k].offset && i < parts[k].offset + parts[k].size)
        return parts[k].owner == me ? 100.0 * static_cast<double>(k + 1) + static_cast<double>(i) : -1.0;
    return -2.0;
  };
  a.set(false, [&](std::int64_t i) { return fill(0, i); });
  b.set(false, [&](std::int64_t i) { return fill(1, i); });
  koptim::Impl::ParameterSharing<float> sharing("test", parts, me, ranks);
  sharing.share(koptim::ExecutionSpace(), ps, world().get());
  const auto av = a.get(), bv = b.get();
  for (std::size_t k = 0; k < parts.size(); ++k) {
    const auto& values = parts[k].param == 0 ? av : bv;
    for (std::int64_t i = parts[k].offset; i < parts[k].offset + parts[k].size; ++i)
      EXPECT_EQ(values[i], 100.0 * static_cast<double>(k + 1) + static_cast<double>(i))
          << "part " << k << " rank " << me;
  }
}

TEST(Distributor, RunTogetherGivesEveryRankTheLowestFailingRanksError) {
  const int ranks = world()->size(), bad = ranks - 1;
  try {
    koptim::Impl::run_together(world().get(), [&] {
      if (world()->rank() == bad) throw koptim::StateError("broken on " + std::to_string(bad));
    });
    ADD_FAILURE() << "no error on rank " << world()->rank();
  } catch (const koptim::StateError& e) {
    const std::string want =
        (ranks > 1 ? "rank " + std::to_string(bad) + ": " : std::string()) + "broken on " + std::to_string(bad);
    EXPECT_EQ(std::string(e.what()), want);
  }
  // Without a communicator the exception passes unchanged.
  EXPECT_THROW(koptim::Impl::run_together(nullptr, [] { throw koptim::ShapeError("x"); }), koptim::ShapeError);
  EXPECT_NO_THROW(koptim::Impl::run_together(world().get(), [] {}));
}

TEST(Distributor, AssignBlocksRefusesNoRanks) {
  EXPECT_THROW(koptim::Impl::assign_blocks({1.0, 2.0}, 0), koptim::ConfigError);
  EXPECT_EQ(koptim::Impl::assign_blocks({}, 3), std::vector<int>{});
}

}  // namespace
