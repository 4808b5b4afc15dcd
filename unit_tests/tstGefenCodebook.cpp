// Tests of Gefen's codebook: the pinned-end optimal 1-D k-means (against exhaustive search,
// exact rational arithmetic for the tie rule, the O(K M^2) recurrence and weighted Lloyd-Max),
// the histogram-to-codebook rule, and the histogram kernel (against a host loop).
#include <koptim/gefen/koptim_GefenCodebook.hpp>

#include <Kokkos_Core.hpp>
#include "koptim_TestErrors.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

using koptim::gefen::codebook_size;
using koptim::gefen::histogram_bins;
namespace gimpl = koptim::gefen::Impl;

struct Weighted {
  std::vector<double> points, weights;
};

// The objective of one partition (cluster k = [starts[k], starts[k+1])), written directly:
// two passes per cluster, no prefix sums.
double partition_objective(const Weighted& d, const std::vector<int>& starts) {
  const int K  = static_cast<int>(starts.size());
  const int M  = static_cast<int>(d.points.size());
  double total = 0.0;
  for (int k = 0; k < K; ++k) {
    const int b = starts[k], e = k + 1 < K ? starts[k + 1] : M;
    double centre = k == 0 ? -1.0 : 1.0;
    if (k > 0 && k < K - 1) {
      double sw = 0.0, swx = 0.0;
      for (int i = b; i < e; ++i) {
        sw += d.weights[i];
        swx += d.weights[i] * d.points[i];
      }
      centre = swx / sw;
    }
    for (int i = b; i < e; ++i) total += d.weights[i] * (d.points[i] - centre) * (d.points[i] - centre);
  }
  return total;
}

// Calls f(starts) for every partition of M points into K non-empty contiguous clusters.
void for_each_partition(int M, int K, const std::function<void(const std::vector<int>&)>& f) {
  std::vector<int> starts(K, 0);
  std::function<void(int)> place = [&](int k) {
    if (k == K) {
      f(starts);
      return;
    }
    for (int s = starts[k - 1] + 1; s <= M - (K - k); ++s) {
      starts[k] = s;
      place(k + 1);
    }
  };
  place(1);
}

std::vector<double> centres_of(const Weighted& d, const std::vector<int>& starts) {
  const int K = static_cast<int>(starts.size());
  const int M = static_cast<int>(d.points.size());
  std::vector<double> c(K, 0.0);
  c.front() = -1.0;
  c.back()  = 1.0;
  for (int k = 1; k < K - 1; ++k) {
    double sw = 0.0, swx = 0.0;
    for (int i = starts[k]; i < (k + 1 < K ? starts[k + 1] : M); ++i) {
      sw += d.weights[i];
      swx += d.weights[i] * d.points[i];
    }
    c[k] = swx / sw;
  }
  return c;
}

// Sorted distinct points drawn from the bin centres, so data look like what the histogram gives.
Weighted random_bins(std::mt19937_64& rng, int M, const std::function<double()>& weight) {
  std::vector<int> bins(histogram_bins);
  std::iota(bins.begin(), bins.end(), 0);
  std::shuffle(bins.begin(), bins.end(), rng);
  bins.resize(M);
  std::sort(bins.begin(), bins.end());
  Weighted d;
  for (int b : bins) {
    d.points.push_back(gimpl::histogram_bin_centre(b));
    d.weights.push_back(weight());
  }
  return d;
}

// The histogram a host loop makes from gradient-like data: blocks of `block` normal values
// with a per-block scale, divided by the block absmax, counted as docs/gefen.md (first step, 2) says.
std::vector<std::int64_t> host_histogram(const std::vector<double>& g, std::int64_t block) {
  std::vector<std::int64_t> counts(histogram_bins, 0);
  for (std::size_t b = 0; b < g.size() / block; ++b) {
    double absmax = 0.0;
    for (std::int64_t k = 0; k < block; ++k) absmax = std::max(absmax, std::fabs(g[b * block + k]));
    for (std::int64_t k = 0; k < block; ++k) {
      const double x  = absmax > 0.0 ? g[b * block + k] / absmax : 0.0;
      const double fb = std::floor((x + 1.0) * 2048.0);
      counts[static_cast<int>(std::min(std::max(fb, 0.0), 4095.0))] += 1;
    }
  }
  return counts;
}

