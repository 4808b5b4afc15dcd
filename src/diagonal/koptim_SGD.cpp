#include "../core/koptim_Check.hpp"

#include "koptim_DiagonalKeys.hpp"
#include <koptim/core/impl/koptim_Elementwise.hpp>
#include "koptim_DiagonalMath.hpp"
#include <koptim/diagonal/koptim_SGD.hpp>

#include <limits>
#include <sstream>

namespace koptim {

namespace {
std::vector<std::string> sgd_slots(const SGDOptions& o) {
  return o.momentum != 0.0 ? std::vector<std::string>{"momentum_buffer"} : std::vector<std::string>{};
}

template <bool Decay, bool Momentum, bool Nesterov, bool First, class T>
void sgd_kernel(const ExecutionSpace& exec, const Impl::PieceTable<T>& table, std::int64_t chunks, T lr_, T wd_, T mu,
                T one_minus_d) {
  Impl::for_each_piece_element(
      exec, "koptim::SGD::update", table, chunks, KOKKOS_LAMBDA(const Impl::PieceArrays<T>& p, const std::int64_t i) {
        T d = p.g[i];
        if (Decay) d = Impl::add_scaled(d, wd_, p.w[i]);
        if (Momentum) {
          T* const b = p.s[0];
          const T bi = First ? d : Impl::add_scaled(b[i] * mu, one_minus_d, d);
          b[i]       = bi;
          d          = Nesterov ? Impl::add_scaled(d, mu, bi) : bi;
        }
        p.w[i] = Impl::add_scaled(p.w[i], -lr_, d);
      });
}

// One run's update (its parameters' pieces of one scalar type and one group).
template <class T>
void sgd_update(const ExecutionSpace& exec, const Impl::PieceTable<T>& table, std::int64_t chunks, bool first,
                double lr, double wd, const SGDOptions& o) {
  const T lr_ = static_cast<T>(lr), wd_ = static_cast<T>(wd), mu = static_cast<T>(o.momentum),
          one_minus_d = static_cast<T>(1.0 - o.dampening);
  Impl::with_flags(
      [&](auto decay, auto momentum, auto nesterov, auto first_use) {
        sgd_kernel<decltype(decay)::value, decltype(momentum)::value, decltype(nesterov)::value,
                   decltype(first_use)::value>(exec, table, chunks, lr_, wd_, mu, one_minus_d);
      },
      wd != 0.0, o.momentum != 0.0, o.nesterov, first);
}
}  // namespace

SGD::SGD(ParameterSet params, CommonOptions common, SGDOptions options, std::shared_ptr<comm::Communicator> comm)
    : Impl::ElementwiseOptimizer("SGD", std::move(params),
                                 Impl::with_defaults(std::move(common), default_lr, default_weight_decay),
                                 sgd_slots(options), {}, std::move(comm), Impl::describe_options(options)),
      options_(options) {
  // SGD never squares a gradient: only NaN and Inf are refused.
  refuse_overflowing_squares(false);
  first_step_sets_slots();
  Impl::check_option_ranges("SGD", options_);
  if (options_.nesterov && (options_.momentum <= 0.0 || options_.dampening != 0.0)) {
    throw ConfigError("koptim::SGD: nesterov = true needs momentum > 0 and dampening = 0 (got momentum = " +
                      Impl::real_string(options_.momentum) + ", dampening = " + Impl::real_string(options_.dampening) +
                      ")");
  }
  // torch accepts dampening without momentum and ignores it; a value written must act or be refused.
  Impl::refuse_ineffective("SGD", options_.momentum == 0.0 && options_.dampening != 0.0,
                           "dampening = " + Impl::real_string(options_.dampening),
                           "it applies to momentum > 0 (momentum is 0)");
}

void SGD::update_pieces(const ExecutionSpace& exec, std::int64_t t, const std::vector<double>& lrs) {
  for_each_run([&](const auto& run) {
    sgd_update(exec, run.table, run.chunks, t == 1, lrs[run.group], weight_decay(run.group), options_);
  });
}

}  // namespace koptim
