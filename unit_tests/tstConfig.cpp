// Configuration through Teuchos parameter lists: the valid lists, every rejection path with its
// message, XML and YAML files, and a round trip of the printed defaults.
#include "koptim_TestTensor.hpp"

#include "config/koptim_Validators.hpp"
#include <koptim/koptim.hpp>

#include <Teuchos_XMLParameterListCoreHelpers.hpp>
#include <Teuchos_YamlParameterListCoreHelpers.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

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
    const auto valid                                         = koptim::valid_parameters(name);
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

// The C++ constructors with CommonOptions{} take the same lr and weight_decay as a parameter
// list without them, torch.optim's where torch has the method (the C++ CommonOptions held lr 1e-3
// and weight_decay 0 for every optimizer: AdaGrad and RMSProp at a tenth of torch's lr, AdamW
// without its decay).
TEST(Config, CppDefaultsAreTheListsAndTorchs) {
  koptim_test::TestTensor<float> w({6, 4}, "w");
  koptim::ParameterSet ps;
  w.add_to(ps, "w");
  const koptim::CommonOptions unset;
  const std::vector<std::pair<std::unique_ptr<koptim::Optimizer>, std::array<double, 2>>> cases = [&] {
    std::vector<std::pair<std::unique_ptr<koptim::Optimizer>, std::array<double, 2>>> c;
    c.emplace_back(std::make_unique<koptim::SGD>(ps, unset), std::array<double, 2>{1e-3, 0.0});
    c.emplace_back(std::make_unique<koptim::AdaGrad>(ps, unset), std::array<double, 2>{1e-2, 0.0});
    c.emplace_back(std::make_unique<koptim::RMSProp>(ps, unset), std::array<double, 2>{1e-2, 0.0});
    c.emplace_back(std::make_unique<koptim::Adam>(ps, unset), std::array<double, 2>{1e-3, 0.0});
    c.emplace_back(std::make_unique<koptim::AdamW>(ps, unset), std::array<double, 2>{1e-3, 1e-2});
    c.emplace_back(std::make_unique<koptim::Adam>(ps, unset, koptim::AdamOptions{}, true),
                   std::array<double, 2>{1e-3, 1e-2});
    c.emplace_back(std::make_unique<koptim::Shampoo>(ps, unset), std::array<double, 2>{1e-2, 0.0});
    c.emplace_back(std::make_unique<koptim::Gefen>(ps, unset), std::array<double, 2>{1e-3, 0.0});
    return c;
  }();
  for (const auto& c : cases) {
    const auto& opt = *c.first;
    EXPECT_EQ(opt.base_lr(), c.second[0]) << opt.name();
    EXPECT_EQ(opt.weight_decay(), c.second[1]) << opt.name();
    EXPECT_EQ(*opt.common_options().lr, c.second[0]) << opt.name();
    Teuchos::ParameterList l;
    l.set("optimizer", opt.name());
    if (opt.name() == "SGD") continue;  // a list must give SGD's lr
    const auto v = koptim::validated_parameters(l);
    EXPECT_EQ(v.get<double>("lr"), c.second[0]) << opt.name();
    EXPECT_EQ(v.get<double>("weight_decay"), c.second[1]) << opt.name();
  }
  // Given values win.
  koptim::CommonOptions given;
  given.lr           = 0.5;
  given.weight_decay = 0.25;
  koptim::AdamW set(ps, given);
  EXPECT_EQ(set.base_lr(), 0.5);
  EXPECT_EQ(set.weight_decay(), 0.25);
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
  expect_contains(config_error(l),
                  {"key 'lr'", "fast", "wrong type, expected double", "allowed: a real in [0, 1e+300)"});
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
  expect_contains(config_error(l), {"key 'lr'", "-0.1", "out of range", "[0, 1e+300)"});
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
  // A decaying schedule's length has no default that could be right (1 would end the decay at the
  // first step): it must be written.
  for (const std::string type : {"cosine", "linear", "step"}) {
    const std::string key = type == "step" ? "step_size" : "total_steps";
    auto d                = adamw();
    d.sublist("lr_schedule").set("type", type);
    d.sublist("lr_schedule").set("warmup_steps", 2);
    expect_contains(config_error(d),
                    {"key 'lr_schedule/" + key + "' is required with lr_schedule type '" + type + "'", "required"});
    d.sublist("lr_schedule").set(key, -1);  // written, but "unset"
    expect_contains(config_error(d), {"key 'lr_schedule/" + key + "' is required", "and is -1 (unset)"});
    d.sublist("lr_schedule").set(key, 10);
    EXPECT_EQ(config_error(d), "") << type;
  }
  // A list with every default written out (as printed by the reference, or taken from
  // valid_parameters) reads, and given a decaying type without its length it is refused: the
  // printed length is -1 (unset), not a value that would decay the lr in one step.
  for (const auto& name : koptim::optimizer_names()) {
    Teuchos::ParameterList full = *koptim::valid_parameters(name);
    full.set("optimizer", name);
    full.set("lr", 0.01);  // SGD has no default lr
    EXPECT_EQ(config_error(full), "") << name;
    for (const std::string type : {"cosine", "linear", "step"}) {
      Teuchos::ParameterList d = full;
      d.sublist("lr_schedule").set("type", type);
      expect_contains(config_error(d),
                      {"key 'lr_schedule/" + std::string(type == "step" ? "step_size" : "total_steps") +
                           "' is required with lr_schedule type '" + type + "'",
                       "and is -1 (unset)"});
    }
  }
}

