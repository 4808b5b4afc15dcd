// Element-wise building blocks of the diagonal methods, written in the order of operations of
// torch.optim's single-tensor implementations so that koptim follows torch's trajectories.
// Shampoo's grafting reuses the ones whose math is the same (second-moment accumulation and
// the diagonal preconditioning G / (sqrt(A) + eps)).
#ifndef KOPTIM_SRC_DIAGONAL_DIAGONALMATH_HPP
#define KOPTIM_SRC_DIAGONAL_DIAGONALMATH_HPP

#include <koptim/core/impl/koptim_Math.hpp>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace koptim {
namespace Impl {

// Calls f(std::integral_constant<bool, b>...) for run-time flags b, so kernels branch at compile
// time: a loop with run-time branches inside does not vectorize.
template <class F>
void with_flags(F&& f) {
  f();
}
template <class F, class... Flags>
void with_flags(F&& f, bool b, Flags... rest) {
  if (b) {
    with_flags([&](auto... c) { f(std::true_type{}, c...); }, rest...);
  } else {
    with_flags([&](auto... c) { f(std::false_type{}, c...); }, rest...);
  }
}

// a + alpha * b (torch: a.add(b, alpha=alpha)).
template <class T>
KOKKOS_INLINE_FUNCTION T add_scaled(T a, T alpha, T b) {
  return a + alpha * b;
}

// Exponential moving average as torch's lerp_(x, weight): avg + weight * (x - avg), computed
// from the other end when weight >= 0.5 as torch does.
template <class T>
KOKKOS_INLINE_FUNCTION T lerp(T avg, T x, T weight) {
  return weight < T(0.5) ? avg + weight * (x - avg) : x - (x - avg) * (T(1) - weight);
}

// avg * beta + (1 - beta) * g * g (torch: mul_(beta).addcmul_(g, g, value=1-beta)); also the
// RMSProp and Adam grafting second moments of Shampoo.
template <class T>
KOKKOS_INLINE_FUNCTION T ema_square(T avg, T g, T beta, T one_minus_beta) {
  return avg * beta + one_minus_beta * g * g;
}

// acc + g * g (AdaGrad; Shampoo's AdaGrad grafting), saturating at the largest finite T: a sum
// of squares that torch would take to Inf (which freezes the parameter for good, its update
// being g / Inf = 0) stays finite, so the state can still be exported and imported. The
// update it gives is then below 1e-19 lr |g| in float: a documented deviation from torch only
// where torch holds Inf (docs/robustness.md).
// The sum of two finite non-negative values is finite or +Inf, never NaN: +Inf becomes the
// largest finite value by subtracting one from its bits (an integer compare and subtract, which
// vectorizes; a floating min compiles to a four-instruction blend on SSE2 and cost AdaGrad's
// memory-bound step a quarter of its time).
KOKKOS_INLINE_FUNCTION float saturate_infinity(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  u -= u == 0x7f800000u ? 1u : 0u;
  std::memcpy(&x, &u, sizeof u);
  return x;
}
KOKKOS_INLINE_FUNCTION double saturate_infinity(double x) {
  std::uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  u -= u == 0x7ff0000000000000ull ? 1u : 0u;
  std::memcpy(&x, &u, sizeof u);
  return x;
}
template <class T>
KOKKOS_INLINE_FUNCTION T accumulate_square(T acc, T g) {
  return saturate_infinity(acc + g * g);
}

// sqrt(a) / sqrt_bias_correction + eps: the denominator of Adam-type updates.
template <class T>
KOKKOS_INLINE_FUNCTION T rms_denominator(T a, T inv_sqrt_correction_divisor, T eps) {
  return sqrt(a) / inv_sqrt_correction_divisor + eps;
}

// x / den, and 0 where den is 0: the step of a coordinate whose second moment is 0 with eps = 0
// (every gradient so far 0, or their squares below the smallest subnormal), where the formula's
// 0/0 = NaN (or x/0 = Inf) would poison the parameter. For eps > 0 it is exactly x / den. The
// division never sees a 0 (no invalid-operation flag, and a select the compiler may vectorize);
// a NaN den stays NaN.
template <class T>
KOKKOS_INLINE_FUNCTION T divide_unless_zero(T x, T den) {
  const bool zero = den == T(0);
  const T q       = x / (zero ? T(1) : den);
  return zero ? T(0) : q;
}

// x / (sqrt(a) + eps), 0 where that is 0 / 0: diagonal preconditioning (AdaGrad; Shampoo's
// grafting directions).
template <class T>
KOKKOS_INLINE_FUNCTION T diagonal_precondition(T x, T a, T eps) {
  return divide_unless_zero(x, sqrt(a) + eps);
}

// The scalars of an Adam-type step t (Adam, AdamW, Gefen): computed in double, as torch computes
// them in Python, then rounded once to T.
template <class T>
struct AdamScalars {
  T b1, one_minus_b1, b2, one_minus_b2;
  T neg_step_size;  // -lr / (1 - b1^t)
  T bc2_sqrt;       // sqrt(1 - b2^t)
  T eps;
  T decay;  // 1 - lr wd: decoupled weight decay's factor (exactly 1 without decay: W * 1 = W)
  T wd;     // L2 weight decay's coefficient
};
template <class T>
AdamScalars<T> adam_scalars(const std::array<double, 2>& betas, double eps, std::int64_t t, double lr, double wd) {
  const double bc1 = 1.0 - std::pow(betas[0], static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(betas[1], static_cast<double>(t));
  AdamScalars<T> s;
  s.b1            = static_cast<T>(betas[0]);
  s.one_minus_b1  = static_cast<T>(1.0 - betas[0]);
  s.b2            = static_cast<T>(betas[1]);
  s.one_minus_b2  = static_cast<T>(1.0 - betas[1]);
  s.neg_step_size = static_cast<T>(-(lr / bc1));
  s.bc2_sqrt      = static_cast<T>(std::sqrt(bc2));
  s.eps           = static_cast<T>(eps);
  s.decay         = static_cast<T>(1.0 - lr * wd);
  s.wd            = static_cast<T>(wd);
  return s;
}

}  // namespace Impl
}  // namespace koptim

#endif
