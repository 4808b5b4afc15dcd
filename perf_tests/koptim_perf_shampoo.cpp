// Shampoo's costs, float32:
// - the inverse root of one block (n = 256, 1024) through koptim's LAPACK path, beside LAPACK's
//   ssyevd alone and ssyevd plus the reconstruction Q diag(l^-a) Q^T by sgemm called directly;
// - 256 blocks of 64x64: a loop of ssyevd, the batched Jacobi eigensolver and the batched
//   inverse roots by the coupled Newton iteration; BM_BatchedRootsBySize: the batched inverse
//   roots through the LAPACK path (cuSOLVER on a CUDA build) and the Jacobi path from 8 x 8 to
//   256 x 256 at 2^20 entries (256 blocks at 64 x 64; what eigensolver = automatic weighs on a
//   GPU);
// - one step() of Shampoo (precondition_frequency 1 and 100) and of AdamW on a 4-layer MLP
//   parameter set of width 1024 (4 x (1024x1024 + 1024) parameters), with state_bytes/parameter;
// - BM_MlpStepBlasShare: Shampoo's preconditioned step on that MLP (frequency 100, between two
//   root computations) beside its BLAS work alone, timed in the same benchmark: the factor
//   updates (a syrk per factor) and the preconditioning (a GEMM per factor) of the same block
//   shapes through the same koptim::linalg calls; counters give both, their ratio, and the step's
//   phases per step (Shampoo::phase_times()).
// - BM_PreconditionProducts: the preconditioning products of 256 blocks of 64 x 64 (two mode
//   products each, as Shampoo's device path forms them), one Kokkos Kernels GEMM per product
//   beside a ProductPlan (batched by shape: host BLAS stages on a CPU, cuBLAS's batched GEMM on a
//   CUDA build) and the plan through koptim's portable batched kernel.
#include "koptim_PerfModels.hpp"

#include <koptim/koptim.hpp>
#include <koptim/linalg/koptim_BatchedGemm.hpp>
#include <koptim/linalg/koptim_EigenbasisQr.hpp>
#include <koptim/linalg/koptim_Eigensolver.hpp>
#include <koptim/linalg/koptim_Gemm.hpp>
#include <koptim/linalg/koptim_MatrixRoot.hpp>

#include <KokkosBlas3_gemm.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

extern "C" {
void ssyevd_(const char* jobz, const char* uplo, const int* n, float* a, const int* lda, float* w, float* work,
             const int* lwork, int* iwork, const int* liwork, int* info, std::size_t, std::size_t);
void sgemm_(const char* ta, const char* tb, const int* m, const int* n, const int* k, const float* alpha,
            const float* a, const int* lda, const float* b, const int* ldb, const float* beta, float* c, const int* ldc,
            std::size_t, std::size_t);
}

namespace {

// A symmetric positive definite matrix with a spread of eigenvalues (a Gram matrix plus a ridge).
std::vector<float> spd(int n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> g(static_cast<std::size_t>(n) * n), a(g.size(), 0.0f);
  for (auto& x : g) x = normal(rng);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int k = 0; k < n; ++k) s += double(g[i * n + k]) * g[j * n + k];
      a[i * n + j] = static_cast<float>(s / n + (i == j ? 1e-3 : 0.0));
    }
  return a;
}

// ssyevd as a one-shot caller must use it, and as koptim does on every call: a workspace query,
// then the workspace allocated (at least the documented minimum), then the solve. Keeping the
// workspace across calls instead would give the hand-written side an advantage that koptim's
// stateless root functions cannot have.
struct Syevd {
  int n;
  std::vector<float> w;
  explicit Syevd(int n_) : n(n_), w(n_) {}
  int operator()(float* a) {
    int lwork = -1, liwork = -1, info = 0, iwq = 0;
    float wq = 0;
    ssyevd_("V", "L", &n, a, &n, w.data(), &wq, &lwork, &iwq, &liwork, &info, 1, 1);
    lwork  = std::max(static_cast<int>(wq) + 1, 1 + 6 * n + 2 * n * n);
    liwork = std::max(iwq, 3 + 5 * n);
    std::vector<float> work(lwork);
    std::vector<int> iwork(liwork);
    ssyevd_("V", "L", &n, a, &n, w.data(), work.data(), &lwork, iwork.data(), &liwork, &info, 1, 1);
    return info;
  }
};

