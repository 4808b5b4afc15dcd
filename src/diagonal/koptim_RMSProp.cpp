#include <koptim/core/impl/koptim_Check.hpp>

#include "koptim_DiagonalKeys.hpp"
#include <koptim/core/impl/koptim_Elementwise.hpp>
#include <koptim/diagonal/impl/koptim_DiagonalMath.hpp>
#include <koptim/diagonal/koptim_RMSProp.hpp>

#include <limits>
#include <sstream>

namespace koptim {

namespace {
std::vector<std::string> rmsprop_slots(const RMSPropOptions& o) {
  std::vector<std::string> s{"square_avg"};
  if (o.momentum > 0.0) s.push_back("momentum_buffer");
  if (o.centered) s.push_back("grad_avg");
  return s;
}

template <bool Decay, bool Centered, bool Momentum, class W, class G, class V, class T>
void rmsprop_kernel(const W& w, const G& g, const V& a, const V& m, const V& b, T lr_, T wd_, T alpha,
                    T one_minus_alpha, T eps, T mu) {
  Impl::for_each_element(
      "koptim::RMSProp::update", static_cast<std::int64_t>(w.extent(0)), KOKKOS_LAMBDA(const std::int64_t i) {
        T d = g(i);
        if (Decay) d = Impl::add_scaled(d, wd_, w(i));
        const T ai = Impl::ema_square(a(i), d, alpha, one_minus_alpha);
        a(i)       = ai;
        T denom;
        if (Centered) {
          const T mi = Impl::lerp(m(i), d, one_minus_alpha);
          m(i)       = mi;
          denom      = Impl::sqrt(ai + (-mi) * mi) + eps;
        } else {
          denom = Impl::sqrt(ai) + eps;
        }
        if (Momentum) {
          const T bi = b(i) * mu + d / denom;
          b(i)       = bi;
          w(i)       = Impl::add_scaled(w(i), -lr_, bi);
        } else {
          w(i) = w(i) + (-lr_ * d) / denom;
        }
      });
}

template <class W, class G>
void rmsprop_update(const W& w, const G& g, const Impl::Buffer& sq, const Impl::Buffer* mom, const Impl::Buffer* avg,
                    double lr, double wd, const RMSPropOptions& o) {
  using T      = typename W::non_const_value_type;
  const auto a = sq.view<T>();
  Kokkos::View<T*, MemorySpace> b, m;
  if (mom) b = mom->view<T>();
  if (avg) m = avg->view<T>();
  const T lr_ = static_cast<T>(lr), wd_ = static_cast<T>(wd), alpha = static_cast<T>(o.alpha),
          one_minus_alpha = static_cast<T>(1.0 - o.alpha), eps = static_cast<T>(o.eps), mu = static_cast<T>(o.momentum);
  Impl::with_flags(
      [&](auto decay, auto centered, auto momentum) {
        rmsprop_kernel<decltype(decay)::value, decltype(centered)::value, decltype(momentum)::value>(
            w, g, a, m, b, lr_, wd_, alpha, one_minus_alpha, eps, mu);
      },
      wd != 0.0, avg != nullptr, mom != nullptr);
}

}  // namespace

RMSProp::RMSProp(ParameterSet params, CommonOptions common, RMSPropOptions options,
                 std::shared_ptr<comm::Communicator> comm)
    : Impl::ElementwiseOptimizer("RMSProp", std::move(params), std::move(common), rmsprop_slots(options), {},
                                 std::move(comm), Impl::describe_options(options)),
      options_(options) {
  Impl::check_option_ranges("RMSProp", options_);
}

void RMSProp::update_pieces(std::int64_t, const std::vector<double>& lrs) {
  for (const auto& pc : pieces()) {
    const auto& p           = parameters()[pc.param];
    std::size_t s           = 1;
    const Impl::Buffer* mom = options_.momentum > 0.0 ? &pc.buffers[s++] : nullptr;
    const Impl::Buffer* avg = options_.centered ? &pc.buffers[s++] : nullptr;
    dispatch(p.param.dtype, [&](auto zero) {
      using T = decltype(zero);
      rmsprop_update(piece_param<T>(pc), piece_grad<T>(pc), pc.buffers[0], mom, avg, lrs[p.group],
                     weight_decay(p.group), options_);
    });
  }
}

}  // namespace koptim
