#include "../core/koptim_Check.hpp"

#include "koptim_DiagonalKeys.hpp"
#include <koptim/core/impl/koptim_Elementwise.hpp>
#include "koptim_DiagonalMath.hpp"
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

// The slots in the order of rmsprop_slots: square_avg, then momentum_buffer and grad_avg when kept.
template <bool Decay, bool Centered, bool Momentum, class T>
void rmsprop_kernel(const ExecutionSpace& exec, const Impl::PieceTable<T>& table, std::int64_t chunks, T lr_, T wd_,
                    T alpha, T one_minus_alpha, T eps, T mu) {
  Impl::for_each_piece_element(
      exec, "koptim::RMSProp::update", table, chunks,
      KOKKOS_LAMBDA(const Impl::PieceArrays<T>& p, const std::int64_t i) {
        T* const a = p.s[0];
        T d        = p.g[i];
        if (Decay) d = Impl::add_scaled(d, wd_, p.w[i]);
        const T ai = Impl::ema_square(a[i], d, alpha, one_minus_alpha);
        a[i]       = ai;
        T denom;
        if (Centered) {
          T* const m = p.s[Momentum ? 2 : 1];
          const T mi = Impl::lerp(m[i], d, one_minus_alpha);
          m[i]       = mi;
          // a - m^2 is a variance, but rounds below 0 for a nearly constant gradient (float, alpha
          // 0.99, g = 5.9 at step 1225; torch then gives NaN): taken as 0 there, as it is. As
          // max(a, m^2) - m^2, the same number as a - m^2 elsewhere and never below 0 without
          // contraction (host code), so that no root of a negative value is taken and discarded
          // (an invalid-operation flag); clamped once more where a compiler fuses the
          // subtraction with m * m (nvcc's default): its exact m^2 may exceed the rounded one.
          const T m2  = mi * mi;
          const T var = Impl::max(ai, m2) - m2;
          denom       = Impl::sqrt(Impl::max(var, T(0))) + eps;
        } else {
          denom = Impl::sqrt(ai) + eps;
        }
        if (Momentum) {
          T* const b = p.s[1];
          const T bi = b[i] * mu + Impl::divide_unless_zero(d, denom);
          b[i]       = bi;
          p.w[i]     = Impl::add_scaled(p.w[i], -lr_, bi);
        } else {
          p.w[i] = p.w[i] + Impl::divide_unless_zero(-lr_ * d, denom);
        }
      });
}

// One run's update (its parameters' pieces of one scalar type and one group).
template <class T>
void rmsprop_update(const ExecutionSpace& exec, const Impl::PieceTable<T>& table, std::int64_t chunks, double lr,
                    double wd, const RMSPropOptions& o) {
  const T lr_ = static_cast<T>(lr), wd_ = static_cast<T>(wd), alpha = static_cast<T>(o.alpha),
          one_minus_alpha = static_cast<T>(1.0 - o.alpha), eps = static_cast<T>(o.eps), mu = static_cast<T>(o.momentum);
  Impl::with_flags(
      [&](auto decay, auto centered, auto momentum) {
        rmsprop_kernel<decltype(decay)::value, decltype(centered)::value, decltype(momentum)::value>(
            exec, table, chunks, lr_, wd_, alpha, one_minus_alpha, eps, mu);
      },
      wd != 0.0, o.centered, o.momentum > 0.0);
}
}  // namespace

RMSProp::RMSProp(ParameterSet params, CommonOptions common, RMSPropOptions options,
                 std::shared_ptr<comm::Communicator> comm)
    : Impl::ElementwiseOptimizer("RMSProp", std::move(params),
                                 Impl::with_defaults(std::move(common), default_lr, default_weight_decay),
                                 rmsprop_slots(options), {}, std::move(comm), Impl::describe_options(options)),
      options_(options) {
  Impl::check_option_ranges("RMSProp", options_);
}

void RMSProp::update_pieces(const ExecutionSpace& exec, std::int64_t, const std::vector<double>& lrs) {
  for_each_run([&](const auto& run) {
    rmsprop_update(exec, run.table, run.chunks, lrs[run.group], weight_decay(run.group), options_);
  });
}

}  // namespace koptim
