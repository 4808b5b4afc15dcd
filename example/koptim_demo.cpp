// koptim's demo: fits a linear model Y = X W + b to data made from a known W*, b* with each
// diagonal optimizer, configured from the parameter-list files in example/configs/, and prints
// the loss and the distance to the known solution; then Shampoo and Gefen on the same problem.
//
//   koptim_demo                      all optimizers, 300 steps each
//   koptim_demo --config my.yaml     one optimizer from a file (.yaml, .yml or .xml)
//   koptim_demo --steps 1000
//   koptim_demo --print-parameters   the reference of every parameter-list key (Markdown)
#include <koptim/koptim.hpp>

#include <KokkosBlas3_gemm.hpp>
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

namespace {

using Matrix = Kokkos::View<double**, Kokkos::LayoutLeft>;
using Vector = Kokkos::View<double*>;

struct Problem {
  int n = 512, d = 32, k = 8;
  Matrix X, Y, W_true;
  Vector b_true;
  Problem() : X("X", 512, 32), Y("Y", 512, 8), W_true("W*", 32, 8), b_true("b*", 8) {
    std::mt19937_64 rng(42);
    std::normal_distribution<double> normal;
    auto fill = [&](auto v) {
      auto h = Kokkos::create_mirror_view(v);
      for (std::size_t i = 0; i < h.span(); ++i) h.data()[i] = normal(rng);
      Kokkos::deep_copy(v, h);
    };
    fill(X);
    fill(W_true);
    fill(b_true);
    KokkosBlas::gemm("N", "N", 1.0, X, W_true, 0.0, Y);
    const auto Y_ = Y;
    const auto b  = b_true;
    Kokkos::parallel_for(
        "demo::bias", Kokkos::MDRangePolicy<Kokkos::Rank<2>>({0, 0}, {n, k}),
        KOKKOS_LAMBDA(int i, int j) { Y_(i, j) += b(j); });
  }
};

// loss = 0.5/n ||X W + b - Y||^2; writes dW = X^T R / n and db = sum_i R_i / n.
double loss_and_gradient(const Problem& p, const Matrix& W, const Vector& b, const Matrix& dW, const Vector& db) {
  Matrix R("R", p.n, p.k);
  KokkosBlas::gemm("N", "N", 1.0, p.X, W, 0.0, R);
  const auto Y = p.Y;
  const int n = p.n, k = p.k;
  double loss = 0;
  Kokkos::parallel_reduce(
      "demo::residual", Kokkos::MDRangePolicy<Kokkos::Rank<2>>({0, 0}, {n, k}),
      KOKKOS_LAMBDA(int i, int j, double& l) {
        R(i, j) += b(j) - Y(i, j);
        l += 0.5 * R(i, j) * R(i, j) / n;
      },
      loss);
  KokkosBlas::gemm("T", "N", 1.0 / n, p.X, R, 0.0, dW);
  Kokkos::parallel_for(
      "demo::bias_gradient", k, KOKKOS_LAMBDA(int j) {
        double s = 0;
        for (int i = 0; i < n; ++i) s += R(i, j);
        db(j) = s / n;
      });
  return loss;
}

double distance(const Matrix& W, const Matrix& W_true) {
  auto a   = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), W);
  auto b   = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), W_true);
  double s = 0, t = 0;
  for (std::size_t i = 0; i < a.extent(0); ++i)
    for (std::size_t j = 0; j < a.extent(1); ++j) {
      s += (a(i, j) - b(i, j)) * (a(i, j) - b(i, j));
      t += b(i, j) * b(i, j);
    }
  return std::sqrt(s / t);
}

void train(const Problem& p, const std::string& config, int steps) {
  Matrix W("W", p.d, p.k), dW("dW", p.d, p.k);
  Vector b("b", p.k), db("db", p.k);
  koptim::ParameterSet params;
  const int no_decay = params.add_group("no_decay", {std::nullopt, 0.0});
  params.add("linear.weight", W, dW);
  params.add("linear.bias", b, db, no_decay);
  auto opt = koptim::create(params, *koptim::read_parameter_list(config));
  std::printf("\n%s from %s\n", opt->name().c_str(), config.c_str());
  std::printf("%8s %14s %12s %14s\n", "step", "loss", "lr", "|W-W*|/|W*|");
  for (int s = 1; s <= steps; ++s) {
    const double lr   = opt->lr();
    const double loss = loss_and_gradient(p, W, b, dW, db);
    opt->step();
    if (s == 1 || s % (steps / 6) == 0 || s == steps)
      std::printf("%8d %14.6e %12.4e %14.6e\n", s, loss, lr, distance(W, p.W_true));
  }
  std::printf("%zu bytes of optimizer state for %lld parameters\n", opt->state_bytes(),
              static_cast<long long>(params.num_elements()));
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Kokkos::initialize(argc, argv);
  int rc = 0;
  try {
    std::vector<std::string> configs;
    int steps  = 300;
    bool print = false;
    for (int i = 1; i < argc; ++i) {
      if (!std::strcmp(argv[i], "--config") && i + 1 < argc) {
        configs.push_back(argv[++i]);
      } else if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) {
        steps = std::max(6, std::atoi(argv[++i]));
      } else if (!std::strcmp(argv[i], "--print-parameters")) {
        print = true;
      } else {
        throw std::runtime_error(std::string("unknown argument '") + argv[i] +
                                 "'; allowed: --config FILE, --steps N, --print-parameters");
      }
    }
    if (print) {
      koptim::print_parameter_reference(std::cout);
    } else {
      if (configs.empty()) {
        for (const char* f :
             {"sgd.yaml", "adagrad.yaml", "rmsprop.yaml", "adam.yaml", "adamw.xml", "shampoo.yaml", "gefen.yaml"})
          configs.push_back(std::string(KOPTIM_EXAMPLE_CONFIG_DIR) + "/" + f);
      }
      std::printf("koptim %s (Kokkos %d, execution space %s): fitting Y = X W + b, X 512x32, W 32x8\n",
                  KOPTIM_VERSION_STRING, KOKKOS_VERSION, Kokkos::DefaultExecutionSpace::name());
      Problem p;
      for (const auto& c : configs) train(p, c, steps);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "koptim_demo: %s\n", e.what());
    rc = 1;
  }
  Kokkos::finalize();
  MPI_Finalize();
  return rc;
}
