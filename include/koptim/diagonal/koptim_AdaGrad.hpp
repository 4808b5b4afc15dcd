// AdaGrad as torch.optim.Adagrad: G <- G + wd W;  A <- A + G^2 (A starts at
// initial_accumulator_value);  W <- W - lr / (1 + (t - 1) lr_decay) * G / (sqrt(A) + eps).
#ifndef KOPTIM_DIAGONAL_ADAGRAD_HPP
#define KOPTIM_DIAGONAL_ADAGRAD_HPP

#include <koptim/diagonal/koptim_ElementwiseOptimizer.hpp>

namespace koptim {

struct AdaGradOptions {
  double lr_decay                  = 0.0;
  double initial_accumulator_value = 0.0;
  double eps                       = 1e-10;
};

class AdaGrad : public Impl::ElementwiseOptimizer {
 public:
  // torch.optim.Adagrad's.
  static constexpr double default_lr = 1e-2, default_weight_decay = 0.0;
  // With a communicator of several ranks the state is sharded (see ElementwiseOptimizer).
  AdaGrad(ParameterSet params, CommonOptions common, AdaGradOptions options = {},
          std::shared_ptr<comm::Communicator> comm = nullptr);
  const AdaGradOptions& options() const { return options_; }

 protected:
  void update_pieces(const ExecutionSpace& exec, std::int64_t t, const std::vector<double>& lrs) override;

 private:
  AdaGradOptions options_;
};

}  // namespace koptim

#endif
