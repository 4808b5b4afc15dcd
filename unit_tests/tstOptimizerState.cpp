// Export and import of the complete optimizer state: a round trip continues the trajectory
// exactly, and a state that does not fit is rejected with a clear error and changes nothing.
#include "koptim_TestData.hpp"
#include "koptim_TestErrors.hpp"
#include "koptim_TestTensor.hpp"

#include <koptim/koptim.hpp>

#include <gtest/gtest.h>

#include <cstring>

namespace {

using koptim_test::TestTensor;

struct Model {
  TestTensor<float> a{{5, 3}, "a"};
  TestTensor<double> b{{7}, "b"};
  koptim::ParameterSet params;
  Model() {
    a.set(false, [](std::int64_t i) { return koptim_test::value(7, 0, 0, i); });
    b.set(false, [](std::int64_t i) { return koptim_test::value(7, 1, 0, i); });
    a.add_to(params, "a");
    b.add_to(params, "b");
  }
  void gradients(int step) {
    a.set(true, [&](std::int64_t i) { return koptim_test::value(7, 0, step, i); });
    b.set(true, [&](std::int64_t i) { return koptim_test::value(7, 1, step, i); });
  }
};

std::unique_ptr<koptim::Optimizer> make(const koptim::ParameterSet& p, const std::string& name) {
  Teuchos::ParameterList l;
  l.set("optimizer", name);
  l.set("lr", 0.01);
  if (name == "SGD") l.set("momentum", 0.9);
  if (name == "RMSProp") {
    l.set("centered", true);
    l.set("momentum", 0.5);
  }
  if (name == "Adam" || name == "AdamW") l.set("amsgrad", true);
  return koptim::create(p, l);
}

// An optimizer of every kind after one step on m (its state initialised).
const std::vector<std::string> every_optimizer = {"SGD", "AdaGrad", "RMSProp", "Adam", "AdamW", "Gefen", "Shampoo"};
std::unique_ptr<koptim::Optimizer> after_one_step(Model& m, const std::string& name) {
  auto opt = make(m.params, name);
  m.gradients(1);
  opt->step();
  return opt;
}

class StateRoundTrip : public ::testing::TestWithParam<std::string> {};

TEST_P(StateRoundTrip, ResumesBitwise) {
  Model m1, m2;
  auto o1 = make(m1.params, GetParam());
  auto o2 = make(m2.params, GetParam());
  for (int s = 1; s <= 5; ++s) {
    m1.gradients(s);
    o1->step();
  }
  const auto state = o1->export_state();
  EXPECT_EQ(state.integers.at("step"), 5);
  // The state holds every buffer: its bytes are the optimizer's state_bytes().
  std::size_t bytes = 0;
  for (const auto& kv : state.tensors) bytes += kv.second.data.size();
  EXPECT_EQ(bytes, o1->state_bytes());
  // Move the second model to the same parameters, import, and continue both.
  Kokkos::deep_copy(m2.a.p2, m1.a.p2);
  Kokkos::deep_copy(m2.b.p1, m1.b.p1);
  o2->import_state(state);
  EXPECT_EQ(o2->step_count(), 5);
  EXPECT_TRUE(o2->export_state() == state);
  for (int s = 6; s <= 10; ++s) {
    m1.gradients(s);
    m2.gradients(s);
    o1->step();
    o2->step();
  }
  EXPECT_EQ(m1.a.get(), m2.a.get());
  EXPECT_EQ(m1.b.get(), m2.b.get());
}

INSTANTIATE_TEST_SUITE_P(AllDiagonal, StateRoundTrip, ::testing::Values("SGD", "AdaGrad", "RMSProp", "Adam", "AdamW"));

// The checkpoint writer's export (Impl::BorrowState): the same state as a copy, in place where the
// host can read the optimizer's memory (nothing copied), and a copy again once the scope ends.
TEST(StateExport, BorrowedEqualsTheCopy) {
  constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, koptim::MemorySpace>::accessible;
  for (const std::string name : {"SGD", "AdaGrad", "RMSProp", "Adam", "AdamW", "Shampoo", "Gefen"}) {
    SCOPED_TRACE(name);
    Model m;
    auto opt = make(m.params, name);
    for (int s = 1; s <= 3; ++s) {
      m.gradients(s);
      opt->step();
    }
    const auto copied = opt->export_state();
    koptim::OptimizerState borrowed;
    {
      koptim::Impl::BorrowState borrow;
      EXPECT_TRUE(koptim::Impl::BorrowState::active());
      borrowed = opt->export_state();
    }
    EXPECT_FALSE(koptim::Impl::BorrowState::active());
    EXPECT_TRUE(borrowed == copied);
    // Every tensor is lent on a host backend but Gefen's codebook, which lives in host memory
    // apart from the Views (a copy of 1 KiB); none on a device backend.
    for (const auto& kv : borrowed.tensors) {
      EXPECT_EQ(kv.second.borrowed != nullptr, host && kv.first != "codebook") << kv.first;
      if (kv.second.borrowed) EXPECT_TRUE(kv.second.data.empty()) << kv.first;
    }
    for (const auto& kv : opt->export_state().tensors) EXPECT_EQ(kv.second.borrowed, nullptr) << kv.first;
  }
}

TEST(StateImport, RejectsWhatDoesNotFitAndChangesNothing) {
  Model m;
  auto opt = make(m.params, "AdamW");
  m.gradients(1);
  opt->step();
  const auto good      = opt->export_state();
  auto expect_rejected = [&](const koptim::OptimizerState& s, const std::string& what) {
    koptim_test::expect_error<koptim::StateError>([&] { opt->import_state(s); }, {what});
    EXPECT_TRUE(opt->export_state() == good);  // unchanged
  };
  auto s      = good;
  s.optimizer = "Adam";
  expect_rejected(s, "belongs to optimizer 'Adam'");
  s = good;
  s.tensors.erase("b/exp_avg_sq");
  expect_rejected(s, "no tensor 'b/exp_avg_sq'");
  s = good;
  s.tensors["a/exp_avg"].data.resize(8);
  s.tensors["a/exp_avg"].shape = {2};
  expect_rejected(s, "'a/exp_avg' has shape (2,)");
  s                            = good;
  s.tensors["a/exp_avg"].dtype = koptim::ScalarType::float64;
  expect_rejected(s, "'a/exp_avg' has scalar type float64, expected float32");
  s                      = good;
  s.tensors["c/exp_avg"] = s.tensors["a/exp_avg"];
  expect_rejected(s, "tensor 'c/exp_avg', which this optimizer does not hold");
  s = good;
  s.integers.erase("step");
  expect_rejected(s, "no integer 'step'");
  // A rejected import in the middle of the list must not have copied the entries before it.
  s = good;
  for (auto& kv : s.tensors) std::fill(kv.second.data.begin(), kv.second.data.end(), 0);
  s.tensors["b/max_exp_avg_sq"].shape = {3};
  s.tensors["b/max_exp_avg_sq"].data.resize(24);
  expect_rejected(s, "'b/max_exp_avg_sq' has shape (3,)");
}

// SGD's first step sets its momentum buffer from the gradient without reading it (torch's buffer
// is None until then): a state at step 0 holding a non-zero buffer, which that step would discard,
// is refused; zeros at step 0 and any buffer after a step load.
TEST(StateImport, SgdRefusesAMomentumBufferAtStepZero) {
  Model m;
  auto opt          = make(m.params, "SGD");
  const auto fresh  = opt->export_state();
  auto s            = fresh;
  const double five = 5.0;
  std::memcpy(s.tensors.at("b/momentum_buffer").data.data() + 8 * 3, &five, 8);
  koptim_test::expect_error<koptim::StateError>(
      [&] { opt->import_state(s); },
      {"state tensor 'b/momentum_buffer' has value 5 at flat index 3 in a state at step 0", "allowed there: zeros"});
  EXPECT_TRUE(opt->export_state() == fresh);
  opt->import_state(fresh);
  s.integers["step"] = 1;
  opt->import_state(s);
  EXPECT_TRUE(opt->export_state() == s);
}

// An integer or a real the optimizer does not hold is refused, not ignored (every optimizer).
TEST(StateImport, RejectsScalarsTheOptimizerDoesNotHold) {
  for (const std::string& name : every_optimizer) {
    Model m;
    auto opt        = after_one_step(m, name);
    const auto good = opt->export_state();
    ASSERT_NO_THROW(opt->import_state(good)) << name;
    auto s              = good;
    s.integers["Step"]  = 100;
    auto expect_refused = [&](const koptim::OptimizerState& bad, const std::string& what) {
      koptim_test::expect_error<koptim::StateError>([&] { opt->import_state(bad); }, {what});
      EXPECT_TRUE(opt->export_state() == good) << name;
    };
    expect_refused(s, "integer 'Step'");
    s             = good;
    s.reals["lr"] = 0.5;
    expect_refused(s, "real 'lr'");
    // An integer's key under the reals (and the reverse) is not the entry the optimizer holds.
    s               = good;
    s.reals["step"] = 1.0;
    expect_refused(s, "real 'step', which this optimizer does not hold");
    for (const auto& kv : good.integers) {
      s                 = good;
      s.reals[kv.first] = 0.0;
      expect_refused(s, "real '" + kv.first + "', which this optimizer does not hold");
    }
    for (const auto& kv : good.reals) {
      s                    = good;
      s.integers[kv.first] = 0;
      expect_refused(s, "integer '" + kv.first + "', which this optimizer does not hold");
    }
    // A tensor no parameter, slot or block has.
    ASSERT_FALSE(good.tensors.empty()) << name;
    s                          = good;
    s.tensors["other/exp_avg"] = good.tensors.begin()->second;
    expect_refused(s, "tensor 'other/exp_avg', which this optimizer does not hold");
  }
}

// An unsharded optimizer keeps every tensor whole: a tensor marked as a slice of a larger one (or
// with an offset and no whole shape) is refused, every tensor of every optimizer (Gefen accepted
// them, reading the slice's elements as the whole tensor's).
TEST(StateImport, RejectsSlicesWhereTheTensorIsWhole) {
  for (const std::string& name : every_optimizer) {
    Model m;
    auto opt        = after_one_step(m, name);
    const auto good = opt->export_state();
    for (const auto& kv : good.tensors) {
      SCOPED_TRACE(name + " " + kv.first);
      auto s           = good;
      auto& t          = s.tensors[kv.first];
      const auto whole = t.shape.empty() ? std::int64_t(1) : t.size();
      t.whole          = {2 * whole};
      t.offset         = whole;
      koptim_test::expect_error<koptim::StateError>(
          [&] { opt->import_state(s); },
          {"state tensor '" + kv.first + "' is the slice at element " + std::to_string(whole),
           "this rank keeps the whole tensor"});
      EXPECT_TRUE(opt->export_state() == good);
      t.whole.clear();
      t.offset = 3;
      koptim_test::expect_error<koptim::StateError>([&] { opt->import_state(s); },
                                                    {"'" + kv.first + "' is marked with offset 3 but no whole shape"});
      EXPECT_TRUE(opt->export_state() == good);
    }
  }
}

TEST(StateBytes, AreExact) {
  Model m;  // 15 float + 7 double parameters
  const std::size_t f = 15 * 4, d = 7 * 8;
  EXPECT_EQ(make(m.params, "SGD")->state_bytes(), f + d);            // momentum buffer
  EXPECT_EQ(make(m.params, "AdaGrad")->state_bytes(), f + d);        // sum
  EXPECT_EQ(make(m.params, "RMSProp")->state_bytes(), 3 * (f + d));  // square_avg, momentum, grad_avg
  EXPECT_EQ(make(m.params, "AdamW")->state_bytes(), 3 * (f + d));    // exp_avg, exp_avg_sq, max (amsgrad)
  koptim::CommonOptions c;
  c.lr = 0.1;
  EXPECT_EQ(koptim::SGD(m.params, c).state_bytes(), 0u);  // no momentum, no state
  EXPECT_EQ(koptim::Adam(m.params, c).state_bytes(), 2 * (f + d));
}

}  // namespace
