// koptim's communication layer: one interface over MPI (host memory, or device memory when MPI
// is CUDA-aware) and NCCL (GPU ranks). A Communicator owns a duplicate of the user's MPI
// communicator, so koptim's messages never mix with the application's and any sub-communicator
// works. Two planes:
//   - the data plane (all_reduce_sum, all_gather) moves contiguous Views in koptim::MemorySpace
//     through the chosen backend;
//   - the host control plane (max, min, sum, same_on_all_ranks, agree_on_error, split_groups)
//     always uses MPI on mpi_comm().
// Every call is collective: every rank of the communicator makes it, in the same order. Bad
// arguments on some ranks are an error on every rank (with the same message), never a hang.
//
//   auto comm = koptim::comm::Communicator::create(MPI_COMM_WORLD);
//   comm->all_reduce_sum(grad);                       // grad is a View<float*, MemorySpace>
//   comm->agree_on_error(ok ? "" : "checkpoint missing");
#ifndef KOPTIM_COMM_COMMUNICATOR_HPP
#define KOPTIM_COMM_COMMUNICATOR_HPP

#include <koptim/core/koptim_Error.hpp>
#include <koptim/core/koptim_Tensor.hpp>

#include <mpi.h>

#include <array>
#include <cstddef>
#include <exception>
#include <functional>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace koptim {
namespace comm {

enum class Backend { mpi, nccl };
const char* to_string(Backend);

class Communicator {
 public:
  virtual ~Communicator();
  Communicator(const Communicator&)            = delete;
  Communicator& operator=(const Communicator&) = delete;

  // Duplicates comm (MPI_Comm_dup, freed in the destructor). Collective over comm.
  // Backend::nccl throws koptim::ConfigError when koptim was built without NCCL.
  static std::shared_ptr<Communicator> create(MPI_Comm comm, Backend backend = Backend::mpi);

  int rank() const { return rank_; }
  int size() const { return size_; }
  Backend backend() const { return backend_; }
  // The duplicated communicator; the host control plane always uses it.
  MPI_Comm mpi_comm() const { return comm_.get(); }

