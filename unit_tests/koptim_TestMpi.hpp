// The communicator the MPI tests share: MPI_COMM_WORLD, duplicated once per test program.
#ifndef KOPTIM_TEST_MPI_HPP
#define KOPTIM_TEST_MPI_HPP

#include <koptim/comm/koptim_Communicator.hpp>

#include <mpi.h>

#include <memory>

namespace koptim_test {

inline std::shared_ptr<koptim::comm::Communicator> world() {
  static auto c = koptim::comm::Communicator::create(MPI_COMM_WORLD);
  return c;
}

}  // namespace koptim_test

#endif