Weighted from_counts(const std::vector<std::int64_t>& counts) {
  Weighted d;
  for (int b = 0; b < histogram_bins; ++b) {
    if (counts[b] > 0) {
      d.points.push_back(gimpl::histogram_bin_centre(b));
      d.weights.push_back(static_cast<double>(counts[b]));
    }
  }
  return d;
}

std::vector<std::int64_t> gradient_histogram(std::mt19937_64& rng, std::int64_t n, std::int64_t block,
                                             bool heavy_tails) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::student_t_distribution<double> student(2.5);
  std::vector<double> g(n);
  for (std::int64_t b = 0; b < n / block; ++b) {
    const double scale = std::exp(normal(rng));
    for (std::int64_t k = 0; k < block; ++k) g[b * block + k] = scale * (heavy_tails ? student(rng) : normal(rng));
  }
  return host_histogram(g, block);
}

void expect_same_solution(const gimpl::CodebookSolution& a, const gimpl::CodebookSolution& b, const std::string& what) {
  EXPECT_EQ(a.starts, b.starts) << what;
  EXPECT_EQ(a.cost, b.cost) << what;  // bit for bit: both scan the same computed values
  EXPECT_EQ(a.centres, b.centres) << what;
}

void expect_valid_codebook(const std::vector<double>& c, int K) {
  ASSERT_EQ(static_cast<int>(c.size()), K);
  EXPECT_EQ(c.front(), -1.0);
  EXPECT_EQ(c.back(), 1.0);
  for (int k = 1; k < K; ++k) EXPECT_LT(c[k - 1], c[k]) << "entry " << k;
}

// Weighted Lloyd-Max with the end centres pinned at -1 and +1, from the given start; returns
// the centres and whether every cluster kept a point.
std::vector<double> lloyd_max(const Weighted& d, std::vector<double> c, bool& all_clusters_used) {
  const int K = static_cast<int>(c.size());
  const int M = static_cast<int>(d.points.size());
  std::vector<int> owner(M, -1);
  for (int iteration = 0; iteration < 2000; ++iteration) {
    bool changed = false;
    std::vector<double> sw(K, 0.0), swx(K, 0.0);
    for (int i = 0; i < M; ++i) {
      int best = 0;
      for (int k = 1; k < K; ++k) {
        if (std::fabs(d.points[i] - c[k]) < std::fabs(d.points[i] - c[best])) best = k;
      }
      changed  = changed || owner[i] != best;
      owner[i] = best;
      sw[best] += d.weights[i];
      swx[best] += d.weights[i] * d.points[i];
    }
    for (int k = 1; k < K - 1; ++k) {
      if (sw[k] > 0.0) c[k] = swx[k] / sw[k];
    }
    std::sort(c.begin(), c.end());
    if (!changed) break;
  }
  std::vector<bool> used(K, false);
  for (int i = 0; i < M; ++i) used[owner[i]] = true;
  all_clusters_used = std::all_of(used.begin(), used.end(), [](bool u) { return u; });
  return c;
}

}  // namespace

