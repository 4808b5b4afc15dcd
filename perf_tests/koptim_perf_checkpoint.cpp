// Checkpoint throughput: save and load of the Shampoo state (grafting Adam, roots computed) and
// the parameters of the 4-layer MLP of width 1024 (float32), beside a plain fwrite + fsync (and a
// plain fread) of the same number of bytes on the same disk. Run under mpiexec with 1 and 2
// ranks (Shampoo's blocks spread over them; each rank's plain write is its share of the bytes, to
// a file of its own). Fixed iteration counts keep the ranks' collectives matched; times are the
// slowest rank's (manual time), MB/s counts every byte of the file's payload once.
//
//   KOPTIM_PERF_DIR=/some/disk mpiexec -n 1 ./koptim_perf_checkpoint --benchmark_format=json
//   KOPTIM_PERF_DIR=/some/disk mpiexec -n 2 --oversubscribe ./koptim_perf_checkpoint
// (KOPTIM_PERF_DIR defaults to the current directory; the files are removed at the end, so
// --benchmark_repetitions=5 works;
// KOPTIM_PERF_WIDTH=64 makes the ctest smoke run small.)
#include "koptim_PerfModels.hpp"

#include <koptim/koptim.hpp>

#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace {

std::shared_ptr<koptim::comm::Communicator> world() {
  static auto c = koptim::comm::Communicator::create(MPI_COMM_WORLD);
  return c;
}

std::string dir() {
  const char* d = std::getenv("KOPTIM_PERF_DIR");
  return d && *d ? d : ".";
}

// The MLP's width: KOPTIM_PERF_WIDTH, a whole positive decimal number (default 1024); anything
// else stops the program naming it.
int width() {
  const char* w = std::getenv("KOPTIM_PERF_WIDTH");
  if (!w || !*w) return 1024;
  char* end    = nullptr;
  errno        = 0;
  const long v = std::strtol(w, &end, 10);
  if (*end != '\0' || errno == ERANGE || v < 1 || v > (1L << 20) || !std::isdigit(static_cast<unsigned char>(*w))) {
    std::fprintf(stderr, "KOPTIM_PERF_WIDTH = '%s' is not a width: give a whole number from 1 to 1048576\n", w);
    std::exit(2);
  }
  return static_cast<int>(v);
}

// The optimizer of the benchmark, after enough steps that every buffer holds real values.

struct Setup {
  koptim_perf::Mlp mlp{width()};
  std::unique_ptr<koptim::Optimizer> opt;
  std::int64_t payload = 0;  // bytes of parameters and state over all ranks
  Setup() {
    Teuchos::ParameterList list;
    list.set("optimizer", std::string("Shampoo"));
    list.set("grafting", std::string("Adam"));
    list.set("epsilon", 1e-8);
    list.set("precondition_frequency", 2);
    list.set("start_preconditioning_step", 2);
    opt = koptim::create(mlp.params, list, world());
    for (int s = 0; s < 2; ++s) opt->step();
    payload = world()->sum(static_cast<long long>(opt->state_bytes())) +
              static_cast<std::int64_t>(4 * mlp.params.num_elements());
  }
  // The files stay for every repetition (--benchmark_repetitions) and go with the setup.
  ~Setup() {
    MPI_Barrier(MPI_COMM_WORLD);
    std::remove((dir() + "/koptim_perf_plain_" + std::to_string(world()->rank()) + ".bin").c_str());
    if (world()->rank() == 0) std::remove((dir() + "/koptim_perf_checkpoint.h5").c_str());
    if (world()->rank() == 0) std::remove((dir() + "/koptim_perf_plain_shared.bin").c_str());
  }
};
// Built once, by the first benchmark that runs; freed before Kokkos is finalized.
Setup& setup() {
  static std::unique_ptr<Setup> s;
  if (!s) {
    s = std::make_unique<Setup>();
    Kokkos::push_finalize_hook([] { s.reset(); });
  }
  return *s;
}

