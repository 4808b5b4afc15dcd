// Parameter sets the perf tests share.
#ifndef KOPTIM_PERF_MODELS_HPP
#define KOPTIM_PERF_MODELS_HPP

#include <koptim/koptim.hpp>

#include <random>
#include <string>
#include <vector>

namespace koptim_perf {

// A 4-layer MLP of the given width: per layer a width x width weight and a bias (float32),
// weights and their gradients normal(0, 0.01), bias gradients 0.01.
struct Mlp {
  std::vector<Kokkos::View<float**>> W, dW;
  std::vector<Kokkos::View<float*>> b, db;
  koptim::ParameterSet params;

  explicit Mlp(int width, int layers = 4) {
    std::mt19937 rng(3);
    std::normal_distribution<float> normal;
    for (int l = 0; l < layers; ++l) {
      W.emplace_back("W", width, width), dW.emplace_back("dW", width, width);
      b.emplace_back("b", width), db.emplace_back("db", width);
      for (auto v : {W.back(), dW.back()}) {
        auto h = Kokkos::create_mirror_view(v);
        for (std::size_t i = 0; i < h.span(); ++i) h.data()[i] = 0.01f * normal(rng);
        Kokkos::deep_copy(v, h);
      }
      Kokkos::deep_copy(db.back(), 0.01f);
      params.add("layer" + std::to_string(l) + ".weight", W.back(), dW.back());
      params.add("layer" + std::to_string(l) + ".bias", b.back(), db.back());
    }
  }
};

// The parameters of a transformer encoder (no embeddings): per layer the attention projections
// q, k, v, o (d x d, with biases), the feed-forward layers (4d x d and d x 4d, with biases) and two
// layer norms (weight and bias of d); torch's names and shapes (weights out x in), in the order
// torch lists them. Values and gradients are N(0, 0.01^2) from a fixed seed; perf_tests/peers/
// run_shampoo_peers.py builds the same shapes for the peers.
struct Transformer {
  std::vector<Kokkos::View<float**>> W, dW;
  std::vector<Kokkos::View<float*>> v, dv;
  koptim::ParameterSet params;

  explicit Transformer(int layers, int d) {
    std::mt19937 rng(5);
    std::normal_distribution<float> normal;
    auto fill = [&](auto view) {
      auto h = Kokkos::create_mirror_view(view);
      for (std::size_t i = 0; i < h.span(); ++i) h.data()[i] = 0.01f * normal(rng);
      Kokkos::deep_copy(view, h);
    };
    auto matrix = [&](const std::string& name, int rows, int cols) {
      W.emplace_back(name, rows, cols), dW.emplace_back(name + ".grad", rows, cols);
      fill(W.back()), fill(dW.back());
      params.add(name, W.back(), dW.back());
    };
    auto vector = [&](const std::string& name, int n) {
      v.emplace_back(name, n), dv.emplace_back(name + ".grad", n);
      fill(v.back()), fill(dv.back());
      params.add(name, v.back(), dv.back());
    };
    for (int l = 0; l < layers; ++l) {
      const std::string p = "layers." + std::to_string(l) + ".";
      for (const char* proj : {"q", "k", "v", "o"}) {
        matrix(p + "attn." + proj + ".weight", d, d);
        vector(p + "attn." + proj + ".bias", d);
      }
      matrix(p + "ff1.weight", 4 * d, d);
      vector(p + "ff1.bias", 4 * d);
      matrix(p + "ff2.weight", d, 4 * d);
      vector(p + "ff2.bias", d);
      for (const char* norm : {"norm1", "norm2"}) {
        vector(p + norm + ".weight", d);
        vector(p + norm + ".bias", d);
      }
    }
  }
};

}  // namespace koptim_perf

#endif
