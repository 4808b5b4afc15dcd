// Every documented range is the accepted range. For every optimizer and every real or integer key
// of its valid list (array entries one by one, lr_schedule's keys, the special values such as
// beta3 = -1), values at each bound, just inside and just outside it go through koptim::create:
// an optimizer is built exactly when the range that docs/parameters.md prints (the key's
// validator) contains the value. The constructors check the same declared ranges, so a value the
// reference allows is never refused later, and one it refuses is refused by the constructor too
// (checked by building the options in C++ without a parameter list).
#include "koptim_TestErrors.hpp"
#include "koptim_TestTensor.hpp"

#include "config/koptim_Validators.hpp"
#include <koptim/koptim.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>

namespace {

using koptim::Impl::KeyValidator;
using Teuchos::ParameterList;

// Values at and around a range's bounds: the bound, its neighbours on both sides (the next
// double, or +-1 for integers) and, for an infinite upper bound, the largest finite value.
std::vector<double> probes(const koptim::Impl::Range& r, bool integer) {
  std::vector<double> v;
  const double int_max = std::numeric_limits<int>::max(), int_min = std::numeric_limits<int>::min();
  for (double b : {r.lo, r.hi}) {
    if (!std::isfinite(b)) {
      if (!integer) v.push_back(std::copysign(std::numeric_limits<double>::max(), b));
      continue;
    }
    if (integer) {
      for (double x : {b - 1, b, b + 1})
        if (x >= int_min && x <= int_max) v.push_back(x);
    } else {
      v.push_back(std::nextafter(b, -std::numeric_limits<double>::infinity()));
      v.push_back(b);
      v.push_back(std::nextafter(b, std::numeric_limits<double>::infinity()));
    }
  }
  return v;
}

struct Probe {
  std::string path;  // "lr_schedule/gamma", "betas[1]"
  double value;
  bool expected;
};

// The probes of every real and integer key below `valid`, each with the list that sets it.
void collect(const ParameterList& valid, const std::string& prefix,
             std::vector<std::pair<Probe, std::function<void(ParameterList&)>>>& out) {
  for (auto it = valid.begin(); it != valid.end(); ++it) {
    const std::string& key = valid.name(it);
    const auto& entry      = valid.entry(it);
    const std::string path = prefix.empty() ? key : prefix + "/" + key;
    if (entry.isList()) {
      std::vector<std::pair<Probe, std::function<void(ParameterList&)>>> inner;
      collect(Teuchos::getValue<ParameterList>(entry), path, inner);
      for (auto& p : inner) {
        auto set = p.second;
        out.emplace_back(p.first, [key, set](ParameterList& l) { set(l.sublist(key)); });
      }
      continue;
    }
    const auto v = Teuchos::rcp_dynamic_cast<const KeyValidator>(entry.validator());
    ASSERT_FALSE(v.is_null()) << path << " has no koptim validator";
    const bool integer = v->kind() == KeyValidator::Kind::integer;
    if (v->kind() == KeyValidator::Kind::real || integer) {
      std::vector<double> values = probes(v->ranges().at(0), integer);
      if (v->special()) values.push_back(v->special()->value);
      for (double x : values) {
        out.emplace_back(Probe{path, x, v->accepts(x)}, [key, x, integer](ParameterList& l) {
          if (integer)
            l.set(key, static_cast<int>(x));
          else
            l.set(key, x);
        });
      }
    } else if (v->kind() == KeyValidator::Kind::real_array) {
      const auto base = Teuchos::getValue<Teuchos::Array<double>>(entry);
      for (std::size_t i = 0; i < v->ranges().size(); ++i) {
        for (double x : probes(v->ranges()[i], false)) {
          auto a                                               = base;
          a[static_cast<Teuchos::Array<double>::size_type>(i)] = x;
          out.emplace_back(Probe{path + "[" + std::to_string(i) + "]", x, v->accepts(x, i)},
                           [key, a](ParameterList& l) { l.set(key, a); });
        }
      }
    }
  }
}

std::string describe(const Probe& p) {
  std::ostringstream s;
  s.precision(17);
  s << p.path << " = " << p.value;
  return s.str();
}

TEST(KeyRanges, EveryDocumentedRangeIsTheAcceptedRange) {
  koptim_test::TestTensor<float> w({4, 3}, "w");
  w.set(false, [](std::int64_t i) { return 0.1f * static_cast<float>(i); });
  koptim::ParameterSet params;
  w.add_to(params, "w");
  std::size_t tried = 0, refused = 0;
  for (const auto& name : koptim::optimizer_names()) {
    std::vector<std::pair<Probe, std::function<void(ParameterList&)>>> cases;
    collect(*koptim::valid_parameters(name), "", cases);
    ASSERT_FALSE(cases.empty()) << name;
    std::set<std::string> keys;
    for (const auto& c : cases) {
      const Probe& p = c.first;
      keys.insert(p.path);
      ParameterList l;
      l.set("optimizer", name);
      if (p.path != "lr") l.set("lr", 0.01);  // SGD requires it
      // Keys that act only with others set (refused as having no effect otherwise).
      if (p.path.rfind("qr_", 0) == 0) {
        l.set("eigenvalue_corrected", true);
        l.set("eigenbasis", std::string("qr"));
      }
      if (p.path == "dampening") l.set("momentum", 0.5);
      if (p.path.rfind("rank_", 0) == 0) {
        l.set("pseudo_inverse", true);
        l.set("epsilon", 0.0);
      }
      if (p.path == "grafting_beta2" || p.path == "grafting_epsilon") l.set("grafting", std::string("RMSProp"));
      // Schedule keys that only their type reads (refused as ignored with another type).
      if (p.path == "lr_schedule/total_steps" || p.path == "lr_schedule/min_lr_factor")
        l.sublist("lr_schedule").set("type", std::string("cosine"));
      if (p.path == "lr_schedule/step_size" || p.path == "lr_schedule/gamma")
        l.sublist("lr_schedule").set("type", std::string("step"));
      // ... and the schedule's length, which those types require.
      if (p.path == "lr_schedule/min_lr_factor") l.sublist("lr_schedule").set("total_steps", 10);
      if (p.path == "lr_schedule/gamma") l.sublist("lr_schedule").set("step_size", 10);
      c.second(l);
      bool built = false;
      std::string message;
      try {
        built = koptim::create(params, l) != nullptr;
      } catch (const koptim::ConfigError& e) {
        message = e.what();
      }
      ++tried;
      refused += built ? 0 : 1;
      // A decaying schedule's length may be listed as -1 (unset) but is required by its type.
      if ((p.path == "lr_schedule/total_steps" || p.path == "lr_schedule/step_size") && p.value == -1.0) {
        EXPECT_FALSE(built) << describe(p);
        EXPECT_NE(message.find("is required with lr_schedule type"), std::string::npos) << message;
        continue;
      }
      // lr, weight_decay and AdaGrad's initial_accumulator_value beyond the largest float: refused
      // for these float parameters (the documented range says so).
      if (p.expected && (p.path == "lr" || p.path == "weight_decay" || p.path == "initial_accumulator_value") &&
          p.value > static_cast<double>(std::numeric_limits<float>::max())) {
        EXPECT_FALSE(built) << describe(p);
        EXPECT_NE(message.find("is beyond the largest float"), std::string::npos) << message;
        continue;
      }
      // num_trainers_per_group must also divide the number of ranks: one process here, so 1 or -1.
      const bool one_process = p.expected && p.path == "num_trainers_per_group" && p.value != 1.0 && p.value != -1.0;
      if (one_process) {
        EXPECT_FALSE(built) << describe(p);
        EXPECT_NE(message.find("is not allowed without a communicator"), std::string::npos) << message;
        continue;
      }
      EXPECT_EQ(built, p.expected) << name << ": " << describe(p)
                                   << (p.expected ? " is documented as allowed" : " is documented as refused")
                                   << (message.empty() ? std::string() : "; create said: " + message);
    }
    // Every numeric key was probed (a key without a range would have failed the collection).
    EXPECT_TRUE(keys.count("lr") && keys.count("weight_decay") && keys.count("lr_schedule/gamma")) << name;
  }
  EXPECT_GT(tried, 300u);
  EXPECT_GT(refused, 100u);
}

// The constructors refuse, without any parameter list, what the reference refuses: one value
// just outside a range per optimizer, and the unset-able Shampoo options just outside theirs.
TEST(KeyRanges, ConstructorsRefuseJustOutside) {
  koptim_test::TestTensor<float> w({4, 3}, "w");
  koptim::ParameterSet params;
  w.add_to(params, "w");
  const double below_zero = -std::numeric_limits<double>::denorm_min();
  koptim::CommonOptions c;
  {
    koptim::SGDOptions o;
    o.dampening = std::nextafter(1.0, 2.0);
    koptim_test::expect_error<koptim::ConfigError>([&] { koptim::SGD(params, c, o); },
                                                   {"dampening = 1.0000000000000002", "a real in [0, 1]"});
  }
  {
    koptim::AdamOptions o;
    o.betas[1] = 1.0;
    koptim_test::expect_error<koptim::ConfigError>([&] { koptim::AdamW(params, c, o); },
                                                   {"betas[1] = 1 is not allowed", "a real in [0, 1)"});
  }
  {
    koptim::GefenOptions o;
    o.eps = 0.0;
    koptim_test::expect_error<koptim::ConfigError>([&] { koptim::Gefen(params, c, o); },
                                                   {"eps = 0 is not allowed", "a real in (0, inf)"});
  }
  {
    koptim::RMSPropOptions o;
    o.alpha = std::nextafter(1.0, 2.0);
    koptim_test::expect_error<koptim::ConfigError>([&] { koptim::RMSProp(params, c, o); }, {"alpha", "[0, 1]"});
  }
  {
    koptim::AdaGradOptions o;
    o.eps = below_zero;
    koptim_test::expect_error<koptim::ConfigError>([&] { koptim::AdaGrad(params, c, o); }, {"eps", "[0, inf)"});
  }
  auto shampoo = [&](auto&& set, std::vector<std::string> words) {
    koptim::ShampooOptions o;
    set(o);
    koptim_test::expect_error<koptim::ConfigError>([&] { koptim::Shampoo(params, c, o); }, words);
  };
  shampoo([](auto& o) { o.beta3 = -1.0; }, {"beta3 = -1 is not allowed", "a real in [0, 1)"});
  shampoo([](auto& o) { o.grafting_beta2 = 1.0; }, {"grafting_beta2 = 1", "a real in [0, 1)"});
  shampoo([](auto& o) { o.start_preconditioning_step = 0; },
          {"start_preconditioning_step = 0", "an integer in [1, 2147483647]"});
  shampoo(
      [](auto& o) {
        o.precondition_frequency     = 10;
        o.start_preconditioning_step = 9;
      },
      {"start_preconditioning_step = 9", "at least precondition_frequency = 10"});
  shampoo([](auto& o) { o.num_trainers_per_group = 0; },
          {"num_trainers_per_group = 0", "an integer in [1, 2147483647]"});
  shampoo([](auto& o) { o.max_preconditioner_dim = std::int64_t{1} << 31; },
          {"max_preconditioner_dim = 2147483648", "an integer in [1, 2147483647]"});
  shampoo([&](auto& o) { o.rank_atol = below_zero; }, {"rank_atol", "a real in [0, inf)"});
  shampoo(
      [&](auto& o) {
        o.eigenvalue_corrected = true;
        o.eigenbasis           = koptim::Eigenbasis::qr;
        o.qr_tolerance         = std::nextafter(1.0, 2.0);
      },
      {"qr_tolerance = 1.0000000000000002", "a real in [0, 1]"});
  shampoo(
      [&](auto& o) {
        o.eigenvalue_corrected = true;
        o.eigenbasis           = koptim::Eigenbasis::qr;
        o.qr_max_iterations    = 0;
      },
      {"qr_max_iterations = 0", "an integer in [1, 2147483647]"});
  shampoo([&](auto& o) { o.inverse_exponent_override[2] = below_zero; },
          {"inverse_exponent_override/order_2", "a real in [0, inf)"});
  koptim_test::expect_error<koptim::ConfigError>([&] { koptim::LRSchedule::step(0, 0.5); },
                                                 {"step_size = 0", "an integer in [1, 2147483647]"});
  koptim_test::expect_error<koptim::ConfigError>([&] { koptim::LRSchedule::step(1, 0.0); },
                                                 {"gamma = 0", "a real in (0, 1]"});
}

// inverse_exponent_override's keys follow a pattern (no validator of their own): its values take
// the range its description gives, [0, inf).
TEST(KeyRanges, InverseExponentOverrideValues) {
  koptim_test::TestTensor<float> w({4, 3}, "w");
  koptim::ParameterSet params;
  w.add_to(params, "w");
  for (double x : {-std::numeric_limits<double>::denorm_min(), 0.0, 0.25, std::numeric_limits<double>::max()}) {
    ParameterList l;
    l.set("optimizer", "Shampoo");
    l.set("use_merge_dims", false);  // w (4 x 3): one block of order 2
    l.sublist("inverse_exponent_override").set("order_2", x);
    bool built = false;
    try {
      built = koptim::create(params, l) != nullptr;
    } catch (const koptim::ConfigError&) {
    }
    EXPECT_EQ(built, x >= 0.0) << x;
  }
}

}  // namespace
