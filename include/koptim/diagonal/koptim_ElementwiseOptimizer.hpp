// The base of the diagonal optimizers (SGD, AdaGrad, RMSProp, Adam, AdamW): state as a fixed set
// of element-wise buffers, optionally sharded over the ranks of a communicator.
#ifndef KOPTIM_DIAGONAL_ELEMENTWISEOPTIMIZER_HPP
#define KOPTIM_DIAGONAL_ELEMENTWISEOPTIMIZER_HPP

#include <koptim/core/impl/koptim_Elementwise.hpp>
#include <koptim/core/koptim_Optimizer.hpp>

#include <memory>
#include <string>
#include <vector>

namespace koptim {
namespace Impl {

template <class T>
class Distributor;

// Base of optimizers whose state is a fixed set of element-wise buffers ("slots", e.g. exp_avg
// and exp_avg_sq) shaped like the parameters. With a communicator the state is sharded: the
// elements of all parameters of one scalar type, concatenated in registration order, are cut into
// one contiguous slice per rank; each rank keeps the state of its slice, updates it, and one
// all-gather per scalar type shares the new parameter values (buffers allocated once). Element-wise
// updates make the result bitwise equal to one process.
class ElementwiseOptimizer : public Optimizer {
 public:
  ~ElementwiseOptimizer() override;
  std::size_t state_bytes() const override;
  bool sharded() const { return comm_ != nullptr; }
  StatePart state_part(const std::string& key) const override;
  std::shared_ptr<comm::Communicator> communicator() const override { return comm_; }

 protected:
  // A contiguous range of one parameter's elements whose state this rank holds: the whole
  // parameter unless sharded.
  struct Piece {
    int param           = 0;
    std::int64_t offset = 0, size = 0;
    std::vector<Buffer> buffers;  // one per slot, piece-sized
  };

  // options: the derived optimizer's own hyperparameters as text, an item each, for the check
  // that every rank builds the same optimizer.
  ElementwiseOptimizer(std::string name, ParameterSet params, CommonOptions common, std::vector<std::string> slots,
                       std::vector<double> fill = {}, std::shared_ptr<comm::Communicator> comm = nullptr,
                       const std::vector<std::string>& options = {});

  const std::vector<Piece>& pieces() const { return pieces_; }
  // The first step sets the slots without reading them (SGD's momentum buffer, torch's None
  // before its first step): import_state then refuses a state at step 0 whose slots are not zero,
  // which that step would discard.
  void first_step_sets_slots() { first_step_sets_slots_ = true; }
  // The pieces of one scalar type and one parameter group, as one table (PieceArrays: W, G and
  // the slots' buffers of each piece, in the order of the slots): the update of a run is one
  // kernel, whatever its number of parameters.
  template <class T>
  struct PieceRun {
    int group = 0;
    PieceTable<T> table;
    std::int64_t chunks = 0;  // of piece_chunk elements
  };
  // f(run) for every run, the float32 ones first.
  template <class F>
  void for_each_run(const F& f) const {
    for (const auto& r : runs_f32_) f(r);
    for (const auto& r : runs_f64_) f(r);
  }

  // The update of every piece (one kernel per run, on exec); the all-gather of the sharded
  // parameters follows.
  virtual void update_pieces(const ExecutionSpace& exec, std::int64_t t, const std::vector<double>& lrs) = 0;

  void export_tensors(OptimizerState& state) const override;
  StateKeys check_entries(const OptimizerState& state) const override;
  void import_tensors(const OptimizerState& state) override;

 private:
  void update(const ExecutionSpace& exec, std::int64_t t, const std::vector<double>& lrs) final;
  std::string key(const Piece& pc, std::size_t slot) const;

  template <class T>
  std::vector<PieceRun<T>> make_runs() const;

  std::vector<std::string> slots_;
  std::vector<Piece> pieces_;
  std::vector<PieceRun<float>> runs_f32_;
  std::vector<PieceRun<double>> runs_f64_;
  std::shared_ptr<comm::Communicator> comm_;
  bool first_step_sets_slots_ = false;
  // Sharded: the all-gather plans of the float and double parameters, a piece for every part of
  // a parameter that lies in one rank's slice.
  struct Sharing;
  std::unique_ptr<Sharing> sharing_;
};

}  // namespace Impl
}  // namespace koptim

#endif
