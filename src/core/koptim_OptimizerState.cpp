#include <koptim/core/koptim_OptimizerState.hpp>

#include <cstring>
#include <limits>

namespace koptim {

std::int64_t StateTensor::size() const {
  // A shape read from outside (import_state, a checkpoint) may hold anything: a negative
  // dimension or a product beyond int64 gives -1, which matches no tensor and is refused.
  std::int64_t n = 1;
  for (auto e : shape) {
    if (e < 0 || (e != 0 && n > std::numeric_limits<std::int64_t>::max() / e)) return -1;
    n *= e;
  }
  return n;
}

std::size_t StateTensor::num_bytes() const {
  return borrowed ? static_cast<std::size_t>(size()) * size_of(dtype) : data.size();
}

bool OptimizerState::operator==(const OptimizerState& o) const {
  if (optimizer != o.optimizer || integers != o.integers || reals != o.reals) return false;
  if (tensors.size() != o.tensors.size()) return false;
  for (const auto& kv : tensors) {
    auto it = o.tensors.find(kv.first);
    if (it == o.tensors.end()) return false;
    const auto &a = kv.second, &b = it->second;
    if (a.dtype != b.dtype || a.shape != b.shape || a.layout != b.layout || a.whole != b.whole ||
        a.offset != b.offset || a.num_bytes() != b.num_bytes() ||
        (a.num_bytes() > 0 && std::memcmp(a.bytes(), b.bytes(), a.num_bytes()) != 0))
      return false;
  }
  return true;
}

namespace Impl {

namespace {
thread_local bool borrowing = false;
}

BorrowState::BorrowState() : previous_(borrowing) { borrowing = true; }
BorrowState::~BorrowState() { borrowing = previous_; }
bool BorrowState::active() { return borrowing; }

Buffer::Buffer(const std::string& label, ScalarType dtype, std::int64_t n, double fill) : dtype_(dtype), n_(n) {
  if (dtype == ScalarType::float32) {
    f_ = Kokkos::View<float*, MemorySpace>(label, n);
    if (fill != 0.0) Kokkos::deep_copy(f_, static_cast<float>(fill));
  } else {
    d_ = Kokkos::View<double*, MemorySpace>(label, n);
    if (fill != 0.0) Kokkos::deep_copy(d_, fill);
  }
}

StateTensor Buffer::to_state(const std::vector<std::int64_t>& shape) const {
  StateTensor t;
  t.dtype = dtype_;
  t.shape = shape;
  dispatch(dtype_, [&](auto zero) { set_bytes(t, view<decltype(zero)>()); });
  return t;
}

void Buffer::check(const StateTensor& t, const std::string& key) const {
  if (t.dtype != dtype_) {
    throw StateError("koptim: state tensor '" + key + "' has scalar type " + to_string(t.dtype) + ", expected " +
                     to_string(dtype_));
  }
  if (t.size() != n_ || t.data.size() != bytes()) {
    throw StateError("koptim: state tensor '" + key + "' has shape " + shape_string(t.shape) + " (" +
                     std::to_string(t.data.size()) + " bytes), expected " + std::to_string(n_) + " elements (" +
                     std::to_string(bytes()) + " bytes)");
  }
}

void Buffer::assign(const StateTensor& t) {
  dispatch(dtype_, [&](auto zero) {
    using T = decltype(zero);
    Kokkos::View<const T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> host(
        reinterpret_cast<const T*>(t.data.data()), n_);
    Kokkos::deep_copy(view<T>(), host);
  });
}

}  // namespace Impl
}  // namespace koptim
