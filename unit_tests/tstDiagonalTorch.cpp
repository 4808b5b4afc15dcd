// The diagonal optimizers against torch.optim: 100 steps on four tensors of rank 1 to 4, with the
// hyperparameter sets of reference/generate_diagonal.py, in float32 and float64, LayoutRight and
// LayoutLeft, built through the parameter-list factory.
#include "koptim_TestData.hpp"
#include "koptim_TestTensor.hpp"

#include <koptim/koptim.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

namespace {

using koptim_test::ReferenceCase;
using koptim_test::TestTensor;

const std::vector<ReferenceCase>& reference() {
  static const auto cases = koptim_test::read_reference(KOPTIM_TEST_REFERENCE_DIR "/diagonal_torch.txt");
  return cases;
}

Teuchos::ParameterList list_for(const ReferenceCase& c) {
  Teuchos::ParameterList l("koptim");
  l.set("optimizer", c.optimizer);
  for (const auto& kv : c.options) {
    const auto& v = kv.second;
    if (v.size() == 2) {
      Teuchos::Array<double> a(2);
      a[0] = std::stod(v[0]);
      a[1] = std::stod(v[1]);
      l.set(kv.first, a);
    } else if (v[0] == "true" || v[0] == "false") {
      l.set(kv.first, v[0] == "true");
    } else {
      l.set(kv.first, std::stod(v[0]));
    }
  }
  return l;
}

// Largest max-norm relative error of any tensor at any checked step.
template <class T, class Layout>
double run_case(const ReferenceCase& c) {
  std::vector<TestTensor<T, Layout>> tensors;
  koptim::ParameterSet params;
  int group = 0;
  if (c.has_group) group = params.add_group("second", {c.group_lr, c.group_weight_decay});
  for (std::size_t t = 0; t < c.shapes.size(); ++t) {
    tensors.emplace_back(c.shapes[t], "p" + std::to_string(t));
    tensors.back().set(false, [&](std::int64_t i) { return koptim_test::value(c.seed, t, 0, i); });
    tensors.back().add_to(params, "p" + std::to_string(t), t >= 2 ? group : 0);
  }
  auto opt     = koptim::create(params, list_for(c));
  double worst = 0;
  for (int step = 1; step <= 100; ++step) {
    for (std::size_t t = 0; t < tensors.size(); ++t)
      tensors[t].set(true, [&](std::int64_t i) { return koptim_test::value(c.seed, t, step, i); });
    opt->step();
    auto it = c.checks.find(step);
    if (it == c.checks.end()) continue;
    for (std::size_t t = 0; t < tensors.size(); ++t) {
      const auto got  = tensors[t].get();
      const auto& ref = it->second[t];
      EXPECT_EQ(got.size(), ref.size());
      // Relative error in the max norm of each tensor: elementwise ratios are ill-conditioned
      // for entries that pass near zero, where float32 rounding dominates.
      double diff = 0, scale = 0;
      for (std::size_t i = 0; i < ref.size(); ++i) {
        diff  = std::max(diff, std::abs(got[i] - ref[i]));
        scale = std::max(scale, std::abs(ref[i]));
      }
      if (std::getenv("KOPTIM_TEST_VERBOSE"))
        std::printf("%s %s step %d tensor %zu: max-norm relative error %.3g\n", c.name.c_str(), c.dtype.c_str(), step,
                    t, diff / scale);
      worst = std::max(worst, diff / scale);
    }
  }
  EXPECT_EQ(opt->step_count(), 100);
  return worst;
}

TEST(DiagonalTorch, ReferenceFileIsComplete) {
  // 19 hyperparameter sets, each in float32 and float64, covering every optimizer.
  ASSERT_EQ(reference().size(), 38u);
  std::set<std::string> optimizers;
  for (const auto& c : reference()) {
    optimizers.insert(c.optimizer);
    EXPECT_EQ(c.checks.size(), 4u) << c.name;
  }
  EXPECT_EQ(optimizers.size(), 5u);
}

TEST(DiagonalTorch, MatchesTorchOver100Steps) {
  for (const auto& c : reference()) {
    SCOPED_TRACE(c.name + " " + c.dtype);
    if (c.dtype == "float32") {
      EXPECT_LE((run_case<float, Kokkos::LayoutRight>(c)), 1e-5);
      EXPECT_LE((run_case<float, Kokkos::LayoutLeft>(c)), 1e-5);
    } else {
      EXPECT_LE((run_case<double, Kokkos::LayoutRight>(c)), 1e-12);
      EXPECT_LE((run_case<double, Kokkos::LayoutLeft>(c)), 1e-12);
    }
  }
}

}  // namespace
