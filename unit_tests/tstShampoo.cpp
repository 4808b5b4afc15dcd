// Shampoo: equal to its grafting method (and to torch.optim) while preconditioning has not
// started, hand-computed preconditioned steps, blocking reports, the root methods agreeing,
// the failure rules, configuration and state.
#include "koptim_TestErrors.hpp"
#include "koptim_TestTorchReference.hpp"

#include <koptim/koptim.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

namespace {

using koptim_test::ReferenceCase;

// A host copy that does not alias the View (create_mirror_view_and_copy returns the View itself
// when it is already in host memory).
template <class V>
auto host_copy(const V& v) {
  auto h = Kokkos::create_mirror(v);
  Kokkos::deep_copy(h, v);
  return h;
}
using koptim_test::TestTensor;

using koptim_test::torch_reference;

const ReferenceCase& torch_case(const std::string& name, const std::string& dtype) {
  for (const auto& c : torch_reference())
    if (c.name == name && c.dtype == dtype) return c;
  throw std::runtime_error("no reference case " + name);
}

double option(const ReferenceCase& c, const std::string& key, double fallback, int i = 0) {
  auto it = c.options.find(key);
  return it == c.options.end() ? fallback : std::stod(it->second[i]);
}

// A torch reference case through Shampoo configured to "never precondition" with the given
// grafting (max-norm relative error, see koptim_TestTorchReference.hpp).
template <class T>
double never_preconditioned(const ReferenceCase& c, Teuchos::ParameterList l) {
  l.set("optimizer", std::string("Shampoo"));
  l.set("precondition_frequency", 1000000);
  l.set("start_preconditioning_step", 1000000);
  return koptim_test::torch_case_error<T>(c, l);
}

Teuchos::ParameterList adam_like(const ReferenceCase& c, const std::string& decay_type) {
  Teuchos::ParameterList l;
  l.set("lr", option(c, "lr", 1e-3));
  l.set("weight_decay", option(c, "weight_decay", c.optimizer == "AdamW" ? 0.01 : 0.0));
  l.set("weight_decay_type", decay_type);
  Teuchos::Array<double> betas(2);
  betas[0] = option(c, "betas", 0.9, 0);
  betas[1] = 1.0;
  l.set("betas", betas);
  l.set("grafting", std::string("Adam"));
  l.set("grafting_beta2", option(c, "betas", 0.999, 1));
  l.set("grafting_epsilon", option(c, "eps", 1e-8));
  return l;
}

Teuchos::ParameterList first_order(const ReferenceCase& c, const std::string& grafting, double eps) {
  Teuchos::ParameterList l;
  l.set("lr", option(c, "lr", 1e-2));
  l.set("weight_decay", option(c, "weight_decay", 0.0));
  l.set("weight_decay_type", std::string("L2"));
  Teuchos::Array<double> betas(2);
  betas[0] = 0.0;  // b1 = 0: M_hat = G, as torch's AdaGrad, RMSProp and SGD
  betas[1] = 1.0;
  l.set("betas", betas);
  l.set("grafting", grafting);
  if (grafting != "SGD" && grafting != "none") l.set("grafting_epsilon", eps);  // the others have none
  l.set("momentum", option(c, "momentum", 0.0));
  l.set("use_nesterov", c.options.count("nesterov") > 0);
  return l;
}

TEST(Shampoo, BeforePreconditioningEqualsTorchThroughGrafting) {
  for (const std::string dtype : {"float32", "float64"}) {
    const double tol = dtype == "float32" ? 1e-5 : 1e-12;
    auto run         = [&](const ReferenceCase& c, const Teuchos::ParameterList& l) {
      SCOPED_TRACE(c.name + " " + dtype);
      const double err = dtype == "float32" ? never_preconditioned<float>(c, l) : never_preconditioned<double>(c, l);
      EXPECT_LE(err, tol);
    };
    for (const char* name : {"adam_default", "adam_betas_eps", "adam_low_beta1"})
      run(torch_case(name, dtype), adam_like(torch_case(name, dtype), "L2"));
    run(torch_case("adam_wd", dtype), adam_like(torch_case("adam_wd", dtype), "L2"));
    run(torch_case("adamw_default", dtype), adam_like(torch_case("adamw_default", dtype), "decoupled"));
    run(torch_case("adamw_groups", dtype), adam_like(torch_case("adamw_groups", dtype), "decoupled"));
    run(torch_case("adagrad_default", dtype), first_order(torch_case("adagrad_default", dtype), "AdaGrad", 1e-10));
    {
      auto l = first_order(torch_case("rmsprop_default", dtype), "RMSProp", 1e-8);
      l.set("grafting_beta2", 0.99);
      run(torch_case("rmsprop_default", dtype), l);
    }
    for (const char* name : {"sgd_plain", "sgd_momentum", "sgd_nesterov_wd"}) {
      run(torch_case(name, dtype), first_order(torch_case(name, dtype), "SGD", 0.0));
      run(torch_case(name, dtype), first_order(torch_case(name, dtype), "none", 0.0));
    }
    // The eigenvalue-corrected variant without grafting is Adam with its own betas and epsilon.
    for (const char* name : {"adam_default", "adamw_default"}) {
      const auto& c = torch_case(name, dtype);
      auto l        = adam_like(c, c.optimizer == "AdamW" ? "decoupled" : "L2");
      l.set("grafting", std::string("none"));
      l.remove("grafting_beta2");  // no grafting: its keys would have no effect
      l.remove("grafting_epsilon");
      l.set("eigenvalue_corrected", true);
      Teuchos::Array<double> betas(2);
      betas[0] = 0.9;
      betas[1] = 0.999;
      l.set("betas", betas);
      l.set("epsilon", 1e-8);
      run(c, l);
    }
  }
}

// A (3, 2) parameter with max_preconditioner_dim 2 and no merging is cut into a 2x2 and a 1x2
// block; the 1x2 block fed G1 = [1, 0], G2 = [0, 1] has L = [2] and R = I at step 2, so with
// b2 = 1 its direction is 2^(-1/4) G2. With b2 < 1 the factors are diagonal and the step is known
// in closed form, with and without bias correction.
// Step 6's weight decay under a schedule, in closed form: with b1 = 0, SGD grafting before any
// root and a zero gradient, P = alpha W and W <- W (1 - lr_t alpha), alpha = wd (decoupled),
// wd lr_t / lr (corrected), wd / lr (independent), lr_t = lr t / 4 during a 4-step warmup. The
// reference cases run without a schedule (lr_t = lr), where corrected equals decoupled and
// independent cannot be told from wd / lr_t.
TEST(Shampoo, WeightDecayTypesFollowTheSchedule) {
  const double lr = 0.1, wd = 0.5;
  for (const std::string type : {"decoupled", "corrected", "independent"}) {
    Kokkos::View<double*> W("W", 3), G("G", 3);
    koptim::ParameterSet params;
    params.add("w", W, G);
    auto hW = Kokkos::create_mirror_view(W);
    hW(0) = 1.0, hW(1) = -2.0, hW(2) = 0.5;
    Kokkos::deep_copy(W, hW);
    Teuchos::ParameterList l;
    l.set("optimizer", std::string("Shampoo"));
    l.set("lr", lr);
    l.set("weight_decay", wd);
    l.set("weight_decay_type", type);
    Teuchos::Array<double> betas(2);
    betas[0] = 0.0, betas[1] = 1.0;
    l.set("betas", betas);
    l.set("grafting", std::string("SGD"));
    l.set("precondition_frequency", 1000), l.set("start_preconditioning_step", 1000);
    l.sublist("lr_schedule").set("type", std::string("linear_warmup")).set("warmup_steps", 4);
    auto opt              = koptim::create(params, l);
    std::vector<double> w = {1.0, -2.0, 0.5};
    for (int t = 1; t <= 6; ++t) {
      opt->step();
      const double lr_t  = lr * std::min(t, 4) / 4.0;
      const double alpha = type == "decoupled" ? wd : type == "corrected" ? wd * lr_t / lr : wd / lr;
      for (auto& x : w) x *= 1.0 - lr_t * alpha;
    }
    Kokkos::deep_copy(hW, W);
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(hW(i), w[i], 1e-14 * std::abs(w[i])) << type << " " << i;
  }
}

// The first root at step s, then at the multiples of f after it: (t % f == 0 and t > s) or
// t == s. With f = 3 and s = 4 (not a multiple): steps 4, 6, 9 (the tests' other cases have s a
// multiple of f, where "t % f == 0 and t >= s" gives the same steps).
TEST(Shampoo, FirstRootAtTheStartStepThenEveryFrequency) {
  Kokkos::View<double*> W("W", 4), G("G", 4);
  koptim::ParameterSet params;
  params.add("w", W, G);
  Kokkos::deep_copy(G, 0.25);
  Teuchos::ParameterList l;
  l.set("optimizer", std::string("Shampoo"));
  l.set("precondition_frequency", 3);
  l.set("start_preconditioning_step", 4);
  auto opt = koptim::create(params, l);
  auto& sh = dynamic_cast<koptim::Shampoo&>(*opt);
  std::vector<int> at;
  for (int t = 1; t <= 10; ++t) {
    const auto before = sh.phase_times().amortized_computations;
    opt->step();
    if (sh.phase_times().amortized_computations > before) at.push_back(t);
  }
  EXPECT_EQ(at, std::vector<int>({4, 6, 9}));
}

TEST(Shampoo, HandComputedSteps) {
  for (double b2 : {1.0, 0.5}) {
    for (bool bias : {true, false}) {
      if (b2 == 1.0 && !bias) continue;  // refused: with betas [0, 1] the key has no effect
      Kokkos::View<double**> W("W", 3, 2), G("G", 3, 2);
      koptim::ParameterSet params;
      params.add("w", W, G);
      Teuchos::ParameterList l;
      l.set("optimizer", std::string("Shampoo"));
      l.set("lr", 1.0);
      Teuchos::Array<double> betas(2);
      betas[0] = 0.0;
      betas[1] = b2;
      l.set("betas", betas);
      l.set("epsilon", 1e-30);
      l.set("max_preconditioner_dim", 2);
      l.set("use_merge_dims", false);
      l.set("use_bias_correction", bias);
      auto opt = koptim::create(params, l);
      auto& sh = dynamic_cast<koptim::Shampoo&>(*opt);
      EXPECT_EQ(sh.num_blocks(), 2u);
      auto hG  = Kokkos::create_mirror_view(G);
      auto set = [&](double a, double b) {
        Kokkos::deep_copy(hG, 0.0);
        hG(2, 0) = a;
        hG(2, 1) = b;
        Kokkos::deep_copy(G, hG);
      };
      set(1, 0);
      opt->step();
      auto w1 = host_copy(W);
      set(0, 1);
      opt->step();
      auto w2         = host_copy(W);
      const double p0 = w1(2, 0) - w2(2, 0), p1 = w1(2, 1) - w2(2, 1);  // the step-2 direction
      // Step 2: L = b2 w + w (both rows' squares summed, w = 1 - b2 or 1), R = diag(b2 w, w).
      const double w  = b2 < 1 ? 1 - b2 : 1.0;
      const double sc = bias && b2 < 1 ? 1.0 / (1 - b2 * b2) : 1.0;
      const double L = (b2 * w + w) * sc, R1 = w * sc;
      SCOPED_TRACE("b2 " + std::to_string(b2) + " bias " + std::to_string(bias));
      EXPECT_NEAR(p0, 0.0, 1e-12);
      EXPECT_NEAR(p1, std::pow(L, -0.25) * std::pow(R1, -0.25), 1e-12);
      if (b2 == 1.0) EXPECT_NEAR(p1, std::pow(2.0, -0.25), 1e-15);
      // Rows 0-1 had zero gradients: a zero direction, never a NaN.
      EXPECT_EQ(w2(0, 0), 0.0);
      EXPECT_EQ(w2(1, 1), 0.0);
    }
  }
}

// A 2-vector fed G1 = [1, 0], G2 = [0, 1] with b2 = 1 has L = I at step 2: P = G2.
TEST(Shampoo, IdentityFactorGivesTheGradient) {
  Kokkos::View<double*> W("W", 2), G("G", 2);
  koptim::ParameterSet params;
  params.add("v", W, G);
  Teuchos::ParameterList l;
  l.set("optimizer", std::string("Shampoo"));
  l.set("lr", 1.0);
  Teuchos::Array<double> betas(2);
  betas[0] = 0.0;
  betas[1] = 1.0;
  l.set("betas", betas);
  l.set("epsilon", 1e-30);
  auto opt = koptim::create(params, l);
  auto h   = Kokkos::create_mirror_view(G);
  h(0) = 1, h(1) = 0;
  Kokkos::deep_copy(G, h);
  opt->step();
  h(0) = 0, h(1) = 1;
  Kokkos::deep_copy(G, h);
  auto before = host_copy(W);
  opt->step();
  auto after = host_copy(W);
  EXPECT_NEAR(before(0) - after(0), 0.0, 1e-14);
  EXPECT_NEAR(before(1) - after(1), 1.0, 1e-14);
}

// Blocking follows the logical (row-major) shape whatever the View's layout: a LayoutLeft
// parameter follows the LayoutRight trajectory with the same logical values.
TEST(Shampoo, LayoutLeftFollowsLogicalShape) {
  auto run = [](auto tag) {
    using Layout = decltype(tag);
    TestTensor<double, Layout> a({12, 7}, "a"), k({3, 4, 2, 5}, "k");
    koptim::ParameterSet params;
    a.add_to(params, "a");
    k.add_to(params, "k");
    a.set(false, [](std::int64_t i) { return koptim_test::value(13, 0, 0, i); });
    k.set(false, [](std::int64_t i) { return koptim_test::value(13, 1, 0, i); });
    Teuchos::ParameterList l;
    l.set("optimizer", std::string("Shampoo"));
    l.set("lr", 0.01);
    l.set("epsilon", 1e-8);
    l.set("max_preconditioner_dim", 8);
    l.set("grafting", std::string("RMSProp"));
    auto opt = koptim::create(params, l);
    for (int s = 1; s <= 10; ++s) {
      a.set(true, [&](std::int64_t i) { return koptim_test::value(13, 0, s, i); });
      k.set(true, [&](std::int64_t i) { return koptim_test::value(13, 1, s, i); });
      opt->step();
    }
    auto r  = a.get();
    auto rk = k.get();
    r.insert(r.end(), rk.begin(), rk.end());
    return r;
  };
  const auto right = run(Kokkos::LayoutRight()), left = run(Kokkos::LayoutLeft());
  ASSERT_EQ(right.size(), left.size());
  for (std::size_t i = 0; i < right.size(); ++i) EXPECT_NEAR(right[i], left[i], 1e-13) << i;
}

TEST(Shampoo, ReportsBlockLayouts) {
  Kokkos::View<float****> conv("conv", 32, 3, 64, 64), dconv("dconv", 32, 3, 64, 64);
  Kokkos::View<float**> m("m", 16, 32), dm("dm", 16, 32);
  Kokkos::View<float*> bias("b", 3000), dbias("db", 3000);
  koptim::ParameterSet params;
  params.add("conv", conv, dconv);
  params.add("m", m, dm);
  params.add("bias", bias, dbias);
  koptim::CommonOptions c;
  koptim::ShampooOptions o;
  o.max_preconditioner_dim = 8192;
  koptim::Shampoo sh(params, c, o);
  EXPECT_EQ(sh.block_layouts()[0].merged_shape, (std::vector<std::int64_t>{96, 4096}));
  EXPECT_EQ(sh.block_layouts()[1].merged_shape, (std::vector<std::int64_t>{512}));
  EXPECT_EQ(sh.block_layouts()[2].blocks.size(), 1u);
  const std::string d = sh.describe_blocks();
  EXPECT_NE(d.find("conv"), std::string::npos) << d;
  EXPECT_NE(d.find("4096"), std::string::npos) << d;
  // Exact state: factors and roots of every block, nothing else by default (b1 = 0.9: filtered grad).
  const std::size_t n       = 32 * 3 * 64 * 64 + 16 * 32 + 3000;
  const std::size_t factors = 2 * (96 * 96 + 4096 * 4096 + 512 * 512 + 3000 * 3000);
  EXPECT_EQ(sh.state_bytes(), 4 * (factors + n));
}

// The same trajectory through the LAPACK and the batched Jacobi eigensolvers, and through the
// coupled Newton iteration, on small well-conditioned blocks.
TEST(Shampoo, RootMethodsAgree) {
  auto run = [](const std::string& solver, const std::string& method) {
    TestTensor<double> a({6, 5}, "a"), b({7}, "b");
    koptim::ParameterSet params;
    a.add_to(params, "a");
    b.add_to(params, "b");
    a.set(false, [](std::int64_t i) { return koptim_test::value(5, 0, 0, i); });
    b.set(false, [](std::int64_t i) { return koptim_test::value(5, 1, 0, i); });
    Teuchos::ParameterList l;
    l.set("optimizer", std::string("Shampoo"));
    l.set("lr", 0.01);
    l.set("epsilon", 1e-6);
    l.set("grafting", std::string("Adam"));
    l.set("eigensolver", solver);
    l.set("root_method", method);
    auto opt = koptim::create(params, l);
    for (int s = 1; s <= 20; ++s) {
      a.set(true, [&](std::int64_t i) { return koptim_test::value(5, 0, s, i); });
      b.set(true, [&](std::int64_t i) { return koptim_test::value(5, 1, s, i); });
      opt->step();
    }
    auto r  = a.get();
    auto rb = b.get();
    r.insert(r.end(), rb.begin(), rb.end());
    return r;
  };
  const auto lapack = run("lapack", "eigen"), jacobi = run("jacobi", "eigen"),
             newton = run("automatic", "coupled_newton");
  for (std::size_t i = 0; i < lapack.size(); ++i) {
    EXPECT_NEAR(lapack[i], jacobi[i], 1e-10) << i;
    EXPECT_NEAR(lapack[i], newton[i], 1e-4) << i;
  }
}

// The settings the comparisons of the forms of a step share: blocks of at most 32, roots from
// step 2 on, every second step.
void small_blocks(Teuchos::ParameterList& l) {
  l.set("optimizer", std::string("Shampoo"));
  l.set("lr", 0.01);
  l.set("epsilon", 1e-6);
  l.set("max_preconditioner_dim", 32);
  l.set("precondition_frequency", 2);
  l.set("start_preconditioning_step", 2);
}

// The variants of the direction the two forms of a step are compared on.
std::vector<std::pair<std::string, Teuchos::ParameterList>> direction_variants() {
  std::vector<std::pair<std::string, Teuchos::ParameterList>> cases;
  {
    Teuchos::ParameterList l;
    l.set("grafting", std::string("Adam"));
    l.set("momentum", 0.5);
    l.set("use_nesterov", true);
    l.set("weight_decay", 0.01);
    cases.push_back({"Adam grafting, Nesterov momentum, weight decay", l});
  }
  {
    Teuchos::ParameterList l;
    l.set("grafting", std::string("AdaGrad"));
    cases.push_back({"AdaGrad grafting", l});
  }
  {
    // Blocks without a preconditioned dimension (the 1-D ones) and blocks with one of two.
    Teuchos::ParameterList l;
    l.set("grafting", std::string("Adam"));
    l.sublist("inverse_exponent_override").set("order_1", 0.0);
    l.sublist("inverse_exponent_override").set("order_2_dim_1", 0.0);
    cases.push_back({"Adam grafting, 1-D blocks and dimension 1 of 2-D blocks not preconditioned", l});
  }
  {
    Teuchos::ParameterList l;
    l.set("grafting", std::string("none"));
    cases.push_back({"no grafting", l});
  }
  {
    Teuchos::ParameterList l;
    l.set("eigenvalue_corrected", true);
    cases.push_back({"eigenvalue-corrected", l});
  }
  {
    Teuchos::ParameterList l;
    l.set("eigenvalue_corrected", true);
    l.set("eigenbasis", std::string("qr"));
    l.set("qr_tolerance", 0.0);
    cases.push_back({"eigenvalue-corrected, QR refresh", l});
  }
  {
    Teuchos::ParameterList l;
    l.set("grafting", std::string("RMSProp"));
    l.set("weight_decay", 0.01);
    l.set("weight_decay_type", std::string("L2"));
    l.set("momentum", 0.9);
    cases.push_back({"RMSProp grafting, L2 weight decay, momentum", l});
  }
  return cases;
}

// The blocks of a phase run concurrently on the host threads (the host path) or block after
// block as kernels (the device path, here on the host): the same parameters, to the bit on one
// thread, to rounding where a threaded reduction of the grafting norms sums in another order.
// Blocks of orders 1 to 3, several shapes, float and double, every variant of the direction.
// The host batch (blocks at once on the host threads, plain loops) and the device path (one kernel
// per element-wise phase over every block, products block after block) run the same bodies in the
// same order per block: the same results to the bit on one thread. Parameter groups
// interleave (the device path's gather and update run once per group), with their own lr and
// weight decay. The factors' traces (state: the overflow bound's) too, kept on the host batch by
// a host loop and on the device path by a kernel, with the gradient check and without it.
TEST(Shampoo, HostBatchOfBlocksEqualsBlockAfterBlock) {
  auto run = [](Teuchos::ParameterList l, bool batch) {
    TestTensor<float> a({40, 30}, "a"), c({6, 5, 4}, "c"), e({3, 70}, "e");
    TestTensor<double> b({7}, "b"), d({9, 33}, "d");
    koptim::ParameterSet params;
    const int fast = params.add_group("fast", {0.02, 0.0}), decayed = params.add_group("decayed", {std::nullopt, 0.05});
    a.add_to(params, "a");
    b.add_to(params, "b", fast);
    c.add_to(params, "c", decayed);
    d.add_to(params, "d", decayed);
    e.add_to(params, "e", fast);
    small_blocks(l);
    auto opt = koptim::create(params, l);
    dynamic_cast<koptim::Shampoo&>(*opt).batch_blocks_on_host(batch);
    EXPECT_GT(dynamic_cast<koptim::Shampoo&>(*opt).num_blocks(), 8u);
    for (int s = 1; s <= 8; ++s) {
      a.set(true, [&](std::int64_t i) { return koptim_test::value(21, 0, s, i); });
      b.set(true, [&](std::int64_t i) { return koptim_test::value(21, 1, s, i); });
      c.set(true, [&](std::int64_t i) { return koptim_test::value(21, 2, s, i); });
      d.set(true, [&](std::int64_t i) { return koptim_test::value(21, 3, s, i); });
      e.set(true, [&](std::int64_t i) { return koptim_test::value(21, 4, s, i); });
      opt->step();
    }
    std::vector<double> r;
    for (const auto& v : {a.get(), c.get(), e.get()}) r.insert(r.end(), v.begin(), v.end());
    for (const auto& v : {b.get(), d.get()}) r.insert(r.end(), v.begin(), v.end());
    int traces = 0;
    for (const auto& kv : opt->export_state().reals) {
      if (kv.first.size() < 6 || kv.first.compare(kv.first.size() - 6, 6, "/trace") != 0) continue;
      r.push_back(kv.second);
      traces += kv.second > 0.0 ? 1 : 0;
    }
    EXPECT_GT(traces, 0);
    return r;
  };
  auto cases = direction_variants();
  for (std::size_t k = 0, n = cases.size(); k < n; ++k) {
    auto unchecked = cases[k];
    unchecked.first += ", unchecked";
    unchecked.second.set("nonfinite_gradient", std::string("unchecked"));
    cases.push_back(unchecked);
  }
  // On more threads a threaded reduction (the grafting norms) may sum in another order.
  const bool one_thread = koptim::ExecutionSpace().concurrency() == 1;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.first);
    const auto batched = run(c.second, true), in_turn = run(c.second, false);
    ASSERT_EQ(batched.size(), in_turn.size());
    for (std::size_t i = 0; i < batched.size(); ++i) {
      if (one_thread)
        ASSERT_EQ(batched[i], in_turn[i]) << i;
      else
        ASSERT_NEAR(batched[i], in_turn[i], 1e-5 * (1.0 + std::abs(in_turn[i]))) << i;
    }
  }
}

