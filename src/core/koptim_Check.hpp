// Argument checks at the API boundary, with messages that say which key of which optimizer
// had which value and what is allowed.
#ifndef KOPTIM_SRC_CORE_CHECK_HPP
#define KOPTIM_SRC_CORE_CHECK_HPP

#include <koptim/core/koptim_Error.hpp>

#include <charconv>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>

namespace koptim {
namespace Impl {

// A real as text in its shortest form that reads back to the same double (0.9, not
// 9.00000000000000022e-01 or 0.900000), inf, -inf or nan.
inline std::string real_string(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// The allowed values of a real or integer key: lo <= v <= hi (< where open). Each key's range is
// declared once (src/config/koptim_KeyRanges.hpp) and used by both the parameter-list validator
// and the optimizer's constructor.
struct Range {
  double lo    = 0.0;
  double hi    = 0.0;
  bool lo_open = false;
  bool hi_open = false;

  bool contains(double v) const { return v == v && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi); }
  // "[0, 1)", "[1, 2147483647]": integers in full, reals in their shortest round-trip form.
  std::string bounds(bool integer) const {
    auto number = [&](double v) {
      if (integer && std::isfinite(v)) return std::to_string(static_cast<long long>(v));
      return real_string(v);
    };
    return (lo_open ? "(" : "[") + number(lo) + ", " + number(hi) + (hi_open ? ")" : "]");
  }
  // "a real in [0, 1)", "an integer in [1, 2147483647]".
  std::string text(bool integer) const { return (integer ? "an integer in " : "a real in ") + bounds(integer); }
};

// A setting that the kernels round to a float32 parameter's type (lr, weight_decay, AdaGrad's
// initial sum) would be Inf there beyond the largest float: throws ConfigError "koptim::<optimizer>:
// <setting> = <value><context> is beyond the largest float ..., the scalar type of its parameter
// '<parameter>'" where value is beyond it. For float32 parameters only (the caller's test).
inline void require_within_float(const std::string& optimizer, const std::string& setting, double value,
                                 const std::string& context, const std::string& parameter) {
  const double largest = static_cast<double>(std::numeric_limits<float>::max());
  if (value <= largest) return;
  throw ConfigError("koptim::" + optimizer + ": " + setting + " = " + real_string(value) + context +
                    " is beyond the largest float (" + real_string(largest) + "), the scalar type of its parameter '" +
                    parameter + "'; allowed for float32 parameters: 0 to " + real_string(largest));
}

// Throws ConfigError "koptim::<optimizer>: <key> = <value> is not allowed; allowed: <range>"
// unless r contains value.
inline void require(const std::string& optimizer, const std::string& key, double value, const Range& r,
                    bool integer = false) {
  if (!r.contains(value)) {
    std::ostringstream s;
    s << "koptim::" << optimizer << ": " << key << " = "
      << (integer && std::isfinite(value) ? std::to_string(static_cast<long long>(value)) : real_string(value))
      << " is not allowed; allowed: " << r.text(integer);
    throw ConfigError(s.str());
  }
}

// A value that the other options make irrelevant would be ignored without a word: when ignored,
// throws ConfigError "koptim::<optimizer>: <what> would have no effect: <why>".
inline void refuse_ineffective(const std::string& optimizer, bool ignored, const std::string& what,
                               const std::string& why) {
  if (ignored) throw ConfigError("koptim::" + optimizer + ": " + what + " would have no effect: " + why);
}

}  // namespace Impl
}  // namespace koptim

#endif
