// Stochastic gradient descent with momentum, dampening, Nesterov momentum and L2 weight decay,
// exactly as torch.optim.SGD:
//   G <- G + wd W;  B <- G at its first use, then B <- mu B + (1 - d) G;
//   P <- G + mu B (Nesterov) or B;  W <- W - lr P.
// Its first use is the first step taken (step 1): import_state refuses a state at step 0 whose
// momentum_buffer is not zero (a converted torch state without a step count, say), which that
// step would discard. Sharded, each rank checks its own slice, as import_state checks every
// value; io::load_checkpoint agrees on the outcome over the ranks.
#ifndef KOPTIM_DIAGONAL_SGD_HPP
#define KOPTIM_DIAGONAL_SGD_HPP

#include <koptim/diagonal/koptim_ElementwiseOptimizer.hpp>

namespace koptim {

struct SGDOptions {
  double momentum  = 0.0;
  double dampening = 0.0;
  bool nesterov    = false;
};

class SGD : public Impl::ElementwiseOptimizer {
 public:
  // torch.optim.SGD's (a parameter list requires lr).
  static constexpr double default_lr = 1e-3, default_weight_decay = 0.0;
  // With a communicator of several ranks the state is sharded (see ElementwiseOptimizer).
  SGD(ParameterSet params, CommonOptions common, SGDOptions options = {},
      std::shared_ptr<comm::Communicator> comm = nullptr);
  const SGDOptions& options() const { return options_; }

 protected:
  void update_pieces(const ExecutionSpace& exec, std::int64_t t, const std::vector<double>& lrs) override;

 private:
  SGDOptions options_;
};

}  // namespace koptim

#endif