// The solver's optimum equals the best of all partitions, on small weighted inputs.
TEST(GefenCodebook, MatchesExhaustiveSearch) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  int cases = 0;
  for (int M = 2; M <= 10; ++M) {
    for (int K = 2; K <= M; ++K) {
      for (int trial = 0; trial < 6; ++trial) {
        Weighted d;
        if (trial % 2 == 0) {
          d = random_bins(rng, M, [&] { return std::floor(1.0 + 20.0 * uniform(rng)); });
        } else {
          // Arbitrary doubles in [-1, 1] with real-valued weights.
          for (int i = 0; i < M; ++i) d.points.push_back(2.0 * uniform(rng) - 1.0);
          std::sort(d.points.begin(), d.points.end());
          for (int i = 0; i < M; ++i) d.weights.push_back(0.1 + 5.0 * uniform(rng));
        }
        double best = std::numeric_limits<double>::infinity(), second = best;
        std::vector<int> best_starts;
        for_each_partition(M, K, [&](const std::vector<int>& s) {
          const double v = partition_objective(d, s);
          if (v < best) {
            second      = best;
            best        = v;
            best_starts = s;
          } else if (v < second) {
            second = v;
          }
        });
        const double scale = 1e-12 * std::max(1.0, best);
        for (auto solver : {gimpl::CodebookSolver::divide_and_conquer, gimpl::CodebookSolver::quadratic}) {
          const auto sol = gimpl::solve_codebook(d.points, d.weights, K, solver);
          EXPECT_NEAR(sol.cost, best, scale) << "M = " << M << ", K = " << K;
          EXPECT_NEAR(partition_objective(d, sol.starts), best, scale) << "M = " << M << ", K = " << K;
          expect_valid_codebook(sol.centres, K);
          if (second - best > 1e-9) {  // unique optimum: the centres are determined
            EXPECT_EQ(sol.starts, best_starts) << "M = " << M << ", K = " << K;
            const auto c = centres_of(d, best_starts);
            for (int k = 0; k < K; ++k) EXPECT_NEAR(sol.centres[k], c[k], 1e-14);
          }
        }
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 6 * 45);
}

// Ties: five equally spaced points, K = 3. {-1}{-.5,0}{.5,1} and {-1,-.5}{0,.5}{1} both cost
// 0.375 (exactly, in double); the rule keeps the smaller start of the last cluster.
TEST(GefenCodebook, TieKeepsSmallestStartIndex) {
  const std::vector<double> points{-1.0, -0.5, 0.0, 0.5, 1.0}, weights(5, 1.0);
  for (auto solver : {gimpl::CodebookSolver::divide_and_conquer, gimpl::CodebookSolver::quadratic}) {
    const auto sol = gimpl::solve_codebook(points, weights, 3, solver);
    EXPECT_EQ(sol.cost, 0.375);
    EXPECT_EQ(sol.starts, (std::vector<int>{0, 1, 3}));
    EXPECT_EQ(sol.centres, (std::vector<double>{-1.0, -0.25, 1.0}));
  }
}

// The tie rule in general, against exact rational arithmetic: with points k/8 and small integer
// weights, every cost is a rational with a known denominator, so exhaustive search finds the
// exact set of optimal partitions. Where every optimum's costs are dyadic (so the double
// arithmetic is exact too), the recurrence's rule, smallest split at each step from the last
// cluster backwards, picks the optimum whose starts are smallest read from the last cluster
// first; both solvers must pick it.
TEST(GefenCodebook, TieRuleAgainstExactArithmetic) {
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<int> coin(0, 1);
  int ties_checked = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const int M = std::uniform_int_distribution<int>(3, 8)(rng);  // weights 1..2: total weight <= 16
    std::vector<int> grid(17);
    std::iota(grid.begin(), grid.end(), -8);
    std::shuffle(grid.begin(), grid.end(), rng);
    std::vector<int> a(grid.begin(), grid.begin() + M), w(M);
    if (coin(rng) == 1) {  // mirror-symmetric data: many exact ties
      std::vector<int> positive(8);
      std::iota(positive.begin(), positive.end(), 1);
      std::shuffle(positive.begin(), positive.end(), rng);
      positive.resize(M / 2);
      std::sort(positive.begin(), positive.end());
      a.clear();
      for (auto it = positive.rbegin(); it != positive.rend(); ++it) a.push_back(-*it);
      if (M % 2 == 1) a.push_back(0);
      for (int v : positive) a.push_back(v);
      for (int i = 0; i < M / 2; ++i) w[i] = w[M - 1 - i] = 1 + coin(rng);
      if (M % 2 == 1) w[M / 2] = 1 + coin(rng);
    } else {
      std::sort(a.begin(), a.end());
      for (int& v : w) v = 1 + coin(rng);
    }
    const int m               = M;
    const int K               = std::uniform_int_distribution<int>(2, m)(rng);
    std::int64_t total_weight = 0;
    for (int v : w) total_weight += v;
    std::int64_t lcm = 1;
    for (std::int64_t v = 1; v <= total_weight; ++v) lcm = std::lcm(lcm, v);
    const std::int64_t L = 64 * lcm;  // common denominator of every cluster cost

    // Cost of cluster [b, e) as an exact numerator over L, and whether it is dyadic.
    auto cluster = [&](int k, int b, int e, bool& dyadic) {
      std::int64_t sw = 0, swa = 0, swa2 = 0, pinned = 0;
      const int centre8 = k == 0 ? -8 : 8;
      for (int i = b; i < e; ++i) {
        sw += w[i];
        swa += w[i] * a[i];
        swa2 += w[i] * a[i] * a[i];
        pinned += w[i] * (a[i] - centre8) * (a[i] - centre8);
      }
      if (k == 0 || k == K - 1) return pinned * (L / 64);         // over 64, always dyadic
      const std::int64_t num = sw * swa2 - swa * swa;             // over 64 * sw
      const std::int64_t den = 64 * sw / std::gcd(num, 64 * sw);  // gcd(0, x) = x
      dyadic                 = dyadic && (den & (den - 1)) == 0;
      return num * (L / (64 * sw));
    };
    std::int64_t best = std::numeric_limits<std::int64_t>::max();
    std::vector<std::vector<int>> optima;
    bool optima_dyadic = true;
    std::vector<bool> dyadic_of;
    for_each_partition(m, K, [&](const std::vector<int>& s) {
      bool dyadic       = true;
      std::int64_t cost = 0;
      for (int k = 0; k < K; ++k) cost += cluster(k, s[k], k + 1 < K ? s[k + 1] : m, dyadic);
      if (cost < best) {
        best = cost;
        optima.clear();
        dyadic_of.clear();
      }
      if (cost == best) {
        optima.push_back(s);
        dyadic_of.push_back(dyadic);
      }
    });
    for (bool dy : dyadic_of) optima_dyadic = optima_dyadic && dy;
    // Smallest starts read from the last cluster backwards.
    const auto expected = *std::min_element(optima.begin(), optima.end(), [](const auto& x, const auto& y) {
      return std::lexicographical_compare(x.rbegin(), x.rend(), y.rbegin(), y.rend());
    });
    std::vector<double> points, weights;
    for (int i = 0; i < m; ++i) {
      points.push_back(a[i] / 8.0);
      weights.push_back(w[i]);
    }
    for (auto solver : {gimpl::CodebookSolver::divide_and_conquer, gimpl::CodebookSolver::quadratic}) {
      const auto sol = gimpl::solve_codebook(points, weights, K, solver);
      EXPECT_NEAR(sol.cost, static_cast<double>(best) / static_cast<double>(L), 1e-12);
      EXPECT_TRUE(std::find(optima.begin(), optima.end(), sol.starts) != optima.end());
      if (optima_dyadic) {
        EXPECT_EQ(sol.starts, expected) << "trial " << trial;
      }
    }
    if (optima_dyadic && optima.size() > 1) ++ties_checked;
  }
  EXPECT_GE(ties_checked, 100);  // the rule was really exercised
}

