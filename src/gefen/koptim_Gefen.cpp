#include <koptim/comm/koptim_Communicator.hpp>

#include "../comm/koptim_Distributor.hpp"
#include "koptim_GefenKeys.hpp"
#include "../core/koptim_Check.hpp"
#include <koptim/core/impl/koptim_Elementwise.hpp>
#include "../core/koptim_Lanes.hpp"
#include <koptim/core/impl/koptim_Math.hpp>
#include <koptim/core/impl/koptim_Profiling.hpp>
#include "../diagonal/koptim_DiagonalMath.hpp"
#include <koptim/gefen/koptim_Gefen.hpp>
#include <koptim/gefen/koptim_GefenCodebook.hpp>
#include <koptim/gefen/koptim_GefenPartition.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <type_traits>

namespace koptim {

namespace {

using gefen::codebook_size;
constexpr int min_lookup_bins                = 8192;
constexpr int max_lookup_bins                = 65536;
const double min_codebook_gap                = std::ldexp(1.0, -14);  // for imports; see Lookup
constexpr std::int64_t max_scale_group       = 256;
constexpr std::int64_t factored_min_elements = 4096;

using Indices = Kokkos::View<std::uint8_t*, MemorySpace>;

// Host backends: a block of a step is an iteration of plain loops; device backends: a team.
constexpr bool host_kernels = std::is_same<ExecutionSpace, Kokkos::DefaultHostExecutionSpace>::value;

// Where a tensor's state lives and how big it is; a function of n, the shape, p and the options.
struct Layout {
  std::int64_t n = 0, p = 1, scale_block = 1, scale_blocks = 0, rows = 0, cols = 0, v_count = 0;
  GefenSecondMoment kind = GefenSecondMoment::full;
};

std::int64_t largest_divisor_at_most(std::int64_t n, std::int64_t cap) {
  for (std::int64_t d = std::min(n, cap); d > 1; --d)
    if (n % d == 0) return d;
  return 1;
}

Layout make_layout(const TensorRef& t, std::int64_t p, const GefenOptions& o) {
  Layout L;
  L.n = t.size;
  L.p = p;
  if (L.n == 0) return L;
  if (p > 1) {
    L.kind         = GefenSecondMoment::shared;
    L.scale_block  = p;
    L.scale_blocks = L.n / p;
    L.v_count      = L.n / p;
    return L;
  }
  L.scale_block  = largest_divisor_at_most(L.n, max_scale_group);
  L.scale_blocks = L.n / L.scale_block;
  // Extents in memory order (slowest first), without the dimensions of extent 1.
  std::vector<std::int64_t> dims;
  for (std::size_t r = 0; r < t.shape.size(); ++r) {
    const std::int64_t e = t.layout_right ? t.shape[r] : t.shape[t.shape.size() - 1 - r];
    if (e > 1) dims.push_back(e);
  }
  if (o.p1_second_moment == GefenP1SecondMoment::factored && L.n >= factored_min_elements && dims.size() >= 2) {
    L.kind    = GefenSecondMoment::factored;
    L.rows    = dims[0];
    L.cols    = L.n / L.rows;
    L.v_count = L.rows + L.cols;
  } else {
    L.kind    = GefenSecondMoment::full;
    L.v_count = L.n;
  }
  return L;
}

struct TensorState {
  Layout layout;
  Indices idx;
  Impl::Buffer absmax;
  Impl::Buffer v;         // shared: n / p values; full: n values
  Impl::Buffer row, col;  // factored: R (rows) and C (cols)

  TensorState() = default;
  TensorState(const std::string& name, ScalarType dtype, const Layout& L) : layout(L) {
    idx    = Indices("koptim::Gefen::" + name + "/indices", L.n);
    absmax = Impl::Buffer("koptim::Gefen::" + name + "/absmax", dtype, L.scale_blocks);
    if (L.kind == GefenSecondMoment::factored) {
      row = Impl::Buffer("koptim::Gefen::" + name + "/exp_avg_sq_row", dtype, L.rows);
      col = Impl::Buffer("koptim::Gefen::" + name + "/exp_avg_sq_col", dtype, L.cols);
    } else {
      v = Impl::Buffer("koptim::Gefen::" + name + "/exp_avg_sq", dtype, L.v_count);
    }
  }
  std::size_t bytes() const {
    return static_cast<std::size_t>(layout.n) + absmax.bytes() + v.bytes() + row.bytes() + col.bytes();
  }
};

// The nearest-entry lookup. For x in [-1, 1] the kernels compute y = (x + 1) bins / 2, clamped
// to [0, bins], and read pairs[int(y)] = lo | hi << 8: lo is the nearest entry to the lowest x
// of that bin and hi the next distinct entry above it (lo when there is none). The answer is hi
// when c_hi - x < x - c_lo in the kernel's precision T (the reference's rule: nearest, ties to
// the lower entry, repeated entries to their first copy); that comparison only grows from false
// to true as x grows (both differences round monotonically), so it is x >= thresholds_T[lo], the
// smallest T for which it holds, found here by bisection. That holds when the x of a bin,
// widened by the rounding of y, straddle at most one midpoint between entries: `bins` is the
// smallest power of two from 8192 for which every bin passes that check. Distinct entries of a
// learned codebook are at least half a histogram bin (2^-12) apart, and 8192 suffices for them;
// an imported codebook must keep its distinct entries min_codebook_gap apart, for which
// max_lookup_bins always suffices. Each pair has a 32-bit word, so that CPUs can gather them (no
// x86-64 gather loads 16 bits, and GCC vectorized no loop over words packing two pairs).
struct Lookup {
  int bins = 0;
  std::vector<std::uint32_t> words;  // bins + 1 pairs
  std::vector<float> thresholds_float;
  std::vector<double> thresholds_double;  // only when a tensor is double
};

// The smallest T x with c_hi - x < x - c_lo in T (c_lo < c_hi): a bisection over the T between
// them, ordered as integers.
template <class T>
T upper_threshold(float c_lo, float c_hi) {
  using I        = typename std::conditional<sizeof(T) == 4, std::int32_t, std::int64_t>::type;
  const auto key = [](T x) {
    I i;
    std::memcpy(&i, &x, sizeof i);
    return i < 0 ? std::numeric_limits<I>::min() - i : i;
  };
  const auto real = [](I k) {
    const I i = k < 0 ? std::numeric_limits<I>::min() - k : k;
    T x;
    std::memcpy(&x, &i, sizeof x);
    return x;
  };
  const T a = static_cast<T>(c_lo), b = static_cast<T>(c_hi);
  const auto upper = [&](T x) { return b - x < x - a; };
  I below = key(a), above = key(b);  // upper(a) is false, upper(b) true
  while (above - below > 1) {
    const I mid                        = below + (above - below) / 2;
    (upper(real(mid)) ? above : below) = mid;
  }
  return real(above);
}

// Whether any tensor of the set is double: the lookup then keeps thresholds in double too (the
// same on every rank, whichever tensors it holds).
bool has_double_tensors(const ParameterSet& ps) {
  for (const auto& p : ps.parameters())
    if (p.param.dtype == ScalarType::float64) return true;
  return false;
}

// The first entry nearest to x (ties to the lower entry), in double.
int nearest_entry_host(const std::vector<float>& c, double x) {
  const auto first_copy = [&](std::size_t k) {
    return static_cast<int>(std::lower_bound(c.begin(), c.end(), c[k]) - c.begin());
  };
  const auto above = std::lower_bound(c.begin(), c.end(), static_cast<float>(x)) - c.begin();
  if (above == 0) return 0;
  if (above == static_cast<std::ptrdiff_t>(c.size())) return first_copy(c.size() - 1);
  const int a = first_copy(static_cast<std::size_t>(above - 1)), b = first_copy(static_cast<std::size_t>(above));
  return x - static_cast<double>(c[a]) <= static_cast<double>(c[b]) - x ? a : b;
}

Lookup build_lookup(const std::vector<float>& c, bool with_double) {
  // The kernels' bin of x differs from the exact one only for x within the rounding of x + 1 of
  // a bin edge; the check widens each bin by far more than that.
  const double slack = std::ldexp(1.0, -20);  // the kernels' rounding of x + 1: at most 2^-23
  for (int bins = min_lookup_bins; bins <= max_lookup_bins; bins *= 2) {
    Lookup L;
    L.bins = bins;
    L.words.assign(static_cast<std::size_t>(bins) + 1, 0u);
    bool ok = true;
    for (int b = 0; b <= bins && ok; ++b) {
      const double lowest  = std::max(-1.0, -1.0 + 2.0 * b / bins - slack);
      const double highest = std::min(1.0, -1.0 + 2.0 * (b + 1) / bins + slack);
      const int lo         = nearest_entry_host(c, lowest);
      const auto next      = std::upper_bound(c.begin(), c.end(), c[lo]) - c.begin();
      const int hi         = next < codebook_size ? static_cast<int>(next) : lo;
      const int top        = nearest_entry_host(c, highest);
      ok                   = top == lo || top == hi;
      L.words[b]           = static_cast<std::uint32_t>(lo | hi << 8);
    }
    if (!ok) continue;
    L.thresholds_float.assign(codebook_size, std::numeric_limits<float>::infinity());
    if (with_double) L.thresholds_double.assign(codebook_size, std::numeric_limits<double>::infinity());
    for (int k = 0; k < codebook_size; ++k) {
      const auto next = std::upper_bound(c.begin(), c.end(), c[k]) - c.begin();
      if (next == codebook_size) continue;  // no entry above: hi = lo
      L.thresholds_float[k] = upper_threshold<float>(c[k], c[next]);
      if (with_double) L.thresholds_double[k] = upper_threshold<double>(c[k], c[next]);
    }
    return L;
  }
  // Unreachable: a learned codebook's distinct entries are at least 2^-12 apart, and import_state
  // refuses entries closer than 2^-14, which 65536 bins serve. A koptim error all the same, since
  // the codebook is data.
  throw Error(
      "koptim::Gefen: codebook entries too close for the nearest-entry lookup (65536 bins do not separate "
      "them; an internal error, please report it)");
}

// What the step kernels read besides the tensor's own state: the codebook and its lookup.
template <class T>
struct Tables {
  const float* codebook;
  const std::uint32_t* words;  // Lookup::words
  const T* thresholds;
  T bins;
};

// Sums of squares in double: of a float tensor (squares below 2^256) they never overflow; of a
// double tensor n squares each below the largest double could, with |g| near its limit
// sqrt(max) (about 1.3e154), leaving an Inf second moment (a block frozen, a factored row NaN).
// So a double tensor's terms are taken times 2^-64 (exact: a power of two) and the mean times
// 2^64 after the division: the same numbers as unscaled sums wherever those do not overflow and
// each scaled term is a normal double (|g| >= 2^-479, about 6e-145; R >= 2^-958); a smaller term
// loses bits to subnormal rounding, negligible beside eps.
template <class T>
struct SquareScale {
  KOKKOS_INLINE_FUNCTION static constexpr double down() { return 1.0; }
  KOKKOS_INLINE_FUNCTION static constexpr double up() { return 1.0; }
};
template <>
struct SquareScale<double> {
  KOKKOS_INLINE_FUNCTION static constexpr double down() { return 0x1p-64; }
  KOKKOS_INLINE_FUNCTION static constexpr double up() { return 0x1p64; }
};
// g^2 as a term of such a sum.
template <class T>
KOKKOS_INLINE_FUNCTION double square_term(T g) {
  return static_cast<double>(g) * static_cast<double>(g) * SquareScale<T>::down();
}
// The mean of n terms from their (scaled) sum.
template <class T>
KOKKOS_INLINE_FUNCTION double mean_of_terms(double sum, std::int64_t n) {
  return sum / static_cast<double>(n) * SquareScale<T>::up();
}

// The per-block reductions of the step in one pass: the sum of g^2 (in double, square_term) and
// max |m|.
template <class T>
struct BlockScan {
  Impl::Lanes<double, Impl::Plus> sum_sq;
  Impl::Lanes<T, Impl::MaxNonNegative> amax;

