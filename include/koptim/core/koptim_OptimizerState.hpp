// The complete state of an optimizer, exported to host memory: counters, scalars and named
// tensors ("<parameter>/<slot>", e.g. "fc1.weight/exp_avg"). import_state() of an exported
// state restores the optimizer exactly; the checkpoint layer writes it to files.
#ifndef KOPTIM_CORE_OPTIMIZERSTATE_HPP
#define KOPTIM_CORE_OPTIMIZERSTATE_HPP

#include <koptim/core/impl/koptim_Instance.hpp>
#include <koptim/core/koptim_Tensor.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

namespace koptim {

// The memory order of a state tensor that lies in its parameter's memory order (the element-wise
// slots, Gefen's per-parameter state): the parameter's Kokkos layout, so that a state exported
// from a LayoutRight parameter is not imported into a LayoutLeft one of the same shape (a host
// build's View<float**> against a CUDA build's), where every element would land on another
// entry. `any` for every other tensor and for a state read from a checkpoint (whose parameters'
// layouts the checkpoint layer compares itself).
enum class StateLayout : std::uint8_t { any, right, left };

struct StateTensor {
  ScalarType dtype = ScalarType::float32;
  std::vector<std::int64_t> shape;
  StateLayout layout = StateLayout::any;
  std::vector<unsigned char> data;  // host copy, native byte order
  // A slice of sharded state: data holds the elements [offset, offset + size()) of a tensor of
  // shape `whole` in its memory order (shape is then {size()}). Empty `whole`: not a slice.
  std::vector<std::int64_t> whole;
  std::int64_t offset = 0;
  // Set only by an export inside Impl::BorrowState (the checkpoint writer): the optimizer's own
  // host-readable memory in place of a copy, `data` then empty; valid while the optimizer is
  // unchanged. export_state() outside that scope always copies.
  const unsigned char* borrowed = nullptr;

  std::int64_t size() const;
  // The elements' bytes, copied or borrowed.
  const unsigned char* bytes() const { return borrowed ? borrowed : data.data(); }
  std::size_t num_bytes() const;
};

struct OptimizerState {
  std::string optimizer;  // the optimizer's name(): a state only imports into the same kind
  std::map<std::string, std::int64_t> integers;
  std::map<std::string, double> reals;
  std::map<std::string, StateTensor> tensors;

  bool operator==(const OptimizerState& o) const;
};

namespace Impl {

// While an instance lives, export_state() on this thread lends memory the host can read instead
// of copying it (StateTensor::borrowed), for a reader that is done before the optimizer changes.
class BorrowState {
 public:
  BorrowState();
  ~BorrowState();
  BorrowState(const BorrowState&)            = delete;
  BorrowState& operator=(const BorrowState&) = delete;
  static bool active();

 private:
  bool previous_;
};

// The elements of a contiguous 1-D View as a state tensor's bytes. From memory the host can read,
// one pass (no zero-filling of the bytes first), or no copy at all inside BorrowState; otherwise
// through a host copy.
template <class T, class... P>
void set_bytes(StateTensor& t, const Kokkos::View<T*, P...>& v) {
  using Space = typename Kokkos::View<T*, P...>::memory_space;
  t.borrowed  = nullptr;
  if constexpr (Kokkos::SpaceAccessibility<Kokkos::HostSpace, Space>::accessible) {
    Impl::fence_all("koptim::OptimizerState: before reading a state tensor");  // the kernels that wrote v
    const auto* p = reinterpret_cast<const unsigned char*>(v.data());
    if (BorrowState::active() && v.size() > 0) {
      t.data.clear();
      t.borrowed = p;
      return;
    }
    t.data.assign(p, p + v.size() * sizeof(T));
  } else {
    t.data.resize(v.size() * sizeof(T));
    Kokkos::View<std::remove_const_t<T>*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> h(
        reinterpret_cast<std::remove_const_t<T>*>(t.data.data()), v.size());
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
