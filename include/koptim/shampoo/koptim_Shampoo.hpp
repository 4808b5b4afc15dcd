// Distributed Shampoo: block-diagonal Kronecker-factored preconditioning with
// learning-rate grafting, amortized inverse roots, and the eigenvalue-corrected (SOAP-like)
// variant. The math and the order of operations: docs/shampoo.md.
//
// Each parameter is cut into blocks (koptim_Blocking.hpp). A block is the unit of work and of
// state: its factor matrices L_j, their inverse roots X_j (or eigenvectors Q_j), its filtered
// gradient, grafting and momentum buffers. One step computes every block's lr-scaled update
// U = lr P into an update buffer, then applies W -= U; with a communicator each rank
// computes its own blocks' U and all-gathers them in between.
#ifndef KOPTIM_SHAMPOO_SHAMPOO_HPP
#define KOPTIM_SHAMPOO_SHAMPOO_HPP

#include <koptim/core/koptim_Optimizer.hpp>
#include <koptim/linalg/koptim_RootOptions.hpp>
#include <koptim/shampoo/koptim_Blocking.hpp>

#include <array>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace koptim {

namespace comm {
class Communicator;
}

enum class WeightDecayType { L2, decoupled, corrected, independent };
enum class Grafting { none, SGD, AdaGrad, RMSProp, Adam };

// Precision of the update all-gather: "float32" sends every update in its parameter's own
// precision (fp32 for float parameters; so N ranks equal 1 rank bitwise), "bfloat16" rounds
// every update to bf16 (also on one rank, so that every rank applies the same numbers).
enum class CommunicationDType { float32, bfloat16 };
// Cost of a block for the assignment of blocks to ranks: its update's bytes in the
// communication precision rounded up to 64, or the sum of the cubes of its dimensions.
enum class DistributedCostModel { bytes, cubic };
// How the eigenvalue-corrected variant refreshes its eigenbases every precondition_frequency steps:
// eigh computes every eigendecomposition exactly; qr (SOAP's refresh) computes the first one exactly
// and then warm-starts from the previous eigenvectors: orthogonal iteration (A V, then a QR) while
// the basis is off by more than qr_tolerance, at most qr_max_iterations steps (linalg/koptim_EigenbasisQr.hpp).
enum class Eigenbasis { eigh, qr };

// The names a parameter list uses ("decoupled", "Adam", "bfloat16", ...).
const char* to_string(WeightDecayType t);
const char* to_string(Grafting g);
const char* to_string(CommunicationDType t);
const char* to_string(DistributedCostModel m);
const char* to_string(Eigenbasis e);

struct ShampooOptions {
  std::array<double, 2> betas = {0.9, 1.0};
  std::optional<double> beta3;  // unset: betas[0]
  double epsilon                      = 1e-12;
  double momentum                     = 0.0;
  double dampening                    = 0.0;
  bool use_nesterov                   = false;
  WeightDecayType weight_decay_type   = WeightDecayType::decoupled;
  std::int64_t max_preconditioner_dim = 1024;
  bool use_merge_dims                 = true;
  std::int64_t precondition_frequency = 1;
  std::optional<std::int64_t> start_preconditioning_step;  // unset: precondition_frequency
  bool use_bias_correction = true;
  Grafting grafting        = Grafting::none;
  std::optional<double> grafting_beta2;  // unset: 0.99 for RMSProp, 0.999 for Adam
  double grafting_epsilon   = 1e-10;
  bool eigenvalue_corrected = false;
  Eigenbasis eigenbasis     = Eigenbasis::eigh;
  int qr_max_iterations     = 1;
  double qr_tolerance       = 0.01;
  // Exponent a of X = L^-a: by block order ({order: a}) and by order and dimension. An entry that
  // no block takes (an order no block has after merging and splitting, a dimension >= its order,
  // an order whose every dimension has its own entry) is refused: ConfigError.
  std::map<int, double> inverse_exponent_override;
  std::map<std::pair<int, int>, double> inverse_exponent_override_dim;
  linalg::RootMethod root_method                  = linalg::RootMethod::eigen;
  linalg::EighSolver eigensolver                  = linalg::EighSolver::automatic;
  bool pseudo_inverse                             = false;
  double rank_rtol                                = 0.0;
  double rank_atol                                = 0.0;
  int num_tolerated_failed_amortized_computations = 3;
  // Distribution (with a communicator): ranks per group sharing the work (unset: all; a divisor of
  // the number of ranks; without a communicator 1 or unset); groups replicate it.
  std::optional<int> num_trainers_per_group;
  CommunicationDType communication_dtype      = CommunicationDType::float32;
  DistributedCostModel distributed_cost_model = DistributedCostModel::bytes;
};

namespace Impl {
template <class T>
class ShampooBlocks;
// The coupled Newton iteration's limit of iterations (100). Test hook: set_newton_iteration_limit(n)
// lowers it for every Shampoo of the process (0: back to 100), so that a root that stops without
// converging (StepStatus::unconverged_roots) can be tested on small factors.
void set_newton_iteration_limit(int limit);
}  // namespace Impl