// The device path's products as GEMMs batched by shape over every block, through koptim's
// portable kernel (what a GPU without cuBLAS runs; Shampoo::portable_products), against the same
// path with host BLAS per product: the same parameters to rounding. Several blocks share each
// shape (the batches hold more than one product), blocks of orders 1 to 3 with one to three
// preconditioned dimensions, every variant of the direction. In double: on this model a change of
// one gradient element by 1e-6 (relative) moves float results by up to 60% (the factors' small
// eigenvalues decide the roots), so float results of two orders of sums are not comparable here;
// the float products themselves are checked in tstGemm.cpp (ProductPlanFloat).
TEST(Shampoo, PortableBatchedProductsEqualHostBlas) {
  auto run = [](Teuchos::ParameterList l, bool portable) {
    TestTensor<double> a({64, 30}, "a"), b({12, 20}, "b"), c({6, 5, 4}, "c"), d({4, 3, 5}, "d"), d2({4, 3, 5}, "d2"),
        e({5, 3}, "e"), e2({5, 3}, "e2");
    koptim::ParameterSet params;
    a.add_to(params, "a");
    b.add_to(params, "b");
    c.add_to(params, "c");
    d.add_to(params, "d");
    e.add_to(params, "e");
    d2.add_to(params, "d2");
    e2.add_to(params, "e2");
    small_blocks(l);
    auto opt      = koptim::create(params, l);
    auto& shampoo = dynamic_cast<koptim::Shampoo&>(*opt);
    shampoo.batch_blocks_on_host(false);
    shampoo.portable_products(portable);
    for (int s = 1; s <= 8; ++s) {
      int k = 0;
      for (auto* t : {&a, &b, &c, &d, &d2, &e, &e2})
        t->set(true, [&](std::int64_t i) { return koptim_test::value(23, k, s, i); }), ++k;
      opt->step();
    }
    std::vector<double> r;
    for (const auto& v : {a.get(), b.get(), c.get(), d.get(), d2.get(), e.get(), e2.get()})
      r.insert(r.end(), v.begin(), v.end());
    return r;
  };
  for (const auto& c : direction_variants()) {
    SCOPED_TRACE(c.first);
    const auto host_blas = run(c.second, false), portable = run(c.second, true);
    ASSERT_EQ(host_blas.size(), portable.size());
    // Seen on Serial: at most 7e-10 (RMSProp grafting), 1e-12 or less for the others.
    for (std::size_t i = 0; i < host_blas.size(); ++i)
      ASSERT_NEAR(portable[i], host_blas[i], 1e-8 * (1.0 + std::abs(host_blas[i]))) << i;
  }
}

