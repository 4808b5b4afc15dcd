// Tests of Gefen's partition rules: the behaviours the partition rule promises, the limits
// (p > 8, n / p >= 4, the cap above 1024), the tie rule, and the prefix-sum implementation
// against a direct one written here, on the host and through Kokkos Views.
#include <koptim/gefen/koptim_GefenPartition.hpp>

#include <Kokkos_Core.hpp>
#include "koptim_TestErrors.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using koptim::gefen::choose_partition;
using koptim::gefen::choose_partition_variance_drop;
namespace gimpl = koptim::gefen::Impl;

// ---- A direct implementation of the rules, block by block, no prefix sums ----

struct Naive {
  std::vector<std::int64_t> candidates;
  std::vector<double> scores;
};

Naive naive_neighbour_contrast_scores(const std::vector<double>& g) {
  const std::int64_t n = static_cast<std::int64_t>(g.size());
  std::vector<double> x(n);
  for (std::int64_t i = 0; i < n; ++i) x[i] = std::log(g[i] * g[i] + 1e-12);
  Naive r;
  for (std::int64_t p = 1; p <= n; ++p) {
    if (n % p != 0 || n / p < 4) continue;
    std::vector<double> m(n / p, 0.0);
    for (std::int64_t b = 0; b < n / p; ++b) {
      for (std::int64_t k = 0; k < p; ++k) m[b] += x[b * p + k];
      m[b] /= static_cast<double>(p);
    }
    double s = 0.0;
    for (std::size_t b = 0; b + 1 < m.size(); ++b) s += std::fabs(m[b + 1] - m[b]);
    r.candidates.push_back(p);
    r.scores.push_back(s / static_cast<double>(m.size() - 1));
  }
  return r;
}

// The qualifying candidate with the highest score, without the cap. min_block = 0 lifts the
// p > 8 limit, to show what it excludes.
std::int64_t naive_select(const Naive& r, std::int64_t min_block = 8) {
  std::int64_t best = 1;
  double best_score = -1.0;
  for (std::size_t t = 1; t + 1 < r.candidates.size(); ++t) {
    const double s = r.scores[t];
    if (r.candidates[t] > min_block && s > r.scores[t - 1] && s > r.scores[t + 1] && s >= best_score) {
      best       = r.candidates[t];
      best_score = s;
    }
  }
  return best;
}

std::int64_t naive_cap(std::int64_t p) {
  if (p <= 1024) return p;
  for (std::int64_t d = 1025; d <= p; ++d) {
    if (p % d == 0) return d;
  }
  return p;
}

std::int64_t naive_choose(const std::vector<double>& g) {
  return naive_cap(naive_select(naive_neighbour_contrast_scores(g)));
}

Naive naive_variance_scores(const std::vector<double>& g) {
  const std::int64_t n = static_cast<std::int64_t>(g.size());
  Naive r;
  for (std::int64_t p = 1; p < n; ++p) {
    if (n % p != 0) continue;
    double total = 0.0;
    for (std::int64_t b = 0; b < n / p; ++b) {
      double mean = 0.0, var = 0.0;
      for (std::int64_t k = 0; k < p; ++k) mean += g[b * p + k] * g[b * p + k];
      mean /= static_cast<double>(p);
      for (std::int64_t k = 0; k < p; ++k) {
        const double d = g[b * p + k] * g[b * p + k] - mean;
        var += d * d;
      }
      total += var / static_cast<double>(p);
    }
    r.candidates.push_back(p);
    r.scores.push_back(std::sqrt(total / static_cast<double>(n / p)));
  }
  return r;
}

// The p after the most negative step, before the p < 8 rule; 1 when there is no drop.
std::int64_t naive_variance_select_raw(const Naive& r) {
  std::int64_t best = 1;
  double drop       = 0.0;
  for (std::size_t i = 1; i < r.candidates.size(); ++i) {
    const double d = r.scores[i] - r.scores[i - 1];
    if (d < drop) {
      drop = d;
      best = r.candidates[i];
    }
  }
  return best;
}

