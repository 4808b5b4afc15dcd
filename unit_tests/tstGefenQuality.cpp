// Gefen as a drop-in AdamW replacement on two small real problems, same hyperparameters for both
// (lr 1e-2, default betas and eps, weight_decay 0), full batch, trained to a plateau: the final
// objective (training loss plus l2/2 |W|^2 on the two weight matrices) of Gefen and AdamW, per
// seed and on the mean over seeds, printed with the trajectory (after 100, 300, 1000, 2/3 of the
// steps and the end). Asserted: the target, |mean relative difference| <= 1%; each seed
// within 3%; and a plateau, each run's last third moving its objective by less than 1%.
//   digits:   scikit-learn's 1797 8x8 handwritten digits, MLP 64-16-10 (tanh), softmax
//             cross-entropy, l2 1e-3, 3000 steps, 3 seeds.
//   diabetes: the 442-patient diabetes regression, MLP 10-32-1 (tanh), mean squared error on
//             standardised features and target, l2 1e-2, 3000 steps, 5 seeds.
// Measured (Serial, float32): digits -0.13% on the mean (per seed +0.01%, -0.05%, -0.35%);
// diabetes -0.11% (per seed -0.07% to +0.30%, worst |0.34%|). Mid-descent the gaps are larger
// and are speed differences: +2.6% / +0.5% (digits / diabetes mean) after 100 steps, +1.8% / +0.9%
// after 300, +0.2% / -0.5% after 1000.
// Why this protocol (investigated; see docs/gefen.md): the previous version (lr 3e-3,
// weight_decay 0.01, no penalty, 300 steps) measured +2.7% / +3.2%, but there both networks
// memorise their training sets, the loss falls 3-5x between step 300 and 1000 and keeps falling
// towards 0 (digits 6e-4 after 5000 steps) with no plateau, so a "final" loss at any step is a
// speed comparison whose relative gap grows as the loss goes to 0 (digits, host float64
// re-implementation: -15% to +29% per seed between 100 and 5000 steps). The penalty gives both
// the same fixed objective with a minimum reached in the budget (decoupled weight decay would
// not: its fixed point depends on the preconditioner, which Gefen shares over blocks). At the
// plateau AdamW with lr x 1.001 moves the objective by <= 0.2%; Gefen's per-seed differences (up
// to ~1.5% in float64 re-runs, either sign) are different minima of a non-convex objective.
// The l2 values, lr and step count were chosen after seeing the curves, for a plateau within
// the test's time budget.
// The data are in unit_tests/reference/ (extract_sklearn_datasets.py made them); forward and
// backward passes are plain host loops, written here.
#include "koptim_TestData.hpp"

#include <koptim/koptim.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Dataset {
  std::int64_t n = 0, d = 0, classes = 0;  // classes 0: regression
  std::vector<double> x, y;
};

Dataset read_digits() {
  std::ifstream f(koptim_test::reference_dir() + "/digits.txt");
  EXPECT_TRUE(f.good()) << "cannot open digits.txt";
  Dataset ds;
  ds.d       = 64;
  ds.classes = 10;
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    for (int k = 0; k < 64; ++k) {
      const char c = line[k];
      ds.x.push_back((c <= '9' ? c - '0' : c - 'a' + 10) / 16.0);
    }
    ds.y.push_back(std::stoi(line.substr(65)));
    ++ds.n;
  }
  return ds;
}

Dataset read_diabetes() {
  std::ifstream f(koptim_test::reference_dir() + "/diabetes.txt");
  EXPECT_TRUE(f.good()) << "cannot open diabetes.txt";
  Dataset ds;
  ds.d = 10;
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream s(line);
    double v;
    for (int k = 0; k < 10; ++k) {
      s >> v;
      ds.x.push_back(v);
    }
    s >> v;
    ds.y.push_back(v);
    ++ds.n;
  }
  // Standardise every feature and the target.
  auto standardise = [](std::vector<double>& a, std::int64_t n, std::int64_t stride, std::int64_t off) {
    double mean = 0, var = 0;
    for (std::int64_t i = 0; i < n; ++i) mean += a[i * stride + off];
    mean /= n;
    for (std::int64_t i = 0; i < n; ++i) var += (a[i * stride + off] - mean) * (a[i * stride + off] - mean);
    const double sd = std::sqrt(var / n);
    for (std::int64_t i = 0; i < n; ++i) a[i * stride + off] = (a[i * stride + off] - mean) / sd;
  };
  for (int k = 0; k < 10; ++k) standardise(ds.x, ds.n, 10, k);
  standardise(ds.y, ds.n, 1, 0);
  return ds;
}

// A one-hidden-layer tanh MLP in float parameters the optimizer updates in place.
struct Mlp {
  std::int64_t d, h, o;
  Kokkos::View<float**, Kokkos::LayoutRight> W1, dW1, W2, dW2;  // row-major on a device too
  Kokkos::View<float*> b1, db1, b2, db2;
  koptim::ParameterSet params;

