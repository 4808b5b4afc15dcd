// libFuzzer target: koptim::io::load_checkpoint of a fuzzed file (the input is written to a
// temporary file of this process, loaded into an optimizer of the kind the file names, and
// removed). Anything but a koptim::Error is a finding; a refused load must change nothing.
#include "koptim_FuzzCommon.hpp"

#include <koptim/io/koptim_Checkpoint.hpp>

#include <unistd.h>

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  koptim_fuzz::start();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = "/tmp/koptim_fuzz_checkpoint_" + std::to_string(getpid()) + ".h5";
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) std::abort();
    if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
    std::fclose(f);
  }
  // The kind from a byte of the input, so that every kind meets files of every kind.
  const auto& kinds = koptim_fuzz::kinds();
  koptim_fuzz::Params params;
  auto opt = koptim_fuzz::make(kinds[size == 0 ? 0 : data[size / 2] % kinds.size()], params.set);
  const koptim::OptimizerState before = opt->export_state();
  const auto values                   = params.bytes();
  bool loaded                         = false;
  koptim_fuzz::expect_koptim_errors_only("fuzz_checkpoint", [&] {
    koptim::io::load_checkpoint(path, *opt);
    loaded = true;
  });
  // A load refuses in its checks, before anything changes; a refusal in the change phase (the
  // import refusing what the checks passed) interrupts the optimizer: a finding too.
  if (!loaded && opt->interrupted()) {
    std::fprintf(stderr,
                 "fuzz_checkpoint: a refused load interrupted the optimizer (the checks passed what the "
                 "import refused)\n");
    std::abort();
  }
  if (!loaded && !(opt->export_state() == before)) {
    std::fprintf(stderr, "fuzz_checkpoint: a refused load changed the optimizer's state\n");
    std::abort();
  }
  if (!loaded && params.bytes() != values) {
    std::fprintf(stderr, "fuzz_checkpoint: a refused load changed the parameters\n");
    std::abort();
  }
  if (loaded) koptim_fuzz::expect_koptim_errors_only("fuzz_checkpoint", [&] { opt->step(); });
  std::remove(path.c_str());
  return 0;
}
