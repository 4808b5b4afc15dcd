// Extreme values for every optimizer, float and double: gradients of 1e-30, of the largest
// finite values and just below the square-root limit, all-zero gradients for 200 steps, rank-1
// and rank-deficient gradients, Shampoo factors with condition numbers up to 1e12, first Gefen
// gradients with zero or one non-zero element. After every step either everything is finite
// (parameters and the whole exported state), or the step threw a koptim::Error and changed
// nothing (parameters and export_state() compared before and after).
//
// The numerics and state-import defects found in review have their own tests below: a huge finite
// gradient freezing the element-wise optimizers, coupled Newton on a rank-1 factor, the
// "unchecked" policy checking, state import accepting NaN, negative, transposed or overflowing
// entries, ParameterSet::add_ref trusting its TensorRef, and a huge max_preconditioner_dim.
#include "koptim_TestErrors.hpp"
#include "koptim_TestTensor.hpp"

#include <koptim/koptim.hpp>

#include <gtest/gtest.h>

#include <cfenv>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace {

using koptim_test::expect_error;
using koptim_test::TestTensor;

const std::vector<std::string> all_optimizers = {"SGD", "AdaGrad", "RMSProp", "Adam", "AdamW", "Shampoo", "Gefen"};

Teuchos::ParameterList list_for(const std::string& optimizer, const std::string& policy = "error") {
  Teuchos::ParameterList l;
  l.set("optimizer", optimizer);
  l.set("lr", 0.01);
  l.set("nonfinite_gradient", policy);
  return l;
}

// Every float and double entry of a state finite, and its reals.
bool state_finite(const koptim::OptimizerState& s, std::string& where) {
  for (const auto& kv : s.reals) {
    if (!std::isfinite(kv.second)) {
      where = "real " + kv.first;
      return false;
    }
  }
  for (const auto& kv : s.tensors) {
    const auto& t = kv.second;
    if (t.dtype == koptim::ScalarType::uint8) continue;
    const std::size_t size = t.dtype == koptim::ScalarType::float32 ? 4 : 8;
    for (std::size_t i = 0; i < t.data.size() / size; ++i) {
      double x;
      if (size == 4) {
        float f;
        std::memcpy(&f, t.data.data() + i * 4, 4);
        x = f;
      } else {
        std::memcpy(&x, t.data.data() + i * 8, 8);
      }
      if (!std::isfinite(x)) {
        where = "tensor " + kv.first + " at " + std::to_string(i);
        return false;
      }
    }
  }
  return true;
}

