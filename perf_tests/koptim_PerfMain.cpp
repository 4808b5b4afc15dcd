// The main of koptim's Google Benchmark programs: MPI and Kokkos around the benchmarks, and the
// Kokkos configuration recorded in the JSON context so a result says what it was measured on.
// Under mpiexec every rank runs the same benchmarks (they must use fixed iteration counts where
// they communicate); only rank 0 reports and writes --benchmark_out.
#include <koptim/koptim.hpp>

#include <benchmark/benchmark.h>
#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <thread>
#include <vector>

namespace {
// Kokkos' options it also reads without the --kokkos- prefix, and leaves in argv in that form.
bool kokkos_unprefixed(const char* a) {
  for (const char* name : {"--help", "--disable-warnings", "--tune-internals", "--threads", "--num-threads", "--numa",
                           "--device", "--device-id", "--ndevices", "--num-devices", "--map-device-id-by",
                           "--tools-library", "--tools-args", "--tools-help", "--print-configuration"}) {
    const std::size_t k = std::strlen(name);
    if (std::strncmp(a, name, k) == 0 && (a[k] == '\0' || a[k] == '=')) return true;
  }
  return false;
}

// The options that name rank 0's output file (the other ranks drop them and report nothing).
bool output_option(const char* a) {
  return std::strncmp(a, "--benchmark_out=", 16) == 0 || std::strncmp(a, "--benchmark_out_format=", 23) == 0;
}

class SilentReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};
}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Kokkos::initialize(argc, argv);
  {
    std::vector<char*> args(argv, argv + argc);
    if (rank != 0) args.erase(std::remove_if(args.begin() + 1, args.end(), output_option), args.end());
    int n = static_cast<int>(args.size());
    benchmark::Initialize(&n, args.data());
    // An argument neither Kokkos nor Google Benchmark took (a misspelt --benchmark_filtr would
    // otherwise run every benchmark without a word): the library prints it, and every rank stops
    // (agreed: ranks that went on would wait for the others in their benchmarks' collectives).
    std::vector<char*> left(args.begin(), args.begin() + n);
    left.erase(std::remove_if(left.begin() + 1, left.end(), kokkos_unprefixed), left.end());
    int unknown = benchmark::ReportUnrecognizedArguments(static_cast<int>(left.size()), left.data()) ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &unknown, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (unknown) {
      Kokkos::finalize();
      MPI_Finalize();
      return 2;
    }
    benchmark::AddCustomContext("koptim_version", KOPTIM_VERSION_STRING);
    benchmark::AddCustomContext("koptim_git_hash", koptim::git_hash());
    benchmark::AddCustomContext("kokkos_version", std::to_string(KOKKOS_VERSION));
    benchmark::AddCustomContext("kokkos_execution_space", Kokkos::DefaultExecutionSpace::name());
    benchmark::AddCustomContext("kokkos_concurrency", std::to_string(Kokkos::DefaultExecutionSpace().concurrency()));
    benchmark::AddCustomContext("hardware_threads", std::to_string(std::thread::hardware_concurrency()));
    benchmark::AddCustomContext("mpi_ranks", std::to_string(size));
    if (rank == 0) {
      benchmark::RunSpecifiedBenchmarks();
    } else {
      SilentReporter silent;
      benchmark::RunSpecifiedBenchmarks(&silent);
    }
    benchmark::Shutdown();
  }
  Kokkos::finalize();
  MPI_Finalize();
  return 0;
}
