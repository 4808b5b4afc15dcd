// Distributed Shampoo at 1 to 4 ranks: N ranks with fp32 communication give parameters bitwise
// equal to one process (with grafting, eigenvalue-corrected, with groups), bf16 communication stays
// within its rounding bound, the block assignment and the memory per rank, and the safety rules
// (ranks that disagree, an error on one rank).
#include "comm/koptim_Distributor.hpp"
#include "koptim_TestData.hpp"
#include "koptim_TestMpi.hpp"
#include "koptim_TestTensor.hpp"

#include <koptim/koptim.hpp>

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>

namespace {

using koptim_test::TestTensor;

using koptim_test::world;

// An MLP-like set: two matrices (one split into blocks), a bias, a conv kernel; float.
struct Model {
  std::vector<TestTensor<float>> t;
  koptim::ParameterSet params;
  std::vector<std::vector<double>> previous;
  std::vector<std::vector<double>> travelled;  // sum over steps of |W_t - W_{t-1}|
  Model() {
    t.emplace_back(std::vector<std::int64_t>{40, 24}, "w1");
    t.emplace_back(std::vector<std::int64_t>{40}, "b1");
    t.emplace_back(std::vector<std::int64_t>{10, 40}, "w2");
    t.emplace_back(std::vector<std::int64_t>{6, 3, 2, 2}, "k");
    for (std::size_t i = 0; i < t.size(); ++i) {
      t[i].set(false, [&](std::int64_t j) { return koptim_test::value(21, i, 0, j); });
      t[i].add_to(params, "p" + std::to_string(i));
      previous.push_back(t[i].get());
      travelled.emplace_back(previous.back().size(), 0.0);
    }
  }
  void gradients(int step) {
    for (std::size_t i = 0; i < t.size(); ++i)
      t[i].set(true, [&](std::int64_t j) { return koptim_test::value(21, i, step, j); });
  }
  void track() {
    for (std::size_t i = 0; i < t.size(); ++i) {
      const auto now = t[i].get();
      for (std::size_t j = 0; j < now.size(); ++j) travelled[i][j] += std::abs(now[j] - previous[i][j]);
      previous[i] = now;
    }
  }
  std::vector<double> all() const {
    std::vector<double> v;
    for (const auto& x : t) {
      auto g = x.get();
      v.insert(v.end(), g.begin(), g.end());
    }
    return v;
  }
};

Teuchos::ParameterList config(const std::string& variant) {
  Teuchos::ParameterList l;
  l.set("optimizer", std::string("Shampoo"));
  l.set("lr", 0.01);
  l.set("epsilon", 1e-8);
  l.set("max_preconditioner_dim", 16);
  l.set("precondition_frequency", 3);
  l.set("weight_decay", 0.01);
  if (variant == "adam") l.set("grafting", std::string("Adam"));
  if (variant == "eigenvalue_corrected" || variant == "qr_refresh") {
    l.set("eigenvalue_corrected", true);
    Teuchos::Array<double> betas(2);
    betas[0] = 0.9;
    betas[1] = 0.99;
    l.set("betas", betas);
  }
  if (variant == "qr_refresh") {
    l.set("eigenbasis", std::string("qr"));
    l.set("qr_tolerance", 0.0);  // a QR step at every refresh after the first
  }
  if (variant == "momentum") {
    l.set("grafting", std::string("RMSProp"));
    l.set("momentum", 0.5);
    l.set("use_nesterov", true);
  }
  return l;
}

void expect_bitwise_equal_to_one_process(const std::string& variant, int group) {
  const int size = world()->size();
  if (group > 0 && size % group != 0) GTEST_SKIP() << "group size " << group << " does not divide " << size;
  Model local, dist;
  auto single = koptim::create(local.params, config(variant));
  auto l      = config(variant);
  l.set("num_trainers_per_group", group);
  auto spread    = koptim::create(dist.params, l, world());
  const auto& sh = dynamic_cast<const koptim::Shampoo&>(*spread);
  EXPECT_EQ(sh.group_size(), group > 0 ? group : size);
  for (int s = 1; s <= 21; ++s) {
    local.gradients(s);
    dist.gradients(s);
    single->step();
    spread->step();
  }
  EXPECT_EQ(local.all(), dist.all()) << variant << " group " << group << " at " << size << " ranks";
}

TEST(ShampooDistributed, EqualsOneProcessBitwiseWithGrafting) { expect_bitwise_equal_to_one_process("adam", -1); }
TEST(ShampooDistributed, EqualsOneProcessBitwiseEigenvalueCorrected) {
  expect_bitwise_equal_to_one_process("eigenvalue_corrected", -1);
}
TEST(ShampooDistributed, EqualsOneProcessBitwiseQrRefresh) { expect_bitwise_equal_to_one_process("qr_refresh", -1); }
TEST(ShampooDistributed, EqualsOneProcessBitwiseWithMomentum) { expect_bitwise_equal_to_one_process("momentum", -1); }
TEST(ShampooDistributed, EqualsOneProcessBitwiseGroupsOf1) { expect_bitwise_equal_to_one_process("adam", 1); }
TEST(ShampooDistributed, EqualsOneProcessBitwiseGroupsOf2) { expect_bitwise_equal_to_one_process("adam", 2); }

// bf16 rounds every update with a relative error of at most 2^-9, so each parameter differs from
// the fp32 run by at most 2^-9 times the distance it travelled (2^-8 stated, for the weight decay's
// feedback on W).
TEST(ShampooDistributed, Bfloat16CommunicationWithinRoundingBound) {
  Model fp32, bf16;
  auto a = koptim::create(fp32.params, config("adam"), world());
  auto l = config("adam");
  l.set("communication_dtype", std::string("bfloat16"));
  auto b = koptim::create(bf16.params, l, world());
  for (int s = 1; s <= 20; ++s) {
    fp32.gradients(s);
    bf16.gradients(s);
    a->step();
    b->step();
    fp32.track();
  }
  double worst_ratio = 0;
  for (std::size_t i = 0; i < fp32.t.size(); ++i) {
    const auto x = fp32.t[i].get(), y = bf16.t[i].get();
    for (std::size_t j = 0; j < x.size(); ++j) {
      EXPECT_LE(std::abs(x[j] - y[j]), std::ldexp(fp32.travelled[i][j], -8) + 1e-7) << i << " " << j;
      if (fp32.travelled[i][j] > 0) worst_ratio = std::max(worst_ratio, std::abs(x[j] - y[j]) / fp32.travelled[i][j]);
    }
  }
  EXPECT_GT(worst_ratio, 0.0);  // bf16 did round something
  const auto& sh = dynamic_cast<const koptim::Shampoo&>(*b);
  if (world()->size() > 1) {
    // Half the bytes: every update once (whatever the assignment, which the costs' rounding to 64
    // bytes may change), in 2 bytes instead of 4.
    const auto full      = dynamic_cast<const koptim::Shampoo&>(*a).all_gather_bytes();
    std::size_t elements = 0;
    for (const auto& x : fp32.t) elements += x.get().size();
    EXPECT_EQ(full, elements * 4);
    EXPECT_EQ(sh.all_gather_bytes(), elements * 2);
  }
}

TEST(ShampooDistributed, LongestProcessingTimeAssignment) {
  auto cubic       = [](double d) { return 2 * d * d * d; };  // a d x d block: two d x d factors
  const auto owner = koptim::Impl::assign_blocks({cubic(256), cubic(128), cubic(384), cubic(256)}, 2);
  EXPECT_EQ(owner, (std::vector<int>{1, 1, 0, 1}));                                         // 384 alone on rank 0
  EXPECT_EQ(koptim::Impl::assign_blocks({5, 5, 5, 5}, 3), (std::vector<int>{0, 1, 2, 0}));  // ties: lowest rank, stable
  if (world()->size() != 2) return;
  // The same through Shampoo: four d x d parameters, cubic cost model, 2 ranks.
  std::vector<TestTensor<float>> t;
  koptim::ParameterSet params;
  for (int d : {256, 128, 384, 256}) {
    t.emplace_back(std::vector<std::int64_t>{d, d}, "m");
    t.back().add_to(params, "m" + std::to_string(t.size()));
  }
  Teuchos::ParameterList l;
  l.set("optimizer", std::string("Shampoo"));
  l.set("distributed_cost_model", std::string("cubic"));
  auto opt       = koptim::create(params, l, world());
  const auto& sh = dynamic_cast<const koptim::Shampoo&>(*opt);
  EXPECT_EQ(sh.block_owner(2, 0), 0);
  EXPECT_EQ(sh.block_owner(0, 0), 1);
  EXPECT_EQ(sh.block_owner(1, 0), 1);
  EXPECT_EQ(sh.block_owner(3, 0), 1);
}

// A 4-layer MLP of width 256 cut into 64-blocks: the state per rank falls as 1/N.
TEST(ShampooDistributed, MemoryPerRankFallsAsOneOverN) {
  std::vector<TestTensor<float>> t;
  koptim::ParameterSet params;
  for (int layer = 0; layer < 4; ++layer) {
    t.emplace_back(std::vector<std::int64_t>{256, 256}, "w");
    t.back().add_to(params, "w" + std::to_string(layer));
    t.emplace_back(std::vector<std::int64_t>{256}, "b");
    t.back().add_to(params, "b" + std::to_string(layer));
  }
  Teuchos::ParameterList l;
  l.set("optimizer", std::string("Shampoo"));
  l.set("max_preconditioner_dim", 64);
  auto single           = koptim::create(params, l);
  auto spread           = koptim::create(params, l, world());
  const long long mine  = static_cast<long long>(spread->state_bytes());
  const long long total = world()->sum(mine), largest = world()->max(mine);
  const int n = world()->size();
  EXPECT_EQ(total, static_cast<long long>(single->state_bytes()));
  EXPECT_LE(static_cast<double>(largest), 1.1 * static_cast<double>(total) / n) << "largest rank " << largest;
}

TEST(ShampooDistributed, RanksThatDisagreeFailOnEveryRank) {
  if (world()->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  TestTensor<float> w({world()->rank() == 1 ? 9 : 8, 5}, "w");
  koptim::ParameterSet params;
  w.add_to(params, "w");
  Teuchos::ParameterList l;
  l.set("optimizer", std::string("Shampoo"));
  try {
    koptim::create(params, l, world());
    ADD_FAILURE() << "rank " << world()->rank() << " accepted parameters that differ across ranks";
  } catch (const koptim::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("the ranks of the communicator disagree"), std::string::npos) << e.what();
  }
  auto c = l;
  c.set("lr", world()->rank() == 0 ? 0.1 : 0.2);
  TestTensor<float> v({8, 5}, "v");
  koptim::ParameterSet same;
  v.add_to(same, "v");
  EXPECT_THROW(koptim::create(same, c, world()), koptim::ConfigError);
}

TEST(ShampooDistributed, AnErrorOnOneRankStopsEveryRank) {
  TestTensor<float> a({12, 10}, "a"), b({7, 9}, "b");
  koptim::ParameterSet params;
  a.add_to(params, "a");
  b.add_to(params, "b");
  Teuchos::ParameterList l;
  l.set("optimizer", std::string("Shampoo"));
  auto opt        = koptim::create(params, l, world());
  const auto& sh  = dynamic_cast<const koptim::Shampoo&>(*opt);
  const int owner = sh.block_owner(1, 0);
  a.set(true, [](std::int64_t) { return 1.0; });
  b.set(true, [](std::int64_t) { return 1e30; });  // finite, but its factor overflows
  const auto before_a = a.get(), before_b = b.get();
  const auto state = opt->export_state();
  try {
    opt->step();
    ADD_FAILURE() << "no error on rank " << world()->rank();
  } catch (const koptim::NonFiniteError& e) {  // the same type on every rank as on one
    const std::string msg = e.what();
    EXPECT_NE(msg.find("parameter 'b', block 0"), std::string::npos) << msg;
    if (world()->size() > 1) EXPECT_NE(msg.find("rank " + std::to_string(owner) + ":"), std::string::npos) << msg;
  }
  EXPECT_EQ(opt->last_step_status().refused_parameter, "b") << "rank " << world()->rank();
  // Nothing changed on any rank.
  EXPECT_EQ(a.get(), before_a);
  EXPECT_EQ(b.get(), before_b);
  EXPECT_TRUE(opt->export_state() == state);

  // Under skip_step every rank skips the step, not only the rank that holds the block.
  l.set("nonfinite_gradient", std::string("skip_step"));
  auto skipping    = koptim::create(params, l, world());
  const auto fresh = skipping->export_state();
  ASSERT_NO_THROW(skipping->step()) << "rank " << world()->rank();
  EXPECT_TRUE(skipping->last_step_status().skipped) << "rank " << world()->rank();
  EXPECT_EQ(skipping->last_step_status().refused_parameter, "b") << "rank " << world()->rank();
  EXPECT_EQ(skipping->export_state().integers.at("skipped_steps"), 1);
  EXPECT_EQ(skipping->export_state().integers.at("step"), 0);
  EXPECT_EQ(a.get(), before_a);
  EXPECT_EQ(b.get(), before_b);
  auto after                      = skipping->export_state();
  after.integers["skipped_steps"] = 0;
  EXPECT_TRUE(after == fresh);
}

// num_trainers_per_group 1: every rank is a group of its own and computes every block. The last
// rank alone is given a refused gradient (NaN, caught by the check of every step; 1e30, whose
// factor overflows, caught by Shampoo's own bound): every rank, in every group, throws the same
// NonFiniteError or skips the step, and nothing changes anywhere (when the groups agreed each on
// their own, the other groups stepped on).
TEST(ShampooDistributed, AGradientRefusedInOneGroupStopsEveryGroup) {
  const bool last = world()->rank() == world()->size() - 1;
  for (const double bad : {std::nan(""), 1e30}) {
    for (const std::string policy : {"error", "skip_step"}) {
      TestTensor<float> a({12, 10}, "a");
      koptim::ParameterSet params;
      a.add_to(params, "a");
      Teuchos::ParameterList l;
      l.set("optimizer", std::string("Shampoo"));
      l.set("num_trainers_per_group", 1);
      l.set("nonfinite_gradient", policy);
      auto opt = koptim::create(params, l, world());
      a.set(true, [&](std::int64_t) { return last ? bad : 1.0; });
      const auto before = a.get();
      const auto state  = opt->export_state();
      const std::string where =
          "rank " + std::to_string(world()->rank()) + ", gradient " + std::to_string(bad) + ", " + policy;
      if (policy == "error") {
        try {
          opt->step();
          ADD_FAILURE() << where << ": no error";
        } catch (const koptim::NonFiniteError& e) {
          EXPECT_NE(std::string(e.what()).find("'a'"), std::string::npos) << where << ": " << e.what();
        }
      } else {
        ASSERT_NO_THROW(opt->step()) << where;
        EXPECT_TRUE(opt->last_step_status().skipped) << where;
        EXPECT_NE(opt->last_step_status().refused_parameter.find('a'), std::string::npos)
            << where << ": " << opt->last_step_status().refused_parameter;
      }
      EXPECT_EQ(a.get(), before) << where;
      auto after = opt->export_state();
      if (policy == "skip_step") after.integers["skipped_steps"] = 0;
      EXPECT_TRUE(after == state) << where;
    }
  }
}

}  // namespace