std::int64_t naive_variance_choose(const std::vector<double>& g) {
  const std::int64_t p = naive_variance_select_raw(naive_variance_scores(g));
  return p < 8 ? 1 : p;
}

// ---- Inputs ----

// rows x cols, row-major, every row with its own gradient scale (log-normal) times noise.
std::vector<double> per_row_scales(std::mt19937_64& rng, std::int64_t rows, std::int64_t cols, double spread = 1.0) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> g(rows * cols);
  for (std::int64_t r = 0; r < rows; ++r) {
    const double scale = std::exp(spread * normal(rng));
    for (std::int64_t c = 0; c < cols; ++c) g[r * cols + c] = scale * normal(rng);
  }
  return g;
}

// An embedding table whose untouched rows (about two thirds) have zero gradient.
std::vector<double> embedding(std::mt19937_64& rng, std::int64_t rows, std::int64_t cols, bool touch_row0) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> g(rows * cols, 0.0);
  for (std::int64_t r = 0; r < rows; ++r) {
    if ((r == 0 && touch_row0) || (r > 0 && rng() % 3 == 0)) {
      for (std::int64_t c = 0; c < cols; ++c) g[r * cols + c] = 0.01 * normal(rng);
    }
  }
  return g;
}

std::vector<double> noise(std::mt19937_64& rng, std::int64_t n) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> g(n);
  for (double& v : g) v = normal(rng);
  return g;
}

// Per-column scales: the structure repeats with period cols, so block means of whole rows
// are all alike.
std::vector<double> per_column_scales(std::mt19937_64& rng, std::int64_t rows, std::int64_t cols) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> scale(cols), g(rows * cols);
  for (double& s : scale) s = std::exp(normal(rng));
  for (std::int64_t i = 0; i < rows * cols; ++i) g[i] = scale[i % cols] * normal(rng);
  return g;
}

template <class T>
Kokkos::View<T*> to_view(const std::vector<double>& g) {
  Kokkos::View<T*> v("g0", g.size());
  auto h = Kokkos::create_mirror_view(v);
  for (std::size_t i = 0; i < g.size(); ++i) h(i) = static_cast<T>(g[i]);
  Kokkos::deep_copy(v, h);
  return v;
}

std::int64_t from_view(const std::vector<double>& g) { return choose_partition(to_view<double>(g)); }

// A gradient value whose x = log(g^2 + 1e-12), as the rule computes it, is exactly target.
double gradient_with_log_square(double target) {
  const double start = std::sqrt(std::exp(target) - 1e-12);
  double up = start, down = start;
  for (int step = 0; step < 4000; ++step) {
    if (gimpl::log_square(up) == target) return up;
    if (gimpl::log_square(down) == target) return down;
    up   = std::nextafter(up, 2.0 * up);
    down = std::nextafter(down, 0.0);
  }
  ADD_FAILURE() << "no double g with log(g^2 + 1e-12) == " << target;
  return start;
}

using koptim_test::expect_error;

}  // namespace

// The rule's examples: a 64x96 matrix with per-row gradient scales gives 96.
TEST(GefenPartition, PerRowScales64x96Gives96) {
  std::mt19937_64 rng(1);
  for (int seed = 0; seed < 10; ++seed) {
    const auto g = per_row_scales(rng, 64, 96);
    EXPECT_EQ(choose_partition(g.data(), 64 * 96), 96);
    const std::vector<float> f(g.begin(), g.end());
    EXPECT_EQ(choose_partition(f.data(), 64 * 96), 96);
    EXPECT_EQ(from_view(g), 96);
    EXPECT_EQ(choose_partition(to_view<float>(g)), 96);
  }
}

