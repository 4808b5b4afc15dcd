// The data plane every communicator backend shares: each typed virtual checks its arguments the
// same way (contiguous Views, recv's size, send either separate from recv or exactly rank()'s
// block of it, plus the backend's own count limit), agrees on them with the other ranks, and only
// then hands the call to the backend's templates reduce<T>(exec, data), gather<T>(exec, send,
// recv) and gather<T>(exec, send, recv, counts), which order it after the kernels on exec that produced the data
// (MPI: a fence of exec; NCCL: exec's stream).
#ifndef KOPTIM_SRC_COMM_TYPEDCOMMUNICATOR_HPP
#define KOPTIM_SRC_COMM_TYPEDCOMMUNICATOR_HPP

#include <koptim/comm/koptim_Communicator.hpp>
#include <koptim/core/impl/koptim_Instance.hpp>
#include <koptim/core/impl/koptim_Profiling.hpp>

#include <cstddef>
#include <sstream>
#include <string>
#include <vector>

namespace koptim {
namespace Impl {

template <class Backend>
class TypedCommunicator : public comm::Communicator {
 protected:
  TypedCommunicator(MPI_Comm dup, comm::Backend backend) : comm::Communicator(dup, backend) {}

  // Empty if v can go to the data plane as one contiguous buffer.
  template <class View>
  static std::string contiguity_error(const char* call, const char* arg, const View& v) {
    if (v.span_is_contiguous() && v.span() == v.size()) return {};
    std::ostringstream s;
    s << "koptim::comm::Communicator::" << call << ": " << arg << " (View '" << v.label() << "', " << v.size()
      << " elements) is not contiguous; the data plane needs contiguous Views";
    return s.str();
  }

 public:
  using comm::Communicator::all_gather;
  using comm::Communicator::all_reduce_sum;
  void all_reduce_sum(const ExecutionSpace& exec, const Kokkos::View<float*, MemorySpace>& data) const override {
    checked_reduce(exec, data);
  }
  void all_reduce_sum(const ExecutionSpace& exec, const Kokkos::View<double*, MemorySpace>& data) const override {
    checked_reduce(exec, data);
  }
  void all_gather(const ExecutionSpace& exec, const Kokkos::View<const float*, MemorySpace>& send,
                  const Kokkos::View<float*, MemorySpace>& recv) const override {
    checked_gather(exec, send, recv);
  }
  void all_gather(const ExecutionSpace& exec, const Kokkos::View<const double*, MemorySpace>& send,
                  const Kokkos::View<double*, MemorySpace>& recv) const override {
    checked_gather(exec, send, recv);
  }
  void all_gather(const ExecutionSpace& exec, const Kokkos::View<const std::uint16_t*, MemorySpace>& send,
                  const Kokkos::View<std::uint16_t*, MemorySpace>& recv) const override {
    checked_gather(exec, send, recv);
  }
  void all_gather(const ExecutionSpace& exec, const Kokkos::View<const float*, MemorySpace>& send,
                  const Kokkos::View<float*, MemorySpace>& recv,
                  const std::vector<std::size_t>& counts) const override {
    checked_gather(exec, send, recv, counts);
  }
  void all_gather(const ExecutionSpace& exec, const Kokkos::View<const double*, MemorySpace>& send,
                  const Kokkos::View<double*, MemorySpace>& recv,
                  const std::vector<std::size_t>& counts) const override {
    checked_gather(exec, send, recv, counts);
  }
  void all_gather(const ExecutionSpace& exec, const Kokkos::View<const std::uint16_t*, MemorySpace>& send,
                  const Kokkos::View<std::uint16_t*, MemorySpace>& recv,
                  const std::vector<std::size_t>& counts) const override {
    checked_gather(exec, send, recv, counts);
  }

 private:
  const Backend& self() const { return static_cast<const Backend&>(*this); }

