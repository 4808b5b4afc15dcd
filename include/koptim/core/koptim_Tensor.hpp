// A type-erased, non-owning handle to a user's contiguous Kokkos View (rank 1 to 4, float or
// double, LayoutRight or LayoutLeft), and the helpers that dispatch on its scalar type.
//
// koptim never copies a user's parameters: it keeps a handle to their memory and a reference
// to their allocation (so the memory outlives the optimizer that updates it in place).
#ifndef KOPTIM_CORE_TENSOR_HPP
#define KOPTIM_CORE_TENSOR_HPP

#include <koptim/core/koptim_Kokkos.hpp>
#include <koptim/core/koptim_Error.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace koptim {

using ExecutionSpace = Kokkos::DefaultExecutionSpace;
using MemorySpace    = ExecutionSpace::memory_space;

// Parameters, gradients and most state are float32 or float64; uint8 is for state tensors only
// (Gefen's codebook indices).
enum class ScalarType { float32, float64, uint8 };

inline const char* to_string(ScalarType t) {
  switch (t) {
    case ScalarType::float32:
      return "float32";
    case ScalarType::float64:
      return "float64";
    case ScalarType::uint8:
      return "uint8";
  }
  return "";
}
inline std::size_t size_of(ScalarType t) {
  switch (t) {
    case ScalarType::float32:
      return 4;
    case ScalarType::float64:
      return 8;
    case ScalarType::uint8:
      return 1;
  }
  return 0;
}

template <class T>
constexpr ScalarType scalar_type_of() {
  static_assert(std::is_same<T, float>::value || std::is_same<T, double>::value,
                "koptim: parameters and gradients must be float or double");
  return std::is_same<T, float>::value ? ScalarType::float32 : ScalarType::float64;
}

// Calls f(float{}) or f(double{}) for the run-time scalar type of a parameter or a floating
// state buffer.
template <class F>
decltype(auto) dispatch(ScalarType t, F&& f) {
  if (t == ScalarType::uint8) throw std::logic_error("koptim: dispatch on uint8, which is not a floating type");
  if (t == ScalarType::float32) return f(float{});
  return f(double{});
}

std::string shape_string(const std::vector<std::int64_t>& shape);

struct TensorRef {
  ScalarType dtype = ScalarType::float32;
  void* data       = nullptr;
  std::vector<std::int64_t> shape;  // extents as the user's View has them
  bool layout_right = true;         // rank 1 tensors count as LayoutRight
  std::int64_t size = 0;
  std::shared_ptr<const void> owner;  // keeps the user's allocation alive

  // The elements as a flat View in memory order.
  template <class T>
  Kokkos::View<T*, MemorySpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> flat() const {
    return Kokkos::View<T*, MemorySpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(static_cast<T*>(data), size);
  }
  std::size_t bytes() const { return static_cast<std::size_t>(size) * size_of(dtype); }
};

namespace Impl {

template <class View>
TensorRef make_tensor_ref(const View& v, const std::string& what) {
  using value_type = typename View::non_const_value_type;
  using layout     = typename View::array_layout;
  static_assert(Kokkos::is_view<View>::value, "koptim: expected a Kokkos::View");
  static_assert(View::rank >= 1 && View::rank <= 4, "koptim: parameters must be Views of rank 1 to 4");
  static_assert(std::is_same<layout, Kokkos::LayoutRight>::value || std::is_same<layout, Kokkos::LayoutLeft>::value,
                "koptim: parameters must be LayoutRight or LayoutLeft Views");
  static_assert(Kokkos::SpaceAccessibility<ExecutionSpace, typename View::memory_space>::accessible,
                "koptim: the View's memory must be accessible from Kokkos::DefaultExecutionSpace");
  (void)scalar_type_of<value_type>();
  TensorRef t;
  t.dtype = scalar_type_of<value_type>();
  t.data  = const_cast<value_type*>(v.data());
  for (int r = 0; r < static_cast<int>(View::rank); ++r) t.shape.push_back(static_cast<std::int64_t>(v.extent(r)));
  t.layout_right = View::rank == 1 || std::is_same<layout, Kokkos::LayoutRight>::value;
  t.size         = static_cast<std::int64_t>(v.size());
  if (!v.span_is_contiguous() || static_cast<std::int64_t>(v.span()) != t.size) {
    throw ShapeError("koptim: " + what + " (View '" + v.label() + "', shape " + shape_string(t.shape) +
                     ") is not contiguous; koptim needs contiguous Views (no padded Views, no subviews with gaps)");
  }
  if (t.size > 0 && v.data() == nullptr) {
    throw ShapeError("koptim: " + what + " is an unallocated View");
  }
  t.owner = std::make_shared<const View>(v);
  return t;
}

}  // namespace Impl
}  // namespace koptim

#endif