// The rule's examples: 256x1024 with per-row scales gives 1024.
TEST(GefenPartition, PerRowScales256x1024Gives1024) {
  std::mt19937_64 rng(2);
  for (int seed = 0; seed < 3; ++seed) {
    const auto g = per_row_scales(rng, 256, 1024);
    EXPECT_EQ(choose_partition(g.data(), 256 * 1024), 1024);
    EXPECT_EQ(from_view(g), 1024);
  }
}

// The rule's examples: constant gradients give 1, whatever the constant and the shape. All
// scores are exactly 0 here (the rule's shift by x_0 keeps rounding out of them), so no
// candidate is a strict local maximum.
TEST(GefenPartition, ConstantGradientsGive1) {
  for (double value : {0.0, 1e-3, -2.5, 0.1, 1e10}) {
    for (std::int64_t n : {60, 64 * 96, 4096, 7000, 3 * 5 * 7 * 11 * 13}) {
      const std::vector<double> g(n, value);
      EXPECT_EQ(choose_partition(g.data(), n), 1) << "value " << value << ", n " << n;
      EXPECT_EQ(from_view(g), 1) << "value " << value << ", n " << n;
      EXPECT_EQ(choose_partition_variance_drop(g.data(), n), 1) << "value " << value << ", n " << n;
      EXPECT_EQ(choose_partition_variance_drop(to_view<double>(g)), 1);
      const auto prefix = gimpl::log_square_prefix(g.data(), n);
      for (double s : gimpl::neighbour_contrast_scores(prefix.data(), n).scores) EXPECT_EQ(s, 0.0);
    }
  }
}

// An embedding (500 x 64) whose untouched rows have zero gradient shares per row.
TEST(GefenPartition, EmbeddingWithUntouchedRows) {
  std::mt19937_64 rng(3);
  for (int seed = 0; seed < 6; ++seed) {
    const auto g = embedding(rng, 500, 64, seed % 2 == 0);
    EXPECT_EQ(choose_partition(g.data(), 500 * 64), 64) << "seed " << seed;
    EXPECT_EQ(naive_choose(g), 64);
    EXPECT_EQ(from_view(g), 64);
    EXPECT_EQ(choose_partition_variance_drop(g.data(), 500 * 64), naive_variance_choose(g));
  }
}

// Sharing needs a candidate p > 8 with a larger candidate after it and n / p >= 4, which no n
// below 60 has: every n < 60 gives 1, on structured and unstructured inputs alike. 60 (5 rows
// of 12) is the first size that can share.
TEST(GefenPartition, NoSharingBelow60) {
  std::mt19937_64 rng(4);
  for (std::int64_t n = 0; n < 60; ++n) {
    std::vector<std::vector<double>> inputs;
    for (int k = 0; k < 4; ++k) inputs.push_back(noise(rng, n));
    for (std::int64_t cols = 1; cols <= n; ++cols) {
      if (n % cols == 0) {
        inputs.push_back(per_row_scales(rng, n / cols, cols, 3.0));
        inputs.push_back(per_column_scales(rng, n / cols, cols));
      }
    }
    for (const auto& g : inputs) {
      EXPECT_EQ(choose_partition(g.data(), n), 1) << "n = " << n;
      if (n > 0) {
        EXPECT_EQ(from_view(g), 1) << "n = " << n;
      }
    }
  }
  for (std::int64_t n = 1; n < 60; ++n) {
    // Not even the ideal score profile qualifies: every candidate gets its own score.
    const auto d = gimpl::divisors(n);
    gimpl::PartitionScores s;
    for (std::int64_t p : d) {
      if (n / p >= 4) s.candidates.push_back(p);
    }
    for (std::size_t t = 0; t < s.candidates.size(); ++t) s.scores.push_back(t % 2 == 1 ? 1.0 + t : 0.0);
    EXPECT_EQ(gimpl::select_neighbour_contrast(s), 1) << "n = " << n;
  }
  std::mt19937_64 rng60(5);
  const auto g = per_row_scales(rng60, 5, 12, 2.0);
  EXPECT_EQ(choose_partition(g.data(), 60), 12);
}

