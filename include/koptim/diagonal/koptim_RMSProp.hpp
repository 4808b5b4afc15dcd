// RMSProp as torch.optim.RMSprop: G <- G + wd W;  A <- alpha A + (1 - alpha) G^2;
// centered: M <- lerp(M, G, 1 - alpha), A' = A - M^2, else A' = A;  D = sqrt(A') + eps;
// momentum: B <- mu B + G / D, W <- W - lr B; else W <- W - lr G / D.
#ifndef KOPTIM_DIAGONAL_RMSPROP_HPP
#define KOPTIM_DIAGONAL_RMSPROP_HPP

#include <koptim/diagonal/koptim_ElementwiseOptimizer.hpp>

namespace koptim {

struct RMSPropOptions {
  double alpha    = 0.99;
  double eps      = 1e-8;
  double momentum = 0.0;
  bool centered   = false;
};

class RMSProp : public Impl::ElementwiseOptimizer {
 public:
  // torch.optim.RMSprop's.
  static constexpr double default_lr = 1e-2, default_weight_decay = 0.0;
  // With a communicator of several ranks the state is sharded (see ElementwiseOptimizer).
  RMSProp(ParameterSet params, CommonOptions common, RMSPropOptions options = {},
          std::shared_ptr<comm::Communicator> comm = nullptr);
  const RMSPropOptions& options() const { return options_; }

 protected:
  void update_pieces(const ExecutionSpace& exec, std::int64_t t, const std::vector<double>& lrs) override;

 private:
  RMSPropOptions options_;
};

}  // namespace koptim

#endif
