// Built against the installed koptim: one AdamW step on a parameter of ones with gradient ones
// moves every entry to 1 - lr * wd - lr (Adam's first step is lr * sign(g) for eps -> 0).
#include <koptim/koptim.hpp>

#include <mpi.h>

#include <cmath>
#include <cstdio>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Kokkos::initialize(argc, argv);
  int rc = 0;
  {
    Kokkos::View<double*> w("w", 10), g("g", 10);
    Kokkos::deep_copy(w, 1.0);
    Kokkos::deep_copy(g, 1.0);
    koptim::ParameterSet params;
    params.add("w", w, g);
    Teuchos::ParameterList list;
    list.set("optimizer", std::string("AdamW"));
    list.set("lr", 0.1);
    auto opt = koptim::create(params, list);
    opt->step();
    auto h              = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), w);
    const double expect = 1.0 * (1 - 0.1 * 0.01) - 0.1 / (1 + 1e-8);
    for (int i = 0; i < 10; ++i) rc |= std::abs(h(i) - expect) > 1e-12;
    std::printf("koptim %s (git %s, Kokkos %d): w[0] = %.15g, expected %.15g: %s\n", KOPTIM_VERSION_STRING,
                koptim::git_hash(), KOKKOS_VERSION, h(0), expect, rc ? "FAILED" : "ok");
  }
  Kokkos::finalize();
  MPI_Finalize();
  return rc;
}
