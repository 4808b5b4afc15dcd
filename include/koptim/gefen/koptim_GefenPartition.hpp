// Gefen's automatic partition of a tensor into blocks that share a second moment
// (docs/gefen.md, "The method as implemented", first step).
//
// At the first step Gefen looks at the first gradient g0 of each tensor (flattened, row-major)
// and picks a block size p dividing its n elements: consecutive blocks of p elements then share
// one second-moment value (and one momentum scale), p = 1 meaning no sharing. The structure it
// looks for is the one a per-row (or per-head, per-channel) gradient scale leaves in
// x = log(g0^2 + 1e-12). choose_partition() implements the default neighbour-contrast rule,
// choose_partition_variance_drop() the earlier variance-drop rule (partition_rule =
// variance_drop). Both take host pointers, or a Kokkos::View that the default execution space
// can read, in which case x and its prefix sums are computed on that space and only the prefix
// sums come back to the host. All of them cost O(n + sum over candidates p of n/p).
#ifndef KOPTIM_GEFEN_PARTITION_HPP
#define KOPTIM_GEFEN_PARTITION_HPP

#include <koptim/core/koptim_Error.hpp>
#include <koptim/core/koptim_Kokkos.hpp>
#include <koptim/core/impl/koptim_Math.hpp>
#include <koptim/core/impl/koptim_Profiling.hpp>

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace koptim {
namespace gefen {

// The rule's constants: blocks share only when p > partition_min_block, a candidate needs at
// least partition_min_blocks blocks, and a chosen p above partition_max_block is replaced by
// its smallest divisor above it.
constexpr std::int64_t partition_min_block  = 8;
constexpr std::int64_t partition_min_blocks = 4;
constexpr std::int64_t partition_max_block  = 1024;
constexpr double partition_log_floor        = 1e-12;

namespace Impl {

// Candidate block sizes and their scores, in ascending order of block size.
struct PartitionScores {
  std::vector<std::int64_t> candidates;
  std::vector<double> scores;
};

// All divisors of n >= 1, ascending; O(sqrt n).
inline std::vector<std::int64_t> divisors(std::int64_t n) {
  std::vector<std::int64_t> low, high;
  for (std::int64_t d = 1; d <= n / d; ++d) {
    if (n % d == 0) {
      low.push_back(d);
      if (d != n / d) high.push_back(n / d);
    }
  }
  low.insert(low.end(), high.rbegin(), high.rend());
  return low;
}

template <class T>
KOKKOS_INLINE_FUNCTION double log_square(T g) {
  const double d = static_cast<double>(g);
  return ::koptim::Impl::log(d * d + partition_log_floor);
}

// Prefix sums of x_i - x_0 with x = log_square(g0). Subtracting x_0 changes no block-mean
// difference but makes runs equal to x_0 (constant tensors, untouched embedding rows when row 0
// is one) sum to exactly 0, so they cannot fake structure out of rounding noise.
template <class T>
std::vector<double> log_square_prefix(const T* g0, std::int64_t n) {
  std::vector<double> prefix(n + 1, 0.0);
  if (n == 0) return prefix;
  const double x0 = log_square(g0[0]);
  for (std::int64_t i = 0; i < n; ++i) {
    const double x = log_square(g0[i]);
    if (!::koptim::Impl::is_finite(x)) {
      std::ostringstream s;
      s << "koptim::gefen::choose_partition: g0[" << i << "] = " << g0[i]
        << " is not allowed: gradients must be finite with g0^2 finite in double";
      throw ::koptim::NonFiniteError(s.str());
    }
    prefix[i + 1] = prefix[i] + (x - x0);
  }
  return prefix;
}

// S(p) = mean over consecutive block pairs of |m_{b+1} - m_b|, m_b the block means of x, for
// the divisors p of n with n / p >= partition_min_blocks; prefix holds the n + 1 prefix sums of
// x, or of x minus any constant.
inline PartitionScores neighbour_contrast_scores(const double* prefix, std::int64_t n) {
  PartitionScores s;
  if (n < partition_min_blocks) return s;
  for (const std::int64_t p : divisors(n)) {
    if (n / p < partition_min_blocks) break;
    const std::int64_t blocks = n / p;
    const double dp           = static_cast<double>(p);
    double previous           = (prefix[p] - prefix[0]) / dp;
    double sum                = 0.0;
    for (std::int64_t b = 1; b < blocks; ++b) {
      const double mean = (prefix[(b + 1) * p] - prefix[b * p]) / dp;
      sum += ::koptim::Impl::abs(mean - previous);
      previous = mean;
    }
    s.candidates.push_back(p);
    s.scores.push_back(sum / static_cast<double>(blocks - 1));
  }
  return s;
}

// The qualifying candidate (neither first nor last, p > partition_min_block, a strict local
// maximum against both neighbours) with the highest score, ties to the larger p; 1 if none.
inline std::int64_t select_neighbour_contrast(const PartitionScores& s) {
  const std::size_t L = s.candidates.size();
  std::size_t best    = 0;  // 0 is never a qualifying index, so it means "none"
  for (std::size_t t = 1; t + 1 < L; ++t) {
    const double v = s.scores[t];
    if (s.candidates[t] > partition_min_block && v > s.scores[t - 1] && v > s.scores[t + 1] &&
        (best == 0 || v >= s.scores[best])) {
      best = t;
    }
  }
  return best == 0 ? 1 : s.candidates[best];
}

// Blocks above partition_max_block are split into their smallest divisor above it.
inline std::int64_t cap_partition(std::int64_t p) {
  if (p <= partition_max_block) return p;
  for (const std::int64_t d : divisors(p)) {
    if (d > partition_max_block) return d;
  }
  return p;  // not reached: p itself is a divisor above the cap
}

// Variance-drop rule: prefix1 and prefix2 are the n + 1 prefix sums of y and y^2 with
// y = g0^2 - c for any constant c (the variances do not depend on it; c = g0[0]^2). E(p) = sqrt(mean over
// blocks of the population variance of g0^2), for every proper divisor p of n, 1 included.
inline PartitionScores variance_drop_scores(const double* prefix1, const double* prefix2, std::int64_t n) {
  PartitionScores s;
  for (const std::int64_t p : divisors(n)) {
    if (p == n) break;
    double e = 0.0;  // one element has no spread; prefix differences would leave rounding in it
    if (p > 1) {
      const std::int64_t blocks = n / p;
      const double dp           = static_cast<double>(p);
      double sum                = 0.0;
      for (std::int64_t b = 0; b < blocks; ++b) {
        const double mean = (prefix1[(b + 1) * p] - prefix1[b * p]) / dp;
        const double var  = (prefix2[(b + 1) * p] - prefix2[b * p]) / dp - mean * mean;
        sum += ::koptim::Impl::max(var, 0.0);  // cancellation may leave a tiny negative
      }
      e = ::koptim::Impl::sqrt(sum / static_cast<double>(blocks));
    }
    s.candidates.push_back(p);
    s.scores.push_back(e);
  }
  return s;
}

// The candidate after the most negative step E(p_i) - E(p_{i-1}) (ties to the smaller p);
// 1 when E never drops or that p is below partition_min_block.
inline std::int64_t select_variance_drop(const PartitionScores& s) {
  const std::size_t L = s.candidates.size();
  if (L < 2) return 1;
  std::size_t best = 1;
  double best_drop = s.scores[1] - s.scores[0];
  for (std::size_t i = 2; i < L; ++i) {
    const double drop = s.scores[i] - s.scores[i - 1];
    if (drop < best_drop) {
      best_drop = drop;
      best      = i;
    }
  }
  if (!(best_drop < 0.0)) return 1;
  return s.candidates[best] < partition_min_block ? 1 : s.candidates[best];
}

template <class T>
void check_host_input(const char* caller, const T* g0, std::int64_t n) {
  static_assert(std::is_same<T, float>::value || std::is_same<T, double>::value,
                "koptim::gefen partition rules take float or double gradients");
  if (n < 0) {
    std::ostringstream s;
    s << caller << ": n = " << n << " is not allowed: the number of elements must be >= 0";
    throw ::koptim::Error(s.str());
  }
  if (n > 0 && g0 == nullptr) {
    std::ostringstream s;
    s << caller << ": g0 is null but n = " << n;
    throw ::koptim::Error(s.str());
  }
}

template <class View>
void check_view(const View&) {
  static_assert(Kokkos::is_view<View>::value && View::rank == 1, "koptim::gefen: g0 must be a rank-1 Kokkos::View");
  using T = typename View::non_const_value_type;
  static_assert(std::is_same<T, float>::value || std::is_same<T, double>::value,
                "koptim::gefen partition rules take float or double gradients");
  static_assert(Kokkos::SpaceAccessibility<Kokkos::DefaultExecutionSpace, typename View::memory_space>::accessible,
                "koptim::gefen: g0 must be accessible from Kokkos::DefaultExecutionSpace");
}

// Throws, naming the first index, when some f(g0(i)) is not finite.
template <class View, class F>
void check_finite_on_device(const char* caller, const View& g0, F f) {
  using Policy         = Kokkos::RangePolicy<Kokkos::DefaultExecutionSpace, Kokkos::IndexType<std::int64_t>>;
  const std::int64_t n = static_cast<std::int64_t>(g0.extent(0));
  std::int64_t first   = n;
  Kokkos::parallel_reduce(
      "koptim::gefen::check_finite", Policy(0, n),
      KOKKOS_LAMBDA(const std::int64_t i, std::int64_t& m) {
        if (!::koptim::Impl::is_finite(f(g0(i))) && i < m) m = i;
      },
      Kokkos::Min<std::int64_t>(first));
  if (first < n) {
    std::ostringstream s;
    s << caller << ": g0(" << first
      << ") is not allowed: gradients must be finite with g0^2 finite in double (and g0^4 for variance_drop)";
    throw ::koptim::NonFiniteError(s.str());
  }
}

struct LogSquare {
  template <class T>
  KOKKOS_INLINE_FUNCTION double operator()(T g) const {
    return log_square(g);
  }
};
struct Square {
  template <class T>
  KOKKOS_INLINE_FUNCTION double operator()(T g) const {
    return static_cast<double>(g) * static_cast<double>(g);
  }
};
struct FourthPower {
  template <class T>
  KOKKOS_INLINE_FUNCTION double operator()(T g) const {
    const double s = Square()(g);
    return s * s;
  }
};

// The summed terms for element i of a View g, with the shift (from the first element's value)
// computed on the device too: the host and device prefix sums add the same numbers, and equal
// inputs cancel exactly on any backend, whether or not its compiler fuses multiply-adds. The
// shifted square g^2 - g0^2 is computed as (g - g0)(g + g0): written g^2 - c, a compiler that
// contracts (GPU compilers do by default; GCC with an FMA architecture unless told not to)
// makes it fma(g, g, -c), which leaves the rounding error of c in every term of a constant
// gradient, and the variance-drop rule then found structure in constant gradients.
struct AsDouble {
  template <class T>
  KOKKOS_INLINE_FUNCTION double operator()(T g) const {
    return static_cast<double>(g);
  }
};
KOKKOS_INLINE_FUNCTION double shifted_square(double x, double x0) { return (x - x0) * (x + x0); }

template <class View>
struct ShiftedLogSquare {
  View g;
  double x0;
  KOKKOS_INLINE_FUNCTION double operator()(std::int64_t i) const { return log_square(g(i)) - x0; }
};
template <class View>
struct ShiftedSquare {
  View g;
  double x0;  // the first element
  KOKKOS_INLINE_FUNCTION double operator()(std::int64_t i) const {
    return shifted_square(static_cast<double>(g(i)), x0);
  }
};
template <class View>
struct ShiftedSquareSquared {
  View g;
  double x0;
  KOKKOS_INLINE_FUNCTION double operator()(std::int64_t i) const {
    const double y = shifted_square(static_cast<double>(g(i)), x0);
    return y * y;
  }
};

// f(g(0)), evaluated on the default execution space.
template <class View, class F>
double first_on_device(const View& g, F f) {
  Kokkos::View<double> value("koptim::gefen::first_value");
  Kokkos::parallel_for(
      "koptim::gefen::first_value", Kokkos::RangePolicy<Kokkos::DefaultExecutionSpace>(0, 1),
      KOKKOS_LAMBDA(const int) { value() = f(g(0)); });
  return Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), value)();
}

// Exclusive prefix sums (n + 1 of them) of term(i): the terms computed on the default execution
// space, summed on the host in index order, as the host functions sum them. (A parallel scan
// associates the sums by the backend's split of the range, which on OpenMP depends on the thread
// count: a rank with fewer threads, or another backend, could then pick another p at a near-tie,
// and the tensor's whole state with it.) The terms come back to the host either way, once, on the
// first step.
template <class Term>
Kokkos::View<double*, Kokkos::HostSpace> device_prefix(std::int64_t n, Term term) {
  using Policy = Kokkos::RangePolicy<Kokkos::DefaultExecutionSpace, Kokkos::IndexType<std::int64_t>>;
  Kokkos::View<double*> terms(Kokkos::view_alloc(Kokkos::WithoutInitializing, "koptim::gefen::terms"), n);
  Kokkos::parallel_for(
      "koptim::gefen::terms", Policy(0, n), KOKKOS_LAMBDA(const std::int64_t i) { terms(i) = term(i); });
  const auto t = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), terms);
  Kokkos::View<double*, Kokkos::HostSpace> prefix(
      Kokkos::view_alloc(Kokkos::WithoutInitializing, "koptim::gefen::prefix"), n + 1);
  prefix(0) = 0.0;
  for (std::int64_t i = 0; i < n; ++i) prefix(i + 1) = prefix(i) + t(i);
  return prefix;
}

