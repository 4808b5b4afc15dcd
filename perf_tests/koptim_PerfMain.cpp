// The main of koptim's Google Benchmark programs: MPI and Kokkos around the benchmarks, and the
// Kokkos configuration recorded in the JSON context so a result says what it was measured on.
// Under mpiexec every rank runs the same benchmarks (they must use fixed iteration counts where
// they communicate); only rank 0 reports and writes --benchmark_out.
#include <koptim/koptim.hpp>

#include <benchmark/benchmark.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {
// The names Kokkos 3 read without the --kokkos- prefix (and left in argv), and Kokkos 4 reads in
// part: refused, pointing at the prefixed forms (which Kokkos removes from argv when it knows
// them, so that one it does not know is refused as unrecognized too).
bool kokkos_unprefixed(const std::string& a) {
  for (const char* name : {"--disable-warnings", "--tune-internals", "--threads", "--num-threads", "--numa", "--device",
                           "--device-id", "--ndevices", "--num-devices", "--map-device-id-by", "--tools-library",
                           "--tools-libs", "--tools-args", "--tools-help", "--print-configuration"}) {
    const std::size_t k = std::strlen(name);
    if (a.compare(0, k, name) == 0 && (a.size() == k || a[k] == '=')) return true;
  }
  return false;
}

// Google Benchmark reads a boolean flag's value as true unless it is 0, f, false, n, no or off
// (--benchmark_list_tests=fasle listed the benchmarks), and the last of a flag given twice: both
// refused here. An empty string when the arguments are fine.
std::string refused_benchmark_flags(const std::vector<char*>& args) {
  std::vector<std::string> seen;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string a = args[i];
    if (a.rfind("--benchmark_", 0) != 0) continue;
    const std::string name = a.substr(0, a.find('='));
    if (std::find(seen.begin(), seen.end(), name) != seen.end()) return name + " is given twice; give it once";
    seen.push_back(name);
    for (const char* flag :
         {"--benchmark_list_tests", "--benchmark_report_aggregates_only", "--benchmark_display_aggregates_only",
          "--benchmark_counters_tabular", "--benchmark_enable_random_interleaving", "--benchmark_dry_run"}) {
      if (name != flag || a.size() == name.size()) continue;
      const std::string v = a.substr(name.size() + 1);
      if (v != "true" && v != "false" && v != "1" && v != "0") return a + ": a boolean flag takes true, false, 1 or 0";
    }
  }
  return {};
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
    int refused = 0;
    for (std::size_t i = 1; i < args.size(); ++i) {
      if (!kokkos_unprefixed(args[i])) continue;
      if (rank == 0)
        std::fprintf(stderr,
                     "%s: %s: give Kokkos' options with their --kokkos- prefix, as this Kokkos names them "
                     "(--kokkos-help lists them; it removes the ones it reads)\n",
                     argv[0], args[i]);
      refused = 1;
    }
    const std::string flags = refused_benchmark_flags(args);
    if (!flags.empty()) {
      if (rank == 0) std::fprintf(stderr, "%s: %s\n", argv[0], flags.c_str());
      refused = 1;
    }
    if (refused) {  // the same on every rank: every rank has the same arguments
      Kokkos::finalize();
      MPI_Finalize();
      return 2;
    }
    if (rank != 0) args.erase(std::remove_if(args.begin() + 1, args.end(), output_option), args.end());
    int n = static_cast<int>(args.size());
    benchmark::Initialize(&n, args.data());
    // An argument neither Kokkos nor Google Benchmark took (a misspelt --benchmark_filtr would
    // otherwise run every benchmark without a word): the library prints it, and every rank stops
    // (agreed: ranks that went on would wait for the others in their benchmarks' collectives).
    // Kokkos 3 and 4 take --help unprefixed (and print their options before Google Benchmark's).
    std::vector<char*> left(args.begin(), args.begin() + n);
    left.erase(
        std::remove_if(left.begin() + 1, left.end(), [](const char* a) { return std::strcmp(a, "--help") == 0; }),
        left.end());
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