// A finite gradient whose square overflows float: rejected before anything changes, naming the
// parameter and the block.
TEST(Shampoo, OverflowingFactorIsRejectedAndChangesNothing) {
  TestTensor<float> w({4, 3}, "w"), v({5}, "v");
  koptim::ParameterSet params;
  w.add_to(params, "layer.weight");
  v.add_to(params, "layer.bias");
  w.set(false, [](std::int64_t i) { return koptim_test::value(17, 0, 0, i); });
  Teuchos::ParameterList l;
  l.set("optimizer", std::string("Shampoo"));
  l.set("grafting", std::string("Adam"));
  l.set("momentum", 0.5);
  auto opt = koptim::create(params, l);
  w.set(true, [](std::int64_t i) { return koptim_test::value(17, 0, 1, i); });
  v.set(true, [](std::int64_t i) { return koptim_test::value(17, 1, 1, i); });
  opt->step();
  const auto state = opt->export_state();
  const auto pw = w.get(), pv = v.get();
  v.set(true, [](std::int64_t i) { return i == 2 ? 1e30 : 1.0; });
  try {
    opt->step();
    ADD_FAILURE() << "no error";
  } catch (const koptim::NonFiniteError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("parameter 'layer.bias', block 0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("overflow to Inf"), std::string::npos) << msg;
    EXPECT_NE(msg.find("nothing was updated"), std::string::npos) << msg;
  }
  EXPECT_TRUE(opt->export_state() == state);
  EXPECT_EQ(w.get(), pw);
  EXPECT_EQ(v.get(), pv);
  EXPECT_EQ(opt->step_count(), 1);
  // The next finite step proceeds.
  v.set(true, [](std::int64_t) { return 1.0; });
  opt->step();
  EXPECT_EQ(opt->step_count(), 2);
}

// The squares, not only the trace: with betas[1] < 1 the factors' weight (1 - b2) let a gradient
// whose G G^T overflows float pass the trace bound (w |G|^2 finite), and the factors became Inf
// for good. Refused (here skipped) with nothing changed; a block that forms no squares (exponent
// 0, no squaring grafting) takes such a gradient, and one with Adam grafting refuses it.
TEST(Shampoo, GradientWhoseSquaresOverflowIsRefusedWhereSquaresAreFormed) {
  struct Case {
    const char* name;
    bool refused;
    std::function<void(Teuchos::ParameterList&)> set;
  };
  const std::vector<Case> cases = {
      {"betas[1] = 0.999", true,
       [](Teuchos::ParameterList& l) {
         Teuchos::Array<double> betas(2);  // (Teuchos::Array{0.9, 0.999} is Array(0, 0.999): empty)
         betas[0] = 0.9;
         betas[1] = 0.999;
         l.set("betas", betas);
       }},
      {"exponent 0, Adam grafting", true,
       [](Teuchos::ParameterList& l) {
         l.set("grafting", std::string("Adam"));
         l.sublist("inverse_exponent_override").set("order_1", 0.0);
       }},
      {"exponent 0, no grafting", false,
       [](Teuchos::ParameterList& l) { l.sublist("inverse_exponent_override").set("order_1", 0.0); }},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    TestTensor<float> v({4}, "v");
    koptim::ParameterSet params;
    v.add_to(params, "v");
    Teuchos::ParameterList l;
    l.set("optimizer", std::string("Shampoo"));
    l.set("nonfinite_gradient", std::string("skip_step"));
    c.set(l);
    auto opt = koptim::create(params, l);
    v.set(true, [](std::int64_t i) { return 0.5 + 0.25 * static_cast<double>(i); });
    opt->step();
    const auto before = opt->export_state();
    const auto pv     = v.get();
    v.set(true, [](std::int64_t i) { return i == 1 ? 2e19 : 1.0; });  // 4e38 > FLT_MAX; 1e-3 of it is not
    opt->step();
    const auto status = opt->last_step_status();
    EXPECT_EQ(status.skipped, c.refused);
    if (c.refused) {
      EXPECT_EQ(status.refused_parameter, "v");
      EXPECT_EQ(v.get(), pv);
      auto after = opt->export_state();
      after.integers.at("skipped_steps") -= 1;
      EXPECT_TRUE(after == before);
    } else {
      for (float x : v.get()) EXPECT_TRUE(std::isfinite(x));
      // The state it leaves can be restored (a trace accumulated in a block without factors
      // reached 4e38, which import refused, its own checkpoint included).
      EXPECT_NO_THROW(opt->import_state(opt->export_state()));
    }
    // Ordinary gradients go on.
    v.set(true, [](std::int64_t i) { return 0.5 - 0.125 * static_cast<double>(i); });
    opt->step();
    EXPECT_TRUE(opt->last_step_status().taken);
    for (float x : v.get()) EXPECT_TRUE(std::isfinite(x));
  }
}

// A first step that threw inside the optimizer (another rank's error does so after this rank has
// filtered its gradient) fixes the filtered gradient's form as a counted step does.
TEST(Shampoo, FilterFormIsFixedByAStepThatThrew) {
  TestTensor<float> w({4, 3}, "w");
  koptim::ParameterSet params;
  w.add_to(params, "w");
  Teuchos::ParameterList l;
  l.set("optimizer", std::string("Shampoo"));
  l.set("eigenvalue_corrected", true);
  auto opt = koptim::create(params, l);
  auto& s  = dynamic_cast<koptim::Shampoo&>(*opt);
  s.filter_in_eigenbasis(false);  // before any step: accepted
  s.filter_in_eigenbasis(true);
  w.set(true, [](std::int64_t i) { return i == 2 ? 1e30 : 1.0; });
  EXPECT_THROW(opt->step(), koptim::NonFiniteError);
  EXPECT_EQ(opt->step_count(), 0);
  koptim_test::expect_error<koptim::ConfigError>([&] { s.filter_in_eigenbasis(false); }, {"or began one that threw"});
  EXPECT_TRUE(s.filter_in_eigenbasis());
}

// Eigenvalue-corrected with epsilon 0: coordinates whose second moment is still zero (a row that
// never gets a gradient) take no step instead of 0/0 (which would also trap FE_INVALID here).
TEST(Shampoo, EigenvalueCorrectedWithZeroEpsilonStaysFinite) {
  TestTensor<double> w({6, 5}, "w");
  koptim::ParameterSet params;
  w.add_to(params, "w");
  Teuchos::ParameterList l;
  l.set("optimizer", std::string("Shampoo"));
  l.set("eigenvalue_corrected", true);
  l.set("epsilon", 0.0);
  l.set("use_merge_dims", false);
  auto opt = koptim::create(params, l);
  for (int s = 1; s <= 5; ++s) {
    w.set(true, [&](std::int64_t i) { return i < 5 ? 0.0 : koptim_test::value(19, 0, s, i); });  // row 0 frozen
    opt->step();
  }
  const auto v = w.get();
  for (std::size_t i = 0; i < v.size(); ++i) EXPECT_TRUE(std::isfinite(v[i])) << i;
  for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(v[i], 0.0) << i;
}

// The eigenvalue-corrected variant without grafting keeps its filtered gradient in the eigenbasis
// (Shampoo::filter_in_eigenbasis, on by default), rotated between bases at each refresh; off, it is
// kept in the parameters' coordinates and rotated every step. Both forms give the same trajectory
// to rounding: with beta3 != beta1, bias correction on and off, the QR refresh (a step at every
// refresh), a block of order 3 and matrices split into blocks, through the host batch and the
// device path. Either form's state loads into the other (rotated in or out) and continues the
// same trajectory.
struct FilterModel {
  TestTensor<double> a{{9, 7}, "a"}, c{{3, 4, 2}, "c"}, v{{5}, "v"};
  koptim::ParameterSet params;
  FilterModel() {
    a.add_to(params, "a");
    c.add_to(params, "c");
    v.add_to(params, "v");
    a.set(false, [](std::int64_t i) { return koptim_test::value(23, 0, 0, i); });
    c.set(false, [](std::int64_t i) { return koptim_test::value(23, 1, 0, i); });
    v.set(false, [](std::int64_t i) { return koptim_test::value(23, 2, 0, i); });
  }
  void gradients(int s) {
    a.set(true, [&](std::int64_t i) { return koptim_test::value(24, 0, s, i); });
    c.set(true, [&](std::int64_t i) { return koptim_test::value(24, 1, s, i); });
    v.set(true, [&](std::int64_t i) { return koptim_test::value(24, 2, s, i); });
  }
  // Another model's parameter values.
  void copy_values(const FilterModel& from) {
    for (auto* t : {&a, &c, &v}) {
      const auto* f = t == &a ? &from.a : t == &c ? &from.c : &from.v;
      const auto x  = f->get();
      t->set(false, [&](std::int64_t i) { return x[static_cast<std::size_t>(i)]; });
    }
  }
  std::vector<double> values() const {
    std::vector<double> out;
    for (const auto* t : {&a, &c, &v}) {
      const auto x = t->get();
      out.insert(out.end(), x.begin(), x.end());
    }
    return out;
  }
};

double max_difference(const std::vector<double>& x, const std::vector<double>& y) {
  double d = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) d = std::max(d, std::abs(x[i] - y[i]));
  return d;
}