  template <class T>
  void checked_reduce(const ExecutionSpace& exec, const Kokkos::View<T*, MemorySpace>& data) const {
    Impl::ScopedRegion region("koptim::comm::Communicator::all_reduce_sum");
    agree_on_arguments("all_reduce_sum", static_cast<long long>(data.extent(0)),
                       contiguity_error("all_reduce_sum", "data", data));
    if (data.extent(0) == 0) return;
    self().reduce(exec, data);
  }

  template <class T>
  void checked_gather(const ExecutionSpace& exec, const Kokkos::View<const T*, MemorySpace>& send,
                      const Kokkos::View<T*, MemorySpace>& recv) const {
    Impl::ScopedRegion region("koptim::comm::Communicator::all_gather");
    const std::size_t count = send.extent(0);
    const std::size_t p     = static_cast<std::size_t>(size());
    std::string err         = contiguity_error("all_gather", "send", send);
    if (err.empty()) err = contiguity_error("all_gather", "recv", recv);
    if (err.empty() && recv.extent(0) != p * count) {
      std::ostringstream s;
      s << "koptim::comm::Communicator::all_gather: recv (View '" << recv.label() << "') has " << recv.extent(0)
        << " elements; it needs size() * count = " << p << " * " << count << " = " << p * count;
      err = s.str();
    }
    const bool in_place = count > 0 && send.data() == recv.data() + static_cast<std::size_t>(rank()) * count;
    if (err.empty() && count > 0 && !in_place && send.data() < recv.data() + p * count &&
        recv.data() < send.data() + count) {
      err =
          "koptim::comm::Communicator::all_gather: send overlaps recv but is not rank()'s block of it; send must be "
          "separate memory or exactly recv's block at rank() * count";
    }
    agree_on_arguments("all_gather", static_cast<long long>(count), err);
    if (count == 0) return;
    self().gather(exec, send, recv);
  }

  // Blocks of different sizes: the same checks against counts (one per rank, rank r's block after
  // those of the ranks before it), agreed with the counts themselves.
  template <class T>
  void checked_gather(const ExecutionSpace& exec, const Kokkos::View<const T*, MemorySpace>& send,
                      const Kokkos::View<T*, MemorySpace>& recv, const std::vector<std::size_t>& counts) const {
    Impl::ScopedRegion region("koptim::comm::Communicator::all_gather");
    const std::size_t p = static_cast<std::size_t>(size()), me = static_cast<std::size_t>(rank());
    std::string err;
    std::size_t total = 0, first = 0;
    for (std::size_t r = 0; r < counts.size(); ++r) {
      if (r == me) first = total;
      total += counts[r];
    }
    std::ostringstream s;
    if (counts.size() != p) {
      s << "koptim::comm::Communicator::all_gather: counts has " << counts.size()
        << " entries; it needs one per rank, size() = " << p;
      err = s.str();
    }
    if (err.empty()) err = contiguity_error("all_gather", "send", send);
    if (err.empty()) err = contiguity_error("all_gather", "recv", recv);
    const std::size_t count = err.empty() ? counts[me] : 0;
    if (err.empty() && send.extent(0) != count) {
      s << "koptim::comm::Communicator::all_gather: send (View '" << send.label() << "') has " << send.extent(0)
        << " elements; it needs counts[rank()] = counts[" << me << "] = " << count;
      err = s.str();
    }
    if (err.empty() && recv.extent(0) != total) {
      s << "koptim::comm::Communicator::all_gather: recv (View '" << recv.label() << "') has " << recv.extent(0)
        << " elements; it needs the sum of the counts, " << total;
      err = s.str();
    }
    const bool in_place = count > 0 && send.data() == recv.data() + first;
    if (err.empty() && count > 0 && !in_place && send.data() < recv.data() + total &&
        recv.data() < send.data() + count) {
      err =
          "koptim::comm::Communicator::all_gather: send overlaps recv but is not rank()'s block of it; send must be "
          "separate memory or exactly recv's block after those of the ranks before rank()";
    }
    agree_on_arguments("all_gather", counts, err);
    if (total == 0) return;
    self().gather(exec, send, recv, counts);
  }
};

}  // namespace Impl
}  // namespace koptim

#endif
