// Registration of parameters: what is accepted, and the clear error for each rejected input.
#include "koptim_TestTensor.hpp"

#include <koptim/koptim.hpp>

#include <gtest/gtest.h>

namespace {

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const koptim::Error& e) {
    return e.what();
  }
  return "";
}

TEST(ParameterSet, RegistersAnyRankLayoutAndScalar) {
  koptim::ParameterSet set;
  Kokkos::View<float*> a("a", 3), da("da", 3);
  Kokkos::View<double**, Kokkos::LayoutLeft> b("b", 2, 5), db("db", 2, 5);
  Kokkos::View<float***> c("c", 2, 3, 4), dc("dc", 2, 3, 4);
  Kokkos::View<double****, Kokkos::LayoutRight> d("d", 1, 2, 3, 4), dd("dd", 1, 2, 3, 4);
  set.add("a", a, da);
  set.add("b", b, db);
  set.add("c", c, dc);
  set.add("d", d, dd);
  ASSERT_EQ(set.size(), 4u);
  EXPECT_EQ(set.num_elements(), 3 + 10 + 24 + 24);
  EXPECT_EQ(set[1].param.shape, (std::vector<std::int64_t>{2, 5}));
  EXPECT_FALSE(set[1].param.layout_right);
  EXPECT_EQ(set[1].param.dtype, koptim::ScalarType::float64);
  EXPECT_EQ(set[0].param.data, a.data());  // no copy: the user's memory
  EXPECT_EQ(set.find("c"), 2);
  EXPECT_EQ(set.find("nope"), -1);
}

TEST(ParameterSet, KeepsTheUsersAllocationAlive) {
  koptim::ParameterSet set;
  float* data = nullptr;
  {
    Kokkos::View<float*> a("a", 4), da("da", 4);
    data = a.data();
    set.add("a", a, da);
  }
  EXPECT_EQ(set[0].param.data, data);
  EXPECT_EQ(set[0].param.flat<float>().extent(0), 4u);
}

TEST(ParameterSet, RejectsGradientOfAnotherShape) {
  koptim::ParameterSet set;
  Kokkos::View<float**> w("w", 3, 4), g("g", 4, 3);
  const auto msg = error_of([&] { set.add("fc.weight", w, g); });
  EXPECT_NE(msg.find("fc.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("gradient shape (4, 3) differs from parameter shape (3, 4)"), std::string::npos) << msg;
  EXPECT_TRUE(set.empty());
}

TEST(ParameterSet, RejectsGradientOfAnotherLayout) {
  koptim::ParameterSet set;
  Kokkos::View<float**, Kokkos::LayoutRight> w("w", 3, 4);
  Kokkos::View<float**, Kokkos::LayoutLeft> g("g", 3, 4);
  const auto msg = error_of([&] { set.add("w", w, g); });
  EXPECT_NE(msg.find("layout (LayoutLeft) differs from parameter layout (LayoutRight)"), std::string::npos) << msg;
  EXPECT_TRUE(set.empty());
}

TEST(ParameterSet, RejectsGradientOfAnotherScalarType) {
  koptim::ParameterSet set;
  Kokkos::View<float*> w("w", 3);
  Kokkos::View<double*> g("g", 3);
  const auto msg = error_of([&] { set.add("w", w, g); });
  EXPECT_NE(msg.find("scalar type float64 differs from parameter scalar type float32"), std::string::npos) << msg;
}

TEST(ParameterSet, RejectsAParameterRegisteredTwice) {
  koptim::ParameterSet set;
  Kokkos::View<float*> w("w", 3), g("g", 3), g2("g2", 3), v("v", 3);
  set.add("w", w, g);
  auto msg = error_of([&] { set.add("w", v, g2); });
  EXPECT_NE(msg.find("a parameter named 'w' is already registered"), std::string::npos) << msg;
  msg = error_of([&] { set.add("w_again", w, g2); });
  EXPECT_NE(msg.find("already registered as parameter 'w'"), std::string::npos) << msg;
  // A view into a registered parameter overlaps it too.
  Kokkos::View<float*> part(w.data() + 1, 2), gp("gp", 2);
  msg = error_of([&] { set.add("part", part, gp); });
  EXPECT_NE(msg.find("already registered as parameter 'w'"), std::string::npos) << msg;
  EXPECT_EQ(set.size(), 1u);
  // A NUL would end the name in a checkpoint: "a\0b" was saved as "a" and refused on load.
  Kokkos::View<float*> x("x", 3), gx("gx", 3);
  msg = error_of([&] { set.add(std::string("a\0b", 3), x, gx); });
  EXPECT_NE(msg.find("contains a NUL byte"), std::string::npos) << msg;
  msg = error_of([&] { set.add_group(std::string("g\0h", 3)); });
  EXPECT_NE(msg.find("contains a NUL byte"), std::string::npos) << msg;
  EXPECT_EQ(set.size(), 1u);
}

TEST(ParameterSet, RejectsBadGroups) {
  koptim::ParameterSet set;
  Kokkos::View<float**> w("w", 2, 2), g("g", 2, 2);
  std::string msg;
  msg = error_of([&] { set.add("w", w, g, 3); });
  EXPECT_NE(msg.find("group index 3 does not exist"), std::string::npos) << msg;
  msg = error_of([&] { set.add_group("default"); });
  EXPECT_NE(msg.find("group 'default' already exists"), std::string::npos) << msg;
  msg = error_of([&] { set.add_group("neg", {-1.0, std::nullopt}); });
  EXPECT_NE(msg.find("lr = -1 is not allowed"), std::string::npos) << msg;
}

}  // namespace
