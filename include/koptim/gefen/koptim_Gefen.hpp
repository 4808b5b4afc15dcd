// Gefen: a memory-efficient drop-in replacement for AdamW (docs/gefen.md). Same
// hyperparameters as AdamW (lr, betas, eps, decoupled weight_decay), about 1 byte of state per
// parameter instead of 8: the first moment is one uint8 codebook index per element times one
// absmax per scale block, and the second moment is shared by the elements of a block.
//
// Everything Gefen learns is learned at the first step, inside step(), from that step's
// gradients (then the regular step runs): per tensor the block size p (neighbour-contrast rule,
// or variance-drop with partition_rule = variance_drop; see koptim_GefenPartition.hpp), and one
// global 256-entry codebook, the exact optimum of a 1-D k-means over a 4096-bin histogram of the
// gradients normalised by their scale block (koptim_GefenCodebook.hpp). Before the first step
// Gefen holds no state (state_bytes() is 0, tensor_info() reports p = 0).
//
// Storage per tensor of n elements, scalars in the parameter's precision T (docs/gefen.md, "Storage per tensor"):
//
//   kind          when                                second moment           momentum scales
//   shared        p > 1                               n / p values            n / p (scale block = p)
//   factored      p = 1, 2+ dims > 1, n >= 4096        rows + cols values      n / s
//   full          p = 1 otherwise, or                 n values                n / s
//                 p1_second_moment = full
//
// plus n uint8 indices; s is the largest divisor of n that is at most 256. Global: the codebook
// (256 float) and its nearest-entry lookup table (8193 pairs of uint8 for a learned codebook; an
// imported one whose distinct entries are closer than 2^-12 may need up to 65537).
//
// Factored second moment (a koptim deviation from the reference, Adafactor-style): the tensor is viewed as a
// matrix (rows, cols) in memory order, rows = the extent of its slowest-varying dimension of
// extent > 1 (the first one for LayoutRight, the last one for LayoutLeft), cols = n / rows.
//   R_i <- b2 R_i + (1 - b2) mean_j g_ij^2,   C_j <- b2 C_j + (1 - b2) mean_i g_ij^2,
//   v_ij = R_i C_j (1 / mean_i(R_i))          (in double; 0 while mean(R) = 0),
// which is exact for a rank-one g^2 and carries the same bias (1 - b2^t) as a per-element EMA.
//
// One step, per element i of block b, scale block a, in T unless noted:
//   v_b   <- v_b b2 + (1 - b2) T(mean_{i in b} g_i^2)   (the sum in double)
//   v_i   <- v_i b2 + (1 - b2) g_i g_i                  (full; factored: R, C as above)
//   W_i   <- W_i T(1 - lr wd)                           (a factor of exactly 1 when wd = 0)
//   m_i    = b1 (codebook[idx_i] absmax_a) + (1 - b1) g_i
//   absmax_a <- max_{i in a} |m_i|
//   idx_i  <- the codebook entry nearest to x_i = m_i (1 / absmax_a)
//             (ties to the lower entry; x_i = m_i / absmax_a where 1 / absmax_a overflows, 0 when
//             absmax_a = 0)
//   c      = T(-lr / (1 - b1^t)),  d = T(sqrt(1 - b2^t))
//   shared:        W_i <- W_i + codebook[idx_i] ((c absmax_a) / (sqrt(v_b) / d + eps))
//   full/factored: W_i <- W_i + (c codebook[idx_i] absmax_a) / (sqrt(v_i) / d + eps)
// which is the AdamW update from the requantized momentum, in torch's Adam order of operations
// (shared: one division per block). The block sums and maxima are team reductions: sums associate differently on each
// backend (8 lanes on CPUs), maxima never do. Device code keeps nvcc's default contraction into fused multiply-adds,
// so a CUDA build's momenta (and, near a midpoint, indices and scales) may differ from a CPU build's in the last bit.
//
// Sharded state (a communicator of N > 1 ranks; the factory's shard_state): each rank keeps the
// whole state of a subset of the tensors (blocks, partitions and scales are per tensor), chosen
// by longest-processing-time scheduling (assign_blocks) on the element counts of all tensors
// together, whatever their scalar type: the state is ~1 byte per element in either precision, so
// this balances memory, ~1/N per rank plus at most one tensor. At the first step each rank
// chooses the partitions of its tensors and counts their share of the histogram; one
// all_reduce_sum of the counts gives every rank the codebook of the whole model. Each step a
// rank updates its tensors, then one all_gather per scalar type shares the new parameters
// (each rank's tensors in a segment of its own size, no padding): every rank ends with the same
// parameters, bitwise equal to one process. Every rank must build the same optimizer
// (ConfigError on every rank otherwise), and an error on one rank during a step reaches every
// rank.
//
// Memory order: Gefen flattens every tensor in memory order. For LayoutRight Views that is the
// row-major (torch) order; a LayoutLeft View of shape (a, b) is treated as the
// row-major tensor (b, a) it is in memory (partitions and factors follow that).
#ifndef KOPTIM_GEFEN_GEFEN_HPP
#define KOPTIM_GEFEN_GEFEN_HPP

#include <koptim/core/koptim_Optimizer.hpp>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace koptim {

