// libFuzzer target: a parameter list from YAML or XML text (KOPTIM_FUZZ_FORMAT names which), read
// by koptim's strict reader, validated and built into an optimizer. Every input must give a list
// or a koptim::Error: a crash, a hang, a leak or another exception is a finding.
#include "koptim_FuzzCommon.hpp"

#ifndef KOPTIM_FUZZ_FORMAT
#error "define KOPTIM_FUZZ_FORMAT as \"xml\" or \"yaml\""
#endif

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  koptim_fuzz::start();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static koptim_fuzz::Params params;
  const std::string text(reinterpret_cast<const char*>(data), size);
  koptim_fuzz::expect_koptim_errors_only("fuzz_parameter_list_" KOPTIM_FUZZ_FORMAT, [&] {
    auto list = koptim::parameter_list_from_string(text, KOPTIM_FUZZ_FORMAT, "fuzz input");
    auto opt  = koptim::create(params.set, *list);
    opt->step();
  });
  params.fill(0);
  return 0;
}
