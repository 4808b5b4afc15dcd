// A small model for the checkpoint tests: five parameters of rank 1 to 3, float and double,
// LayoutRight and LayoutLeft, one name with a slash; deterministic gradients that depend on the
// parameters and the step (so a wrong restored value changes the trajectory); and the optimizer
// configurations every checkpoint test runs.
#ifndef KOPTIM_TEST_CHECKPOINT_HPP
#define KOPTIM_TEST_CHECKPOINT_HPP

#include <koptim/core/impl/koptim_Math.hpp>
#include <koptim/koptim.hpp>

#include <Teuchos_ParameterList.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace koptim_test {

// The layouts are spelled out (a device's default is LayoutLeft): the tests' expected messages and
// files name them.
struct CheckpointModel {
  Kokkos::View<float**, Kokkos::LayoutRight> w1{"enc/w1", 12, 10}, g1{"g1", 12, 10};
  Kokkos::View<float*> b1{"b1", 10}, gb1{"gb1", 10};
  Kokkos::View<float***, Kokkos::LayoutRight> w2{"w2", 7, 5, 3}, g2{"g2", 7, 5, 3};
  Kokkos::View<double**, Kokkos::LayoutLeft> w3{"w3", 9, 6}, g3{"g3", 9, 6};
  Kokkos::View<double*> s{"scale", 4}, gs{"gs", 4};
  koptim::ParameterSet params;

  CheckpointModel() {
    const int no_decay = params.add_group("no_decay", {std::nullopt, 0.0});
    params.add("enc/w1", w1, g1);
    params.add("b1", b1, gb1, no_decay);
    params.add("w2", w2, g2);
    params.add("w3", w3, g3);
    params.add("scale", s, gs, no_decay);
    reset();
  }

  // The initial values: a fixed function of the position.
  void reset() {
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (params[i].param.dtype == koptim::ScalarType::float32)
        init<float>(params[i].param, static_cast<int>(i));
      else
        init<double>(params[i].param, static_cast<int>(i));
    }
    Kokkos::fence();
  }

  // g = 0.3 w + sin(...)(1 + 0.01 k): depends on the parameters and on the step.
  void gradients(int step) {
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (params[i].param.dtype == koptim::ScalarType::float32)
        gradient<float>(params[i], static_cast<int>(i), step);
      else
        gradient<double>(params[i], static_cast<int>(i), step);
    }
    Kokkos::fence();
  }

  // Named templates, not generic lambdas: CUDA allows no device lambda inside a generic lambda.
  template <class T>
  static void init(const koptim::TensorRef& t, int id) {
    const auto v = t.flat<T>();
    Kokkos::parallel_for(
        "test::init", t.size, KOKKOS_LAMBDA(const std::int64_t k) {
          v(k) = static_cast<T>(0.5 * koptim::Impl::kmath::sin(0.37 * k + 1.1 * id) + 0.05 * id);
        });
  }
  template <class T>
  static void gradient(const koptim::Parameter& p, int id, int step) {
    const auto w = p.param.flat<T>();
    const auto g = p.grad.flat<T>();
    Kokkos::parallel_for(
        "test::grad", p.param.size, KOKKOS_LAMBDA(const std::int64_t k) {
          g(k) =
              static_cast<T>(0.3 * w(k) + koptim::Impl::kmath::sin(0.7 * k + 1.3 * step + 0.1 * id) * (1.0 + 0.01 * k));
        });
  }

  // The parameters' bytes, in registration order.
  std::vector<unsigned char> bytes() const {
    std::vector<unsigned char> out;
    for (const auto& p : params.parameters()) {
      const std::size_t at = out.size();
      out.resize(at + p.param.bytes());
      koptim::dispatch(p.param.dtype, [&](auto zero) {
        using T = decltype(zero);
        Kokkos::View<T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> h(
            reinterpret_cast<T*>(out.data() + at), p.param.size);
        Kokkos::deep_copy(h, p.param.flat<T>());
      });
    }
    return out;
  }

  void scramble() {
    for (const auto& p : params.parameters()) {
      koptim::dispatch(p.param.dtype, [&](auto zero) {
        using T = decltype(zero);
        Kokkos::deep_copy(p.param.flat<T>(), static_cast<T>(-7.25));
      });
    }
  }
};

// The configurations of the exact-restart tests, by name.
inline std::vector<std::string> checkpoint_configs() {
  return {"SGD",
          "AdaGrad",
          "RMSProp",
          "Adam",
          "AdamW",
          "Shampoo",
          "ShampooEigenvalueCorrected",
          "ShampooQrEigenbasis",
          "Gefen",
          "AdamWSharded",
          "GefenSharded"};
}

inline Teuchos::ParameterList checkpoint_config(const std::string& name) {
  Teuchos::ParameterList l("koptim");
  auto schedule = [&] {
    auto& s = l.sublist("lr_schedule");
    s.set("type", std::string("cosine"));
    s.set("warmup_steps", 3);
    s.set("total_steps", 40);
  };
  if (name == "SGD") {
    l.set("optimizer", std::string("SGD"));
    l.set("lr", 0.05);
    l.set("momentum", 0.9);
    l.set("nesterov", true);
  } else if (name == "AdaGrad") {
    l.set("optimizer", std::string("AdaGrad"));
    l.set("lr", 0.05);
    l.set("lr_decay", 0.01);
  } else if (name == "RMSProp") {
    l.set("optimizer", std::string("RMSProp"));
    l.set("lr", 0.01);
    l.set("centered", true);
    l.set("momentum", 0.5);
  } else if (name == "Adam") {
    l.set("optimizer", std::string("Adam"));
    l.set("lr", 0.01);
    l.set("amsgrad", true);
    schedule();
  } else if (name == "AdamW" || name == "AdamWSharded") {
    l.set("optimizer", std::string("AdamW"));
    l.set("lr", 0.01);
    l.set("weight_decay", 0.1);
    l.set("shard_state", name == "AdamWSharded");
    schedule();
  } else if (name == "Shampoo" || name == "ShampooEigenvalueCorrected" || name == "ShampooQrEigenbasis") {
    l.set("optimizer", std::string("Shampoo"));
    l.set("lr", 0.01);
    l.set("epsilon", 1e-6);
    l.set("max_preconditioner_dim", 8);
    l.set("precondition_frequency", 3);
    l.set("start_preconditioning_step", 3);
    l.set("grafting", std::string("Adam"));
    l.set("momentum", 0.5);
    l.set("weight_decay", 0.01);
    if (name != "Shampoo") l.set("eigenvalue_corrected", true);
    if (name == "ShampooQrEigenbasis") {
      // Refreshes warm-started from the checkpointed eigenvectors, a QR step at every one.
      l.set("eigenbasis", std::string("qr"));
      l.set("qr_tolerance", 0.0);
    }
    schedule();
  } else if (name == "Gefen" || name == "GefenSharded") {
    l.set("optimizer", std::string("Gefen"));
    l.set("lr", 0.01);
    l.set("weight_decay", 0.1);
    l.set("shard_state", name == "GefenSharded");
  }
  return l;
}

}  // namespace koptim_test

#endif
