// Tests of the Gefen optimizer: steps against a plain host implementation of the step of docs/gefen.md
// written here (bitwise where the order of operations is the same), the initialisation glue
// (partition per tensor, codebook from the scale-block-normalised histogram), the quantized
// momentum against an fp32 momentum over 200 steps, exact state bytes and the per-tensor report,
// the parameter list, export/import, and non-finite gradients.
#include "koptim_TestData.hpp"
#include "koptim_TestErrors.hpp"
#include "koptim_TestTensor.hpp"

#include <koptim/koptim.hpp>
#include <koptim/gefen/koptim_GefenCodebook.hpp>
#include <koptim/gefen/koptim_GefenPartition.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>

namespace {

using koptim::GefenSecondMoment;
using koptim_test::TestTensor;

// Gradients with a per-row scale (the structure the partition rule looks for) for a tensor of
// `rows` slowest-dimension rows: g = 2^(hash % 7 - 3 of the row) * value(seed, tensor, step, i).
double structured_gradient(std::uint64_t tensor, int step, std::int64_t i, std::int64_t row_len) {
  const std::int64_t row = i / row_len;
  const int e            = static_cast<int>(koptim_test::mix(tensor * 1000 + row) % 7) - 3;
  return std::ldexp(koptim_test::value(11, tensor, step, i), e);
}

// A small model of float tensors of several kinds plus one double tensor.
struct Model {
  TestTensor<float> w1{{64, 96}, "w1"};     // per-row scales: shared blocks by default
  TestTensor<float> b1{{96}, "b1"};         // small vector
  TestTensor<float> w2{{8, 16, 40}, "w2"};  // 5120 elements, 3 dims: factored when p = 1
  TestTensor<float> w3{{3, 5}, "w3"};       // tiny
  TestTensor<double> d{{33, 7}, "d"};       // double precision
  koptim::ParameterSet params;
  // With groups, w1 and w3 are in group "slow" and b1 and d in group "fast" (their own lr and
  // weight decay, interleaved with the default group's w2).
  std::vector<int> group = {0, 0, 0, 0, 0};
  explicit Model(bool groups = false) {
    int k = 0;
    for (auto* t : {&w1, &b1, &w2, &w3}) {
      t->set(false, [&](std::int64_t i) { return koptim_test::value(5, k, 0, i); });
      ++k;
    }
    d.set(false, [](std::int64_t i) { return koptim_test::value(5, 9, 0, i); });
    if (groups) {
      const int slow = params.add_group("slow", {3e-3, 0.01});
      const int fast = params.add_group("fast", {2e-2, 0.0});
      group          = {slow, fast, 0, slow, fast};
    }
    w1.add_to(params, "w1", group[0]);
    b1.add_to(params, "b1", group[1]);
    w2.add_to(params, "w2", group[2]);
    w3.add_to(params, "w3", group[3]);
    d.add_to(params, "d", group[4]);
  }
  // The lr and weight decay of tensor t, given the optimizer's.
  std::pair<double, double> lr_wd(int t, double lr, double wd) const {
    const auto& o = params.groups()[group[t]].options;
    return {o.lr.value_or(lr), o.weight_decay.value_or(wd)};
  }
  static std::int64_t row_len(const std::vector<std::int64_t>& shape) {
    std::int64_t n = 1;
    for (std::size_t r = 1; r < shape.size(); ++r) n *= shape[r];
    return n;
  }
  std::vector<std::vector<double>> gradients(int step) const {
    std::vector<std::vector<double>> g;
    std::uint64_t k = 0;
    auto fill       = [&](const auto& t) {
      std::vector<double> x(t.size());
      for (std::int64_t i = 0; i < t.size(); ++i) x[i] = structured_gradient(k, step, i, row_len(t.shape));
      t.set(true, [&](std::int64_t i) { return x[i]; });
      g.push_back(x);
      ++k;
    };
    fill(w1);
    fill(b1);
    fill(w2);
    fill(w3);
    fill(d);
    return g;
  }
  std::vector<std::vector<double>> weights() const { return {w1.get(), b1.get(), w2.get(), w3.get(), d.get()}; }
};

std::unique_ptr<koptim::Optimizer> make(const koptim::ParameterSet& p, const std::map<std::string, std::string>& s,
                                        double lr = 1e-2, double wd = 0.1) {
  Teuchos::ParameterList l;
  l.set("optimizer", std::string("Gefen"));
  l.set("lr", lr);
  l.set("weight_decay", wd);
  for (const auto& kv : s) {
    if (kv.first == "groups") continue;  // the model's, not a key
    if (kv.first == "force_p1") {
      l.set(kv.first, kv.second == "true");
    } else if (kv.first == "eps") {
      l.set(kv.first, std::stod(kv.second));
    } else if (kv.first == "betas") {  // "b1,b2"
      Teuchos::Array<double> betas(2);
      betas[0] = std::stod(kv.second);
      betas[1] = std::stod(kv.second.substr(kv.second.find(',') + 1));
      l.set(kv.first, betas);
    } else {
      l.set(kv.first, kv.second);
    }
  }
  return koptim::create(p, l);
}

koptim::Gefen& gefen(const std::unique_ptr<koptim::Optimizer>& o) { return dynamic_cast<koptim::Gefen&>(*o); }

std::vector<double> values(const koptim::StateTensor& t) {
  std::vector<double> out(t.size());
  if (t.dtype == koptim::ScalarType::uint8) {
    std::copy(t.data.begin(), t.data.end(), out.begin());
  } else if (t.dtype == koptim::ScalarType::float32) {
    std::vector<float> f(out.size());
    std::memcpy(f.data(), t.data.data(), f.size() * 4);
    std::copy(f.begin(), f.end(), out.begin());
  } else {
    std::memcpy(out.data(), t.data.data(), out.size() * 8);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// The reference: the step of docs/gefen.md for one tensor in plain host loops, in precision T, with the
// partition, the kind of second moment and the codebook given (they are what initialisation
// decided; the tests check those decisions separately).
template <class T>
struct ReferenceTensor {
  std::int64_t n = 0, p = 1, S = 1, rows = 0, cols = 0;
  GefenSecondMoment kind = GefenSecondMoment::full;
  std::vector<T> w;
  std::vector<int> idx;
  std::vector<T> absmax, v, R, C;

  ReferenceTensor(const koptim::GefenTensorInfo& info, const std::vector<double>& w0)
      : n(info.size),
        p(info.partition),
        S(info.scale_block),
        rows(info.rows),
        cols(info.cols),
        kind(info.second_moment),
        w(w0.begin(), w0.end()),
        idx(n, 0),
        absmax(n / S, T(0)) {
    if (kind == GefenSecondMoment::shared) v.assign(n / p, T(0));
    if (kind == GefenSecondMoment::full) v.assign(n, T(0));
    if (kind == GefenSecondMoment::factored) {
      R.assign(rows, T(0));
      C.assign(cols, T(0));
    }
  }

  // m / absmax as the kernels compute it: m * (1 / absmax), or m / absmax where 1 / absmax
  // overflows; 0 for an all-zero block.
  static T normalise(T m, T amax) {
    if (amax == T(0)) return T(0);
    const T inv = T(1) / amax;
    return std::isfinite(inv) ? m * inv : m / amax;
  }

  static int nearest(const std::vector<float>& c, T x) {
    int best = 0;
    for (int k = 1; k < static_cast<int>(c.size()); ++k)
      if (std::abs(x - static_cast<T>(c[k])) < std::abs(x - static_cast<T>(c[best]))) best = k;
    return best;
  }

  void step(const std::vector<double>& g64, const std::vector<float>& c, std::int64_t t, double lr, double wd,
            double beta1, double beta2, double epsilon) {
    const std::vector<T> g(g64.begin(), g64.end());
    const T b1 = static_cast<T>(beta1), omb1 = static_cast<T>(1.0 - beta1), b2 = static_cast<T>(beta2),
            omb2 = static_cast<T>(1.0 - beta2), eps = static_cast<T>(epsilon);
    const T neg_step_size = static_cast<T>(-(lr / (1.0 - std::pow(beta1, static_cast<double>(t)))));
    const T bc2_sqrt      = static_cast<T>(std::sqrt(1.0 - std::pow(beta2, static_cast<double>(t))));
    const T decay         = static_cast<T>(1.0 - lr * wd);

    // 1. Second moment.
    std::vector<T> vi(n);
    if (kind == GefenSecondMoment::shared) {
      for (std::int64_t b = 0; b < n / p; ++b) {
        double sum = 0;
        for (std::int64_t i = b * p; i < (b + 1) * p; ++i) sum += static_cast<double>(g[i]) * g[i];
        v[b] = v[b] * b2 + omb2 * static_cast<T>(sum / static_cast<double>(p));
        for (std::int64_t i = b * p; i < (b + 1) * p; ++i) vi[i] = v[b];
      }
    } else if (kind == GefenSecondMoment::full) {
      for (std::int64_t i = 0; i < n; ++i) vi[i] = v[i] = v[i] * b2 + omb2 * g[i] * g[i];
    } else {
      for (std::int64_t r = 0; r < rows; ++r) {
        double sum = 0;
        for (std::int64_t j = 0; j < cols; ++j) sum += static_cast<double>(g[r * cols + j]) * g[r * cols + j];
        R[r] = R[r] * b2 + omb2 * static_cast<T>(sum / static_cast<double>(cols));
      }
      for (std::int64_t j = 0; j < cols; ++j) {
        double sum = 0;
        for (std::int64_t r = 0; r < rows; ++r) sum += static_cast<double>(g[r * cols + j]) * g[r * cols + j];
        C[j] = C[j] * b2 + omb2 * static_cast<T>(sum / static_cast<double>(rows));
      }
      double mean = 0;
      for (std::int64_t r = 0; r < rows; ++r) mean += R[r];
      mean /= static_cast<double>(rows);
      for (std::int64_t i = 0; i < n; ++i)
        vi[i] = mean > 0 ? static_cast<T>(static_cast<double>(R[i / cols]) * C[i % cols] / mean) : T(0);
    }
    // 2. Decoupled weight decay.
    if (wd != 0)
      for (auto& x : w) x = x * decay;
    // 3.-5. Per scale block: new momentum, new absmax, requantize, update from the requantized value.
    for (std::int64_t a = 0; a < n / S; ++a) {
      std::vector<T> m(S);
      T amax = 0;
      for (std::int64_t k = 0; k < S; ++k) {
        const std::int64_t i = a * S + k;
        m[k]                 = b1 * (static_cast<T>(c[idx[i]]) * absmax[a]) + omb1 * g[i];
        amax                 = std::max(amax, std::abs(m[k]));
      }
      absmax[a] = amax;
      for (std::int64_t k = 0; k < S; ++k) {
        const std::int64_t i = a * S + k;
        idx[i]               = nearest(c, normalise(m[k], amax));
        const T mq           = static_cast<T>(c[idx[i]]) * amax;
        // No step where the second moment is 0 (every gradient of the element so far 0).
        if (vi[i] != T(0)) w[i] = w[i] + (neg_step_size * mq) / (std::sqrt(vi[i]) / bc2_sqrt + eps);
      }
    }
  }
};

// The codebook the first gradients should give: host histogram of g / absmax(scale block).
std::vector<float> reference_codebook(const std::vector<std::vector<double>>& g0,
                                      const std::vector<koptim::GefenTensorInfo>& infos, bool is_float[]) {
  std::vector<std::int64_t> counts(koptim::gefen::histogram_bins, 0);
  for (std::size_t t = 0; t < g0.size(); ++t) {
    std::vector<double> g = g0[t];  // the values the tensor holds
    if (is_float[t])
      for (auto& x : g) x = static_cast<float>(x);
    const std::int64_t S = infos[t].scale_block;
    for (std::int64_t a = 0; a < infos[t].size / S; ++a) {
      double amax = 0;
      for (std::int64_t k = 0; k < S; ++k) amax = std::max(amax, std::abs(g[a * S + k]));
      for (std::int64_t k = 0; k < S; ++k) {
        const double x = amax > 0 ? g[a * S + k] / amax : 0.0;
        counts[std::min<std::int64_t>(static_cast<std::int64_t>((x + 1.0) * 2048.0), 4095)] += 1;
      }
    }
  }
  const auto c = koptim::gefen::codebook_from_histogram<float>(counts);
  return std::vector<float>(c.begin(), c.end());
}

// How Gefen's state and parameters after a few steps compare with the plain reference. On host
// backends koptim computes in the reference's arithmetic: bitwise (the parameters of the shared
// and factored kinds to a few ulp: their second moment is summed in another order). On a device
// nvcc fuses multiply-adds and a team sums in its own order: the same to rounding, except where
// rounding moves a momentum across a codebook threshold; there the index differs (at most 1% of
// them here) and that element's later steps by a fraction of one (up to lr).
constexpr bool host_arithmetic = std::is_same<koptim::ExecutionSpace, Kokkos::DefaultHostExecutionSpace>::value;

template <class Ref>
void expect_indices(const std::vector<double>& idx, const Ref& ref) {
  std::size_t moved = 0;
  for (std::size_t i = 0; i < idx.size(); ++i) {
    if (host_arithmetic) ASSERT_EQ(idx[i], ref[i]) << "index " << i;
    moved += idx[i] != static_cast<double>(ref[i]);
  }
  EXPECT_LE(moved, idx.size() / 100) << "momentum indices that differ from the reference";
}

// w against the reference's parameters rw: within `exact` (0: bitwise) everywhere on host
// backends; on a device within 64 ulp of the largest parameter, or within lr for at most 1%.
template <class W, class RW>
void expect_parameters(const W& w, const RW& rw, double exact, double lr) {
  double scale = 0;
  for (auto x : rw) scale = std::max(scale, std::abs(static_cast<double>(x)));
  const double ulp = std::is_same<typename RW::value_type, float>::value ? 6e-8 : 1.2e-16;
  std::size_t off  = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    const double r = static_cast<double>(rw[i]);
    if (host_arithmetic) {
      if (exact == 0)
        ASSERT_EQ(w[i], r) << "parameter " << i;
      else
        ASSERT_NEAR(w[i], r, exact * ulp * scale) << "parameter " << i;
    } else {
      ASSERT_NEAR(w[i], r, lr) << "parameter " << i;
      off += std::abs(w[i] - r) > 64 * ulp * scale;
    }
  }
  EXPECT_LE(off, w.size() / 100) << "parameters beyond rounding of the reference";
}

struct Config {
  std::string name;
  std::map<std::string, std::string> keys;
};
// Without it GoogleTest prints a parameter's raw bytes (padding included: valgrind reports the
// read of uninitialised memory).
void PrintTo(const Config& c, std::ostream* os) { *os << c.name; }

class GefenReference : public ::testing::TestWithParam<Config> {};

// Five steps of the optimizer against the reference: indices and scales bitwise (the momentum
// path has the same order of operations everywhere), parameters bitwise where the second
// moment is per element, within a few ulps where it comes from a team reduction.
TEST_P(GefenReference, StepsMatchPlainImplementation) {
  Model m(GetParam().keys.count("groups") > 0);
  const double lr = 1e-2, wd = 0.1;
  auto opt  = make(m.params, GetParam().keys, lr, wd);
  auto& gef = gefen(opt);
  EXPECT_FALSE(gef.initialised());
  const auto w0 = m.weights();
  const auto g1 = m.gradients(1);
  opt->step();
  ASSERT_TRUE(gef.initialised());
  const auto infos = gef.tensor_info();
  // Initialisation: partitions as the rule says on the first gradients, codebook from the
  // scale-block-normalised histogram.
  const bool force_p1 = GetParam().keys.count("force_p1") > 0;
  const bool vdrop    = GetParam().keys.count("partition_rule") > 0;
  for (std::size_t t = 0; t < infos.size(); ++t) {
    const auto& g  = g1[t];
    const bool f32 = t < 4;
    std::int64_t expected_p;
    if (force_p1) {
      expected_p = 1;
    } else if (f32) {
      const std::vector<float> gf(g.begin(), g.end());
      expected_p = vdrop ? koptim::gefen::choose_partition_variance_drop(gf.data(), gf.size())
                         : koptim::gefen::choose_partition(gf.data(), gf.size());
    } else {
      expected_p = vdrop ? koptim::gefen::choose_partition_variance_drop(g.data(), g.size())
                         : koptim::gefen::choose_partition(g.data(), g.size());
    }
    EXPECT_EQ(infos[t].partition, expected_p) << infos[t].name;
  }
  bool is_float[] = {true, true, true, true, false};
  EXPECT_EQ(gef.codebook(), reference_codebook(g1, infos, is_float));
  const auto cb = gef.codebook();

  std::vector<ReferenceTensor<float>> rf;
  for (int t = 0; t < 4; ++t) rf.emplace_back(infos[t], w0[t]);
  ReferenceTensor<double> rd(infos[4], w0[4]);
  const auto& keys = GetParam().keys;
  const double b1  = keys.count("betas") ? std::stod(keys.at("betas")) : 0.9;
  const double b2  = keys.count("betas") ? std::stod(keys.at("betas").substr(keys.at("betas").find(',') + 1)) : 0.999;
  const double eps = keys.count("eps") ? std::stod(keys.at("eps")) : 1e-8;
  auto ref_step    = [&](const std::vector<std::vector<double>>& g, std::int64_t t) {
    for (int k = 0; k < 4; ++k) {
      const auto group = m.lr_wd(k, lr, wd);
      rf[k].step(g[k], cb, t, group.first, group.second, b1, b2, eps);
    }
    const auto group = m.lr_wd(4, lr, wd);
    rd.step(g[4], cb, t, group.first, group.second, b1, b2, eps);
  };
  ref_step(g1, 1);
  for (int s = 2; s <= 5; ++s) {
    const auto g = m.gradients(s);
    opt->step();
    ref_step(g, s);
  }
  const auto state = opt->export_state();
  const auto w     = m.weights();
  auto compare     = [&](const auto& ref, std::size_t t) {
    const auto& info = infos[t];
    SCOPED_TRACE(info.name + " (" + koptim::to_string(info.second_moment) + ", p = " + std::to_string(info.partition) +
                     ")");
    const auto idx = values(state.tensors.at(info.name + "/indices"));
    const auto am  = values(state.tensors.at(info.name + "/absmax"));
    ASSERT_EQ(idx.size(), static_cast<std::size_t>(info.size));
    expect_indices(idx, ref.idx);
    for (std::size_t a = 0; a < am.size(); ++a) {
      const double r = static_cast<double>(ref.absmax[a]);
      if (host_arithmetic)
        ASSERT_EQ(am[a], r) << "absmax " << a;
      else
        ASSERT_NEAR(am[a], r, 1e-5 * std::abs(r)) << "absmax " << a;
    }
    expect_parameters(w[t], ref.w, info.second_moment == GefenSecondMoment::full ? 0.0 : 8.0, lr);
  };
  for (int t = 0; t < 4; ++t) compare(rf[t], t);
  compare(rd, 4);
}

INSTANTIATE_TEST_SUITE_P(
    Gefen, GefenReference,
    ::testing::Values(
        Config{"defaults", {}}, Config{"force_p1_factored", {{"force_p1", "true"}}},
        Config{"force_p1_full", {{"force_p1", "true"}, {"p1_second_moment", "full"}}},
        Config{"variance_drop", {{"partition_rule", "variance_drop"}}},
        // Parameter groups: one kernel per group, its tensors of
        // every kind; two factored tensors in two groups.
        Config{"groups", {{"groups", ""}}}, Config{"groups_force_p1_factored", {{"groups", ""}, {"force_p1", "true"}}},
        Config{"groups_force_p1_full", {{"groups", ""}, {"force_p1", "true"}, {"p1_second_moment", "full"}}},
        // Other betas and eps (every kind's step reads them).
        Config{"betas_eps", {{"betas", "0.8,0.95"}, {"eps", "1e-3"}}},
        Config{"betas_eps_force_p1_factored", {{"betas", "0.5,0.9"}, {"eps", "1e-4"}, {"force_p1", "true"}}},
        Config{"betas_eps_force_p1_full",
               {{"betas", "0.5,0.9"}, {"eps", "1e-4"}, {"force_p1", "true"}, {"p1_second_moment", "full"}}}),
    [](const ::testing::TestParamInfo<Config>& i) { return i.param.name; });

// Many factored tensors, in two parameter groups, more than one wave of
// gefen::host_wave_bytes per host thread in each (on host backends a wave's factors, then its
// update): every tensor steps as the reference does. A device step is one wave whatever the
// model (and a device's concurrency, some 10^5 threads, would ask for millions of tensors): three
// tensors per group there.
TEST(Gefen, FactoredTensorsInWavesMatchPlainImplementation) {
  const std::int64_t bytes  = 150 * 70 * sizeof(float);
  constexpr bool host_waves = std::is_same<koptim::ExecutionSpace, Kokkos::DefaultHostExecutionSpace>::value;
  const int per_group =
      host_waves
          ? static_cast<int>(2 * koptim::gefen::host_wave_bytes * koptim::ExecutionSpace().concurrency() / bytes +
                             2)  // > 2 waves
          : 3;
  koptim::ParameterSet params;
  const int other = params.add_group("other", {3e-3, 0.0});
  std::vector<std::unique_ptr<TestTensor<float>>> t;
  for (int k = 0; k < 2 * per_group; ++k) {
    t.push_back(std::make_unique<TestTensor<float>>(std::vector<std::int64_t>{150, 70}, "w"));
    t.back()->set(false, [&](std::int64_t i) { return koptim_test::value(6, k, 0, i); });
    t.back()->add_to(params, "w" + std::to_string(k), k % 2 == 0 ? 0 : other);  // interleaved
  }
  const double lr = 1e-2, wd = 0.1;
  auto gradients = [&](int step) {
    std::vector<std::vector<double>> g;
    for (std::size_t k = 0; k < t.size(); ++k) {
      std::vector<double> x(t[k]->size());
      for (std::size_t i = 0; i < x.size(); ++i)
        x[i] = static_cast<float>(structured_gradient(k, step, static_cast<std::int64_t>(i), 70));
      t[k]->set(true, [&](std::int64_t i) { return x[i]; });
      g.push_back(x);
    }
    return g;
  };
  std::vector<std::vector<double>> w0;
  for (const auto& x : t) w0.push_back(x->get());
  auto opt = make(params, {{"force_p1", "true"}}, lr, wd);
  auto g   = gradients(1);
  opt->step();
  const auto infos = gefen(opt).tensor_info();
  const auto cb    = gefen(opt).codebook();
  std::vector<ReferenceTensor<float>> ref;
  for (std::size_t k = 0; k < t.size(); ++k) {
    ASSERT_EQ(infos[k].second_moment, GefenSecondMoment::factored);
    ref.emplace_back(infos[k], w0[k]);
  }
  for (int s = 1; s <= 4; ++s) {
    if (s > 1) {
      g = gradients(s);
      opt->step();
    }
    for (std::size_t k = 0; k < t.size(); ++k)
      ref[k].step(g[k], cb, s, k % 2 == 0 ? lr : 3e-3, k % 2 == 0 ? wd : 0.0, 0.9, 0.999, 1e-8);
  }
  const auto state = opt->export_state();
  for (std::size_t k = 0; k < t.size(); ++k) {
    SCOPED_TRACE(infos[k].name);
    const auto idx = values(state.tensors.at(infos[k].name + "/indices"));
    expect_indices(idx, ref[k].idx);
    expect_parameters(t[k]->get(), ref[k].w, 8.0, lr);
  }
}

// The configurations above cover every kind of second moment.
TEST(Gefen, ReferenceConfigsCoverEveryKind) {
  std::set<GefenSecondMoment> kinds;
  for (auto keys : std::vector<std::map<std::string, std::string>>{
           {}, {{"force_p1", "true"}}, {{"force_p1", "true"}, {"p1_second_moment", "full"}}}) {
    Model m;
    auto opt = make(m.params, keys);
    m.gradients(1);
    opt->step();
    for (const auto& i : gefen(opt).tensor_info()) kinds.insert(i.second_moment);
  }
  EXPECT_TRUE(kinds.count(GefenSecondMoment::shared));
  EXPECT_TRUE(kinds.count(GefenSecondMoment::factored));
  EXPECT_TRUE(kinds.count(GefenSecondMoment::full));
}

// A 64x96 matrix with per-row scales gets p = 96 (the partition rule), one shared second
// moment per row; the quantized first moment at t = 1 is (1 - b1) g quantized.
TEST(Gefen, PerRowScalesShareOneSecondMomentPerRow) {
  TestTensor<float> w({64, 96}, "w");
  koptim::ParameterSet params;
  w.add_to(params, "w");
  std::mt19937_64 rng(1);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> g(64 * 96);
  for (int r = 0; r < 64; ++r) {
    const double s = std::exp(normal(rng));
    for (int j = 0; j < 96; ++j) g[r * 96 + j] = s * normal(rng);
  }
  w.set(true, [&](std::int64_t i) { return g[i]; });
  auto opt = make(params, {}, 1e-3, 0.0);
  opt->step();
  const auto info = gefen(opt).tensor_info().at(0);
  EXPECT_EQ(info.partition, 96);
  EXPECT_EQ(info.blocks, 64);
  EXPECT_EQ(info.scale_block, 96);
  EXPECT_EQ(info.second_moment, GefenSecondMoment::shared);
  EXPECT_EQ(info.state_bytes, 6144u + 64 * 4 + 64 * 4);
  // v_b = (1 - b2) mean(g_b^2) after one step.
  const auto st = opt->export_state();
  const auto v  = values(st.tensors.at("w/exp_avg_sq"));
  for (int r = 0; r < 64; ++r) {
    double sum = 0;
    for (int j = 0; j < 96; ++j)
      sum += static_cast<double>(static_cast<float>(g[r * 96 + j])) * static_cast<float>(g[r * 96 + j]);
    EXPECT_NEAR(v[r], 0.001 * sum / 96, 1e-6 * v[r]);
  }
}

// Double tensors with gradients near their limit (|g| just below sqrt(max), about 1.3e154, which
// the check lets through): the sums of squares of a shared block, of a factored row and column,
// and of the rows' moments stayed finite only for one such value; two in a block made its second
// moment Inf (the block frozen, its state refused by import), a row of them made the factored
// mean Inf and the row's parameters NaN. Now every second moment stays finite, the parameters
// too, and the state exports and imports.
TEST(Gefen, DoubleGradientsNearTheLimitKeepTheSecondMomentsFinite) {
  const double big = 1.3e154;
  ASSERT_LT(big, koptim::Impl::largest_squarable<double>());
  for (const bool factored : {false, true}) {
    TestTensor<double> w({64, 96}, "w");
    koptim::ParameterSet params;
    w.add_to(params, "w");
    w.set(false, [](std::int64_t i) { return 0.01 * std::sin(0.1 * static_cast<double>(i)); });
    // The first step: per-row scales (shared blocks of a row), or p = 1 (factored).
    std::mt19937_64 rng(3);
    std::normal_distribution<double> normal(0.0, 1.0);
    std::vector<double> g(64 * 96);
    for (int r = 0; r < 64; ++r) {
      const double sc = std::exp(normal(rng));
      for (int j = 0; j < 96; ++j) g[r * 96 + j] = sc * normal(rng);
    }
    w.set(true, [&](std::int64_t i) { return g[i]; });
    auto opt =
        make(params,
             factored ? std::map<std::string, std::string>{{"force_p1", "true"}} : std::map<std::string, std::string>{},
             1e-3, 0.0);
    opt->step();
    const auto info = gefen(opt).tensor_info().at(0);
    ASSERT_EQ(info.second_moment, factored ? GefenSecondMoment::factored : GefenSecondMoment::shared);
    // Then rows 0 and 1 all at +-big: a shared block of 96 such values, or two factored rows and
    // every column sum with two.
    w.set(true, [&](std::int64_t i) { return i < 2 * 96 ? (i % 2 ? big : -big) : g[i]; });
    const auto before = w.get();
    opt->step();
    const auto state = opt->export_state();
    for (const char* key : {"w/exp_avg_sq", "w/exp_avg_sq_row", "w/exp_avg_sq_col"}) {
      if (!state.tensors.count(key)) continue;
      for (const double x : values(state.tensors.at(key)))
        ASSERT_TRUE(std::isfinite(x)) << key << (factored ? " factored" : " shared");
    }
    const auto after = w.get();
    for (const double x : after) ASSERT_TRUE(std::isfinite(x)) << (factored ? "factored" : "shared");
    // The rows of large values move (an Inf second moment gave them a zero update).
    for (std::int64_t i = 0; i < 2 * 96; ++i)
      EXPECT_NE(after[i], before[i]) << i << (factored ? " factored" : " shared");
    auto again =
        make(params,
             factored ? std::map<std::string, std::string>{{"force_p1", "true"}} : std::map<std::string, std::string>{},
             1e-3, 0.0);
    EXPECT_NO_THROW(again->import_state(state));
  }
}

// A LayoutLeft (a, b) tensor is the row-major (b, a) tensor it is in memory: same choices,
// same trajectory as a LayoutRight (b, a) tensor holding the transposed values.
TEST(Gefen, LayoutLeftIsMemoryOrder) {
  for (auto keys : std::vector<std::map<std::string, std::string>>{{}, {{"force_p1", "true"}}}) {
    TestTensor<float, Kokkos::LayoutLeft> left({48, 100}, "left");
    TestTensor<float> right({100, 48}, "right");
    koptim::ParameterSet pl, pr;
    left.add_to(pl, "w");
    right.add_to(pr, "w");
    auto ol = make(pl, keys), orr = make(pr, keys);
    for (int s = 1; s <= 4; ++s) {
      // Row-major index of left (i, j) is i * 100 + j; its memory index is j * 48 + i.
      auto gv = [&](std::int64_t mem) { return structured_gradient(3, s, mem, 48); };
      left.set(true, [&](std::int64_t k) { return gv((k % 100) * 48 + k / 100); });
      right.set(true, [&](std::int64_t k) { return gv(k); });
      ol->step();
      orr->step();
    }
    EXPECT_EQ(gefen(ol).tensor_info()[0].partition, gefen(orr).tensor_info()[0].partition);
    const auto a = left.get(), b = right.get();
    EXPECT_EQ(gefen(ol).tensor_info()[0].second_moment, gefen(orr).tensor_info()[0].second_moment);
    EXPECT_EQ(gefen(ol).tensor_info()[0].rows, gefen(orr).tensor_info()[0].rows);
    if (!keys.empty()) EXPECT_EQ(gefen(ol).tensor_info()[0].rows, 100);  // the slowest dimension in memory
    for (std::int64_t k = 0; k < 4800; ++k) ASSERT_EQ(a[k], b[(k % 100) * 48 + k / 100]);
  }
}

// The quantized first moment against the exact fp32 EMA over 200 steps: the error obeys the
// bound max halfgap * max absmax / (1 - b1) that follows from |e_t| <= halfgap absmax_t + b1 |e_{t-1}|,
// and stays a small fraction of the momentum (it does not drift).
TEST(Gefen, QuantizedMomentumErrorStaysBounded) {
  TestTensor<float> w({64, 96}, "w"), u({4096}, "u");
  koptim::ParameterSet params;
  w.add_to(params, "w");
  u.add_to(params, "u");
  auto opt        = make(params, {}, 1e-3, 0.0);
  const double b1 = 0.9;
  std::vector<std::vector<float>> mexact(2);
  mexact[0].assign(w.size(), 0.0f);
  mexact[1].assign(u.size(), 0.0f);
  std::vector<double> max_absmax(2, 0.0), worst_rel(2, 0.0);
  double halfgap = 0;
  for (int s = 1; s <= 200; ++s) {
    // Slowly varying scale and sign structure, so the momentum is not just noise.
    const double drift = 1.0 + 0.5 * std::sin(0.05 * s);
    std::vector<std::vector<float>> g(2);
    for (int t = 0; t < 2; ++t) {
      const std::int64_t n = t == 0 ? w.size() : u.size();
      g[t].resize(n);
      for (std::int64_t i = 0; i < n; ++i)
        g[t][i] = static_cast<float>(drift * (0.3 + structured_gradient(7 + t, s, i, 96)));
    }
    w.set(true, [&](std::int64_t i) { return g[0][i]; });
    u.set(true, [&](std::int64_t i) { return g[1][i]; });
    opt->step();
    const auto cb = gefen(opt).codebook();
    if (s == 1)
      for (int k = 0; k + 1 < 256; ++k) halfgap = std::max(halfgap, 0.5 * (cb[k + 1] - cb[k]));
    const auto st    = opt->export_state();
    const auto infos = gefen(opt).tensor_info();
    for (int t = 0; t < 2; ++t) {
      for (std::size_t i = 0; i < mexact[t].size(); ++i)
        mexact[t][i] = static_cast<float>(b1) * mexact[t][i] + static_cast<float>(1 - b1) * g[t][i];
      const auto idx = values(st.tensors.at(infos[t].name + "/indices"));
      const auto am  = values(st.tensors.at(infos[t].name + "/absmax"));
      for (double a : am) max_absmax[t] = std::max(max_absmax[t], a);
      double err = 0, norm = 0, err2 = 0, norm2 = 0;
      for (std::size_t i = 0; i < mexact[t].size(); ++i) {
        const double mq = cb[static_cast<int>(idx[i])] * am[i / infos[t].scale_block];
        const double e  = std::abs(mq - mexact[t][i]);
        err             = std::max(err, e);
        norm            = std::max(norm, std::abs(static_cast<double>(mexact[t][i])));
        err2 += e * e;
        norm2 += static_cast<double>(mexact[t][i]) * mexact[t][i];
      }
      ASSERT_LE(err, halfgap * max_absmax[t] / (1 - b1) * 1.001 + 1e-6 * norm) << infos[t].name << " step " << s;
      worst_rel[t] = std::max(worst_rel[t], std::sqrt(err2 / norm2));
    }
  }
  // Measured: about 1e-2 for both (8-bit codebook); 5% leaves room for other platforms' rounding.
  for (int t = 0; t < 2; ++t) EXPECT_LT(worst_rel[t], 0.05) << "relative RMS error of the momentum, tensor " << t;
  std::printf("[ gefen ] halfgap %.3g, worst relative RMS momentum error: %.3g (64x96), %.3g (4096)\n", halfgap,
              worst_rel[0], worst_rel[1]);
}

// state_bytes() is exact: per tensor n index bytes, one T per scale block and the second
// moment (shared, factored or full), plus the codebook (256 float) and its lookup (8193 pairs of
// uint8, each in a 32-bit word, for a learned codebook, and 256 thresholds in float and, as the
// set has a double tensor, in double).
TEST(Gefen, StateBytesAreExactAndReported) {
  TestTensor<float> a({64, 96}, "a"), b({100}, "b"), c({1, 4096}, "c");
  TestTensor<double> d({7, 11}, "d");
  koptim::ParameterSet params;
  a.add_to(params, "a");
  b.add_to(params, "b");
  c.add_to(params, "c");
  d.add_to(params, "d");
  auto opt = make(params, {{"force_p1", "true"}});
  EXPECT_EQ(opt->state_bytes(), 0u);  // nothing before the first step
  EXPECT_NE(gefen(opt).summary().find("not initialised"), std::string::npos);
  for (auto* t : {&a, &b, &c}) t->set(true, [](std::int64_t i) { return koptim_test::value(1, 0, 1, i); });
  d.set(true, [](std::int64_t i) { return koptim_test::value(1, 1, 1, i); });
  opt->step();
  const auto infos = gefen(opt).tensor_info();
  // a: factored 64 x 96, scale groups of 256 (largest divisor of 6144 <= 256): 24 groups.
  EXPECT_EQ(infos[0].second_moment, GefenSecondMoment::factored);
  EXPECT_EQ(infos[0].rows, 64);
  EXPECT_EQ(infos[0].cols, 96);
  EXPECT_EQ(infos[0].scale_block, 256);
  EXPECT_EQ(infos[0].state_bytes, 6144u + 24 * 4 + (64 + 96) * 4);
  // b: 100 elements, one scale group, per-element second moment.
  EXPECT_EQ(infos[1].second_moment, GefenSecondMoment::full);
  EXPECT_EQ(infos[1].scale_block, 100);
  EXPECT_EQ(infos[1].state_bytes, 100u + 4 + 400);
  // c: (1, 4096) has one dimension of extent > 1: per element, 16 groups of 256.
  EXPECT_EQ(infos[2].second_moment, GefenSecondMoment::full);
  EXPECT_EQ(infos[2].state_bytes, 4096u + 16 * 4 + 4096 * 4);
  // d: double, 77 elements.
  EXPECT_EQ(infos[3].second_moment, GefenSecondMoment::full);
  EXPECT_EQ(infos[3].state_bytes, 77u + 8 + 77 * 8);
  const std::size_t lookup = 4 * 8193 + 256 * (4 + 8);
  std::size_t sum          = 1024 + lookup;
  for (const auto& i : infos) sum += i.state_bytes;
  EXPECT_EQ(opt->state_bytes(), sum);
  const std::string s = gefen(opt).summary();
  for (const char* frag : {"Gefen: 4 tensors", "factored", "(64, 96)", "bytes/parameter"})
    EXPECT_NE(s.find(frag), std::string::npos) << s;
  // The exported tensors hold exactly this state, indices as uint8, plus the codebook (the
  // lookup table is derived from it).
  const auto st     = opt->export_state();
  std::size_t bytes = 0;
  for (const auto& kv : st.tensors) {
    if (kv.first.size() > 8 && kv.first.substr(kv.first.size() - 8) == "/indices")
      EXPECT_EQ(kv.second.dtype, koptim::ScalarType::uint8) << kv.first;
    bytes += kv.second.data.size();
  }
  EXPECT_EQ(bytes + lookup, opt->state_bytes());
  // Without a double tensor the lookup keeps no double thresholds.
  koptim::ParameterSet floats;
  a.add_to(floats, "a");
  b.add_to(floats, "b");
  auto f = make(floats, {{"force_p1", "true"}});
  f->step();
  const auto finfo = gefen(f).tensor_info();
  EXPECT_EQ(f->state_bytes(), 1024 + 4 * 8193 + 256 * 4 + finfo[0].state_bytes + finfo[1].state_bytes);
}

// The parameter list: defaults as AdamW's (weight decay 0), expert keys validated.
TEST(Gefen, ParameterList) {
  const auto v = koptim::valid_parameters("Gefen");
  EXPECT_EQ(v->get<double>("lr"), 1e-3);
  EXPECT_EQ(v->get<double>("weight_decay"), 0.0);
  EXPECT_EQ(v->get<double>("eps"), 1e-8);
  EXPECT_EQ(v->get<Teuchos::Array<double>>("betas")[1], 0.999);
  EXPECT_EQ(v->get<std::string>("partition_rule"), "neighbour_contrast");
  EXPECT_EQ(v->get<std::string>("p1_second_moment"), "factored");
  EXPECT_EQ(v->get<bool>("force_p1"), false);
  Model m;
  auto expect_rejected = [&](Teuchos::ParameterList l, const std::string& frag) {
    l.set("optimizer", std::string("Gefen"));
    koptim_test::expect_error<koptim::ConfigError>([&] { koptim::create(m.params, l); }, {frag});
  };
  Teuchos::ParameterList l;
  l.set("partition_rule", std::string("magic"));
  expect_rejected(l, "partition_rule");
  l = Teuchos::ParameterList();
  l.set("p1_second_moment", std::string("half"));
  expect_rejected(l, "p1_second_moment");
  l = Teuchos::ParameterList();
  Teuchos::Array<double> betas(2);
  betas[0] = 0.9;
  betas[1] = 1.0;
  l.set("betas", betas);
  expect_rejected(l, "betas");
  l = Teuchos::ParameterList();
  l.set("eps", 0.0);
  expect_rejected(l, "eps");
  l = Teuchos::ParameterList();
  l.set("block_size", 64);
  expect_rejected(l, "unknown key 'block_size'");
  // A partition rule written next to force_p1 would do nothing: refused; the default is accepted.
  l = Teuchos::ParameterList();
  l.set("force_p1", true);
  l.set("partition_rule", std::string("variance_drop"));
  expect_rejected(l, "partition_rule = variance_drop would have no effect: force_p1 = true");
  l.set("partition_rule", std::string("neighbour_contrast"));
  l.set("optimizer", std::string("Gefen"));
  EXPECT_NO_THROW(koptim::create(m.params, l));
  // The class checks its options too (for users who build it directly).
  koptim::GefenOptions o;
  o.betas[0] = 1.0;
  EXPECT_THROW(koptim::Gefen(m.params, koptim::CommonOptions{}, o), koptim::ConfigError);
}

// The nearest-entry lookup against brute force, in float and double, on an imported codebook
// made to be hard: 200 distinct entries 2^-14 apart around 0 (the closest an import may have,
// which needs a finer lookup than a learned codebook), runs of repeated entries (ties go to the
// first copy), and momenta at exact midpoints (ties go to the lower entry). With indices and
// scales reset to zero the new momentum is (1 - b1) g, in each block scaled by its first
// element, g = 1.
TEST(Gefen, NearestEntryLookupEqualsBruteForce) {
  Model m;
  auto opt = make(m.params, {});
  m.gradients(1);
  opt->step();
  auto state = opt->export_state();
  std::vector<float> c(256);
  for (int k = 0; k < 256; ++k) {
    if (k < 20)
      c[k] = k == 0 ? -1.0f : -0.5f;  // 19 copies of -0.5
    else if (k < 220)
      c[k] = std::ldexp(static_cast<float>(k - 120), -14);
    else
      c[k] = k == 255 ? 1.0f : 0.25f + 0.0625f * static_cast<float>((k - 220) / 5);  // runs of 5
  }
  std::memcpy(state.tensors["codebook"].data.data(), c.data(), 1024);
  for (auto& kv : state.tensors) {
    const std::string& key = kv.first;
    if (key.find("/indices") != std::string::npos || key.find("/absmax") != std::string::npos)
      std::fill(kv.second.data.begin(), kv.second.data.end(), 0);
  }
  opt->import_state(state);
  // x candidates: every entry, every midpoint, points between, and a spread over [-1, 1].
  std::vector<double> xs;
  for (int k = 0; k < 256; ++k) {
    xs.push_back(c[k]);
    if (k + 1 < 256) {
      xs.push_back(0.5 * (static_cast<double>(c[k]) + c[k + 1]));
      xs.push_back(0.3 * c[k] + 0.7 * c[k + 1]);
    }
  }
  for (int j = 0; j <= 4000; ++j) xs.push_back(-1.0 + j / 2000.0);
  const auto infos = gefen(opt).tensor_info();
  const double b1  = 0.9;
  std::vector<std::vector<double>> g;
  for (const auto& info : infos) {
    std::vector<double> x(info.size);
    for (std::int64_t i = 0; i < info.size; ++i)
      x[i] = i % info.scale_block == 0 ? 1.0 : xs[static_cast<std::size_t>(i * 7919) % xs.size()];
    g.push_back(x);
  }
  auto set = [&](const auto& t, std::size_t k) { t.set(true, [&](std::int64_t i) { return g[k][i]; }); };
  set(m.w1, 0);
  set(m.b1, 1);
  set(m.w2, 2);
  set(m.w3, 3);
  set(m.d, 4);
  opt->step();
  const auto after = opt->export_state();
  auto check       = [&](auto zero, std::size_t t) {
    using T           = decltype(zero);
    const auto& info  = infos[t];
    const auto idx    = values(after.tensors.at(info.name + "/indices"));
    const T omb1      = static_cast<T>(1.0 - b1);
    const T amax      = omb1 * T(1);
    std::int64_t hits = 0;
    for (std::int64_t i = 0; i < info.size; ++i) {
      const T mi = static_cast<T>(b1) * (static_cast<T>(c[0]) * T(0)) + omb1 * static_cast<T>(g[t][i]);
      const T x  = mi * (T(1) / amax);
      int best   = 0;
      for (int k = 1; k < 256; ++k)
        if (std::abs(x - static_cast<T>(c[k])) < std::abs(x - static_cast<T>(c[best]))) best = k;
      ASSERT_EQ(idx[i], best) << info.name << " element " << i << " x = " << x;
      hits += best >= 20 && best < 220 ? 1 : 0;
    }
    EXPECT_GT(hits, info.size / 4) << info.name;  // the close entries are exercised
  };
  check(0.0f, 0);
  check(0.0f, 2);
  check(0.0, 4);
}

// Export, import into a fresh optimizer, continue: bitwise the same as never stopping; also
// before the first step (the importer initialises at its next step).
TEST(Gefen, StateRoundTripResumesBitwise) {
  for (int stop : {0, 3}) {
    Model m1, m2;
    auto o1 = make(m1.params, {});
    auto o2 = make(m2.params, {});
    for (int s = 1; s <= stop; ++s) {
      m1.gradients(s);
      o1->step();
    }
    const auto state = o1->export_state();
    EXPECT_EQ(state.integers.at("initialised"), stop > 0 ? 1 : 0);
    Kokkos::deep_copy(m2.w1.p2, m1.w1.p2);
    Kokkos::deep_copy(m2.b1.p1, m1.b1.p1);
    Kokkos::deep_copy(m2.w2.p3, m1.w2.p3);
    Kokkos::deep_copy(m2.w3.p2, m1.w3.p2);
    Kokkos::deep_copy(m2.d.p2, m1.d.p2);
    o2->import_state(state);
    EXPECT_TRUE(o2->export_state() == state);
    EXPECT_EQ(o2->state_bytes(), o1->state_bytes());
    for (int s = stop + 1; s <= stop + 4; ++s) {
      m1.gradients(s);
      m2.gradients(s);
      o1->step();
      o2->step();
    }
    EXPECT_EQ(m1.weights(), m2.weights());
    EXPECT_TRUE(o1->export_state() == o2->export_state());
  }
}

// force_p1 promises p = 1 for every tensor: a state whose partition shares second moments (from a
// Gefen without it) is refused, not loaded with its partition kept.
TEST(Gefen, ForceP1RefusesAStateWithSharedSecondMoments) {
  Model m;
  auto opt = make(m.params, {});
  m.gradients(1);
  opt->step();
  const auto state = opt->export_state();
  std::string shared;
  for (const auto& kv : state.integers)  // w1 (per-row scales) is the model's first such tensor
    if (kv.first.size() > 10 && kv.first.substr(kv.first.size() - 10) == "/partition" && kv.second > 1) {
      shared = kv.first;
      break;
    }
  ASSERT_EQ(shared, "w1/partition");
  Model n;
  auto forced       = make(n.params, {{"force_p1", "true"}});
  const auto before = forced->export_state();
  koptim_test::expect_error<koptim::StateError>(
      [&] { forced->import_state(state); }, {"integer '" + shared + "' = " + std::to_string(state.integers.at(shared)) +
                                             " is not allowed with force_p1 = true"});
  EXPECT_TRUE(forced->export_state() == before);
  // Its own kind of state loads.
  auto other = make(n.params, {{"force_p1", "true"}});
  n.gradients(1);
  other->step();
  forced->import_state(other->export_state());
  EXPECT_TRUE(forced->export_state() == other->export_state());
}

// A p = 1 tensor's second moment is factored or full by p1_second_moment: a state written with the
// other setting is refused with a message that names the option.
TEST(Gefen, ImportNamesTheOtherP1SecondMoment) {
  for (const std::string written : {"factored", "full"}) {
    const std::string wanted = written == "factored" ? "full" : "factored";
    Model m;
    auto opt = make(m.params, {{"force_p1", "true"}, {"p1_second_moment", written}});
    m.gradients(1);
    opt->step();
    const auto state = opt->export_state();
    Model n;
    auto other        = make(n.params, {{"force_p1", "true"}, {"p1_second_moment", wanted}});
    const auto before = other->export_state();
    koptim_test::expect_error<koptim::StateError>(
        [&] { other->import_state(state); },
        {"no tensor 'w1/exp_avg_sq", "(it holds 'w1/exp_avg_sq",
         "the state was written with p1_second_moment = " + written + "; this Gefen has p1_second_moment = " + wanted});
    EXPECT_TRUE(other->export_state() == before);
  }
}

TEST(Gefen, ImportRejectsWhatDoesNotFitAndChangesNothing) {
  Model m;
  auto opt = make(m.params, {});
  m.gradients(1);
  opt->step();
  const auto good      = opt->export_state();
  const auto w         = m.weights();
  auto expect_rejected = [&](const koptim::OptimizerState& s, const std::string& what) {
    koptim_test::expect_error<koptim::StateError>([&] { opt->import_state(s); }, {what});
    EXPECT_TRUE(opt->export_state() == good);
    EXPECT_EQ(m.weights(), w);
  };
  auto set_value = [](koptim::StateTensor& t, std::size_t k, double x) {
    if (t.dtype == koptim::ScalarType::float32) {
      const float f = static_cast<float>(x);
      std::memcpy(t.data.data() + 4 * k, &f, 4);
    } else {
      std::memcpy(t.data.data() + 8 * k, &x, 8);
    }
  };
  auto s      = good;
  s.optimizer = "AdamW";
  expect_rejected(s, "belongs to optimizer 'AdamW'");
  s = good;
  s.tensors.erase("codebook");
  expect_rejected(s, "no tensor 'codebook'");
  s = good;
  set_value(s.tensors["codebook"], 10, 2.0);
  expect_rejected(s, "'codebook' has value 2 at flat index 10");
  s                = good;
  const auto entry = values(s.tensors["codebook"]);
  set_value(s.tensors["codebook"], 101, entry[100] + std::ldexp(1.0, -16));
  expect_rejected(s, "apart; allowed: distinct entries at least 2^-14 apart");
  s                             = good;
  s.tensors["w1/indices"].dtype = koptim::ScalarType::float32;  // 4 x too few bytes, too
  expect_rejected(s, "'w1/indices' has scalar type float32, expected uint8");
  s = good;
  s.tensors["b1/indices"].data.pop_back();
  expect_rejected(s, "'b1/indices' has shape (96,) (95 bytes), expected (96,)");
  s = good;
  set_value(s.tensors["d/absmax"], 0, std::numeric_limits<double>::quiet_NaN());
  expect_rejected(s, "'d/absmax' has value nan");
  s = good;
  set_value(s.tensors["d/exp_avg_sq"], 0, -1.0);
  expect_rejected(s, "'d/exp_avg_sq' has value -1");
  s                          = good;
  s.integers["w1/partition"] = 7;
  expect_rejected(s, "integer 'w1/partition' = 7 is not allowed");
  s = good;
  s.integers.erase("w3/partition");
  expect_rejected(s, "no integer 'w3/partition'");
  s                           = good;
  s.tensors["d/absmax"].dtype = koptim::ScalarType::float32;
  expect_rejected(s, "'d/absmax' has scalar type float32, expected float64");
  s                            = good;
  s.tensors["w1/absmax"].shape = {3};
  expect_rejected(s, "'w1/absmax' has shape (3,)");
  s                     = good;
  s.tensors["x/absmax"] = s.tensors["w1/absmax"];
  expect_rejected(s, "tensor 'x/absmax', which this optimizer does not hold");
  s                         = good;
  s.integers["initialised"] = 0;
  expect_rejected(s, "(the state is not initialised)");
  s             = good;
  s.reals["lr"] = 0.1;
  expect_rejected(s, "real 'lr'");
  // A partition that changes the layout makes the second-moment tensors not fit.
  s                          = good;
  s.integers["w1/partition"] = good.integers.at("w1/partition") == 1 ? 96 : 1;
  expect_rejected(s, "w1/");
}

// nonfinite_gradient works as for every optimizer, at the first step (nothing initialised)
// and later.
TEST(Gefen, NonFiniteGradients) {
  for (const char* policy : {"error", "skip_step"}) {
    Model m;
    Teuchos::ParameterList l;
    l.set("optimizer", std::string("Gefen"));
    l.set("nonfinite_gradient", std::string(policy));
    auto opt = koptim::create(m.params, l);
    for (int s = 1; s <= 2; ++s) {
      const bool first = s == 1;
      if (!first) {
        m.gradients(1);
        opt->step();
      }
      const auto state = opt->export_state();
      const auto w     = m.weights();
      m.gradients(2);
      m.b1.set(true, [](std::int64_t i) { return i == 3 ? std::numeric_limits<double>::infinity() : 0.5; });
      if (std::string(policy) == "error") {
        EXPECT_THROW(opt->step(), koptim::NonFiniteError);
      } else {
        opt->step();
      }
      auto after                      = opt->export_state();
      after.integers["skipped_steps"] = state.integers.at("skipped_steps");
      EXPECT_TRUE(after == state);
      EXPECT_EQ(m.weights(), w);
      EXPECT_EQ(gefen(opt).initialised(), !first);
    }
  }
}

// Gradients that are all zero at the first step: a valid (padded) codebook, no NaN (the test
// main traps invalid operations), and no movement without weight decay.
TEST(Gefen, ZeroGradientsAreHarmless) {
  Model m;
  auto opt     = make(m.params, {}, 1e-2, 0.0);
  const auto w = m.weights();
  for (auto* t : {&m.w1, &m.b1, &m.w2, &m.w3}) t->set(true, [](std::int64_t) { return 0.0; });
  m.d.set(true, [](std::int64_t) { return 0.0; });
  opt->step();
  opt->step();
  EXPECT_EQ(m.weights(), w);
  const auto cb = gefen(opt).codebook();
  EXPECT_EQ(cb.front(), -1.0f);
  EXPECT_EQ(cb.back(), 1.0f);
}

// Elements whose gradient is always 0 beside elements with gradients (a dead unit) stay where
// they are under every kind of second moment, as under AdamW: with p = 1 the quantized momentum
// of such an element is the codebook entry nearest 0 times its scale group's absmax, which
// divided by eps alone moved it by thousands within a hundred steps. Also with an eps that
// rounds to 0 in float (no 0/0: the test main traps invalid operations).
TEST(Gefen, ElementsWithoutGradientsStayPut) {
  for (const auto& config : std::vector<std::map<std::string, std::string>>{
           {}, {{"force_p1", "true"}}, {{"force_p1", "true"}, {"p1_second_moment", "full"}}}) {
    for (const char* eps : {"1e-8", "1e-50"}) {
      Model m;
      auto keys    = config;
      keys["eps"]  = eps;
      auto opt     = make(m.params, keys, 1e-3, 0.0);
      const auto w = m.weights();
      // Row 1 (in memory order) of every tensor: element 1 of b1, a row of the factored ones.
      auto dead = [](const std::vector<std::int64_t>& shape, std::int64_t i) { return i / Model::row_len(shape) == 1; };
      for (int step = 0; step < 30; ++step) {
        m.gradients(step);
        for (auto* t : {&m.w1, &m.b1, &m.w2, &m.w3}) {
          const auto g = t->get(true);
          t->set(true, [&](std::int64_t i) { return dead(t->shape, i) ? 0.0 : g[i]; });
        }
        const auto gd = m.d.get(true);
        m.d.set(true, [&](std::int64_t i) { return dead(m.d.shape, i) ? 0.0 : gd[i]; });
        opt->step();
      }
      const auto after = m.weights();
      const auto infos = gefen(opt).tensor_info();
      const std::vector<std::vector<std::int64_t>> shapes{m.w1.shape, m.b1.shape, m.w2.shape, m.w3.shape, m.d.shape};
      for (std::size_t t = 0; t < after.size(); ++t) {
        std::ostringstream where;
        where << infos[t].name << " (eps " << eps << ", p " << infos[t].partition << ", kind "
              << static_cast<int>(infos[t].second_moment) << ")";
        bool moved = false;
        for (std::size_t i = 0; i < after[t].size(); ++i) {
          ASSERT_TRUE(std::isfinite(after[t][i])) << where.str() << " element " << i;
          if (dead(shapes[t], static_cast<std::int64_t>(i))) {
            // A shared block mixing dead and live elements steps them all (its one second moment
            // is not 0): only blocks within the dead row are checked.
            if (infos[t].second_moment != GefenSecondMoment::shared ||
                Model::row_len(shapes[t]) % infos[t].partition == 0)
              EXPECT_EQ(after[t][i], w[t][i]) << where.str() << " element " << i;
          } else {
            moved = moved || after[t][i] != w[t][i];
          }
        }
        EXPECT_TRUE(moved) << where.str();
      }
    }
  }
}

}  // namespace
