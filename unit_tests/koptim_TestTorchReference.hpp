// Runs a case of reference/diagonal_torch.txt (torch.optim trajectories) through any koptim
// optimizer built from a parameter list, and measures how far it is from torch.
#ifndef KOPTIM_TEST_TORCHREFERENCE_HPP
#define KOPTIM_TEST_TORCHREFERENCE_HPP

#include "koptim_TestData.hpp"
#include "koptim_TestTensor.hpp"

#include <koptim/koptim.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace koptim_test {

inline const std::vector<ReferenceCase>& torch_reference() {
  static const auto cases = read_reference(reference_dir() + "/diagonal_torch.txt");
  return cases;
}

// The largest relative error in the max norm of any tensor at any checked step (elementwise
// ratios are ill-conditioned for entries that pass near zero, where float32 rounding dominates).
// Tensors 2 and 3 go to a second group when the case has one. KOPTIM_TEST_VERBOSE=1 prints them.
template <class T, class Layout = Kokkos::LayoutRight>
double torch_case_error(const ReferenceCase& c, const Teuchos::ParameterList& list) {
  std::vector<TestTensor<T, Layout>> tensors;
  koptim::ParameterSet params;
  int group = 0;
  if (c.has_group) group = params.add_group("second", {c.group_lr, c.group_weight_decay});
  for (std::size_t t = 0; t < c.shapes.size(); ++t) {
    tensors.emplace_back(c.shapes[t], "p" + std::to_string(t));
    tensors.back().set(false, [&](std::int64_t i) { return value(c.seed, t, 0, i); });
    tensors.back().add_to(params, "p" + std::to_string(t), t >= 2 ? group : 0);
  }
  auto opt     = koptim::create(params, list);
  double worst = 0;
  for (int step = 1; step <= 100; ++step) {
    for (std::size_t t = 0; t < tensors.size(); ++t)
      tensors[t].set(true, [&](std::int64_t i) { return value(c.seed, t, step, i); });
    opt->step();
    auto it = c.checks.find(step);
    if (it == c.checks.end()) continue;
    for (std::size_t t = 0; t < tensors.size(); ++t) {
      const auto got  = tensors[t].get();
      const auto& ref = it->second[t];
      EXPECT_EQ(got.size(), ref.size());
      double diff = 0, scale = 0;
      for (std::size_t i = 0; i < ref.size(); ++i) {
        diff  = std::max(diff, std::abs(got[i] - ref[i]));
        scale = std::max(scale, std::abs(ref[i]));
      }
      if (std::getenv("KOPTIM_TEST_VERBOSE"))
        std::printf("%s %s (%s) step %d tensor %zu: max-norm relative error %.3g\n", c.name.c_str(), c.dtype.c_str(),
                    opt->name().c_str(), step, t, diff / scale);
      worst = std::max(worst, diff / scale);
    }
  }
  EXPECT_EQ(opt->step_count(), 100);
  return worst;
}

}  // namespace koptim_test

#endif
