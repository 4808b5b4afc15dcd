// Argument checks at the API boundary, with messages that say which key of which optimizer
// had which value and what is allowed.
#ifndef KOPTIM_CORE_CHECK_HPP
#define KOPTIM_CORE_CHECK_HPP

#include <koptim/core/koptim_Error.hpp>

#include <sstream>
#include <string>

namespace koptim {
namespace Impl {

// Requires lo <= value <= hi (or < where open), value finite.
inline void require_range(const std::string& optimizer, const std::string& key, double value, double lo, double hi,
                          bool lo_open = false, bool hi_open = false) {
  const bool ok = value == value && (lo_open ? value > lo : value >= lo) && (hi_open ? value < hi : value <= hi);
  if (!ok) {
    std::ostringstream s;
    s << "koptim::" << optimizer << ": " << key << " = " << value
      << " is not allowed; allowed: " << (lo_open ? "(" : "[") << lo << ", " << hi << (hi_open ? ")" : "]");
    throw ConfigError(s.str());
  }
}

}  // namespace Impl
}  // namespace koptim

#endif
