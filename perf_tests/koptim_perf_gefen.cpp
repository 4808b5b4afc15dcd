// Gefen's figures (docs/gefen.md):
//   BM_Step:          step() of AdamW and of Gefen (default; force_p1 with the factored and with
//                     the full second moment) on one float32 matrix of n = rows x 1024 elements
//                     whose gradients have per-row scales; ns_per_param and the ratio to AdamW
//                     come from the same run. Gefen's first step (initialisation) is not timed.
//   BM_ManyTensors:   step() of AdamW and Gefen (default; force_p1 factored) on 2^22 float32
//                     parameters cut into 1, 64 or 1024 matrices of x 256 (4096 elements each at
//                     1024: still factored under force_p1): what a model of many tensors costs
//                     beyond one of the same size (both update every tensor of a scalar type
//                     and group in one kernel).
//   BM_StateBytes:    state_bytes() / parameters of Gefen and AdamW after one step on a 4-layer
//                     width-1024 MLP and on a transformer-shaped parameter set (4 layers, d 512,
//                     vocabulary 8192), with synthetic gradients shaped like real ones (rank-one
//                     row x column scales times noise; embedding rows mostly untouched).
//   BM_CodebookDP:    the exact codebook DP for M = 4096 histogram bins, K = 256 (variant 0), the
//                     whole histogram-to-codebook rule (1) and the O(K M^2) recurrence the
//                     reference runs, koptim's test oracle (2).
//   BM_TableLookup:   the floor of a step's table loads: one load per element from a 256-float
//                     table by a uint8 index (as Gefen dequantizes), in 1024-element blocks, over
//                     n = 16M indices, compiled as the library is (gathers where the flags allow).
//                     A Gefen step makes four such loads per element (codebook, lookup pair,
//                     threshold, codebook again).
#include <koptim/koptim.hpp>
#include <koptim/gefen/koptim_GefenCodebook.hpp>

#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

enum Method { adamw = 0, gefen = 1, gefen_p1_factored = 2, gefen_p1_full = 3 };
const char* const labels[] = {"AdamW", "Gefen", "Gefen force_p1 factored", "Gefen force_p1 full"};

std::unique_ptr<koptim::Optimizer> make(const koptim::ParameterSet& params, Method m) {
  Teuchos::ParameterList l;
  l.set("optimizer", std::string(m == adamw ? "AdamW" : "Gefen"));
  l.set("lr", 1e-3);
  l.set("weight_decay", 0.01);
  if (m == gefen_p1_factored || m == gefen_p1_full) l.set("force_p1", true);
  if (m == gefen_p1_full) l.set("p1_second_moment", std::string("full"));
  return koptim::create(params, l);
}

// g_ij = r_i c_j z_ij with log-normal row and column scales and normal z; rows with
// `touched` < 1 are zero with probability 1 - touched (embedding tables).
template <class View>
void fill_gradient(const View& g, std::int64_t rows, std::int64_t cols, unsigned seed, double touched = 1.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> c(cols);
  for (auto& x : c) x = std::exp(0.5 * normal(rng));
  auto h   = Kokkos::create_mirror_view(g);
  float* p = h.data();
  for (std::int64_t i = 0; i < rows; ++i) {
    const double r = u(rng) < touched ? 1e-3 * std::exp(normal(rng)) : 0.0;
    for (std::int64_t j = 0; j < cols; ++j) p[i * cols + j] = static_cast<float>(r * c[j] * normal(rng));
  }
  Kokkos::deep_copy(g, h);
}

