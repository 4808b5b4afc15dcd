// The test harness under MPI: every rank runs the same tests, and the optimizers give the same
// result on every rank from the same data (the ground the distributed issue builds on).
#include "koptim_TestData.hpp"
#include "koptim_TestTensor.hpp"

#include <koptim/koptim.hpp>

#include <gtest/gtest.h>
#include <mpi.h>

TEST(MpiHarness, RanksAgreeOnOptimizerResults) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  ASSERT_GE(size, 1);
  koptim_test::TestTensor<double> w({8, 8}, "w");
  w.set(false, [](std::int64_t i) { return koptim_test::value(11, 0, 0, i); });
  koptim::ParameterSet params;
  w.add_to(params, "w");
  koptim::CommonOptions c;
  c.lr = 0.01;
  koptim::AdamW opt(params, c);
  for (int s = 1; s <= 10; ++s) {
    w.set(true, [&](std::int64_t i) { return koptim_test::value(11, 0, s, i); });
    opt.step();
  }
  auto mine                = w.get();
  std::vector<double> root = mine;
  MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_DOUBLE, 0, MPI_COMM_WORLD);
  EXPECT_EQ(mine, root) << "rank " << rank;
  int sum = 0, one = 1;
  MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(sum, size);
}
