// The complete state of an optimizer, exported to host memory: counters, scalars and named
// tensors ("<parameter>/<slot>", e.g. "fc1.weight/exp_avg"). import_state() of an exported
// state restores the optimizer exactly; the checkpoint layer writes it to files.
#ifndef KOPTIM_CORE_OPTIMIZERSTATE_HPP
#define KOPTIM_CORE_OPTIMIZERSTATE_HPP

#include <koptim/core/koptim_Tensor.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

namespace koptim {

struct StateTensor {
  ScalarType dtype = ScalarType::float32;
  std::vector<std::int64_t> shape;
  std::vector<unsigned char> data;  // host copy, native byte order
  // A slice of sharded state: data holds the elements [offset, offset + size()) of a tensor of
  // shape `whole` in its memory order (shape is then {size()}). Empty `whole`: not a slice.
  std::vector<std::int64_t> whole;
  std::int64_t offset = 0;

  std::int64_t size() const;
};

struct OptimizerState {
  std::string optimizer;  // the optimizer's name(): a state only imports into the same kind
  std::map<std::string, std::int64_t> integers;
  std::map<std::string, double> reals;
  std::map<std::string, StateTensor> tensors;

  bool operator==(const OptimizerState& o) const;
};

namespace Impl {

// The elements of a contiguous 1-D View as a state tensor's bytes. From memory the host can read,
// one pass (no zero-filling of the bytes first); otherwise through a host copy.
template <class T, class... P>
void copy_to_bytes(const Kokkos::View<T*, P...>& v, std::vector<unsigned char>& out) {
  using Space = typename Kokkos::View<T*, P...>::memory_space;
  if constexpr (Kokkos::SpaceAccessibility<Kokkos::HostSpace, Space>::accessible) {
    Kokkos::fence();  // the kernels that wrote v
    const auto* p = reinterpret_cast<const unsigned char*>(v.data());
    out.assign(p, p + v.size() * sizeof(T));
  } else {
    out.resize(v.size() * sizeof(T));
    Kokkos::View<std::remove_const_t<T>*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> h(
        reinterpret_cast<std::remove_const_t<T>*>(out.data()), v.size());
    Kokkos::deep_copy(h, v);
  }
}

// A flat state buffer in the default memory space, float or double as its parameter.
class Buffer {
 public:
  Buffer() = default;
  Buffer(const std::string& label, ScalarType dtype, std::int64_t n, double fill = 0.0);

  template <class T>
  Kokkos::View<T*, MemorySpace> view() const;

  ScalarType dtype() const { return dtype_; }
  std::int64_t size() const { return n_; }
  std::size_t bytes() const { return static_cast<std::size_t>(n_) * size_of(dtype_); }

  StateTensor to_state(const std::vector<std::int64_t>& shape) const;
  // Throws StateError (naming key) when t does not fit this buffer; changes nothing.
  void check(const StateTensor& t, const std::string& key) const;
  void assign(const StateTensor& t);

 private:
  ScalarType dtype_ = ScalarType::float32;
  std::int64_t n_   = 0;
  Kokkos::View<float*, MemorySpace> f_;
  Kokkos::View<double*, MemorySpace> d_;
};

template <>
inline Kokkos::View<float*, MemorySpace> Buffer::view<float>() const {
  return f_;
}
template <>
inline Kokkos::View<double*, MemorySpace> Buffer::view<double>() const {
  return d_;
}

}  // namespace Impl
}  // namespace koptim

#endif
