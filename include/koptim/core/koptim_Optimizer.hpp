// The interface every koptim optimizer shares: step(), the step counter, the current learning
// rate, the exact bytes of optimizer state held, and export/import of the complete state.
//
// step() reads the gradient Views registered in the ParameterSet and updates the parameter
// Views in place. Before touching anything it checks the gradients according to
// nonfinite_gradient: "error" (throw NonFiniteError naming the parameter; nothing changes),
// "skip_step" (count the step as skipped; nothing changes) or "unchecked" (no check, fastest;
// a bad gradient then reaches the state). The check refuses NaN and Inf and, in every optimizer
// that squares gradients, finite values whose square overflows the gradient's precision
// (|g| > sqrt of the largest finite float or double): one pass, fused with the NaN/Inf test.
// Shampoo bounds the trace of its factor matrices instead (docs/robustness.md). An optimizer
// whose state is distributed over ranks (communicator() of more than one rank) agrees on the
// check: a gradient refused on any rank throws on every rank, or skips the step on every rank.
// last_step_status() says what the last step() did (taken, skipped, refused values, failed
// root computations, fallbacks), for logging.
#ifndef KOPTIM_CORE_OPTIMIZER_HPP
#define KOPTIM_CORE_OPTIMIZER_HPP

#include <koptim/core/koptim_OptimizerState.hpp>
#include <koptim/core/koptim_ParameterSet.hpp>
#include <koptim/core/koptim_Schedule.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace koptim {

namespace comm {
class Communicator;
}

enum class NonFiniteGradient { error, skip_step, unchecked };
// The name a parameter list uses ("error", "skip_step", "unchecked").
const char* to_string(NonFiniteGradient p);

// What the last call of step() did. Filled also when step() throws, so that a caller can log it.
struct StepStatus {
  std::int64_t step = 0;      // step_count() after the call
  bool taken        = false;  // the parameters were updated
  bool skipped      = false;  // nonfinite_gradient = skip_step refused a gradient: nothing changed
  // The first parameter (in registration order) whose gradient was refused, and how many of its
  // values were (NaN, Inf, or a square beyond the precision); 0 and "" when the step was taken
  // or the policy is unchecked.
  // Shampoo's trace bound refuses a whole block: it names the parameter and counts 0 values.
  // A distributed optimizer's rank whose own gradients passed, in a step another rank refused:
  // "rank R: <parameter>" and 0 values (Shampoo's trace bound, checked by the block's rank on
  // gradients that are the same on every rank, names the parameter alone on every rank).
  std::int64_t refused_values = 0;
  std::string refused_parameter;
  // Shampoo: inverse roots (or eigenbases) whose computation failed at this step; their previous
  // value was kept (num_tolerated_failed_amortized_computations in a row are allowed). 0 elsewhere.
  std::int64_t failed_root_computations = 0;
  // Shampoo with root_method = coupled_newton: roots computed by the eigendecomposition because
  // the Newton iteration diverged on their factor (rank-deficient or ill-conditioned). 0 elsewhere.
  std::int64_t root_fallbacks = 0;
  // Shampoo with root_method = coupled_newton: roots whose Newton iteration stopped at its 100
  // iterations without reaching its tolerance (max |M - I| <= 1e-6); each is used as computed.
  // 0 elsewhere. These three count this rank's blocks only when Shampoo's blocks are spread over
  // ranks.
  std::int64_t unconverged_roots = 0;
};

class Optimizer;
namespace Impl {
// Used by koptim::create() to record the list an optimizer was built from.
void set_configuration(Optimizer& opt, std::string xml);
// Interrupts opt (Optimizer::interrupted()): call threw error after it had begun to change the
// state. For a caller that changes an optimizer's state from outside, as a checkpoint load does on
// every rank when one rank's import failed.
void interrupt(Optimizer& opt, const std::string& call, const std::string& error);
}  // namespace Impl

// What every optimizer is configured with, besides its own hyperparameters. lr and weight_decay
// left unset take the optimizer's own defaults, its class's default_lr and default_weight_decay
// (torch.optim's, and a parameter list's): lr 1e-3 for SGD, Adam, AdamW and Gefen, 1e-2 for
// AdaGrad, RMSProp and Shampoo; weight_decay 0.01 for AdamW, 0 for the others.
struct CommonOptions {
  std::optional<double> lr;
  std::optional<double> weight_decay;
  NonFiniteGradient nonfinite_gradient = NonFiniteGradient::error;
  LRSchedule lr_schedule;
};

namespace Impl {
// common with its unset lr and weight_decay given these values (an optimizer's defaults).
inline CommonOptions with_defaults(CommonOptions common, double lr, double weight_decay) {
  if (!common.lr) common.lr = lr;
  if (!common.weight_decay) common.weight_decay = weight_decay;
  return common;
}
}  // namespace Impl