void BM_SsyevdDirect(benchmark::State& state) {
  const int n   = static_cast<int>(state.range(0));
  const auto a0 = spd(n, 1);
  std::vector<float> a(a0.size());
  Syevd eig(n);
  for (auto _ : state) {
    a = a0;
    benchmark::DoNotOptimize(eig(a.data()));
  }
}

// ssyevd, then X = Q diag(l^-1/2) Q^T with sgemm: the work koptim's root does, by hand.
void BM_SsyevdPlusReconstructDirect(benchmark::State& state) {
  const int n   = static_cast<int>(state.range(0));
  const auto a0 = spd(n, 1);
  std::vector<float> a(a0.size()), qs(a0.size()), x(a0.size());
  Syevd eig(n);
  const float one = 1, zero = 0;
  for (auto _ : state) {
    a = a0;
    eig(a.data());
    for (int k = 0; k < n; ++k) {
      const float s = 1.0f / std::sqrt(std::max(eig.w[k], 1e-12f));
      for (int i = 0; i < n; ++i) qs[k * n + i] = a[k * n + i] * s;
    }
    sgemm_("N", "T", &n, &n, &n, &one, qs.data(), &n, a.data(), &n, &zero, x.data(), &n, 1, 1);
    benchmark::DoNotOptimize(x.data());
  }
}

void BM_KoptimInverseRootLapack(benchmark::State& state) {
  const int n   = static_cast<int>(state.range(0));
  const auto a0 = spd(n, 1);
  Kokkos::View<float***> L("L", 1, n, n), X("X", 1, n, n);
  auto h = Kokkos::create_mirror_view(L);
  for (int i = 0; i < n * n; ++i) h.data()[i] = a0[i];
  Kokkos::deep_copy(L, h);
  koptim::linalg::InverseRootOptions o;
  o.solver        = koptim::linalg::EighSolver::lapack;
  o.epsilon       = 1e-12;
  o.skip_diagonal = false;
  for (auto _ : state) {
    auto info = koptim::linalg::batched_inverse_root(L, X, 0.5, o);
    benchmark::DoNotOptimize(info.data());
  }
}

void BM_KoptimEighLapack(benchmark::State& state) {
  const int n   = static_cast<int>(state.range(0));
  const auto a0 = spd(n, 1);
  Kokkos::View<float**, Kokkos::LayoutLeft, Kokkos::HostSpace> A("A", n, n);
  Kokkos::View<float*, Kokkos::HostSpace> w("w", n);
  for (auto _ : state) {
    for (int i = 0; i < n * n; ++i) A.data()[i] = a0[i];
    benchmark::DoNotOptimize(koptim::linalg::eigh_lapack(A, w));
  }
}

// The QR refresh of 64 eigenbases of 128 x 128 factors (float, host memory, LAPACK form), per
// matrix: arg 0, the default tolerance on bases that are exact (the test alone: one GEMM per
// matrix); arg 1, tolerance 0 (one QR step each: a second GEMM and a QR). The bases stay exact
// from one iteration to the next, so every iteration does the same work. Beside it,
// BM_KoptimEighLapack/128: the exact eigendecomposition it replaces.
void BM_EigenbasisQr(benchmark::State& state) {
  const int m = 64, n = 128;
  Kokkos::View<float***, Kokkos::HostSpace> A("A", m, n, n), V("V", m, n, n);
  Kokkos::View<float**, Kokkos::HostSpace> w("w", m, n);
  Kokkos::View<int*, Kokkos::HostSpace> info("info", m), steps("steps", m);
  for (int b = 0; b < m; ++b) {
    const auto a = spd(n, 200 + b);
    for (int i = 0; i < n * n; ++i) A.data()[b * n * n + i] = V.data()[b * n * n + i] = a[i];
  }
  koptim::linalg::batched_eigh_lapack(V, w, info);  // V <- the exact eigenvectors
  koptim::linalg::QrRefreshOptions o;
  o.tolerance = state.range(0) == 0 ? 0.01 : 0.0;
  for (auto _ : state) koptim::linalg::batched_eigenbasis_qr(A, V, info, steps, o);
  int taken = 0;
  for (int b = 0; b < m; ++b) taken += steps(b);
  state.counters["us_per_matrix"] = benchmark::Counter(
      static_cast<double>(m) * 1e-6, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.counters["qr_steps_per_matrix"] = static_cast<double>(taken) / m;
}

// count symmetric positive definite n x n matrices (spd(n, seed + b) for matrix b).
Kokkos::View<float***> spd_batch(int count, int n, int seed) {
  Kokkos::View<float***> A("A", count, n, n);
  auto h = Kokkos::create_mirror_view(A);
  for (int b = 0; b < count; ++b) {
    const auto a = spd(n, seed + b);
    std::copy(a.begin(), a.end(), h.data() + static_cast<std::size_t>(b) * n * n);
  }
  Kokkos::deep_copy(A, h);
  return A;
}

constexpr int batch = 256, small = 64;

Kokkos::View<float***> small_batch() { return spd_batch(batch, small, 100); }

void BM_LoopSsyevd_256x64(benchmark::State& state) {
  const auto A0 = small_batch();
  auto h        = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), A0);
  std::vector<float> a(static_cast<std::size_t>(small) * small);
  Syevd eig(small);
  for (auto _ : state) {
    for (int b = 0; b < batch; ++b) {
      std::copy(h.data() + b * small * small, h.data() + (b + 1) * small * small, a.begin());
      eig(a.data());
    }
    benchmark::DoNotOptimize(a.data());
  }
}

