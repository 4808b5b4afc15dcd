// Configuration through Teuchos parameter lists: the valid lists, every rejection path with its
// message, XML and YAML files, and a round trip of the printed defaults.
#include "koptim_TestTensor.hpp"

#include <koptim/config/koptim_Validators.hpp>
#include <koptim/koptim.hpp>

#include <Teuchos_XMLParameterListCoreHelpers.hpp>
#include <Teuchos_YamlParameterListCoreHelpers.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace {

struct Fixture {
  koptim_test::TestTensor<float> w{{3, 4}, "w"};
  koptim::ParameterSet params;
  Fixture() { w.add_to(params, "w"); }
};

std::string config_error(const Teuchos::ParameterList& l) {
  Fixture f;
  try {
    koptim::create(f.params, l);
  } catch (const koptim::ConfigError& e) {
    return e.what();
  }
  return "";
}

Teuchos::ParameterList adamw() {
  Teuchos::ParameterList l("koptim");
  l.set("optimizer", std::string("AdamW"));
  return l;
}

void expect_contains(const std::string& msg, const std::vector<std::string>& parts) {
  EXPECT_FALSE(msg.empty()) << "no ConfigError";
  for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

TEST(Config, EveryKeyHasDefaultDocAndValidator) {
  for (const auto& name : koptim::optimizer_names()) {
    const auto valid = koptim::valid_parameters(name);
    EXPECT_EQ(valid.get(), koptim::valid_parameters(name).get()) << "not cached";
    std::function<void(const Teuchos::ParameterList&)> check = [&](const Teuchos::ParameterList& l) {
      for (auto it = l.begin(); it != l.end(); ++it) {
        const auto& e = l.entry(it);
        if (e.isList()) {
          check(l.sublist(l.name(it)));
          continue;
        }
        EXPECT_FALSE(e.docString().empty()) << name << ": " << l.name(it);
        EXPECT_FALSE(e.validator().is_null()) << name << ": " << l.name(it);
      }
    };
    check(*valid);
  }
  const auto names = koptim::optimizer_names();
  for (const char* n : {"SGD", "AdaGrad", "RMSProp", "Adam", "AdamW", "Shampoo"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
}

TEST(Config, DefaultsAreTorchDefaults) {
  auto l = koptim::validated_parameters(adamw());
  EXPECT_EQ(l.get<double>("lr"), 1e-3);
  EXPECT_EQ(l.get<double>("weight_decay"), 0.01);
  EXPECT_EQ(l.get<double>("eps"), 1e-8);
  EXPECT_EQ(l.get<Teuchos::Array<double>>("betas")[1], 0.999);
  Teuchos::ParameterList a;
  a.set("optimizer", std::string("AdaGrad"));
  EXPECT_EQ(koptim::validated_parameters(a).get<double>("eps"), 1e-10);
  EXPECT_EQ(koptim::validated_parameters(a).get<double>("lr"), 1e-2);
  a.set("optimizer", std::string("RMSProp"));
  EXPECT_EQ(koptim::validated_parameters(a).get<double>("alpha"), 0.99);
  a.set("optimizer", std::string("Adam"));
  EXPECT_EQ(koptim::validated_parameters(a).get<double>("weight_decay"), 0.0);
}

TEST(Config, RejectsMissingOrUnknownOptimizer) {
  Teuchos::ParameterList l("koptim");
  expect_contains(config_error(l), {"no key 'optimizer'", "AdamW"});
  l.set("optimizer", std::string("Adamax"));
  expect_contains(config_error(l),
                  {"unknown optimizer 'Adamax'", "allowed: SGD, AdaGrad, RMSProp, Adam, AdamW, Shampoo"});
  l.set("optimizer", 3);
  expect_contains(config_error(l), {"key 'optimizer' = 3 must be a string"});
}

TEST(Config, RejectsUnknownKeys) {
  auto l = adamw();
  l.set("lrr", 0.1);
  expect_contains(config_error(l), {"unknown key 'lrr'", "value 0.1", "AdamW", "allowed keys:", "lr,"});
  auto s = adamw();
  s.sublist("lr_schedule").set("warmup", 10);
  expect_contains(config_error(s), {"unknown key 'warmup'", "koptim/lr_schedule", "warmup_steps"});
  auto m = adamw();
  m.set("momentum", 0.9);  // an SGD key is not an AdamW key
  expect_contains(config_error(m), {"unknown key 'momentum'"});
  auto sub = adamw();
  sub.set("lr_schedule", 3);
  expect_contains(config_error(sub), {"'lr_schedule'", "must be a sublist"});
}

TEST(Config, RejectsWrongTypes) {
  auto l = adamw();
  l.set("lr", std::string("fast"));
  expect_contains(config_error(l), {"key 'lr'", "fast", "wrong type, expected double", "allowed: a real in [0, inf)"});
  auto b = adamw();
  b.set("amsgrad", 1);
  expect_contains(config_error(b), {"key 'amsgrad'", "expected bool", "true or false"});
  auto a = adamw();
  a.set("betas", 0.9);
  expect_contains(config_error(a), {"key 'betas'", "expected Array(double)"});
}

TEST(Config, RejectsOutOfRangeValues) {
  auto l = adamw();
  l.set("lr", -0.1);
  expect_contains(config_error(l), {"key 'lr'", "-0.1", "out of range", "[0, inf)"});
  auto e = adamw();
  e.set("eps", -1e-8);
  expect_contains(config_error(e), {"key 'eps'", "= -1e-08", "[0, inf)"});
  auto g = adamw();
  g.sublist("lr_schedule").set("gamma", 0.0);
  expect_contains(config_error(g), {"key 'gamma'", "lr_schedule", "= 0", "a real in (0, 1]"});
  auto b = adamw();
  Teuchos::Array<double> betas(2);
  betas[0] = 0.9;
  betas[1] = 1.0;
  b.set("betas", betas);
  expect_contains(config_error(b), {"key 'betas'", "out of range", "2 reals, each in [0, 1)"});
  betas.resize(3);
  b.set("betas", betas);
  expect_contains(config_error(b), {"key 'betas'", "has 3 entries"});
  auto p = adamw();
  p.set("nonfinite_gradient", std::string("ignore"));
  expect_contains(config_error(p), {"nonfinite_gradient", "ignore", "one of: error, skip_step, unchecked"});
  auto s = adamw();
  s.sublist("lr_schedule").set("type", std::string("cosine"));
  s.sublist("lr_schedule").set("total_steps", 10);
  s.sublist("lr_schedule").set("warmup_steps", 10);
  expect_contains(config_error(s), {"warmup_steps = 10 must be smaller than total_steps = 10"});
  auto r = adamw();
  r.sublist("lr_schedule").set("warmup_steps", -1);
  expect_contains(config_error(r), {"warmup_steps", "-1", "an integer in [0,"});
}

TEST(Config, RejectsInconsistentOptimizerValues) {
  Teuchos::ParameterList l;
  l.set("optimizer", std::string("SGD"));
  expect_contains(config_error(l), {"key 'lr' is required for optimizer SGD"});
  l.set("lr", 0.1);
  l.set("nesterov", true);
  expect_contains(config_error(l), {"nesterov = true needs momentum > 0 and dampening = 0"});
}

TEST(Config, ReadsXmlAndYamlFiles) {
  const std::string xml = "koptim_test_config.xml", yaml = "koptim_test_config.yaml";
  {
    std::ofstream f(xml);
    f << "<ParameterList name=\"koptim\">\n"
         "  <Parameter name=\"optimizer\" type=\"string\" value=\"RMSProp\"/>\n"
         "  <Parameter name=\"lr\" type=\"double\" value=\"0.005\"/>\n"
         "  <Parameter name=\"centered\" type=\"bool\" value=\"true\"/>\n"
         "  <ParameterList name=\"lr_schedule\">\n"
         "    <Parameter name=\"type\" type=\"string\" value=\"cosine\"/>\n"
         "    <Parameter name=\"total_steps\" type=\"int\" value=\"100\"/>\n"
         "  </ParameterList>\n"
         "</ParameterList>\n";
  }
  {
    std::ofstream f(yaml);
    f << "koptim:\n  optimizer: AdamW\n  lr: 2.0e-3\n  weight_decay: 0\n  betas: [0.8, 0.95]\n"
         "  lr_schedule:\n    type: linear_warmup\n    warmup_steps: 4\n";
  }
  Fixture f;
  auto o1 = koptim::create(f.params, *koptim::read_parameter_list(xml));
  EXPECT_EQ(o1->name(), "RMSProp");
  EXPECT_TRUE(dynamic_cast<koptim::RMSProp&>(*o1).options().centered);
  EXPECT_EQ(o1->common_options().lr_schedule.decay(), koptim::LRSchedule::Decay::cosine);
  auto o2 = koptim::create(f.params, *koptim::read_parameter_list(yaml));
  EXPECT_EQ(o2->name(), "AdamW");
  EXPECT_EQ(o2->base_lr(), 2e-3);
  EXPECT_EQ(o2->weight_decay(), 0.0);  // YAML's int 0 accepted as a real
  EXPECT_EQ(dynamic_cast<koptim::AdamW&>(*o2).options().betas[0], 0.8);
  EXPECT_DOUBLE_EQ(o2->lr(), 2e-3 / 4);
  std::remove(xml.c_str());
  std::remove(yaml.c_str());
  EXPECT_THROW(koptim::read_parameter_list("does_not_exist.yaml"), koptim::ConfigError);
}

TEST(Config, PrintedDefaultsReadBack) {
  for (const auto& name : koptim::optimizer_names()) {
    const auto defaults = koptim::default_parameter_list(name);
    std::ostringstream xml;
    Teuchos::writeParameterListToXmlOStream(defaults, xml);
    auto back = Teuchos::getParametersFromXmlString(xml.str());
    Fixture f;
    auto opt = koptim::create(f.params, *back);
    EXPECT_EQ(opt->name(), name);
    std::ostringstream yaml;
    Teuchos::writeParameterListToYamlOStream(defaults, yaml);
    auto yback = Teuchos::getParametersFromYamlString(yaml.str());
    EXPECT_EQ(koptim::create(f.params, *yback)->name(), name) << yaml.str();
  }
}

TEST(Config, ReferenceListsEveryKey) {
  std::ostringstream out;
  koptim::print_parameter_reference(out);
  const std::string ref = out.str();
  for (const auto& name : koptim::optimizer_names()) {
    EXPECT_NE(ref.find("## " + name + "\n"), std::string::npos);
    const auto valid = koptim::valid_parameters(name);
    for (auto it = valid->begin(); it != valid->end(); ++it)
      if (!valid->entry(it).isList()) EXPECT_NE(ref.find("`" + valid->name(it) + "`"), std::string::npos);
  }
  EXPECT_NE(ref.find("`lr_schedule/warmup_steps`"), std::string::npos);
}

}  // namespace