  KOKKOS_INLINE_FUNCTION BlockScan& operator+=(const BlockScan& o) {
    sum_sq += o.sum_sq;
    amax += o.amax;
    return *this;
  }
  KOKKOS_INLINE_FUNCTION void operator+=(const volatile BlockScan& o) volatile {
    sum_sq += o.sum_sq;
    amax += o.amax;
  }
};

// One tensor in the step's table (StepTable): its arrays, its layout, and the number of its
// first block in the table (Impl::chunk_entry finds a block's tensor by it).
template <class T>
struct StepEntry {
  T* w                     = nullptr;
  const T* g               = nullptr;
  std::uint8_t* idx        = nullptr;
  T* absmax                = nullptr;
  T* v                     = nullptr;  // shared or full
  const T* R               = nullptr;  // factored
  const T* C               = nullptr;
  const double* row_sum    = nullptr;  // factored: the sum of R (times SquareScale<T>::down()), this step
  std::int64_t S           = 1;        // elements per block (p, when shared)
  std::int64_t rows        = 0;
  std::int64_t cols        = 0;
  std::int64_t first_chunk = 0;
  GefenSecondMoment kind   = GefenSecondMoment::full;
};

// A factored tensor, for the factor kernels: first_chunk is its first row (in the row table) or
// its first run of factor_columns columns (in the column table).
constexpr int factor_columns = 16;
template <class T>
struct FactorEntry {
  const T* g        = nullptr;
  T* R              = nullptr;
  T* C              = nullptr;
  double* row_sum   = nullptr;
  std::int64_t rows = 0, cols = 0, first_chunk = 0;
};

// The tensors of one scalar type that this rank updates, in the order of their parameter
// groups, in waves: per wave, the factor kernels over its factored tensors, then one kernel (with
// its group's lr and weight decay) over all its tensors' blocks; a step is a few kernels whatever
// the number of tensors. A wave is a whole group, except on host backends where a group's
// factored tensors are cut into waves of about host_wave_bytes of gradient per thread (see
// there), so that the step finds the gradient that the factor kernels read still in cache.
template <class T>
struct StepTable {
  struct Wave {
    int group;
    std::int64_t first, last;                // entries
    std::int64_t block_begin, block_end;     // their blocks
    std::int64_t factor_first, factor_last;  // their factored tensors
    std::int64_t row_begin, row_end;         // the factored tensors' rows
    std::int64_t col_begin, col_end;         // and runs of factor_columns columns
  };
  Kokkos::View<StepEntry<T>*, MemorySpace> blocks;
  std::vector<Wave> waves;
  Kokkos::View<FactorEntry<T>*, MemorySpace> rows, cols;
  Kokkos::View<double*, MemorySpace> row_sums;
};

// The step table of the tensors of scalar type T for which mine(i) holds, from their state.
template <class T, class Mine>
StepTable<T> make_step_table(const ParameterSet& ps, std::vector<TensorState>& tensors, const Mine& mine) {
  StepTable<T> t;
  std::vector<std::size_t> order;
  std::int64_t factored = 0;
  for (std::size_t i = 0; i < ps.size(); ++i) {
    if (!mine(i) || ps[i].param.dtype != scalar_type_of<T>() || tensors[i].layout.n == 0) continue;
    order.push_back(i);
    if (tensors[i].layout.kind == GefenSecondMoment::factored) ++factored;
  }
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return ps[a].group < ps[b].group; });
  t.row_sums = Kokkos::View<double*, MemorySpace>("koptim::Gefen::row_sums", factored);
  const std::int64_t wave_bytes =
      host_kernels ? gefen::host_wave_bytes * ExecutionSpace().concurrency() : std::numeric_limits<std::int64_t>::max();
  std::vector<FactorEntry<T>> rows, cols;
  std::vector<StepEntry<T>> entries;
  std::int64_t blocks = 0, row_count = 0, col_chunks = 0, wave_factored_bytes = 0;
  for (const std::size_t i : order) {
    TensorState& st      = tensors[i];
    const Layout& L      = st.layout;
    const bool f         = L.kind == GefenSecondMoment::factored;
    const std::int64_t n = f ? L.n * static_cast<std::int64_t>(sizeof(T)) : 0;
    const auto at        = static_cast<std::int64_t>(entries.size());
    const auto fi        = static_cast<std::int64_t>(rows.size());
    if (t.waves.empty() || t.waves.back().group != ps[i].group ||
        (n > 0 && wave_factored_bytes > 0 && wave_factored_bytes + n > wave_bytes)) {
      t.waves.push_back({ps[i].group, at, at, blocks, blocks, fi, fi, row_count, row_count, col_chunks, col_chunks});
      wave_factored_bytes = 0;
    }
    wave_factored_bytes += n;
    StepEntry<T> e;
    e.w      = ps[i].param.template flat<T>().data();
    e.g      = ps[i].grad.template flat<T>().data();
    e.idx    = st.idx.data();
    e.absmax = st.absmax.view<T>().data();
    e.kind   = L.kind;
    e.S      = L.scale_block;
    if (f) {
      FactorEntry<T> r;
      r.g           = e.g;
      r.R           = st.row.view<T>().data();
      r.C           = st.col.view<T>().data();
      r.row_sum     = t.row_sums.data() + fi;
      r.rows        = L.rows;
      r.cols        = L.cols;
      r.first_chunk = row_count;
      rows.push_back(r);
      r.first_chunk = col_chunks;
      cols.push_back(r);
      row_count += L.rows;
      col_chunks += (L.cols + factor_columns - 1) / factor_columns;
      e.R       = r.R;
      e.C       = r.C;
      e.row_sum = r.row_sum;
      e.rows    = L.rows;
      e.cols    = L.cols;
    } else {
      e.v = st.v.view<T>().data();
    }
    e.first_chunk = blocks;
    blocks += L.scale_blocks;
    entries.push_back(e);
    auto& w       = t.waves.back();
    w.last        = at + 1;
    w.block_end   = blocks;
    w.factor_last = static_cast<std::int64_t>(rows.size());
    w.row_end     = row_count;
    w.col_end     = col_chunks;
  }
  t.rows   = Impl::device_table("koptim::Gefen::factor_rows", rows);
  t.cols   = Impl::device_table("koptim::Gefen::factor_columns", cols);
  t.blocks = Impl::device_table("koptim::Gefen::step_table", entries);
  return t;
}

}  // namespace
}  // namespace koptim