// The O(K M log M) solver against the O(K M^2) recurrence on histograms of a few hundred bins,
// bit for bit, on data full of near and exact ties (equal, mirrored and tiny counts, equally
// spaced points), and with far fewer cost evaluations.
TEST(GefenCodebook, DivideAndConquerMatchesQuadratic) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> small(1, 3);
  std::vector<std::pair<std::string, Weighted>> inputs;
  inputs.emplace_back("counts 1..3", random_bins(rng, 300, [&] { return double(small(rng)); }));
  inputs.emplace_back("all counts 1", random_bins(rng, 400, [] { return 1.0; }));
  {
    Weighted d;  // equally spaced, equal weights: every mirror-image partition ties
    for (int b = 1600; b < 2496; b += 2) {
      d.points.push_back(gimpl::histogram_bin_centre(b));
      d.weights.push_back(2.0);
    }
    inputs.emplace_back("equally spaced, equal weights", d);
  }
  {
    std::vector<std::int64_t> counts(histogram_bins, 0);  // mirror-symmetric histogram
    for (int b = 0; b < histogram_bins / 2; ++b) {
      if (rng() % 6 == 0) counts[b] = counts[histogram_bins - 1 - b] = 1 + rng() % 4;
    }
    inputs.emplace_back("mirror-symmetric counts", from_counts(counts));
  }
  {
    auto counts = gradient_histogram(rng, 1 << 14, 64, false);
    for (int b = 0; b < histogram_bins; ++b) {
      if (b % 7 != 0) counts[b] = 0;  // keep a few hundred bins
    }
    inputs.emplace_back("gradient histogram, thinned", from_counts(counts));
  }
  {
    auto counts = gradient_histogram(rng, 1 << 12, 16, true);
    inputs.emplace_back("heavy-tailed gradient histogram", from_counts(counts));
  }
  for (const auto& [name, d] : inputs) {
    const int M = static_cast<int>(d.points.size());
    ASSERT_GE(M, 256) << name;
    for (int K : {2, 3, 5, 17, 64, 200, 256, M - 1, M}) {
      if (K > M) continue;
      const auto fast = gimpl::solve_codebook(d.points, d.weights, K, gimpl::CodebookSolver::divide_and_conquer);
      const auto slow = gimpl::solve_codebook(d.points, d.weights, K, gimpl::CodebookSolver::quadratic);
      expect_same_solution(fast, slow, name + ", M = " + std::to_string(M) + ", K = " + std::to_string(K));
      expect_valid_codebook(fast.centres, K);
      if (K > 16 && K < M / 2) {
        EXPECT_LT(fast.evaluations * 5, slow.evaluations) << name << ", K = " << K;
      }
    }
  }
}