class Shampoo : public Optimizer {
 public:
  // The reference implementation's lr; no weight decay.
  static constexpr double default_lr = 1e-2, default_weight_decay = 0.0;
  // Without a communicator (or with one rank) every block is computed here. With one, the
  // ranks of each group of num_trainers_per_group ranks share the blocks (each keeps the state of
  // its own blocks only) and one all-gather per step shares their updates. Every rank must build
  // the optimizer with the same parameters and configuration (checked: ConfigError on every rank).
  Shampoo(ParameterSet params, CommonOptions common, ShampooOptions options = {},
          std::shared_ptr<comm::Communicator> comm = nullptr);
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
  // eigenbasis = qr: QR steps done over all refreshes and factors (0 while every warm-started
  // basis already met qr_tolerance), and the warm-started refreshes of a factor (one per factor
  // and refresh after the first, exact, one).
  std::int64_t qr_iterations() const;
  std::int64_t qr_refreshes() const;

  // The exponent a of dimension dim of a block of the given order.
  double inverse_exponent(int order, int dim) const;

  // The rank (in this rank's group) that computes a block, and this rank's place in its group.
  int block_owner(int param, std::size_t block) const { return owners_[param][block]; }
  int group_rank() const;
  int group_size() const;
  // Bytes of the updates gathered per step (every block's update once, this rank's own included,
  // in the communication precision; 0 without distribution).
  std::size_t all_gather_bytes() const;

  // Seconds spent in each phase of step() on this rank while time_phases(true) was set, and the
  // amortized computations done since construction (always counted). Timing ends each phase with
  // a fence, so that device work is counted where it runs: it is off by default, and a step then
  // waits on the device only where a result must reach the host. Kokkos Tools see the phases as
  // regions either way ("koptim::Shampoo::accumulate", ...).
  struct PhaseTimes {
    double accumulate = 0, amortized_computation = 0, eigenvalue_correction = 0, compute_updates = 0, all_gather = 0,
           write_back                   = 0;
    std::int64_t amortized_computations = 0;
  };
  const PhaseTimes& phase_times() const { return times_; }
  void time_phases(bool on) { time_phases_ = on; }
  bool time_phases() const { return time_phases_; }

  // With host-accessible memory the blocks of each per-block phase run concurrently on the host
  // threads, each block's single-threaded BLAS calls and element-wise loops on one thread (on by
  // default). Off: the device form, as with device memory (one kernel per phase over all blocks,
  // the products batched by shape; for comparison, and to test that path on a CPU). The same
  // results either way (to rounding where a threaded reduction sums in another order).
  void batch_blocks_on_host(bool on) { batch_blocks_on_host_ = on; }
  bool batch_blocks_on_host() const { return batch_blocks_on_host_; }
  // The products of the device form (factor updates, preconditioning: GEMMs batched by shape over
  // all blocks) and of the root computations (the roots' reconstruction, coupled Newton) through
  // koptim's portable batched kernel, even where host BLAS (host memory) or cuBLAS (a CUDA build)
  // would take them: to test that kernel in Shampoo on a CPU, with batch_blocks_on_host(false).
  // Off by default. The same results to rounding (sums in another order than BLAS's).
  void portable_products(bool on) { portable_products_ = on; }
  bool portable_products() const { return portable_products_; }
  // The eigenvalue-corrected variant without grafting (and with betas[0] > 0) keeps its filtered
  // gradient in the factors' eigenbasis (on by default): the rotated M_hat then comes from the
  // rotated gradient, which the eigenvalue correction computes anyway, and a step makes two mode
  // products per preconditioned dimension instead of three (the filtered gradient is rotated
  // between bases only when they are refreshed). Off: kept in the parameters' coordinates and
  // rotated at every step, as the reference implementation does; the same results to rounding, for
  // comparison. The state holds it under its own key in each form. Only before the first step
  // (also one that threw) and before import_state: ConfigError after.
  void filter_in_eigenbasis(bool on);
  bool filter_in_eigenbasis() const { return filter_in_eigenbasis_; }

  // A block's entries ("<name>/block<b>/...") are kept by the ranks that compute it.
  StatePart state_part(const std::string& key) const override;
  std::shared_ptr<comm::Communicator> communicator() const override { return comm_; }

 protected:
  void update(const ExecutionSpace& exec, std::int64_t t, const std::vector<double>& lrs) override;
  void export_tensors(OptimizerState& state) const override;
  StateKeys check_entries(const OptimizerState& state) const override;
  void import_tensors(const OptimizerState& state) override;

 private:
  ShampooOptions options_;
  std::vector<shampoo::BlockLayout> layouts_;
  std::shared_ptr<comm::Communicator> comm_, group_comm_;
  std::vector<std::vector<int>> owners_;
  PhaseTimes times_;
  bool time_phases_          = false;
  bool batch_blocks_on_host_ = true;
  bool portable_products_    = false;
  bool filter_in_eigenbasis_ = true;
  bool filter_form_fixed_    = false;  // a step began or a state was imported: the form is in use
  std::unique_ptr<Impl::ShampooBlocks<float>> f32_;
  std::unique_ptr<Impl::ShampooBlocks<double>> f64_;
};

}  // namespace koptim

#endif
