// Gefen with shard_state over a communicator: each rank keeps the state of whole tensors; N ranks
// give parameters and a codebook bitwise equal to one process, the state per rank falls to ~1/N
// (plus at most one tensor), and ranks that disagree, or fail alone, fail on every rank.
#include "koptim_TestData.hpp"
#include "koptim_TestMpi.hpp"
#include "koptim_TestTensor.hpp"

#include <koptim/koptim.hpp>

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <set>

namespace {

using koptim::GefenSecondMoment;
using koptim_test::TestTensor;
using koptim_test::world;

// The codebook and its lookup (8193 pairs in 32-bit words, thresholds in float and double), on
// every rank.
constexpr long long replicated = 256 * 4 + 4 * 8193 + 256 * (4 + 8);

// Per-row scales give a tensor p = its row length.
double gradient(std::uint64_t tensor, int step, std::int64_t i, std::int64_t row_len) {
  const int e = static_cast<int>(koptim_test::mix(tensor * 1000 + i / row_len) % 7) - 3;
  return std::ldexp(koptim_test::value(17, tensor, step, i), e);
}

// A magnitude growing geometrically along the tensor: log g0^2 is linear, every block size has
// the same contrast per element, so the neighbour-contrast rule finds no block structure (p = 1).
// Only the first step's gradient decides; later ones add noise.
double ramp(std::uint64_t tensor, int step, std::int64_t i, std::int64_t n) {
  const double v = koptim_test::value(17, tensor, step, i);
  const double m = std::exp2(4.0 * static_cast<double>(i) / static_cast<double>(n));
  return (v < 0 ? -m : m) * (step == 1 ? 1.0 : 0.75 + std::abs(v));
}

// Six tensors of mixed sizes and both precisions: shared (p > 1), factored and full p = 1.
struct Model {
  TestTensor<float> w1{{64, 96}, "w1"};     // per-row scales: p = 96, shared
  TestTensor<float> w2{{8, 16, 40}, "w2"};  // ramp, 5120 elements in 3 dims: p = 1, factored
  TestTensor<float> b1{{96}, "b1"};         // small vector
  TestTensor<float> w3{{3, 5}, "w3"};       // tiny
  TestTensor<double> d1{{40, 30}, "d1"};    // double, per-row scales
  TestTensor<double> d2{{33, 7}, "d2"};     // double, ramp: p = 1, full
  koptim::ParameterSet params;
  Model() {
    const int g = params.add_group("other", {0.02, 0.0});
    w1.add_to(params, "w1");
    w2.add_to(params, "w2");
    b1.add_to(params, "b1", g);
    w3.add_to(params, "w3");
    d1.add_to(params, "d1");
    d2.add_to(params, "d2", g);
    int k = 0;
    for (auto* t : {&w1, &w2, &b1, &w3}) {
      t->set(false, [&](std::int64_t i) { return koptim_test::value(19, k, 0, i); });
      ++k;
    }
    d1.set(false, [](std::int64_t i) { return koptim_test::value(19, 4, 0, i); });
    d2.set(false, [](std::int64_t i) { return koptim_test::value(19, 5, 0, i); });
  }
  void gradients(int s) {
    w1.set(true, [&](std::int64_t i) { return gradient(0, s, i, 96); });
    w2.set(true, [&](std::int64_t i) { return ramp(1, s, i, 5120); });
    b1.set(true, [&](std::int64_t i) { return gradient(2, s, i, 4); });
    w3.set(true, [&](std::int64_t i) { return gradient(3, s, i, 5); });
    d1.set(true, [&](std::int64_t i) { return gradient(4, s, i, 30); });
    d2.set(true, [&](std::int64_t i) { return ramp(5, s, i, 231); });
  }
  std::vector<std::vector<double>> weights() const {
    return {w1.get(), w2.get(), b1.get(), w3.get(), d1.get(), d2.get()};
  }
};

Teuchos::ParameterList list(bool shard, const std::string& rule = "neighbour_contrast") {
  Teuchos::ParameterList l;
  l.set("optimizer", std::string("Gefen"));
  l.set("lr", 0.01);
  l.set("weight_decay", 0.1);
  l.set("partition_rule", rule);
  l.set("shard_state", shard);
  return l;
}

koptim::Gefen& gefen(const std::unique_ptr<koptim::Optimizer>& o) { return dynamic_cast<koptim::Gefen&>(*o); }

class GefenSharded : public ::testing::TestWithParam<std::string> {};

TEST_P(GefenSharded, EqualsOneProcessBitwiseWithLessStatePerRank) {
  Model local, dist;
  auto single = koptim::create(local.params, list(false, GetParam()));
  auto shard  = koptim::create(dist.params, list(true, GetParam()), world());
  EXPECT_EQ(gefen(shard).sharded(), world()->size() > 1);
  for (int s = 1; s <= 25; ++s) {
    local.gradients(s);
    dist.gradients(s);
    single->step();
    shard->step();
  }
  const auto a = local.weights(), b = dist.weights();
  for (std::size_t t = 0; t < a.size(); ++t) EXPECT_EQ(a[t], b[t]) << "tensor " << t;
  EXPECT_EQ(gefen(single).codebook(), gefen(shard).codebook());

  // The model covers the kinds of second moment (p > 1 and factored p = 1 at least).
  const auto infos = gefen(single).tensor_info();
  std::set<GefenSecondMoment> kinds;
  long long largest_tensor = 0;
  for (const auto& i : infos) {
    kinds.insert(i.second_moment);
    largest_tensor = std::max(largest_tensor, static_cast<long long>(i.state_bytes));
  }
  if (GetParam() == "neighbour_contrast") {
    EXPECT_TRUE(kinds.count(GefenSecondMoment::shared));
    EXPECT_TRUE(kinds.count(GefenSecondMoment::factored));
  }
  // The rank holding a tensor reports exactly what one process reports for it.
  const auto mine = gefen(shard).tensor_info();
  for (std::size_t t = 0; t < infos.size(); ++t) {
    if (mine[t].owner != world()->rank()) {
      EXPECT_EQ(mine[t].state_bytes, 0u);
      continue;
    }
    EXPECT_EQ(mine[t].partition, infos[t].partition) << infos[t].name;
    EXPECT_EQ(mine[t].second_moment, infos[t].second_moment) << infos[t].name;
    EXPECT_EQ(mine[t].state_bytes, infos[t].state_bytes) << infos[t].name;
  }

  // Bytes: the tensors' state is split without overlap; the codebook is on every rank.
  const long long held = static_cast<long long>(shard->state_bytes()) - replicated;
  const long long all  = static_cast<long long>(single->state_bytes()) - replicated;
  EXPECT_EQ(world()->sum(held), all);
  EXPECT_LE(static_cast<double>(world()->max(held)), static_cast<double>(all) / world()->size() + largest_tensor);
}

INSTANTIATE_TEST_SUITE_P(Rules, GefenSharded, ::testing::Values("neighbour_contrast", "variance_drop"));

TEST(GefenShardedState, RoundTripPerRankAndForeignStatesRejected) {
  Model m1, m2;
  auto o1 = koptim::create(m1.params, list(true), world());
  auto o2 = koptim::create(m2.params, list(true), world());
  for (int s = 1; s <= 4; ++s) {
    m1.gradients(s);
    o1->step();
  }
  const koptim::OptimizerState saved = o1->export_state();
  // Only this rank's tensors are in its state.
  for (const auto& i : gefen(o1).tensor_info())
    EXPECT_EQ(saved.tensors.count(i.name + "/indices"), i.owner == world()->rank() ? 1u : 0u) << i.name;
  o2->import_state(saved);
  Kokkos::deep_copy(m2.w1.p2, m1.w1.p2);
  Kokkos::deep_copy(m2.w2.p3, m1.w2.p3);
  Kokkos::deep_copy(m2.b1.p1, m1.b1.p1);
  Kokkos::deep_copy(m2.w3.p2, m1.w3.p2);
  Kokkos::deep_copy(m2.d1.p2, m1.d1.p2);
  Kokkos::deep_copy(m2.d2.p2, m1.d2.p2);
  for (int s = 5; s <= 8; ++s) {
    m1.gradients(s);
    m2.gradients(s);
    o1->step();
    o2->step();
  }
  EXPECT_EQ(m1.weights(), m2.weights());

  if (world()->size() < 2) return;
  // A one-process state holds every tensor: no rank of several holds them all.
  Model m3;
  auto whole = koptim::create(m3.params, list(false));
  m3.gradients(1);
  whole->step();
  try {
    o2->import_state(whole->export_state());
    ADD_FAILURE() << "rank " << world()->rank() << " accepted the state of every tensor";
  } catch (const koptim::StateError& e) {
    EXPECT_NE(std::string(e.what()).find("sharded: rank"), std::string::npos) << e.what();
  }
  // Another rank's state fits only if that rank holds the same tensors.
  const auto owners = gefen(o1).owners();
  const int other   = (world()->rank() + 1) % world()->size();
  // Each tensor has one owner, so two ranks hold the same set only when both hold none.
  const bool both_empty = std::count(owners.begin(), owners.end(), other) == 0 &&
                          std::count(owners.begin(), owners.end(), world()->rank()) == 0;
  if (!both_empty) {
    // Rebuild rank `other`'s state here: its tensors' entries from the one-process export.
    koptim::OptimizerState foreign = whole->export_state();
    for (const auto& i : gefen(o1).tensor_info()) {
      if (i.owner == other) continue;
      for (auto it = foreign.tensors.begin(); it != foreign.tensors.end();)
        it = it->first.rfind(i.name + "/", 0) == 0 ? foreign.tensors.erase(it) : std::next(it);
      foreign.integers.erase(i.name + "/partition");
    }
    EXPECT_THROW(o2->import_state(foreign), koptim::StateError);
  }
}

TEST(GefenShardedState, RanksThatDisagreeFailOnEveryRank) {
  if (world()->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  TestTensor<float> w({world()->rank() == world()->size() - 1 ? 7 : 6}, "w");
  TestTensor<float> v({5}, "v");
  koptim::ParameterSet params;
  w.add_to(params, "w");
  v.add_to(params, "v");
  try {
    koptim::create(params, list(true), world());
    ADD_FAILURE() << "rank " << world()->rank() << " accepted a parameter of another shape";
  } catch (const koptim::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("the ranks of the communicator disagree"), std::string::npos) << e.what();
  }
  // One of Gefen's own options differs on one rank.
  TestTensor<float> u({6}, "u");
  koptim::ParameterSet same;
  u.add_to(same, "u");
  v.add_to(same, "v");
  auto l = list(true);
  l.set("force_p1", world()->rank() == 0);
  EXPECT_THROW(koptim::create(same, l, world()), koptim::ConfigError);
}

// A first gradient outside the variance_drop rule's domain (1e100 in double: it passes the
// gradient check, its square is finite, its fourth power is not) makes only the rank that holds
// that tensor fail in its partition rule: every rank must fail with it, and nothing is
// initialised anywhere. (This test used a NaN with nonfinite_gradient = unchecked, which Gefen
// then checked anyway; unchecked now checks nothing.)
TEST(GefenShardedState, AnErrorOnOneRankReachesEveryRank) {
  if (world()->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  Model m;
  auto l = list(true, "variance_drop");
  auto o = koptim::create(m.params, l, world());
  m.gradients(1);
  m.d1.set(true, [](std::int64_t i) { return i == 3 ? 1e100 : 0.5; });
  const int holder = gefen(o).owners()[4];
  try {
    o->step();
    ADD_FAILURE() << "rank " << world()->rank() << " stepped although rank " << holder << " failed";
  } catch (const koptim::Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(holder) + ": "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("choose_partition"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(gefen(o).initialised());
  EXPECT_EQ(o->step_count(), 0);
  // The same optimizer steps normally once the gradients are fine.
  m.gradients(2);
  o->step();
  EXPECT_TRUE(gefen(o).initialised());
}

}  // namespace
