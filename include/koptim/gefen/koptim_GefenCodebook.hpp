// Gefen's learned 256-entry quantization codebook (docs/gefen.md, "The method as implemented", first step).
//
// Gefen keeps its first moment as one byte per element: an index into a codebook of
// normalised values in [-1, 1], times one absmax per scale block. The codebook is learned once,
// at the first step, from the first gradients: accumulate_histogram() counts them, each divided
// by the absmax of its scale block, in 4096 bins on the default execution space (call it once
// per tensor on the same counts), and codebook_from_histogram() turns the counts into the
// codebook. That codebook is the exact optimum of a weighted 1-D k-means whose first and last
// centres are pinned at -1 and +1, so the quantization range cannot shrink as it does under
// Lloyd-Max. optimal_codebook() solves that problem for any weighted points in [-1, 1] in
// O(K M log M), and codebook_cost() measures any codebook on weighted points.
#ifndef KOPTIM_GEFEN_CODEBOOK_HPP
#define KOPTIM_GEFEN_CODEBOOK_HPP

#include <koptim/core/koptim_Error.hpp>
#include <koptim/core/koptim_Kokkos.hpp>
#include <koptim/core/impl/koptim_Math.hpp>
#include <koptim/core/impl/koptim_Profiling.hpp>

#include <Kokkos_ScatterView.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace koptim {
namespace gefen {

// Number of codebook entries (indices are uint8) and of histogram bins.
constexpr int codebook_size  = 256;
constexpr int histogram_bins = 4096;

namespace Impl {

enum class CodebookSolver { divide_and_conquer, quadratic };

// The optimum as the dynamic programme sees it: cluster k holds points [starts[k], starts[k+1])
// (the last one up to M), cost is the minimised objective exactly as the recurrence computed it,
// and evaluations counts cost evaluations (the solver's work).
struct CodebookSolution {
  std::vector<double> centres;
  std::vector<int> starts;
  double cost              = 0.0;
  std::int64_t evaluations = 0;
};

inline void check_codebook_input(const char* caller, const std::vector<double>& points,
                                 const std::vector<double>& weights, int K) {
  const auto fail     = [caller](const std::string& what) { throw ::koptim::Error(std::string(caller) + ": " + what); };
  const std::size_t M = points.size();
  if (weights.size() != M) {
    std::ostringstream s;
    s << caller << ": points and weights must have the same size, got " << M << " points and " << weights.size()
      << " weights";
    throw ::koptim::ShapeError(s.str());
  }
  if (M > static_cast<std::size_t>(std::numeric_limits<int>::max() - 1)) {
    std::ostringstream s;
    s << "too many points (" << M << "), at most " << std::numeric_limits<int>::max() - 1 << " are allowed";
    fail(s.str());
  }
  if (K < 2 || static_cast<std::size_t>(K) > M) {
    std::ostringstream s;
    s << "K = " << K << " is not allowed: need 2 <= K <= number of points (" << M
      << "), since the first and last clusters are distinct and every cluster holds a point";
    fail(s.str());
  }
  for (std::size_t i = 0; i < M; ++i) {
    // Written with negations so that a NaN fails the check (and with quiet comparisons first).
    if (!::koptim::Impl::is_finite(points[i]) || !(points[i] >= -1.0 && points[i] <= 1.0)) {
      std::ostringstream s;
      s << "points[" << i << "] = " << points[i] << " is outside [-1, 1]";
      fail(s.str());
    }
    if (i > 0 && !(points[i - 1] < points[i])) {
      std::ostringstream s;
      s << "points must be strictly increasing, but points[" << i - 1 << "] = " << points[i - 1] << " and points[" << i
        << "] = " << points[i];
      fail(s.str());
    }
    if (!::koptim::Impl::is_finite(weights[i]) || !(weights[i] > 0.0)) {
      std::ostringstream s;
      s << "weights[" << i << "] = " << weights[i] << " is not allowed: weights must be finite and positive";
      fail(s.str());
    }
  }
}

// Cluster costs over points [i, j) from prefix sums of w, w*x and w*x*x. Both solvers call these
// same functions, so they compare bit-identical numbers.
class ClusterCosts {
 public:
  ClusterCosts(const std::vector<double>& points, const std::vector<double>& weights)
      : m_(static_cast<int>(points.size())), w_(m_ + 1, 0.0), s1_(m_ + 1, 0.0), s2_(m_ + 1, 0.0) {
    for (int t = 0; t < m_; ++t) {
      const double wx = weights[t] * points[t];
      w_[t + 1]       = w_[t] + weights[t];
      s1_[t + 1]      = s1_[t] + wx;
      s2_[t + 1]      = s2_[t] + wx * points[t];
    }
  }
  int size() const { return m_; }
  // Cluster [0, j) around the pinned centre -1: sum w (x + 1)^2.
  double first(int j) const { return s2_[j] + 2.0 * s1_[j] + w_[j]; }
  // Cluster [i, M) around the pinned centre +1: sum w (x - 1)^2.
  double last(int i) const {
    const double w = w_[m_] - w_[i], s1 = s1_[m_] - s1_[i], s2 = s2_[m_] - s2_[i];
    return s2 - 2.0 * s1 + w;
  }
  // Cluster [i, j) around its weighted mean.
  double middle(int i, int j) const {
    const double w = w_[j] - w_[i], s1 = s1_[j] - s1_[i], s2 = s2_[j] - s2_[i];
    return s2 - s1 * s1 / w;
  }
  double mean(int i, int j) const { return (s1_[j] - s1_[i]) / (w_[j] - w_[i]); }
  double weight_prefix(int j) const { return w_[j]; }
  double sum_wx2() const { return s2_[m_]; }

