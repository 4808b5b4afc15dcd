// Distributed Shampoo on the 4-layer MLP parameter set of width 1024 (float32), run under
// mpiexec with 1 and 2 ranks: the root-inverse phase and the whole step() per step, the
// all-gather bytes per step, with fp32 and bf16 communication. Fixed iteration counts keep the
// ranks' collectives matched.
//
//   mpiexec -n 1 ./koptim_perf_distributed --benchmark_format=json --benchmark_out=np1.json
//   mpiexec -n 2 --oversubscribe ./koptim_perf_distributed --benchmark_format=json --benchmark_out=np2.json
#include "koptim_PerfModels.hpp"

#include <koptim/koptim.hpp>

#include <benchmark/benchmark.h>
#include <mpi.h>

#include <random>

namespace {

void BM_ShampooMlp(benchmark::State& state) {
  const int width = static_cast<int>(state.range(0));
  const bool bf16 = state.range(1) != 0;
  koptim_perf::Mlp mlp(width);
  const auto& params = mlp.params;
  Teuchos::ParameterList list;
  list.set("optimizer", std::string("Shampoo"));
  list.set("grafting", std::string("Adam"));
  list.set("epsilon", 1e-8);
  list.set("precondition_frequency", 1);
  list.set("communication_dtype", std::string(bf16 ? "bfloat16" : "float32"));
  auto comm = koptim::comm::Communicator::create(MPI_COMM_WORLD);
  auto opt  = koptim::create(params, list, comm);
  auto& sh  = dynamic_cast<koptim::Shampoo&>(*opt);
  sh.time_phases(true);
  for (auto _ : state) {
    opt->step();
    Kokkos::fence();
  }
  const double steps = static_cast<double>(state.iterations());
  const auto& t      = sh.phase_times();
  state.counters["root_phase_ms"] =
      1e3 * comm->max(static_cast<long long>(1e9 * t.amortized_computation)) / 1e9 / steps;
  state.counters["all_gather_ms"]     = 1e3 * t.all_gather / steps;
  state.counters["all_gather_bytes"]  = static_cast<double>(sh.all_gather_bytes());
  state.counters["state_bytes_rank0"] = static_cast<double>(opt->state_bytes());
  state.counters["ranks"]             = comm->size();
  state.SetLabel(bf16 ? "bf16" : "fp32");
}

BENCHMARK(BM_ShampooMlp)->Args({1024, 0})->Args({1024, 1})->Iterations(3)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ShampooMlp)->Args({64, 0})->Iterations(3)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
