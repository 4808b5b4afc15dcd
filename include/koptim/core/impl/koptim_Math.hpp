// Portable scalar math for koptim kernels.
//
// Kokkos 3.x keeps its math functions in Kokkos::Experimental, Kokkos >= 3.7/4 in Kokkos::.
// koptim code calls these wrappers so the same kernels compile against both, on host and
// device. is_finite() uses only quiet comparisons, so it never raises FE_INVALID even when
// floating-point traps are enabled (the unit tests enable them).
#ifndef KOPTIM_CORE_IMPL_MATH_HPP
#define KOPTIM_CORE_IMPL_MATH_HPP

#include <koptim/core/koptim_Kokkos.hpp>

#include <cstdint>
#include <cstring>

namespace koptim {
namespace Impl {

#if KOKKOS_VERSION >= 30700
namespace kmath = ::Kokkos;
#else
namespace kmath = ::Kokkos::Experimental;
#endif

template <class T>
KOKKOS_INLINE_FUNCTION T sqrt(T x) {
  return kmath::sqrt(x);
}
template <class T>
KOKKOS_INLINE_FUNCTION T abs(T x) {
  return kmath::fabs(x);
}
template <class T>
KOKKOS_INLINE_FUNCTION T pow(T x, T y) {
  return kmath::pow(x, y);
}
template <class T>
KOKKOS_INLINE_FUNCTION T exp(T x) {
  return kmath::exp(x);
}
template <class T>
KOKKOS_INLINE_FUNCTION T log(T x) {
  return kmath::log(x);
}
template <class T>
KOKKOS_INLINE_FUNCTION T cos(T x) {
  return kmath::cos(x);
}

// Maximum and minimum without ordered comparisons on NaN being an issue for callers that
// already know their inputs are finite.
template <class T>
KOKKOS_INLINE_FUNCTION T max(T a, T b) {
  return a < b ? b : a;
}
template <class T>
KOKKOS_INLINE_FUNCTION T min(T a, T b) {
  return b < a ? b : a;
}

// True for finite x, from the exponent bits: integer operations only, so it never raises
// FE_INVALID (the tests trap it) and vectorizes (three quiet comparisons per element made the
// gradient check compute-bound).
KOKKOS_INLINE_FUNCTION bool is_finite(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return (u & 0x7f800000u) != 0x7f800000u;
}
KOKKOS_INLINE_FUNCTION bool is_finite(double x) {
  std::uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  return (u & 0x7ff0000000000000ull) != 0x7ff0000000000000ull;
}
// |x| as the integer of its bits: for finite x it orders as |x| does, and NaN and Inf lie above
// every finite value. One integer comparison against the bits of a limit therefore tests
// "not finite, or |x| above the limit" (integer only: no FE_INVALID, vectorizes).
KOKKOS_INLINE_FUNCTION std::uint32_t magnitude_bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u & 0x7fffffffu;
}
KOKKOS_INLINE_FUNCTION std::uint64_t magnitude_bits(double x) {
  std::uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  return u & 0x7fffffffffffffffull;
}
// Other types: equality comparisons, which are quiet (no FE_INVALID on a quiet NaN), unlike
// <, <=, > and >=.
template <class T>
KOKKOS_INLINE_FUNCTION bool is_finite(T x) {
  return x == x && x != Kokkos::Experimental::infinity<T>::value && x != -Kokkos::Experimental::infinity<T>::value;
}

}  // namespace Impl
}  // namespace koptim

#endif