// p > 8: rows of 8 elements are the best strict local maximum, but may not share.
TEST(GefenPartition, BlocksOf8OrLessNeverShare) {
  std::mt19937_64 rng(6);
  for (std::int64_t cols : {2, 4, 8}) {
    for (int seed = 0; seed < 5; ++seed) {
      const auto g    = per_row_scales(rng, 512 / cols, cols, 2.0);
      const auto full = naive_neighbour_contrast_scores(g);
      EXPECT_EQ(naive_select(full, 0), cols) << "the row structure is what the scores see";
      const std::int64_t p = choose_partition(g.data(), 512);
      EXPECT_NE(p, cols);
      EXPECT_TRUE(p == 1 || p > 8) << p;
      EXPECT_EQ(p, naive_choose(g));
    }
  }
}

// n / p >= 4: the candidates stop at n / 4, and the last candidate never qualifies, so tensors
// of 2 or 4 rows with per-row scales cannot share by row.
TEST(GefenPartition, AtLeastFourBlocks) {
  for (std::int64_t n : {1, 3, 4, 60, 64, 97, 720, 1024, 5040}) {
    std::vector<double> zeros(n + 1, 0.0);
    const auto s = gimpl::neighbour_contrast_scores(zeros.data(), n);
    std::vector<std::int64_t> expected;
    for (std::int64_t p = 1; p <= n; ++p) {
      if (n % p == 0 && n / p >= 4) expected.push_back(p);
    }
    EXPECT_EQ(s.candidates, expected) << "n = " << n;
  }
  std::mt19937_64 rng(7);
  for (std::int64_t rows : {2, 4}) {
    const auto g         = per_row_scales(rng, rows, 1024 / rows, 3.0);
    const std::int64_t p = choose_partition(g.data(), 1024);
    EXPECT_NE(p, 1024 / rows) << rows << " rows";
    EXPECT_EQ(p, naive_choose(g));
  }
}

// What qualifies, on scores given directly: a strict maximum against both neighbours (a
// plateau does not), never the first or the last candidate, p > 8.
TEST(GefenPartition, QualifyingNeedsStrictLocalMaximum) {
  gimpl::PartitionScores s;
  s.candidates = {1, 2, 4, 16, 32, 64, 128};
  s.scores     = {0.0, 0.0, 1.0, 3.0, 3.0, 0.0, 0.0};
  EXPECT_EQ(gimpl::select_neighbour_contrast(s), 1);  // 16 and 32 tie with each other
  s.scores = {0.0, 0.0, 1.0, 3.0, 3.5, 0.0, 0.0};
  EXPECT_EQ(gimpl::select_neighbour_contrast(s), 32);
  s.scores = {9.0, 0.0, 1.0, 2.0, 1.0, 0.0, 9.0};  // the ends score highest but cannot win
  EXPECT_EQ(gimpl::select_neighbour_contrast(s), 16);
  s.scores = {0.0, 5.0, 1.0, 2.0, 1.0, 3.0, 4.0};  // 2 is a maximum but 2 <= 8; 64 is below 128
  EXPECT_EQ(gimpl::select_neighbour_contrast(s), 16);
  s.candidates = {1, 3, 9, 27, 81};
  s.scores     = {0.0, 1.0, 2.0, 1.0, 0.0};  // 9 > 8 qualifies
  EXPECT_EQ(gimpl::select_neighbour_contrast(s), 9);
  s.scores = {0.0, 2.0, 1.0, 1.0, 0.0};
  EXPECT_EQ(gimpl::select_neighbour_contrast(s), 1);
}

