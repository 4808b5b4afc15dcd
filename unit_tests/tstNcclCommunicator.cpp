// The NCCL backend against plain MPI on the same data. Built wherever NCCL is found; without a
// CUDA Kokkos it is the compile-and-link check of src/comm/koptim_NcclCommunicator.cpp (the test
// koptim_nccl_compile builds it) and the buffers are cudaMalloc'ed memory behind unmanaged Views.
// Without a GPU, or with fewer GPUs than ranks, every test is skipped with the reason.
#include <koptim/comm/koptim_Communicator.hpp>

#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

namespace {

using koptim::MemorySpace;
using koptim::comm::Communicator;

// Empty when the ranks can run NCCL, otherwise why not.
std::string why_no_nccl() {
  int devices          = 0;
  const cudaError_t rc = cudaGetDeviceCount(&devices);
  int size             = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::string why;
  if (rc != cudaSuccess)
    why = std::string("no usable CUDA device (") + cudaGetErrorString(rc) + ")";
  else if (devices == 0)
    why = "no CUDA device";
  else if (devices < size)
    why = "NCCL needs one GPU per rank: " + std::to_string(devices) + " GPUs for " + std::to_string(size) + " ranks";
  // Every rank skips, or none does: a half-skipped collective test would hang.
  int bad = why.empty() ? 0 : 1, any = 0;
  MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any && why.empty()) why = "another rank cannot run NCCL";
  return why;
}

#define KOPTIM_SKIP_WITHOUT_GPU()                                                                                 \
  do {                                                                                                            \
    const std::string why = why_no_nccl();                                                                        \
    if (!why.empty())                                                                                             \
      GTEST_SKIP() << "NCCL runtime test SKIPPED: " << why << " (the NCCL backend was only compiled and linked)"; \
  } while (0)

std::shared_ptr<Communicator> make_nccl() {
  int rank = 0, devices = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  cudaGetDeviceCount(&devices);
#if KOPTIM_ENABLE_NCCL
  (void)devices;  // Kokkos chose this rank's device
  return Communicator::create(MPI_COMM_WORLD, koptim::comm::Backend::nccl);
#else
  cudaSetDevice(rank % devices);
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  return koptim::Impl::make_nccl_communicator(dup);
#endif
}

// Device memory that outlives the unmanaged View over it.
template <class T>
struct DeviceBuffer {
  T* ptr = nullptr;
  std::size_t n;
  explicit DeviceBuffer(const std::vector<T>& v) : n(v.size()) {
    cudaMalloc(&ptr, sizeof(T) * (n ? n : 1));
    cudaMemcpy(ptr, v.data(), sizeof(T) * n, cudaMemcpyHostToDevice);
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  Kokkos::View<T*, MemorySpace> view() const { return Kokkos::View<T*, MemorySpace>(ptr, n); }
  std::vector<T> get() const {
    std::vector<T> v(n);
    cudaMemcpy(v.data(), ptr, sizeof(T) * n, cudaMemcpyDeviceToHost);
    return v;
  }
};

}  // namespace

TEST(NcclCommunicator, AllReduceSumMatchesMpi) {
  KOPTIM_SKIP_WITHOUT_GPU();
  auto comm = make_nccl();
  EXPECT_EQ(comm->backend(), koptim::comm::Backend::nccl);
  const std::size_t n = 100003;
  std::vector<float> mine(n), expected(n);
  for (std::size_t i = 0; i < n; ++i) mine[i] = static_cast<float>((comm->rank() * 7 + i * 3) % 29) / 16.0f;
  MPI_Allreduce(mine.data(), expected.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  DeviceBuffer<float> d(mine);
  comm->all_reduce_sum(d.view());
  EXPECT_EQ(d.get(), expected);
}

TEST(NcclCommunicator, AllGatherMatchesMpi) {
  KOPTIM_SKIP_WITHOUT_GPU();
  auto comm           = make_nccl();
  const std::size_t n = 777, p = static_cast<std::size_t>(comm->size());
  std::vector<double> mine(n), expected(n * p), zeros(n * p, 0.0);
  for (std::size_t i = 0; i < n; ++i) mine[i] = 1000.0 * comm->rank() + static_cast<double>(i);
  MPI_Allgather(mine.data(), static_cast<int>(n), MPI_DOUBLE, expected.data(), static_cast<int>(n), MPI_DOUBLE,
                MPI_COMM_WORLD);
  DeviceBuffer<double> send(mine), recv(zeros);
  comm->all_gather(send.view(), recv.view());
  EXPECT_EQ(recv.get(), expected);
  std::vector<std::uint16_t> half(n), half_expected(n * p), half_zeros(n * p, 0);
  for (std::size_t i = 0; i < n; ++i) half[i] = static_cast<std::uint16_t>(comm->rank() * 1000 + i);
  MPI_Allgather(half.data(), static_cast<int>(n), MPI_UINT16_T, half_expected.data(), static_cast<int>(n), MPI_UINT16_T,
                MPI_COMM_WORLD);
  DeviceBuffer<std::uint16_t> hsend(half), hrecv(half_zeros);
  comm->all_gather(hsend.view(), hrecv.view());
  EXPECT_EQ(hrecv.get(), half_expected);
}

// Blocks of different sizes (one rank's empty at 2 ranks and more): grouped broadcasts against
// MPI_Allgatherv, out of place and in place.
TEST(NcclCommunicator, AllGatherOfUnequalBlocksMatchesMpi) {
  KOPTIM_SKIP_WITHOUT_GPU();
  auto comm   = make_nccl();
  const int p = comm->size();
  std::vector<std::size_t> counts(p), first(p, 0);
  std::vector<int> icounts(p), idispls(p);
  for (int r = 0; r < p; ++r) {
    counts[r]  = static_cast<std::size_t>(r == 1 ? 0 : 300 * (r + 1) + 7);
    first[r]   = r == 0 ? 0 : first[r - 1] + counts[r - 1];
    icounts[r] = static_cast<int>(counts[r]), idispls[r] = static_cast<int>(first[r]);
  }
  const std::size_t n = counts[comm->rank()], total = first.back() + counts.back();
  std::vector<float> mine(n), expected(total), zeros(total, 0.0f);
  for (std::size_t i = 0; i < n; ++i) mine[i] = 1000.0f * comm->rank() + static_cast<float>(i);
  MPI_Allgatherv(mine.data(), static_cast<int>(n), MPI_FLOAT, expected.data(), icounts.data(), idispls.data(),
                 MPI_FLOAT, MPI_COMM_WORLD);
  DeviceBuffer<float> send(mine), recv(zeros);
  comm->all_gather(send.view(), recv.view(), counts);
  EXPECT_EQ(recv.get(), expected);
  DeviceBuffer<float> inplace(zeros);
  cudaMemcpy(inplace.ptr + first[comm->rank()], mine.data(), sizeof(float) * n, cudaMemcpyHostToDevice);
  const auto all = inplace.view();
  comm->all_gather(Kokkos::subview(all, std::make_pair(first[comm->rank()], first[comm->rank()] + n)), all, counts);
  EXPECT_EQ(inplace.get(), expected);
}