// An optimizer holds Kokkos Views (its state, and through its ParameterSet the user's Views):
// it must be created after Kokkos::initialize (otherwise koptim::Error) and destroyed before
// Kokkos::finalize.
class Optimizer {
 public:
  virtual ~Optimizer()                   = default;
  Optimizer(const Optimizer&)            = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // "SGD", "AdaGrad", "RMSProp", "Adam", "AdamW", ...
  const std::string& name() const { return name_; }

  // One optimization step from the gradients currently in the registered gradient Views, on the
  // execution-space instance exec (the default instance unless given): every kernel, copy and
  // fence of the step is on exec, ordered after the work queued on it before (the gradients), and
  // the work queued on it after sees the updated parameters. The step waits on exec only where a
  // result must reach the host (docs/architecture.md, "Execution-space instances").
  void step(const ExecutionSpace& exec = ExecutionSpace());

  // Steps taken (skipped steps are not counted).
  std::int64_t step_count() const { return step_; }
  // True after a step threw once it had begun to change the state (Shampoo's inverse-root
  // errors, a failure in a collective or an allocation during the update), or an import_state()
  // threw after its checks had passed (writing the tensors): the state is then no step's, and
  // step() and export_state() refuse, naming that error, until import_state() restores a state (a
  // saved one, or a checkpoint's). A step refused by its checks changes nothing and does not
  // interrupt.
  bool interrupted() const { return !interrupted_.empty(); }
  // The largest step count (and skipped-step count): step counters are used as doubles in bias
  // corrections and schedules, exact up to 2^53. step() and import_state() refuse to pass it.
  static constexpr std::int64_t max_step_count = std::int64_t(1) << 53;
  // What the last step() did (all zero before the first).
  const StepStatus& last_step_status() const { return status_; }
  // Steps skipped because a gradient was not finite (nonfinite_gradient = "skip_step").
  std::int64_t skipped_steps() const { return skipped_; }

  // The learning rate the next step() uses for a group: the group's lr times the schedule (before
  // AdaGrad's lr_decay, as torch's group['lr']).
  double lr(int group = 0) const;
  // A group's base learning rate and weight decay (the optimizer's unless the group overrides them).
  double base_lr(int group = 0) const;
  double weight_decay(int group = 0) const;

  // Exact bytes of optimizer state this optimizer holds (not counting the parameters and gradients).
  virtual std::size_t state_bytes() const = 0;

  // The complete state. Distributed (sharded state, Shampoo's blocks over ranks), each rank's
  // export holds what that rank keeps: its blocks or tensors, its slices (StateTensor::whole).
  OptimizerState export_state() const;
  // Restores an exported state. A state of another optimizer kind, or with a missing, extra or
  // mis-shaped entry, is rejected with StateError and nothing changes.
  void import_state(const OptimizerState& state);
  // The checks of import_state() alone: throws the same StateError, changes nothing.
  void check_state(const OptimizerState& state) const;

  // Which part of an entry of the complete state (the union of every rank's export, slices
  // joined) this rank keeps: nothing, all of it, or (sharded element-wise state) the elements
  // [offset, offset + count) in memory order. Keys are those of export_state(); an unknown key
  // is "all" (import_state() then rejects it). Checkpoints use this to load a state written on
  // another number of ranks.
  struct StatePart {
    enum Kind { none, all, slice } kind = all;
    std::int64_t offset = 0, count = 0;
  };
  virtual StatePart state_part(const std::string& key) const;

  // The entries of a state that an optimizer reads besides the step counters. check_state()
  // refuses every other integer, real or tensor, naming it, with hint appended (for instance
  // which rank holds what).
  struct StateKeys {
    std::set<std::string> integers, reals, tensors;
    std::string hint;
  };

  // The communicator this optimizer's state is distributed over; null when every rank holds all
  // of it (one process, or replicated data-parallel training).
  virtual std::shared_ptr<comm::Communicator> communicator() const { return nullptr; }

  // The parameter list koptim::create() built this optimizer from, every default filled in, as
  // Teuchos XML; empty for an optimizer constructed from option structs. Checkpoints store it.
  const std::string& configuration() const { return configuration_; }

  const ParameterSet& parameters() const { return params_; }
  // The options the optimizer was built with, lr and weight_decay always set (defaults filled in).
  const CommonOptions& common_options() const { return common_; }

 protected:
  Optimizer(std::string name, ParameterSet params, CommonOptions common);
  // The same for an optimizer whose state is distributed over agree_with: its checks are agreed
  // on, so that every rank throws the lowest failing rank's error, or none does (no rank goes on
  // into the derived class's collectives while another has thrown). Null or one rank: as above.
  Optimizer(std::string name, ParameterSet params, CommonOptions common, const comm::Communicator* agree_with);

  // One step with the step counter already advanced to t, on exec; lrs[g] is group g's lr for
  // this step.
  virtual void update(const ExecutionSpace& exec, std::int64_t t, const std::vector<double>& lrs) = 0;
  virtual void export_tensors(OptimizerState& state) const                                        = 0;
  // Throws StateError when an entry the optimizer reads is missing or does not fit; returns the
  // keys of those entries. Must not change anything.
  virtual StateKeys check_entries(const OptimizerState& state) const = 0;
  virtual void import_tensors(const OptimizerState& state)           = 0;

