// A NaN or Inf gradient: "error" throws naming the parameter and changes nothing; "skip_step"
// skips the step and changes nothing; the next finite step proceeds normally.
#include "koptim_TestData.hpp"
#include "koptim_TestOptimizers.hpp"
#include "koptim_TestTensor.hpp"

#include <koptim/koptim.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace {

using koptim_test::TestTensor;

class NonFinite : public ::testing::TestWithParam<std::string> {};

TEST_P(NonFinite, ErrorNamesParameterAndChangesNothing) {
  for (double bad : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                     -std::numeric_limits<double>::infinity()}) {
    TestTensor<float> a({4, 4}, "a"), b({6}, "b");
    koptim::ParameterSet params;
    a.add_to(params, "layer.a");
    b.add_to(params, "layer.b");
    a.set(false, [](std::int64_t i) { return koptim_test::value(3, 0, 0, i); });
    b.set(false, [](std::int64_t i) { return koptim_test::value(3, 1, 0, i); });
    auto opt = koptim_test::make_with_policy(params, GetParam(), "error");
    a.set(true, [](std::int64_t i) { return koptim_test::value(3, 0, 1, i); });
    b.set(true, [](std::int64_t i) { return koptim_test::value(3, 1, 1, i); });
    opt->step();
    const auto state = opt->export_state();
    const auto pa = a.get(), pb = b.get();
    b.set(true, [&](std::int64_t i) { return i == 4 ? bad : 1.0; });
    try {
      opt->step();
      ADD_FAILURE() << "no error for a non-finite gradient";
    } catch (const koptim::NonFiniteError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("parameter 'layer.b'"), std::string::npos) << msg;
      EXPECT_NE(msg.find("1 non-finite value(s), the first at flat index 4"), std::string::npos) << msg;
    }
    EXPECT_EQ(a.get(), pa);
    EXPECT_EQ(b.get(), pb);
    EXPECT_TRUE(opt->export_state() == state);
    EXPECT_EQ(opt->step_count(), 1);
  }
}

TEST_P(NonFinite, SkipStepSkipsAndContinues) {
  TestTensor<double> a({3, 5}, "a");
  koptim::ParameterSet params;
  a.add_to(params, "a");
  auto opt = koptim_test::make_with_policy(params, GetParam(), "skip_step");
  a.set(true, [](std::int64_t i) { return i == 7 ? std::numeric_limits<double>::quiet_NaN() : 1.0; });
  const auto state = opt->export_state();
  opt->step();
  EXPECT_EQ(opt->skipped_steps(), 1);
  EXPECT_EQ(opt->step_count(), 0);
  for (double x : a.get()) EXPECT_EQ(x, 0.0);
  auto after                      = opt->export_state();
  after.integers["skipped_steps"] = 0;
  EXPECT_TRUE(after == state);
  a.set(true, [](std::int64_t) { return 1.0; });
  opt->step();
  EXPECT_EQ(opt->step_count(), 1);
  for (double x : a.get()) EXPECT_LT(x, 0.0);
}

INSTANTIATE_TEST_SUITE_P(AllDiagonal, NonFinite, ::testing::Values("SGD", "AdaGrad", "RMSProp", "Adam", "AdamW"));

// The gradient check works in chunks on CPUs (the largest magnitude per chunk first): refused
// values at every chunk boundary, in a partial last chunk and in the first element are counted
// exactly, with the first one's index and value, in float and double; a value just below the
// square limit is not refused.
template <class T>
void check_chunk_boundaries() {
  const T huge = std::nextafter(koptim::Impl::largest_squarable<T>(), std::numeric_limits<T>::infinity());
  for (std::int64_t n : {1, 2047, 2048, 2049, 6001}) {
    for (std::int64_t at : {std::int64_t(0), n / 2, n - 1, std::int64_t(2047), std::int64_t(2048)}) {
      if (at >= n) continue;
      TestTensor<T> t({n}, "g");
      t.set(true, [&](std::int64_t i) { return i == at ? huge : koptim::Impl::largest_squarable<T>(); });
      koptim::ParameterSet ps;
      t.add_to(ps, "g");
      const auto squares = koptim::Impl::check_gradient(ps[0].grad, true);
      EXPECT_EQ(squares.refused, 1) << n << " " << at;
      EXPECT_EQ(squares.nonfinite, 0) << n << " " << at;
      EXPECT_EQ(squares.first, at) << n << " " << at;
      EXPECT_EQ(squares.first_value, static_cast<double>(huge));
      EXPECT_EQ(koptim::Impl::check_gradient(ps[0].grad, false).refused, 0) << n << " " << at;
      // NaN and Inf at two places: both counted, the first named.
      t.set(true, [&](std::int64_t i) {
        return i == at ? std::numeric_limits<T>::quiet_NaN() : i == n - 1 ? -std::numeric_limits<T>::infinity() : T(1);
      });
      const auto r = koptim::Impl::check_gradient(ps[0].grad, false);
      EXPECT_EQ(r.refused, at == n - 1 ? 1 : 2) << n << " " << at;
      EXPECT_EQ(r.nonfinite, r.refused);
      EXPECT_EQ(r.first, at);
    }
  }
}

