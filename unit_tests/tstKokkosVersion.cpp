// The Kokkos headers this test was compiled with are the Kokkos CMake configured koptim with
// (and not, say, Debian's Kokkos 3.4 headers from /usr/include/trilinos picked up by accident).
#include <koptim/koptim.hpp>

#include <gtest/gtest.h>

TEST(KokkosVersion, HeadersMatchConfiguredKokkos) {
  EXPECT_EQ(KOKKOS_VERSION, KOPTIM_EXPECTED_KOKKOS_VERSION);
  EXPECT_EQ(KOKKOS_VERSION, KOPTIM_KOKKOS_VERSION);
  EXPECT_EQ(KOPTIM_VERSION, KOPTIM_VERSION_MAJOR * 10000 + KOPTIM_VERSION_MINOR * 100 + KOPTIM_VERSION_PATCH);
}