// A case where a plain divide and conquer (children bounded by the node's argmin alone) returns
// another split than the full scan: counts spanning eleven orders of magnitude make splits tie
// to rounding, and rounding does not respect the monotonicity the method relies on. Found by
// random search and shrunk; the solver's tolerance band must absorb it.
TEST(GefenCodebook, DivideAndConquerSurvivesRoundingTies) {
  const std::vector<int> bins{3317, 3468, 3510, 3530, 3557, 3658, 3666, 3682, 3692, 3694, 3696, 3727, 3760, 3950};
  const std::vector<double> weights{23828, 27173290988, 22667, 1479,         21,   426911930, 41,
                                    32897, 4439083,     27,    317457020968, 7621, 12396,     8156481378};
  std::vector<double> points;
  for (int b : bins) points.push_back(gimpl::histogram_bin_centre(b));
  for (int K = 3; K <= 12; ++K) {
    const auto fast = gimpl::solve_codebook(points, weights, K, gimpl::CodebookSolver::divide_and_conquer);
    const auto slow = gimpl::solve_codebook(points, weights, K, gimpl::CodebookSolver::quadratic);
    expect_same_solution(fast, slow, "K = " + std::to_string(K));
  }
}

// A full-size gradient histogram (thousands of bins) with K = 256: the public entry point
// returns the recurrence's codebook, and its work stays near K M log2 M evaluations.
TEST(GefenCodebook, FullHistogramMatchesQuadratic) {
  std::mt19937_64 rng(3);
  const auto counts = gradient_histogram(rng, 1 << 13, 32, false);
  const Weighted d  = from_counts(counts);
  const int M       = static_cast<int>(d.points.size());
  ASSERT_GT(M, 1000);
  const auto fast =
      gimpl::solve_codebook(d.points, d.weights, codebook_size, gimpl::CodebookSolver::divide_and_conquer);
  const auto slow = gimpl::solve_codebook(d.points, d.weights, codebook_size, gimpl::CodebookSolver::quadratic);
  expect_same_solution(fast, slow, "M = " + std::to_string(M));
  EXPECT_EQ(koptim::gefen::optimal_codebook(d.points, d.weights, codebook_size), slow.centres);
  EXPECT_EQ(gimpl::optimal_codebook_quadratic(d.points, d.weights, codebook_size), slow.centres);
  EXPECT_LT(static_cast<double>(fast.evaluations), 2.0 * codebook_size * M * std::log2(static_cast<double>(M)));
  EXPECT_NEAR(fast.cost, partition_objective(d, fast.starts), 1e-12 * fast.cost);
}

