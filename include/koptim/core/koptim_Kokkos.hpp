// Includes Kokkos and checks that the Kokkos headers seen here are the Kokkos koptim was
// configured against. /usr/include/trilinos holds Debian's Kokkos 3.4 headers next to Teuchos;
// a build against another Kokkos that picks them up by accident stops here, at compile time.
#ifndef KOPTIM_CORE_KOKKOS_HPP
#define KOPTIM_CORE_KOKKOS_HPP

#include <Kokkos_Core.hpp>

#if __has_include(<koptim_config.hpp>)
#include <koptim_config.hpp>
static_assert(KOKKOS_VERSION == KOPTIM_KOKKOS_VERSION,
              "koptim: the Kokkos headers on the include path are not the Kokkos koptim was configured with; "
              "put that Kokkos's include directory before /usr/include/trilinos");
#endif

#endif