// Ties between qualifying candidates go to the larger p. First on scores given directly, then
// end to end: x takes the exact values 8 + {0, 4, 63/16, 127/16} in a pattern of period 32 (runs of
// 16) plus one of period 128 (runs of 64), for which S(16) = S(64) = 63/16 exactly and both are
// strict local maxima; every sum the rule forms is exact, so the tie survives in double.
TEST(GefenPartition, TieGoesToLargerBlock) {
  gimpl::PartitionScores s;
  s.candidates = {1, 2, 4, 16, 32, 64, 128, 256};
  s.scores     = {0.0, 1.0, 0.5, 3.0, 1.0, 3.0, 0.5, 0.0};
  EXPECT_EQ(gimpl::select_neighbour_contrast(s), 64);
  s.scores = {0.0, 1.0, 0.5, 3.0, 1.0, 2.999, 0.5, 0.0};
  EXPECT_EQ(gimpl::select_neighbour_contrast(s), 16);

  const std::int64_t n = 1024;
  const double a = 4.0, b = 63.0 / 16.0;
  std::vector<double> g(n);
  for (std::int64_t i = 0; i < n; ++i) {
    const double x = 8.0 + ((i / 16) % 2 == 0 ? a : 0.0) + ((i / 64) % 2 == 0 ? b : 0.0);
    g[i]           = gradient_with_log_square(x);
  }
  const auto prefix = gimpl::log_square_prefix(g.data(), n);
  const auto scores = gimpl::neighbour_contrast_scores(prefix.data(), n);
  ASSERT_EQ(scores.candidates, (std::vector<std::int64_t>{1, 2, 4, 8, 16, 32, 64, 128, 256}));
  EXPECT_EQ(scores.scores[4], 63.0 / 16.0);
  EXPECT_EQ(scores.scores[6], 63.0 / 16.0);
  EXPECT_EQ(choose_partition(g.data(), n), 64);
  // The tie is exact in the host's arithmetic; a device's log may break it by an ulp either way.
  if (std::is_same<Kokkos::DefaultExecutionSpace, Kokkos::DefaultHostExecutionSpace>::value) {
    EXPECT_EQ(from_view(g), 64);
  } else {
    const auto p = from_view(g);
    EXPECT_TRUE(p == 16 || p == 64) << p;
  }
  EXPECT_EQ(naive_choose(g), 64);
}

// A winner above 1024 is replaced by its smallest divisor above 1024: 32 rows of 3072 give 1536.
TEST(GefenPartition, CapAbove1024) {
  using gimpl::cap_partition;
  EXPECT_EQ(cap_partition(1), 1);
  EXPECT_EQ(cap_partition(1024), 1024);
  EXPECT_EQ(cap_partition(1025), 1025);
  EXPECT_EQ(cap_partition(2048), 2048);
  EXPECT_EQ(cap_partition(3072), 1536);
  EXPECT_EQ(cap_partition(4096), 2048);
  EXPECT_EQ(cap_partition(2 * 1031), 1031);
  EXPECT_EQ(cap_partition(5 * 1031), 1031);
  EXPECT_EQ(cap_partition(1031 * 1033), 1031);
  for (std::int64_t p = 1000; p < 5000; ++p) EXPECT_EQ(cap_partition(p), naive_cap(p));

  std::mt19937_64 rng(8);
  const auto g = per_row_scales(rng, 32, 3072);
  EXPECT_EQ(naive_select(naive_neighbour_contrast_scores(g)), 3072);
  EXPECT_EQ(choose_partition(g.data(), 32 * 3072), 1536);
  EXPECT_EQ(from_view(g), 1536);
}