// The codebook costs no more than weighted Lloyd-Max iterations with the same pinned ends,
// whenever Lloyd-Max keeps every cluster in use (then its partition is one the solver
// considers; with an empty cluster the problems differ, since the solver must give each
// cluster, the pinned -1 one included, a point).
TEST(GefenCodebook, NeverWorseThanLloydMax) {
  std::mt19937_64 rng(19);
  int compared = 0;
  for (int trial = 0; trial < 6; ++trial) {
    const auto counts = gradient_histogram(rng, 1 << 13, trial % 2 == 0 ? 32 : 128, trial >= 3);
    const Weighted d  = from_counts(counts);
    const int M       = static_cast<int>(d.points.size());
    for (int K : {4, 16, 64, 256}) {
      if (K > M) continue;
      const auto sol  = gimpl::solve_codebook(d.points, d.weights, K, gimpl::CodebookSolver::divide_and_conquer);
      const double dp = koptim::gefen::codebook_cost(d.points, d.weights, sol.centres);
      EXPECT_LE(dp, sol.cost * (1.0 + 1e-12));  // nearest-centre error <= the partition's
      // Two starts: uniform centres, and weighted quantiles of the data.
      std::vector<double> uniform(K), quantile(K);
      const double total = std::accumulate(d.weights.begin(), d.weights.end(), 0.0);
      double seen        = 0.0;
      int i              = 0;
      for (int k = 0; k < K; ++k) {
        uniform[k] = -1.0 + 2.0 * k / (K - 1);
        while (i < M - 1 && seen + d.weights[i] < total * (k + 0.5) / K) seen += d.weights[i++];
        quantile[k] = d.points[i];
      }
      quantile.front() = -1.0;
      quantile.back()  = 1.0;
      for (const auto& start : {uniform, quantile}) {
        bool all_used      = false;
        const auto lloyd   = lloyd_max(d, start, all_used);
        const double lcost = koptim::gefen::codebook_cost(d.points, d.weights, lloyd);
        if (!all_used) continue;
        EXPECT_LE(sol.cost, lcost * (1.0 + 1e-12) + 1e-12) << "trial " << trial << ", K = " << K;
        EXPECT_LE(dp, lcost * (1.0 + 1e-12) + 1e-12) << "trial " << trial << ", K = " << K;
        ++compared;
      }
    }
  }
  EXPECT_GE(compared, 24);
}

// codebook_cost is the nearest-entry squared error, against a direct scan of every entry.
TEST(GefenCodebook, CodebookCostIsNearestEntryError) {
  std::mt19937_64 rng(23);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  Weighted d = random_bins(rng, 500, [&] { return 1.0 + std::fabs(uniform(rng)); });
  std::vector<double> c(37);
  for (double& v : c) v = uniform(rng);
  std::sort(c.begin(), c.end());
  double direct = 0.0;
  for (std::size_t i = 0; i < d.points.size(); ++i) {
    double best = std::numeric_limits<double>::infinity();
    for (double v : c) best = std::min(best, (d.points[i] - v) * (d.points[i] - v));
    direct += d.weights[i] * best;
  }
  EXPECT_NEAR(koptim::gefen::codebook_cost(d.points, d.weights, c), direct, 1e-12 * direct);
  std::array<float, 3> f{-1.0f, 0.0f, 1.0f};
  EXPECT_DOUBLE_EQ(koptim::gefen::codebook_cost({-0.75, 0.25, 0.5}, {1.0, 2.0, 4.0}, f),
                   0.0625 + 2.0 * 0.0625 + 4.0 * 0.25);
}

// With at least 256 non-empty bins the codebook is the optimum over the bin centres weighted
// by the counts, in float and double.
TEST(GefenCodebook, FromHistogramSolvesTheDp) {
  std::mt19937_64 rng(29);
  for (bool heavy : {false, true}) {
    const auto counts = gradient_histogram(rng, 1 << 10, 64, heavy);
    const Weighted d  = from_counts(counts);
    ASSERT_GE(d.points.size(), 256u);
    const auto expected = gimpl::optimal_codebook_quadratic(d.points, d.weights, codebook_size);
    const auto cb       = koptim::gefen::codebook_from_histogram(counts);
    const auto cbd      = koptim::gefen::codebook_from_histogram<double>(counts);
    static_assert(std::is_same<decltype(cb), const std::array<float, 256>>::value, "float by default");
    for (int k = 0; k < codebook_size; ++k) {
      EXPECT_EQ(cb[k], static_cast<float>(expected[k]));
      EXPECT_EQ(cbd[k], expected[k]);
    }
    EXPECT_EQ(cb.front(), -1.0f);
    EXPECT_EQ(cb.back(), 1.0f);
  }
  // Exactly 256 bins: one bin a cluster, the ends replaced by -1 and +1.
  std::vector<std::int64_t> counts(histogram_bins, 0);
  std::vector<double> active;
  for (int b = 100; b < 100 + 256 * 3; b += 3) {
    counts[b] = 1 + b % 5;
    active.push_back(gimpl::histogram_bin_centre(b));
  }
  const auto cb = koptim::gefen::codebook_from_histogram<double>(counts);
  EXPECT_EQ(cb.front(), -1.0);
  EXPECT_EQ(cb.back(), 1.0);
  for (int k = 1; k < codebook_size - 1; ++k) EXPECT_EQ(cb[k], active[k]);
}

