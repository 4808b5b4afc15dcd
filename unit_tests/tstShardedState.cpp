// The diagonal optimizers with shard_state over a communicator: each rank keeps the state of a
// slice of the parameters; N ranks give parameters bitwise equal to one process, memory per rank
// falls as 1/N, and ranks that disagree fail on every rank.
#include "koptim_TestData.hpp"
#include "koptim_TestMpi.hpp"
#include "koptim_TestTensor.hpp"

#include <koptim/koptim.hpp>

#include <gtest/gtest.h>
#include <mpi.h>

namespace {

using koptim_test::TestTensor;

using koptim_test::world;

struct Model {
  TestTensor<float> a{{17, 5}, "a"}, c{{3, 4, 2}, "c"};
  TestTensor<double> b{{29}, "b"};
  koptim::ParameterSet params;
  Model() {
    const int g = params.add_group("other", {0.003, 0.0});
    a.add_to(params, "a");
    b.add_to(params, "b", g);
    c.add_to(params, "c");
    a.set(false, [](std::int64_t i) { return koptim_test::value(31, 0, 0, i); });
    b.set(false, [](std::int64_t i) { return koptim_test::value(31, 1, 0, i); });
    c.set(false, [](std::int64_t i) { return koptim_test::value(31, 2, 0, i); });
  }
  void gradients(int s) {
    a.set(true, [&](std::int64_t i) { return koptim_test::value(31, 0, s, i); });
    b.set(true, [&](std::int64_t i) { return koptim_test::value(31, 1, s, i); });
    c.set(true, [&](std::int64_t i) { return koptim_test::value(31, 2, s, i); });
  }
};

Teuchos::ParameterList list(const std::string& name, bool shard) {
  Teuchos::ParameterList l;
  l.set("optimizer", name);
  l.set("lr", 0.01);
  l.set("shard_state", shard);
  if (name == "SGD") l.set("momentum", 0.9);
  if (name == "RMSProp") l.set("centered", true);
  if (name == "Adam" || name == "AdamW") l.set("amsgrad", true);
  return l;
}

class Sharded : public ::testing::TestWithParam<std::string> {};

TEST_P(Sharded, EqualsOneProcessBitwiseWithLessStatePerRank) {
  Model local, dist;
  auto single = koptim::create(local.params, list(GetParam(), false));
  auto shard  = koptim::create(dist.params, list(GetParam(), true), world());
  for (int s = 1; s <= 25; ++s) {
    local.gradients(s);
    dist.gradients(s);
    single->step();
    shard->step();
  }
  EXPECT_EQ(local.a.get(), dist.a.get());
  EXPECT_EQ(local.b.get(), dist.b.get());
  EXPECT_EQ(local.c.get(), dist.c.get());
  const long long mine = static_cast<long long>(shard->state_bytes());
  EXPECT_EQ(world()->sum(mine), static_cast<long long>(single->state_bytes()));
  // Each scalar type is cut into equal slices: at most one element per type and slot above 1/N.
  const double per_rank = static_cast<double>(single->state_bytes()) / world()->size();
  EXPECT_LE(static_cast<double>(world()->max(mine)), per_rank + 3 * (4 + 8));
}

INSTANTIATE_TEST_SUITE_P(AllDiagonal, Sharded, ::testing::Values("SGD", "AdaGrad", "RMSProp", "Adam", "AdamW"));

TEST(Sharded, StateRoundTripPerRank) {
  Model m1, m2;
  auto o1 = koptim::create(m1.params, list("AdamW", true), world());
  auto o2 = koptim::create(m2.params, list("AdamW", true), world());
  for (int s = 1; s <= 4; ++s) {
    m1.gradients(s);
    o1->step();
  }
  o2->import_state(o1->export_state());
  Kokkos::deep_copy(m2.a.p2, m1.a.p2);
  Kokkos::deep_copy(m2.b.p1, m1.b.p1);
  Kokkos::deep_copy(m2.c.p3, m1.c.p3);
  for (int s = 5; s <= 8; ++s) {
    m1.gradients(s);
    m2.gradients(s);
    o1->step();
    o2->step();
  }
  EXPECT_EQ(m1.a.get(), m2.a.get());
  EXPECT_EQ(m1.b.get(), m2.b.get());
}

TEST(Sharded, RanksThatDisagreeFailOnEveryRank) {
  if (world()->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  TestTensor<float> w({world()->rank() == world()->size() - 1 ? 7 : 6}, "w");
  koptim::ParameterSet params;
  w.add_to(params, "w");
  try {
    koptim::create(params, list("AdamW", true), world());
    ADD_FAILURE() << "rank " << world()->rank() << " accepted a parameter of another shape";
  } catch (const koptim::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("the ranks of the communicator disagree"), std::string::npos) << e.what();
  }
  // Another hyperparameter on one rank.
  TestTensor<float> v({6}, "v");
  koptim::ParameterSet same;
  v.add_to(same, "v");
  auto l = list("AdamW", true);
  l.set("eps", world()->rank() == 0 ? 1e-8 : 1e-7);
  EXPECT_THROW(koptim::create(same, l, world()), koptim::ConfigError);
}

}  // namespace