  // Optimizers that never square a gradient (SGD), or bound the growth of their state
  // themselves (Shampoo), refuse only NaN and Inf gradients.
  void refuse_overflowing_squares(bool on) { refuse_squares_ = on; }
  // The ranks whose steps meet in collectives (communicator() unless a step communicates over
  // fewer): step() agrees on the gradient check over them.
  virtual const comm::Communicator* step_communicator() const { return communicator().get(); }

  // An update() that refuses its gradients itself under skip_step sets skipped here: the step is
  // then counted as skipped, not taken (the update must have changed nothing).
  StepStatus& step_status() { return status_; }
  // An update() calls this where it begins to change the state (after the checks that refuse a
  // step with nothing changed): an exception after it interrupts the optimizer (interrupted()).
  void state_changing() { changing_ = true; }

 private:
  // False when a gradient is refused and the step is to be skipped; throws for "error".
  bool check_gradients(const ExecutionSpace& exec);
  // check_gradients, its outcome agreed on over step_communicator() (the step taken, skipped or
  // refused on every rank alike).
  bool checked_on_every_rank(const ExecutionSpace& exec);
  // The communicator over which step() agrees on its gradient check and on an interruption
  // (step_communicator() of more than one rank, whatever nonfinite_gradient), or null where no
  // rank waits for this one.
  const comm::Communicator* check_agreement() const;
  // Group `group` of the parameter set; ConfigError naming the caller (what) when there is none.
  const ParameterGroup& group(int group, const char* what) const;
  // The message of step() or export_state() (what) refused after an interrupted step.
  std::string refused_after_interruption(const std::string& what) const;
  // Marks the optimizer interrupted: call ("step 3", "import_state") threw error after it had
  // begun to change the state.
  void interrupt(const std::string& call, const std::string& error);
  // Runs f; an exception from it (rethrown) interrupts the optimizer, naming call() ("step 3"),
  // if armed is true when it is thrown (read then: an update arms it as it begins to change the
  // state).
  template <class F, class Call>
  void interrupting_on_throw(F&& f, Call&& call, const bool& armed);
  // Every gradient's place, for the check that reads them all in one kernel (built with the
  // optimizer; none under nonfinite_gradient = unchecked).
  struct GradientTable;
  std::shared_ptr<GradientTable> gradient_table_;

  friend void Impl::set_configuration(Optimizer& opt, std::string xml);
  friend void Impl::interrupt(Optimizer& opt, const std::string& call, const std::string& error);

  std::string name_;
  ParameterSet params_;
  CommonOptions common_;
  std::int64_t step_    = 0;
  std::int64_t skipped_ = 0;
  bool refuse_squares_  = true;
  bool changing_        = false;
  std::string interrupted_;  // what interrupted the optimizer; empty: the state is a step's
  StepStatus status_;
  std::string configuration_;
};

namespace Impl {

// Number of non-finite entries of a tensor and the flat index of the first (-1 if none), on exec.
std::pair<std::int64_t, std::int64_t> count_nonfinite(const TensorRef& t,
                                                      const ExecutionSpace& exec = ExecutionSpace());

// The largest |g| whose square g * g is finite in T (about 1.8e19 for float, 1.3e154 for double).
template <class T>
T largest_squarable();

// A gradient check in one pass: entries that are not finite or, with squares = true, whose
// square overflows (|g| > largest_squarable<T>()).
struct GradientCheck {
  std::int64_t refused   = 0;    // entries refused
  std::int64_t nonfinite = 0;    // of which NaN or Inf
  std::int64_t first     = -1;   // flat index of the first refused entry
  double first_value     = 0.0;  // its value
};
GradientCheck check_gradient(const TensorRef& t, bool squares, const ExecutionSpace& exec = ExecutionSpace());

// Throws StateError naming key and the first bad element when a float or double state tensor
// holds a NaN or Inf, or (nonnegative) a negative value. Changes nothing.
void check_values(const StateTensor& t, const std::string& key, bool nonnegative);
// Throws StateError "<who>: state tensor '<key>' has value x at flat index i<why>" at the first
// element of a float or double state tensor that is not zero. Changes nothing.
void check_zeros(const StateTensor& t, const std::string& who, const std::string& key, const std::string& why);

// The StateLayout of a state tensor in the memory order of `param`.
StateLayout state_layout(const TensorRef& param);

// Throws StateError (who: the caller) when t's layout and the expected one are both known and
// differ: t was exported from a parameter of the other memory order. Changes nothing.
void check_layout(const StateTensor& t, StateLayout expected, const std::string& who, const std::string& key,
                  const std::string& parameter);

// Names, scalar types, shapes, layouts and groups (index, name, lr and weight_decay, and which
// of them the group sets itself) of the parameters, an item each, then the common options' items,
// then `options` (the optimizer's own, Impl::describe_options).
std::vector<std::string> describe_parameters(const Optimizer& opt, const std::vector<std::string>& options = {});

}  // namespace Impl
}  // namespace koptim

#endif
