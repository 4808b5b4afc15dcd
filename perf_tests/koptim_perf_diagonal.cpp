// step() of SGD (momentum 0.9), AdaGrad and AdamW per parameter, float32, at 1M and 16M
// parameters, beside a plain fused C++ loop of the same update compiled here with the same
// flags. Counter ns_per_param = wall time of one step / parameters. "checked" is the default
// nonfinite_gradient = error (one extra read of the gradients); "unchecked" skips that check.
// BM_KoptimManyTensors: AdamW on 2^20 parameters in 1, 64 or 1024 tensors.
// BM_ReadOnce is the floor of that check: one plain read of n floats (the largest magnitude
// bits, as the check computes them), in host memory.
// Counter GB_per_s of a step: the bytes a step must move at least (per parameter: SGD and AdaGrad
// read W, G and one state and write W and the state, 20 bytes; AdamW reads W, G, m, v and writes
// W, m, v, 28 bytes; the check reads G once more, 4 bytes) over its time. BM_DeviceCopy is the
// yardstick: Kokkos::deep_copy between two Views of n floats in koptim's memory space (a read
// and a write per element, 8 bytes), the device-to-device copy bandwidth on a GPU.
#include <koptim/koptim.hpp>

#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace {

enum Method { sgd = 0, adagrad = 1, adamw = 2 };
const char* const names[] = {"SGD", "AdaGrad", "AdamW"};