namespace Kokkos {
template <class T>
struct reduction_identity<koptim::BlockScan<T>> {
  KOKKOS_FORCEINLINE_FUNCTION static koptim::BlockScan<T> sum() { return koptim::BlockScan<T>(); }
};
}  // namespace Kokkos

namespace koptim {

struct Gefen::State {
  bool initialised = false;
  std::vector<float> codebook_host;
  Kokkos::View<float*, MemorySpace> codebook;
  Kokkos::View<std::uint32_t*, MemorySpace> lookup;  // Lookup::words
  Kokkos::View<float*, MemorySpace> thresholds_float;
  Kokkos::View<double*, MemorySpace> thresholds_double;
  int lookup_bins = 0;
  std::vector<TensorState> tensors;
  StepTable<float> f32;  // the step's tables over `tensors` (not state)
  StepTable<double> f64;

  void set_codebook(const std::vector<float>& c, bool with_double) {
    const Lookup L = build_lookup(c, with_double);
    codebook_host  = c;
    codebook       = Kokkos::View<float*, MemorySpace>("koptim::Gefen::codebook", codebook_size);
    lookup         = Kokkos::View<std::uint32_t*, MemorySpace>("koptim::Gefen::codebook_lookup", L.words.size());
    lookup_bins    = L.bins;
    Kokkos::deep_copy(codebook, Kokkos::View<const float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                                    c.data(), codebook_size));
    Kokkos::deep_copy(lookup,
                      Kokkos::View<const std::uint32_t*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                          L.words.data(), L.words.size()));
    thresholds_float  = Impl::device_table("koptim::Gefen::thresholds_float", L.thresholds_float);
    thresholds_double = Impl::device_table("koptim::Gefen::thresholds_double", L.thresholds_double);
    initialised       = true;
  }
  std::size_t lookup_bytes() const {
    return lookup.size() * sizeof(std::uint32_t) + thresholds_float.size() * sizeof(float) +
           thresholds_double.size() * sizeof(double);
  }
  // After the tensors and the codebook are in place.
  template <class Mine>
  void build_step_tables(const ParameterSet& ps, const Mine& mine) {
    f32 = make_step_table<float>(ps, tensors, mine);
    f64 = make_step_table<double>(ps, tensors, mine);
  }
  template <class T>
  const StepTable<T>& step_table() const {
    if constexpr (std::is_same<T, float>::value)
      return f32;
    else
      return f64;
  }
  template <class T>
  Tables<T> tables() const {
    Tables<T> t;
    t.codebook = codebook.data();
    t.words    = lookup.data();
    if constexpr (std::is_same<T, float>::value)
      t.thresholds = thresholds_float.data();
    else
      t.thresholds = thresholds_double.data();
    t.bins = static_cast<T>(lookup_bins);
    return t;
  }
};