// Prefix sums of y = g0^2 - g0(0)^2 and of y^2 for the variance-drop rule. Shifting by the
// first value keeps constant runs exactly zero (no variance made of rounding).
template <class T>
void variance_prefix(const T* g0, std::int64_t n, std::vector<double>& prefix1, std::vector<double>& prefix2) {
  prefix1.assign(n + 1, 0.0);
  prefix2.assign(n + 1, 0.0);
  if (n == 0) return;
  const double x0 = static_cast<double>(g0[0]);
  for (std::int64_t i = 0; i < n; ++i) {
    // Checked before any subtraction: inf - inf would raise FE_INVALID, which tests trap.
    if (!::koptim::Impl::is_finite(FourthPower()(g0[i]))) {
      std::ostringstream s;
      s << "koptim::gefen::choose_partition_variance_drop: g0[" << i << "] = " << g0[i]
        << " is not allowed: gradients must be finite with g0^4 finite in double";
      throw ::koptim::NonFiniteError(s.str());
    }
    const double y = shifted_square(static_cast<double>(g0[i]), x0);
    prefix1[i + 1] = prefix1[i] + y;
    prefix2[i + 1] = prefix2[i] + y * y;
  }
}

}  // namespace Impl

// Block size for a tensor of n elements from its first gradient, by the neighbour-contrast rule:
// scores in double from x = log(g0^2 + 1e-12); candidates the divisors p of n with n / p >= 4,
// ascending; S(p) the mean absolute difference of consecutive block means of x; the qualifying
// candidates are neither first nor last, have p > 8 and a score strictly above both neighbours';
// the highest score wins (ties: larger p), 1 if none qualifies; a winner above 1024 is replaced
// by its smallest divisor above 1024. g0 must be finite.
template <class T>
std::int64_t choose_partition(const T* g0, std::int64_t n) {
  Impl::check_host_input("koptim::gefen::choose_partition", g0, n);
  ::koptim::Impl::ScopedRegion region("koptim::gefen::choose_partition");
  const std::vector<double> prefix = Impl::log_square_prefix(g0, n);
  return Impl::cap_partition(Impl::select_neighbour_contrast(Impl::neighbour_contrast_scores(prefix.data(), n)));
}

