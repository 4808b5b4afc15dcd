#include <koptim/core/koptim_Check.hpp>
#include <koptim/diagonal/koptim_AdaGrad.hpp>
#include <koptim/diagonal/koptim_DiagonalMath.hpp>

#include <limits>

namespace koptim {

namespace {
template <class T>
void adagrad_update(const Parameter& p, const Impl::Buffer& sum, double clr, double wd, double eps) {
  const auto w = p.param.flat<T>();
  const auto g = p.grad.flat<T>();
  const auto a = sum.view<T>();
  const T clr_ = static_cast<T>(clr), wd_ = static_cast<T>(wd), eps_ = static_cast<T>(eps);
  const bool decay = wd != 0.0;
  Kokkos::parallel_for(
      "koptim::AdaGrad::update", Kokkos::RangePolicy<ExecutionSpace>(0, p.param.size),
      KOKKOS_LAMBDA(const std::int64_t i) {
        T d = g(i);
        if (decay) d = Impl::add_scaled(d, wd_, w(i));
        const T ai = Impl::accumulate_square(a(i), d);
        a(i)       = ai;
        w(i)       = w(i) + (-clr_ * d) / (Impl::sqrt(ai) + eps_);
      });
}
}  // namespace

AdaGrad::AdaGrad(ParameterSet params, CommonOptions common, AdaGradOptions options)
    : Impl::ElementwiseOptimizer("AdaGrad", std::move(params), std::move(common), {"sum"},
                                 {options.initial_accumulator_value}),
      options_(options) {
  const double inf = std::numeric_limits<double>::infinity();
  Impl::require_range("AdaGrad", "lr_decay", options_.lr_decay, 0.0, inf, false, true);
  Impl::require_range("AdaGrad", "initial_accumulator_value", options_.initial_accumulator_value, 0.0, inf, false,
                      true);
  Impl::require_range("AdaGrad", "eps", options_.eps, 0.0, inf, false, true);
}

void AdaGrad::update(std::int64_t t, const std::vector<double>& lrs) {
  const auto& ps = parameters();
  for (std::size_t i = 0; i < ps.size(); ++i) {
    const auto& p    = ps[i];
    const double clr = lrs[p.group] / (1.0 + static_cast<double>(t - 1) * options_.lr_decay);
    dispatch(p.param.dtype, [&](auto zero) {
      adagrad_update<decltype(zero)>(p, buffer(i, 0), clr, weight_decay(p.group), options_.eps);
    });
  }
}

}  // namespace koptim
