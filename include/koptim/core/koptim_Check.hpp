// Argument checks at the API boundary, with messages that say which key of which optimizer
// had which value and what is allowed.
#ifndef KOPTIM_CORE_CHECK_HPP
#define KOPTIM_CORE_CHECK_HPP

#include <koptim/core/koptim_Error.hpp>

#include <charconv>
#include <cmath>
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

// Requires lo <= value <= hi (or < where open), value finite.
inline void require_range(const std::string& optimizer, const std::string& key, double value, double lo, double hi,
                          bool lo_open = false, bool hi_open = false) {
  const bool ok = value == value && (lo_open ? value > lo : value >= lo) && (hi_open ? value < hi : value <= hi);
  if (!ok) {
    std::ostringstream s;
    s << "koptim::" << optimizer << ": " << key << " = " << real_string(value)
      << " is not allowed; allowed: " << (lo_open ? "(" : "[") << real_string(lo) << ", " << real_string(hi)
      << (hi_open ? ")" : "]");
    throw ConfigError(s.str());
  }
}

}  // namespace Impl
}  // namespace koptim

#endif
