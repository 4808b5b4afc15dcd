// Learns the solution operator of the viscous Burgers equation u_t + u u_x = 0.1 u_xx on
// [0, 2 pi) (periodic): a multilayer perceptron (64-256-256-64, tanh) maps u(x, 0) to u(x, 1) on
// 64 points. The data come from the finite-difference solver of koptim_example.hpp (random
// Fourier initial conditions); reports the mean squared error and the relative L2 test error.
// Under mpiexec the ranks share every batch.
//
//   koptim_burgers                                    AdamW from configs/burgers_adamw.yaml
//   koptim_burgers --config configs/burgers_shampoo.yaml --steps 500
//   mpiexec -n 2 koptim_burgers --config configs/burgers_gefen.yaml
#include "koptim_example.hpp"

int main(int argc, char** argv) {
  return koptim_example::example_main(argc, argv, [](int argc, char** argv) {
    using namespace koptim_example;
    const std::string dir  = KOPTIM_EXAMPLE_DIR;
    const ExampleOptions o = parse_example_options(argc, argv, "koptim_burgers", dir + "/configs/burgers_adamw.yaml",
                                                   "", /*steps=*/1000, /*batch=*/64);
    if (o.help) {
      std::printf("%s\n", example_usage("koptim_burgers", false).c_str());
      return;
    }
    const Dataset data = make_burgers(2048, 512);
    run_example(data, burgers_layers, o, "rel_l2_error");
  });
}
