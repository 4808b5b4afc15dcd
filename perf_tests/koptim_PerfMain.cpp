// The main of koptim's Google Benchmark programs: MPI and Kokkos around the benchmarks, and the
// Kokkos configuration recorded in the JSON context so a result says what it was measured on.
#include <koptim/koptim.hpp>

#include <benchmark/benchmark.h>
#include <mpi.h>

#include <sstream>
#include <thread>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Kokkos::initialize(argc, argv);
  {
    benchmark::Initialize(&argc, argv);
    benchmark::AddCustomContext("koptim_version", KOPTIM_VERSION_STRING);
    benchmark::AddCustomContext("koptim_git_hash", KOPTIM_GIT_HASH);
    benchmark::AddCustomContext("kokkos_version", std::to_string(KOKKOS_VERSION));
    benchmark::AddCustomContext("kokkos_execution_space", Kokkos::DefaultExecutionSpace::name());
    benchmark::AddCustomContext("kokkos_concurrency", std::to_string(Kokkos::DefaultExecutionSpace().concurrency()));
    benchmark::AddCustomContext("hardware_threads", std::to_string(std::thread::hardware_concurrency()));
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
  }
  Kokkos::finalize();
  MPI_Finalize();
  return 0;
}