void BM_BatchedJacobi_256x64(benchmark::State& state) {
  const auto A0 = small_batch();
  Kokkos::View<float***> A("A", batch, small, small), V("V", batch, small, small);
  Kokkos::View<float**> w("w", batch, small);
  Kokkos::View<int*> info("info", batch), sweeps("sweeps", batch);
  for (auto _ : state) {
    Kokkos::deep_copy(A, A0);
    koptim::linalg::batched_eigh_jacobi(A, w, V, info, sweeps);
    Kokkos::fence();
  }
}

// The inverse roots (exponent 1/4) of the 256 factors of 64 x 64 by the coupled Newton iteration
// (the whole batch iterating together). The eigen paths on the same batch size are
// BM_BatchedRootsBySize/<0|1>/64.
void BM_NewtonRoots_256x64(benchmark::State& state) {
  const auto L = small_batch();
  Kokkos::View<float***> X("X", batch, small, small);
  koptim::linalg::InverseRootOptions o;
  o.method = koptim::linalg::RootMethod::coupled_newton;
  for (auto _ : state) {
    auto info = koptim::linalg::batched_inverse_root(L, X, 0.25, o);
    benchmark::DoNotOptimize(info.data());
  }
}

// What eigensolver = automatic would weigh on device memory: the inverse roots (exponent 1/4) of a
// batch of n x n factors, 2^20 entries in all (4096 of 16 x 16, ..., 16 of 256 x 256), through
// the LAPACK path (cuSOLVER on a CUDA build: syevjBatched up to n = 32, syevd above; LAPACK on a
// CPU) and through the batched Jacobi solver. Arg 0: 0 lapack, 1 jacobi; arg 1: n. The counter
// us_per_factor is the time per factor.
void BM_BatchedRootsBySize(benchmark::State& state) {
  const int n     = static_cast<int>(state.range(1));
  const int count = (1 << 20) / (n * n);
  const auto L    = spd_batch(count, n, 300);
  Kokkos::View<float***> X("X", count, n, n);
  koptim::linalg::InverseRootOptions o;
  o.solver = state.range(0) == 1 ? koptim::linalg::EighSolver::jacobi : koptim::linalg::EighSolver::lapack;
  for (auto _ : state) {
    auto info = koptim::linalg::batched_inverse_root(L, X, 0.25, o);
    benchmark::DoNotOptimize(info.data());
  }
  state.counters["us_per_factor"] = benchmark::Counter(
      static_cast<double>(count) * 1e-6, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.SetLabel(state.range(0) == 0 ? "lapack" : "jacobi");
}

// Y = M x_0 X_b^T x_1 X_b^T for `blocks` blocks b of n x n (Shampoo's preconditioning of a
// 2-D block with its two roots). Arg 0: block after block, a Kokkos Kernels GEMM per product
// (linalg::mode_product); 1: one ProductPlan (automatic backend); 2: the plan through the
// portable kernel. Arg 1: blocks; n = 64.
void BM_PreconditionProducts(benchmark::State& state) {
  const int how = static_cast<int>(state.range(0)), blocks = static_cast<int>(state.range(1)), n = 64;
  const std::int64_t nn = static_cast<std::int64_t>(n) * n;
  Kokkos::View<float*> M("M", blocks * nn), S("S", blocks * nn), Y("Y", blocks * nn), X("X", blocks * nn);
  {
    auto h = Kokkos::create_mirror_view(M);
    std::mt19937 rng(3);
    std::normal_distribution<float> normal;
    for (std::int64_t i = 0; i < blocks * nn; ++i) h(i) = normal(rng);
    Kokkos::deep_copy(M, h);
    for (std::int64_t i = 0; i < blocks * nn; ++i) h(i) = normal(rng) / n;
    Kokkos::deep_copy(X, h);
  }
  const std::vector<std::int64_t> shape{n, n};
  koptim::linalg::ProductPlan<float> plan;
  for (int b = 0; b < blocks; ++b) {
    plan.add_mode_product(0, M.data() + b * nn, shape, 0, X.data() + b * nn, 'T', S.data() + b * nn);
    plan.add_mode_product(1, S.data() + b * nn, shape, 1, X.data() + b * nn, 'T', Y.data() + b * nn);
  }
  plan.finish();
  const koptim::ExecutionSpace exec;
  const auto backend =
      how == 2 ? koptim::linalg::BatchedGemmBackend::portable : koptim::linalg::BatchedGemmBackend::automatic;
  for (auto _ : state) {
    if (how == 0) {
      for (int b = 0; b < blocks; ++b) {
        koptim::linalg::mode_product<float>(exec, M.data() + b * nn, shape, 0, X.data() + b * nn, 'T',
                                            S.data() + b * nn);
        koptim::linalg::mode_product<float>(exec, S.data() + b * nn, shape, 1, X.data() + b * nn, 'T',
                                            Y.data() + b * nn);
      }
    } else {
      plan.run(exec, 1.0f, 0.0f, backend);
    }
    exec.fence();
  }
  state.counters["GFLOP"] =
      benchmark::Counter(4.0 * blocks * nn * n * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(how == 0 ? "gemm_per_product" : (how == 1 ? "product_plan" : "product_plan_portable"));
}

// The optimizers the MLP benchmarks compare: method 0 AdamW, 1 Shampoo with precondition_frequency 1,
// 2 Shampoo with precondition_frequency 100 (Adam grafting, epsilon 1e-8).
Teuchos::ParameterList mlp_config(int method) {
  Teuchos::ParameterList list;
  if (method == 0) {
    list.set("optimizer", std::string("AdamW"));
  } else {
    list.set("optimizer", std::string("Shampoo"));
    list.set("grafting", std::string("Adam"));
    list.set("epsilon", 1e-8);
    list.set("precondition_frequency", method == 1 ? 1 : 100);
  }
  return list;
}

// The 4-layer MLP parameter set; method as mlp_config.
void BM_MlpStep(benchmark::State& state) {
  const int width = static_cast<int>(state.range(1));
  koptim_perf::Mlp mlp(width);
  const auto& params = mlp.params;
  const int method   = static_cast<int>(state.range(0));
  auto opt           = koptim::create(params, mlp_config(method));
  // Frequency 100: preconditioning starts at step 100; time the steady state after it (the 100
  // timed steps then include one root computation, at step 200).
  if (method == 2)
    for (int i = 0; i < 100; ++i) opt->step();
  for (auto _ : state) {
    opt->step();
    Kokkos::fence();
  }
  const double n                          = static_cast<double>(params.num_elements());
  state.counters["state_bytes_per_param"] = static_cast<double>(opt->state_bytes()) / n;
  state.counters["params"]                = n;
  state.SetLabel(method == 0 ? "AdamW" : method == 1 ? "Shampoo f=1" : "Shampoo f=100");
}

// The width-1024 MLP under Shampoo (frequency 100, Adam grafting; the default
// max_preconditioner_dim 1024 makes each weight one block of 1024 x 1024 with two factors and
// each bias one block of 1024 with one): the step between two root computations, and its BLAS
// work alone, per step: per factor L <- b2 L + w G_(j) G_(j)^T (gram_of_unfolding: syrk and the
// mirror of its triangle) and one mode product by the factor's root (mode_product: GEMM).
void BM_MlpStepBlasShare(benchmark::State& state) {
  const std::int64_t width = 1024;
  koptim_perf::Mlp mlp(static_cast<int>(width));
  auto opt      = koptim::create(mlp.params, mlp_config(2));
  auto& shampoo = dynamic_cast<koptim::Shampoo&>(*opt);
  shampoo.time_phases(true);
  for (int i = 0; i < 101; ++i) opt->step();  // roots at step 100; the timed steps precondition
  const double amortized_ms = 1e3 * shampoo.phase_times().amortized_computation /
                              std::max<std::int64_t>(1, shampoo.phase_times().amortized_computations);
  const auto before = shampoo.phase_times();
  Kokkos::Timer timer;
  std::int64_t steps = 0;
  for (auto _ : state) {
    opt->step();
    Kokkos::fence();
    ++steps;
  }
  const double step_ms = 1e3 * timer.seconds() / static_cast<double>(steps);
  const auto after     = shampoo.phase_times();
  // The same BLAS calls on buffers of the same shapes.
  Kokkos::View<float*> G("G", width * width), L("L", width * width), X("X", width * width), Y("Y", width * width),
      Z("Z", width * width);
  Kokkos::deep_copy(G, 0.01f);
  Kokkos::deep_copy(X, 0.001f);
  const std::vector<std::int64_t> matrix{width, width}, vector{width};
  auto blas_step = [&]() {
    for (int l = 0; l < 4; ++l) {
      for (int j = 0; j < 2; ++j)
        koptim::linalg::gram_of_unfolding<float>(koptim::ExecutionSpace(), G.data(), matrix, j, 0.001f, 0.999f,
                                                 L.data());
      koptim::linalg::gram_of_unfolding<float>(koptim::ExecutionSpace(), G.data(), vector, 0, 0.001f, 0.999f, L.data());
      koptim::linalg::mode_product<float>(koptim::ExecutionSpace(), G.data(), matrix, 0, X.data(), 'T', Y.data());
      koptim::linalg::mode_product<float>(koptim::ExecutionSpace(), Y.data(), matrix, 1, X.data(), 'T', Z.data());
      koptim::linalg::mode_product<float>(koptim::ExecutionSpace(), G.data(), vector, 0, X.data(), 'T', Y.data());
    }
    Kokkos::fence();
  };
  blas_step();
  const int reps = 10;
  timer.reset();
  for (int r = 0; r < reps; ++r) blas_step();
  const double blas_ms                 = 1e3 * timer.seconds() / reps;
  const double n                       = static_cast<double>(steps);
  state.counters["step_ms"]            = step_ms;
  state.counters["blas_ms"]            = blas_ms;
  state.counters["step_over_blas"]     = step_ms / blas_ms;
  state.counters["accumulate_ms"]      = 1e3 * (after.accumulate - before.accumulate) / n;
  state.counters["compute_updates_ms"] = 1e3 * (after.compute_updates - before.compute_updates) / n;
  state.counters["all_gather_ms"]      = 1e3 * (after.all_gather - before.all_gather) / n;
  state.counters["write_back_ms"]      = 1e3 * (after.write_back - before.write_back) / n;
  state.counters["root_ms_per_step"]   = amortized_ms / 100.0;
  state.SetLabel("Shampoo f=100 step beside its BLAS work");
}

// A training step of the same MLP: forward (H <- relu(W H + b)) and backward (dW = dZ H^T,
// db = row sums of dZ, dH = W^T dZ) through Kokkos Kernels GEMM on a batch of the given size,
// then the optimizer step: the "step plus the model's forward/backward" of the Shampoo issue.
// method 0 AdamW, 2 Shampoo frequency 100.
void BM_MlpTrainingStep(benchmark::State& state) {
  const int method = static_cast<int>(state.range(0)), batch = static_cast<int>(state.range(1)), width = 1024;
  koptim_perf::Mlp mlp(width);
  using M = Kokkos::View<float**, Kokkos::LayoutLeft>;
  std::vector<M> H;  // activations: H[0] input, H[l+1] output of layer l (width x batch)
  for (int l = 0; l <= 4; ++l) H.emplace_back("H", width, batch);
  Kokkos::deep_copy(H[0], 0.1f);
  M dZ("dZ", width, batch), dH("dH", width, batch);
  // Column-major views of the row-major weights: W (out x in) row-major = W^T column-major.
  auto colmajor = [&](const Kokkos::View<float**>& v) { return M(v.data(), width, width); };
  auto opt      = koptim::create(mlp.params, mlp_config(method));
  // Shampoo: 100 optimizer steps first, so that preconditioning has started (step 100 computes
  // the roots); the timed steps then precondition every step, and the root computation, done
  // once per 100 steps, is reported amortized (root_ms_per_step) to be added to the time.
  double root_ms_per_step = 0;
  if (method == 2) {
    auto& shampoo = dynamic_cast<koptim::Shampoo&>(*opt);
    shampoo.time_phases(true);
    for (int i = 0; i < 100; ++i) opt->step();
    shampoo.time_phases(false);  // the timed steps wait on nothing for timing
    root_ms_per_step = 1e3 * shampoo.phase_times().amortized_computation / 100;
  }
  for (auto _ : state) {
    for (int l = 0; l < 4; ++l) {
      const auto Wt = colmajor(mlp.W[l]);
      KokkosBlas::gemm("T", "N", 1.0f, Wt, H[l], 0.0f, H[l + 1]);  // W H
      const auto out = H[l + 1];
      const auto b   = mlp.b[l];
      Kokkos::parallel_for(
          "mlp::bias_relu", Kokkos::MDRangePolicy<Kokkos::Rank<2>>({0, 0}, {width, batch}),
          KOKKOS_LAMBDA(int i, int j) {
            const float z = out(i, j) + b(i);
            out(i, j)     = z > 0.0f ? z : 0.0f;
          });
    }
    Kokkos::deep_copy(dH, 1.0f / batch);  // d(mean of outputs)
    for (int l = 3; l >= 0; --l) {
      const auto out = H[l + 1];
      const auto dh = dH, dz = dZ;
      Kokkos::parallel_for(
          "mlp::relu_backward", Kokkos::MDRangePolicy<Kokkos::Rank<2>>({0, 0}, {width, batch}),
          KOKKOS_LAMBDA(int i, int j) { dz(i, j) = out(i, j) > 0.0f ? dh(i, j) : 0.0f; });
      // dW (out x in) row-major = dW^T column-major = H dZ^T.
      KokkosBlas::gemm("N", "T", 1.0f, H[l], dZ, 0.0f, colmajor(mlp.dW[l]));
      const auto db = mlp.db[l];
      Kokkos::parallel_for(
          "mlp::bias_grad", width, KOKKOS_LAMBDA(int i) {
            float acc = 0;
            for (int j = 0; j < batch; ++j) acc += dz(i, j);
            db(i) = acc;
          });
      if (l > 0) KokkosBlas::gemm("N", "N", 1.0f, colmajor(mlp.W[l]), dZ, 0.0f, dH);  // W^T dZ
    }
    opt->step();
    Kokkos::fence();
  }
  state.counters["batch"]            = batch;
  state.counters["root_ms_per_step"] = root_ms_per_step;
  state.SetLabel(method == 0 ? "AdamW + forward/backward" : "Shampoo f=100 + forward/backward");
}

BENCHMARK(BM_SsyevdDirect)->Arg(64)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_SsyevdPlusReconstructDirect)->Arg(64)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_KoptimEighLapack)->Arg(64)->Arg(128)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_EigenbasisQr)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_KoptimInverseRootLapack)->Arg(64)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_LoopSsyevd_256x64)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_BatchedJacobi_256x64)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_NewtonRoots_256x64)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_BatchedRootsBySize)
    ->ArgsProduct({{0, 1}, {8, 16, 32, 64, 128, 256}})
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_PreconditionProducts)
    ->Args({0, 256})
    ->Args({1, 256})
    ->Args({2, 256})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