// The first step untimed (Gefen: initialisation, partition and codebook; AdamW: first touch of
// the state), then the timed steps; ns_per_param for n parameters.
void time_steps(benchmark::State& state, koptim::Optimizer& opt, std::int64_t n) {
  opt.step();
  Kokkos::fence();
  for (auto _ : state) {
    opt.step();
    Kokkos::fence();
  }
  state.counters["ns_per_param"] = benchmark::Counter(
      static_cast<double>(n) * 1e-9, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void BM_Step(benchmark::State& state) {
  const auto method       = static_cast<Method>(state.range(0));
  const std::int64_t n    = state.range(1);
  const std::int64_t cols = 1024, rows = n / cols;
  Kokkos::View<float**> w("w", rows, cols), g("g", rows, cols);
  Kokkos::deep_copy(w, 0.5f);
  fill_gradient(g, rows, cols, 1);
  koptim::ParameterSet params;
  params.add("w", w, g);
  auto opt = make(params, method);
  time_steps(state, *opt, n);
  state.counters["params"]                = static_cast<double>(n);
  state.counters["state_bytes_per_param"] = static_cast<double>(opt->state_bytes()) / static_cast<double>(n);
  if (method != adamw) {
    const auto info             = dynamic_cast<koptim::Gefen&>(*opt).tensor_info().at(0);
    state.counters["partition"] = static_cast<double>(info.partition);
  }
  state.SetLabel(labels[method]);
}

void BM_ManyTensors(benchmark::State& state) {
  const auto method          = static_cast<Method>(state.range(0));
  const std::int64_t tensors = state.range(1), n = std::int64_t(1) << 22, cols = 256, rows = n / tensors / cols;
  std::vector<Kokkos::View<float**>> views;
  koptim::ParameterSet params;
  for (std::int64_t k = 0; k < tensors; ++k) {
    Kokkos::View<float**> w("w", rows, cols), g("g", rows, cols);
    Kokkos::deep_copy(w, 0.5f);
    fill_gradient(g, rows, cols, static_cast<unsigned>(k + 1));
    params.add("w" + std::to_string(k), w, g);
    views.push_back(w);
    views.push_back(g);
  }
  auto opt = make(params, method);
  time_steps(state, *opt, n);
  state.counters["tensors"] = static_cast<double>(tensors);
  state.SetLabel(labels[method]);
}

// A parameter set of named 1-D or 2-D float tensors with synthetic gradients.
struct ParamSet {
  std::vector<Kokkos::View<float**>> mats;
  std::vector<Kokkos::View<float*>> vecs;
  koptim::ParameterSet params;
  unsigned seed = 1;
  void matrix(const std::string& name, std::int64_t rows, std::int64_t cols, double touched = 1.0) {
    Kokkos::View<float**> w(name, rows, cols), g(name + ".grad", rows, cols);
    fill_gradient(g, rows, cols, seed++, touched);
    params.add(name, w, g);
    mats.push_back(w);
    mats.push_back(g);
  }
  void vector(const std::string& name, std::int64_t n) {
    Kokkos::View<float*> w(name, n), g(name + ".grad", n);
    fill_gradient(g, 1, n, seed++);
    params.add(name, w, g);
    vecs.push_back(w);
    vecs.push_back(g);
  }
};

ParamSet mlp_set() {
  ParamSet s;
  for (int l = 0; l < 4; ++l) {
    s.matrix("fc" + std::to_string(l) + ".weight", 1024, 1024);
    s.vector("fc" + std::to_string(l) + ".bias", 1024);
  }
  return s;
}

ParamSet transformer_set() {
  ParamSet s;
  const std::int64_t d = 512, vocab = 8192, ff = 2048;
  s.matrix("embedding", vocab, d, 0.1);
  for (int l = 0; l < 4; ++l) {
    const std::string p = "layer" + std::to_string(l) + ".";
    s.vector(p + "ln1.weight", d);
    s.vector(p + "ln1.bias", d);
    s.matrix(p + "attn.qkv.weight", 3 * d, d);
    s.vector(p + "attn.qkv.bias", 3 * d);
    s.matrix(p + "attn.proj.weight", d, d);
    s.vector(p + "attn.proj.bias", d);
    s.vector(p + "ln2.weight", d);
    s.vector(p + "ln2.bias", d);
    s.matrix(p + "mlp.fc1.weight", ff, d);
    s.vector(p + "mlp.fc1.bias", ff);
    s.matrix(p + "mlp.fc2.weight", d, ff);
    s.vector(p + "mlp.fc2.bias", d);
  }
  s.vector("ln_f.weight", d);
  s.vector("ln_f.bias", d);
  return s;
}

void BM_StateBytes(benchmark::State& state) {
  const bool transformer = state.range(0) != 0;
  ParamSet s             = transformer ? transformer_set() : mlp_set();
  const double n         = static_cast<double>(s.params.num_elements());
  double gefen_bpp = 0, adamw_bpp = 0;
  for (auto _ : state) {
    auto g = make(s.params, gefen);
    g->step();
    auto a = make(s.params, adamw);
    a->step();
    gefen_bpp = static_cast<double>(g->state_bytes()) / n;
    adamw_bpp = static_cast<double>(a->state_bytes()) / n;
    std::printf("%s", dynamic_cast<koptim::Gefen&>(*g).summary().c_str());
  }
  state.counters["params"]                = n;
  state.counters["gefen_bytes_per_param"] = gefen_bpp;
  state.counters["adamw_bytes_per_param"] = adamw_bpp;
  state.SetLabel(transformer ? "transformer d512 x4, vocab 8192" : "MLP 4 x 1024x1024");
}

// A smooth, peaked histogram over all 4096 bins (every bin non-empty, so M = 4096).
std::vector<std::int64_t> full_histogram() {
  std::vector<std::int64_t> counts(koptim::gefen::histogram_bins);
  for (int b = 0; b < koptim::gefen::histogram_bins; ++b) {
    const double x = koptim::gefen::Impl::histogram_bin_centre(b);
    counts[b]      = 1 + static_cast<std::int64_t>(1e6 * std::exp(-std::abs(x) * 12.0));
  }
  return counts;
}

void BM_CodebookDP(benchmark::State& state) {
  const auto counts = full_histogram();
  std::vector<double> points, weights;
  for (int b = 0; b < koptim::gefen::histogram_bins; ++b) {
    points.push_back(koptim::gefen::Impl::histogram_bin_centre(b));
    weights.push_back(static_cast<double>(counts[b]));
  }
  for (auto _ : state) {
    if (state.range(0) == 0) {
      benchmark::DoNotOptimize(koptim::gefen::optimal_codebook(points, weights, koptim::gefen::codebook_size));
    } else if (state.range(0) == 1) {
      benchmark::DoNotOptimize(koptim::gefen::codebook_from_histogram<float>(counts));
    } else {
      benchmark::DoNotOptimize(
          koptim::gefen::Impl::optimal_codebook_quadratic(points, weights, koptim::gefen::codebook_size));
    }
  }
  state.counters["M"]  = static_cast<double>(points.size());
  state.counters["K"]  = koptim::gefen::codebook_size;
  const char* labels[] = {"optimal_codebook M=4096 K=256", "codebook_from_histogram (4096 bins)",
                          "optimal_codebook_quadratic M=4096 K=256"};
  state.SetLabel(labels[state.range(0)]);
}

// max over k of the bits of table[idx[k]]: an integer maximum, which vectorizes, so the loop
// is the loads and nothing else.
std::uint32_t lookup_block(std::int64_t n, const std::uint8_t* __restrict idx, const float* __restrict table) {
  std::uint32_t top = 0;
  for (std::int64_t k = 0; k < n; ++k) {
    std::uint32_t u;
    std::memcpy(&u, &table[idx[k]], sizeof u);
    top = top < u ? u : top;
  }
  return top;
}

void BM_TableLookup(benchmark::State& state) {
  const std::int64_t n = state.range(0), block = 1024;
  std::vector<std::uint8_t> idx(n);
  std::vector<float> table(256);
  std::mt19937_64 rng(3);
  for (auto& i : idx) i = static_cast<std::uint8_t>(rng() & 255u);
  for (int k = 0; k < 256; ++k) table[k] = static_cast<float>(k) / 255.0f;
  for (auto _ : state) {
    std::uint32_t top = 0;
    for (std::int64_t b = 0; b < n; b += block) top |= lookup_block(block, idx.data() + b, table.data());
    benchmark::DoNotOptimize(top);
  }
  state.counters["ns_per_element"] = benchmark::Counter(
      static_cast<double>(n) * 1e-9, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

}  // namespace

BENCHMARK(BM_Step)
    ->ArgsProduct({{adamw, gefen, gefen_p1_factored, gefen_p1_full}, {std::int64_t(1) << 14, std::int64_t(1) << 24}})
    ->ArgNames({"method", "n"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_ManyTensors)
    ->ArgsProduct({{adamw, gefen, gefen_p1_factored}, {1, 64, 1024}})
    ->ArgNames({"method", "tensors"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_StateBytes)
    ->Arg(0)
    ->Arg(1)
    ->ArgName("transformer")
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_CodebookDP)->Arg(0)->Arg(1)->Arg(2)->ArgName("variant")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_TableLookup)->Arg(std::int64_t(1) << 24)->ArgName("n")->Unit(benchmark::kMillisecond)->UseRealTime();
