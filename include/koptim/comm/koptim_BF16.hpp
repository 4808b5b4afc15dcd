// bfloat16 (the top 16 bits of an IEEE float32) for halving communication volume: scalar
// conversions usable in kernels, and Kokkos kernels that convert whole Views. bf16 values travel
// as std::uint16_t, so no bf16 C++ type is needed on any backend.
//   to_bf16:   round to nearest, ties to even (as torch and CUDA's __float2bfloat16_rn); values
//              beyond the largest bf16 round to +-inf; a NaN stays a (quiet) NaN with its sign.
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