// Many small blocks: the transformer-shaped parameter set (layers of d_model 512, see
// koptim_PerfModels.hpp) with max_preconditioner_dim 128, so that every matrix is cut into
// 128 x 128 blocks (12 layers: 2304 of them, and 624 blocks of 128 of the vectors). variant 0:
// Shampoo with RMSProp grafting (the grafting pytorch_optimizer's ScalableShampoo has closest to
// Adam's); 1: the eigenvalue-corrected (SOAP-like) variant, exact eigenbases; 2: the same with
// SOAP's QR refresh (eigenbasis qr, default tolerance 0.01: a basis that is still good needs no QR
// step); 3: the QR refresh with qr_tolerance 0 (one QR step at every refresh, as heavyball's SOAP
// always does: the same work as that peer whatever the data). All with
// precondition_frequency 10 and preconditioning from step 10; after 10 steps of warm-up, the
// timed steps (a multiple of 10) include their share of the amortized computation. The peers
// (perf_tests/peers/run_shampoo_peers.py) run the same shapes and settings.
void BM_TransformerStep(benchmark::State& state) {
  const int variant = static_cast<int>(state.range(0)), layers = static_cast<int>(state.range(1));
  koptim_perf::Transformer model(layers, 512);
  Teuchos::ParameterList list;
  list.set("optimizer", std::string("Shampoo"));
  list.set("lr", 1e-3);
  list.set("max_preconditioner_dim", 128);
  list.set("precondition_frequency", 10);
  list.set("epsilon", 1e-8);
  if (variant == 0) {
    list.set("grafting", std::string("RMSProp"));
  } else {
    list.set("eigenvalue_corrected", true);
    Teuchos::Array<double> betas(2, 0.95);  // as the SOAP peers' defaults
    list.set("betas", betas);
    if (variant >= 2) list.set("eigenbasis", std::string("qr"));
    if (variant == 3) list.set("qr_tolerance", 0.0);
  }
  auto opt      = koptim::create(model.params, list);
  auto& shampoo = dynamic_cast<koptim::Shampoo&>(*opt);
  // Third argument 1: the eigenvalue-corrected variants keep the filtered gradient in the
  // parameters' coordinates and rotate it every step (the reference implementation's form).
  const bool reference_form = state.range(2) != 0;
  if (reference_form) shampoo.filter_in_eigenbasis(false);
  // The phases' breakdown (six fences per step, nothing at a second per step).
  shampoo.time_phases(true);
  for (int i = 0; i < 10; ++i) opt->step();
  const auto before  = shampoo.phase_times();
  std::int64_t steps = 0;
  for (auto _ : state) {
    opt->step();
    Kokkos::fence();
    ++steps;
  }
  const auto after                = shampoo.phase_times();
  const double per                = 1e3 / static_cast<double>(std::max<std::int64_t>(1, steps));
  state.counters["accumulate_ms"] = per * (after.accumulate - before.accumulate);
  state.counters["roots_ms"]      = per * (after.amortized_computation - before.amortized_computation);
  state.counters["correction_ms"] = per * (after.eigenvalue_correction - before.eigenvalue_correction);
  state.counters["updates_ms"]    = per * (after.compute_updates - before.compute_updates);
  state.counters["write_back_ms"] = per * (after.write_back - before.write_back);
  std::size_t blocks              = 0;
  for (const auto& layout : shampoo.block_layouts()) blocks += layout.blocks.size();
  state.counters["params"] = static_cast<double>(model.params.num_elements());
  state.counters["blocks"] = static_cast<double>(blocks);
  state.counters["qr_steps_per_refresh"] =
      shampoo.qr_refreshes() > 0 ? static_cast<double>(shampoo.qr_iterations()) / shampoo.qr_refreshes() : 0.0;
  const char* labels[] = {"Shampoo, RMSProp grafting", "eigenvalue-corrected (SOAP-like)",
                          "eigenvalue-corrected, QR refresh", "eigenvalue-corrected, QR refresh, tolerance 0"};
  state.SetLabel(std::string(labels[variant]) + (reference_form ? ", filtered gradient rotated every step" : ""));
}

BENCHMARK(BM_TransformerStep)
    ->Args({0, 12, 0})
    ->Args({1, 12, 0})
    ->Args({2, 12, 0})
    ->Args({3, 12, 0})
    ->Args({1, 12, 1})
    ->Args({2, 12, 1})
    ->Args({3, 12, 1})
    ->Iterations(20)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
// One layer, two steps: the smoke test's.
BENCHMARK(BM_TransformerStep)
    ->Args({0, 1, 0})
    ->Args({1, 1, 0})
    ->Args({2, 1, 0})
    ->Args({3, 1, 0})
    ->Args({1, 1, 1})
    ->Iterations(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_MlpStep)
    ->Args({0, 64})
    ->Args({1, 64})
    ->Args({2, 64})
    ->Args({0, 1024})
    ->Args({1, 1024})
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_MlpStep)->Args({2, 1024})->Iterations(100)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_MlpStepBlasShare)->Iterations(20)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_MlpStep)->Args({0, 1024})->Iterations(100)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_MlpTrainingStep)
    ->Args({0, 1024})
    ->Args({2, 1024})
    ->Args({0, 8192})
    ->Args({2, 8192})
    ->Iterations(20)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
