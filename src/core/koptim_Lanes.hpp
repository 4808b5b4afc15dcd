// Lane-parallel team reductions. On a CPU backend a team is one thread, and a team reduction
// over a range is a loop whose single running sum waits for each addition to finish (about 4
// cycles a double). Lanes<T, Op> keeps `reduction_lanes` independent partial results,
// consecutive elements going to consecutive lanes, and combines them at the end, so the loop
// runs at the core's throughput and can vectorize. On GPU backends there is one lane: the team's
// tree reduction is already parallel. Like any parallel sum, a sum's rounding depends on the
// backend (on the lane count); maxima do not.
//
// Kokkos reduces a Lanes value through its Sum reducer: operator+= is the join (a sum for Plus, a
// maximum for MaxNonNegative) and the default value is the identity (reduction_identity below).
#ifndef KOPTIM_SRC_CORE_LANES_HPP
#define KOPTIM_SRC_CORE_LANES_HPP

#include <koptim/core/koptim_Kokkos.hpp>
#include <koptim/core/koptim_Tensor.hpp>

#include <cstdint>
#include <type_traits>

namespace koptim {
namespace Impl {

constexpr int reduction_lanes = std::is_same<ExecutionSpace, Kokkos::DefaultHostExecutionSpace>::value ? 8 : 1;

struct Plus {
  template <class T>
  static KOKKOS_INLINE_FUNCTION T identity() {
    return T(0);
  }
  template <class T>
  static KOKKOS_INLINE_FUNCTION T apply(T a, T b) {
    return a + b;
  }
};

// The maximum of values >= 0 (absolute values): 0 is the identity.
struct MaxNonNegative {
  template <class T>
  static KOKKOS_INLINE_FUNCTION T identity() {
    return T(0);
  }
  template <class T>
  static KOKKOS_INLINE_FUNCTION T apply(T a, T b) {
    return a < b ? b : a;
  }
};

template <class T, class Op>
struct Lanes {
  T lane[reduction_lanes];

  KOKKOS_INLINE_FUNCTION Lanes() {
    for (int l = 0; l < reduction_lanes; ++l) lane[l] = Op::template identity<T>();
  }
  KOKKOS_INLINE_FUNCTION void add(int l, T x) { lane[l] = Op::apply(lane[l], x); }
  KOKKOS_INLINE_FUNCTION Lanes& operator+=(const Lanes& o) {
    for (int l = 0; l < reduction_lanes; ++l) lane[l] = Op::apply(lane[l], o.lane[l]);
    return *this;
  }
  // Kokkos 3 joins through volatile references.
  KOKKOS_INLINE_FUNCTION void operator+=(const volatile Lanes& o) volatile {
    for (int l = 0; l < reduction_lanes; ++l) lane[l] = Op::apply(static_cast<T>(lane[l]), static_cast<T>(o.lane[l]));
  }
  KOKKOS_INLINE_FUNCTION T result() const {
    T r = Op::template identity<T>();
    for (int l = 0; l < reduction_lanes; ++l) r = Op::apply(r, lane[l]);
    return r;
  }
};

// Calls visit(acc, l, i) for every i in [0, n) by the team, with l = i % reduction_lanes, the
// lane that element goes to, and acc a partial value (a Lanes, or a struct of Lanes with a
// reduction_identity of its own); the joined value lands in `result`.
template <class Member, class Value, class Visit>
KOKKOS_INLINE_FUNCTION void team_lane_reduce(const Member& team, std::int64_t n, Value& result, const Visit& visit) {
  constexpr int W = reduction_lanes;
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, (n + W - 1) / W),
      [&](const std::int64_t chunk, Value& acc) {
        const std::int64_t first = chunk * W;
        if (first + W <= n) {
          for (int l = 0; l < W; ++l) visit(acc, l, first + l);
        } else {
          for (int l = 0; l < n - first; ++l) visit(acc, l, first + l);
        }
      },
      result);
}

// The sum over i in [0, n) of f(i), in double, by the team.
template <class Member, class F>
KOKKOS_INLINE_FUNCTION double team_lane_sum(const Member& team, std::int64_t n, const F& f) {
  Lanes<double, Plus> sum;
  team_lane_reduce(team, n, sum, [&](Lanes<double, Plus>& acc, int l, std::int64_t i) { acc.add(l, f(i)); });
  return sum.result();
}

// Chunk `chunk` of [0, n) into acc: element first + l goes to lane l (first = chunk *
// reduction_lanes). The one rule of lane_sum_into and lane_sum_serial.
template <class F>
KOKKOS_INLINE_FUNCTION void add_lane_chunk(Lanes<double, Plus>& acc, std::int64_t chunk, std::int64_t n, const F& f) {
  constexpr int W          = reduction_lanes;
  const std::int64_t first = chunk * W;
  if (first + W <= n) {
    for (int l = 0; l < W; ++l) acc.add(l, f(first + l));
  } else {
    for (int l = 0; l < n - first; ++l) acc.add(l, f(first + l));
  }
}

// The lanes of the sum over i in [0, n) of f(i), in double, as one kernel on exec (chunks of reduction_lanes elements
// per iteration), into `result`: a View the host does not wait for when it is in device memory, or a Lanes value.
template <class F, class Result>
void lane_sum_into(const ExecutionSpace& exec, const char* label, std::int64_t n, const F& f, Result&& result) {
  constexpr int W = reduction_lanes;
  Kokkos::parallel_reduce(
      label, Kokkos::RangePolicy<ExecutionSpace>(exec, 0, (n + W - 1) / W),
      KOKKOS_LAMBDA(const std::int64_t chunk, Lanes<double, Plus>& acc) { add_lane_chunk(acc, chunk, n, f); }, result);
}

// The same lanes on the calling thread, no kernel (inside a parallel loop of the host): the
// kernel's result on one thread, to the bit.
template <class F>
KOKKOS_INLINE_FUNCTION Lanes<double, Plus> lane_sum_serial(std::int64_t n, const F& f) {
  constexpr int W = reduction_lanes;
  Lanes<double, Plus> acc;
  for (std::int64_t chunk = 0; chunk < (n + W - 1) / W; ++chunk) add_lane_chunk(acc, chunk, n, f);
  return acc;
}

// The sum over i in [0, n) of f(i), in double (lane_sum_into, then the lanes in order).
template <class F>
double lane_sum(const ExecutionSpace& exec, const char* label, std::int64_t n, const F& f) {
  Lanes<double, Plus> sum;
  lane_sum_into(exec, label, n, f, sum);
  return sum.result();
}

}  // namespace Impl
}  // namespace koptim

namespace Kokkos {
template <class T, class Op>
struct reduction_identity<koptim::Impl::Lanes<T, Op>> {
  KOKKOS_FORCEINLINE_FUNCTION static koptim::Impl::Lanes<T, Op> sum() { return koptim::Impl::Lanes<T, Op>(); }
};
}  // namespace Kokkos

#endif
