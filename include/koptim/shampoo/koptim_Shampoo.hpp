// Distributed Shampoo (single process): block-diagonal Kronecker-factored preconditioning with
// learning-rate grafting, amortized inverse roots, and the eigenvalue-corrected (SOAP-like)
// variant. The math and the order of operations are those of ALGORITHMS.md section 2.
//
// Each parameter is cut into blocks (koptim_Blocking.hpp). A block is the unit of work and of
// state: its factor matrices L_j, their inverse roots X_j (or eigenvectors Q_j), its filtered
// gradient, grafting and momentum buffers. One step computes every block's lr-scaled update
// U = lr P into an update buffer, then applies W -= U; the distributed version (issue 5) lets
// each rank compute its own blocks' U and all-gathers them in between.
#ifndef KOPTIM_SHAMPOO_SHAMPOO_HPP
#define KOPTIM_SHAMPOO_SHAMPOO_HPP

#include <koptim/core/koptim_Optimizer.hpp>
#include <koptim/linalg/koptim_MatrixRoot.hpp>
#include <koptim/shampoo/koptim_Blocking.hpp>

#include <array>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace koptim {

enum class WeightDecayType { L2, decoupled, corrected, independent };
enum class Grafting { none, SGD, AdaGrad, RMSProp, Adam };

const char* to_string(WeightDecayType t);
const char* to_string(Grafting g);

struct ShampooOptions {
  std::array<double, 2> betas             = {0.9, 1.0};
  double beta3                            = -1.0;  // -1: beta3 = betas[0]
  double epsilon                          = 1e-12;
  double momentum                         = 0.0;
  double dampening                        = 0.0;
  bool use_nesterov                       = false;
  WeightDecayType weight_decay_type       = WeightDecayType::decoupled;
  std::int64_t max_preconditioner_dim     = 1024;
  bool use_merge_dims                     = true;
  std::int64_t precondition_frequency     = 1;
  std::int64_t start_preconditioning_step = -1;  // -1: precondition_frequency
  bool use_bias_correction                = true;
  Grafting grafting                       = Grafting::none;
  double grafting_beta2                   = -1.0;  // -1: 0.99 for RMSProp, 0.999 for Adam
  double grafting_epsilon                 = 1e-10;
  bool eigenvalue_corrected               = false;
  // Exponent a of X = L^-a: by block order ({order: a}) and by order and dimension.
  std::map<int, double> inverse_exponent_override;
  std::map<std::pair<int, int>, double> inverse_exponent_override_dim;
  linalg::RootMethod root_method                  = linalg::RootMethod::eigen;
  linalg::EighSolver eigensolver                  = linalg::EighSolver::automatic;
  bool pseudo_inverse                             = false;
  double rank_rtol                                = 0.0;
  double rank_atol                                = 0.0;
  int num_tolerated_failed_amortized_computations = 3;
};

namespace Impl {
template <class T>
class ShampooBlocks;
}

class Shampoo : public Optimizer {
 public:
  Shampoo(ParameterSet params, CommonOptions common, ShampooOptions options = {});
  ~Shampoo() override;

  const ShampooOptions& options() const { return options_; }
  std::size_t state_bytes() const override;

  // What blocking did to each tensor ("what did it do to my tensor?").
  const std::vector<shampoo::BlockLayout>& block_layouts() const { return layouts_; }
  std::string describe_blocks() const;
  // Number of blocks over all parameters.
  std::size_t num_blocks() const;
  // Root-inverse solver failures kept (the previous root was used), over all steps.
  std::int64_t failed_amortized_computations() const;

  // The exponent a of dimension dim of a block of the given order.
  double inverse_exponent(int order, int dim) const;

 protected:
  void update(std::int64_t t, const std::vector<double>& lrs) override;
  void export_tensors(OptimizerState& state) const override;
  void check_tensors(const OptimizerState& state) const override;
  void import_tensors(const OptimizerState& state) override;

 private:
  ShampooOptions options_;
  std::vector<shampoo::BlockLayout> layouts_;
  std::unique_ptr<Impl::ShampooBlocks<float>> f32_;
  std::unique_ptr<Impl::ShampooBlocks<double>> f64_;
};

}  // namespace koptim

#endif