 private:
  int m_;
  std::vector<double> w_, s1_, s2_;
};

// A minimum over splits and the split that attains it.
struct LayerMin {
  double value;
  int arg;
};

// One middle layer, cur[j] = min_i prev[i] + middle(i, j) for j in [jlo, jhi], i in [k-1, j-1],
// by divide and conquer on the split index.
//
// Why it is exact, ties included: middle() is a within-cluster sum of squares, which satisfies
// the quadrangle inequality, so the smallest optimal split is non-decreasing in j. The pinned
// costs never enter here (the first layer is first() alone and the last layer is one scan), and
// prev[] may be any function of i. But the solver must reproduce the full scan's choice on the
// *computed* values, where rounding can break the monotonicity between splits whose costs agree
// to a few ulps (mirror-image partitions of a symmetric histogram do). So each node keeps every
// split whose value is within `tol` of its minimum and bounds its children by the outermost of
// them. With errors of each evaluation below d, the split a full scan picks for a j (and the
// exact optimum) lies within 8 d of the node's minimum: so tol >= 8 d makes the restricted scan
// see every split the full scan could pick, and its strict '<' upward scan then picks the same
// one. The prefix sums enter the quadrangle inequality only through the points they imply, which
// are the given points when the sums are exact (integer counts, dyadic bin centres) and stay
// sorted otherwise unless points are closer than the sums' rounding; the errors of the costs
// themselves are local, d <= ~20 eps (max prev + sum w x^2). Extra width costs time only where
// many splits tie within tol.
class MiddleLayer {
 public:
  MiddleLayer(const ClusterCosts& costs, const std::vector<double>& prev, std::vector<double>& cur,
              std::vector<int>& arg, int k, double tol)
      : costs_(costs), prev_(prev), cur_(cur), arg_(arg), k_(k), tol_(tol), buffer_(costs.size() + 1) {}

  std::int64_t evaluations = 0;

  void full_scan(int jlo, int jhi) {
    for (int j = jlo; j <= jhi; ++j) {
      const LayerMin best = scan(j, k_ - 1, j - 1);
      cur_[j]             = best.value;
      arg_[j]             = best.arg;
    }
  }

  void divide_and_conquer(int jlo, int jhi, int ilo, int ihi) {
    // Recursion depth is log2(M); each node scans its split range once.
    if (jlo > jhi) return;
    const int j         = jlo + (jhi - jlo) / 2;
    const int lo        = std::max(ilo, k_ - 1);
    const int hi        = std::min(ihi, j - 1);
    const LayerMin best = scan(j, lo, hi);
    cur_[j]             = best.value;
    arg_[j]             = best.arg;
    const double reach  = best.value + tol_;
    int near_lo         = best.arg;
    int near_hi         = best.arg;
    for (int i = lo; i < best.arg; ++i) {
      if (buffer_[i] <= reach) {
        near_lo = i;
        break;
      }
    }
    for (int i = hi; i > best.arg; --i) {
      if (buffer_[i] <= reach) {
        near_hi = i;
        break;
      }
    }
    divide_and_conquer(jlo, j - 1, ilo, near_hi);
    divide_and_conquer(j + 1, jhi, near_lo, ihi);
  }

 private:
  // The tie rule of the reference, strict '<' scanning upwards (smallest split among equal
  // values), lives here and in the last-cluster scan.
  LayerMin scan(int j, int lo, int hi) {
    LayerMin best{std::numeric_limits<double>::infinity(), lo};
    for (int i = lo; i <= hi; ++i) {
      const double v = prev_[i] + costs_.middle(i, j);
      buffer_[i]     = v;
      if (v < best.value) best = {v, i};
    }
    evaluations += hi - lo + 1;
    return best;
  }