// Fewer than 256 non-empty bins: no DP; the active centres padded with the last one, entry 0
// set to -1 and entry 255 to +1, sorted.
TEST(GefenCodebook, FromHistogramPadsFewBins) {
  for (const std::vector<int>& bins : {std::vector<int>{2048}, std::vector<int>{0}, std::vector<int>{4095},
                                       std::vector<int>{10, 2000, 4000}, std::vector<int>{0, 1, 4094, 4095}}) {
    std::vector<std::int64_t> counts(histogram_bins, 0);
    for (int b : bins) counts[b] = 7;
    std::vector<double> expected;
    for (int b : bins) expected.push_back(gimpl::histogram_bin_centre(b));
    expected.resize(codebook_size, expected.back());
    expected.front() = -1.0;
    expected.back()  = 1.0;
    std::sort(expected.begin(), expected.end());
    const auto cb = koptim::gefen::codebook_from_histogram<double>(counts);
    for (int k = 0; k < codebook_size; ++k) EXPECT_EQ(cb[k], expected[k]) << "entry " << k;
  }
  // Three bins spelled out: the smallest active centre is overwritten by -1.
  std::vector<std::int64_t> counts(histogram_bins, 0);
  counts[1024] = counts[2048] = counts[3072] = 5;
  const auto cb                              = koptim::gefen::codebook_from_histogram(counts);
  EXPECT_EQ(cb[0], -1.0f);
  EXPECT_EQ(cb[1], static_cast<float>(gimpl::histogram_bin_centre(2048)));
  for (int k = 2; k < codebook_size - 1; ++k) EXPECT_EQ(cb[k], static_cast<float>(gimpl::histogram_bin_centre(3072)));
  EXPECT_EQ(cb[255], 1.0f);
  // 255 bins: still the padding rule.
  std::vector<std::int64_t> many(histogram_bins, 0);
  for (int b = 0; b < 255; ++b) many[16 * b + 3] = 1;
  const auto cb255 = koptim::gefen::codebook_from_histogram<double>(many);
  EXPECT_EQ(cb255[0], -1.0);
  for (int k = 1; k < 255; ++k) EXPECT_EQ(cb255[k], gimpl::histogram_bin_centre(16 * k + 3));
  EXPECT_EQ(cb255[255], 1.0);
}

namespace {

template <class T>
void check_histogram_kernel(std::int64_t block, const std::vector<T>& values) {
  using HostView = Kokkos::View<T*, Kokkos::HostSpace>;
  Kokkos::View<T*> g("g", values.size());
  HostView h("h", values.size());
  for (std::size_t i = 0; i < values.size(); ++i) h(i) = values[i];
  Kokkos::deep_copy(g, h);
  Kokkos::View<std::int64_t*> counts("counts", histogram_bins);
  koptim::gefen::accumulate_histogram(g, block, counts);
  // Counts accumulate: a second tensor (here the same one through a const view) adds to them.
  Kokkos::View<const T*> gc = g;
  koptim::gefen::accumulate_histogram(gc, block, counts);
  const auto result = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), counts);

  std::vector<double> as_double(values.begin(), values.end());
  std::vector<std::int64_t> expected = host_histogram(as_double, block);
  std::int64_t total                 = 0;
  for (int b = 0; b < histogram_bins; ++b) {
    EXPECT_EQ(result(b), 2 * expected[b]) << "bin " << b << ", block " << block;
    total += result(b);
  }
  EXPECT_EQ(total, 2 * static_cast<std::int64_t>(values.size()));
}

}  // namespace

