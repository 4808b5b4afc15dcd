// The main of every koptim test program: MPI first, then Kokkos; floating-point invalid
// operations trap (a NaN produced anywhere fails loudly), unless KOPTIM_TEST_NO_FPE_TRAP=1 (a
// first run on a new device, where a NaN from a kernel should fail its test rather than stop the
// whole program at the test's first comparison); only rank 0 prints; a test that fails on any
// rank fails the program on every rank.
#include <koptim/core/koptim_Kokkos.hpp>

#include <gtest/gtest.h>
#include <mpi.h>

#include <cfenv>
#include <cstdlib>
#include <string>

namespace {

// Removes gtest's printer on ranks other than 0.
void silence_other_ranks(int rank) {
  if (rank == 0) return;
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  delete listeners.Release(listeners.default_result_printer());
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  Kokkos::initialize(argc, argv);
  int result = 0;
  {
    ::testing::InitGoogleTest(&argc, argv);
    silence_other_ranks(rank);
#if defined(__GLIBC__) && (defined(__x86_64__) || defined(__aarch64__))
    const char* no_trap = std::getenv("KOPTIM_TEST_NO_FPE_TRAP");
    if (no_trap == nullptr || std::string(no_trap) != "1") feenableexcept(FE_INVALID);
#endif
    result = RUN_ALL_TESTS();
#if defined(__GLIBC__) && (defined(__x86_64__) || defined(__aarch64__))
    fedisableexcept(FE_INVALID);
#endif
  }
  Kokkos::finalize();
  int any_failed = 0;
  MPI_Allreduce(&result, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any_failed != 0 && result == 0) {
    std::fprintf(stderr, "rank %d: a test failed on another rank\n", rank);
  }
  MPI_Finalize();
  return any_failed != 0 ? 1 : 0;
}
