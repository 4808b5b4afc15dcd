// Gefen's own keys, each declared once (see src/config/koptim_OptionKeys.hpp).
#ifndef KOPTIM_SRC_GEFEN_GEFENKEYS_HPP
#define KOPTIM_SRC_GEFEN_GEFENKEYS_HPP

#include "../config/koptim_OptionKeys.hpp"

#include <koptim/gefen/koptim_Gefen.hpp>

namespace koptim {

template <class O, class V, Impl::OptionsOf<O, GefenOptions> = 0>
void visit_keys(O& o, V& v) {
  namespace R = Impl::ranges::gefen;
  v.real_pair("betas", o.betas, "Decay rates (b1, b2) of the first and second moments, as AdamW.", R::beta1, R::beta2);
  v.real("eps", o.eps, "Added to the denominator sqrt(v_hat), as AdamW.", R::eps);
  v.choice("partition_rule", o.partition_rule,
           "Expert: the rule that picks each tensor's block size p from the first gradients: neighbour_contrast "
           "(default) or variance_drop (gefen 1.1.1); with force_p1 only the default is accepted.");
  v.choice("p1_second_moment", o.p1_second_moment,
           "Expert: second moment of tensors with p = 1: factored (row/column estimate for tensors of 2+ dimensions "
           "of extent > 1 and >= 4096 elements, per element otherwise) or full (per element, as the reference).");
  v.boolean("force_p1", o.force_p1, "Expert: no second-moment sharing (p = 1 for every tensor).");
}

}  // namespace koptim

#endif
