// The NCCL backend of the data plane: GPU ranks exchange device memory directly over NVLink /
// InfiniBand, on the stream of the caller's CUDA instance. The control plane stays on MPI
// (the base class); MPI also carries the ncclUniqueId from rank 0 to the others.
//
// Compiled into koptim only when CMake finds NCCL and Kokkos has CUDA. A build without a CUDA
// Kokkos compiles this file only as a check (the test koptim_nccl_compile); then the default
// stream is used and the Views must hold device pointers (the test wraps cudaMalloc'ed memory).
#include "koptim_TypedCommunicator.hpp"
#include <koptim/core/impl/koptim_Profiling.hpp>

#include <cuda_runtime.h>
#include <nccl.h>

#include <sstream>
#include <vector>
#include <type_traits>

namespace koptim {
namespace comm {
namespace {

void check_nccl(ncclResult_t rc, const char* what) {
  if (rc == ncclSuccess) return;
  throw Error(std::string("koptim: ") + what + " failed: " + ncclGetErrorString(rc));
}

void check_cuda(cudaError_t rc, const char* what) {
  if (rc == cudaSuccess) return;
  throw Error(std::string("koptim: ") + what + " failed: " + cudaGetErrorString(rc));
}

// With a CUDA Kokkos, NCCL's collectives go on the stream of the caller's instance, in order with
// its kernels: nothing waits. With another Kokkos (the test's cudaMalloc'ed memory) they go on the
// legacy default stream, which is synchronised after each collective.
#ifdef KOKKOS_ENABLE_CUDA
constexpr bool stream_ordered = std::is_same<ExecutionSpace, Kokkos::Cuda>::value;
#else
constexpr bool stream_ordered = false;
#endif

cudaStream_t stream_of([[maybe_unused]] const ExecutionSpace& exec) {
#ifdef KOKKOS_ENABLE_CUDA
  if constexpr (stream_ordered) return exec.cuda_stream();
#endif
  return cudaStream_t{};  // the legacy default stream
}

void after_collective(cudaStream_t stream) {
  if (!stream_ordered) check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

template <class T>
ncclDataType_t nccl_type();
template <>
ncclDataType_t nccl_type<float>() {
  return ncclFloat32;
}
template <>
ncclDataType_t nccl_type<double>() {
  return ncclFloat64;
}

// Owns an ncclComm_t.
class NcclComm {
 public:
  NcclComm() = default;
  ~NcclComm() {
    if (comm_ != nullptr) ncclCommDestroy(comm_);
  }
  NcclComm(const NcclComm&)            = delete;
  NcclComm& operator=(const NcclComm&) = delete;
  ncclComm_t* out() { return &comm_; }
  ncclComm_t get() const { return comm_; }

 private:
  ncclComm_t comm_ = nullptr;
};

class NcclCommunicator final : public koptim::Impl::TypedCommunicator<NcclCommunicator> {
  friend class koptim::Impl::TypedCommunicator<NcclCommunicator>;

 public:
  explicit NcclCommunicator(MPI_Comm dup) : TypedCommunicator(dup, Backend::nccl) {
    // Rank 0 makes the id; a failure there must reach every rank before anyone blocks in
    // ncclCommInitRank, so the id travels with an error message (empty when fine).
    ncclUniqueId id{};
    std::string error;
    if (rank() == 0) {
      const ncclResult_t rc = ncclGetUniqueId(&id);
      if (rc != ncclSuccess) error = std::string("ncclGetUniqueId failed: ") + ncclGetErrorString(rc);
    }
    MPI_Bcast(&id, static_cast<int>(sizeof id), MPI_BYTE, 0, mpi_comm());
    agree_on_error(error);
    // NCCL uses the current CUDA device: the one Kokkos selected for this rank.
    const ncclResult_t rc = ncclCommInitRank(comm_.out(), size(), id, rank());
    agree_on_error(rc == ncclSuccess ? std::string()
                                     : std::string("ncclCommInitRank failed: ") + ncclGetErrorString(rc));
  }

 private:
  // Arguments checked and agreed (TypedCommunicator::checked_reduce); NCCL runs on exec's stream.
  template <class T>
  void reduce(const ExecutionSpace& exec, const Kokkos::View<T*, MemorySpace>& data) const {
    const cudaStream_t stream = stream_of(exec);
    check_nccl(ncclAllReduce(data.data(), data.data(), data.extent(0), nccl_type<T>(), ncclSum, comm_.get(), stream),
               "ncclAllReduce");
    after_collective(stream);
  }

  // Arguments checked and agreed, count > 0 (TypedCommunicator::checked_gather); NCCL runs on
  // exec's stream.
  template <class T>
  void gather(const ExecutionSpace& exec, const Kokkos::View<const T*, MemorySpace>& send,
              const Kokkos::View<T*, MemorySpace>& recv) const {
    const std::size_t count   = send.extent(0);
    const cudaStream_t stream = stream_of(exec);
    // NCCL's in-place all-gather is exactly send == recv + rank * count, as here. Bytes for bf16:
    // a gather only copies, and ncclUint8 exists in every NCCL version.
    const std::size_t bytes = count * sizeof(T);
    check_nccl(ncclAllGather(send.data(), recv.data(), bytes, ncclUint8, comm_.get(), stream), "ncclAllGather");
    after_collective(stream);
  }

  // Blocks of different sizes: NCCL has no all-gather of unequal blocks, so each rank broadcasts
  // its own, all in one group (one launch; in place on the other ranks, from send on the root).
  template <class T>
  void gather(const ExecutionSpace& exec, const Kokkos::View<const T*, MemorySpace>& send,
              const Kokkos::View<T*, MemorySpace>& recv, const std::vector<std::size_t>& counts) const {
    const cudaStream_t stream = stream_of(exec);
    ncclResult_t first_error  = ncclSuccess;
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    std::size_t at = 0;
    for (int r = 0; r < size(); ++r) {
      const std::size_t count = counts[static_cast<std::size_t>(r)];
      if (count == 0) continue;
      T* const block   = recv.data() + at;
      const void* from = r == rank() ? static_cast<const void*>(send.data()) : static_cast<const void*>(block);
      const auto rc    = ncclBroadcast(from, block, count * sizeof(T), ncclUint8, r, comm_.get(), stream);
      if (first_error == ncclSuccess) first_error = rc;
      at += count;
    }
    // The group is closed whatever happened inside it.
    const ncclResult_t end = ncclGroupEnd();
    check_nccl(first_error, "ncclBroadcast");
    check_nccl(end, "ncclGroupEnd");
    after_collective(stream);
  }

  NcclComm comm_;
};

}  // namespace
}  // namespace comm

namespace Impl {

std::shared_ptr<comm::Communicator> make_nccl_communicator(MPI_Comm dup) {
  ScopedRegion region("koptim::comm::Communicator::create(nccl)");
  return std::make_shared<comm::NcclCommunicator>(dup);
}

}  // namespace Impl
}  // namespace koptim