namespace gefen {
// On host backends a step takes the factored tensors of a parameter group in waves of about this
// many bytes of gradient per thread of the host execution space: the factors of a wave's
// tensors, then the wave's update, which finds the gradient still in the cores' caches. On GPUs
// a wave is a whole group.
constexpr std::int64_t host_wave_bytes = std::int64_t(256) << 10;
}  // namespace gefen

enum class GefenPartitionRule { neighbour_contrast, variance_drop };
enum class GefenP1SecondMoment { factored, full };
// The names a parameter list uses.
const char* to_string(GefenPartitionRule r);
const char* to_string(GefenP1SecondMoment m);

// Gefen's own keys; lr and weight_decay are in CommonOptions (Gefen's defaults: default_lr,
// default_weight_decay).
struct GefenOptions {
  std::array<double, 2> betas = {0.9, 0.999};
  double eps                  = 1e-8;
  // Expert keys; the defaults need no tuning.
  GefenPartitionRule partition_rule    = GefenPartitionRule::neighbour_contrast;
  GefenP1SecondMoment p1_second_moment = GefenP1SecondMoment::factored;
  bool force_p1                        = false;  // no second-moment sharing anywhere (p = 1)
};

enum class GefenSecondMoment { uninitialised, shared, factored, full };
const char* to_string(GefenSecondMoment k);

// What Gefen chose for one tensor, and what it holds for it.
struct GefenTensorInfo {
  std::string name;
  std::vector<std::int64_t> shape;
  std::int64_t size                 = 0;
  std::int64_t partition            = 0;  // p (elements sharing a second moment); 0 before the first step
  std::int64_t blocks               = 0;  // n / p partition blocks
  std::int64_t scale_block          = 0;  // elements per absmax
  std::int64_t scale_blocks         = 0;
  GefenSecondMoment second_moment   = GefenSecondMoment::uninitialised;
  std::int64_t second_moment_values = 0;
  std::int64_t rows = 0, cols = 0;  // factored only
  std::size_t state_bytes = 0;      // indices + absmax + second moment of this tensor
  // Sharded: the rank that holds this tensor's state (0 unsharded). Another rank's tensor is
  // reported with its name, shape and owner only (p = 0, uninitialised, 0 bytes here).
  int owner = 0;
};

class Gefen : public Optimizer {
 public:
  // AdamW's lr; no weight decay (the reference's default).
  static constexpr double default_lr = 1e-3, default_weight_decay = 0.0;
  // With a communicator of more than one rank the state is sharded by tensor (see above); the
  // constructor is then collective and checks that every rank passes the same parameters and
  // options.
  Gefen(ParameterSet params, CommonOptions common, GefenOptions options = {},
        std::shared_ptr<comm::Communicator> comm = nullptr);
  ~Gefen() override;

  bool sharded() const { return comm_ != nullptr; }
  // The rank that holds each tensor's state (ParameterSet order; all 0 unless sharded).
  const std::vector<int>& owners() const { return owner_; }

  const GefenOptions& options() const { return options_; }
  // True once the first step has chosen the partitions and learned the codebook.
  bool initialised() const;

  // Per tensor: the chosen p, the blocks and the state bytes (ParameterSet order).
  std::vector<GefenTensorInfo> tensor_info() const;
  // tensor_info() as a printable table, with the totals and bytes per parameter.
  std::string summary() const;
  // The codebook, ascending, -1 first and +1 last; empty before the first step.
  std::vector<float> codebook() const;

  // Indices, absmax scales and second moments of every tensor (sharded: of this rank's
  // tensors), plus the codebook (1024 bytes) and its lookup tables (32772 bytes for a learned
  // codebook, and 256 thresholds: 1024 bytes in float, 2048 more when a tensor is double), which
  // every rank holds, once initialised; 0 before the first step.
  std::size_t state_bytes() const override;
  // Sharded: a tensor's entries ("<name>/...") are kept by its owner alone.
  StatePart state_part(const std::string& key) const override;
  std::shared_ptr<comm::Communicator> communicator() const override { return comm_; }

 protected:
  void update(const ExecutionSpace& exec, std::int64_t t, const std::vector<double>& lrs) override;
  // State keys: integer "initialised"; once initialised, tensor "codebook" (float32, 256),
  // integer "<name>/partition", tensors "<name>/indices" (uint8, the parameter's
  // shape), "<name>/absmax", and
  // "<name>/exp_avg_sq" (shared, full) or "<name>/exp_avg_sq_row" and "<name>/exp_avg_sq_col"
  // (factored). Layouts follow from the partition and this optimizer's options. Sharded: the
  // tensors of this rank's tensors only (plus "initialised" and "codebook"); a state whose set of
  // tensors is not this rank's is rejected.
  void export_tensors(OptimizerState& state) const override;
  StateKeys check_entries(const OptimizerState& state) const override;
  void import_tensors(const OptimizerState& state) override;

 private:
  struct State;
  void initialise(const ExecutionSpace& exec);
  bool mine(std::size_t i) const { return owner_[i] == rank_; }

  GefenOptions options_;
  std::unique_ptr<State> state_;
  std::shared_ptr<comm::Communicator> comm_;  // null unless sharded over more than one rank
  int rank_ = 0;
  std::vector<int> owner_;
  // Sharded: the all-gather plans of the float and double tensors (buffers allocated once).
  struct Sharing;
  std::unique_ptr<Sharing> sharing_;
};

}  // namespace koptim

#endif