TEST(Shampoo, FilterInEigenbasisEqualsRotatingEveryStep) {
  auto base = [] {
    Teuchos::ParameterList l;
    l.set("optimizer", std::string("Shampoo"));
    l.set("lr", 0.01);
    l.set("eigenvalue_corrected", true);
    Teuchos::Array<double> betas(2);
    betas[0] = 0.9;
    betas[1] = 0.99;
    l.set("betas", betas);
    l.set("epsilon", 1e-8);
    l.set("precondition_frequency", 3);
    l.set("max_preconditioner_dim", 4);
    l.set("use_merge_dims", false);
    return l;
  };
  std::vector<std::pair<std::string, Teuchos::ParameterList>> cases;
  cases.emplace_back("betas (0.9, 0.99)", base());
  auto l = base();
  l.set("beta3", 0.95);
  l.set("momentum", 0.5);
  cases.emplace_back("beta3 0.95, momentum", l);
  l = base();
  l.set("use_bias_correction", false);
  cases.emplace_back("no bias correction", l);
  l = base();
  l.set("eigenbasis", std::string("qr"));
  l.set("qr_tolerance", 0.0);
  cases.emplace_back("QR refresh", l);
  for (const auto& c : cases) {
    for (const bool host_batch : {true, false}) {
      SCOPED_TRACE(c.first + (host_batch ? "" : ", device path"));
      FilterModel on, off;
      auto a = koptim::create(on.params, c.second), b = koptim::create(off.params, c.second);
      auto& sa = dynamic_cast<koptim::Shampoo&>(*a);
      auto& sb = dynamic_cast<koptim::Shampoo&>(*b);
      EXPECT_TRUE(sa.filter_in_eigenbasis());
      sb.filter_in_eigenbasis(false);
      sa.batch_blocks_on_host(host_batch);
      sb.batch_blocks_on_host(host_batch);
      for (int s = 1; s <= 7; ++s) {
        on.gradients(s);
        off.gradients(s);
        a->step();
        b->step();
      }
      EXPECT_LE(max_difference(on.values(), off.values()), 1e-13);
      const auto state_on = a->export_state(), state_off = b->export_state();
      EXPECT_EQ(state_on.tensors.count("a/block0/filtered_grad_eigenbasis"), 1u);
      EXPECT_EQ(state_on.tensors.count("a/block0/filtered_grad"), 0u);
      EXPECT_EQ(state_off.tensors.count("a/block0/filtered_grad"), 1u);
      // The state in the parameters' coordinates, into a third optimizer that keeps it in the
      // eigenbasis (with off's parameter values): the same trajectory on.
      FilterModel loaded;
      loaded.copy_values(off);
      auto d = koptim::create(loaded.params, c.second);
      dynamic_cast<koptim::Shampoo&>(*d).batch_blocks_on_host(host_batch);
      d->import_state(state_off);
      // The imported filtered gradient is in this optimizer's form now: the form is fixed.
      EXPECT_THROW(dynamic_cast<koptim::Shampoo&>(*d).filter_in_eigenbasis(false), koptim::ConfigError);
      EXPECT_EQ(d->export_state().tensors.count("a/block0/filtered_grad_eigenbasis"), 1u);
      for (int s = 8; s <= 12; ++s) {
        on.gradients(s);
        off.gradients(s);
        loaded.gradients(s);
        a->step();
        b->step();
        d->step();
      }
      EXPECT_LE(max_difference(on.values(), off.values()), 1e-13);
      EXPECT_LE(max_difference(loaded.values(), off.values()), 1e-13);
      // And the eigenbasis form's state into the plain form (rotated out): the same trajectory.
      FilterModel plain;
      plain.copy_values(on);
      auto e = koptim::create(plain.params, c.second);
      dynamic_cast<koptim::Shampoo&>(*e).filter_in_eigenbasis(false);
      dynamic_cast<koptim::Shampoo&>(*e).batch_blocks_on_host(host_batch);
      const auto state_on_now = a->export_state();
      e->import_state(state_on_now);
      EXPECT_EQ(e->export_state().tensors.count("a/block0/filtered_grad"), 1u);
      // A state without the filtered gradient is refused naming both keys it may be read from, and
      // one with both is refused (which is meant?).
      auto refusal = [&](const koptim::OptimizerState& st) -> std::string {
        FilterModel other;
        auto f = koptim::create(other.params, c.second);
        try {
          f->import_state(st);
        } catch (const koptim::StateError& x) {
          return x.what();
        }
        return "";
      };
      auto missing = state_on_now;
      missing.tensors.erase("a/block0/filtered_grad_eigenbasis");
      EXPECT_NE(refusal(missing).find("no tensor 'a/block0/filtered_grad_eigenbasis' or 'a/block0/filtered_grad'"),
                std::string::npos)
          << refusal(missing);
      auto both                              = state_on_now;
      both.tensors["a/block0/filtered_grad"] = state_on_now.tensors.at("a/block0/filtered_grad_eigenbasis");
      EXPECT_NE(refusal(both).find("tensor 'a/block0/filtered_grad', which this optimizer does not hold"),
                std::string::npos)
          << refusal(both);
      for (int s = 13; s <= 15; ++s) {
        on.gradients(s);
        plain.gradients(s);
        a->step();
        e->step();
      }
      EXPECT_LE(max_difference(on.values(), plain.values()), 1e-13);
      // The form is chosen before the first step.
      EXPECT_THROW(sa.filter_in_eigenbasis(false), koptim::ConfigError);
      sa.filter_in_eigenbasis(true);  // unchanged: accepted
    }
  }
}