namespace {

// The step of a momentum with second moment v: -lr m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps)
// from neg_m = -lr m / (1 - b1^t), and none where v is 0. A zero second moment means that every
// gradient of the element (or of its row, or block) so far was 0; its exact momentum is then 0
// too, but the quantized one of a p = 1 scale group is the codebook entry nearest 0 (never 0)
// times the group's absmax, which divided by eps alone would move the element by about
// 2.4e-4 absmax lr / eps every step (a dead unit's bias walking off by thousands). Also no 0/0
// when eps rounds to 0 in float.
template <class T>
KOKKOS_INLINE_FUNCTION T moment_step(T neg_m, T v, const Impl::AdamScalars<T>& s) {
  const bool zero = v == T(0);
  const T q       = neg_m / Impl::rms_denominator(zero ? T(1) : v, s.bc2_sqrt, s.eps);
  return zero ? T(0) : q;
}

// The new first moment from the stored (dequantized) one.
template <class T>
KOKKOS_INLINE_FUNCTION T momentum(T entry, T absmax_old, T g, T b1, T one_minus_b1) {
  return b1 * (entry * absmax_old) + one_minus_b1 * g;
}

// x = m / absmax, in [-1, 1], as m * (1 / absmax): one division per scale block, not one per
// element. When 1 / absmax overflows (a subnormal absmax, as momentum decays under zero
// gradients), m / absmax. An absmax of 0 means every m of the block is 0: x = 0.
template <class T>
struct Normaliser {
  T absmax, inverse;
  bool divide;
  KOKKOS_INLINE_FUNCTION explicit Normaliser(T a)
      : absmax(a), inverse(a > T(0) ? T(1) / a : T(0)), divide(!Impl::is_finite(inverse)) {}
  KOKKOS_INLINE_FUNCTION T operator()(T m) const { return divide ? m / absmax : m * inverse; }
};

// The index of the codebook entry nearest to x (ties to the lower entry, repeated entries to
// their first copy) through the lookup (see Lookup): no search loop and no branch, so that CPUs
// do not mispredict on the data and vectorize the loop (gathers). A NaN x reads a valid bin and
// gets lo.
template <class T>
KOKKOS_INLINE_FUNCTION int nearest_entry(T x, const T* thresholds, const std::uint32_t* words, T bins) {
  T y            = (x + T(1)) * (bins / T(2));
  y              = y > T(0) ? y : T(0);
  y              = y < bins ? y : bins;
  const int pair = static_cast<int>(words[static_cast<int>(y)]);
  const int lo   = pair & 255;
  const int hi   = pair >> 8;
  return x >= thresholds[lo] ? hi : lo;
}

using TeamPolicy = Kokkos::TeamPolicy<ExecutionSpace>;
using Member     = TeamPolicy::member_type;

// launch(first, count) for [begin, end) in pieces of at most INT_MAX teams: a league size is an
// int, and a wave's blocks are counted in 64 bits (a tensor whose element count has no divisor in
// [2, 256] has a block per element).
template <class Launch>
void in_leagues(std::int64_t begin, std::int64_t end, const Launch& launch) {
  constexpr std::int64_t most = std::numeric_limits<int>::max();
  for (std::int64_t b = begin; b < end; b += most) launch(b, static_cast<int>(std::min(most, end - b)));
}

// Host backends run a block's elements as plain loops over raw pointers (two passes: the
// block's reductions, then the update), which the compiler vectorizes; device backends spread
// them over a team. Both compute every value with the same operations in the same order: the
// sum of g^2 in reduction_lanes partial sums (element k of the block to lane k % lanes, the lanes
// added in order) and the largest |m|, an exact maximum in any order (host_kernels, above).
// A host block keeps the first host_kept new momenta of its first pass for its second.
constexpr std::int64_t host_kept = 1024;
// (At namespace scope, so that every compilation pass sees host_kept referenced: CUDA's device
// pass, which compiles none of the host loops, would warn of an unused variable.)
static_assert(max_scale_group <= host_kept, "a host block of p = 1 keeps all its momenta");

// The largest |m| as the largest magnitude bits (an integer maximum, which vectorizes; a
// floating maximum does not without -ffast-math): equal, for values that are not NaN, to the
// team reduction's maximum of |m|, which NaN never wins (its comparison is false); here NaN's
// bits are replaced by 0.
template <class T>
struct MagnitudeInt;
template <>
struct MagnitudeInt<float> {
  using type = std::int32_t;
};
template <>
struct MagnitudeInt<double> {
  using type = std::int64_t;
};

template <class T>
KOKKOS_INLINE_FUNCTION typename MagnitudeInt<T>::type ordered_magnitude(T x) {
  using I = typename MagnitudeInt<T>::type;
  I u;
  std::memcpy(&u, &x, sizeof u);
  u &= std::numeric_limits<I>::max();
  // The bits of +Inf: larger ones are NaN's. (Spelled here, not as a member of MagnitudeInt: CUDA
  // builds, which compile no host pass, would warn of an unreferenced member.)
  constexpr I infinity = static_cast<I>(sizeof(T) == 4 ? 0x7f800000LL : 0x7ff0000000000000LL);
  return u > infinity ? I(0) : u;
}

template <class T>
KOKKOS_INLINE_FUNCTION T from_magnitude(typename MagnitudeInt<T>::type u) {
  T x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// The host pass over elements [from, to) of a block: the new momenta (kept in m[k] when Keep),
// their largest magnitude bits.
template <bool Keep, class T>
KOKKOS_INLINE_FUNCTION typename MagnitudeInt<T>::type host_momenta(std::int64_t from, std::int64_t to,
                                                                   const T* KOKKOS_RESTRICT g,
                                                                   const std::uint8_t* KOKKOS_RESTRICT idx,
                                                                   const float* KOKKOS_RESTRICT cb, T absmax_old, T b1,
                                                                   T one_minus_b1, T* KOKKOS_RESTRICT m) {
  typename MagnitudeInt<T>::type top = 0;
  for (std::int64_t k = from; k < to; ++k) {
    const T mi = momentum(static_cast<T>(cb[idx[k]]), absmax_old, g[k], b1, one_minus_b1);
    if (Keep) m[k] = mi;
    const auto u = ordered_magnitude(mi);
    top          = top < u ? u : top;
  }
  return top;
}

// The sum of square_term(g[k]) over k in [0, n), in double, as Impl::team_lane_sum adds it:
// element k to lane k % reduction_lanes, then the lanes in order (a loop the compiler vectorizes).
template <class T>
KOKKOS_INLINE_FUNCTION double host_sum_of_squares(std::int64_t n, const T* KOKKOS_RESTRICT g) {
  constexpr int W = Impl::reduction_lanes;
  double lane[W]  = {};
  std::int64_t k  = 0;
  for (; k + W <= n; k += W)
    for (int l = 0; l < W; ++l) lane[l] += square_term(g[k + l]);
  for (int l = 0; k < n; ++k, ++l) lane[l] += square_term(g[k]);
  double sum = 0.0;
  for (int l = 0; l < W; ++l) sum += lane[l];
  return sum;
}

// The first pass of a host block of n elements: the sum of g^2 (WithSum) and the new absmax; the
// first host_kept momenta land in m.
template <bool WithSum, class T>
KOKKOS_INLINE_FUNCTION void host_scan(std::int64_t n, const T* KOKKOS_RESTRICT g,
                                      const std::uint8_t* KOKKOS_RESTRICT idx, const float* KOKKOS_RESTRICT cb,
                                      T absmax_old, const Impl::AdamScalars<T>& s, T* KOKKOS_RESTRICT m, double& sum_sq,
                                      T& amax) {
  if (WithSum) sum_sq = host_sum_of_squares(n, g);
  const std::int64_t kept = n < host_kept ? n : host_kept;
  auto top                = host_momenta<true>(0, kept, g, idx, cb, absmax_old, s.b1, s.one_minus_b1, m);
  const auto rest         = host_momenta<false>(kept, n, g, idx, cb, absmax_old, s.b1, s.one_minus_b1, m);
  amax                    = from_magnitude<T>(top < rest ? rest : top);
}

// The new momentum of element k of a block: kept by the first pass, or computed again.
template <bool Kept, class T>
KOKKOS_INLINE_FUNCTION T new_momentum(std::int64_t k, const T* KOKKOS_RESTRICT m, const T* KOKKOS_RESTRICT g,
                                      const std::uint8_t* KOKKOS_RESTRICT idx, const float* KOKKOS_RESTRICT cb,
                                      T absmax_old, const Impl::AdamScalars<T>& s) {
  return Kept ? m[k] : momentum(static_cast<T>(cb[idx[k]]), absmax_old, g[k], s.b1, s.one_minus_b1);
}

// The second pass of a shared block over elements [from, to): requantization and the update
// w = w decay + c_q scale.
template <bool Kept, bool Divide, class T>
KOKKOS_INLINE_FUNCTION void host_update_shared(std::int64_t from, std::int64_t to, const T* KOKKOS_RESTRICT g,
                                               std::uint8_t* KOKKOS_RESTRICT idx, T* KOKKOS_RESTRICT w,
                                               const T* KOKKOS_RESTRICT m, const Tables<T>& tb, T absmax_old,
                                               const Normaliser<T>& normal, T scale, const Impl::AdamScalars<T>& s) {
  const float* KOKKOS_RESTRICT cb            = tb.codebook;
  const std::uint32_t* KOKKOS_RESTRICT words = tb.words;
  const T* KOKKOS_RESTRICT thresholds        = tb.thresholds;
  const T inverse = normal.inverse, absmax = normal.absmax, decay = s.decay, bins = tb.bins;
  for (std::int64_t k = from; k < to; ++k) {
    const T mi  = new_momentum<Kept>(k, m, g, idx, cb, absmax_old, s);
    const int q = nearest_entry(Divide ? mi / absmax : mi * inverse, thresholds, words, bins);
    idx[k]      = static_cast<std::uint8_t>(q);
    w[k]        = w[k] * decay + static_cast<T>(cb[q]) * scale;
  }
}

// The reductions of one step (koptim_Gefen.hpp, "One step") over one block of n elements from `begin`: the new
// momentum's max |m|, and the sum of g^2 when the block shares its second moment (WithSum; otherwise it stays 0).
template <bool WithSum, class T>
KOKKOS_INLINE_FUNCTION BlockScan<T> scan_block(const Member& team, std::int64_t begin, std::int64_t n, const T* g,
                                               const std::uint8_t* idx, const float* cb, T absmax_old,
                                               const Impl::AdamScalars<T>& s) {
  BlockScan<T> scan;
  Impl::team_lane_reduce(team, n, scan, [&](BlockScan<T>& acc, int l, std::int64_t k) {
    const T gi = g[begin + k];
    if (WithSum) acc.sum_sq.add(l, square_term(gi));
    acc.amax.add(l, Impl::abs(momentum(static_cast<T>(cb[idx[begin + k]]), absmax_old, gi, s.b1, s.one_minus_b1)));
  });
  return scan;
}

// f(std::true_type()) where the block's normaliser divides, else f(std::false_type()): the
// host loops compiled for each.
template <class T, class F>
KOKKOS_INLINE_FUNCTION void with_divide(const Normaliser<T>& normal, const F& f) {
  if (normal.divide)
    f(std::true_type());
  else
    f(std::false_type());
}

// p > 1: block b of a tensor is a partition block (which is also its scale block): the shared
// second moment, the new absmax, then requantization and the parameter update. On a host
// thread (two passes over raw pointers, vectorized) or by a team.
template <class T>
KOKKOS_INLINE_FUNCTION void host_shared_block(const StepEntry<T>& e, std::int64_t b, const Tables<T>& tb,
                                              const Impl::AdamScalars<T>& s) {
  const std::int64_t P     = e.S;
  const std::int64_t begin = b * P;
  const T* gb              = e.g + begin;
  std::uint8_t* ib         = e.idx + begin;
  T* wb                    = e.w + begin;
  const T old              = e.absmax[b];
  T m[host_kept];
  double sum_sq = 0.0;
  T amax        = T(0);
  host_scan<true>(P, gb, ib, tb.codebook, old, s, m, sum_sq, amax);
  const T vb    = e.v[b] * s.b2 + s.one_minus_b2 * static_cast<T>(mean_of_terms<T>(sum_sq, P));
  const T scale = moment_step(s.neg_step_size * amax, vb, s);
  e.v[b]        = vb;
  const Normaliser<T> normal(amax);
  const std::int64_t kept = P < host_kept ? P : host_kept;
  const auto run          = [&](auto divide) {
    constexpr bool D = decltype(divide)::value;
    host_update_shared<true, D>(0, kept, gb, ib, wb, m, tb, old, normal, scale, s);
    host_update_shared<false, D>(kept, P, gb, ib, wb, m, tb, old, normal, scale, s);
  };
  with_divide(normal, run);
  e.absmax[b] = amax;
}

template <class T>
KOKKOS_INLINE_FUNCTION void team_shared_block(const Member& team, const StepEntry<T>& e, std::int64_t b,
                                              const Tables<T>& tb, const Impl::AdamScalars<T>& s) {
  const std::int64_t P     = e.S;
  const std::int64_t begin = b * P;
  // Read before the reduction, which every thread of the team must reach before the single
  // write at the end: no thread reads these after they are overwritten.
  const T old             = e.absmax[b];
  const T vb0             = e.v[b];
  const BlockScan<T> scan = scan_block<true>(team, begin, P, e.g, e.idx, tb.codebook, old, s);
  const T amax            = scan.amax.result();
  const T vb              = vb0 * s.b2 + s.one_minus_b2 * static_cast<T>(mean_of_terms<T>(scan.sum_sq.result(), P));
  const T scale           = moment_step(s.neg_step_size * amax, vb, s);
  const Normaliser<T> normal(amax);
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, P), [&](const std::int64_t k) {
    const std::int64_t i = begin + k;
    const T mi           = momentum(static_cast<T>(tb.codebook[e.idx[i]]), old, e.g[i], s.b1, s.one_minus_b1);
    const int q          = nearest_entry(normal(mi), tb.thresholds, tb.words, tb.bins);
    e.idx[i]             = static_cast<std::uint8_t>(q);
    e.w[i]               = e.w[i] * s.decay + static_cast<T>(tb.codebook[q]) * scale;
  });
  Kokkos::single(Kokkos::PerTeam(team), [&]() {
    e.v[b]      = vb;
    e.absmax[b] = amax;
  });
}