// The histogram kernel against a host loop, float and double, for several scale blocks, a
// block of zeros, and values on the bin edges.
TEST(GefenCodebook, HistogramKernelMatchesHostLoop) {
  std::mt19937_64 rng(31);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> g(4 * 3 * 64 * 7);
  for (std::size_t i = 0; i < g.size(); ++i) g[i] = normal(rng) * std::exp(2.0 * normal(rng));
  for (std::size_t i = 0; i < 64 * 7; ++i) g[64 * 7 + i] = 0.0;  // zero blocks count in bin 2048
  for (std::int64_t block : {std::int64_t(1), std::int64_t(7), std::int64_t(64), std::int64_t(64 * 7),
                             static_cast<std::int64_t>(g.size())}) {
    check_histogram_kernel<double>(block, g);
    check_histogram_kernel<float>(block, std::vector<float>(g.begin(), g.end()));
  }
  // Every bin edge -1 + k/2048 with the block absmax 1: edge k lands in bin k (the last, +1,
  // in bin 4095), in both precisions.
  std::vector<double> edges;
  for (int k = 0; k <= histogram_bins; ++k) edges.push_back(-1.0 + k / 2048.0);
  check_histogram_kernel<double>(static_cast<std::int64_t>(edges.size()), edges);
  check_histogram_kernel<float>(static_cast<std::int64_t>(edges.size()),
                                std::vector<float>(edges.begin(), edges.end()));
  const auto expected = host_histogram(edges, static_cast<std::int64_t>(edges.size()));
  for (int k = 0; k < histogram_bins - 1; ++k) EXPECT_EQ(expected[k], 1) << "bin " << k;
  EXPECT_EQ(expected[histogram_bins - 1], 2);
}

namespace {

using koptim_test::expect_error;

}  // namespace

TEST(GefenCodebook, RejectsBadInput) {
  using koptim::gefen::optimal_codebook;
  const std::vector<double> p{-0.5, 0.0, 0.5}, w{1.0, 1.0, 1.0};
  expect_error([&] { optimal_codebook(p, w, 1); }, {"K = 1", "2 <= K"});
  expect_error([&] { optimal_codebook(p, w, 4); }, {"K = 4", "(3)"});
  expect_error<koptim::ShapeError>([&] { optimal_codebook(p, {1.0, 1.0}, 2); }, {"3 points and 2 weights"});
  expect_error([&] { optimal_codebook({-0.5, 0.5, 0.0}, w, 2); }, {"strictly increasing", "points[2] = 0"});
  expect_error([&] { optimal_codebook({-0.5, 0.0, 0.0}, w, 2); }, {"strictly increasing"});
  expect_error([&] { optimal_codebook({-1.5, 0.0, 0.5}, w, 2); }, {"points[0] = -1.5", "[-1, 1]"});
  expect_error([&] { optimal_codebook({-0.5, std::nan(""), 0.5}, w, 2); }, {"points[1]", "[-1, 1]"});
  expect_error([&] { optimal_codebook(p, {1.0, 0.0, 1.0}, 2); }, {"weights[1] = 0", "positive"});
  expect_error([&] { optimal_codebook(p, {1.0, -2.0, 1.0}, 2); }, {"weights[1] = -2"});
  expect_error([&] { gimpl::optimal_codebook_quadratic(p, w, 0); }, {"K = 0"});
  expect_error([&] { optimal_codebook(p, {1e17, 1.0, 1.0}, 2); }, {"weights[1] = 1", "too wide a range"});
  expect_error([&] { optimal_codebook(p, {1e200, 1.0, 1.0}, 2); }, {"1e150"});

  using koptim::gefen::codebook_from_histogram;
  expect_error<koptim::ShapeError>([] { codebook_from_histogram(std::vector<std::int64_t>(100, 1)); },
                                   {"4096 bins", "got 100"});
  expect_error([] { codebook_from_histogram(std::vector<std::int64_t>(4096, 0)); }, {"empty"});
  std::vector<std::int64_t> negative(4096, 1);
  negative[17] = -3;
  expect_error([&] { codebook_from_histogram(negative); }, {"counts[17] = -3", "negative"});

  expect_error<koptim::ShapeError>(
      [] {
        koptim::gefen::codebook_cost({0.0}, {1.0, 2.0}, std::vector<double>{0.0});
      },
      {"same size"});
  expect_error([] { koptim::gefen::codebook_cost({0.0}, {1.0}, std::vector<double>{1.0, 0.0}); }, {"sorted"});

  Kokkos::View<float*> g("g", 12);
  Kokkos::View<std::int64_t*> counts("counts", histogram_bins), short_counts("short", 10);
  using koptim::gefen::accumulate_histogram;
  expect_error<koptim::ShapeError>([&] { accumulate_histogram(g, 0, counts); }, {"scale_block = 0", "(12)"});
  expect_error<koptim::ShapeError>([&] { accumulate_histogram(g, 5, counts); }, {"scale_block = 5", "divide"});
  expect_error<koptim::ShapeError>([&] { accumulate_histogram(g, 4, short_counts); }, {"4096 bins", "got 10"});
}
