// The keys of the diagonal optimizers, each declared once (see src/config/koptim_OptionKeys.hpp):
// name in a parameter list, field, documentation, range.
#ifndef KOPTIM_SRC_DIAGONAL_DIAGONALKEYS_HPP
#define KOPTIM_SRC_DIAGONAL_DIAGONALKEYS_HPP

#include "../config/koptim_OptionKeys.hpp"

#include <koptim/diagonal/koptim_AdaGrad.hpp>
#include <koptim/diagonal/koptim_Adam.hpp>
#include <koptim/diagonal/koptim_RMSProp.hpp>
#include <koptim/diagonal/koptim_SGD.hpp>

namespace koptim {

template <class O, class V, Impl::OptionsOf<O, SGDOptions> = 0>
void visit_keys(O& o, V& v) {
  namespace R = Impl::ranges::sgd;
  v.real("momentum", o.momentum, "Momentum factor mu.", R::momentum);
  v.real("dampening", o.dampening,
         "Dampening d of the momentum: B <- mu B + (1 - d) G (with momentum 0 only the default is accepted).",
         R::dampening);
  v.boolean("nesterov", o.nesterov, "Nesterov momentum (needs momentum > 0 and dampening = 0).");
}

template <class O, class V, Impl::OptionsOf<O, AdaGradOptions> = 0>
void visit_keys(O& o, V& v) {
  namespace R = Impl::ranges::adagrad;
  v.real("lr_decay", o.lr_decay, "The lr at step t is lr / (1 + (t - 1) lr_decay).", R::lr_decay);
  v.real("initial_accumulator_value", o.initial_accumulator_value,
         "Initial value of the sum of squared gradients (at most 3.4e38 for float32 parameters).",
         R::initial_accumulator_value);
  v.real("eps", o.eps,
         "Added to the denominator sqrt(sum); 0 allowed: a coordinate whose sum is 0 then gets no step (not 0/0).",
         R::eps);
}

template <class O, class V, Impl::OptionsOf<O, RMSPropOptions> = 0>
void visit_keys(O& o, V& v) {
  namespace R = Impl::ranges::rmsprop;
  v.real("alpha", o.alpha, "Smoothing constant of the squared-gradient average.", R::alpha);
  v.real("eps", o.eps,
         "Added to the denominator; 0 allowed: a coordinate whose denominator is 0 then gets no step (not 0/0).",
         R::eps);
  v.real("momentum", o.momentum, "Momentum factor.", R::momentum);
  v.boolean("centered", o.centered, "Normalise by the variance estimate (subtract the squared mean gradient).");
}

// Adam and AdamW.
template <class O, class V, Impl::OptionsOf<O, AdamOptions> = 0>
void visit_keys(O& o, V& v) {
  namespace R = Impl::ranges::adam;
  v.real_pair("betas", o.betas, "Decay rates (b1, b2) of the first and second moments.", R::beta1, R::beta2);
  v.real("eps", o.eps,
         "Added to the denominator sqrt(v_hat); 0 allowed: a coordinate whose v_hat is 0 then gets no step (not 0/0).",
         R::eps);
  v.boolean("amsgrad", o.amsgrad, "Use the running maximum of the second moment (AMSGrad).");
}

}  // namespace koptim

#endif