// Factored second moment, before the step, for the factored tensors of a wave: R and C from
// this step's gradient (a kernel over all their rows, one over all their runs of columns), then
// the sum of each R (a kernel over the tensors; in row order on a CPU, whatever the threads).
template <class T>
void update_factors(const ExecutionSpace& exec, const StepTable<T>& t, const typename StepTable<T>::Wave& wave, T b2,
                    T one_minus_b2) {
  if (wave.factor_last == wave.factor_first) return;
  const auto rows          = t.rows;
  const auto cols          = t.cols;
  const std::int64_t first = wave.factor_first;
  const std::int64_t last  = wave.factor_last;
  const auto row_moment    = [=] KOKKOS_FUNCTION(const FactorEntry<T>& f, std::int64_t r, double sum) {
    f.R[r] = f.R[r] * b2 + one_minus_b2 * static_cast<T>(mean_of_terms<T>(sum, f.cols));
  };
  if constexpr (host_kernels) {
    Kokkos::parallel_for(
        "koptim::Gefen::row_moments", Kokkos::RangePolicy<ExecutionSpace>(exec, wave.row_begin, wave.row_end),
        KOKKOS_LAMBDA(const std::int64_t q) {
          const FactorEntry<T> f = Impl::chunk_entry(rows, first, last, q);
          const std::int64_t r   = q - f.first_chunk;
          row_moment(f, r, host_sum_of_squares(f.cols, f.g + r * f.cols));
        });
  } else {
    in_leagues(wave.row_begin, wave.row_end, [&](const std::int64_t row0, const int count) {
      Kokkos::parallel_for(
          "koptim::Gefen::row_moments", TeamPolicy(exec, count, Kokkos::AUTO), KOKKOS_LAMBDA(const Member& team) {
            const std::int64_t q    = row0 + team.league_rank();
            const FactorEntry<T>& f = Impl::chunk_entry(rows, first, last, q);
            const std::int64_t r    = q - f.first_chunk;
            const T* g              = f.g + r * f.cols;
            const double sum = Impl::team_lane_sum(team, f.cols, [&](std::int64_t j) { return square_term(g[j]); });
            Kokkos::single(Kokkos::PerTeam(team), [&]() { row_moment(f, r, sum); });
          });
    });
  }
  // One 64-byte run of columns per index, walked down the rows: a column per index would read
  // one element per cache line on CPUs. Each column still sums its rows in order.
  Kokkos::parallel_for(
      "koptim::Gefen::col_moments", Kokkos::RangePolicy<ExecutionSpace>(exec, wave.col_begin, wave.col_end),
      KOKKOS_LAMBDA(const std::int64_t c) {
        const FactorEntry<T> f     = Impl::chunk_entry(cols, first, last, c);
        const std::int64_t j0      = (c - f.first_chunk) * factor_columns;
        const int width            = f.cols - j0 < factor_columns ? static_cast<int>(f.cols - j0) : factor_columns;
        double sum[factor_columns] = {};
        for (std::int64_t r = 0; r < f.rows; ++r) {
          for (int k = 0; k < width; ++k) sum[k] += square_term(f.g[r * f.cols + j0 + k]);
        }
        for (int k = 0; k < width; ++k)
          f.C[j0 + k] = f.C[j0 + k] * b2 + one_minus_b2 * static_cast<T>(mean_of_terms<T>(sum[k], f.rows));
      });
  if constexpr (host_kernels) {
    Kokkos::parallel_for(
        "koptim::Gefen::row_sum", Kokkos::RangePolicy<ExecutionSpace>(exec, first, last),
        KOKKOS_LAMBDA(const std::int64_t i) {
          const FactorEntry<T> f = rows(i);
          double acc             = 0.0;
          for (std::int64_t r = 0; r < f.rows; ++r) acc += static_cast<double>(f.R[r]) * SquareScale<T>::down();
          *f.row_sum = acc;
        });
  } else {
    Kokkos::parallel_for(
        "koptim::Gefen::row_sum", TeamPolicy(exec, static_cast<int>(last - first), Kokkos::AUTO),
        KOKKOS_LAMBDA(const Member& team) {
          const FactorEntry<T>& f = rows(first + team.league_rank());
          const double sum        = Impl::team_lane_sum(
                     team, f.rows, [&](std::int64_t r) { return static_cast<double>(f.R[r]) * SquareScale<T>::down(); });
          Kokkos::single(Kokkos::PerTeam(team), [&]() { *f.row_sum = sum; });
        });
  }
}

// The factored estimate R_r C_j / mean(R), in double, from inv_mean = 1 / mean(R) (0 while the
// factors are all 0): (R_r C_j) inv_mean for a float tensor; for a double tensor R_r (C_j
// inv_mean), since R_r C_j overflows once R and C pass about 1e154 (gradients of 1e77), while
// C_j / mean(R) is at most the number of columns.
template <class T>
KOKKOS_INLINE_FUNCTION T factored_moment(T R, T C, double inv_mean) {
  if constexpr (std::is_same<T, double>::value) return R * (C * inv_mean);
  return static_cast<T>(static_cast<double>(R) * static_cast<double>(C) * inv_mean);
}

// How a p = 1 block gets each element's second moment.
enum class Moment { full, factored_one_row, factored };

// The second pass of an unshared host block of n elements, all kept by the first pass: v per
// element (full, updated here) or R_r C_j / mean(R) (factored), the requantization and the update.
template <bool Divide, Moment K, class T>
KOKKOS_INLINE_FUNCTION void host_update_unshared(std::int64_t begin, std::int64_t n, const T* KOKKOS_RESTRICT g,
                                                 std::uint8_t* KOKKOS_RESTRICT idx, T* KOKKOS_RESTRICT w,
                                                 T* KOKKOS_RESTRICT v, const T* KOKKOS_RESTRICT R,
                                                 const T* KOKKOS_RESTRICT C, std::int64_t cols, double inv_mean,
                                                 const T* KOKKOS_RESTRICT m, const Tables<T>& tb,
                                                 const Normaliser<T>& normal, const Impl::AdamScalars<T>& s) {
  const float* KOKKOS_RESTRICT cb            = tb.codebook;
  const std::uint32_t* KOKKOS_RESTRICT words = tb.words;
  const T* KOKKOS_RESTRICT thresholds        = tb.thresholds;
  const T inverse = normal.inverse, absmax = normal.absmax, bins = tb.bins;
  const std::int64_t row0 = K == Moment::full ? 0 : begin / cols;
  for (std::int64_t k = 0; k < n; ++k) {
    const std::int64_t i = begin + k;
    const T mi           = m[k];
    const int q          = nearest_entry(Divide ? mi / absmax : mi * inverse, thresholds, words, bins);
    idx[i]               = static_cast<std::uint8_t>(q);
    T vi;
    if (K == Moment::full) {
      vi   = Impl::ema_square(v[i], g[i], s.b2, s.one_minus_b2);
      v[i] = vi;
    } else {
      const std::int64_t r = K == Moment::factored_one_row ? row0 : i / cols;
      vi                   = factored_moment(R[r], C[i - r * cols], inv_mean);
    }
    w[i] = w[i] * s.decay + moment_step(s.neg_step_size * (static_cast<T>(cb[q]) * absmax), vi, s);
  }
}

// R_r C_j / mean(R) = R_r C_j * inv_mean (0 while the factors are all 0).
template <class T>
KOKKOS_INLINE_FUNCTION double inverse_mean_row(const StepEntry<T>& e) {
  if (e.kind != GefenSecondMoment::factored) return 0.0;
  const double mean_row = mean_of_terms<T>(*e.row_sum, e.rows);  // row_sum holds R times SquareScale's down
  return mean_row > 0.0 ? 1.0 / mean_row : 0.0;
}

// p = 1: block a of a tensor is a scale group; the second moment per element (full) or from the
// factors (R_r C_j / mean(R), in double). On a host thread or by a team.
template <class T>
KOKKOS_INLINE_FUNCTION void host_unshared_block(const StepEntry<T>& e, std::int64_t a, const Tables<T>& tb,
                                                const Impl::AdamScalars<T>& s) {
  const std::int64_t S     = e.S;
  const std::int64_t begin = a * S;
  const T old              = e.absmax[a];
  T m[host_kept];
  double unused = 0.0;
  T amax        = T(0);
  host_scan<false>(S, e.g + begin, e.idx + begin, tb.codebook, old, s, m, unused, amax);
  const Normaliser<T> normal(amax);
  const bool full         = e.kind == GefenSecondMoment::full;
  const double inv_mean   = inverse_mean_row(e);
  const std::int64_t row0 = full ? 0 : begin / e.cols;
  const bool one_row      = !full && begin + S <= (row0 + 1) * e.cols;
  const auto run          = [&](auto divide, auto kind) {
    host_update_unshared<decltype(divide)::value, decltype(kind)::value>(begin, S, e.g, e.idx, e.w, e.v, e.R, e.C,
                                                                         e.cols, inv_mean, m, tb, normal, s);
  };
  const auto with_kind = [&](auto divide) {
    if (full)
      run(divide, std::integral_constant<Moment, Moment::full>());
    else if (one_row)
      run(divide, std::integral_constant<Moment, Moment::factored_one_row>());
    else
      run(divide, std::integral_constant<Moment, Moment::factored>());
  };
  with_divide(normal, with_kind);
  e.absmax[a] = amax;
}

