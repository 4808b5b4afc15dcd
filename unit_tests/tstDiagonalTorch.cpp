// The diagonal optimizers against torch.optim: 100 steps on four tensors of rank 1 to 4, with the
// hyperparameter sets of reference/generate_diagonal.py, in float32 and float64, LayoutRight and
// LayoutLeft, built through the parameter-list factory.
#include "koptim_TestTorchReference.hpp"

#include <koptim/koptim.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

namespace {

using koptim_test::ReferenceCase;

const std::vector<ReferenceCase>& reference() { return koptim_test::torch_reference(); }

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

template <class T, class Layout>
double run_case(const ReferenceCase& c) {
  return koptim_test::torch_case_error<T, Layout>(c, list_for(c));
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