TEST(Config, RejectsInconsistentOptimizerValues) {
  Teuchos::ParameterList l;
  l.set("optimizer", std::string("SGD"));
  expect_contains(config_error(l), {"key 'lr' is required for optimizer SGD"});
  l.set("lr", 0.1);
  l.set("nesterov", true);
  expect_contains(config_error(l), {"nesterov = true needs momentum > 0 and dampening = 0"});
  // Dampening without momentum does nothing (torch ignores it): refused unless at its default.
  l.set("nesterov", false);
  l.set("dampening", 0.25);
  expect_contains(config_error(l), {"dampening = 0.25 would have no effect: it applies to momentum > 0"});
  l.set("momentum", 0.9);
  EXPECT_EQ(config_error(l), "");
  l.set("momentum", 0.0);
  l.set("dampening", 0.0);
  EXPECT_EQ(config_error(l), "");
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

// The ConfigError read_parameter_list throws for a file with this text ("" when it reads it).
std::string read_error(const std::string& name, const std::string& text) {
  {
    std::ofstream f(name, std::ios::binary);
    f << text;
  }
  std::string msg;
  try {
    koptim::read_parameter_list(name);
  } catch (const koptim::ConfigError& e) {
    msg = e.what();
  }
  std::remove(name.c_str());
  return msg;
}

std::string xml_with(const std::string& parameters) {
  return "<ParameterList name=\"koptim\">\n  <Parameter name=\"optimizer\" type=\"string\" value=\"AdamW\"/>\n" +
         parameters + "</ParameterList>\n";
}

TEST(Config, YamlRefusesKeysAtTheWrongIndentation) {
  const std::string y = "koptim_test_indent.yaml";
  // One space left of its siblings: Teuchos 13.2 moved it out of the list and dropped it.
  expect_contains(read_error(y, "koptim:\n  optimizer: AdamW\n lr: 0.5\n  eps: 1.0e-6\n"),
                  {"line 3", "key 'lr'", "indented by 1", "list 'koptim'", "indented by 2"});
  // At column 0 after the list: a second top-level entry, dropped.
  expect_contains(read_error(y, "koptim:\n  optimizer: AdamW\n  eps: 1.0e-6\nlr: 0.5\n"),
                  {"line 4", "key 'lr'", "top level", "outside the list 'koptim'"});
  // Between a sublist's keys and its siblings: Teuchos moved it to the enclosing list.
  expect_contains(read_error(y, "koptim:\n  optimizer: AdamW\n  lr_schedule:\n    type: cosine\n   total_steps: 10\n"),
                  {"line 5", "key 'total_steps'", "indented by 3", "koptim/lr_schedule", "indented by 4"});
  // More indented than a key that already has a value.
  expect_contains(read_error(y, "koptim:\n  optimizer: AdamW\n    lr: 0.5\n"),
                  {"line 3", "key 'lr'", "more than the key 'optimizer'"});
  expect_contains(read_error(y, "koptim:\n  optimizer: AdamW\n\tlr: 0.5\n"), {"line 3", "tab"});
  // A real that does not fit a double was read as 0.
  expect_contains(read_error(y, "koptim:\n  optimizer: AdamW\n  eps: 1e-400\n"),
                  {"line 3", "key 'eps'", "1e-400", "too small for a double"});
  // What is right still reads, comments, blank lines and document markers included.
  Fixture f;
  {
    std::ofstream o(y);
    o << "%YAML 1.1\n---\n# a comment\nkoptim:\n  optimizer: AdamW   # the optimizer\n\n  lr: 0.5\n"
         "  lr_schedule:\n    type: cosine\n    total_steps: 10\n  eps: 1.0e-6\n...\n";
  }
  auto opt = koptim::create(f.params, *koptim::read_parameter_list(y));
  std::remove(y.c_str());
  EXPECT_EQ(opt->base_lr(), 0.5);
  EXPECT_EQ(dynamic_cast<koptim::AdamW&>(*opt).options().eps, 1e-6);
  EXPECT_EQ(opt->common_options().lr_schedule.decay(), koptim::LRSchedule::Decay::cosine);
}

// What Teuchos' YAML reader would read otherwise than written (found by review, each was read
// without a word): every key's value compared with the text, and every entry it read traced to
// a line the check followed.
TEST(Config, YamlRefusesWhatItsReaderWouldReadOtherwise) {
  const std::string y = "koptim_test_misread.yaml";
  const std::string a = "koptim:\n  optimizer: AdamW\n";
  // Flow mappings: their values were not checked (eps = 1e-400 became 0).
  expect_contains(read_error(y, "koptim: {optimizer: AdamW, lr: 0.5, eps: 1e-400}\n"),
                  {"key 'optimizer' was read by the YAML reader", "flow mapping"});
  expect_contains(read_error(y, a + "  lr_schedule: {type: cosine, total_steps: 10}\n"),
                  {"line 3", "key 'lr_schedule'", "flow mapping", "one per line"});
  // Arrays: every entry as written, in flow and block form.
  expect_contains(read_error(y, a + "  betas: [1e-400, 0.9]\n"),
                  {"line 3", "key 'betas'", "entry 1 '1e-400'", "too small for a double"});
  expect_contains(read_error(y, a + "  betas:\n    - 0.9\n    - 1e-400\n"),
                  {"line 3", "key 'betas'", "entry 2 '1e-400'", "too small for a double"});
  // key:value without a space is no key line for YAML; Teuchos dropped it (or read eps as 0).
  expect_contains(read_error(y, a + " lr:0.5\n"), {"line 3", "'lr:0.5'", "neither 'key: value'"});
  expect_contains(read_error(y, a + "  lr: 0.5\n  eps:1e-400\n"), {"line 4", "'eps:1e-400'", "neither"});
  // A plain value continued on the next line.
  expect_contains(read_error(y, a + "  lr_schedule:\n    type: cosine\n      linear\n"), {"line 5", "'linear'"});
  // A line between a block scalar's key and its text.
  expect_contains(read_error(y, a + "  nonfinite_gradient: |-\n    error\n   eps: 1e-400\n"),
                  {"line 5", "indented by 3", "text of key 'nonfinite_gradient'", "indented by 4"});
  // A '#' without a space before it is part of the value, which Teuchos cut there.
  expect_contains(read_error(y, a + "  amsgrad: true#false\n"),
                  {"line 3", "key 'amsgrad'", "'true#false' was read as true", "'#' starts a comment after a space"});
  expect_contains(read_error(y, a + "  lr_schedule:\n    type: linear_warmup#cosine\n    warmup_steps: 10\n"),
                  {"line 4", "key 'lr_schedule/type'", "was read as linear_warmup"});
  expect_contains(read_error(y, a + "  lr_schedule:\n    type: linear_warmup\n    warmup_steps: 10#00\n"),
                  {"line 5", "key 'lr_schedule/warmup_steps'", "'10#00'", "not an integer"});
  expect_contains(read_error(y, "koptim:\n  optimizer: !!str AdamW\n"), {"line 2", "key 'optimizer'", "YAML tag"});
  expect_contains(read_error(y, a + "  lr_schedule:\n    type: linear_warmup\n    warmup_steps: 010\n"),
                  {"line 5", "'010'", "leading zero"});
  // ... also in an array of reals (09 was read as 9.0 there; betas' range then refused it only
  // by chance).
  expect_contains(read_error(y, a + "  betas: [0.5, 09]\n"), {"line 3", "key 'betas'", "'09'", "leading zero"});
  // What is right still reads: quoted strings, bool forms, a block sequence, integers in an array
  // of reals, an integer beyond int for a real, a block scalar, a byte-order mark.
  const std::string good =
      "\xEF\xBB\xBFkoptim:\n  optimizer: \"AdamW\"\n  nonfinite_gradient: 'skip_step'\n"
      "  amsgrad: Yes\n  betas:\n    - 0\n    - 0.5   # a comment\n  weight_decay: 3000000000\n";
  expect_contains(read_error(y, good + "  lr: 0.5#not a comment\n"),
                  {"key 'lr'", "0.5#not a comment", "unexpected '#'"});
  {
    std::ofstream o(y, std::ios::binary);
    o << good << "  lr_schedule:\n    type: >-\n      cosine\n    total_steps: 10\n";
  }
  Fixture f;
  auto opt = koptim::create(f.params, *koptim::read_parameter_list(y));
  std::remove(y.c_str());
  const auto& o = dynamic_cast<koptim::AdamW&>(*opt).options();
  EXPECT_TRUE(o.amsgrad);
  EXPECT_EQ(o.betas[0], 0.0);
  EXPECT_EQ(o.betas[1], 0.5);
  EXPECT_EQ(opt->weight_decay(), 3e9);
  EXPECT_EQ(opt->common_options().nonfinite_gradient, koptim::NonFiniteGradient::skip_step);
  EXPECT_EQ(opt->common_options().lr_schedule.decay(), koptim::LRSchedule::Decay::cosine);
  // A literal block scalar keeps its line break, and a CRLF file's value its CR: the message shows
  // them escaped, not as an invisible character after a value that looks allowed.
  auto create_error = [&](const std::string& text) {
    Teuchos::RCP<Teuchos::ParameterList> list;
    EXPECT_NO_THROW(list = koptim::parameter_list_from_string(text, "yaml", y));  // the text reads
    return list.is_null() ? std::string() : config_error(*list);
  };
  expect_contains(create_error(a + "  lr_schedule:\n    type: |\n      cosine\n    total_steps: 10\n"),
                  {"key 'type' in list 'lr_schedule' = 'cosine\\n' (string): not a known value"});
  expect_contains(create_error(a + "  lr: 1e400\n"),
                  {"key 'lr' in list 'koptim' = 1e400 (string): a number too large for a double"});
  expect_contains(create_error(a + "  lr: -2.5e+999\n"), {"= -2.5e+999 (string): a number too large for a double"});
  expect_contains(create_error(a + "  lr: inf\n"), {"= inf (string): wrong type, expected double"});
  expect_contains(create_error("koptim:\r\n  optimizer: AdamW\r\n  nonfinite_gradient: |\r\n    skip_step\r\n"),
                  {"= '\\nskip_step\\n' (string)"});
  // A flow array of integers where reals are expected.
  EXPECT_EQ(read_error(y, a + "  betas: [0, 0]\n"), "");
  // A flow sequence over two lines (Teuchos' reader does not take it either).
  expect_contains(read_error(y, a + "  betas: [0.9,\n          0.95]\n"), {"line 4", "'0.95]'", "on its key's line"});
  // An escape the reader does not know loses its backslash: "Adam\W" was read as AdamW, "skip\_step"
  // (a no-break space in YAML 1.2) as skip_step.
  expect_contains(read_error(y, "koptim:\n  optimizer: \"Adam\\W\"\n"), {"key 'optimizer'", "escape"});
  expect_contains(read_error(y, a + "  nonfinite_gradient: \"skip\\_step\"\n"), {"key 'nonfinite_gradient'", "escape"});
  // A directive line after the first key was dropped, and the key written on it (lr stayed 0.5).
  expect_contains(read_error(y, a + "  lr: 0.5\n%  lr: 0.25\n"), {"line 4", "YAML directive after the first key"});
  // A subnormal keeps fewer digits than written: 3e-324 was read as 4.9e-324.
  expect_contains(read_error(y, a + "  eps: 3e-324\n"), {"key 'eps'", "too small for a double to hold as written"});
  expect_contains(read_error(y, a + "  betas: [0.5, 1e-310]\n"), {"key 'betas'", "entry 2", "too small"});
  expect_contains(read_error(y, a + "  eps: 1e-320\n"), {"key 'eps'", "too small for a double to hold as written"});
  // A subnormal as a double prints it (17 digits; a list built in code and printed, a checkpoint's
  // configuration) is what was written: read.
  EXPECT_EQ(read_error(y, a + "  eps: 9.99988867182683005e-321\n"), "");
}

// A <Parameter> holds nothing: an element or text inside one (a '/>' written as '>') was dropped.
TEST(Config, XmlRefusesWhatWouldBeDropped) {
  const std::string x = "koptim_test_dropped.xml";
  expect_contains(read_error(x, xml_with("  <Parameter name=\"lr\" type=\"double\" value=\"0.1\">\n"
                                         "    <Parameter name=\"eps\" type=\"double\" value=\"1e-6\"/>\n"
                                         "  </Parameter>\n")),
                  {"key 'koptim/lr'", "<Parameter> with the element <Parameter> inside it", "'/>'"});
  expect_contains(read_error(x, xml_with("  <Parameter name=\"lr\" type=\"double\" value=\"0.1\">0.5</Parameter>\n")),
                  {"key 'koptim/lr'", "with the text '0.5' inside it"});
  expect_contains(read_error(x, xml_with("  <Parameter name=\"amsgrad\" type=\"bool\" value=\" true \"/>\n")),
                  {"key 'koptim/amsgrad'", "not a bool", "without spaces"});
  expect_contains(read_error(x, xml_with("  <ParameterList name=\"lr_schedule\" value=\"cosine\"/>\n")),
                  {"list 'koptim/lr_schedule' has the attribute value='cosine'", "would be ignored"});
  // An attribute the reader does not read was dropped (valu="0.7" beside value="0.5": lr 0.5), on a
  // <Parameter> and on the top list alike; what Teuchos' writer adds still reads.
  expect_contains(read_error(x, xml_with("  <Parameter name=\"lr\" type=\"double\" value=\"0.5\" valu=\"0.7\"/>\n")),
                  {"<Parameter> named 'lr' has the attribute valu='0.7'", "would ignore"});
  expect_contains(read_error(x,
                             "<ParameterList name=\"koptim\" value=\"x\">\n"
                             "  <Parameter name=\"optimizer\" type=\"string\" value=\"AdamW\"/>\n</ParameterList>\n"),
                  {"<ParameterList> named 'koptim' has the attribute value='x'"});
  EXPECT_EQ(read_error(x, xml_with("  <Parameter docString=\"\" id=\"1\" isDefault=\"false\" isUsed=\"true\" "
                                   "name=\"lr\" type=\"double\" value=\"0.5\"/>\n"
                                   "  <!-- <Parameter name=\"eps\" valu=\"1\"/> a comment is no element -->\n")),
            "");
  // A byte-order mark is no part of the text.
  EXPECT_EQ(read_error(x, "\xEF\xBB\xBF" + xml_with("")), "");
}

// An lr_schedule key that the chosen type does not read would be ignored: refused unless at its
// default (a printed default list, which holds every key, still reads).
TEST(Config, RefusesScheduleKeysTheTypeIgnores) {
  auto l = adamw();
  l.sublist("lr_schedule").set("total_steps", 4);
  l.sublist("lr_schedule").set("min_lr_factor", 0.1);
  expect_contains(config_error(l),
                  {"key 'lr_schedule/total_steps' = 4", "not read by lr_schedule type 'constant'", "cosine or linear"});
  l = adamw();
  l.sublist("lr_schedule").set("type", std::string("step"));
  l.sublist("lr_schedule").set("total_steps", 100);
  expect_contains(config_error(l), {"key 'lr_schedule/total_steps' = 100", "type 'step'"});
  l = adamw();
  l.sublist("lr_schedule").set("type", std::string("cosine"));
  l.sublist("lr_schedule").set("gamma", 0.5);
  expect_contains(config_error(l), {"key 'lr_schedule/gamma' = 0.5", "type 'cosine'", "(step)"});
  l = adamw();
  l.sublist("lr_schedule").set("type", std::string("step"));
  l.sublist("lr_schedule").set("step_size", 10);
  l.sublist("lr_schedule").set("total_steps", -1);  // the default (unset)
  EXPECT_EQ(config_error(l), "");
  l.sublist("lr_schedule").set("total_steps", 1);  // the default before -1: lists printed then read
  EXPECT_EQ(config_error(l), "");
  l.sublist("lr_schedule").set("total_steps", 2);
  expect_contains(config_error(l), {"key 'lr_schedule/total_steps' = 2", "type 'step'"});
  // An integer entry of C++'s long long (as YAML gives beyond int) is read as the int it holds.
  l = adamw();
  l.sublist("lr_schedule").set("type", std::string("linear_warmup"));
  l.sublist("lr_schedule").set("warmup_steps", 5LL);
  Fixture f;
  auto opt = koptim::create(f.params, l);
  EXPECT_DOUBLE_EQ(opt->lr(), 1e-3 / 5);
  l.sublist("lr_schedule").set("warmup_steps", 3000000000LL);
  expect_contains(config_error(l), {"key 'warmup_steps'", "out of range"});
}

TEST(Config, XmlRefusesValuesNotExactlyOfTheirType) {
  const std::string x                             = "koptim_test_values.xml";
  const std::vector<std::vector<std::string>> bad = {
      {"lr", "double", "fast", "not a real number"},
      {"lr", "double", "", "not a real number"},
      {"lr", "double", "0.01abc", "unexpected 'a'"},
      {"lr", "double", "0x10", "unexpected 'x'"},
      {"lr", "double", "1e400", "too large for a double"},
      {"lr", "double", "1e-400", "too small for a double"},
      {"lr", "double", "3e-324", "too small for a double to hold as written"},
      {"lr", "double", "inf", "not a real number"},
      {"betas", "Array(double)", "{0.9x, zz}", "entry 1 '0.9x'"},
      {"betas", "Array(double)", "{0.9, zz}", "entry 2 'zz'"},
      {"betas", "Array(double)", "0.9, 0.99", "not an array"},
      {"betas", "Array(double)", "{0.9,, 0.99}", "entry 2 ''"},
      {"amsgrad", "bool", "maybe", "not a bool"},
  };
  for (const auto& b : bad) {
    expect_contains(
        read_error(x, xml_with("  <Parameter name=\"" + b[0] + "\" type=\"" + b[1] + "\" value=\"" + b[2] + "\"/>\n")),
        {"key 'koptim/" + b[0] + "'", "(type " + b[1] + ")", "value '" + b[2] + "'", b[3]});
  }
  const std::string sched =
      "  <ParameterList name=\"lr_schedule\">\n    <Parameter name=\"warmup_steps\" type=\"int\" "
      "value=\"VALUE\"/>\n  </ParameterList>\n";
  for (const std::vector<std::string> b : {std::vector<std::string>{"7abc", "unexpected 'a'"},
                                           {"7.5", "unexpected '.'"},
                                           {"", "not an integer"},
                                           {"3000000000", "outside the range of an int [-2147483648, 2147483647]"}}) {
    std::string s = sched;
    s.replace(s.find("VALUE"), 5, b[0]);
    expect_contains(read_error(x, xml_with(s)),
                    {"key 'koptim/lr_schedule/warmup_steps'", "(type int)", "value '" + b[0] + "'", b[1]});
  }
  expect_contains(read_error(x, xml_with("  <Parameter name=\"lr\" type=\"float\" value=\"0.5\"/>\n")),
                  {"key 'koptim/lr'", "type 'float'", "double, int, bool, string and Array(double)"});
  // Written exactly: read exactly.
  {
    std::ofstream f(x);
    f << xml_with(
        "  <Parameter name=\"lr\" type=\"double\" value=\" 2.5e-3 \"/>\n"
        "  <Parameter name=\"betas\" type=\"Array(double)\" value=\"{ 0.8 ,0.95}\"/>\n"
        "  <Parameter name=\"amsgrad\" type=\"bool\" value=\"TRUE\"/>\n"
        "  <ParameterList name=\"lr_schedule\">\n"
        "    <Parameter name=\"warmup_steps\" type=\"int\" value=\"+4\"/>\n  </ParameterList>\n");
  }
  Fixture f;
  auto opt = koptim::create(f.params, *koptim::read_parameter_list(x));
  std::remove(x.c_str());
  const auto& o = dynamic_cast<koptim::AdamW&>(*opt).options();
  EXPECT_EQ(opt->base_lr(), 2.5e-3);
  EXPECT_EQ(o.betas[0], 0.8);
  EXPECT_EQ(o.betas[1], 0.95);
  EXPECT_TRUE(o.amsgrad);
  EXPECT_DOUBLE_EQ(opt->lr(), 2.5e-3 / 4);
}

TEST(Config, XmlRefusesKeysGivenTwice) {
  const std::string x = "koptim_test_twice.xml";
  expect_contains(read_error(x, xml_with("  <Parameter name=\"lr\" type=\"double\" value=\"0.1\"/>\n"
                                         "  <Parameter name=\"lr\" type=\"double\" value=\"0.2\"/>\n")),
                  {"key 'koptim/lr' is given twice"});
  expect_contains(read_error(x, xml_with("  <ParameterList name=\"lr_schedule\">\n"
                                         "    <Parameter name=\"type\" type=\"string\" value=\"cosine\"/>\n"
                                         "    <Parameter name=\"type\" type=\"string\" value=\"linear\"/>\n"
                                         "  </ParameterList>\n")),
                  {"key 'koptim/lr_schedule/type' is given twice"});
  expect_contains(read_error(x, xml_with("  <ParameterList name=\"lr_schedule\"/>\n"
                                         "  <ParameterList name=\"lr_schedule\"/>\n")),
                  {"key 'koptim/lr_schedule' is given twice"});
  expect_contains(read_error(x, xml_with("  <Parameter name=\"optimizer\" type=\"string\" value=\"SGD\"/>\n")),
                  {"key 'koptim/optimizer' is given twice"});
}

TEST(Config, RefusesFilesAboveTheSizeLimit) {
  // A YAML value of 70 KB took Teuchos 13.2 about a second (time quadratic in its length; 250 KB:
  // 19 s); the limit keeps every file that is read fast.
  const std::string big(70 * 1024, 'a');
  expect_contains(read_error("koptim_test_big.yaml", "koptim:\n  optimizer: AdamW\n  x: " + big + "\n"),
                  {"koptim_test_big.yaml", "larger than 65536 bytes", "at most 65536 bytes"});
  const std::string huge(1024 * 1024 + 1, ' ');
  expect_contains(read_error("koptim_test_big.xml", xml_with(huge)),
                  {"koptim_test_big.xml", "larger than 1048576 bytes", "at most 1048576 bytes"});
}

TEST(Config, ReadsTextOnlyAsXmlOrYaml) {
  auto err = [](const std::string& text, const std::string& format) {
    try {
      koptim::parameter_list_from_string(text, format, "t");
    } catch (const koptim::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  expect_contains(err("koptim:\n  lr: 1\n", "json"), {"format 'json' is neither xml nor yaml"});
  expect_contains(err(std::string("koptim:\n  lr: 1\0\n", 16), "yaml"), {"NUL byte"});
  expect_contains(err("", "yaml"), {"no key"});
  expect_contains(err("<Parameter name=\"lr\" type=\"double\" value=\"1\"/>", "xml"),
                  {"top element is <Parameter>", "<ParameterList>"});
  expect_contains(err("<ParameterList name=\"k\">0.5</ParameterList>", "xml"), {"contains the text '0.5'"});
  expect_contains(err("<ParameterList name=\"k\"><Value name=\"lr\"/></ParameterList>", "xml"), {"element <Value>"});
  expect_contains(err("<ParameterList name=\"k\"><Parameter name=\"lr\" type=\"double\"/></ParameterList>", "xml"),
                  {"key 'k/lr' has no attribute value"});
  expect_contains(
      err("<ParameterList name=\"k\"><Validators><Validator type=\"x\"/></Validators></ParameterList>", "xml"),
      {"non-empty <Validators>"});
  std::string deep_xml, deep_yaml = "koptim:\n", ind = "  ";
  for (int i = 0; i < 40; ++i) {
    deep_xml += "<ParameterList name=\"k\">";
    deep_yaml += ind + "s:\n";
    ind += " ";
  }
  for (int i = 0; i < 40; ++i) deep_xml += "</ParameterList>";
  expect_contains(err(deep_xml, "xml"), {"nested more than 32 levels"});
  expect_contains(err(deep_yaml, "yaml"), {"nested more than 32 levels"});
  expect_contains(err("koptim:\n  lr: " + std::string(40, '[') + std::string(40, ']') + "\n", "yaml"),
                  {"line 2 nests [ and { more than 32 levels"});
  expect_contains(err("<ParameterList name=\"k\"><Parameter name=\"lr\"", "xml"),
                  {"parameter list 't'", "not valid XML"});
}

TEST(Config, ShampooOverrideKeysOutsideIntAreRefused) {
  // std::stoi threw std::out_of_range (not a koptim::Error) on these; a 100 KB key overflowed
  // std::regex's recursion.
  for (const std::string key :
       {std::string("order_99999999999"), std::string("order_2_dim_99999999999"), "order_" + std::string(100000, '7'),
        std::string("order_"), std::string("order_2_dim_"), std::string("order_02"), std::string("order_1_dim_00")}) {
    Teuchos::ParameterList l("koptim");
    l.set("optimizer", std::string("Shampoo"));
    l.sublist("inverse_exponent_override").set(key, 0.25);
    expect_contains(config_error(l), {"unknown key 'inverse_exponent_override/" + key.substr(0, 20),
                                      "order_K or order_K_dim_J (K, J integers below 1000000, without leading zeros)"});
  }
  Teuchos::ParameterList l("koptim");
  l.set("optimizer", std::string("Shampoo"));
  l.set("use_merge_dims", false);  // w (3 x 4): one block of order 2
  l.sublist("inverse_exponent_override").set("order_2_dim_1", 0.0);
  EXPECT_EQ(config_error(l), "");
  // The largest keys read as keys: they reach the constructor, which finds no block of that order.
  for (const std::string key : {"order_999999", "order_10_dim_0"}) {
    auto m = l;
    m.sublist("inverse_exponent_override").set(key, 0.5);
    expect_contains(config_error(m), {"inverse_exponent_override/" + key + " matches no block"});
  }
}

// An override's value as YAML reads it: an integer beyond int (a long long) is the number written
// where a double holds it exactly ("is not a number" before), refused beyond 2^53; a list in
// place of the number is named as a list ("= x = 1 [unused]" before).
TEST(Config, ShampooOverrideValuesAreReadAsWritten) {
  auto yaml = [](const std::string& value) {
    return koptim::parameter_list_from_string(
        "koptim:\n  optimizer: Shampoo\n  use_merge_dims: false\n  inverse_exponent_override:\n    order_2" + value,
        "yaml", "t");
  };
  auto big = yaml(": 3000000000\n");
  ASSERT_TRUE(big->sublist("inverse_exponent_override").isType<long long>("order_2"));
  EXPECT_EQ(config_error(*big), "");
  Fixture f;
  auto opt = koptim::create(f.params, *big);
  EXPECT_EQ(dynamic_cast<const koptim::Shampoo&>(*opt).options().inverse_exponent_override.at(2), 3e9);
  expect_contains(config_error(*yaml(": 9007199254740993\n")),
                  {"'inverse_exponent_override/order_2' = 9007199254740993", "beyond 2^53"});
  expect_contains(config_error(*yaml(":\n      x: 1\n")), {"'inverse_exponent_override/order_2' is a list"});
}

TEST(Config, MessagesShowValuesAsWrittenAndRangesThatAgree) {
  // The bound in the message is the bound that refused the value.
  auto l = adamw();
  l.set("lr", 1e300);
  expect_contains(config_error(l), {"key 'lr'", "= 1e+300 (double)", "allowed: a real in [0, 1e+300)"});
  std::string direct;
  try {
    Fixture f;
    koptim::CommonOptions c;
    c.lr = 1e300;
    koptim::AdamW opt(f.params, c, koptim::AdamOptions{});
  } catch (const koptim::ConfigError& e) {
    direct = e.what();
  }
  expect_contains(direct, {"lr = 1e+300 is not allowed; allowed: a real in [0, 1e+300)"});
  // A real in its shortest round-trip form, not rounded to six decimals.
  Teuchos::ParameterList s("koptim");
  s.set("optimizer", std::string("Shampoo"));
  s.set("pseudo_inverse", true);
  expect_contains(config_error(s), {"needs epsilon = 0 (got epsilon = 1e-12)"});
  auto g = adamw();
  g.set("lr", 0.1);
  g.set("weight_decay", -0.30000000000000004);
  expect_contains(config_error(g), {"weight_decay' in list 'koptim' = -0.30000000000000004 (double)"});
  // Integer ranges in full.
  auto r = adamw();
  r.sublist("lr_schedule").set("warmup_steps", -1);
  expect_contains(config_error(r), {"an integer in [0, 2147483647]"});
  // The reference prints defaults as they would be written.
  std::ostringstream out;
  koptim::print_parameter_reference(out);
  const std::string ref = out.str();
  EXPECT_NE(ref.find("| `betas` | Array(double) | `{0.9, 0.999}` |"), std::string::npos);
  EXPECT_NE(ref.find("an integer in [1, 2147483647]"), std::string::npos);
  EXPECT_EQ(ref.find("e+09"), std::string::npos);
  EXPECT_EQ(ref.find("00000000000"), std::string::npos);
}

TEST(Config, PrintedDefaultsReadBack) {
  for (const auto& name : koptim::optimizer_names()) {
    const auto defaults = koptim::default_parameter_list(name);
    std::ostringstream xml;
    Teuchos::writeParameterListToXmlOStream(defaults, xml);
    // Through koptim's strict reader: what Teuchos writes, it reads back.
    auto back = koptim::parameter_list_from_string(xml.str(), "xml", name + ".xml");
    Fixture f;
    auto opt = koptim::create(f.params, *back);
    EXPECT_EQ(opt->name(), name);
    std::ostringstream yaml;
    Teuchos::writeParameterListToYamlOStream(defaults, yaml);
    auto yback = koptim::parameter_list_from_string(yaml.str(), "yaml", name + ".yaml");
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

// Every YAML and XML parameter list shown in README.md and docs/*.md is read by
// read_parameter_list and builds its optimizer: an example a user copies works as written.
TEST(Config, DocumentationExamplesAreValidLists) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files{fs::path(KOPTIM_SOURCE_DIR) / "README.md"};
  for (const auto& e : fs::directory_iterator(fs::path(KOPTIM_SOURCE_DIR) / "docs"))
    if (e.path().extension() == ".md") files.push_back(e.path());
  int examples = 0;
  for (const auto& file : files) {
    std::ifstream in(file);
    ASSERT_TRUE(in) << file;
    std::string line, language, text;
    int first_line = 0;
    for (int number = 1; std::getline(in, line); ++number) {
      if (language.empty()) {
        if (line == "```yaml" || line == "```xml") {
          language   = line.substr(3);
          first_line = number + 1;
          text.clear();
        }
        continue;
      }
      if (line != "```") {
        text += line + "\n";
        continue;
      }
      const std::string where = file.filename().string() + ":" + std::to_string(first_line);
      const std::string path  = ::testing::TempDir() + "koptim_doc_example." + language;
      std::ofstream(path) << text;
      try {
        Fixture f;
        koptim::create(f.params, *koptim::read_parameter_list(path));
      } catch (const std::exception& e) {
        ADD_FAILURE() << where << ": " << e.what() << "\n" << text;
      }
      std::remove(path.c_str());
      ++examples;
      language.clear();
    }
    EXPECT_TRUE(language.empty()) << file << ": a " << language << " block from line " << first_line
                                  << " is not closed";
  }
  EXPECT_GE(examples, 3);  // docs/parameters.md's YAML and XML, docs/gefen.md's YAML
}

// A list's keys and values, written without Teuchos' printing of lists (its output stream keeps
// process-wide state of its own, outside koptim's lock).
void flat(std::ostream& out, const Teuchos::ParameterList& l, const std::string& prefix = "") {
  for (auto it = l.begin(); it != l.end(); ++it) {
    if (l.entry(it).isList())
      flat(out, l.sublist(l.name(it)), prefix + l.name(it) + "/");
    else
      out << prefix << l.name(it) << " = " << l.entry(it).getAny(false) << "\n";
  }
}

// Host threads may read, check and print parameter lists at once, each thread with lists of its
// own. Nothing koptim keeps is shared between calls: valid_parameters builds a list of its own at
// every call (a cached list would share its reference counts between the threads, and Debian's
// Teuchos does not make them atomic), and Teuchos' XML and YAML readers, whose converter and
// grammar tables are process-wide, run one call at a time. The tsan preset finds a race here as a
// failure; in the other builds each thread's results are compared with one thread's.
TEST(Config, HostThreadsMayReadCheckAndPrintListsAtOnce) {
  EXPECT_NE(koptim::valid_parameters("AdamW").get(), koptim::valid_parameters("AdamW").get());
  const std::string yaml =
      "koptim:\n  optimizer: Shampoo\n  lr: 0.01\n  betas: [0.9, 0.99]\n  lr_schedule:\n    type: cosine\n"
      "    total_steps: 10\n";
  const std::string xml =
      "<ParameterList name=\"koptim\">\n  <Parameter name=\"optimizer\" type=\"string\" value=\"Gefen\"/>\n"
      "  <Parameter name=\"lr\" type=\"double\" value=\"0.002\"/>\n</ParameterList>\n";
  const auto work = [&] {
    std::ostringstream out;
    for (const auto& name : koptim::optimizer_names()) {
      flat(out, *koptim::valid_parameters(name));
      flat(out, koptim::default_parameter_list(name));
    }
    flat(out, koptim::validated_parameters(*koptim::parameter_list_from_string(yaml, "yaml", "threads.yaml")));
    flat(out, koptim::validated_parameters(*koptim::parameter_list_from_string(xml, "xml", "threads.xml")));
    koptim::print_parameter_reference(out);
    return out.str();
  };
  const std::string expected = work();
  constexpr int threads      = 4;
  std::vector<std::string> differs(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      try {
        for (int i = 0; i < 4; ++i)
          if (work() != expected) differs[t] = "other results";
      } catch (const std::exception& e) {
        differs[t] = e.what();
      }
    });
  for (auto& thread : pool) thread.join();
  for (int t = 0; t < threads; ++t) EXPECT_EQ(differs[t], "") << "thread " << t;
}

}  // namespace
