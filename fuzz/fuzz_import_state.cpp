// libFuzzer target: Optimizer::import_state of a fuzzed OptimizerState (the byte encoding in
// koptim_FuzzCommon.hpp; the first byte picks the optimizer kind). An accepted state must then
// allow a step and export again; a refused one must leave the optimizer as it was. Anything but
// a koptim::Error is a finding.
#include "koptim_FuzzCommon.hpp"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  koptim_fuzz::start();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::uint8_t kind                  = 0;
  const koptim::OptimizerState state = koptim_fuzz::decode(data, size, kind);
  koptim_fuzz::Params params;
  const std::string& name = koptim_fuzz::kinds()[kind % koptim_fuzz::kinds().size()];
  auto opt                = koptim_fuzz::make(name, params.set);
  opt->step();
  const koptim::OptimizerState before = opt->export_state();
  bool imported                       = false;
  koptim_fuzz::expect_koptim_errors_only("fuzz_import_state", [&] {
    opt->import_state(state);
    imported = true;
  });
  if (!imported && !(opt->export_state() == before)) {
    std::fprintf(stderr, "fuzz_import_state: a refused import changed the %s state\n", name.c_str());
    std::abort();
  }
  koptim_fuzz::expect_koptim_errors_only("fuzz_import_state", [&] {
    params.fill(1);
    opt->step();
    opt->import_state(opt->export_state());
  });
  return 0;
}