TEST(Shampoo, RejectsBadConfiguration) {
  Kokkos::View<float**> W("W", 4, 3), G("G", 4, 3);
  koptim::ParameterSet params;
  params.add("w", W, G);
  auto error = [&](const Teuchos::ParameterList& l) -> std::string {
    try {
      koptim::create(params, l);
    } catch (const koptim::ConfigError& e) {
      return e.what();
    }
    return "";
  };
  Teuchos::ParameterList base;
  base.set("optimizer", std::string("Shampoo"));
  auto a = base;
  a.set("pseudo_inverse", true);
  EXPECT_NE(error(a).find("pseudo_inverse = true needs epsilon = 0"), std::string::npos) << error(a);
  auto b = base;
  b.set("precondition_frequency", 10);
  b.set("start_preconditioning_step", 5);
  EXPECT_NE(error(b).find("start_preconditioning_step = 5 is not allowed"), std::string::npos) << error(b);
  // Coupled Newton computes 1/p roots only, without pseudo-inverses: refused at construction, not
  // at the first root computation (after that step's gradient had entered the factors).
  auto newton = base;
  newton.set("root_method", std::string("coupled_newton"));
  newton.set("use_merge_dims", false);  // w (4 x 3): one block of order 2
  auto n1 = newton;
  n1.set("pseudo_inverse", true);
  n1.set("epsilon", 0.0);
  EXPECT_NE(error(n1).find("pseudo_inverse = true needs root_method = eigen"), std::string::npos) << error(n1);
  for (const std::string a : {"0.3", "0.3333333333"}) {
    auto n2 = newton;
    n2.sublist("inverse_exponent_override").set("order_2_dim_1", std::stod(a));
    EXPECT_NE(error(n2).find("inverse_exponent_override/order_2_dim_1 = " + a + " is not one"), std::string::npos)
        << error(n2);
  }
  for (const double a : {1.0 / 3.0, 0.25, 0.0, 1.0}) {
    auto n3 = newton;
    n3.sublist("inverse_exponent_override").set("order_2", a);
    EXPECT_EQ(error(n3), "") << a;
  }
  auto c = base;
  c.sublist("inverse_exponent_override").set("order_two", 0.5);
  EXPECT_NE(error(c).find("unknown key 'inverse_exponent_override/order_two'"), std::string::npos) << error(c);
  auto d = base;
  d.sublist("inverse_exponent_override").set("order_2_dim_1", -0.5);
  EXPECT_NE(error(d).find("order_2_dim_1 = -0.5 is not allowed"), std::string::npos) << error(d);
  auto e = base;
  e.set("grafting", std::string("Adamax"));
  EXPECT_NE(error(e).find("one of: none, SGD, AdaGrad, RMSProp, Adam"), std::string::npos) << error(e);
  auto f = base;
  Teuchos::Array<double> betas(2);
  betas[0] = 0.9;
  betas[1] = 0.0;
  f.set("betas", betas);
  // Refused by the list's validator (before the constructor, which refuses it too).
  EXPECT_NE(error(f).find("key 'betas' in list 'ANONYMOUS' = {0.9, 0} (Array(double)): entry 1 is out of range"),
            std::string::npos)
      << error(f);
  auto g = base;
  g.set("use_merge_dims", false);  // w (4 x 3): one block of order 2 (merged: one of order 1, 12)
  g.sublist("inverse_exponent_override").set("order_2_dim_1", 0.0);
  g.sublist("inverse_exponent_override").set("order_2", 0.25);
  koptim::create(params, g);  // valid
  // An override that no block takes would be ignored: w (4 x 3) is one block of order 2 here; with
  // merged dimensions one block of order 1, and order_2 names none.
  auto merged = base;
  merged.sublist("inverse_exponent_override").set("order_2", 0.25);
  EXPECT_NE(error(merged).find("order_2 matches no block and would be ignored; the blocks have order 1"),
            std::string::npos)
      << error(merged);
  for (const std::string key : {"order_1", "order_3", "order_2_dim_2", "order_1_dim_0"}) {
    auto u = g;
    u.sublist("inverse_exponent_override").remove("order_2_dim_1");
    u.sublist("inverse_exponent_override").remove("order_2");
    u.sublist("inverse_exponent_override").set(key, 0.25);
    EXPECT_NE(error(u).find("inverse_exponent_override/" + key +
                            " matches no block and would be ignored; the blocks have order 2"),
              std::string::npos)
        << error(u);
  }
  // An order whose every dimension has its own entry: the order's entry would be ignored.
  auto all_dims = g;
  all_dims.sublist("inverse_exponent_override").set("order_2_dim_0", 0.5);
  EXPECT_NE(error(all_dims).find("order_2 would be ignored: every dimension of order 2 has an order_2_dim_J entry"),
            std::string::npos)
      << error(all_dims);
  // Without a communicator the process is a world of one rank.
  auto t = base;
  t.set("num_trainers_per_group", 2);
  EXPECT_NE(error(t).find("num_trainers_per_group = 2 is not allowed without a communicator"), std::string::npos)
      << error(t);
  t.set("num_trainers_per_group", 1);
  EXPECT_EQ(error(t), "");
  auto h = base;
  h.set("eigenbasis", std::string("qr"));
  EXPECT_NE(error(h).find("eigenbasis = qr needs eigenvalue_corrected = true"), std::string::npos) << error(h);
  h.set("eigenvalue_corrected", true);
  koptim::create(params, h);  // valid
  h.set("qr_tolerance", 1.5);
  EXPECT_NE(error(h).find("qr_tolerance"), std::string::npos) << error(h);
  // QR settings written for the exact refresh would do nothing: refused, naming both values.
  auto i = base;
  i.set("eigenvalue_corrected", true);
  i.set("qr_tolerance", 0.001);
  EXPECT_NE(error(i).find("qr_max_iterations = 1 and qr_tolerance = 0.001 would have no effect"), std::string::npos)
      << error(i);
  i.set("qr_tolerance", 0.01);  // the default, written out: harmless
  koptim::create(params, i);
}

