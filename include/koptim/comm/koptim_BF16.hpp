// bfloat16 (the top 16 bits of an IEEE float32) for halving communication volume: scalar
// conversions usable in kernels, and Kokkos kernels that convert whole Views. bf16 values travel
// as std::uint16_t, so no bf16 C++ type is needed on any backend.
//   to_bf16:   round to nearest, ties to even (as torch and CUDA's __float2bfloat16_rn); values
//              beyond the largest bf16 round to +-inf; a NaN stays a (quiet) NaN with its sign.
//              A double is rounded once (not through the nearest float, which can make a tie;
//              torch's double-to-bfloat16 conversion goes through float).
//   from_bf16: exact.
// The relative rounding error of to_bf16 is at most 2^-8 for normal numbers.
#ifndef KOPTIM_COMM_BF16_HPP
#define KOPTIM_COMM_BF16_HPP

#include <koptim/core/koptim_Error.hpp>
#include <koptim/core/impl/koptim_Profiling.hpp>
#include <koptim/core/koptim_Tensor.hpp>

#include <cstdint>
#include <cstring>
#include <string>

namespace koptim {
namespace comm {

KOKKOS_INLINE_FUNCTION std::uint16_t to_bf16(float f) {
  std::uint32_t u;
  memcpy(&u, &f, sizeof u);  // memcpy, not a union or a pointer cast: defined behaviour, on device too
  // A NaN whose payload sits only in the low 16 bits would truncate to inf; set the quiet bit.
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  // Adding 0x7fff plus the lowest kept bit rounds half to even; a carry into the exponent is the
  // correct rounding up to the next binade (or to inf).
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

// Through a float rounded to odd (toward zero, the last bit set where inexact): the 16 bits that
// float keeps beyond bf16's let the rounding to nearest above give the double's own nearest
// bf16. (Through the nearest float, 1 + 2^-8 + 2^-30 becomes the tie 1 + 2^-8, which rounds to
// 1, where its nearest bf16 is 1 + 2^-7.)
KOKKOS_INLINE_FUNCTION std::uint16_t to_bf16(double d) {
  float f = static_cast<float>(d);
  std::uint32_t u;
  memcpy(&u, &f, sizeof u);
  // Inf or NaN: d was one, or is beyond every float (and so rounds to a bf16 inf as well).
  if ((u & 0x7f800000u) == 0x7f800000u) return to_bf16(f);
  const double back = static_cast<double>(f);  // d is finite here: no comparison with a NaN
  if (back != d) {
    if (d > 0 ? back > d : back < d) u -= 1u;  // one unit toward zero (f is not 0: it exceeds d)
    u |= 1u;
    memcpy(&f, &u, sizeof f);
  }
  return to_bf16(f);
}

KOKKOS_INLINE_FUNCTION float from_bf16(std::uint16_t h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

// out(i) = to_bf16(in(i)) on koptim's execution space. Extents must match (ShapeError).
inline void to_bf16(const Kokkos::View<const float*, MemorySpace>& in,
                    const Kokkos::View<std::uint16_t*, MemorySpace>& out) {
  koptim::Impl::ScopedRegion region("koptim::comm::to_bf16");
  if (in.extent(0) != out.extent(0)) {
    throw ShapeError("koptim::comm::to_bf16: in has " + std::to_string(in.extent(0)) + " elements but out has " +
                     std::to_string(out.extent(0)) + "; they must have the same extent");
  }
  Kokkos::parallel_for(
      "koptim::comm::to_bf16", Kokkos::RangePolicy<ExecutionSpace>(0, in.extent(0)),
      KOKKOS_LAMBDA(const std::size_t i) { out(i) = to_bf16(in(i)); });
}

// out(i) = from_bf16(in(i)) on koptim's execution space. Extents must match (ShapeError).
inline void from_bf16(const Kokkos::View<const std::uint16_t*, MemorySpace>& in,
                      const Kokkos::View<float*, MemorySpace>& out) {
  koptim::Impl::ScopedRegion region("koptim::comm::from_bf16");
  if (in.extent(0) != out.extent(0)) {
    throw ShapeError("koptim::comm::from_bf16: in has " + std::to_string(in.extent(0)) + " elements but out has " +
                     std::to_string(out.extent(0)) + "; they must have the same extent");
  }
  Kokkos::parallel_for(
      "koptim::comm::from_bf16", Kokkos::RangePolicy<ExecutionSpace>(0, in.extent(0)),
      KOKKOS_LAMBDA(const std::size_t i) { out(i) = from_bf16(in(i)); });
}

}  // namespace comm
}  // namespace koptim

#endif