  Mlp(std::int64_t d_, std::int64_t h_, std::int64_t o_, unsigned seed)
      : d(d_),
        h(h_),
        o(o_),
        W1("W1", h_, d_),
        dW1("dW1", h_, d_),
        W2("W2", o_, h_),
        dW2("dW2", o_, h_),
        b1("b1", h_),
        db1("db1", h_),
        b2("b2", o_),
        db2("db2", o_) {
    std::mt19937 rng(seed);
    auto init = [&](auto v, double bound) {
      std::uniform_real_distribution<double> u(-bound, bound);
      auto hv = Kokkos::create_mirror_view(v);
      for (std::size_t i = 0; i < hv.span(); ++i) hv.data()[i] = static_cast<float>(u(rng));
      Kokkos::deep_copy(v, hv);
    };
    init(W1, 1.0 / std::sqrt(double(d)));
    init(b1, 1.0 / std::sqrt(double(d)));
    init(W2, 1.0 / std::sqrt(double(h)));
    init(b2, 1.0 / std::sqrt(double(h)));
    params.add("fc1.weight", W1, dW1);
    params.add("fc1.bias", b1, db1);
    params.add("fc2.weight", W2, dW2);
    params.add("fc2.bias", b2, db2);
  }

  // Loss of the whole dataset, plus l2 / 2 times the squared norm of the two weight matrices
  // (not the biases); with grad, also fills the gradient Views. The loops keep the hidden units
  // innermost so that the compiler can vectorize them; zero inputs (digits' blank pixels) are
  // skipped.
  double loss(const Dataset& ds, bool grad, double l2) {
    auto w1 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), W1);
    auto c1 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b1);
    auto w2 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), W2);
    auto c2 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b2);
    // Weights in double, W1 transposed (input-major) and W2 as it is (output-major).
    std::vector<double> w1t(d * h), v1(h), v2(o), w2d(o * h);
    for (std::int64_t j = 0; j < h; ++j) {
      v1[j] = c1(j);
      for (std::int64_t k = 0; k < d; ++k) w1t[k * h + j] = w1(j, k);
    }
    for (std::int64_t c = 0; c < o; ++c) {
      v2[c] = c2(c);
      for (std::int64_t j = 0; j < h; ++j) w2d[c * h + j] = w2(c, j);
    }
    std::vector<double> gw1t(d * h, 0), gc1(h, 0), gw2(o * h, 0), gc2(o, 0), a(h), z(o), dz(o), dpre(h);
    double total = 0;
    for (std::int64_t s = 0; s < ds.n; ++s) {
      const double* x = &ds.x[s * d];
      for (std::int64_t j = 0; j < h; ++j) a[j] = v1[j];
      for (std::int64_t k = 0; k < d; ++k) {
        const double xk = x[k];
        if (xk == 0.0) continue;
        const double* wk = &w1t[k * h];
        for (std::int64_t j = 0; j < h; ++j) a[j] += wk[j] * xk;
      }
      for (std::int64_t j = 0; j < h; ++j) a[j] = std::tanh(a[j]);
      for (std::int64_t c = 0; c < o; ++c) {
        double acc = v2[c];
        for (std::int64_t j = 0; j < h; ++j) acc += w2d[c * h + j] * a[j];
        z[c] = acc;
      }
      if (ds.classes > 0) {
        double zmax = z[0];
        for (double v : z) zmax = std::max(zmax, v);
        double sum = 0;
        for (std::int64_t c = 0; c < o; ++c) {
          dz[c] = std::exp(z[c] - zmax);
          sum += dz[c];
        }
        const int label = static_cast<int>(ds.y[s]);
        total += std::log(sum) + zmax - z[label];
        for (std::int64_t c = 0; c < o; ++c) dz[c] = (dz[c] / sum - (c == label ? 1.0 : 0.0)) / ds.n;
      } else {
        const double r = z[0] - ds.y[s];
        total += r * r;
        dz[0] = 2.0 * r / ds.n;
      }
      if (!grad) continue;
      for (std::int64_t j = 0; j < h; ++j) dpre[j] = 0;
      for (std::int64_t c = 0; c < o; ++c) {
        gc2[c] += dz[c];
        for (std::int64_t j = 0; j < h; ++j) {
          gw2[c * h + j] += dz[c] * a[j];
          dpre[j] += dz[c] * w2d[c * h + j];
        }
      }
      for (std::int64_t j = 0; j < h; ++j) {
        dpre[j] *= 1.0 - a[j] * a[j];
        gc1[j] += dpre[j];
      }
      for (std::int64_t k = 0; k < d; ++k) {
        const double xk = x[k];
        if (xk == 0.0) continue;
        double* gk = &gw1t[k * h];
        for (std::int64_t j = 0; j < h; ++j) gk[j] += dpre[j] * xk;
      }
    }
    double norm2 = 0;
    for (double v : w1t) norm2 += v * v;
    for (double v : w2d) norm2 += v * v;
    if (grad) {
      auto h1 = Kokkos::create_mirror_view(dW1);
      for (std::int64_t j = 0; j < h; ++j)
        for (std::int64_t k = 0; k < d; ++k) h1(j, k) = static_cast<float>(gw1t[k * h + j] + l2 * w1t[k * h + j]);
      Kokkos::deep_copy(dW1, h1);
      auto h2 = Kokkos::create_mirror_view(dW2);
      for (std::int64_t c = 0; c < o; ++c)
        for (std::int64_t j = 0; j < h; ++j) h2(c, j) = static_cast<float>(gw2[c * h + j] + l2 * w2d[c * h + j]);
      Kokkos::deep_copy(dW2, h2);
      auto put = [](auto v, const std::vector<double>& src) {
        auto hv = Kokkos::create_mirror_view(v);
        for (std::size_t i = 0; i < src.size(); ++i) hv.data()[i] = static_cast<float>(src[i]);
        Kokkos::deep_copy(v, hv);
      };
      put(db1, gc1);
      put(db2, gc2);
    }
    return total / ds.n + 0.5 * l2 * norm2;
  }
};

