// Checking rejected inputs: the call throws the expected exception type with a message that holds
// every expected fragment.
#ifndef KOPTIM_TEST_ERRORS_HPP
#define KOPTIM_TEST_ERRORS_HPP

#include <koptim/core/koptim_Error.hpp>

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

namespace koptim_test {

template <class E = koptim::Error>
void expect_error(const std::function<void()>& f, const std::vector<std::string>& fragments) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one mentioning " << fragments.front();
  } catch (const E& e) {
    for (const auto& fragment : fragments) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << "exception of another type: " << e.what();
  }
}

}  // namespace koptim_test

#endif
