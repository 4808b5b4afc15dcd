// An optimizer created before Kokkos::initialize or after Kokkos::finalize is refused with a
// koptim::Error that says so (Kokkos' own error would be a bare std::runtime_error from deep in an
// allocation). A program of its own: the test main initializes Kokkos before any test runs.
#include <koptim/koptim.hpp>

#include <Teuchos_ParameterList.hpp>

#include <cstdio>
#include <string>

namespace {

int failures = 0;

// create() on unmanaged Views without elements (which need no Kokkos, in the memory space of
// koptim's execution space on every backend) must throw koptim::Error naming Kokkos.
void expect_refused(const char* when) {
  Kokkos::View<float*, koptim::MemorySpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> wv(nullptr, 0), gv(nullptr, 0);
  Teuchos::ParameterList l("koptim");
  l.set("optimizer", std::string("AdamW"));
  std::string what;
  try {
    koptim::ParameterSet params;
    params.add("w", wv, gv);
    koptim::create(params, l);
    what = "no exception";
  } catch (const koptim::Error& e) {
    const std::string m = e.what();
    if (m.find("koptim::AdamW: Kokkos is not initialized") == std::string::npos) what = "koptim::Error: " + m;
  } catch (const std::exception& e) {
    what = std::string("not a koptim::Error: ") + e.what();
  }
  if (!what.empty()) {
    std::fprintf(stderr, "FAILED %s: %s\n", when, what.c_str());
    ++failures;
  }
}

}  // namespace

int main(int argc, char** argv) {
  expect_refused("before Kokkos::initialize");
  Kokkos::initialize(argc, argv);
  {
    Kokkos::View<float*> w("w", 4), g("g", 4);
    koptim::ParameterSet params;
    params.add("w", w, g);
    Teuchos::ParameterList l("koptim");
    l.set("optimizer", std::string("AdamW"));
    Kokkos::deep_copy(g, 1.0f);
    koptim::create(params, l)->step();  // and between the two, it works
  }
  Kokkos::finalize();
  expect_refused("after Kokkos::finalize");
  std::printf("%s\n", failures == 0 ? "ok" : "FAILED");
  return failures == 0 ? 0 : 1;
}
