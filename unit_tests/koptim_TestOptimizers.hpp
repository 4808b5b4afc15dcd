// Building an optimizer by name for the tests of the gradient policies.
#ifndef KOPTIM_TEST_OPTIMIZERS_HPP
#define KOPTIM_TEST_OPTIMIZERS_HPP

#include <koptim/koptim.hpp>

#include <memory>
#include <string>

namespace koptim_test {

// The optimizer of this name with lr 0.01 and the given nonfinite_gradient policy.
inline std::unique_ptr<koptim::Optimizer> make_with_policy(const koptim::ParameterSet& p, const std::string& optimizer,
                                                           const std::string& policy) {
  Teuchos::ParameterList l;
  l.set("optimizer", optimizer);
  l.set("lr", 0.01);
  l.set("nonfinite_gradient", policy);
  return koptim::create(p, l);
}

}  // namespace koptim_test

#endif
