// The data-plane overrides every communicator backend writes the same way: each typed virtual
// forwards to the backend's templates reduce<T>(data) and gather<T>(send, recv).
#ifndef KOPTIM_COMM_IMPL_TYPEDCOMMUNICATOR_HPP
#define KOPTIM_COMM_IMPL_TYPEDCOMMUNICATOR_HPP

#include <koptim/comm/koptim_Communicator.hpp>

namespace koptim {
namespace Impl {

template <class Backend>
class TypedCommunicator : public comm::Communicator {
 protected:
  TypedCommunicator(MPI_Comm dup, comm::Backend backend) : comm::Communicator(dup, backend) {}

 public:
  void all_reduce_sum(const Kokkos::View<float*, MemorySpace>& data) const override { self().reduce(data); }
  void all_reduce_sum(const Kokkos::View<double*, MemorySpace>& data) const override { self().reduce(data); }
  void all_gather(const Kokkos::View<const float*, MemorySpace>& send,
                  const Kokkos::View<float*, MemorySpace>& recv) const override {
    self().gather(send, recv);
  }
  void all_gather(const Kokkos::View<const double*, MemorySpace>& send,
                  const Kokkos::View<double*, MemorySpace>& recv) const override {
    self().gather(send, recv);
  }
  void all_gather(const Kokkos::View<const std::uint16_t*, MemorySpace>& send,
                  const Kokkos::View<std::uint16_t*, MemorySpace>& recv) const override {
    self().gather(send, recv);
  }

 private:
  const Backend& self() const { return static_cast<const Backend&>(*this); }
};

}  // namespace Impl
}  // namespace koptim

#endif