// Seconds of the slowest rank.
double slowest(double seconds) {
  double m = 0;
  MPI_Allreduce(&seconds, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return m;
}

template <class F>
void timed(benchmark::State& state, std::int64_t bytes, F&& f) {
  for (auto _ : state) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.SetIterationTime(slowest(s));
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * bytes);
  state.counters["ranks"]      = world()->size();
  state.counters["payload_MB"] = static_cast<double>(bytes) / 1e6;
}

void BM_PlainWriteFsync(benchmark::State& state) {
  auto& s                 = setup();
  const std::int64_t mine = s.payload / world()->size();
  std::vector<char> bytes(static_cast<std::size_t>(mine), 1);
  const std::string path = dir() + "/koptim_perf_plain_" + std::to_string(world()->rank()) + ".bin";
  timed(state, s.payload, [&] {
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() || std::fflush(f) != 0 ||
        ::fsync(fileno(f)) != 0)
      state.SkipWithError("plain write failed");
    if (f) std::fclose(f);
  });
}

// The same bytes into ONE shared file through MPI-IO (each rank writes its half at its offset in
// one collective call, then MPI_File_sync): the floor of any single-file format on this disk.
void BM_PlainSharedFileMpiIo(benchmark::State& state) {
  auto& s                 = setup();
  const std::int64_t mine = s.payload / world()->size();
  std::vector<char> bytes(static_cast<std::size_t>(mine), 1);
  const std::string path = dir() + "/koptim_perf_plain_shared.bin";
  timed(state, s.payload, [&] {
    MPI_File f;
    bool good = MPI_File_open(MPI_COMM_WORLD, path.c_str(), MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &f) ==
                MPI_SUCCESS;
    if (good) {
      // In pieces of at most 1 GiB (MPI's int counts).
      for (std::int64_t done = 0; done < mine;) {
        const int n = static_cast<int>(std::min<std::int64_t>(mine - done, std::int64_t{1} << 30));
        good        = good && MPI_File_write_at_all(f, world()->rank() * mine + done, bytes.data() + done, n, MPI_BYTE,
                                                    MPI_STATUS_IGNORE) == MPI_SUCCESS;
        done += n;
      }
      good = MPI_File_sync(f) == MPI_SUCCESS && good;
      MPI_File_close(&f);
    }
    if (!good) state.SkipWithError("shared MPI-IO write failed");
  });
}

void BM_PlainRead(benchmark::State& state) {
  auto& s                 = setup();
  const std::int64_t mine = s.payload / world()->size();
  std::vector<char> bytes(static_cast<std::size_t>(mine));
  const std::string path = dir() + "/koptim_perf_plain_" + std::to_string(world()->rank()) + ".bin";
  timed(state, s.payload, [&] {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f || std::fread(bytes.data(), 1, bytes.size(), f) != bytes.size()) state.SkipWithError("plain read failed");
    if (f) std::fclose(f);
  });
}

// The in-memory part of a save: the optimizer's state copied to host buffers.
void BM_ExportState(benchmark::State& state) {
  auto& s = setup();
  timed(state, s.payload, [&] { benchmark::DoNotOptimize(s.opt->export_state()); });
}

void BM_SaveCheckpoint(benchmark::State& state) {
  auto& s = setup();
  timed(state, s.payload, [&] { koptim::io::save_checkpoint(dir() + "/koptim_perf_checkpoint.h5", *s.opt); });
}

void BM_LoadCheckpoint(benchmark::State& state) {
  auto& s = setup();
  timed(state, s.payload, [&] { koptim::io::load_checkpoint(dir() + "/koptim_perf_checkpoint.h5", *s.opt); });
}

BENCHMARK(BM_PlainWriteFsync)->Iterations(3)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PlainSharedFileMpiIo)->Iterations(3)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PlainRead)->Iterations(3)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ExportState)->Iterations(3)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SaveCheckpoint)->Iterations(3)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LoadCheckpoint)->Iterations(3)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace
