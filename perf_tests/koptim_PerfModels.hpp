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

}  // namespace koptim_perf

#endif
