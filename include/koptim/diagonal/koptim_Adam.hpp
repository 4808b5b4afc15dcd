// Adam and AdamW as torch.optim.Adam / torch.optim.AdamW.
//   AdamW: W <- W (1 - lr wd) first (decoupled decay); Adam: G <- G + wd W (L2).
//   m <- lerp(m, G, 1 - b1);  v <- b2 v + (1 - b2) G^2;  (amsgrad: v_max <- max(v_max, v))
//   W <- W - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
#ifndef KOPTIM_DIAGONAL_ADAM_HPP
#define KOPTIM_DIAGONAL_ADAM_HPP

#include <koptim/diagonal/koptim_ElementwiseOptimizer.hpp>

#include <array>

namespace koptim {

struct AdamOptions {
  std::array<double, 2> betas = {0.9, 0.999};
  double eps                  = 1e-8;
  bool amsgrad                = false;
};

class Adam : public Impl::ElementwiseOptimizer {
 public:
  // torch.optim.Adam's (with decoupled_weight_decay, AdamW's: weight_decay 0.01).
  static constexpr double default_lr = 1e-3, default_weight_decay = 0.0;
  // decoupled_weight_decay = true is AdamW.
  // With a communicator of several ranks the state is sharded (see ElementwiseOptimizer).
  Adam(ParameterSet params, CommonOptions common, AdamOptions options = {}, bool decoupled_weight_decay = false,
       std::shared_ptr<comm::Communicator> comm = nullptr);
  const AdamOptions& options() const { return options_; }
  bool decoupled_weight_decay() const { return decoupled_; }

 protected:
  void update_pieces(const ExecutionSpace& exec, std::int64_t t, const std::vector<double>& lrs) override;

 private:
  AdamOptions options_;
  bool decoupled_;
};

// AdamW: Adam with decoupled weight decay.
class AdamW : public Adam {
 public:
  // torch.optim.AdamW's.
  static constexpr double default_lr = 1e-3, default_weight_decay = 1e-2;
  AdamW(ParameterSet params, CommonOptions common, AdamOptions options = {},
        std::shared_ptr<comm::Communicator> comm = nullptr)
      : Adam(std::move(params), std::move(common), options, true, std::move(comm)) {}
};

}  // namespace koptim

#endif