TEST(GradientCheck, ChunkBoundariesFloat) { check_chunk_boundaries<float>(); }
TEST(GradientCheck, ChunkBoundariesDouble) { check_chunk_boundaries<double>(); }

// The kernels a step launches, by name (Kokkos Tools callbacks).
std::vector<std::string>& launches() {
  static std::vector<std::string> names;
  return names;
}
void on_launch(const char* name, std::uint32_t, std::uint64_t*) { launches().push_back(name); }

// Every gradient is checked by one kernel, however many parameters there are; the check still
// finds a refused value anywhere in a set of float and double tensors of many sizes (chunk and
// tensor boundaries), and names the parameter.
TEST(GradientCheck, OneKernelForAllParameters) {
  for (int count : {1, 40}) {
    std::vector<std::unique_ptr<TestTensor<float>>> fs;
    std::vector<std::unique_ptr<TestTensor<double>>> ds;
    koptim::ParameterSet params;
    for (int k = 0; k < count; ++k) {
      const std::int64_t n = 1 + (k * 977) % 5000;
      if (k % 3 == 2) {
        ds.push_back(std::make_unique<TestTensor<double>>(std::vector<std::int64_t>{n}, "d"));
        ds.back()->add_to(params, "p" + std::to_string(k));
      } else {
        fs.push_back(std::make_unique<TestTensor<float>>(std::vector<std::int64_t>{n}, "f"));
        fs.back()->add_to(params, "p" + std::to_string(k));
      }
    }
    auto set_all = [&](double v) {
      for (auto& t : fs) t->set(true, [&](std::int64_t) { return v; });
      for (auto& t : ds) t->set(true, [&](std::int64_t) { return v; });
    };
    set_all(0.5);
    auto opt = koptim_test::make_with_policy(params, "AdamW", "error");
    opt->step();  // builds the table
    launches().clear();
    Kokkos::Tools::Experimental::set_begin_parallel_reduce_callback(on_launch);
    Kokkos::Tools::Experimental::set_begin_parallel_for_callback(on_launch);
    opt->step();
    Kokkos::Tools::Experimental::set_begin_parallel_reduce_callback(nullptr);
    Kokkos::Tools::Experimental::set_begin_parallel_for_callback(nullptr);
    int checks = 0;
    for (const auto& name : launches()) checks += name.find("check_gradient") != std::string::npos ? 1 : 0;
    EXPECT_EQ(checks, 1) << count << " parameters";
    // A NaN at the first, a middle and the last element of each parameter in turn.
    for (std::size_t k = 0; k < params.size(); ++k) {
      const std::int64_t n = params[k].grad.size;
      for (std::int64_t at : {std::int64_t(0), n / 2, n - 1}) {
        set_all(0.5);
        const auto put = [&](auto& t) {
          t.set(true, [&](std::int64_t i) { return i == at ? std::numeric_limits<double>::quiet_NaN() : 0.5; });
        };
        const int di = static_cast<int>(k) % 3 == 2 ? static_cast<int>(k) / 3 : -1;
        if (di >= 0)
          put(*ds[di]);
        else
          put(*fs[k - k / 3]);
        try {
          opt->step();
          ADD_FAILURE() << "no error for a NaN in parameter " << k << " at " << at;
        } catch (const koptim::NonFiniteError& e) {
          const std::string msg = e.what();
          EXPECT_NE(msg.find("parameter 'p" + std::to_string(k) + "'"), std::string::npos) << msg;
          EXPECT_NE(msg.find("flat index " + std::to_string(at)), std::string::npos) << msg;
        }
      }
    }
  }
}

}  // namespace
