// Optimizer::last_step_status(): what the last step() did, for every optimizer.
#include "koptim_TestOptimizers.hpp"
#include "koptim_TestTensor.hpp"

#include <koptim/koptim.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

namespace {

using koptim_test::TestTensor;

class StepStatus : public ::testing::TestWithParam<std::string> {};

TEST_P(StepStatus, TakenSkippedAndRefused) {
  TestTensor<float> a({4, 4}, "a"), b({6}, "b");
  koptim::ParameterSet params;
  a.add_to(params, "a");
  b.add_to(params, "b");
  auto opt = koptim_test::make_with_policy(params, GetParam(), "skip_step");
  EXPECT_FALSE(opt->last_step_status().taken);
  EXPECT_EQ(opt->last_step_status().step, 0);
  a.set(true, [](std::int64_t i) { return 0.1 * static_cast<double>(i + 1); });
  b.set(true, [](std::int64_t) { return 0.5; });
  opt->step();
  auto s = opt->last_step_status();
  EXPECT_TRUE(s.taken);
  EXPECT_FALSE(s.skipped);
  EXPECT_EQ(s.step, 1);
  EXPECT_EQ(s.refused_values, 0);
  EXPECT_EQ(s.refused_parameter, "");
  // A NaN and an Inf in 'b': skipped, both counted, 'b' named.
  b.set(true, [](std::int64_t i) {
    return i == 1 ? std::numeric_limits<double>::quiet_NaN() : (i == 4 ? std::numeric_limits<double>::infinity() : 1.0);
  });
  opt->step();
  s = opt->last_step_status();
  EXPECT_FALSE(s.taken);
  EXPECT_TRUE(s.skipped);
  EXPECT_EQ(s.step, 1);
  EXPECT_EQ(s.refused_values, 2);
  EXPECT_EQ(s.refused_parameter, "b");
  EXPECT_EQ(opt->skipped_steps(), 1);
  // A square beyond float in 'a': refused by every optimizer that squares gradients; SGD takes it
  // (it never squares); Shampoo's trace bound skips the step without counting values.
  b.set(true, [](std::int64_t) { return 0.5; });
  a.set(true, [](std::int64_t i) { return i == 9 ? 1e20 : 0.1; });
  opt->step();
  s = opt->last_step_status();
  if (GetParam() == "SGD") {
    EXPECT_TRUE(s.taken);
  } else {
    EXPECT_TRUE(s.skipped);
    EXPECT_EQ(s.refused_parameter, "a");
    EXPECT_EQ(s.refused_values, GetParam() == "Shampoo" ? 0 : 1);
  }
  EXPECT_EQ(s.failed_root_computations, 0);
}

TEST_P(StepStatus, FilledWhenStepThrows) {
  TestTensor<double> a({3, 5}, "a");
  koptim::ParameterSet params;
  a.add_to(params, "a");
  auto opt = koptim_test::make_with_policy(params, GetParam(), "error");
  a.set(true, [](std::int64_t i) { return i == 7 ? std::numeric_limits<double>::infinity() : 1.0; });
  EXPECT_THROW(opt->step(), koptim::NonFiniteError);
  const auto s = opt->last_step_status();
  EXPECT_FALSE(s.taken);
  EXPECT_FALSE(s.skipped);
  EXPECT_EQ(s.refused_values, 1);
  EXPECT_EQ(s.refused_parameter, "a");
}

INSTANTIATE_TEST_SUITE_P(AllOptimizers, StepStatus,
                         ::testing::Values("SGD", "AdaGrad", "RMSProp", "Adam", "AdamW", "Shampoo", "Gefen"));

// Coupled Newton diverging on a rank-one factor in float: the roots come from the
// eigendecomposition, and the status counts them.
TEST(StepStatusShampoo, CountsNewtonFallbacks) {
  TestTensor<float> w({16, 12}, "w");
  koptim::ParameterSet params;
  w.add_to(params, "w");
  Teuchos::ParameterList l;
  l.set("optimizer", std::string("Shampoo"));
  l.set("lr", 0.01);
  l.set("root_method", std::string("coupled_newton"));
  auto opt               = koptim::create(params, l);
  std::int64_t fallbacks = 0;
  for (int s = 0; s < 4; ++s) {
    w.set(true, [&](std::int64_t k) {
      return (1.0 + s) * std::cos(0.3 * static_cast<double>(k / 12)) * std::sin(0.5 * static_cast<double>(k % 12) + 1);
    });
    opt->step();
    EXPECT_TRUE(opt->last_step_status().taken);
    EXPECT_EQ(opt->last_step_status().failed_root_computations, 0);
    fallbacks += opt->last_step_status().root_fallbacks;
  }
  EXPECT_GT(fallbacks, 0);
}

// A Newton iteration that stops at its limit without reaching the tolerance: its root is used
// (the step is taken) and the status counts it (it was reported nowhere). The limit is lowered to
// 2 iterations through the test hook; with the limit of 100 the same factors converge.
TEST(StepStatusShampoo, CountsUnconvergedNewtonRoots) {
  struct Restore {  // the limit goes back to 100 however the test ends
    ~Restore() { koptim::Impl::set_newton_iteration_limit(0); }
  } restore;
  for (int limit : {2, 0}) {
    SCOPED_TRACE(limit);
    koptim::Impl::set_newton_iteration_limit(limit);
    TestTensor<double> w({6, 5}, "w");
    koptim::ParameterSet params;
    w.add_to(params, "w");
    Teuchos::ParameterList l;
    l.set("optimizer", std::string("Shampoo"));
    l.set("root_method", std::string("coupled_newton"));
    l.set("use_merge_dims", false);
    auto opt = koptim::create(params, l);
    w.set(true, [](std::int64_t k) { return std::sin(0.7 * static_cast<double>(k) + 0.3) + 0.1 * (k % 3); });
    opt->step();
    const auto s = opt->last_step_status();
    EXPECT_TRUE(s.taken);
    EXPECT_EQ(s.failed_root_computations, 0);
    EXPECT_EQ(s.root_fallbacks, 0);
    EXPECT_EQ(s.unconverged_roots, limit == 2 ? 2 : 0);  // the 6 x 6 and 5 x 5 factors
    for (double x : w.get()) EXPECT_TRUE(std::isfinite(x));
  }
}

}  // namespace
