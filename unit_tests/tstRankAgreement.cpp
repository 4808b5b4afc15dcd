// Ranks that meet a problem alone fail together: a parameter list refused on one rank, lists that
// differ between ranks, a Shampoo option refused on one rank, a rank that cannot hold its share
// of the state, a gradient refused on one rank, a bad KOPTIM_MPI_CUDA_AWARE on one rank. Each
// throws on every rank (or, for skip_step, skips on every rank) instead of leaving the others
// waiting in a collective; a hang would end this program at its ctest timeout. Runs at 1 to 4
// ranks (the last rank is the odd one out; at one rank it is the only one).
#include "koptim_TestErrors.hpp"
#include "koptim_TestMpi.hpp"
#include "koptim_TestTensor.hpp"

#include <koptim/koptim.hpp>

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

namespace {

using koptim_test::expect_error;
using koptim_test::TestTensor;
using koptim_test::world;

bool odd_one_out() { return world()->rank() == world()->size() - 1; }

struct Model {
  TestTensor<float> a{{17, 5}, "a"}, b{{40}, "b"};
  koptim::ParameterSet params;
  Model() {
    a.add_to(params, "a");
    b.add_to(params, "b");
    a.set(false, [](std::int64_t i) { return 0.01 * static_cast<double>(i % 13) - 0.05; });
    b.set(false, [](std::int64_t i) { return 0.02 * static_cast<double>(i % 7) - 0.06; });
  }
  void gradients(int s, bool nan = false) {
    a.set(true, [&](std::int64_t i) { return 0.001 * static_cast<double>((i + s) % 11) - 0.004; });
    b.set(true, [&](std::int64_t i) {
      return nan && i == 3 ? std::numeric_limits<double>::quiet_NaN() : 0.002 * static_cast<double>((i * s) % 5);
    });
  }
};

Teuchos::ParameterList list(const std::string& name, bool shard) {
  Teuchos::ParameterList l("koptim");
  l.set("optimizer", name);
  l.set("lr", 0.01);
  if (name != "Shampoo") l.set("shard_state", shard);
  return l;
}

TEST(RankAgreement, AListRefusedOnOneRankIsRefusedOnEveryRank) {
  Model m;
  auto l = list("AdamW", true);
  if (odd_one_out()) l.set("lr", -1.0);
  expect_error<koptim::ConfigError>([&] { koptim::create(m.params, l, world()); }, {"key 'lr'", "-1"});
  auto s = list("Shampoo", false);
  if (odd_one_out()) s.set("use_nesterov", true);  // momentum is 0
  expect_error<koptim::ConfigError>([&] { koptim::create(m.params, s, world()); }, {"use_nesterov"});
}

TEST(RankAgreement, RanksWhoseListsDifferAreRefusedTogether) {
  Model m;
  // shard_state on some ranks only: those would build optimizers that meet in collectives the
  // others never enter.
  auto l = list("AdamW", !odd_one_out());
  if (world()->size() == 1) {
    EXPECT_NO_THROW(koptim::create(m.params, l, world()));
    return;
  }
  expect_error<koptim::ConfigError>([&] { koptim::create(m.params, l, world()); },
                                    {"the ranks of the communicator pass different parameter lists"});
  auto g = list("Gefen", false);
  g.set("lr", odd_one_out() ? 0.02 : 0.01);
  expect_error<koptim::ConfigError>([&] { koptim::create(m.params, g, world()); }, {"different parameter lists"});
}

// Parameter groups that differ between ranks (a name; an lr the group sets itself, equal to the
// list's) build optimizers that differ, though their lr in effect is the same: refused together
// (a checkpoint writes each rank's group name and own values). The message names the parameter
// whose description differs whole, though its name holds the "; " that separates the items in
// the message.
TEST(RankAgreement, RanksWhoseGroupsDifferAreRefusedTogether) {
  if (world()->size() == 1) GTEST_SKIP() << "needs two ranks";
  for (const std::string differs : {"name", "own lr"})
    for (const std::string name : {"AdamW", "Gefen", "Shampoo"}) {
      SCOPED_TRACE(name + ", the group's " + differs + " differs on the last rank");
      const std::string wd = name == "AdamW" ? "0.01" : "0";  // the default weight_decay
      Model m;
      koptim::GroupOptions own;
      if (differs == "own lr" && odd_one_out()) own.lr = 0.01;  // the list's lr
      koptim::ParameterSet ps;
      const int g = ps.add_group(differs == "name" && odd_one_out() ? "head_" : "head", own);
      ps.add_ref("a", m.params[0].param, m.params[0].grad, 0);
      ps.add_ref("b; c", m.params[1].param, m.params[1].grad, g);
      expect_error<koptim::ConfigError>(
          [&] { koptim::create(ps, list(name, true), world()); },
          {"koptim::" + name + ": the ranks of the communicator disagree",
           "Rank " + std::to_string(world()->size() - 1) + " has 'b; c float32 (40,) right group 1 'head" +
               (differs == "name" ? "_' (5) lr 0.01 wd " + wd + "'" : "' (4) lr 0.01 (own) wd " + wd + "'") +
               " where rank 0 has 'b; c float32 (40,) right group 1 'head' (4) lr 0.01 wd " + wd + "'",
           "group 1 'head" + std::string(odd_one_out() && differs == "name" ? "_'" : "'")});
    }
}

// The C++ options, without a parameter list: the constructors agree on their own checks.
TEST(RankAgreement, OptionsRefusedOnOneRankAreRefusedOnEveryRank) {
  Model m;
  koptim::CommonOptions c;
  c.lr = odd_one_out() ? -1.0 : 0.01;  // checked by the Optimizer base class
  expect_error<koptim::ConfigError>([&] { koptim::AdamW(m.params, c, {}, world()); }, {"lr = -1"});
  expect_error<koptim::ConfigError>([&] { koptim::Gefen(m.params, c, {}, world()); }, {"lr = -1"});
  expect_error<koptim::ConfigError>([&] { koptim::Shampoo(m.params, c, {}, world()); }, {"lr = -1"});
  c.lr = 0.01;
  koptim::ShampooOptions o;
  o.use_nesterov = odd_one_out();  // momentum 0
  expect_error<koptim::ConfigError>([&] { koptim::Shampoo(m.params, c, o, world()); },
                                    {"use_nesterov = true needs momentum > 0"});
}

// Schedules that differ past a number's sixth digit (C++ options: a parameter list is compared
// as text): the ranks compare every number of the schedule exactly, or each rank would update
// its slice of the state with an lr of its own.
TEST(RankAgreement, SchedulesThatDifferInTheLastDigitsAreRefusedTogether) {
  if (world()->size() == 1) GTEST_SKIP() << "needs two ranks";
  Model m;
  const double v = odd_one_out() ? 0.1000001 : 0.1;
  for (const auto& s : {koptim::LRSchedule::cosine(100, v), koptim::LRSchedule::step(10, v)}) {
    koptim::CommonOptions c;
    c.lr_schedule = s;
    const std::string mine =
        s.decay() == koptim::LRSchedule::Decay::cosine ? "cosine decay to 0.1000001" : "step decay by 0.1000001";
    expect_error<koptim::ConfigError>([&] { koptim::AdamW(m.params, c, {}, world()); },
                                      {"the ranks of the communicator disagree", "has 'schedule " + mine});
  }
}

// A Shampoo block too large for the machine, held by one rank (the first, which LPT gives the
// largest block): every rank's constructor fails with that rank's message, not the others' first
// step.
TEST(RankAgreement, StateOneRankCannotHoldFailsEveryRank) {
  TestTensor<float> big({1 << 20}, "big"), small({8}, "small");
  koptim::ParameterSet ps;
  big.add_to(ps, "big");
  small.add_to(ps, "small");
  koptim::CommonOptions c;
  koptim::ShampooOptions o;
  o.max_preconditioner_dim = 1 << 20;  // a factor of 2^40 entries: 12 TiB
  expect_error<koptim::Error>([&] { koptim::Shampoo(ps, c, o, world()); },
                              {"the optimizer state of this rank needs about", "Lower max_preconditioner_dim"});
}

// A gradient refused on one rank (its own gradients, not averaged): skip_step skips the step on
// every rank, error throws on every rank; then the next step runs on every rank as before.
// An optimizer interrupted on one rank alone (its import_state() failed while writing the
// tensors) refused its next step at once while the other ranks went on into the step's
// collectives: a hang. The refusal is now part of the gradient check's agreement, so every rank
// refuses with that rank's message; a state import on every rank clears it.
// With nonfinite_gradient: unchecked too, where no gradient check is agreed on (before: the
// interrupted rank threw alone and the others waited in the all-gather).
TEST(RankAgreement, AnInterruptionOnOneRankRefusesTheStepOnEveryRank) {
  for (const bool unchecked : {false, true})
    for (const std::string name : {"AdamW", "Gefen", "Shampoo"}) {
      SCOPED_TRACE(name + (unchecked ? ", unchecked gradients" : ""));
      Model m;
      auto l = list(name, true);
      if (unchecked) l.set("nonfinite_gradient", std::string("unchecked"));
      auto opt = koptim::create(m.params, l, world());
      m.gradients(1);
      opt->step();
      const auto saved = opt->export_state();
      if (odd_one_out()) koptim::Impl::interrupt(*opt, "import_state", "a test's failure");
      m.gradients(2);
      expect_error<koptim::Error>([&] { opt->step(); },
                                  {(world()->size() > 1 ? "rank " + std::to_string(world()->size() - 1) + ": " : "") +
                                       "koptim::" + name + "::step: refused: import_state threw",
                                   "a test's failure"});
      EXPECT_EQ(opt->step_count(), 1);
      opt->import_state(saved);
      opt->step();
      EXPECT_EQ(opt->step_count(), 2);
    }
}

TEST(RankAgreement, AGradientRefusedOnOneRankSkipsOrFailsEveryRank) {
  for (const std::string name : {"AdamW", "Gefen", "Shampoo"}) {
    SCOPED_TRACE(name);
    Model m;
    auto l = list(name, true);
    l.set("nonfinite_gradient", std::string("skip_step"));
    auto opt = koptim::create(m.params, l, world());
    m.gradients(1);
    opt->step();
    auto state                      = opt->export_state();
    state.integers["skipped_steps"] = 1;  // all else unchanged
    m.gradients(2, odd_one_out());
    opt->step();
    EXPECT_TRUE(opt->last_step_status().skipped);
    EXPECT_EQ(opt->skipped_steps(), 1);
    EXPECT_EQ(opt->step_count(), 1);
    EXPECT_TRUE(state == opt->export_state());
    const std::string refused = opt->last_step_status().refused_parameter;
    if (odd_one_out())
      EXPECT_EQ(refused, "b");
    else
      EXPECT_EQ(refused, "rank " + std::to_string(world()->size() - 1) + ": b");
    m.gradients(3);
    opt->step();
    EXPECT_EQ(opt->step_count(), 2);

    l.set("nonfinite_gradient", std::string("error"));
    Model e;
    auto strict = koptim::create(e.params, l, world());
    e.gradients(1, odd_one_out());
    expect_error<koptim::NonFiniteError>([&] { strict->step(); }, {"gradient of parameter 'b'", "non-finite"});
    EXPECT_EQ(strict->step_count(), 0);
    // Every rank names the refused parameter, as under skip_step.
    if (odd_one_out())
      EXPECT_EQ(strict->last_step_status().refused_parameter, "b");
    else
      EXPECT_EQ(strict->last_step_status().refused_parameter, "rank " + std::to_string(world()->size() - 1) + ": b");
    e.gradients(2);
    strict->step();
    EXPECT_EQ(strict->step_count(), 1);
  }
}

TEST(RankAgreement, ABadCudaAwareOverrideOnOneRankFailsEveryRank) {
  const char* old = std::getenv("KOPTIM_MPI_CUDA_AWARE");
  const std::string saved(old ? old : "");
  if (odd_one_out()) setenv("KOPTIM_MPI_CUDA_AWARE", "yes", 1);
  expect_error<koptim::ConfigError>([&] { koptim::comm::Communicator::create(MPI_COMM_WORLD); },
                                    {"KOPTIM_MPI_CUDA_AWARE = 'yes' is not allowed"});
  if (old)
    setenv("KOPTIM_MPI_CUDA_AWARE", saved.c_str(), 1);
  else
    unsetenv("KOPTIM_MPI_CUDA_AWARE");
  EXPECT_NO_THROW(koptim::comm::Communicator::create(MPI_COMM_WORLD));
}

}  // namespace