// The variance-drop option: per-row scales drop at the row length; rows of 4 drop at 4, which
// is below 8 and gives 1; a prime size has no step at all; constant tensors (ConstantGradients
// test) never drop. Everything against the direct implementation.
TEST(GefenPartition, VarianceDrop) {
  std::mt19937_64 rng(9);
  for (int seed = 0; seed < 5; ++seed) {
    const auto g = per_row_scales(rng, 64, 96);
    EXPECT_EQ(choose_partition_variance_drop(g.data(), 64 * 96), 96);
    EXPECT_EQ(naive_variance_choose(g), 96);
    EXPECT_EQ(choose_partition_variance_drop(to_view<double>(g)), 96);
    const std::vector<float> f(g.begin(), g.end());
    EXPECT_EQ(choose_partition_variance_drop(f.data(), 64 * 96), 96);
  }
  // E only grows from p to a multiple of p (total variance), so drops come after a
  // non-divisor: 3 rows of 4 constant values have E(3) > 0 = E(4), the only drop, at 4.
  const std::vector<double> rows4{1.0, 1.0, 1.0, 1.0, 3.0, 3.0, 3.0, 3.0, 0.5, 0.5, 0.5, 0.5};
  EXPECT_EQ(naive_variance_select_raw(naive_variance_scores(rows4)), 4);
  EXPECT_EQ(choose_partition_variance_drop(rows4.data(), 12), 1);
  // The rule's boundary: a drop at p = 8 shares (8 is not below partition_min_block), one at 7 does not.
  auto constant_rows = [](std::int64_t p) {
    std::vector<double> g;
    for (const double v : {1.0, 3.0, 0.5}) g.insert(g.end(), static_cast<std::size_t>(p), v);
    return g;
  };
  const auto rows8 = constant_rows(8), rows7 = constant_rows(7);
  EXPECT_EQ(naive_variance_select_raw(naive_variance_scores(rows8)), 8);
  EXPECT_EQ(choose_partition_variance_drop(rows8.data(), 24), 8);
  EXPECT_EQ(naive_variance_select_raw(naive_variance_scores(rows7)), 7);
  EXPECT_EQ(choose_partition_variance_drop(rows7.data(), 21), 1);
  const auto prime = noise(rng, 1031);
  EXPECT_EQ(choose_partition_variance_drop(prime.data(), 1031), 1);
  const std::vector<double> one{3.0};
  EXPECT_EQ(choose_partition_variance_drop(one.data(), 1), 1);
  // Scores against the direct implementation.
  for (const auto& g :
       {per_row_scales(rng, 48, 60), embedding(rng, 100, 32, true), noise(rng, 720), per_column_scales(rng, 30, 24)}) {
    const std::int64_t n = static_cast<std::int64_t>(g.size());
    std::vector<double> p1, p2;
    gimpl::variance_prefix(g.data(), n, p1, p2);
    const auto fast  = gimpl::variance_drop_scores(p1.data(), p2.data(), n);
    const auto naive = naive_variance_scores(g);
    ASSERT_EQ(fast.candidates, naive.candidates);
    double top = 0.0;
    for (double v : naive.scores) top = std::max(top, v);
    for (std::size_t t = 0; t < naive.scores.size(); ++t) {
      EXPECT_NEAR(fast.scores[t], naive.scores[t], 1e-6 * top) << "p = " << naive.candidates[t];
    }
    EXPECT_EQ(choose_partition_variance_drop(g.data(), n), naive_variance_choose(g));
    EXPECT_EQ(choose_partition_variance_drop(to_view<double>(g)), naive_variance_choose(g));
  }
}