  const ClusterCosts& costs_;
  const std::vector<double>& prev_;
  std::vector<double>& cur_;
  std::vector<int>& arg_;
  int k_;
  double tol_;
  std::vector<double> buffer_;
};

// The dynamic programme of the codebook. D_k[j] is the least cost of points [0, j) in k
// clusters, the first pinned at -1: D_1[j] = first(j), D_k[j] = min_i D_{k-1}[i] + middle(i, j)
// for 2 <= k <= K-1, and the optimum is min_i D_{K-1}[i] + last(i). Each j and k only ranges
// over splits that leave every remaining cluster a point. Ties keep the smallest split index.
inline CodebookSolution solve_codebook(const std::vector<double>& points, const std::vector<double>& weights, int K,
                                       CodebookSolver solver) {
  check_codebook_input("koptim::gefen::optimal_codebook", points, weights, K);
  const ClusterCosts costs(points, weights);
  const int M = costs.size();
  // Every cluster weight is a difference of these prefix sums: it must not round to 0 (0/0), and
  // squared sums must not overflow. Integer counts below 2^53 in total always pass.
  for (int t = 0; t < M; ++t) {
    if (!(costs.weight_prefix(t + 1) > costs.weight_prefix(t)) || !(costs.weight_prefix(t + 1) <= 1e150)) {
      std::ostringstream s;
      s << "koptim::gefen::optimal_codebook: weights[" << t << "] = " << weights[t]
        << " is lost in the running sum of the weights before it (" << costs.weight_prefix(t)
        << ") or the total passes 1e150: the weights span too wide a range for double prefix sums";
      throw ::koptim::Error(s.str());
    }
  }
  const double inf = std::numeric_limits<double>::infinity();
  const double eps = std::numeric_limits<double>::epsilon();
  // tol >= 8 d (see MiddleLayer), with d <= 20 eps (max |prev| + 2 sum w x^2) a generous bound
  // on one evaluation's error: 160 needed, 512 taken.
  constexpr double tol_factor = 512.0;

  CodebookSolution solution;
  std::vector<double> prev(M + 1, inf), cur(M + 1, inf);
  for (int j = 1; j <= M - K + 1; ++j) prev[j] = costs.first(j);
  solution.evaluations = M - K + 1;

  // arg[k][j] for the middle layers k = 2..K-1 (row k-2).
  std::vector<std::vector<int>> arg(std::max(K - 2, 0), std::vector<int>(M + 1, -1));
  for (int k = 2; k <= K - 1; ++k) {
    const int jlo = k, jhi = M - K + k;
    double prev_max = 0.0;
    for (int i = k - 1; i <= jhi - 1; ++i) prev_max = std::max(prev_max, ::koptim::Impl::abs(prev[i]));
    const double tol = tol_factor * eps * (prev_max + 2.0 * costs.sum_wx2());
    std::fill(cur.begin(), cur.end(), inf);
    MiddleLayer layer(costs, prev, cur, arg[k - 2], k, tol);
    if (solver == CodebookSolver::quadratic) {
      layer.full_scan(jlo, jhi);
    } else {
      layer.divide_and_conquer(jlo, jhi, k - 1, jhi - 1);
    }
    solution.evaluations += layer.evaluations;
    std::swap(prev, cur);
  }

  // Last cluster: one scan, same tie rule.
  LayerMin best{inf, K - 1};
  for (int i = K - 1; i <= M - 1; ++i) {
    const double v = prev[i] + costs.last(i);
    if (v < best.value) best = {v, i};
  }
  solution.evaluations += M - K + 1;
  solution.cost = best.value;

  solution.starts.assign(K, 0);
  solution.starts[K - 1] = best.arg;
  for (int k = K - 1; k >= 2; --k) solution.starts[k - 1] = arg[k - 2][solution.starts[k]];
  solution.centres.assign(K, 0.0);
  solution.centres[0]     = -1.0;
  solution.centres[K - 1] = 1.0;
  for (int k = 1; k < K - 1; ++k) solution.centres[k] = costs.mean(solution.starts[k], solution.starts[k + 1]);
  return solution;
}

// The O(K M^2) recurrence the reference runs; kept as the test oracle.
inline std::vector<double> optimal_codebook_quadratic(const std::vector<double>& points,
                                                      const std::vector<double>& weights, int K) {
  return solve_codebook(points, weights, K, CodebookSolver::quadratic).centres;
}

// Centre of histogram bin b of the edges linspace(-1, 1, histogram_bins + 1); exact in double.
inline double histogram_bin_centre(int b) {
  return static_cast<double>(2 * b + 1 - histogram_bins) / static_cast<double>(histogram_bins);
}

}  // namespace Impl

// Exact optimal weighted 1-D k-means of sorted distinct points in [-1, 1] with positive weights
// in K >= 2 clusters of at least one point each, the first cluster measured from the fixed
// centre -1 and the last from +1. Returns the K centres, sorted: -1, the weighted means of the
// middle clusters, +1. Among equal costs the split with the smallest start index wins, exactly
// as in the O(K M^2) recurrence; this runs in O(K M log M).
inline std::vector<double> optimal_codebook(const std::vector<double>& points, const std::vector<double>& weights,
                                            int K) {
  return Impl::solve_codebook(points, weights, K, Impl::CodebookSolver::divide_and_conquer).centres;
}

// Weighted squared quantization error, sum_i weights[i] (points[i] - nearest codebook entry)^2,
// with the codebook sorted ascending. This is what the quantizer loses; it is at most the
// objective optimal_codebook() minimises, which also charges points to their own cluster's centre.
template <class Codebook>
double codebook_cost(const std::vector<double>& points, const std::vector<double>& weights, const Codebook& codebook) {
  if (points.size() != weights.size()) {
    std::ostringstream s;
    s << "koptim::gefen::codebook_cost: points and weights must have the same size, got " << points.size()
      << " points and " << weights.size() << " weights";
    throw ::koptim::ShapeError(s.str());
  }
  const std::vector<double> c(std::begin(codebook), std::end(codebook));
  if (c.empty() || !std::is_sorted(c.begin(), c.end())) {
    throw ::koptim::Error("koptim::gefen::codebook_cost: the codebook must be non-empty and sorted ascending");
  }
  double cost = 0.0;
  for (std::size_t i = 0; i < points.size(); ++i) {
    const auto upper = std::lower_bound(c.begin(), c.end(), points[i]);
    double d         = std::numeric_limits<double>::infinity();
    if (upper != c.end()) d = *upper - points[i];
    if (upper != c.begin()) d = std::min(d, points[i] - *(upper - 1));
    cost += weights[i] * d * d;
  }
  return cost;
}

// The Gefen codebook from histogram_bins counts (see accumulate_histogram): points are the
// centres of the non-empty bins, weights their counts, K = codebook_size. With fewer non-empty
// bins than entries there is no optimisation: the active centres padded with copies of the last,
// entry 0 then set to -1 and the last entry to +1, sorted (the reference's rule). T is the
// precision the quantizer stores (float or double).
template <class T = float>
std::array<T, codebook_size> codebook_from_histogram(const std::vector<std::int64_t>& counts) {
  static_assert(std::is_floating_point<T>::value, "codebook_from_histogram: T must be float or double");
  ::koptim::Impl::ScopedRegion region("koptim::gefen::codebook_from_histogram");
  if (counts.size() != static_cast<std::size_t>(histogram_bins)) {
    std::ostringstream s;
    s << "koptim::gefen::codebook_from_histogram: counts must have " << histogram_bins << " bins, got "
      << counts.size();
    throw ::koptim::ShapeError(s.str());
  }
  std::vector<double> points, weights;
  for (int b = 0; b < histogram_bins; ++b) {
    if (counts[b] < 0) {
      std::ostringstream s;
      s << "koptim::gefen::codebook_from_histogram: counts[" << b << "] = " << counts[b] << " is negative";
      throw ::koptim::Error(s.str());
    }
    if (counts[b] > 0) {
      points.push_back(Impl::histogram_bin_centre(b));
      weights.push_back(static_cast<double>(counts[b]));
    }
  }
  if (points.empty()) {
    throw ::koptim::Error("koptim::gefen::codebook_from_histogram: the histogram is empty (no counts)");
  }
  std::vector<double> centres;
  if (points.size() >= static_cast<std::size_t>(codebook_size)) {
    centres = optimal_codebook(points, weights, codebook_size);
  } else {
    centres = points;
    centres.resize(codebook_size, points.back());
    centres.front() = -1.0;
    centres.back()  = 1.0;
    std::sort(centres.begin(), centres.end());
  }
  std::array<T, codebook_size> codebook;
  for (int k = 0; k < codebook_size; ++k) codebook[k] = static_cast<T>(centres[k]);
  return codebook;
}

// Adds to counts (histogram_bins entries) the histogram of g normalised by scale block: each
// value is divided by the absolute maximum of its block of scale_block consecutive elements
// (0 when that maximum is 0) and counted in bin floor((x + 1) * histogram_bins / 2), clamped to
// the last bin. Counts accumulate, so one histogram can gather every tensor of a model. g's
// values should be finite (a value whose ratio is not finite is not counted). Runs on Kokkos::DefaultExecutionSpace;
// both views must be accessible from it.
template <class GView, class CountView>
void accumulate_histogram(const GView& g, std::int64_t scale_block, const CountView& counts) {
  static_assert(Kokkos::is_view<GView>::value && Kokkos::is_view<CountView>::value,
                "accumulate_histogram: g and counts must be Kokkos::Views");
  static_assert(GView::rank == 1 && CountView::rank == 1, "accumulate_histogram: g and counts must have rank 1");
  using T = typename GView::non_const_value_type;
  static_assert(std::is_same<T, float>::value || std::is_same<T, double>::value,
                "accumulate_histogram: g must hold float or double");
  static_assert(std::is_same<typename CountView::value_type, std::int64_t>::value,
                "accumulate_histogram: counts must be a non-const View of std::int64_t");
  using ExecSpace = Kokkos::DefaultExecutionSpace;
  static_assert(Kokkos::SpaceAccessibility<ExecSpace, typename GView::memory_space>::accessible &&
                    Kokkos::SpaceAccessibility<ExecSpace, typename CountView::memory_space>::accessible,
                "accumulate_histogram: g and counts must be accessible from Kokkos::DefaultExecutionSpace");

  ::koptim::Impl::ScopedRegion region("koptim::gefen::accumulate_histogram");
  const std::int64_t n = static_cast<std::int64_t>(g.extent(0));
  if (counts.extent(0) != static_cast<std::size_t>(histogram_bins)) {
    std::ostringstream s;
    s << "koptim::gefen::accumulate_histogram: counts must have " << histogram_bins << " bins, got "
      << counts.extent(0);
    throw ::koptim::ShapeError(s.str());
  }
  if (scale_block < 1 || n % scale_block != 0) {
    std::ostringstream s;
    s << "koptim::gefen::accumulate_histogram: scale_block = " << scale_block
      << " is not allowed: it must be positive and divide the number of elements (" << n << ")";
    throw ::koptim::ShapeError(s.str());
  }

  using Policy                        = Kokkos::TeamPolicy<ExecSpace>;
  using Member                        = typename Policy::member_type;
  const typename GView::const_type gc = g;
  // Per-thread copies on host backends, atomics on GPUs: the hot bins near 0 see most counts.
  // Made for the execution space that runs the kernel, whatever space counts lives in.
  using Scatter = Kokkos::Experimental::ScatterView<std::int64_t*, typename CountView::array_layout,
                                                    Kokkos::Device<ExecSpace, typename CountView::memory_space>>;
  Scatter hist(counts);
  const std::int64_t num_blocks = n / scale_block;
  // League sizes are int; very many small blocks go in several launches.
  constexpr std::int64_t max_league = std::int64_t(1) << 30;
  for (std::int64_t first = 0; first < num_blocks; first += max_league) {
    const int league = static_cast<int>(std::min(max_league, num_blocks - first));
    Kokkos::parallel_for(
        "koptim::gefen::accumulate_histogram", Policy(league, Kokkos::AUTO), KOKKOS_LAMBDA(const Member& team) {
          const std::int64_t begin = (first + team.league_rank()) * scale_block;
          T absmax                 = 0;
          Kokkos::parallel_reduce(
              Kokkos::TeamThreadRange(team, scale_block),
              [&](const std::int64_t k, T& m) { m = ::koptim::Impl::max(m, ::koptim::Impl::abs(gc(begin + k))); },
              Kokkos::Max<T>(absmax));
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, scale_block), [&](const std::int64_t k) {
            // In double, a float input never lands in the wrong bin: a float ratio closest to a
            // bin edge is still ~2^-37 away from it. |x| <= 1, so the cast is a floor.
            const double x = absmax > T(0) ? static_cast<double>(gc(begin + k)) / static_cast<double>(absmax) : 0.0;
            // A value that is not finite (only reachable with unchecked gradients) has no bin;
            // converting it to an integer would be undefined.
            if (!::koptim::Impl::is_finite(x)) return;
            std::int64_t bin = static_cast<std::int64_t>((x + 1.0) * (histogram_bins / 2));
            bin              = bin < histogram_bins ? bin : histogram_bins - 1;
            auto access      = hist.access();
            access(bin) += 1;
          });
        });
  }
  CountView destination = counts;
  Kokkos::Experimental::contribute(destination, hist);
}

}  // namespace gefen
}  // namespace koptim

#endif
