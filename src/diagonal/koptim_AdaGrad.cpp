#include <koptim/core/impl/koptim_Check.hpp>

#include "koptim_DiagonalKeys.hpp"
#include <koptim/core/impl/koptim_Elementwise.hpp>
#include <koptim/diagonal/koptim_AdaGrad.hpp>
#include <koptim/diagonal/impl/koptim_DiagonalMath.hpp>

#include <limits>
#include <sstream>

namespace koptim {

namespace {
template <class W, class G>
void adagrad_update(const W& w, const G& g, const Impl::Buffer& sum, double clr, double wd, double eps) {
  using T      = typename W::non_const_value_type;
  const auto a = sum.view<T>();
  const T clr_ = static_cast<T>(clr), wd_ = static_cast<T>(wd), eps_ = static_cast<T>(eps);
  const bool decay = wd != 0.0;
  Impl::for_each_element(
      "koptim::AdaGrad::update", static_cast<std::int64_t>(w.extent(0)), KOKKOS_LAMBDA(const std::int64_t i) {
        T d = g(i);
        if (decay) d = Impl::add_scaled(d, wd_, w(i));
        const T ai = Impl::accumulate_square(a(i), d);
        a(i)       = ai;
        w(i)       = w(i) + (-clr_ * d) / (Impl::sqrt(ai) + eps_);
      });
}
}  // namespace

AdaGrad::AdaGrad(ParameterSet params, CommonOptions common, AdaGradOptions options,
                 std::shared_ptr<comm::Communicator> comm)
    : Impl::ElementwiseOptimizer("AdaGrad", std::move(params), std::move(common), {"sum"},
                                 {options.initial_accumulator_value}, std::move(comm), Impl::describe_options(options)),
      options_(options) {
  Impl::check_option_ranges("AdaGrad", options_);
}

void AdaGrad::update_pieces(std::int64_t t, const std::vector<double>& lrs) {
  for (const auto& pc : pieces()) {
    const auto& p    = parameters()[pc.param];
    const double clr = lrs[p.group] / (1.0 + static_cast<double>(t - 1) * options_.lr_decay);
    dispatch(p.param.dtype, [&](auto zero) {
      using T = decltype(zero);
      adagrad_update(piece_param<T>(pc), piece_grad<T>(pc), pc.buffers[0], clr, weight_decay(p.group), options_.eps);
    });
  }
}

}  // namespace koptim