// The prefix-sum scores against block-by-block ones, and the chosen p against the direct
// pipeline, on structured and unstructured inputs of sizes with many divisors.
TEST(GefenPartition, PrefixScoresMatchDirectComputation) {
  std::mt19937_64 rng(10);
  std::vector<std::vector<double>> inputs;
  for (std::int64_t rows : {4, 12, 30, 60}) {
    for (std::int64_t cols : {12, 24, 96, 100}) {
      inputs.push_back(per_row_scales(rng, rows, cols));
      inputs.push_back(per_column_scales(rng, rows, cols));
    }
  }
  for (std::int64_t n : {720, 5040, 4096, 6144, 1000, 97 * 8}) inputs.push_back(noise(rng, n));
  inputs.push_back(embedding(rng, 300, 48, false));
  inputs.push_back(embedding(rng, 300, 48, true));
  int shared = 0;
  for (const auto& g : inputs) {
    const std::int64_t n = static_cast<std::int64_t>(g.size());
    const auto prefix    = gimpl::log_square_prefix(g.data(), n);
    const auto fast      = gimpl::neighbour_contrast_scores(prefix.data(), n);
    const auto naive     = naive_neighbour_contrast_scores(g);
    ASSERT_EQ(fast.candidates, naive.candidates) << "n = " << n;
    for (std::size_t t = 0; t < naive.scores.size(); ++t) {
      EXPECT_NEAR(fast.scores[t], naive.scores[t], 1e-10 * (1.0 + naive.scores[t])) << "p = " << naive.candidates[t];
    }
    const std::int64_t p = choose_partition(g.data(), n);
    EXPECT_EQ(p, naive_choose(g)) << "n = " << n;
    shared += p > 1;
  }
  EXPECT_GE(shared, 10);  // the comparison covered sharing outcomes, not only p = 1
}

// The Kokkos entry points give the host functions' p, for double and float Views and for a
// strided View; the prefix sums they compute match the host's bit for bit on every host backend,
// whatever its thread count (they were a parallel scan, whose association on OpenMP follows the
// threads), and within rounding on a device (its math library).
TEST(GefenPartition, KokkosViewsMatchHost) {
  std::mt19937_64 rng(11);
  const std::vector<std::vector<double>> inputs{per_row_scales(rng, 64, 96),
                                                per_row_scales(rng, 30, 40),
                                                per_column_scales(rng, 50, 24),
                                                embedding(rng, 200, 64, false),
                                                noise(rng, 5040),
                                                noise(rng, 4096)};
  for (const auto& g : inputs) {
    const std::int64_t n = static_cast<std::int64_t>(g.size());
    EXPECT_EQ(from_view(g), choose_partition(g.data(), n));
    EXPECT_EQ(choose_partition_variance_drop(to_view<double>(g)), choose_partition_variance_drop(g.data(), n));
    const std::vector<float> f(g.begin(), g.end());
    EXPECT_EQ(choose_partition(to_view<float>(g)), choose_partition(f.data(), n));
    EXPECT_EQ(choose_partition_variance_drop(to_view<float>(g)), choose_partition_variance_drop(f.data(), n));

    const auto view = to_view<double>(g);
    const double x0 = gimpl::first_on_device(view, gimpl::LogSquare());
    // The same function on the host's and a device's math library (CUDA's log is within an ulp of
    // glibc's, and nvcc may fuse d * d + 1e-12): equal on host backends, within rounding on a device.
    if (std::is_same<Kokkos::DefaultExecutionSpace, Kokkos::DefaultHostExecutionSpace>::value)
      EXPECT_EQ(x0, gimpl::log_square(g[0]));
    else
      EXPECT_NEAR(x0, gimpl::log_square(g[0]), 1e-15 * (1.0 + std::abs(gimpl::log_square(g[0]))));
    const auto device = gimpl::device_prefix(n, gimpl::ShiftedLogSquare<Kokkos::View<const double*>>{view, x0});
    const auto host   = gimpl::log_square_prefix(g.data(), n);
    ASSERT_EQ(device.extent(0), host.size());
    const bool on_host = std::is_same<Kokkos::DefaultExecutionSpace, Kokkos::DefaultHostExecutionSpace>::value;
    for (std::int64_t i = 0; i <= n; ++i) {
      if (on_host) {
        EXPECT_EQ(device(i), host[i]);
      } else {
        EXPECT_NEAR(device(i), host[i], 1e-12 * (1.0 + std::fabs(host[i])) * static_cast<double>(n));
      }
    }
  }
  // A column of a 2-D View is strided.
  const auto g = per_row_scales(rng, 64, 96);
  Kokkos::View<double**, Kokkos::LayoutRight> two("two", g.size(), 3);
  auto h = Kokkos::create_mirror_view(two);
  for (std::size_t i = 0; i < g.size(); ++i) h(i, 1) = g[i];
  Kokkos::deep_copy(two, h);
  const auto column = Kokkos::subview(two, Kokkos::ALL(), 1);
  EXPECT_EQ(choose_partition(column), 96);
  EXPECT_EQ(choose_partition_variance_drop(column), 96);
}