  // --- data plane: contiguous Views in koptim::MemorySpace -----------------------------------
  // Each call first agrees on its arguments across ranks (one all-reduce of three integers), so
  // a wrong extent or a count that differs between ranks throws ShapeError on every rank.
  // Each takes the execution-space instance its data is ordered on (first argument; the default
  // instance without one): the collective comes after the work queued on exec, and the work queued
  // on exec after it sees its result. MPI waits for exec, then moves the data before it returns;
  // NCCL with a CUDA Kokkos queues the collective on exec's stream and returns at once (read the
  // result on the host only after exec.fence()).
  // In place, sum over ranks.
  virtual void all_reduce_sum(const ExecutionSpace& exec, const Kokkos::View<float*, MemorySpace>& data) const  = 0;
  virtual void all_reduce_sum(const ExecutionSpace& exec, const Kokkos::View<double*, MemorySpace>& data) const = 0;
  // Every rank sends send.extent(0) elements (the same count on every rank); recv has
  // size() * count elements, rank r's block at r * count. send may be rank()'s block of recv
  // (in place); any other overlap is an error.
  virtual void all_gather(const ExecutionSpace& exec, const Kokkos::View<const float*, MemorySpace>& send,
                          const Kokkos::View<float*, MemorySpace>& recv) const  = 0;
  virtual void all_gather(const ExecutionSpace& exec, const Kokkos::View<const double*, MemorySpace>& send,
                          const Kokkos::View<double*, MemorySpace>& recv) const = 0;
  // bf16 payloads (see koptim_BF16.hpp).
  virtual void all_gather(const ExecutionSpace& exec, const Kokkos::View<const std::uint16_t*, MemorySpace>& send,
                          const Kokkos::View<std::uint16_t*, MemorySpace>& recv) const = 0;
  // Blocks of different sizes (MPI's allgatherv): rank r sends counts[r] elements
  // (send.extent(0) == counts[rank()]); recv has the sum of the counts, rank r's block right after
  // those of ranks 0 .. r-1. counts has size() entries and is the same on every rank (checked: a
  // rank with other counts throws ShapeError on every rank). send may be rank()'s block of recv
  // (in place); any other overlap is an error. No padding travels: a rank with a large block costs
  // the others that block once, not once per rank.
  virtual void all_gather(const ExecutionSpace& exec, const Kokkos::View<const float*, MemorySpace>& send,
                          const Kokkos::View<float*, MemorySpace>& recv,
                          const std::vector<std::size_t>& counts) const = 0;
  virtual void all_gather(const ExecutionSpace& exec, const Kokkos::View<const double*, MemorySpace>& send,
                          const Kokkos::View<double*, MemorySpace>& recv,
                          const std::vector<std::size_t>& counts) const = 0;
  virtual void all_gather(const ExecutionSpace& exec, const Kokkos::View<const std::uint16_t*, MemorySpace>& send,
                          const Kokkos::View<std::uint16_t*, MemorySpace>& recv,
                          const std::vector<std::size_t>& counts) const = 0;
  // The same on the default instance.
  void all_reduce_sum(const Kokkos::View<float*, MemorySpace>& data) const { all_reduce_sum(ExecutionSpace(), data); }
  void all_reduce_sum(const Kokkos::View<double*, MemorySpace>& data) const { all_reduce_sum(ExecutionSpace(), data); }
  void all_gather(const Kokkos::View<const float*, MemorySpace>& send,
                  const Kokkos::View<float*, MemorySpace>& recv) const {
    all_gather(ExecutionSpace(), send, recv);
  }
  void all_gather(const Kokkos::View<const double*, MemorySpace>& send,
                  const Kokkos::View<double*, MemorySpace>& recv) const {
    all_gather(ExecutionSpace(), send, recv);
  }
  void all_gather(const Kokkos::View<const std::uint16_t*, MemorySpace>& send,
                  const Kokkos::View<std::uint16_t*, MemorySpace>& recv) const {
    all_gather(ExecutionSpace(), send, recv);
  }
  void all_gather(const Kokkos::View<const float*, MemorySpace>& send, const Kokkos::View<float*, MemorySpace>& recv,
                  const std::vector<std::size_t>& counts) const {
    all_gather(ExecutionSpace(), send, recv, counts);
  }
  void all_gather(const Kokkos::View<const double*, MemorySpace>& send, const Kokkos::View<double*, MemorySpace>& recv,
                  const std::vector<std::size_t>& counts) const {
    all_gather(ExecutionSpace(), send, recv, counts);
  }
  void all_gather(const Kokkos::View<const std::uint16_t*, MemorySpace>& send,
                  const Kokkos::View<std::uint16_t*, MemorySpace>& recv, const std::vector<std::size_t>& counts) const {
    all_gather(ExecutionSpace(), send, recv, counts);
  }

  // --- host control plane (MPI on mpi_comm(), whatever the backend) --------------------------
  long long max(long long v) const;
  long long min(long long v) const;
  long long sum(long long v) const;
  // True on every rank when s is the same string on every rank (SHA-256 and length compared).
  bool same_on_all_ranks(const std::string& s) const;
  // If local_error is non-empty on any rank, every rank throws koptim::Error with the message
  // "koptim: rank R: <message of rank R>" for the lowest failing rank R; otherwise returns.
  void agree_on_error(const std::string& local_error) const;
  // The lowest rank R whose local_error is non-empty and R's message, on every rank; {-1, ""}
  // when no rank has one (one collective then). For a refusal every rank acts on alike without
  // throwing (a step skipped on every rank).
  std::pair<int, std::string> first_error(const std::string& local_error) const;
  // The same for an exception caught on this rank (null: none): every rank throws the lowest
  // failing rank's exception as the same koptim type (ConfigError, ShapeError, NonFiniteError,
  // StateError; anything else as Error), its message prefixed with "rank R: " when size() > 1.
  void agree_on_exception(std::exception_ptr local) const;
  // Consecutive ranks [g*n, (g+1)*n) form group g (n = group_size). Returns (the communicator of
  // my group, size n; the communicator of the ranks at my position in every group, size
  // size()/n). Both have this communicator's backend. ConfigError on every rank when n < 1,
  // size() % n != 0, or the ranks pass different values.
  std::pair<std::shared_ptr<Communicator>, std::shared_ptr<Communicator>> split_groups(int group_size) const;