// A key that the other keys make irrelevant would be ignored: refused naming it and the key it
// depends on, unless it holds its default (a printed default list reads back); with the key it
// depends on set as it needs, it is accepted.
TEST(Shampoo, RefusesKeysThatWouldHaveNoEffect) {
  Kokkos::View<float**> W("W", 4, 3), G("G", 4, 3);
  koptim::ParameterSet params;
  params.add("w", W, G);
  using List = Teuchos::ParameterList;
  struct Case {
    std::function<void(List&)> set;      // the key that would do nothing
    std::function<void(List&)> context;  // what makes it act
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](List& l) { l.set("rank_rtol", 1e-6); }, [](List& l) { l.set("pseudo_inverse", true), l.set("epsilon", 0.0); },
       "rank_rtol = 1e-06 and rank_atol = 0 would have no effect: they apply to pseudo_inverse = true"},
      {[](List& l) { l.set("rank_atol", 1e-9); }, [](List& l) { l.set("pseudo_inverse", true), l.set("epsilon", 0.0); },
       "rank_rtol = 0 and rank_atol = 1e-09 would have no effect"},
      {[](List& l) { l.set("grafting_beta2", 0.95); }, [](List& l) { l.set("grafting", std::string("RMSProp")); },
       "grafting_beta2 = 0.95 would have no effect: it applies to grafting = RMSProp or Adam (grafting is none)"},
      {[](List& l) { l.set("grafting_epsilon", 1e-8); }, [](List& l) { l.set("grafting", std::string("AdaGrad")); },
       "grafting_epsilon = 1e-08 would have no effect: it applies to grafting = AdaGrad, RMSProp or Adam"},
      {[](List& l) { l.set("dampening", 0.1); }, [](List& l) { l.set("momentum", 0.9); },
       "dampening = 0.1 would have no effect: it applies to momentum > 0"},
      {[](List& l) {
         Teuchos::Array<double> betas(2);
         betas[0] = 0.0, betas[1] = 1.0;
         l.set("betas", betas), l.set("beta3", 0.5);
       },
       [](List& l) {
         Teuchos::Array<double> betas(2);
         betas[0] = 0.9, betas[1] = 1.0;
         l.set("betas", betas);
       },
       "beta3 = 0.5 would have no effect: with betas[0] = 0 the gradient is not filtered"},
      {[](List& l) { l.set("eigenvalue_corrected", true), l.set("root_method", std::string("coupled_newton")); },
       [](List& l) { l.set("eigenvalue_corrected", false); },
       "root_method = coupled_newton would have no effect: eigenvalue_corrected = true computes eigenbases"},
      {[](List& l) { l.set("eigenvalue_corrected", true), l.set("pseudo_inverse", true), l.set("epsilon", 0.0); },
       [](List& l) { l.set("eigenvalue_corrected", false); },
       "pseudo_inverse = true would have no effect: eigenvalue_corrected = true computes eigenbases"},
      {[](List& l) {
         l.set("eigenvalue_corrected", true);
         l.sublist("inverse_exponent_override").set("order_1", 0.5);  // w (4 x 3) merged: one order-1 block
       },
       [](List& l) { l.set("eigenvalue_corrected", false); },
       "inverse_exponent_override would have no effect: eigenvalue_corrected = true computes eigenbases"},
      {[](List& l) {
         Teuchos::Array<double> betas(2);
         betas[0] = 0.0, betas[1] = 1.0;
         l.set("betas", betas), l.set("use_bias_correction", false);
       },
       [](List& l) {
         Teuchos::Array<double> betas(2);
         betas[0] = 0.0, betas[1] = 0.999;  // factors that are averages: their bias correction
         l.set("betas", betas);
       },
       "use_bias_correction = false would have no effect: with betas = [0, 1] nothing is bias-corrected"},
  };
  for (const auto& c : cases) {
    List l;
    l.set("optimizer", std::string("Shampoo"));
    c.set(l);
    koptim_test::expect_error<koptim::ConfigError>([&] { koptim::create(params, l); }, {c.message});
    c.context(l);
    EXPECT_NO_THROW(koptim::create(params, l)) << c.message;
  }
  // The defaults written out are accepted whatever the other keys say.
  List d;
  d.set("optimizer", std::string("Shampoo"));
  d.set("eigenvalue_corrected", true);
  for (const char* k : {"rank_rtol", "rank_atol", "dampening"}) d.set(k, 0.0);
  d.set("grafting_epsilon", 1e-10);
  d.set("root_method", std::string("eigen"));
  d.set("pseudo_inverse", false);
  d.set("use_bias_correction", true);
  Teuchos::Array<double> betas(2);
  betas[0] = 0.0, betas[1] = 1.0;
  d.set("betas", betas);
  EXPECT_NO_THROW(koptim::create(params, d));
}

