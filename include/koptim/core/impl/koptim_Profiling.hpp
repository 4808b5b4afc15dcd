// A Kokkos profiling region that lives as long as a scope. Every public koptim entry point
// opens one named after itself ("koptim::AdamW::step"), so Kokkos Tools users see where koptim
// spends its time.
#ifndef KOPTIM_CORE_IMPL_PROFILING_HPP
#define KOPTIM_CORE_IMPL_PROFILING_HPP

#include <koptim/core/koptim_Kokkos.hpp>
#include <string>

namespace koptim {
namespace Impl {

class ScopedRegion {
 public:
  explicit ScopedRegion(const std::string& name) { Kokkos::Profiling::pushRegion(name); }
  ~ScopedRegion() { Kokkos::Profiling::popRegion(); }
  ScopedRegion(const ScopedRegion&)            = delete;
  ScopedRegion& operator=(const ScopedRegion&) = delete;
};

}  // namespace Impl
}  // namespace koptim

#endif
