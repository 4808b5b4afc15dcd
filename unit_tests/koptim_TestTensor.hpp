// A parameter/gradient View pair of run-time rank 1 to 4 for tests, filled and read in
// row-major (torch) order whatever its layout.
#ifndef KOPTIM_TEST_TENSOR_HPP
#define KOPTIM_TEST_TENSOR_HPP

#include <koptim/core/koptim_ParameterSet.hpp>

#include <functional>
#include <string>
#include <vector>

namespace koptim_test {

template <class T, class Layout = Kokkos::LayoutRight>
struct TestTensor {
  std::vector<std::int64_t> shape;
  Kokkos::View<T*, Layout> p1, g1;
  Kokkos::View<T**, Layout> p2, g2;
  Kokkos::View<T***, Layout> p3, g3;
  Kokkos::View<T****, Layout> p4, g4;

  explicit TestTensor(std::vector<std::int64_t> s, const std::string& label = "t") : shape(std::move(s)) {
    auto e = [&](std::size_t i) { return static_cast<std::size_t>(shape[i]); };
    switch (shape.size()) {
      case 1:
        p1 = decltype(p1)(label, e(0)), g1 = decltype(g1)(label + ".grad", e(0));
        break;
      case 2:
        p2 = decltype(p2)(label, e(0), e(1)), g2 = decltype(g2)(label + ".grad", e(0), e(1));
        break;
      case 3:
        p3 = decltype(p3)(label, e(0), e(1), e(2)), g3 = decltype(g3)(label + ".grad", e(0), e(1), e(2));
        break;
      default:
        p4 = decltype(p4)(label, e(0), e(1), e(2), e(3)), g4 = decltype(g4)(label + ".grad", e(0), e(1), e(2), e(3));
    }
  }

  std::int64_t size() const {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }

  void add_to(koptim::ParameterSet& set, const std::string& name, int group = 0) const {
    switch (shape.size()) {
      case 1:
        set.add(name, p1, g1, group);
        break;
      case 2:
        set.add(name, p2, g2, group);
        break;
      case 3:
        set.add(name, p3, g3, group);
        break;
      default:
        set.add(name, p4, g4, group);
    }
  }

  // f(row-major flat index, reference to the element) over a host copy of the View.
  template <class V>
  static void for_each(const V& v, bool write, const std::function<void(std::int64_t, T&)>& f) {
    auto h = Kokkos::create_mirror_view(v);
    Kokkos::deep_copy(h, v);
    std::int64_t k        = 0;
    constexpr int r       = V::rank;
    const std::int64_t n0 = h.extent(0), n1 = r > 1 ? h.extent(1) : 1, n2 = r > 2 ? h.extent(2) : 1,
                       n3 = r > 3 ? h.extent(3) : 1;
    for (std::int64_t a = 0; a < n0; ++a)
      for (std::int64_t b = 0; b < n1; ++b)
        for (std::int64_t c = 0; c < n2; ++c)
          for (std::int64_t d = 0; d < n3; ++d) f(k++, element(h, a, b, c, d));
    if (write) Kokkos::deep_copy(v, h);
  }
  template <class H>
  static T& element(const H& h, std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d) {
    if constexpr (H::rank == 1)
      return h(a);
    else if constexpr (H::rank == 2)
      return h(a, b);
    else if constexpr (H::rank == 3)
      return h(a, b, c);
    else
      return h(a, b, c, d);
  }

  void apply(bool grad, bool write, const std::function<void(std::int64_t, T&)>& f) const {
    switch (shape.size()) {
      case 1:
        for_each(grad ? g1 : p1, write, f);
        break;
      case 2:
        for_each(grad ? g2 : p2, write, f);
        break;
      case 3:
        for_each(grad ? g3 : p3, write, f);
        break;
      default:
        for_each(grad ? g4 : p4, write, f);
    }
  }

  void set(bool grad, const std::function<double(std::int64_t)>& v) const {
    apply(grad, true, [&](std::int64_t k, T& x) { x = static_cast<T>(v(k)); });
  }
  std::vector<double> get(bool grad = false) const {
    std::vector<double> out(size());
    apply(grad, false, [&](std::int64_t k, T& x) { out[k] = x; });
    return out;
  }
};

}  // namespace koptim_test

#endif