// eigenbasis = qr: the first refresh is exact (no QR counted), the later ones warm-started; the
// tolerance decides whether a QR step runs (1: never, 0: every time, up to qr_max_iterations).
TEST(Shampoo, QrEigenbasisCountsItsRefreshesAndSteps) {
  auto run = [](double tolerance, int max_iterations, bool qr) {
    TestTensor<double> w({6, 5}, "w"), v({7}, "v");
    koptim::ParameterSet params;
    w.add_to(params, "w");
    v.add_to(params, "v");
    Teuchos::ParameterList l;
    l.set("optimizer", std::string("Shampoo"));
    l.set("lr", 0.01);
    l.set("precondition_frequency", 2);
    l.set("use_merge_dims", false);  // w stays a 6 x 5 block
    l.set("eigenvalue_corrected", true);
    if (qr) {
      l.set("eigenbasis", std::string("qr"));
      l.set("qr_tolerance", tolerance);
      l.set("qr_max_iterations", max_iterations);
    }
    auto opt       = koptim::create(params, l);
    const auto& sh = dynamic_cast<const koptim::Shampoo&>(*opt);
    for (int s = 1; s <= 7; ++s) {
      w.set(true, [&](std::int64_t i) { return koptim_test::value(5, 0, s, i); });
      v.set(true, [&](std::int64_t i) { return koptim_test::value(5, 1, s, i); });
      opt->step();
    }
    return std::make_pair(sh.qr_refreshes(), sh.qr_iterations());
  };
  // Refreshes at steps 2 (exact), 4 and 6 of three factors (6, 5 and 7).
  EXPECT_EQ(run(0.0, 1, false), std::make_pair(std::int64_t(0), std::int64_t(0)));
  EXPECT_EQ(run(1.0, 1, true), std::make_pair(std::int64_t(6), std::int64_t(0)));
  EXPECT_EQ(run(0.0, 1, true), std::make_pair(std::int64_t(6), std::int64_t(6)));
  EXPECT_EQ(run(0.0, 4, true), std::make_pair(std::int64_t(6), std::int64_t(24)));
}

