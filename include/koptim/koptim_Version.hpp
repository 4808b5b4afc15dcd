// koptim's version: the release (compile-time macros from koptim_config.hpp) and the git commit
// the library was built from (a function, so that it names the library actually linked).
#ifndef KOPTIM_VERSION_HPP
#define KOPTIM_VERSION_HPP

#include <koptim_config.hpp>

namespace koptim {

// KOPTIM_VERSION_STRING, e.g. "0.1.0".
inline const char* version_string() { return KOPTIM_VERSION_STRING; }
// The short hash of the commit koptim was built from, "-dirty" appended when its tracked files
// had changes, "unknown" when it was not built from a git checkout. Updated at every build.
const char* git_hash();

}  // namespace koptim

#endif
