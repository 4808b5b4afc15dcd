// Public entry points open Kokkos profiling regions named after themselves, so Kokkos Tools see
// where koptim spends its time (checked through the Kokkos Tools region callbacks).
#include <koptim/koptim.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace {

std::vector<std::string>& regions() {
  static std::vector<std::string> r;
  return r;
}
void on_push(const char* name) { regions().emplace_back(name); }
void on_pop() {}

bool seen(const std::string& name) { return std::find(regions().begin(), regions().end(), name) != regions().end(); }

TEST(Profiling, EntryPointsOpenNamedRegions) {
  Kokkos::View<float*> w("w", 8), g("g", 8);
  Kokkos::View<float**> m("m", 4, 3), dm("dm", 4, 3);
  koptim::ParameterSet params;
  params.add("w", w, g);
  params.add("m", m, dm);
  Kokkos::Tools::Experimental::set_push_region_callback(on_push);
  Kokkos::Tools::Experimental::set_pop_region_callback(on_pop);
  regions().clear();
  Kokkos::View<double*> b("b", 2), db("db", 2);
  params.add("b", b, db);
  Teuchos::ParameterList l;
  l.set("optimizer", std::string("AdamW"));
  auto adamw = koptim::create(params, l);
  adamw->step();
  auto state = adamw->export_state();
  adamw->import_state(state);
  l.set("optimizer", std::string("Shampoo"));
  auto shampoo = koptim::create(params, l);
  shampoo->step();
  Kokkos::Tools::Experimental::set_push_region_callback(nullptr);
  Kokkos::Tools::Experimental::set_pop_region_callback(nullptr);
  for (const char* name :
       {"koptim::ParameterSet::add", "koptim::create", "koptim::validated_parameters", "koptim::AdamW::step",
        "koptim::AdamW::export_state", "koptim::AdamW::import_state", "koptim::Shampoo::step",
        "koptim::Shampoo::amortized_computation", "koptim::Shampoo::all_gather"}) {
    EXPECT_TRUE(seen(name)) << name;
  }
}

}  // namespace
