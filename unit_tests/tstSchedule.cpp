// Learning-rate schedules against their closed forms, and the current lr an optimizer reports.
#include <koptim/koptim.hpp>

#include <gtest/gtest.h>

#include <cmath>

namespace {

TEST(Schedule, ConstantAndWarmup) {
  EXPECT_EQ(koptim::LRSchedule::constant().factor(1), 1.0);
  EXPECT_EQ(koptim::LRSchedule::constant().factor(1000), 1.0);
  const auto w = koptim::LRSchedule::linear_warmup(4);
  EXPECT_DOUBLE_EQ(w.factor(1), 0.25);
  EXPECT_DOUBLE_EQ(w.factor(3), 0.75);
  EXPECT_DOUBLE_EQ(w.factor(4), 1.0);
  EXPECT_DOUBLE_EQ(w.factor(100), 1.0);
}

TEST(Schedule, WarmupThenCosine) {
  const auto s = koptim::LRSchedule::cosine(110, 0.1).with_warmup(10);
  EXPECT_DOUBLE_EQ(s.factor(5), 0.5);
  EXPECT_DOUBLE_EQ(s.factor(10), 1.0);
  for (int t = 11; t <= 130; ++t) {
    const double p = std::min(1.0, (t - 10) / 100.0);
    EXPECT_NEAR(s.factor(t), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * p)), 1e-15) << t;
  }
  EXPECT_NEAR(s.factor(60), 0.55, 1e-15);  // half way: cos(pi/2) = 0
  EXPECT_NEAR(s.factor(110), 0.1, 1e-15);
}

TEST(Schedule, LinearAndStepDecay) {
  const auto l = koptim::LRSchedule::linear(100, 0.0);
  EXPECT_NEAR(l.factor(50), 0.5, 1e-15);
  EXPECT_NEAR(l.factor(100), 0.0, 1e-15);
  const auto s = koptim::LRSchedule::step(3, 0.5);  // torch StepLR: gamma^floor((t-1)/step_size)
  EXPECT_EQ(s.factor(1), 1.0);
  EXPECT_EQ(s.factor(3), 1.0);
  EXPECT_EQ(s.factor(4), 0.5);
  EXPECT_EQ(s.factor(7), 0.25);
}

TEST(Schedule, RejectsBadValues) {
  EXPECT_THROW(koptim::LRSchedule::cosine(0), koptim::ConfigError);
  EXPECT_THROW(koptim::LRSchedule::cosine(10, 1.5), koptim::ConfigError);
  EXPECT_THROW(koptim::LRSchedule::cosine(10).with_warmup(10), koptim::ConfigError);
  EXPECT_THROW(koptim::LRSchedule::step(0, 0.5), koptim::ConfigError);
  EXPECT_THROW(koptim::LRSchedule::step(1, 0.0), koptim::ConfigError);
}

TEST(Schedule, OptimizerAppliesScheduleToEveryGroup) {
  Kokkos::View<double*> a("a", 2), ga("ga", 2), b("b", 2), gb("gb", 2);
  koptim::ParameterSet params;
  const int slow = params.add_group("slow", {0.01, std::nullopt});
  params.add("a", a, ga);
  params.add("b", b, gb, slow);
  koptim::CommonOptions c;
  c.lr          = 0.1;
  c.lr_schedule = koptim::LRSchedule::linear_warmup(2);
  koptim::SGD sgd(params, c);
  EXPECT_DOUBLE_EQ(sgd.lr(0), 0.05);  // the lr of the next step, t = 1
  EXPECT_DOUBLE_EQ(sgd.lr(slow), 0.005);
  Kokkos::deep_copy(ga, 1.0);
  Kokkos::deep_copy(gb, 1.0);
  sgd.step();
  auto ha = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a);
  auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b);
  EXPECT_DOUBLE_EQ(ha(0), -0.05);
  EXPECT_DOUBLE_EQ(hb(0), -0.005);
  EXPECT_DOUBLE_EQ(sgd.lr(0), 0.1);
}

}  // namespace