// The objective (loss plus l2 penalty) before step 1, ..., after the last step, of one run.
std::vector<double> train(const Dataset& ds, const std::string& optimizer, std::int64_t hidden, unsigned seed,
                          int steps, double lr, double l2) {
  Mlp net(ds.d, hidden, ds.classes > 0 ? ds.classes : 1, seed);
  Teuchos::ParameterList l;
  l.set("optimizer", optimizer);
  l.set("lr", lr);
  l.set("weight_decay", 0.0);  // the l2 penalty is in the objective, the same for both
  auto opt = koptim::create(net.params, l);
  std::vector<double> trace;
  for (int s = 0; s < steps; ++s) {
    trace.push_back(net.loss(ds, true, l2));
    opt->step();
  }
  trace.push_back(net.loss(ds, false, l2));
  return trace;
}

void compare(const Dataset& ds, const char* what, std::int64_t hidden, int steps, double lr, double l2, int seeds) {
  const std::vector<int> marks = {100, 300, 1000, 2 * steps / 3, steps};
  std::vector<double> mean_adamw(marks.size(), 0), mean_gefen(marks.size(), 0);
  double worst = 0;
  for (unsigned seed = 1; seed <= static_cast<unsigned>(seeds); ++seed) {
    const auto adamw = train(ds, "AdamW", hidden, seed, steps, lr, l2);
    const auto gefen = train(ds, "Gefen", hidden, seed, steps, lr, l2);
    std::printf("[ gefen ] %s seed %u, objective AdamW / Gefen (relative difference) after", what, seed);
    for (std::size_t k = 0; k < marks.size(); ++k) {
      const double a = adamw[marks[k]], g = gefen[marks[k]];
      mean_adamw[k] += a / seeds;
      mean_gefen[k] += g / seeds;
      std::printf(" %d steps: %.6f / %.6f (%+.4f)%s", marks[k], a, g, (g - a) / a, k + 1 < marks.size() ? "," : "\n");
    }
    const double rel = (gefen[steps] - adamw[steps]) / adamw[steps];
    worst            = std::max(worst, std::abs(rel));
    EXPECT_LE(std::abs(rel), 0.03) << what << " seed " << seed;
    // A plateau: the last third of the run changes either objective by less than 1%.
    EXPECT_LE(std::abs(adamw[steps] - adamw[marks[3]]) / adamw[steps], 0.01) << what << " seed " << seed;
    EXPECT_LE(std::abs(gefen[steps] - gefen[marks[3]]) / gefen[steps], 0.01) << what << " seed " << seed;
  }
  std::printf("[ gefen ] %s mean over %d seeds, AdamW / Gefen (relative difference) after", what, seeds);
  for (std::size_t k = 0; k < marks.size(); ++k) {
    std::printf(" %d steps: %.6f / %.6f (%+.4f)%s", marks[k], mean_adamw[k], mean_gefen[k],
                (mean_gefen[k] - mean_adamw[k]) / mean_adamw[k], k + 1 < marks.size() ? "," : "\n");
  }
  const double rel = (mean_gefen.back() - mean_adamw.back()) / mean_adamw.back();
  std::printf("[ gefen ] %s final: mean relative difference %+.4f (target 0.01), worst seed %.4f\n", what, rel, worst);
  EXPECT_LE(std::abs(rel), 0.01) << what;
}

TEST(GefenQuality, DigitsClassifierCloseToAdamW) {
  const Dataset ds = read_digits();
  ASSERT_EQ(ds.n, 1797);
  compare(ds, "digits MLP 64-16-10", 16, 3000, 1e-2, 1e-3, 3);
}

TEST(GefenQuality, DiabetesRegressionCloseToAdamW) {
  const Dataset ds = read_diabetes();
  ASSERT_EQ(ds.n, 442);
  compare(ds, "diabetes MLP 10-32-1", 32, 3000, 1e-2, 1e-2, 5);
}

}  // namespace