template <class T>
KOKKOS_INLINE_FUNCTION void team_unshared_block(const Member& team, const StepEntry<T>& e, std::int64_t a,
                                                const Tables<T>& tb, const Impl::AdamScalars<T>& s) {
  const std::int64_t S     = e.S;
  const std::int64_t begin = a * S;
  const T old              = e.absmax[a];
  const T amax             = scan_block<false>(team, begin, S, e.g, e.idx, tb.codebook, old, s).amax.result();
  const Normaliser<T> normal(amax);
  const bool full       = e.kind == GefenSecondMoment::full;
  const double inv_mean = inverse_mean_row(e);
  // The row of the block's first element; a block within one row (S divides cols, the usual
  // case) never needs a division per element.
  const std::int64_t row0 = full ? 0 : begin / e.cols;
  const bool one_row      = !full && begin + S <= (row0 + 1) * e.cols;
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, S), [&](const std::int64_t k) {
    const std::int64_t i = begin + k;
    const T gi           = e.g[i];
    const T mi           = momentum(static_cast<T>(tb.codebook[e.idx[i]]), old, gi, s.b1, s.one_minus_b1);
    const int q          = nearest_entry(normal(mi), tb.thresholds, tb.words, tb.bins);
    e.idx[i]             = static_cast<std::uint8_t>(q);
    T vi;
    if (full) {
      vi     = Impl::ema_square(e.v[i], gi, s.b2, s.one_minus_b2);
      e.v[i] = vi;
    } else {
      const std::int64_t r = one_row ? row0 : i / e.cols;
      vi                   = factored_moment(e.R[r], e.C[i - r * e.cols], inv_mean);
    }
    e.w[i] = e.w[i] * s.decay + moment_step(s.neg_step_size * (static_cast<T>(tb.codebook[q]) * amax), vi, s);
  });
  Kokkos::single(Kokkos::PerTeam(team), [&]() { e.absmax[a] = amax; });
}

// The step of one parameter group's tensors of one scalar type (entries [first, last) of the
// table, their blocks [block_begin, block_end)) as one kernel: an iteration (CPUs) or a team
// (GPUs) per block, of whichever kind its tensor is.
template <class T>
struct HostBlocks {
  Kokkos::View<StepEntry<T>*, MemorySpace> table;
  std::int64_t first, last;
  Tables<T> tb;
  Impl::AdamScalars<T> s;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t c) const {
    const StepEntry<T> e = Impl::chunk_entry(table, first, last, c);
    if (e.kind == GefenSecondMoment::shared)
      host_shared_block(e, c - e.first_chunk, tb, s);
    else
      host_unshared_block(e, c - e.first_chunk, tb, s);
  }
};

template <class T>
struct TeamBlocks {
  Kokkos::View<StepEntry<T>*, MemorySpace> table;
  std::int64_t first, last, block_begin;
  Tables<T> tb;
  Impl::AdamScalars<T> s;
  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const std::int64_t c  = block_begin + team.league_rank();
    const StepEntry<T>& e = Impl::chunk_entry(table, first, last, c);
    if (e.kind == GefenSecondMoment::shared)
      team_shared_block(team, e, c - e.first_chunk, tb, s);
    else
      team_unshared_block(team, e, c - e.first_chunk, tb, s);
  }
};

template <class T>
void step_wave(const ExecutionSpace& exec, const StepTable<T>& t, const typename StepTable<T>::Wave& r,
               const Tables<T>& tb, const Impl::AdamScalars<T>& s) {
  if (r.block_end <= r.block_begin) return;
  if constexpr (host_kernels)
    Kokkos::parallel_for("koptim::Gefen::step", Kokkos::RangePolicy<ExecutionSpace>(exec, r.block_begin, r.block_end),
                         HostBlocks<T>{t.blocks, r.first, r.last, tb, s});
  else
    in_leagues(r.block_begin, r.block_end, [&](const std::int64_t begin, const int count) {
      Kokkos::parallel_for("koptim::Gefen::step", TeamPolicy(exec, count, Kokkos::AUTO),
                           TeamBlocks<T>{t.blocks, r.first, r.last, begin, tb, s});
    });
}

// Values of a state tensor as doubles (for validation).
std::vector<double> values_of(const StateTensor& t) {
  std::vector<double> out(static_cast<std::size_t>(t.size()));
  // An empty tensor: no copy (memcpy must not see the null pointers of empty vectors).
  if (out.empty()) return out;
  if (t.dtype == ScalarType::uint8) {
    std::copy(t.data.begin(), t.data.begin() + static_cast<std::ptrdiff_t>(out.size()), out.begin());
  } else if (t.dtype == ScalarType::float32) {
    std::vector<float> f(out.size());
    std::memcpy(f.data(), t.data.data(), f.size() * sizeof(float));
    std::copy(f.begin(), f.end(), out.begin());
  } else {
    std::memcpy(out.data(), t.data.data(), out.size() * sizeof(double));
  }
  return out;
}

struct Expected {
  ScalarType dtype;
  std::vector<std::int64_t> shape;
  enum Check { index, codebook, nonnegative } check;
  StateLayout layout    = StateLayout::any;
  std::string parameter = {};
};

// Whole tensors of type T, each shared by its owner.
template <class T>
Impl::ParameterSharing<T> whole_tensors(const ParameterSet& ps, const std::vector<int>& owner, int rank, int ranks) {
  std::vector<Impl::ParameterPart> parts;
  for (std::size_t i = 0; i < ps.size(); ++i)
    if (ps[i].param.dtype == scalar_type_of<T>() && ps[i].param.size > 0)
      parts.push_back({static_cast<int>(i), 0, ps[i].param.size, owner[i]});
  return Impl::ParameterSharing<T>("koptim::Gefen::parameters", std::move(parts), rank, ranks);
}

}  // namespace

struct Gefen::Sharing {
  Impl::ParameterSharing<float> f32;
  Impl::ParameterSharing<double> f64;
};

Gefen::Gefen(ParameterSet params, CommonOptions common, GefenOptions options, std::shared_ptr<comm::Communicator> comm)
    : Optimizer("Gefen", std::move(params), Impl::with_defaults(std::move(common), default_lr, default_weight_decay),
                comm.get()),
      options_(options),
      state_(std::make_unique<State>()),
      owner_(parameters().size(), 0) {
  const auto& ps = parameters();
  if (comm && comm->size() > 1) {
    comm_ = std::move(comm);
    rank_ = comm_->rank();
    // Before any check of this rank's own: a rank whose options differ must fail with the others
    // here, not throw alone and leave them waiting in this collective.
    Impl::check_same_on_all_ranks(*comm_, name(), Impl::describe_parameters(*this, Impl::describe_options(options_)));
    // Whole tensors, balanced by element count over both scalar types: the state is about one
    // byte per element in either precision. Every rank computes the same assignment.
    std::vector<double> costs;
    for (const auto& p : ps.parameters()) costs.push_back(static_cast<double>(p.param.size));
    owner_ = Impl::assign_blocks(costs, comm_->size());
    // The gather's buffers, agreed on: a rank whose memory runs out fails every rank here.
    Impl::run_together(comm_.get(), [&] {
      sharing_      = std::make_unique<Sharing>();
      sharing_->f32 = whole_tensors<float>(ps, owner_, rank_, comm_->size());
      sharing_->f64 = whole_tensors<double>(ps, owner_, rank_, comm_->size());
      sharing_->f32.prepare(ps);
      sharing_->f64.prepare(ps);
    });
  }
  Impl::check_option_ranges(name(), options_);
  // A value written must act or be refused: with force_p1 no partition is searched.
  Impl::refuse_ineffective(name(), options_.force_p1 && options_.partition_rule != GefenOptions{}.partition_rule,
                           std::string("partition_rule = ") + to_string(options_.partition_rule),
                           "force_p1 = true gives every tensor p = 1 without a partition search");
}

Gefen::~Gefen() = default;

bool Gefen::initialised() const { return state_->initialised; }

std::vector<float> Gefen::codebook() const { return state_->codebook_host; }

std::size_t Gefen::state_bytes() const {
  if (!state_->initialised) return 0;
  std::size_t n = codebook_size * sizeof(float) + state_->lookup_bytes();
  for (const auto& t : state_->tensors) n += t.bytes();
  return n;
}

std::vector<GefenTensorInfo> Gefen::tensor_info() const {
  std::vector<GefenTensorInfo> out;
  const auto& ps = parameters();
  for (std::size_t i = 0; i < ps.size(); ++i) {
    GefenTensorInfo info;
    info.name  = ps[i].name;
    info.shape = ps[i].param.shape;
    info.size  = ps[i].param.size;
    info.owner = owner_[i];
    if (state_->initialised && mine(i)) {
      const TensorState& t      = state_->tensors[i];
      const Layout& L           = t.layout;
      info.partition            = L.p;
      info.blocks               = L.n / L.p;
      info.scale_block          = L.scale_block;
      info.scale_blocks         = L.scale_blocks;
      info.second_moment        = L.kind;
      info.second_moment_values = L.v_count;
      info.rows                 = L.rows;
      info.cols                 = L.cols;
      info.state_bytes          = t.bytes();
    }
    out.push_back(info);
  }
  return out;
}

