// Exact restart across processes and rank counts. Two phases, each its own ctest run (so the
// resuming process is a new one):
//   KOPTIM_CHECKPOINT_PHASE=save    every configuration takes 7 steps and saves
//                                   <dir>/<config>_np<ranks>.h5
//   KOPTIM_CHECKPOINT_PHASE=resume  KOPTIM_CHECKPOINT_FROM=<ranks that saved>: every configuration
//                                   loads that file into a fresh optimizer over scrambled
//                                   parameters, takes steps 8 to 13, and must equal 13 steps of
//                                   one uninterrupted run bitwise.
// KOPTIM_CHECKPOINT_DIR names the folder. The configurations: koptim_TestCheckpoint.hpp.
#include "koptim_TestCheckpoint.hpp"
#include "koptim_TestMpi.hpp"

#include <koptim/io/koptim_Checkpoint.hpp>

#include <gtest/gtest.h>
#include <mpi.h>
#include <sys/stat.h>

#include <cstdlib>
#include <string>

namespace {

using koptim_test::CheckpointModel;
using koptim_test::world;

constexpr int saved_steps = 7, total_steps = 13;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string path_of(const std::string& config, int ranks) {
  return env("KOPTIM_CHECKPOINT_DIR") + "/" + config + "_np" + std::to_string(ranks) + ".h5";
}

class Restart : public ::testing::TestWithParam<std::string> {};

TEST_P(Restart, EqualsOneUninterruptedRun) {
  const std::string phase = env("KOPTIM_CHECKPOINT_PHASE"), dir = env("KOPTIM_CHECKPOINT_DIR");
  if (phase.empty() || dir.empty()) GTEST_SKIP() << "set KOPTIM_CHECKPOINT_PHASE and KOPTIM_CHECKPOINT_DIR";
  const std::string config = GetParam();
  const auto list          = koptim_test::checkpoint_config(config);
  koptim::io::SaveOptions so;
  so.comm = world();  // replicated optimizers save over the world; the others use their own
  koptim::io::LoadOptions lo;
  lo.comm = world();

  if (phase == "save") {
    if (world()->rank() == 0) mkdir(dir.c_str(), 0755);
    MPI_Barrier(world()->mpi_comm());
    CheckpointModel m;
    auto opt = koptim::create(m.params, list, world());
    for (int s = 1; s <= saved_steps; ++s) {
      m.gradients(s);
      opt->step();
    }
    so.metadata.integers["next_step"] = saved_steps + 1;
    so.metadata.strings["config"]     = config;
    koptim::io::save_checkpoint(path_of(config, world()->size()), *opt, so);
    return;
  }
  ASSERT_EQ(phase, "resume");
  const int from = std::atoi(env("KOPTIM_CHECKPOINT_FROM").c_str());
  ASSERT_GE(from, 1) << "set KOPTIM_CHECKPOINT_FROM";

  CheckpointModel resumed;
  resumed.scramble();
  auto opt          = koptim::create(resumed.params, list, world());
  const auto report = koptim::io::load_checkpoint(path_of(config, from), *opt, lo);
  EXPECT_EQ(report.written_on_ranks, from);
  EXPECT_EQ(report.metadata.strings.at("config"), config);
  EXPECT_TRUE(report.configuration_changes.empty());
  ASSERT_EQ(opt->step_count(), saved_steps);
  for (int s = static_cast<int>(report.metadata.integers.at("next_step")); s <= total_steps; ++s) {
    resumed.gradients(s);
    opt->step();
  }

  CheckpointModel reference;
  auto ref = koptim::create(reference.params, list, world());
  for (int s = 1; s <= total_steps; ++s) {
    reference.gradients(s);
    ref->step();
  }
  EXPECT_EQ(opt->step_count(), total_steps);
  EXPECT_TRUE(resumed.bytes() == reference.bytes())
      << config << ": the parameters after the restart (" << from << " -> " << world()->size()
      << " ranks) differ from one uninterrupted run";
  // The state too, where the rank counts match (otherwise its sharding differs by design).
  if (from == world()->size()) EXPECT_TRUE(opt->export_state() == ref->export_state()) << config;
}

INSTANTIATE_TEST_SUITE_P(Checkpoint, Restart, ::testing::ValuesIn(koptim_test::checkpoint_configs()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
