// Deterministic test data shared with the reference generators in unit_tests/reference/: a
// counter-based hash (splitmix64) gives values on a 2^-23 grid, exact in float and double, so
// koptim and torch start from the same numbers.
#ifndef KOPTIM_TEST_DATA_HPP
#define KOPTIM_TEST_DATA_HPP

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace koptim_test {

// The folder of the reference data: $KOPTIM_REFERENCE_DIR when set (a test program run away from
// its source tree, as in the GPU run kit), else unit_tests/reference of the source tree.
inline std::string reference_dir() {
  const char* d = std::getenv("KOPTIM_REFERENCE_DIR");
  return d && *d ? std::string(d) : std::string(KOPTIM_TEST_REFERENCE_DIR);
}

inline std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Step 0: initial parameters, uniform in [-1, 1). Steps >= 1: gradients, zero for 1 in 8 entries,
// scaled by 2^(step % 4 - 1).
inline double value(std::uint64_t seed, std::uint64_t tensor, std::uint64_t step, std::uint64_t index) {
  const std::uint64_t h = mix(mix(mix(mix(seed) ^ tensor) ^ step) ^ index);
  const double u        = (static_cast<double>(h >> 40) - 8388608.0) / 8388608.0;
  if (step == 0) return u;
  if ((h & 7) == 0) return 0.0;
  const int e = static_cast<int>(step % 4) - 1;
  return e >= 0 ? u * static_cast<double>(1 << e) : u / 2.0;
}

// One case of diagonal_torch.txt.
struct ReferenceCase {
  std::string name, optimizer, dtype;
  std::uint64_t seed = 0;
  std::map<std::string, std::vector<std::string>> options;  // key -> value words
  bool has_group  = false;
  double group_lr = 0, group_weight_decay = 0;
  std::vector<std::vector<std::int64_t>> shapes;
  std::map<int, std::vector<std::vector<double>>> checks;  // step -> tensor -> values
};

inline std::vector<ReferenceCase> read_reference(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot open " + path);
  std::vector<ReferenceCase> cases;
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream s(line);
    std::string w;
    s >> w;
    if (w == "case") {
      cases.emplace_back();
      s >> cases.back().name >> cases.back().optimizer >> cases.back().dtype >> cases.back().seed;
    } else if (w == "option") {
      std::string key, v;
      s >> key;
      auto& vals = cases.back().options[key];
      while (s >> v) vals.push_back(v);
    } else if (w == "group") {
      int first;
      s >> first >> cases.back().group_lr >> cases.back().group_weight_decay;
      cases.back().has_group = true;
    } else if (w == "tensor") {
      int rank;
      s >> rank;
      std::vector<std::int64_t> shape(rank);
      for (auto& d : shape) s >> d;
      cases.back().shapes.push_back(shape);
    } else if (w == "check") {
      int step, t;
      s >> step >> t;
      auto& c = cases.back().checks[step];
      c.resize(cases.back().shapes.size());
      double x;
      while (s >> x) c[t].push_back(x);
    }
  }
  return cases;
}

}  // namespace koptim_test

#endif