std::string Gefen::summary() const {
  const auto infos = tensor_info();
  std::ostringstream s;
  const std::int64_t n = parameters().num_elements();
  s << "Gefen: " << infos.size() << " tensors, " << n << " parameters";
  if (!state_->initialised) {
    s << "; not initialised yet (the first step chooses the partitions and learns the codebook)\n";
    return s.str();
  }
  const std::size_t bytes = state_bytes();
  s << ", state " << bytes << " bytes = " << std::fixed << std::setprecision(3)
    << (n > 0 ? static_cast<double>(bytes) / static_cast<double>(n) : 0.0) << " bytes/parameter (codebook and lookup "
    << codebook_size * sizeof(float) + state_->lookup_bytes() << ")\n";
  if (comm_) {
    std::size_t held = 0;
    for (std::size_t i = 0; i < infos.size(); ++i) held += mine(i) ? 1 : 0;
    s << "sharded over " << comm_->size() << " ranks: rank " << rank_ << " holds the state of " << held << " of "
      << infos.size() << " tensors (the others are listed with p = 0)\n";
  }
  std::size_t wname = 6;
  for (const auto& i : infos) wname = std::max(wname, i.name.size());
  s << std::left << std::setw(static_cast<int>(wname)) << "tensor" << std::right << std::setw(22) << "shape"
    << std::setw(9) << "p" << std::setw(10) << "blocks" << std::setw(12) << "scale_block" << std::setw(10) << "2nd_mom"
    << std::setw(12) << "bytes" << std::setw(10) << "B/param"
    << "\n";
  for (const auto& i : infos) {
    s << std::left << std::setw(static_cast<int>(wname)) << i.name << std::right << std::setw(22)
      << shape_string(i.shape) << std::setw(9) << i.partition << std::setw(10) << i.blocks << std::setw(12)
      << i.scale_block << std::setw(10) << to_string(i.second_moment) << std::setw(12) << i.state_bytes << std::setw(10)
      << std::setprecision(3) << (i.size > 0 ? static_cast<double>(i.state_bytes) / static_cast<double>(i.size) : 0.0)
      << "\n";
  }
  return s.str();
}

void Gefen::initialise(const ExecutionSpace& exec) {
  Impl::ScopedRegion region("koptim::Gefen::initialise");
  // The first step builds the state from the gradients on the host's side (the partition, the
  // histogram, the codebook's dynamic programme): it waits for them, and its kernels and copies
  // run on the default instance, finished before the step's own kernels on exec begin.
  Impl::fence(exec, "koptim::Gefen::initialise: the first gradients");
  const auto& ps       = parameters();
  const std::size_t nt = ps.size();
  // Everything is built on the side and swapped in at the end: a throw changes nothing.
  auto fresh = std::make_unique<State>();
  fresh->tensors.resize(nt);
  // Sharded, each rank sees only its tensors' gradients: the partition rule needs only the
  // tensor itself, and the histogram is a sum over tensors, so the counts of all ranks add up to
  // the counts of one process (exact in double below 2^53).
  std::vector<std::int64_t> h(gefen::histogram_bins, 0);
  // A failure on one rank (an allocation, a bad gradient) fails every rank before the collective
  // below, which the failing rank would never reach.
  Impl::run_together(comm_.get(), [&] {
    std::vector<Layout> layouts(nt);
    for (std::size_t i = 0; i < nt; ++i) {
      if (!mine(i)) continue;
      const auto& p     = ps[i];
      std::int64_t part = 1;
      if (!options_.force_p1 && p.grad.size > 0) {
        auto choose = [&]() {
          return dispatch(p.grad.dtype, [&](auto zero) {
            using T      = decltype(zero);
            const auto g = p.grad.flat<T>();
            return options_.partition_rule == GefenPartitionRule::neighbour_contrast
                       ? gefen::choose_partition(g)
                       : gefen::choose_partition_variance_drop(g);
          });
        };
        if (common_options().nonfinite_gradient == NonFiniteGradient::unchecked) {
          // Unchecked gradients are used as they are: a first gradient outside the partition
          // rule's domain (not finite, or its square or fourth power not finite in double) gets
          // no shared second moment instead of an error.
          try {
            part = choose();
          } catch (const NonFiniteError&) {
            part = 1;
          }
        } else {
          part = choose();
        }
      }
      layouts[i] = make_layout(p.param, part, options_);
    }
    Kokkos::View<std::int64_t*, MemorySpace> counts("koptim::Gefen::histogram", gefen::histogram_bins);
    for (std::size_t i = 0; i < nt; ++i) {
      const auto& p = ps[i];
      if (!mine(i) || p.grad.size == 0) continue;
      dispatch(p.grad.dtype, [&](auto zero) {
        using T = decltype(zero);
        gefen::accumulate_histogram(p.grad.flat<T>(), layouts[i].scale_block, counts);
      });
    }
    Kokkos::deep_copy(
        Kokkos::View<std::int64_t*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(h.data(), h.size()),
        counts);
    for (std::size_t i = 0; i < nt; ++i)
      if (mine(i)) fresh->tensors[i] = TensorState(ps[i].name, ps[i].param.dtype, layouts[i]);
  });
  if (comm_) {
    Kokkos::View<double*, MemorySpace> sum("koptim::Gefen::histogram_sum", gefen::histogram_bins);
    auto hs = Kokkos::create_mirror_view(sum);
    for (int b = 0; b < gefen::histogram_bins; ++b) hs(b) = static_cast<double>(h[b]);
    Kokkos::deep_copy(sum, hs);
    comm_->all_reduce_sum(sum);
    Kokkos::deep_copy(hs, sum);
    for (int b = 0; b < gefen::histogram_bins; ++b) h[b] = static_cast<std::int64_t>(hs(b));
  }
  // The ratios counted: every element's, except (with nonfinite_gradient: unchecked) those of
  // non-finite values, which the histogram leaves out.
  std::int64_t total = 0;
  for (const auto n : h) total += n;
  // From here on every rank works on the same global histogram, so the codebook is the same on
  // every rank; only an allocation can still fail on one rank alone.
  Impl::run_together(comm_.get(), [&] {
    std::vector<float> cb(codebook_size);
    if (total > 0) {
      const auto c = gefen::codebook_from_histogram<float>(h);
      std::copy(c.begin(), c.end(), cb.begin());
    } else {
      // Only empty tensors, or (unchecked) no finite gradient value: any valid codebook will do.
      for (int k = 0; k < codebook_size; ++k) cb[k] = static_cast<float>(-1.0 + 2.0 * k / (codebook_size - 1));
    }
    fresh->set_codebook(cb, has_double_tensors(ps));
    fresh->build_step_tables(ps, [&](std::size_t i) { return mine(i); });
  });
  Impl::fence(ExecutionSpace(), "koptim::Gefen: the state initialised");
  state_ = std::move(fresh);
}

void Gefen::update(const ExecutionSpace& exec, std::int64_t t, const std::vector<double>& lrs) {
  if (!state_->initialised) initialise(exec);  // built to the side: a throw there changes nothing
  state_changing();
  const auto& ps = parameters();
  State& st      = *state_;
  // One small collective per step, so that a rank whose update failed fails every rank instead of
  // leaving them in the all-gather.
  Impl::run_together(comm_.get(), [&] {
    // Per scalar type and wave (a parameter group, or part of one): the factors of its factored
    // tensors, then one kernel over all its tensors' blocks.
    const auto step_all = [&](auto zero) {
      using T                   = decltype(zero);
      const StepTable<T>& table = st.step_table<T>();
      const auto b2             = static_cast<T>(options_.betas[1]);
      for (const auto& wave : table.waves) {
        update_factors(exec, table, wave, b2, static_cast<T>(1.0 - options_.betas[1]));
        step_wave(exec, table, wave, st.tables<T>(),
                  Impl::adam_scalars<T>(options_.betas, options_.eps, t, lrs[wave.group], weight_decay(wave.group)));
      }
    };
    step_all(0.0f);
    step_all(0.0);
  });
  if (comm_) {
    Impl::ScopedRegion region("koptim::Gefen::all_gather_parameters");
    sharing_->f32.share(exec, ps, comm_.get());
    sharing_->f64.share(exec, ps, comm_.get());
  }
}

Optimizer::StatePart Gefen::state_part(const std::string& key) const {
  const auto slash = key.rfind('/');
  if (!comm_ || slash == std::string::npos) return {};
  const int p = parameters().find(key.substr(0, slash));
  if (p < 0 || mine(static_cast<std::size_t>(p))) return {};
  return {StatePart::none, 0, 0};
}

void Gefen::export_tensors(OptimizerState& state) const {
  state.integers["initialised"] = state_->initialised ? 1 : 0;
  if (!state_->initialised) return;
  StateTensor c;
  c.dtype = ScalarType::float32;
  c.shape = {codebook_size};
  c.data.resize(codebook_size * sizeof(float));
  std::memcpy(c.data.data(), state_->codebook_host.data(), c.data.size());
  state.tensors["codebook"] = std::move(c);
  const auto& ps            = parameters();
  for (std::size_t i = 0; i < ps.size(); ++i) {
    if (!mine(i)) continue;  // sharded: another rank exports this tensor
    const std::string& name             = ps[i].name;
    const TensorState& t                = state_->tensors[i];
    const Layout& L                     = t.layout;
    state.integers[name + "/partition"] = L.p;
    StateTensor ix;
    ix.dtype = ScalarType::uint8;
    ix.shape = ps[i].param.shape;
    Impl::set_bytes(ix, t.idx);
    state.tensors[name + "/indices"] = std::move(ix);
    state.tensors[name + "/absmax"]  = t.absmax.to_state({L.scale_blocks});
    if (L.kind == GefenSecondMoment::factored) {
      state.tensors[name + "/exp_avg_sq_row"] = t.row.to_state({L.rows});
      state.tensors[name + "/exp_avg_sq_col"] = t.col.to_state({L.cols});
    } else {
      state.tensors[name + "/exp_avg_sq"] =
          t.v.to_state(L.kind == GefenSecondMoment::full ? ps[i].param.shape : std::vector<std::int64_t>{L.v_count});
    }
    // Every tensor of the parameter follows its memory order (the blocks of the partition run
    // along it).
    for (const char* slot : {"/indices", "/absmax", "/exp_avg_sq_row", "/exp_avg_sq_col", "/exp_avg_sq"}) {
      auto it = state.tensors.find(name + slot);
      if (it != state.tensors.end()) it->second.layout = Impl::state_layout(ps[i].param);
    }
  }
}