bool all_finite(const std::vector<double>& v) {
  for (double x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

// Bitwise comparison (NaN-safe, no FE_INVALID).
bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

// One model: a matrix and a vector parameter of scalar type T.
template <class T>
struct Model {
  TestTensor<T> w{{8, 6}, "w"}, b{{5}, "b"};
  koptim::ParameterSet params;
  Model() {
    w.add_to(params, "w");
    b.add_to(params, "b");
    w.set(false, [](std::int64_t i) { return 0.1 * std::sin(0.7 * static_cast<double>(i) + 0.3); });
    b.set(false, [](std::int64_t i) { return 0.05 * static_cast<double>(i) - 0.1; });
  }
  void grads(const std::function<double(std::int64_t)>& gw, const std::function<double(std::int64_t)>& gb) {
    w.set(true, gw);
    b.set(true, gb);
  }
};

// One step: either everything finite afterwards, or a koptim::Error and nothing changed.
template <class T>
void step_checked(koptim::Optimizer& opt, Model<T>& m, const std::string& what) {
  const auto state = opt.export_state();
  const auto pw = m.w.get(), pb = m.b.get();
  const auto steps = opt.step_count();
  try {
    opt.step();
  } catch (const koptim::Error& e) {
    EXPECT_TRUE(same_bits(m.w.get(), pw)) << what << ": " << e.what();
    EXPECT_TRUE(same_bits(m.b.get(), pb)) << what << ": " << e.what();
    EXPECT_TRUE(opt.export_state() == state) << what << ": " << e.what();
    EXPECT_EQ(opt.step_count(), steps) << what;
    return;
  }
  std::string where;
  EXPECT_TRUE(all_finite(m.w.get())) << what;
  EXPECT_TRUE(all_finite(m.b.get())) << what;
  EXPECT_TRUE(state_finite(opt.export_state(), where)) << what << ": " << where;
}

template <class T>
std::unique_ptr<koptim::Optimizer> make(Model<T>& m, const std::string& name, Teuchos::ParameterList l = {}) {
  auto base = list_for(name);
  for (auto it = l.begin(); it != l.end(); ++it) base.setEntry(l.name(it), l.entry(it));
  return koptim::create(m.params, base);
}

template <class T>
void constant_gradients(double value, int steps) {
  for (const auto& name : all_optimizers) {
    Model<T> m;
    auto opt = make(m, name);
    for (int s = 0; s < steps; ++s) {
      m.grads([&](std::int64_t i) { return (i % 3 == 0 ? -value : value); },
              [&](std::int64_t i) { return (i % 2 == 0 ? value : -value); });
      step_checked(*opt, m, name + " g = " + std::to_string(value) + " step " + std::to_string(s));
    }
  }
}

template <class T>
void extremes() {
  constant_gradients<T>(1e-30, 20);
  constant_gradients<T>(std::numeric_limits<T>::max(), 3);
  constant_gradients<T>(std::numeric_limits<T>::lowest(), 3);
  constant_gradients<T>(std::numeric_limits<T>::denorm_min(), 3);
  // Just below the square-root limit: accepted by every optimizer but Shampoo (whose trace
  // bound refuses it), and the sums of squares (AdaGrad) still stay finite over many steps.
  const double below = std::nextafter(std::ldexp(T(1), std::numeric_limits<T>::max_exponent / 2), T(0));
  constant_gradients<T>(below, 6);
  constant_gradients<T>(0.0, 200);
}

// The options that change the arithmetic: centered RMSProp (sqrt of a difference), AMSGrad,
// Nesterov momentum, Shampoo with grafting and the eigenvalue-corrected variant, Gefen's full
// second moment; constant and alternating gradients for 2000 steps, 300 for Shampoo (the moving
// averages settle to their limits, where differences of nearly equal values appear).
template <class T>
void variants() {
  std::vector<std::pair<std::string, Teuchos::ParameterList>> cases;
  auto add = [&](const std::string& name, const std::function<void(Teuchos::ParameterList&)>& f) {
    Teuchos::ParameterList l;
    f(l);
    cases.emplace_back(name, l);
  };
  add("RMSProp", [](Teuchos::ParameterList& l) {
    l.set("centered", true);
    l.set("momentum", 0.9);
  });
  add("Adam", [](Teuchos::ParameterList& l) { l.set("amsgrad", true); });
  add("SGD", [](Teuchos::ParameterList& l) {
    l.set("momentum", 0.9);
    l.set("nesterov", true);
  });
  add("Shampoo", [](Teuchos::ParameterList& l) { l.set("grafting", std::string("Adam")); });
  add("Shampoo", [](Teuchos::ParameterList& l) { l.set("eigenvalue_corrected", true); });
  add("Gefen", [](Teuchos::ParameterList& l) { l.set("p1_second_moment", std::string("full")); });
  for (auto& c : cases) {
    for (int kind = 0; kind < 2; ++kind) {
      Model<T> m;
      auto opt = make(m, c.first, c.second);
      // Shampoo computes its roots at every step: fewer steps keep the test short.
      const int steps = c.first == "Shampoo" ? 300 : 2000;
      for (int s = 0; s < steps; ++s) {
        const double v = kind == 0 ? 1.0 : (s % 2 == 0 ? 0.3 : -0.3);
        m.grads([&](std::int64_t i) { return i % 2 == 0 ? v : 0.5 * v; }, [&](std::int64_t) { return v; });
        // The full comparison every 100 steps (the test main traps any NaN produced in between).
        if (s % 100 == 99) {
          step_checked(*opt, m, c.first + " kind " + std::to_string(kind) + " step " + std::to_string(s));
          if (::testing::Test::HasFailure()) return;
        } else {
          opt->step();
        }
      }
    }
  }
}

TEST(Robustness, OptionVariantsFloat) { variants<float>(); }
TEST(Robustness, OptionVariantsDouble) { variants<double>(); }

TEST(Robustness, ExtremeGradientsFloat) { extremes<float>(); }
TEST(Robustness, ExtremeGradientsDouble) { extremes<double>(); }

// Rank-1 and rank-deficient gradients (u v^T, and a rank-2 matrix) with both root methods,
// and ill-conditioned factors (singular values of G from 1 to 1e-6: condition 1e12 of G G^T).
template <class T>
void low_rank() {
  for (const std::string method : {"eigen", "coupled_newton"}) {
    for (int kind = 0; kind < 3; ++kind) {
      for (const auto& name : all_optimizers) {
        Model<T> m;
        Teuchos::ParameterList l;
        if (name == "Shampoo") {
          l.set("root_method", method);
          l.set("max_preconditioner_dim", 8);
        } else if (method != "eigen") {
          continue;
        }
        auto opt = make(m, name, l);
        for (int s = 0; s < 12; ++s) {
          const double scale = 1.0 + 0.1 * s;
          m.grads(
              [&](std::int64_t k) {
                const double i = static_cast<double>(k / 6), j = static_cast<double>(k % 6);
                const double u = std::cos(0.9 * i + 0.2), v = std::sin(0.4 * j + 1.0);
                if (kind == 0) return scale * u * v;                                            // rank 1
                if (kind == 1) return scale * (u * v + std::cos(1.7 * i) * std::cos(2.1 * j));  // rank 2
                // Orthogonal-ish directions with weights 1, 1e-3, 1e-6: cond(G G^T) ~ 1e12.
                return scale * (u * v + 1e-3 * std::cos(1.7 * i) * std::cos(2.1 * j) +
                                1e-6 * std::sin(2.9 * i + 0.5) * std::cos(0.3 * j + 0.1));
              },
              [&](std::int64_t k) { return kind == 0 ? scale : scale * (k == 0 ? 1.0 : 1e-6); });
          step_checked(*opt, m, name + " " + method + " kind " + std::to_string(kind) + " step " + std::to_string(s));
        }
        EXPECT_GT(opt->step_count(), 0) << name << " " << method << " kind " << kind;
      }
    }
  }
}

TEST(Robustness, LowRankAndIllConditionedFloat) { low_rank<float>(); }
TEST(Robustness, LowRankAndIllConditionedDouble) { low_rank<double>(); }

// Gefen learns its partitions and codebook from the first gradients: all zeros, or one
// non-zero element, must give a usable state.
template <class T>
void gefen_first_gradient() {
  for (int kind = 0; kind < 2; ++kind) {
    Model<T> m;
    auto opt = make(m, "Gefen");
    m.grads([&](std::int64_t i) { return kind == 1 && i == 7 ? 0.5 : 0.0; },
            [&](std::int64_t i) { return kind == 1 && i == 2 ? -2.0 : 0.0; });
    step_checked(*opt, m, "Gefen first gradient kind " + std::to_string(kind));
    EXPECT_EQ(opt->step_count(), 1);
    for (int s = 0; s < 20; ++s) {
      m.grads([&](std::int64_t i) { return std::sin(0.3 * static_cast<double>(i + s)); },
              [&](std::int64_t i) { return std::cos(0.5 * static_cast<double>(i + s)); });
      step_checked(*opt, m, "Gefen after first gradient kind " + std::to_string(kind));
    }
    EXPECT_EQ(opt->step_count(), 21);
    auto again = make(m, "Gefen");
    again->import_state(opt->export_state());
    EXPECT_TRUE(again->export_state() == opt->export_state());
  }
}

TEST(Robustness, GefenFirstGradientZeroOrOneElementFloat) { gefen_first_gradient<float>(); }
TEST(Robustness, GefenFirstGradientZeroOrOneElementDouble) { gefen_first_gradient<double>(); }

// ---------------------------------------------------------------------------------------------
// Issue 11 defects.

// One finite but huge gradient (its square overflows) used to put Inf in the second moment with
// no error, freezing the parameters for good. Now refused before anything changes; Gefen's state
// still re-imports; the next good step moves the parameters.
template <class T>
void huge_gradient_refused(const std::string& name) {
  const double huge = std::is_same<T, float>::value ? 1e30 : 1e200;
  Model<T> m;
  auto opt = make(m, name);
  m.grads([](std::int64_t i) { return 0.01 * static_cast<double>(i + 1); }, [](std::int64_t) { return 0.1; });
  opt->step();
  const auto state = opt->export_state();
  const auto pw = m.w.get(), pb = m.b.get();
  m.grads([&](std::int64_t i) { return i == 5 ? huge : 0.1; }, [](std::int64_t) { return 0.1; });
  expect_error<koptim::NonFiniteError>([&] { opt->step(); },
                                       {"parameter 'w'", "1 value(s) whose square overflows", "flat index 5"});
  EXPECT_TRUE(same_bits(m.w.get(), pw)) << name;
  EXPECT_TRUE(same_bits(m.b.get(), pb)) << name;
  EXPECT_TRUE(opt->export_state() == state) << name;
  EXPECT_EQ(opt->step_count(), 1) << name;
  // The state re-imports into a fresh optimizer and the next step moves every parameter.
  auto again = make(m, name);
  again->import_state(opt->export_state());
  m.grads([](std::int64_t i) { return 0.02 * static_cast<double>(i + 1); }, [](std::int64_t) { return 0.2; });
  opt->step();
  const auto qw = m.w.get();
  for (std::size_t i = 0; i < qw.size(); ++i) EXPECT_NE(qw[i], pw[i]) << name << " element " << i;
  std::string where;
  EXPECT_TRUE(state_finite(opt->export_state(), where)) << name << ": " << where;
  // skip_step skips it.
  Model<T> m2;
  auto skip = koptim::create(m2.params, list_for(name, "skip_step"));
  m2.grads([&](std::int64_t i) { return i == 5 ? -huge : 0.1; }, [](std::int64_t) { return 0.1; });
  const auto w0 = m2.w.get();
  skip->step();
  EXPECT_EQ(skip->skipped_steps(), 1) << name;
  EXPECT_EQ(skip->step_count(), 0) << name;
  EXPECT_TRUE(same_bits(m2.w.get(), w0)) << name;
}

TEST(Defects, HugeFiniteGradientIsRefusedFloat) {
  for (const char* name : {"AdamW", "Adam", "AdaGrad", "RMSProp", "Gefen"}) huge_gradient_refused<float>(name);
}
TEST(Defects, HugeFiniteGradientIsRefusedDouble) {
  for (const char* name : {"AdamW", "Adam", "AdaGrad", "RMSProp", "Gefen"}) huge_gradient_refused<double>(name);
}

// Coupled Newton on the rank-1 factor of a rank-1 gradient (default epsilon) used to throw a
// non-finite error whose hint named epsilon = 0, and kept throwing. Now the step is taken and the
// optimizer goes on.
template <class T>
void newton_rank_one() {
  TestTensor<T> w({16, 12}, "w");
  koptim::ParameterSet params;
  w.add_to(params, "w");
  auto l = list_for("Shampoo");
  l.set("root_method", std::string("coupled_newton"));
  auto opt = koptim::create(params, l);
  for (int s = 0; s < 8; ++s) {
    w.set(true, [&](std::int64_t k) {
      return (1.0 + s) * std::cos(0.3 * static_cast<double>(k / 12)) * std::sin(0.5 * static_cast<double>(k % 12) + 1);
    });
    ASSERT_NO_THROW(opt->step()) << "step " << s;
  }
  EXPECT_EQ(opt->step_count(), 8);
  EXPECT_TRUE(all_finite(w.get()));
  std::string where;
  EXPECT_TRUE(state_finite(opt->export_state(), where)) << where;
}

TEST(Defects, CoupledNewtonRankOneFactorFloat) { newton_rank_one<float>(); }
TEST(Defects, CoupledNewtonRankOneFactorDouble) { newton_rank_one<double>(); }

// nonfinite_gradient = unchecked must not check: Gefen and Shampoo used to refuse a gradient
// whose square overflows float anyway.
TEST(Defects, UncheckedDoesNotCheckInGefenAndShampoo) {
  for (const char* name : {"Gefen", "Shampoo"}) {
    Model<float> m;
    auto l = list_for(name, "unchecked");
    if (std::string(name) == "Shampoo") l.set("start_preconditioning_step", 1000);
    auto opt = koptim::create(m.params, l);
    m.grads([](std::int64_t i) { return i == 3 ? 1e30 : 0.1; }, [](std::int64_t) { return 0.1; });
    EXPECT_NO_THROW(opt->step()) << name;
    EXPECT_EQ(opt->step_count(), 1) << name;
  }
}

// Centered RMSProp's a - m^2 rounds below 0 for a nearly constant gradient: with float, alpha
// 0.99 and g = 5.9 at step 1225 (torch 2.15 gives NaN there), with double, g = 0.1 at step 3226.
// The parameters and the state stay finite.
template <class T>
void centered_rmsprop_constant_gradient(double g, int steps) {
  Model<T> m;
  auto l = list_for("RMSProp");
  l.set("centered", true);
  l.set("lr", 1e-3);
  for (const double momentum : {0.0, 0.9}) {
    l.set("momentum", momentum);
    auto opt = koptim::create(m.params, l);
    m.grads([=](std::int64_t) { return g; }, [=](std::int64_t) { return g; });
    for (int s = 1; s <= steps; ++s) opt->step();
    EXPECT_TRUE(all_finite(m.w.get())) << "momentum " << momentum;
    std::string where;
    EXPECT_TRUE(state_finite(opt->export_state(), where)) << where << ", momentum " << momentum;
  }
}
TEST(Defects, CenteredRMSPropConstantGradientFloat) { centered_rmsprop_constant_gradient<float>(5.9, 1300); }
TEST(Defects, CenteredRMSPropConstantGradientDouble) { centered_rmsprop_constant_gradient<double>(0.1, 3300); }

// eps = 0 (and Shampoo's grafting_epsilon = 0) is allowed, as in torch, but a coordinate whose
// second moment is 0 (every gradient so far 0, or squares below the smallest subnormal) divided
// 0 by 0 (or m by 0): NaN or Inf in the parameter, which the next step reported as a non-finite
// gradient; in Shampoo's grafting the norm spread it over the whole block. Such a coordinate now
// gets no step; the others are stepped as before.
template <class T>
void zero_eps(double tiny) {
  struct Case {
    std::string optimizer;
    std::function<void(Teuchos::ParameterList&)> set;
    bool elementwise;  // no decay: a coordinate without a step keeps its value
  };
  const std::vector<Case> cases = {
      {"AdaGrad", [](auto& l) { l.set("eps", 0.0); }, true},
      {"RMSProp", [](auto& l) { l.set("eps", 0.0); }, true},
      {"RMSProp", [](auto& l) { l.set("eps", 0.0), l.set("centered", true), l.set("momentum", 0.9); }, true},
      {"Adam", [](auto& l) { l.set("eps", 0.0); }, true},
      {"Adam", [](auto& l) { l.set("eps", 0.0), l.set("amsgrad", true); }, true},
      {"AdamW", [](auto& l) { l.set("eps", 0.0); }, false},
      {"Shampoo", [](auto& l) { l.set("grafting", std::string("AdaGrad")), l.set("grafting_epsilon", 0.0); }, false},
      {"Shampoo", [](auto& l) { l.set("grafting", std::string("RMSProp")), l.set("grafting_epsilon", 0.0); }, false},
      {"Shampoo", [](auto& l) { l.set("grafting", std::string("Adam")), l.set("grafting_epsilon", 0.0); }, false},
  };
  // w: every third entry 0, every third tiny (its square is 0), the others 0.1; b: all 0.
  const auto gw = [=](std::int64_t i) { return i % 3 == 0 ? 0.0 : (i % 3 == 1 ? tiny : 0.1); };
  for (const auto& c : cases) {
    Model<T> m;
    auto l = list_for(c.optimizer);
    c.set(l);
    const auto what = c.optimizer + " " + Teuchos::toString(l);
    auto opt        = koptim::create(m.params, l);
    const auto w0 = m.w.get(), b0 = m.b.get();
    m.grads(gw, [](std::int64_t) { return 0.0; });
    for (int s = 0; s < 3; ++s) ASSERT_NO_THROW(opt->step()) << what;
    const auto w = m.w.get(), b = m.b.get();
    std::string where;
    EXPECT_TRUE(all_finite(w) && all_finite(b)) << what;
    EXPECT_TRUE(state_finite(opt->export_state(), where)) << what << ": " << where;
    EXPECT_NE(w[2], w0[2]) << what;  // a coordinate with a gradient is stepped
    if (!c.elementwise) continue;
    for (std::size_t i = 0; i < w.size(); ++i)
      if (i % 3 != 2) EXPECT_EQ(w[i], w0[i]) << what << ", w[" << i << "]";
    EXPECT_TRUE(same_bits(b, b0)) << what;
  }
}
TEST(Defects, ZeroEpsGivesNoStepWhereTheSecondMomentIsZeroFloat) { zero_eps<float>(1e-30); }
TEST(Defects, ZeroEpsGivesNoStepWhereTheSecondMomentIsZeroDouble) { zero_eps<double>(1e-200); }

// lr and weight_decay are accepted up to 1e300, but the kernels round them to the parameter's
// type: for a float parameter a weight_decay of 1e39 was Inf (L2: g + Inf * 0 = NaN, no error).
// Refused for groups with float parameters, naming the group and the parameter; double
// parameters keep the whole range.
TEST(Defects, LrOrWeightDecayBeyondFloatIsRefusedForFloatParameters) {
  for (const char* name : {"SGD", "Adam", "AdamW", "Gefen", "Shampoo"}) {
    for (const char* key : {"lr", "weight_decay"}) {
      auto l = list_for(name);
      l.set(key, 1e39);
      Model<float> f;
      expect_error<koptim::ConfigError>([&] { koptim::create(f.params, l); },
                                        {std::string(key) + " = 1e+39 of group 'default'", "parameter 'w'",
                                         "allowed for float32 parameters: 0 to 3.40282"});
      Model<double> d;
      EXPECT_NO_THROW(koptim::create(d.params, l)) << name << " " << key;
    }
  }
}

// The range follows each parameter's own group: a group of double parameters may take an lr
// beyond the largest float while the default group holds float ones; the same lr on a group
// that also holds a float parameter is refused, naming that group and parameter.
TEST(Defects, LrBeyondFloatFollowsEachParametersGroup) {
  for (const bool float_in_big : {false, true}) {
    TestTensor<float> w({4, 3}, "w");
    TestTensor<double> d({5}, "d");
    TestTensor<float> f({2}, "f");
    koptim::ParameterSet ps;
    const int big = ps.add_group("big", {1e39, std::nullopt});
    w.add_to(ps, "w");
    d.add_to(ps, "d", big);
    if (float_in_big) f.add_to(ps, "f", big);
    for (const char* name : {"AdamW", "Shampoo"}) {
      if (float_in_big) {
        expect_error<koptim::ConfigError>([&] { koptim::create(ps, list_for(name)); },
                                          {"lr = 1e+39 of group 'big'", "parameter 'f'"});
      } else {
        EXPECT_NO_THROW(koptim::create(ps, list_for(name))) << name;
      }
    }
  }
}

// Gefen under unchecked with a first gradient of Inf only (every block's absmax Inf, every ratio
// Inf / Inf): every ratio is left out of the codebook's histogram, which was then empty while the
// elements were counted, and the first step threw "the histogram is empty" instead of taking the
// uniform codebook of the empty case.
TEST(Defects, UncheckedGefenFirstGradientWithoutAFiniteValue) {
#if defined(__GLIBC__) && (defined(__x86_64__) || defined(__aarch64__))
  // Comparisons with NaN raise FE_INVALID, which the test main traps.
  struct NoInvalidTrap {
    int was = fedisableexcept(FE_INVALID);
    ~NoInvalidTrap() {
      std::feclearexcept(FE_INVALID);
      feenableexcept(was & FE_INVALID);
    }
  } no_trap;
#endif
  Model<float> m;
  auto opt         = koptim::create(m.params, list_for("Gefen", "unchecked"));
  const double inf = std::numeric_limits<double>::infinity();
  m.grads([=](std::int64_t i) { return i % 2 ? inf : -inf; }, [=](std::int64_t) { return inf; });
  EXPECT_NO_THROW(opt->step());
  EXPECT_EQ(opt->step_count(), 1);
}

// Shampoo compared |G|^2 (in double) with the largest float exactly, but its GEMMs sum the
// squares in float, rounding (and with fused multiply-adds) up to (n + 2) units of roundoff above
// the exact sum: a (2, 3) block whose |G|^2 is 3.4028234567e38, below the largest float by
// 3e-9 relative, passed and could put Inf in a factor. Now refused, with the margin in the
// message; a gradient a little smaller still passes.
TEST(Defects, ShampooKeepsARoundingMarginBelowTheLargestFloat) {
  TestTensor<float> w({2, 3}, "w");
  koptim::ParameterSet ps;
  w.add_to(ps, "w");
  const double row[3] = {1.0872540522e19, 1.0042111276e19, 1.1010277444e19};
  double sumsq        = 0;
  for (const double x : row) sumsq += static_cast<double>(static_cast<float>(x)) * static_cast<float>(x);
  ASSERT_LE(sumsq, static_cast<double>(std::numeric_limits<float>::max()));
  auto opt = koptim::create(ps, list_for("Shampoo"));
  w.set(true, [&](std::int64_t i) { return i < 3 ? row[i] : 0.0; });
  const auto before = w.get();
  expect_error<koptim::NonFiniteError>([&] { opt->step(); },
                                       {"parameter 'w'", "less the rounding of the factors' sums"});
  EXPECT_EQ(w.get(), before);
  EXPECT_EQ(opt->step_count(), 0);
  // 0.9 of it passes, and the factors stay finite.
  w.set(true, [&](std::int64_t i) { return i < 3 ? 0.9 * row[i] : 0.0; });
  opt->step();
  EXPECT_EQ(opt->step_count(), 1);
  std::string where;
  EXPECT_TRUE(state_finite(opt->export_state(), where)) << where;
}

// Shampoo named a non-finite gradient (here: finite, made Inf by L2 weight decay) a "squared
// norm (inf)".
TEST(Defects, ShampooNamesANonFiniteGradient) {
  Model<float> m;
  auto l = list_for("Shampoo");
  l.set("weight_decay", 10.0);
  l.set("weight_decay_type", std::string("L2"));
  auto opt = koptim::create(m.params, l);
  m.w.set(false, [](std::int64_t i) { return i == 4 ? 3e38 : 0.1; });
  m.grads([](std::int64_t) { return 0.1; }, [](std::int64_t) { return 0.1; });
  try {
    opt->step();
    ADD_FAILURE() << "no error";
  } catch (const koptim::NonFiniteError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find("squared norm (inf)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("NaN or Inf"), std::string::npos) << msg;
    EXPECT_NE(msg.find("parameter 'w'"), std::string::npos) << msg;
  }
  EXPECT_EQ(opt->step_count(), 0);
}

// Element-wise state: NaN and negative second moments, and a transposed shape with the same
// element count, are refused.
template <class T>
void set_element(koptim::StateTensor& t, std::size_t i, T v) {
  std::memcpy(t.data.data() + i * sizeof(T), &v, sizeof(T));
}

TEST(Defects, ElementwiseImportRefusesBadValuesAndShapes) {
  for (const char* name : {"AdamW", "Adam", "AdaGrad", "RMSProp"}) {
    Model<float> m;
    auto opt = make(m, name);
    m.grads([](std::int64_t i) { return 0.01 * static_cast<double>(i); }, [](std::int64_t) { return 0.1; });
    opt->step();
    const auto good          = opt->export_state();
    const std::string second = std::string(name) == "AdaGrad"   ? "w/sum"
                               : std::string(name) == "RMSProp" ? "w/square_avg"
                                                                : "w/exp_avg_sq";
    auto s                   = good;
    set_element<float>(s.tensors.at(second), 3, std::numeric_limits<float>::quiet_NaN());
    expect_error<koptim::StateError>([&] { opt->import_state(s); }, {"'" + second + "'", "flat index 3", "finite"});
    s = good;
    set_element<float>(s.tensors.at(second), 2, -1.0f);
    expect_error<koptim::StateError>([&] { opt->import_state(s); }, {"'" + second + "'", "flat index 2", ">= 0"});
    s                          = good;
    s.tensors.at(second).shape = {6, 8};
    expect_error<koptim::StateError>([&] { opt->import_state(s); }, {"'" + second + "'", "shape (6, 8)", "(8, 6)"});
    EXPECT_TRUE(opt->export_state() == good) << name;
  }
}

// An exported state records the memory order of the tensors that follow their parameter's
// (element-wise slots, Gefen's per-parameter state): a state of a LayoutRight (2, 3) parameter
// imported into a LayoutLeft (2, 3) one (a host build's View<float**> against a CUDA build's)
// put every moment on another element, without a word. Refused now, naming both layouts; the
// same layout imports; Shampoo's state is in the blocks' own order and imports across layouts.
TEST(Defects, ImportRefusesAStateOfTheOtherMemoryOrder) {
  struct Side {
    Kokkos::View<float**, Kokkos::LayoutRight> wr{"wr", 2, 3}, gr{"gr", 2, 3};
    Kokkos::View<float**, Kokkos::LayoutLeft> wl{"wl", 2, 3}, gl{"gl", 2, 3};
    koptim::ParameterSet right, left;
    Side() {
      right.add("w", wr, gr);
      left.add("w", wl, gl);
      Kokkos::deep_copy(gr, 0.5f);
      Kokkos::deep_copy(gl, 0.5f);
    }
  };
  for (const char* name : {"Adam", "AdaGrad", "SGD", "Gefen", "Shampoo"}) {
    Side sides;
    auto l = list_for(name);
    if (std::string(name) == "SGD") l.set("momentum", 0.9);
    auto from = koptim::create(sides.right, l);
    from->step();
    const auto state = from->export_state();
    auto right       = koptim::create(sides.right, l);
    EXPECT_NO_THROW(right->import_state(state)) << name;
    auto left         = koptim::create(sides.left, l);
    const auto before = left->export_state();
    if (std::string(name) == "Shampoo") {
      EXPECT_NO_THROW(left->import_state(state)) << name;
      continue;
    }
    expect_error<koptim::StateError>([&] { left->import_state(state); },
                                     {"was exported from a LayoutRight parameter; 'w' here is LayoutLeft"});
    EXPECT_TRUE(left->export_state() == before) << name;
  }
  // With one extent above 1 ((1, 3), (3, 1)) both layouts are the same memory order: accepted.
  for (const bool row : {true, false}) {
    const int r = row ? 1 : 3, c = row ? 3 : 1;
    Kokkos::View<float**, Kokkos::LayoutRight> wr("wr", r, c), gr("gr", r, c);
    Kokkos::View<float**, Kokkos::LayoutLeft> wl("wl", r, c), gl("gl", r, c);
    Kokkos::deep_copy(gr, 0.5f);
    koptim::ParameterSet right, left;
    right.add("w", wr, gr);
    left.add("w", wl, gl);
    auto from = koptim::create(right, list_for("Adam"));
    from->step();
    auto to = koptim::create(left, list_for("Adam"));
    EXPECT_NO_THROW(to->import_state(from->export_state())) << r << " x " << c;
  }
}

// Shampoo's amortized computation found a root that is not finite (epsilon = 0 without
// pseudo_inverse, a rank-1 factor) after the factors had taken the step's gradient, and threw as
// if nothing had changed: a loop that caught the error and went on stepped from a state that was
// no step's (the gradient in the factors, the step not counted). The optimizer is now
// interrupted: the error says so, step() and export_state() refuse naming it, and import_state()
// of a saved state restores it. A step refused by its checks does not interrupt.
TEST(Defects, ShampooRootErrorInterruptsTheOptimizer) {
  Model<float> m;
  auto l = list_for("Shampoo");
  l.set("epsilon", 0.0);
  auto opt         = koptim::create(m.params, l);
  const auto saved = opt->export_state();
  m.grads([](std::int64_t) { return std::numeric_limits<double>::infinity(); }, [](std::int64_t) { return 0.1; });
  expect_error<koptim::NonFiniteError>([&] { opt->step(); }, {"non-finite"});
  EXPECT_FALSE(opt->interrupted());
  m.grads([](std::int64_t i) { return 0.01 * static_cast<double>(i % 7 + 1); }, [](std::int64_t) { return 0.1; });
  expect_error<koptim::NonFiniteError>(
      [&] { opt->step(); }, {"a zero eigenvalue with epsilon = 0", "the factors had taken this step's gradient"});
  EXPECT_TRUE(opt->interrupted());
  EXPECT_EQ(opt->step_count(), 0);
  for (const char* what : {"step", "export_state"}) {
    expect_error<koptim::Error>(
        [&] { std::string(what) == "step" ? opt->step() : static_cast<void>(opt->export_state()); },
        {std::string("koptim::Shampoo::") + what + ": refused: step 1 threw after it had begun to change",
         "a zero eigenvalue with epsilon = 0", "import_state() a saved state"});
  }
  opt->import_state(saved);
  EXPECT_FALSE(opt->interrupted());
  EXPECT_TRUE(opt->export_state() == saved);
}

TEST(Defects, ShampooImportRefusesNonFiniteEntries) {
  Model<double> m;
  auto opt = make(m, "Shampoo");
  m.grads([](std::int64_t i) { return 0.01 * static_cast<double>(i); }, [](std::int64_t) { return 0.1; });
  opt->step();
  const auto good = opt->export_state();
  std::string factor, trace;
  for (const auto& kv : good.tensors)
    if (kv.first.find("/factor") != std::string::npos) factor = kv.first;
  for (const auto& kv : good.reals) trace = kv.first;
  ASSERT_FALSE(factor.empty());
  ASSERT_FALSE(trace.empty());
  auto s = good;
  set_element<double>(s.tensors.at(factor), 1, std::numeric_limits<double>::quiet_NaN());
  expect_error<koptim::StateError>([&] { opt->import_state(s); }, {"'" + factor + "'", "finite"});
  s                 = good;
  s.reals.at(trace) = std::numeric_limits<double>::quiet_NaN();
  expect_error<koptim::StateError>([&] { opt->import_state(s); }, {"'" + trace + "'", "not allowed"});
  s                 = good;
  s.reals.at(trace) = -1.0;
  expect_error<koptim::StateError>([&] { opt->import_state(s); }, {"'" + trace + "'", "not allowed"});
  EXPECT_TRUE(opt->export_state() == good);
  opt->step();  // still usable
  EXPECT_EQ(opt->step_count(), 2);
}

// A step counter near INT64_MAX was accepted and overflowed in step().
// lr(g), base_lr(g) and weight_decay(g) of a group that does not exist threw std::out_of_range,
// which a catch of koptim::Error does not see; a ConfigError naming the group now.
TEST(Defects, AGroupThatDoesNotExistIsAKoptimError) {
  Model<float> m;
  auto opt = koptim::create(m.params, list_for("Adam"));
  for (const int g : {1, -1}) {
    const std::string where = " group " + std::to_string(g) + " does not exist; allowed: 0 to 0";
    expect_error<koptim::ConfigError>([&] { opt->lr(g); }, {"koptim::Adam::lr:" + where});
    expect_error<koptim::ConfigError>([&] { opt->base_lr(g); }, {"koptim::Adam::base_lr:" + where});
    expect_error<koptim::ConfigError>([&] { opt->weight_decay(g); }, {"koptim::Adam::weight_decay:" + where});
  }
  EXPECT_EQ(opt->lr(0), 0.01);
}

TEST(Defects, StepCounterLimit) {
  for (const auto& name : all_optimizers) {
    Model<float> m;
    auto opt = make(m, name);
    auto s   = opt->export_state();
    for (std::int64_t bad : {std::numeric_limits<std::int64_t>::max(), std::numeric_limits<std::int64_t>::max() - 1,
                             (std::int64_t(1) << 53) + 1}) {
      s.integers["step"] = bad;
      expect_error<koptim::StateError>([&] { opt->import_state(s); }, {"'step'", "2^53"});
    }
    s.integers["step"] = std::int64_t(1) << 53;
    opt->import_state(s);
    m.grads([](std::int64_t) { return 0.1; }, [](std::int64_t) { return 0.1; });
    const auto before = m.w.get();
    expect_error<koptim::Error>([&] { opt->step(); }, {"step counter", "2^53"});
    EXPECT_TRUE(same_bits(m.w.get(), before)) << name;
    EXPECT_EQ(opt->step_count(), std::int64_t(1) << 53) << name;
  }
}

// Gefen export and import of a zero-size tensor (memcpy with a null pointer, found by UBSan).
TEST(Defects, GefenZeroSizeTensorRoundTrip) {
  Kokkos::View<float**> w("w", 0, 4), g("g", 0, 4), v("v", 8, 8), gv("gv", 8, 8);
  koptim::ParameterSet params;
  params.add("empty", w, g);
  params.add("v", v, gv);
  Kokkos::deep_copy(gv, 0.25f);
  auto opt = koptim::create(params, list_for("Gefen"));
  opt->step();
  const auto s = opt->export_state();
  auto again   = koptim::create(params, list_for("Gefen"));
  again->import_state(s);
  EXPECT_TRUE(again->export_state() == s);
}

// ParameterSet::add_ref trusted its TensorRef.
TEST(Defects, AddRefChecksTheTensorRef) {
  Kokkos::View<float*> w("w", 6), g("g", 6);
  auto ref = [](const Kokkos::View<float*>& v) { return koptim::Impl::make_tensor_ref(v, "t"); };
  {
    koptim::ParameterSet set;
    auto p = ref(w), q = ref(g);
    p.size = q.size = 100;  // larger than the shape
    expect_error<koptim::ShapeError>([&] { set.add_ref("w", p, q, 0); }, {"size 100", "(6,)"});
    EXPECT_TRUE(set.empty());
  }
  {
    koptim::ParameterSet set;
    auto p = ref(w), q = ref(g);
    q.data = nullptr;
    expect_error<koptim::ShapeError>([&] { set.add_ref("w", p, q, 0); }, {"gradient", "null data pointer"});
  }
  {
    // A gradient that overlaps its own parameter (a subview of the same allocation).
    Kokkos::View<float*> both("both", 10);
    Kokkos::View<float*> p(both.data(), 6), q(both.data() + 4, 6);
    koptim::ParameterSet set;
    expect_error<koptim::ShapeError>([&] { set.add("p", p, q); }, {"overlaps the parameter"});
    EXPECT_TRUE(set.empty());
  }
  {
    // A gradient that overlaps another parameter, and a parameter that overlaps another's gradient.
    koptim::ParameterSet set;
    set.add("w", w, g);
    Kokkos::View<float*> into_w(w.data() + 2, 3), into_g(g.data() + 1, 3), g3("g3", 3), w3("w3", 3);
    expect_error<koptim::ShapeError>([&] { set.add("x", w3, into_w); }, {"overlaps parameter 'w'"});
    expect_error<koptim::ShapeError>([&] { set.add("y", into_g, g3); }, {"gradient of parameter 'w'"});
    EXPECT_EQ(set.size(), 1u);
  }
}

// A huge max_preconditioner_dim failed later with a plain std::runtime_error from Kokkos.
TEST(Defects, HugePreconditionerIsAKoptimError) {
  Kokkos::View<float*> w("w", 2000000), g("g", 2000000);
  koptim::ParameterSet params;
  params.add("w", w, g);
  auto l = list_for("Shampoo");
  l.set("max_preconditioner_dim", 1000000000);
  expect_error<koptim::Error>([&] { koptim::create(params, l); }, {"GiB", "max_preconditioner_dim = 1000000000"});
}

}  // namespace