TEST(GefenPartition, SmallTensors) {
  EXPECT_EQ(choose_partition(static_cast<const double*>(nullptr), 0), 1);
  EXPECT_EQ(choose_partition_variance_drop(static_cast<const float*>(nullptr), 0), 1);
  EXPECT_EQ(choose_partition(Kokkos::View<double*>("empty", 0)), 1);
  EXPECT_EQ(choose_partition_variance_drop(Kokkos::View<double*>("empty", 0)), 1);
  for (std::int64_t n = 1; n < 4; ++n) {
    const std::vector<double> g{1.0, 100.0, 0.01};
    EXPECT_EQ(choose_partition(g.data(), n), 1);
    EXPECT_EQ(choose_partition_variance_drop(g.data(), n), 1);
  }
  EXPECT_EQ(gimpl::divisors(1), (std::vector<std::int64_t>{1}));
  EXPECT_EQ(gimpl::divisors(36), (std::vector<std::int64_t>{1, 2, 3, 4, 6, 9, 12, 18, 36}));
  EXPECT_EQ(gimpl::divisors(97), (std::vector<std::int64_t>{1, 97}));
}

TEST(GefenPartition, RejectsBadInput) {
  const std::vector<double> ok(64, 1.0);
  expect_error<koptim::Error>([&] { choose_partition(ok.data(), -1); }, {"n = -1", ">= 0"});
  expect_error<koptim::Error>([&] { choose_partition(static_cast<const double*>(nullptr), 8); }, {"null", "n = 8"});
  expect_error<koptim::Error>([&] { choose_partition_variance_drop(static_cast<const float*>(nullptr), 8); }, {"null"});
  for (double bad : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(), 1e200}) {
    std::vector<double> g(64, 1.0);
    g[5] = bad;
    expect_error<koptim::NonFiniteError>([&] { choose_partition(g.data(), 64); }, {"g0[5]", "finite"});
    expect_error<koptim::NonFiniteError>([&] { choose_partition(to_view<double>(g)); }, {"g0(5)", "finite"});
    expect_error<koptim::NonFiniteError>([&] { choose_partition_variance_drop(g.data(), 64); }, {"g0[5]"});
    expect_error<koptim::NonFiniteError>([&] { choose_partition_variance_drop(to_view<double>(g)); }, {"g0(5)"});
    g[5] = 1.0;
    g[0] = bad;  // the shift by the first value must not turn inf - inf into a trap
    expect_error<koptim::NonFiniteError>([&] { choose_partition(g.data(), 64); }, {"g0[0]"});
    expect_error<koptim::NonFiniteError>([&] { choose_partition(to_view<double>(g)); }, {"g0(0)"});
    expect_error<koptim::NonFiniteError>([&] { choose_partition_variance_drop(g.data(), 64); }, {"g0[0]"});
    expect_error<koptim::NonFiniteError>([&] { choose_partition_variance_drop(to_view<double>(g)); }, {"g0(0)"});
  }
  // g^4 overflows double for the variance rule only.
  std::vector<double> big(64, 1.0);
  big[7] = 1e100;
  EXPECT_NO_THROW(choose_partition(big.data(), 64));
  EXPECT_NO_THROW(choose_partition(to_view<double>(big)));
  expect_error<koptim::NonFiniteError>([&] { choose_partition_variance_drop(big.data(), 64); }, {"g0[7]"});
}