Optimizer::StateKeys Gefen::check_entries(const OptimizerState& state) const {
  const std::string where = "koptim::Gefen::import_state: ";
  auto fail               = [&](const std::string& what) { throw StateError(where + what); };
  auto it                 = state.integers.find("initialised");
  if (it == state.integers.end()) fail("the state has no integer 'initialised'");
  if (it->second != 0 && it->second != 1)
    fail("integer 'initialised' = " + std::to_string(it->second) + " is not allowed; allowed: 0 or 1");
  const bool init = it->second == 1;
  StateKeys held;
  held.integers.insert("initialised");
  // Sharded, a rank's state holds its own tensors only: say so when the sets do not match.
  std::string shard_hint;
  if (comm_) {
    std::string held;
    for (std::size_t i = 0; i < parameters().size(); ++i)
      if (mine(i)) held += (held.empty() ? "" : ", ") + parameters()[i].name;
    shard_hint = " (sharded: rank " + std::to_string(rank_) + " of " + std::to_string(comm_->size()) +
                 " holds the state of " + (held.empty() ? std::string("no tensor") : held) +
                 "; a state saved by another rank or number of ranks?)";
  }
  std::map<std::string, Expected> expected;
  // A p = 1 tensor's second moment is factored or full by p1_second_moment: a state that holds the
  // other form was written with the other setting, which the message names.
  auto missing_hint = [&](const std::string& key, const Expected& e) -> std::string {
    const std::string slot = key.substr(std::min(key.size(), e.parameter.size()));
    if (e.parameter.empty() || (slot != "/exp_avg_sq" && slot != "/exp_avg_sq_row" && slot != "/exp_avg_sq_col"))
      return "";
    const bool has_full     = state.tensors.count(e.parameter + "/exp_avg_sq") != 0;
    const bool has_factored = state.tensors.count(e.parameter + "/exp_avg_sq_row") != 0;
    if (has_full == has_factored) return "";
    return std::string(" (it holds '") + e.parameter + (has_full ? "/exp_avg_sq'" : "/exp_avg_sq_row'") +
           ": the state was written with p1_second_moment = " + (has_full ? "full" : "factored") +
           "; this Gefen has p1_second_moment = " + to_string(options_.p1_second_moment) + ")";
  };
  const auto& ps = parameters();
  if (init) {
    expected["codebook"] = {ScalarType::float32, {codebook_size}, Expected::codebook};
    for (std::size_t i = 0; i < ps.size(); ++i) {
      if (!mine(i)) continue;
      const auto& p         = ps[i];
      const std::string key = p.name + "/partition";
      auto pit              = state.integers.find(key);
      if (pit == state.integers.end()) fail("the state has no integer '" + key + "'" + shard_hint);
      const std::int64_t part = pit->second, n = p.param.size;
      if (part < 1 || (n > 0 && (part > n || n % part != 0)) || (n == 0 && part != 1)) {
        fail("integer '" + key + "' = " + std::to_string(part) + " is not allowed; allowed: a divisor of the " +
             std::to_string(n) + " elements of parameter '" + p.name + "'");
      }
      // force_p1 promises p = 1 for every tensor: a state with shared second moments would break it.
      if (options_.force_p1 && part != 1) {
        fail("integer '" + key + "' = " + std::to_string(part) +
             " is not allowed with force_p1 = true (every tensor p = 1); the state was written without force_p1: "
             "load it into a Gefen without force_p1");
      }
      held.integers.insert(key);
      const Layout L                = make_layout(p.param, part, options_);
      const ScalarType T            = p.param.dtype;
      const StateLayout in          = Impl::state_layout(p.param);
      expected[p.name + "/indices"] = {ScalarType::uint8, p.param.shape, Expected::index, in, p.name};
      expected[p.name + "/absmax"]  = {T, {L.scale_blocks}, Expected::nonnegative, in, p.name};
      if (L.kind == GefenSecondMoment::factored) {
        expected[p.name + "/exp_avg_sq_row"] = {T, {L.rows}, Expected::nonnegative, in, p.name};
        expected[p.name + "/exp_avg_sq_col"] = {T, {L.cols}, Expected::nonnegative, in, p.name};
      } else {
        expected[p.name + "/exp_avg_sq"] = {
            T, L.kind == GefenSecondMoment::full ? p.param.shape : std::vector<std::int64_t>{L.v_count},
            Expected::nonnegative, in, p.name};
      }
    }
  }
  held.hint = init ? shard_hint : " (the state is not initialised)";
  for (const auto& e : expected) {
    const std::string& key = e.first;
    auto tit               = state.tensors.find(key);
    if (tit == state.tensors.end())
      fail("the state has no tensor '" + key + "'" + missing_hint(key, e.second) + shard_hint);
    held.tensors.insert(key);
    const StateTensor& t = tit->second;
    if (t.dtype != e.second.dtype)
      fail("state tensor '" + key + "' has scalar type " + to_string(t.dtype) + ", expected " +
           to_string(e.second.dtype));
    std::int64_t n = 1;
    for (auto d : e.second.shape) n *= d;
    if (t.shape != e.second.shape || t.data.size() != static_cast<std::size_t>(n) * size_of(t.dtype)) {
      fail("state tensor '" + key + "' has shape " + shape_string(t.shape) + " (" + std::to_string(t.data.size()) +
           " bytes), expected " + shape_string(e.second.shape));
    }
    Impl::check_layout(t, e.second.layout, "koptim::Gefen::import_state", key, e.second.parameter);
    const std::vector<double> x = values_of(t);
    for (std::size_t k = 0; k < x.size(); ++k) {
      // is_finite first: ordered comparisons on NaN would raise FE_INVALID.
      const double y = x[k];
      bool ok        = Impl::is_finite(y);
      if (ok && e.second.check == Expected::index) ok = y >= 0.0 && y <= 255.0 && y == std::floor(y);
      if (ok && e.second.check == Expected::nonnegative) ok = y >= 0.0;
      if (ok && e.second.check == Expected::codebook) {
        ok = y >= -1.0 && y <= 1.0 && (k == 0 ? y == -1.0 : y >= x[k - 1]) && (k + 1 < x.size() || y == 1.0);
      }
      if (ok && e.second.check == Expected::codebook && k > 0 && y != x[k - 1] && y - x[k - 1] < min_codebook_gap) {
        std::ostringstream s;
        s << "state tensor '" << key << "' has entries " << x[k - 1] << " and " << y << " at flat indices " << k - 1
          << " and " << k << ", " << y - x[k - 1]
          << " apart; allowed: distinct entries at least 2^-14 apart (a learned codebook's are at least 2^-12)";
        fail(s.str());
      }
      if (!ok) {
        std::ostringstream s;
        s << "state tensor '" << key << "' has value " << y << " at flat index " << k << "; allowed: "
          << (e.second.check == Expected::index      ? "integers 0 to 255"
              : e.second.check == Expected::codebook ? "ascending values in [-1, 1], -1 first and +1 last"
                                                     : "finite values >= 0");
        fail(s.str());
      }
    }
  }
  return held;
}

void Gefen::import_tensors(const OptimizerState& state) {
  if (state.integers.at("initialised") == 0) {
    state_ = std::make_unique<State>();
    return;
  }
  auto fresh     = std::make_unique<State>();
  const auto& ps = parameters();
  fresh->tensors.resize(ps.size());
  for (std::size_t i = 0; i < ps.size(); ++i) {
    if (!mine(i)) continue;
    const auto& p     = ps[i];
    const Layout L    = make_layout(p.param, state.integers.at(p.name + "/partition"), options_);
    fresh->tensors[i] = TensorState(p.name, p.param.dtype, L);
    TensorState& t    = fresh->tensors[i];
    const auto& ix    = state.tensors.at(p.name + "/indices").data;
    Kokkos::deep_copy(t.idx,
                      Kokkos::View<const std::uint8_t*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                          reinterpret_cast<const std::uint8_t*>(ix.data()), ix.size()));
    t.absmax.assign(state.tensors.at(p.name + "/absmax"));
    if (L.kind == GefenSecondMoment::factored) {
      t.row.assign(state.tensors.at(p.name + "/exp_avg_sq_row"));
      t.col.assign(state.tensors.at(p.name + "/exp_avg_sq_col"));
    } else {
      t.v.assign(state.tensors.at(p.name + "/exp_avg_sq"));
    }
  }
  const auto c = values_of(state.tensors.at("codebook"));
  fresh->set_codebook(std::vector<float>(c.begin(), c.end()), has_double_tensors(ps));
  fresh->build_step_tables(ps, [&](std::size_t i) { return mine(i); });
  state_ = std::move(fresh);
}

}  // namespace koptim
