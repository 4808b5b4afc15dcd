// koptim's one plan for spreading work over ranks and sharing the results, used by the sharded
// element-wise optimizers, Gefen and Shampoo:
//
//   pieces with costs -> owner ranks (assign_blocks, or the caller's own rule)
//   -> each rank's pieces packed, in order, into its segment of one buffer
//   -> one all-gather of the segments (of unequal sizes) -> every piece readable at its position.
//
// The plan is built once, with its buffers: an exchange allocates nothing. Rank r's segment
// holds exactly its pieces and follows the segments of ranks 0 .. r-1 in the gathered buffer (an
// all-gather of unequal blocks, in place), so a rank writes its pieces straight into the buffer
// the others read, and the buffer is the pieces' total however unequal the ranks' shares. One
// rank, or no communicator, is the same path with nothing to send; with the bfloat16 wire the
// values are rounded through bf16 there too, so one rank gives what N ranks give.
#ifndef KOPTIM_SRC_COMM_DISTRIBUTOR_HPP
#define KOPTIM_SRC_COMM_DISTRIBUTOR_HPP

#include <koptim/comm/koptim_Communicator.hpp>
#include <koptim/core/impl/koptim_Elementwise.hpp>
#include <koptim/core/koptim_ParameterSet.hpp>
#include <koptim/core/koptim_Tensor.hpp>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace koptim {
namespace Impl {

// Longest-processing-time assignment: pieces in order of decreasing cost (stable for ties), each
// to the rank with the least total so far (the lowest such rank on a tie). The same on every rank
// for the same costs. ConfigError for num_ranks < 1.
std::vector<int> assign_blocks(const std::vector<double>& costs, int num_ranks);

// Runs f; with a communicator of more than one rank every rank then throws the lowest failing
// rank's exception (its koptim type kept, "rank R: " before its message) or none does, so that no
// rank is left waiting in a later collective. Without one, f's exception propagates unchanged.
template <class F>
void run_together(const comm::Communicator* comm, F&& f) {
  if (comm == nullptr || comm->size() == 1) {
    f();
    return;
  }
  std::exception_ptr error;
  try {
    f();
  } catch (...) {
    error = std::current_exception();
  }
  comm->agree_on_exception(error);
}

// A step's refusal of its gradients, as the ranks agree on it: kind 0 none; 's' the step is
// skipped; 'n' a NonFiniteError (with its message); 'x' another error (message only). The
// parameter is the refused one's name (which holds no NUL byte).
struct Refusal {
  char kind = 0;
  std::string parameter;
  std::string message;
  int rank = -1;  // the refusing rank (agreed refusals only)
};
// Every rank gets the lowest refusing rank's refusal (kind 0 when no rank refused): one host
// collective.
Refusal agree_on_refusal(const comm::Communicator& comm, const Refusal& mine);

// The precision of the all-gather: the values' own, or bfloat16 (half the bytes, rounded).
enum class Wire { native, bfloat16 };

template <class T>
class Distributor {
 public:
  using Buffer = Kokkos::View<T*, MemorySpace>;

  Distributor() = default;
  // One entry per piece: its element count and its owner in [0, num_ranks). Rank r's pieces lie
  // in its segment in the order given; the segment holds rank r's total, after the segments of
  // the ranks before it. label names the buffers for Kokkos Tools.
  Distributor(const std::string& label, const std::vector<std::int64_t>& sizes, const std::vector<int>& owners,
              int rank, int num_ranks, Wire wire = Wire::native);

  std::size_t num_pieces() const { return sizes_.size(); }
  std::int64_t size(std::size_t piece) const { return sizes_[piece]; }
  int owner(std::size_t piece) const { return owners_[piece]; }
  bool mine(std::size_t piece) const { return owners_[piece] == rank_; }
  // Where the piece starts in gathered().
  std::int64_t position(std::size_t piece) const { return positions_[piece]; }
  // Rank r's segment: its first element in gathered() and its size (the total of its pieces).
  std::int64_t segment_start(int r) const { return static_cast<std::int64_t>(starts_[static_cast<std::size_t>(r)]); }
  std::int64_t segment_size(int r) const { return static_cast<std::int64_t>(counts_[static_cast<std::size_t>(r)]); }

  // The piece's elements in the gathered buffer: this rank writes its own pieces there before
  // exchange(), and reads every piece there after it.
  Buffer piece(std::size_t p) const {
    return Kokkos::subview(gathered_, std::make_pair(positions_[p], positions_[p] + sizes_[p]));
  }
  Buffer gathered() const { return gathered_; }

  // Every rank's segment to every rank (comm null: this process is every rank), on exec.
  // Collective over comm; allocates nothing.
  void exchange(const ExecutionSpace& exec, const comm::Communicator* comm) const;

  // Bytes of the gathered segments per exchange (every rank's, its own included: the pieces'
  // total), in the wire precision.
  std::size_t exchange_bytes() const {
    return gathered_.extent(0) * (wire_ == Wire::bfloat16 ? sizeof(std::uint16_t) : sizeof(T));
  }
  // Bytes of the buffers this plan holds.
  std::size_t buffer_bytes() const {
    return gathered_.span() * sizeof(T) + wire_buffer_.span() * sizeof(std::uint16_t);
  }

 private:
  std::vector<std::int64_t> sizes_, positions_;
  std::vector<int> owners_;
  std::vector<std::size_t> counts_, starts_;  // each rank's segment: size, first element
  int rank_ = 0, num_ranks_ = 1;
  Wire wire_ = Wire::native;
  Buffer gathered_;
  Kokkos::View<std::uint16_t*, MemorySpace> wire_buffer_;  // the bf16 image of gathered_
};

// Parts of the parameters of scalar type T, each updated by one rank (its owner): after the
// owners have written the new values of their parts into the parameters, share() gives every rank
// every part's new values. The sharded element-wise optimizers cut the concatenated parameters into
// one slice per rank; Gefen gives each rank whole tensors.
struct ParameterPart {
  int param;                  // index in the ParameterSet
  std::int64_t offset, size;  // elements [offset, offset + size) of its flat view
  int owner;
};

template <class T>
class ParameterSharing {
 public:
  using Part         = ParameterPart;
  ParameterSharing() = default;
  ParameterSharing(const std::string& label, std::vector<Part> parts, int rank, int num_ranks);

  const std::vector<Part>& parts() const { return parts_; }
  bool mine(std::size_t k) const { return plan_.mine(k); }
  std::size_t buffer_bytes() const { return plan_.buffer_bytes(); }
  // Collective over comm (null: nothing to share). The parts go into and come out of the
  // gathered buffer in one kernel each (tables of their pointers, built by prepare(), or at the
  // first call: the parameters of a ParameterSet do not move), on exec.
  void share(const ExecutionSpace& exec, const ParameterSet& ps, const comm::Communicator* comm) const;
  // Builds those tables now (their allocations), for an owner that agrees on its allocations
  // across ranks in its constructor: a rank failing there fails every rank, where at the first
  // share() it would have left the others in the all-gather.
  void prepare(const ParameterSet& ps) const;

 private:
  std::vector<Part> parts_;
  Distributor<T> plan_;
  struct Copies {
    PieceTable<T> pack, unpack;  // w: destination, g: source
    std::int64_t pack_chunks = 0, unpack_chunks = 0;
  };
  mutable std::shared_ptr<const Copies> copies_;
};

extern template class Distributor<float>;
extern template class Distributor<double>;
extern template class ParameterSharing<float>;
extern template class ParameterSharing<double>;

}  // namespace Impl
}  // namespace koptim

#endif
