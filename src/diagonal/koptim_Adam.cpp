#include "../core/koptim_Check.hpp"

#include "koptim_DiagonalKeys.hpp"
#include <koptim/core/impl/koptim_Elementwise.hpp>
#include <koptim/diagonal/koptim_Adam.hpp>
#include "koptim_DiagonalMath.hpp"

#include <cmath>
#include <limits>
#include <sstream>

namespace koptim {

namespace {
std::vector<std::string> adam_slots(const AdamOptions& o) {
  std::vector<std::string> s{"exp_avg", "exp_avg_sq"};
  if (o.amsgrad) s.push_back("max_exp_avg_sq");
  return s;
}

template <bool Shrink, bool L2, bool AmsGrad, class T>
void adam_kernel(const ExecutionSpace& exec, const Impl::PieceTable<T>& table, std::int64_t chunks,
                 const Impl::AdamScalars<T>& s) {
  Impl::for_each_piece_element(
      exec, "koptim::Adam::update", table, chunks, KOKKOS_LAMBDA(const Impl::PieceArrays<T>& p, const std::int64_t i) {
        T* const m = p.s[0];
        T* const v = p.s[1];
        T wi       = p.w[i];
        if (Shrink) wi = wi * s.decay;
        T d = p.g[i];
        if (L2) d = Impl::add_scaled(d, s.wd, wi);
        const T mi = Impl::lerp(m[i], d, s.one_minus_b1);
        const T vi = Impl::ema_square(v[i], d, s.b2, s.one_minus_b2);
        m[i]       = mi;
        v[i]       = vi;
        T vd       = vi;
        if (AmsGrad) {
          vd        = Impl::max(p.s[2][i], vi);
          p.s[2][i] = vd;
        }
        p.w[i] = wi + Impl::divide_unless_zero(s.neg_step_size * mi, Impl::rms_denominator(vd, s.bc2_sqrt, s.eps));
      });
}

// One run's update (its parameters' pieces of one scalar type and one group).
template <class T>
void adam_update(const ExecutionSpace& exec, const Impl::PieceTable<T>& table, std::int64_t chunks, std::int64_t t,
                 double lr, double wd, bool decoupled, const AdamOptions& o) {
  const auto s = Impl::adam_scalars<T>(o.betas, o.eps, t, lr, wd);
  Impl::with_flags(
      [&](auto shrink, auto l2, auto amsgrad) {
        adam_kernel<decltype(shrink)::value, decltype(l2)::value, decltype(amsgrad)::value>(exec, table, chunks, s);
      },
      decoupled && wd != 0.0, !decoupled && wd != 0.0, o.amsgrad);
}
}  // namespace

Adam::Adam(ParameterSet params, CommonOptions common, AdamOptions options, bool decoupled_weight_decay,
           std::shared_ptr<comm::Communicator> comm)
    : Impl::ElementwiseOptimizer(
          decoupled_weight_decay ? "AdamW" : "Adam", std::move(params),
          Impl::with_defaults(std::move(common), default_lr,
                              decoupled_weight_decay ? AdamW::default_weight_decay : default_weight_decay),
          adam_slots(options), {}, std::move(comm), Impl::describe_options(options)),
      options_(options),
      decoupled_(decoupled_weight_decay) {
  Impl::check_option_ranges(name(), options_);
}

void Adam::update_pieces(const ExecutionSpace& exec, std::int64_t t, const std::vector<double>& lrs) {
  for_each_run([&](const auto& run) {
    adam_update(exec, run.table, run.chunks, t, lrs[run.group], weight_decay(run.group), decoupled_, options_);
  });
}

}  // namespace koptim
