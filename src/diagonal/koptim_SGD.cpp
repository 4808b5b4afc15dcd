#include <koptim/core/impl/koptim_Check.hpp>

#include "koptim_DiagonalKeys.hpp"
#include <koptim/core/impl/koptim_Elementwise.hpp>
#include <koptim/diagonal/impl/koptim_DiagonalMath.hpp>
#include <koptim/diagonal/koptim_SGD.hpp>

#include <limits>
#include <sstream>

namespace koptim {

namespace {
std::vector<std::string> sgd_slots(const SGDOptions& o) {
  return o.momentum != 0.0 ? std::vector<std::string>{"momentum_buffer"} : std::vector<std::string>{};
}

template <bool Decay, bool Momentum, bool Nesterov, bool First, class W, class G, class B, class T>
void sgd_kernel(const W& w, const G& g, const B& b, T lr_, T wd_, T mu, T one_minus_d) {
  Impl::for_each_element(
      "koptim::SGD::update", static_cast<std::int64_t>(w.extent(0)), KOKKOS_LAMBDA(const std::int64_t i) {
        T d = g(i);
        if (Decay) d = Impl::add_scaled(d, wd_, w(i));
        if (Momentum) {
          const T bi = First ? d : Impl::add_scaled(b(i) * mu, one_minus_d, d);
          b(i)       = bi;
          d          = Nesterov ? Impl::add_scaled(d, mu, bi) : bi;
        }
        w(i) = Impl::add_scaled(w(i), -lr_, d);
      });
}

template <class W, class G>
void sgd_update(const W& w, const G& g, const Impl::Buffer* buf, bool first, double lr, double wd,
                const SGDOptions& o) {
  using T = typename W::non_const_value_type;
  Kokkos::View<T*, MemorySpace> b;
  if (buf) b = buf->view<T>();
  const T lr_ = static_cast<T>(lr), wd_ = static_cast<T>(wd), mu = static_cast<T>(o.momentum),
          one_minus_d = static_cast<T>(1.0 - o.dampening);
  Impl::with_flags(
      [&](auto decay, auto momentum, auto nesterov, auto first_use) {
        sgd_kernel<decltype(decay)::value, decltype(momentum)::value, decltype(nesterov)::value,
                   decltype(first_use)::value>(w, g, b, lr_, wd_, mu, one_minus_d);
      },
      wd != 0.0, buf != nullptr, o.nesterov, first);
}

}  // namespace

SGD::SGD(ParameterSet params, CommonOptions common, SGDOptions options, std::shared_ptr<comm::Communicator> comm)
    : Impl::ElementwiseOptimizer("SGD", std::move(params), std::move(common), sgd_slots(options), {}, std::move(comm),
                                 Impl::describe_options(options)),
      options_(options) {
  // SGD never squares a gradient: only NaN and Inf are refused.
  refuse_overflowing_squares(false);
  Impl::check_option_ranges("SGD", options_);
  if (options_.nesterov && (options_.momentum <= 0.0 || options_.dampening != 0.0)) {
    throw ConfigError("koptim::SGD: nesterov = true needs momentum > 0 and dampening = 0 (got momentum = " +
                      Impl::real_string(options_.momentum) + ", dampening = " + Impl::real_string(options_.dampening) +
                      ")");
  }
}

void SGD::update_pieces(std::int64_t t, const std::vector<double>& lrs) {
  for (const auto& pc : pieces()) {
    const auto& p           = parameters()[pc.param];
    const Impl::Buffer* buf = options_.momentum != 0.0 ? &pc.buffers[0] : nullptr;
    dispatch(p.param.dtype, [&](auto zero) {
      using T = decltype(zero);
      sgd_update(piece_param<T>(pc), piece_grad<T>(pc), buf, t == 1, lrs[p.group], weight_decay(p.group), options_);
    });
  }
}

}  // namespace koptim
