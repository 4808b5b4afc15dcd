#include "../core/koptim_Check.hpp"

#include "koptim_DiagonalKeys.hpp"
#include <koptim/core/impl/koptim_Elementwise.hpp>
#include <koptim/diagonal/koptim_AdaGrad.hpp>
#include "koptim_DiagonalMath.hpp"

#include <limits>
#include <sstream>

namespace koptim {

namespace {
// One run's update (its parameters' pieces of one scalar type and one group).
template <class T>
void adagrad_update(const ExecutionSpace& exec, const Impl::PieceTable<T>& table, std::int64_t chunks, double clr,
                    double wd, double eps) {
  const T clr_ = static_cast<T>(clr), wd_ = static_cast<T>(wd), eps_ = static_cast<T>(eps);
  const bool decay = wd != 0.0;
  Impl::for_each_piece_element(
      exec, "koptim::AdaGrad::update", table, chunks,
      KOKKOS_LAMBDA(const Impl::PieceArrays<T>& p, const std::int64_t i) {
        T* const a = p.s[0];
        T d        = p.g[i];
        if (decay) d = Impl::add_scaled(d, wd_, p.w[i]);
        const T ai = Impl::accumulate_square(a[i], d);
        a[i]       = ai;
        p.w[i]     = p.w[i] + Impl::diagonal_precondition(-clr_ * d, ai, eps_);
      });
}
}  // namespace

AdaGrad::AdaGrad(ParameterSet params, CommonOptions common, AdaGradOptions options,
                 std::shared_ptr<comm::Communicator> comm)
    : Impl::ElementwiseOptimizer("AdaGrad", std::move(params),
                                 Impl::with_defaults(std::move(common), default_lr, default_weight_decay), {"sum"},
                                 {options.initial_accumulator_value}, std::move(comm), Impl::describe_options(options)),
      options_(options) {
  Impl::check_option_ranges("AdaGrad", options_);
  // The sum starts at initial_accumulator_value in the parameter's scalar type: beyond the largest
  // float it would be Inf for a float32 parameter (the state then not the value written, and
  // refused by import_state), as lr and weight_decay would.
  for (const auto& p : parameters().parameters())
    if (p.param.dtype == ScalarType::float32)
      Impl::require_within_float("AdaGrad", "initial_accumulator_value", options_.initial_accumulator_value, "",
                                 p.name);
}

void AdaGrad::update_pieces(const ExecutionSpace& exec, std::int64_t t, const std::vector<double>& lrs) {
  for_each_run([&](const auto& run) {
    const double clr = lrs[run.group] / (1.0 + static_cast<double>(t - 1) * options_.lr_decay);
    adagrad_update(exec, run.table, run.chunks, clr, weight_decay(run.group), options_.eps);
  });
}

}  // namespace koptim