void set_counters(benchmark::State& state, std::int64_t n) {
  state.counters["ns_per_param"] = benchmark::Counter(
      static_cast<double>(n) * 1e-9, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.counters["params"] = static_cast<double>(n);
}

// GB/s of a step that must move bytes_per_param bytes per parameter.
void set_bandwidth(benchmark::State& state, std::int64_t n, int bytes_per_param) {
  state.counters["GB_per_s"] = benchmark::Counter(static_cast<double>(n) * bytes_per_param * 1e-9,
                                                  benchmark::Counter::kIsIterationInvariantRate);
}

// The least traffic of a step per parameter (see the header comment).
int step_bytes(Method method, bool checked) { return (method == adamw ? 28 : 20) + (checked ? 4 : 0); }

void BM_KoptimStep(benchmark::State& state) {
  const auto method    = static_cast<Method>(state.range(0));
  const std::int64_t n = state.range(1);
  const bool checked   = state.range(2) != 0;
  Kokkos::View<float*> w("w", n), g("g", n);
  Kokkos::deep_copy(w, 0.5f);
  Kokkos::deep_copy(g, 0.01f);
  koptim::ParameterSet params;
  params.add("w", w, g);
  Teuchos::ParameterList l;
  l.set("optimizer", std::string(names[method]));
  l.set("lr", method == adagrad ? 1e-2 : 1e-3);  // the plain loop's and the torch peers' values
  if (method == sgd) l.set("momentum", 0.9);
  l.set("nonfinite_gradient", std::string(checked ? "error" : "unchecked"));
  auto opt = koptim::create(params, l);
  opt->step();  // first touch of the state
  for (auto _ : state) {
    opt->step();
    Kokkos::fence();
  }
  set_counters(state, n);
  set_bandwidth(state, n, step_bytes(method, checked));
  state.SetLabel(std::string(names[method]) + (checked ? " checked" : " unchecked"));
}

// AdamW over 2^20 parameters cut into `tensors` tensors of equal size (checked step): what a
// model of many tensors costs beyond one of the same size. The diagonal optimizers update all
// parameters of one scalar type and group in one kernel, so the cost per parameter should stay
// close to one tensor's.
void BM_KoptimManyTensors(benchmark::State& state) {
  const std::int64_t tensors = state.range(0), n = std::int64_t(1) << 20, each = n / tensors;
  std::vector<Kokkos::View<float*>> w, g;
  koptim::ParameterSet params;
  for (std::int64_t k = 0; k < tensors; ++k) {
    w.emplace_back("w", each);
    g.emplace_back("g", each);
    Kokkos::deep_copy(w.back(), 0.5f);
    Kokkos::deep_copy(g.back(), 0.01f);
    params.add("w" + std::to_string(k), w.back(), g.back());
  }
  Teuchos::ParameterList l;
  l.set("optimizer", std::string("AdamW"));
  l.set("lr", 1e-3);
  auto opt = koptim::create(params, l);
  opt->step();
  for (auto _ : state) {
    opt->step();
    Kokkos::fence();
  }
  set_counters(state, n);
  set_bandwidth(state, n, step_bytes(adamw, true));
  state.SetLabel("AdamW, " + std::to_string(tensors) + " tensors of " + std::to_string(each));
}

// The same updates as one plain loop each (torch order of operations, float32).
void BM_PlainLoop(benchmark::State& state) {
  const auto method    = static_cast<Method>(state.range(0));
  const std::int64_t n = state.range(1);
  std::vector<float> w(n, 0.5f), g(n, 0.01f), a(n, 0.0f), b(n, 0.0f);
  float* __restrict W       = w.data();
  const float* __restrict G = g.data();
  float* __restrict A       = a.data();
  float* __restrict B       = b.data();
  std::int64_t t            = 0;
  for (auto _ : state) {
    ++t;
    if (method == sgd) {
      const float lr = 1e-3f, mu = 0.9f, one = 1.0f;
      for (std::int64_t i = 0; i < n; ++i) {
        const float bi = A[i] * mu + one * G[i];
        A[i]           = bi;
        W[i]           = W[i] + -lr * bi;
      }
    } else if (method == adagrad) {
      const float clr = 1e-2f, eps = 1e-10f;
      for (std::int64_t i = 0; i < n; ++i) {
        const float ai = A[i] + G[i] * G[i];
        A[i]           = ai;
        W[i]           = W[i] + (-clr * G[i]) / (std::sqrt(ai) + eps);
      }
    } else {
      const double lr = 1e-3, wd = 0.01;
      const float step  = static_cast<float>(-(lr / (1 - std::pow(0.9, double(t))))),
                  bc2   = static_cast<float>(std::sqrt(1 - std::pow(0.999, double(t)))),
                  decay = static_cast<float>(1 - lr * wd), eps = 1e-8f;
      for (std::int64_t i = 0; i < n; ++i) {
        const float wi = W[i] * decay;
        const float mi = A[i] + 0.1f * (G[i] - A[i]);
        const float vi = B[i] * 0.999f + 0.001f * G[i] * G[i];
        A[i]           = mi;
        B[i]           = vi;
        W[i]           = wi + (step * mi) / (std::sqrt(vi) / bc2 + eps);
      }
    }
    benchmark::DoNotOptimize(W);
    benchmark::ClobberMemory();
  }
  set_counters(state, n);
  set_bandwidth(state, n, step_bytes(method, false));
  state.SetLabel(std::string(names[method]) + " plain loop");
}

// One read of n floats: the largest magnitude bits (a vectorized integer maximum).
void BM_ReadOnce(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  std::vector<float> g(n, 0.01f);
  const float* __restrict G = g.data();
  for (auto _ : state) {
    std::uint32_t top = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      std::uint32_t u;
      std::memcpy(&u, &G[i], sizeof u);
      u &= 0x7fffffffu;
      top = top < u ? u : top;
    }
    benchmark::DoNotOptimize(top);
  }
  set_counters(state, n);
  state.counters["GB_per_s"] =
      benchmark::Counter(static_cast<double>(n) * sizeof(float) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// dst <- src, n floats each, in koptim's memory space.
void BM_DeviceCopy(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  Kokkos::View<float*> src("src", n), dst("dst", n);
  Kokkos::deep_copy(src, 0.01f);
  Kokkos::deep_copy(dst, src);  // first touch
  Kokkos::fence();
  for (auto _ : state) {
    Kokkos::deep_copy(dst, src);
    Kokkos::fence();
  }
  set_counters(state, n);
  set_bandwidth(state, n, 8);
}

void sizes(benchmark::internal::Benchmark* b, bool with_check) {
  for (int m : {sgd, adagrad, adamw})
    for (std::int64_t n : {std::int64_t(1) << 10, std::int64_t(1) << 20, std::int64_t(1) << 24}) {
      if (with_check) {
        b->Args({m, n, 1});
        b->Args({m, n, 0});
      } else {
        b->Args({m, n});
      }
    }
  b->ArgNames(with_check ? std::vector<std::string>{"method", "n", "checked"}
                         : std::vector<std::string>{"method", "n"});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK(BM_KoptimStep)->Apply([](benchmark::internal::Benchmark* b) { sizes(b, true); });
BENCHMARK(BM_KoptimManyTensors)
    ->ArgName("tensors")
    ->Arg(1)
    ->Arg(64)
    ->Arg(1024)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_PlainLoop)->Apply([](benchmark::internal::Benchmark* b) { sizes(b, false); });
BENCHMARK(BM_DeviceCopy)
    ->ArgName("n")
    ->Arg(std::int64_t(1) << 20)
    ->Arg(std::int64_t(1) << 24)
    ->Arg(std::int64_t(1) << 26)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_ReadOnce)
    ->ArgName("n")
    ->Arg(std::int64_t(1) << 20)
    ->Arg(std::int64_t(1) << 24)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