// The same rule for a gradient in a View the default execution space can read.
template <class View>
typename std::enable_if<Kokkos::is_view<View>::value, std::int64_t>::type choose_partition(const View& g0) {
  Impl::check_view(g0);
  ::koptim::Impl::ScopedRegion region("koptim::gefen::choose_partition");
  const typename View::const_type g = g0;
  const std::int64_t n              = static_cast<std::int64_t>(g.extent(0));
  if (n == 0) return 1;
  Impl::check_finite_on_device("koptim::gefen::choose_partition", g, Impl::LogSquare());
  const double x0   = Impl::first_on_device(g, Impl::LogSquare());
  const auto prefix = Impl::device_prefix(n, Impl::ShiftedLogSquare<typename View::const_type>{g, x0});
  return Impl::cap_partition(Impl::select_neighbour_contrast(Impl::neighbour_contrast_scores(prefix.data(), n)));
}

// Block size by the variance-drop rule (partition_rule = variance_drop, gefen 1.1.1):
// candidates all proper divisors of n, 1 included; E(p) = sqrt(mean over blocks of the
// population variance of g0^2); the candidate with the most negative step E(p_i) - E(p_{i-1})
// wins (ties: smaller p); 1 when E never drops or the winner is below 8. No cap applies.
template <class T>
std::int64_t choose_partition_variance_drop(const T* g0, std::int64_t n) {
  Impl::check_host_input("koptim::gefen::choose_partition_variance_drop", g0, n);
  ::koptim::Impl::ScopedRegion region("koptim::gefen::choose_partition_variance_drop");
  if (n == 0) return 1;
  std::vector<double> prefix1, prefix2;
  Impl::variance_prefix(g0, n, prefix1, prefix2);
  return Impl::select_variance_drop(Impl::variance_drop_scores(prefix1.data(), prefix2.data(), n));
}

// The variance-drop rule for a gradient in a View the default execution space can read.
template <class View>
typename std::enable_if<Kokkos::is_view<View>::value, std::int64_t>::type choose_partition_variance_drop(
    const View& g0) {
  Impl::check_view(g0);
  ::koptim::Impl::ScopedRegion region("koptim::gefen::choose_partition_variance_drop");
  const typename View::const_type g = g0;
  const std::int64_t n              = static_cast<std::int64_t>(g.extent(0));
  if (n == 0) return 1;
  Impl::check_finite_on_device("koptim::gefen::choose_partition_variance_drop", g, Impl::FourthPower());
  const double x0    = Impl::first_on_device(g, Impl::AsDouble());
  const auto prefix1 = Impl::device_prefix(n, Impl::ShiftedSquare<typename View::const_type>{g, x0});
  const auto prefix2 = Impl::device_prefix(n, Impl::ShiftedSquareSquared<typename View::const_type>{g, x0});
  return Impl::select_variance_drop(Impl::variance_drop_scores(prefix1.data(), prefix2.data(), n));
}

}  // namespace gefen
}  // namespace koptim

#endif
