// Gradient averaging for a model of 100 float32 parameters (25 layers of a width x width weight,
// a bias and two norm vectors of width elements): koptim::comm::GradientAllReducer (default
// 25 MiB buckets) against one MPI_Allreduce per parameter followed by the division. Counters:
// messages per call, MB = gradient megabytes per call, GBps = those bytes per second.
//
// Run under MPI, e.g. mpiexec -n 2 koptim_perf_comm. Every rank runs the same benchmarks with
// fixed iteration counts (->Iterations), so the collectives pair up; rank 0's numbers are the
// ones to read (every rank prints its own).
#include <koptim/koptim.hpp>

#include <benchmark/benchmark.h>
#include <mpi.h>

#include <memory>
#include <vector>

namespace {

struct Model {
  std::vector<Kokkos::View<float*>> params, grads;
  koptim::ParameterSet set;
  std::int64_t elements = 0;

  explicit Model(std::int64_t width) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (int layer = 0; layer < 25; ++layer) {
      for (std::int64_t n : {width * width, width, width, width}) {
        const std::string name = "p" + std::to_string(params.size());
        params.emplace_back(name, n);
        grads.emplace_back(name + ".grad", n);
        Kokkos::deep_copy(grads.back(), 0.001f * static_cast<float>(rank + 1));
        set.add(name, params.back(), grads.back());
        elements += n;
      }
    }
  }
};

void set_counters(benchmark::State& state, const Model& m, double messages) {
  const double bytes         = static_cast<double>(m.elements) * sizeof(float);
  state.counters["messages"] = messages;
  state.counters["MB"]       = bytes * 1e-6;
  state.counters["GBps"]     = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_GradientAllReducer(benchmark::State& state) {
  Model m(state.range(0));
  auto comm = koptim::comm::Communicator::create(MPI_COMM_WORLD);
  koptim::comm::GradientAllReducer reducer(comm, m.set);
  reducer.all_reduce_mean();  // warm-up: first touch of the buckets
  MPI_Barrier(MPI_COMM_WORLD);
  for (auto _ : state) reducer.all_reduce_mean();
  set_counters(state, m, static_cast<double>(reducer.num_messages_per_call()));
}

// g /= n. A free function: CUDA refuses an extended lambda inside another lambda.
void divide(const Kokkos::View<float*>& g, float n) {
  Kokkos::parallel_for(
      "divide", Kokkos::RangePolicy<koptim::ExecutionSpace>(0, g.extent(0)),
      KOKKOS_LAMBDA(const std::size_t i) { g(i) /= n; });
}

void BM_AllReducePerParameter(benchmark::State& state) {
  Model m(state.range(0));
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  auto one_call = [&] {
    for (const auto& g : m.grads) {
      MPI_Allreduce(MPI_IN_PLACE, g.data(), static_cast<int>(g.extent(0)), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      divide(g, static_cast<float>(size));
    }
    Kokkos::fence();
  };
  one_call();
  MPI_Barrier(MPI_COMM_WORLD);
  for (auto _ : state) one_call();
  set_counters(state, m, static_cast<double>(m.grads.size()));
}

// width 32: 0.12 MB (latency-bound); 256: 6.6 MB; 1024: 105 MB (bandwidth-bound).
void sizes(benchmark::internal::Benchmark* b) { b->ArgName("width")->Unit(benchmark::kMillisecond)->UseRealTime(); }

}  // namespace

BENCHMARK(BM_GradientAllReducer)->Apply(sizes)->Arg(32)->Iterations(2000);
BENCHMARK(BM_GradientAllReducer)->Apply(sizes)->Arg(256)->Iterations(100);
BENCHMARK(BM_GradientAllReducer)->Apply(sizes)->Arg(1024)->Iterations(10);
BENCHMARK(BM_AllReducePerParameter)->Apply(sizes)->Arg(32)->Iterations(2000);
BENCHMARK(BM_AllReducePerParameter)->Apply(sizes)->Arg(256)->Iterations(100);
BENCHMARK(BM_AllReducePerParameter)->Apply(sizes)->Arg(1024)->Iterations(10);