TEST(Shampoo, StateRoundTripResumesBitwise) {
  auto make = [](koptim::ParameterSet& p) {
    Teuchos::ParameterList l;
    l.set("optimizer", std::string("Shampoo"));
    l.set("lr", 0.01);
    l.set("grafting", std::string("AdaGrad"));
    l.set("momentum", 0.5);
    l.set("precondition_frequency", 2);
    l.set("epsilon", 1e-8);
    l.set("max_preconditioner_dim", 32);
    return koptim::create(p, l);
  };
  // 40 x 30 with max_preconditioner_dim 32: blocks 32 x 30 and 8 x 30, two factors each.
  TestTensor<float> a1({40, 30}, "a"), a2({40, 30}, "a");
  koptim::ParameterSet p1, p2;
  a1.add_to(p1, "a");
  a2.add_to(p2, "a");
  auto o1 = make(p1), o2 = make(p2);
  for (int s = 1; s <= 5; ++s) {
    a1.set(true, [&](std::int64_t i) { return koptim_test::value(9, 0, s, i); });
    o1->step();
  }
  const auto st     = o1->export_state();
  std::size_t bytes = 0;
  for (const auto& kv : st.tensors) bytes += kv.second.data.size();
  EXPECT_EQ(bytes, o1->state_bytes());
  auto bad = st;
  bad.tensors.erase("a/block1/factor1");
  EXPECT_THROW(o2->import_state(bad), koptim::StateError);
  bad                             = st;
  bad.tensors["a/block2/factor0"] = st.tensors.at("a/block1/factor0");
  EXPECT_THROW(o2->import_state(bad), koptim::StateError);
  bad = st;
  bad.tensors["a/block1/root0"].data.resize(4);
  EXPECT_THROW(o2->import_state(bad), koptim::StateError);
  EXPECT_EQ(o2->step_count(), 0);
  Kokkos::deep_copy(a2.p2, a1.p2);
  o2->import_state(st);
  for (int s = 6; s <= 9; ++s) {
    a1.set(true, [&](std::int64_t i) { return koptim_test::value(9, 0, s, i); });
    a2.set(true, [&](std::int64_t i) { return koptim_test::value(9, 0, s, i); });
    o1->step();
    o2->step();
  }
  EXPECT_EQ(a1.get(), a2.get());
}

}  // namespace
