// Trains a multilayer perceptron (64-256-256-10, tanh) to classify the UCI optical handwritten
// digits with the koptim optimizer a parameter-list file describes; reports the training and test
// cross-entropy and the test accuracy. Under mpiexec the ranks share every batch.
//
//   koptim_digits                                     AdamW from configs/digits_adamw.yaml
//   koptim_digits --config configs/digits_shampoo.yaml --steps 500
//   mpiexec -n 2 koptim_digits --config configs/digits_gefen.yaml
#include "koptim_example.hpp"

int main(int argc, char** argv) {
  return koptim_example::example_main(argc, argv, [](int argc, char** argv) {
    using namespace koptim_example;
    const std::string dir = KOPTIM_EXAMPLE_DIR;
    const ExampleOptions o =
        parse_example_options(argc, argv, "koptim_digits", dir + "/configs/digits_adamw.yaml", dir + "/data/digits.txt",
                              /*steps=*/1000, /*batch=*/64);
    if (o.help) {
      std::printf("%s\n", example_usage("koptim_digits", true).c_str());
      return;
    }
    const Dataset data = load_digits(o.data);
    run_example(data, digits_layers, o, "accuracy");
  });
}