  // Whether the MPI data plane hands device pointers straight to MPI (CUDA-aware MPI detected
  // with MPIX_Query_cuda_support) instead of staging through host mirrors. Always false for
  // host memory spaces, where no staging is needed.
  bool mpi_is_cuda_aware() const { return cuda_aware_; }

 protected:
  // Owns an MPI communicator; frees it unless MPI is already finalized.
  class CommHandle {
   public:
    explicit CommHandle(MPI_Comm c = MPI_COMM_NULL) : comm_(c) {}
    ~CommHandle();
    CommHandle(const CommHandle&)            = delete;
    CommHandle& operator=(const CommHandle&) = delete;
    MPI_Comm get() const { return comm_; }

   private:
    MPI_Comm comm_;
  };

  // Takes ownership of dup (already duplicated).
  Communicator(MPI_Comm dup, Backend backend);

  // The argument agreement of the data plane: every rank passes its element count and its own
  // argument error (empty if none); throws ShapeError on every rank if any rank has an error or
  // the counts differ. what names the call ("all_gather").
  void agree_on_arguments(const char* what, long long count, const std::string& local_error) const;
  // The same for a call with per-rank counts: throws ShapeError on every rank if any rank has an
  // error or the counts (compared by a 62-bit hash, with their number) differ between ranks.
  void agree_on_arguments(const char* what, const std::vector<std::size_t>& counts,
                          const std::string& local_error) const;

 private:
  CommHandle comm_;
  Backend backend_;
  int rank_        = 0;
  int size_        = 1;
  bool cuda_aware_ = false;
};

}  // namespace comm

// Helpers live in koptim::Impl (not koptim::comm::Impl, which would hide koptim::Impl from code in
// koptim::comm).
namespace Impl {

// SHA-256 of bytes (FIPS 180-4); used by same_on_all_ranks.
std::array<std::uint8_t, 32> sha256(const std::string& bytes);

// The most elements one MPI call of the MPI backend moves: INT_MAX (MPI's counts are int); more
// go in pieces. Test hook: set_mpi_count_limit(n) lowers it (0: back to INT_MAX), so that the
// pieces can be tested on small buffers.
std::size_t mpi_count_limit();
void set_mpi_count_limit(std::size_t limit);
// Whether the MPI library reports CUDA-aware support at run time (false where it cannot tell).
bool mpi_reports_cuda_support();

// The NCCL backend, defined in src/comm/koptim_NcclCommunicator.cpp (compiled only when koptim
// is built with NCCL). Takes ownership of dup. Collective over dup.
std::shared_ptr<comm::Communicator> make_nccl_communicator(MPI_Comm dup);

// For ranks known to disagree on a list of entries (after a cheaper comparison): rank 0's entries
// reach every rank (length-prefixed: any bytes), each rank compares its own with them, and the
// lowest rank that differs says where, on every rank. describe(k, mine, rank0s, n_mine, n_rank0s)
// names the first entry k that differs (mine or rank0s null past the end of its list). Returns
// {that rank, its description}; {-1, ""} when every rank has rank 0's entries. Collective.
std::pair<int, std::string> first_difference_from_rank0(
    const comm::Communicator& comm, const std::vector<std::string>& entries,
    const std::function<std::string(std::size_t, const std::string*, const std::string*, std::size_t, std::size_t)>&
        describe);

// The items one after the other, each after its length: any text, and no two lists give the
// same string (for comparisons across ranks).
std::string encode_items(const std::vector<std::string>& items);
// The items separated by "; " (for messages).
std::string join_items(const std::vector<std::string>& items);

// Throws ConfigError on every rank when the ranks of comm do not describe the same optimizer
// (parameters and configuration, as summarised by the items of text): never a hang or a silent
// mismatch. The message names the lowest rank that differs from rank 0 and its first item that
// does, and shows this rank's `shown` (its items, separated by "; ", when empty).
void check_same_on_all_ranks(const comm::Communicator& comm, const std::string& optimizer,
                             const std::vector<std::string>& items, const std::string& shown = std::string());

}  // namespace Impl
}  // namespace koptim

#endif
