#include <koptim/comm/koptim_BF16.hpp>
#include <koptim/comm/koptim_Communicator.hpp>
#include "../core/koptim_Check.hpp"
#include <koptim/core/impl/koptim_Elementwise.hpp>
#include "../core/koptim_Lanes.hpp"
#include <koptim/core/impl/koptim_Math.hpp>
#include <koptim/core/impl/koptim_Profiling.hpp>
#include "../diagonal/koptim_DiagonalMath.hpp"
#include <koptim/linalg/koptim_BatchedGemm.hpp>
#include <koptim/linalg/koptim_EigenbasisQr.hpp>
#include <koptim/linalg/koptim_Eigensolver.hpp>
#include <koptim/linalg/koptim_Gemm.hpp>
#include <koptim/linalg/koptim_MatrixRoot.hpp>
#include "koptim_BlockMap.hpp"
#include <koptim/shampoo/koptim_Shampoo.hpp>

#include "../comm/koptim_Distributor.hpp"
#include "koptim_ShampooKeys.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <set>
#include <sstream>
#include <utility>
#include <type_traits>

#if defined(__unix__)
#include <unistd.h>
#endif

namespace koptim {

namespace Impl {

namespace {
int newton_iteration_limit = 100;
}  // namespace
void set_newton_iteration_limit(int limit) { newton_iteration_limit = limit <= 0 ? 100 : limit; }

namespace {

template <class T>
using Vec = Kokkos::View<T*, MemorySpace>;
template <class T>
using Bank = Kokkos::View<T***, Kokkos::LayoutRight, MemorySpace>;

std::string vec_string(const std::vector<std::int64_t>& v) { return shape_string(v); }

// Every matrix of the bank set to the identity (a free function: CUDA does not allow device
// lambdas in constructors).
template <class T>
void fill_identity(const Bank<T>& X) {
  const std::int64_t n = static_cast<std::int64_t>(X.extent(1));
  Kokkos::parallel_for(
      "koptim::Shampoo::identity", Kokkos::RangePolicy<ExecutionSpace>(0, static_cast<std::int64_t>(X.extent(0)) * n),
      KOKKOS_LAMBDA(const std::int64_t k) { X(k / n, k % n, k % n) = T(1); });
}

// X(a) = V(a) for every matrix a whose eigendecomposition succeeded (info(a) = 0), in one kernel
// (the others keep their previous eigenvectors): a team per matrix over its contiguous n^2
// entries (no index arithmetic per entry). With vectors_in_rows the eigenvectors are the rows of
// V (cuSOLVER's layout in row-major storage), and X receives them as its columns: X(a) = V(a)^T.
template <class X, class V, class Info>
void take_eigenvectors(const ExecutionSpace& exec, const X& x, const V& v, const Info& info,
                       bool vectors_in_rows = false) {
  using TeamPolicy      = Kokkos::TeamPolicy<ExecutionSpace>;
  const std::int64_t n  = static_cast<std::int64_t>(x.extent(1));
  const std::int64_t nn = n * n;
  using T               = typename X::value_type;
  T* const dst          = x.data();
  const T* const src    = v.data();
  Kokkos::parallel_for(
      "koptim::Shampoo::take_eigenvectors", TeamPolicy(exec, static_cast<int>(x.extent(0)), Kokkos::AUTO, Kokkos::AUTO),
      KOKKOS_LAMBDA(const TeamPolicy::member_type& team) {
        const std::int64_t a = team.league_rank();
        if (info(a) != 0) return;
        if (vectors_in_rows)
          Kokkos::parallel_for(Kokkos::TeamVectorRange(team, nn),
                               [&](const std::int64_t k) { dst[a * nn + k] = src[a * nn + (k % n) * n + k / n]; });
        else
          Kokkos::parallel_for(Kokkos::TeamVectorRange(team, nn),
                               [&](const std::int64_t k) { dst[a * nn + k] = src[a * nn + k]; });
      });
}

// w <- g over a piece table's entries (a functor: the callers are private members, where nvcc
// allows no extended lambda).
template <class T>
struct CopyPiece {
  KOKKOS_INLINE_FUNCTION void operator()(const Impl::PieceArrays<T>& c, const std::int64_t i) const { c.w[i] = c.g[i]; }
};

// A block's buffers as plain pointers (null where the block has none), with where its elements
// live in the user's tensors. A table of these lets each element-wise phase of a step run as one
// kernel over every block (for_each_block_element), and the host batch's per-block loops read the
// same entries, so that both forms run the same bodies and give the same results.
template <class T>
struct BlockPointers {
  T *g = nullptr, *w = nullptr, *mhat = nullptr, *p = nullptr, *q = nullptr;
  T *filtered = nullptr, *graft = nullptr, *momentum = nullptr, *correction = nullptr;
  T* update                = nullptr;  // the block's piece of the update buffer (U)
  T* param                 = nullptr;  // the user's parameter (W) and gradient (G) of the block's tensor
  const T* grad            = nullptr;
  std::int64_t size        = 0;
  std::int64_t first_chunk = 0;  // chunks of block_chunk elements before this entry's, in its table
  std::int64_t index       = 0;  // the block's index in ShampooBlocks::blocks_ (piece index for placements)
  shampoo::BlockMap map;
};

template <class T>
using BlockTable = Kokkos::View<BlockPointers<T>*, MemorySpace>;

// Elements per chunk of a table kernel: a CPU thread's loop, a GPU team's range.
constexpr std::int64_t block_chunk = 4096;

// Element e's offset in the user's tensor when Mapped (one index computation for e's run), else 0.
// (A function: nvcc allows no extended lambda to capture a variable first inside `if constexpr`.)
template <bool Mapped, class T>
KOKKOS_INLINE_FUNCTION std::int64_t offset_of(const BlockPointers<T>& b, std::int64_t e) {
  if constexpr (Mapped) {
    const std::int64_t r = e % b.map.run;
    return b.map(e - r) + r;
  } else {
    return 0;
  }
}

// A body may read per-entry values once before its loop over the entry's elements (the block's
// grafting ratio: read per element, the compiler must assume the element stores alias it):
// bind(body, b) is body.bind(b) where the body has one, else the body itself.
template <class F, class T>
KOKKOS_INLINE_FUNCTION auto bind(const F& body, const BlockPointers<T>& b, int) -> decltype(body.bind(b)) {
  return body.bind(b);
}
template <class F, class T>
KOKKOS_INLINE_FUNCTION F bind(const F& body, const BlockPointers<T>&, long) {
  return body;
}

// A body(b, e, k) as a TableChunks body: element e of entry b, k its offset in the user's tensor
// when Mapped (runs of BlockMap::run contiguous elements take one index computation), else 0;
// the body bound to the entry first (bind).
template <bool Mapped, class F>
struct BlockBody {
  F f;
  template <class T>
  KOKKOS_INLINE_FUNCTION void run(const BlockPointers<T>& b, std::int64_t begin, std::int64_t end) const {
    const auto local = bind(f, b, 0);
    if constexpr (Mapped) {
      for (std::int64_t e = begin; e < end;) {
        const std::int64_t k = b.map(e);
        const std::int64_t n = b.map.run - e % b.map.run < end - e ? b.map.run - e % b.map.run : end - e;
        for (std::int64_t i = 0; i < n; ++i) local(b, e + i, k + i);
        e += n;
      }
    } else {
      for (std::int64_t e = begin; e < end; ++e) local(b, e, 0);
    }
  }
  template <class Member, class T>
  KOKKOS_INLINE_FUNCTION void team(const Member& team, const BlockPointers<T>& b, std::int64_t begin,
                                   std::int64_t end) const {
    const auto local = bind(f, b, 0);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, begin, end),
                         [&](const std::int64_t e) { local(b, e, offset_of<Mapped>(b, e)); });
  }
};

// body(b, e, k) for every element e of every entry b in [first, last) of the table, whose chunks
// are [chunk_begin, chunk_end), as one kernel (Impl::for_each_table_chunk: a chunk of block_chunk
// elements per CPU iteration or GPU team).
template <bool Mapped, class T, class F>
void for_each_block_element(const ExecutionSpace& exec, const char* label, const BlockTable<T>& table,
                            std::int64_t first, std::int64_t last, std::int64_t chunk_begin, std::int64_t chunk_end,
                            const F& body) {
  Impl::for_each_table_chunk(exec, label, table, first, last, chunk_begin, chunk_end, block_chunk,
                             BlockBody<Mapped, F>{body});
}

// The same body over one entry's elements on the calling thread (the host batch: inside its
// parallel loop over blocks, no kernel), on a local copy of the entry (its members stay in
// registers).
template <bool Mapped, class T, class F>
void block_elements_serial(const BlockPointers<T>& entry, const F& body) {
  const BlockPointers<T> b = entry;
  BlockBody<Mapped, F>{body}.run(b, 0, b.size);
}

// Per-block sums for team bodies: body(sums, b) for every entry b of the table, where sums(f) is
// the sum of f(e) over b's elements in double, in lanes, and sums.once(g) runs g once per block.
// As one kernel, a team per entry (TeamSums: Impl::team_lane_sum); on the calling thread
// (SerialSums: Impl::lane_sum_serial, which is a one-thread team's order, so the host batch's
// sums and the kernel's on a CPU backend are the same to the bit).
template <class Member>
struct TeamSums {
  const Member& team;
  std::int64_t n;
  template <class F>
  KOKKOS_INLINE_FUNCTION double operator()(const F& f) const {
    return Impl::team_lane_sum(team, n, f);
  }
  template <class G>
  KOKKOS_INLINE_FUNCTION void once(const G& g) const {
    Kokkos::single(Kokkos::PerTeam(team), g);
  }
};

struct SerialSums {
  std::int64_t n;
  template <class F>
  KOKKOS_INLINE_FUNCTION double operator()(const F& f) const {
    return Impl::lane_sum_serial(n, f).result();
  }
  template <class G>
  KOKKOS_INLINE_FUNCTION void once(const G& g) const {
    g();
  }
};

template <class T, class Body>
void for_each_block_team(const ExecutionSpace& exec, const char* label, const BlockTable<T>& table, const Body& body) {
  using TeamPolicy = Kokkos::TeamPolicy<ExecutionSpace>;
  if (table.extent(0) == 0) return;
  Kokkos::parallel_for(
      label, TeamPolicy(exec, static_cast<int>(table.extent(0)), Kokkos::AUTO),
      KOKKOS_LAMBDA(const TeamPolicy::member_type& team) {
        const BlockPointers<T>& b = table(team.league_rank());
        body(TeamSums<TeamPolicy::member_type>{team, b.size}, b);
      });
}

// The bodies of the element-wise phases (docs/shampoo.md): element e of block b (k: its offset
// in the user's tensors, for the gather and the write-back).

// Step 1: the gradient gathered into the block (L2 weight decay added), and W beside it.
template <class T>
struct GatherBody {
  bool l2;
  T wd;
  KOKKOS_INLINE_FUNCTION void operator()(const BlockPointers<T>& b, std::int64_t e, std::int64_t k) const {
    const T wi = b.param[k];
    b.w[e]     = wi;
    b.g[e]     = l2 ? b.grad[k] + wd * wi : b.grad[k];
  }
};

// The trace of each block with factors (traced(k)): sums(n + bi) = b2 sums(n + bi) + w sums(bi),
// sums holding |G|^2 of the n blocks, then their traces (ShampooBlocks::sums_).
struct TraceBody {
  Kokkos::View<double*, MemorySpace> sums;
  Kokkos::View<int*, MemorySpace> traced;
  std::int64_t n;
  double b2, w;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t k) const {
    const std::int64_t bi = traced(k);
    sums(n + bi)          = b2 * sums(n + bi) + w * sums(bi);
  }
};

// |G|^2 of each block into sumsq. A non-finite value makes the sum NaN (quiet: no FE_INVALID),
// which prepare() tells apart from a finite sum of squares that overflows (Inf).
template <class T>
struct SquaredNormBody {
  double* sumsq;
  double nan;
  template <class Sums>
  KOKKOS_INLINE_FUNCTION void operator()(const Sums& sums, const BlockPointers<T>& b) const {
    const T* g         = b.g;
    const double value = nan;
    const double s     = sums([&](const std::int64_t e) {
      const T gi = g[e];
      return Impl::is_finite(gi) ? static_cast<double>(gi) * static_cast<double>(gi) : value;
    });
    sums.once([&]() { sumsq[b.index] = s; });
  }
};

// The filter of step 4: F <- b1 F + (1 - b1) x; returns M_hat (from the old F with b3 != b1),
// bias-corrected. In the parameters' coordinates (x = G) or in the eigenbasis (x = R).
template <class T>
struct Filter {
  bool separate;
  T b1, one_minus_b1, b3, one_minus_b3, inv_corr;
  KOKKOS_INLINE_FUNCTION T operator()(T& f, const T x) const {
    const T old  = f;
    const T next = b1 * old + one_minus_b1 * x;
    f            = next;
    return (separate ? b3 * old + one_minus_b3 * x : next) * inv_corr;
  }
};

// The eigenvalue-corrected direction in the eigenbasis: m over sqrt(E) + eps. With epsilon = 0 a
// coordinate whose second moment is still 0 gets no step (not 0/0).
template <class T>
KOKKOS_INLINE_FUNCTION T corrected_direction(const T m, const T e, const T inv_bc, const T eps) {
  const T den = Impl::sqrt(e * inv_bc) + eps;
  return den > T(0) ? m / den : T(0);
}

// The grafting accumulator, the filtered gradient and its bias correction (mhat = M_hat of step 4).
template <class T>
struct AccumulateBody {
  bool graft, adagrad, filter;
  T gb, one_minus_gb;
  Filter<T> filtered;
  KOKKOS_INLINE_FUNCTION void operator()(const BlockPointers<T>& b, std::int64_t e, std::int64_t) const {
    const T ge = b.g[e];
    if (graft)
      b.graft[e] =
          adagrad ? Impl::accumulate_square(b.graft[e], ge) : Impl::ema_square(b.graft[e], ge, gb, one_minus_gb);
    b.mhat[e] = filter ? filtered(b.filtered[e], ge) : ge;
  }
};

// Step 3, eigenvalue correction: E <- b2 E + w R^2, R (in p) = G rotated into the eigenbasis.
template <class T>
struct CorrectionBody {
  T b2, factor_w;
  KOKKOS_INLINE_FUNCTION void operator()(const BlockPointers<T>& b, std::int64_t e, std::int64_t) const {
    b.correction[e] = b2 * b.correction[e] + factor_w * b.p[e] * b.p[e];
  }
};

// Eigenvalue-corrected, the filtered gradient F kept in the eigenbasis (Shampoo::filter_in_eigenbasis):
// with R (in p) the rotated G, the filter in rotated coordinates (the rotation is linear) and the
// direction from the rotated M_hat, into g.
template <class T>
struct RotatedDirectionBody {
  Filter<T> filtered;
  T inv_bc, eps;
  KOKKOS_INLINE_FUNCTION void operator()(const BlockPointers<T>& b, std::int64_t e, std::int64_t) const {
    b.g[e] = corrected_direction(filtered(b.filtered[e], b.p[e]), b.correction[e], inv_bc, eps);
  }
};

// The grafting direction P_g into q.
template <class T>
struct GraftDirectionBody {
  bool diagonal;
  T inv_bc, eps;
  KOKKOS_INLINE_FUNCTION void operator()(const BlockPointers<T>& b, std::int64_t e, std::int64_t) const {
    b.q[e] = diagonal ? Impl::diagonal_precondition(b.mhat[e], b.graft[e] * inv_bc, eps) : b.mhat[e];
  }
};

// Eigenvalue-corrected direction in the eigenbasis from the rotated M_hat (in g).
template <class T>
struct CorrectedDivideBody {
  T inv_bc, eps;
  KOKKOS_INLINE_FUNCTION void operator()(const BlockPointers<T>& b, std::int64_t e, std::int64_t) const {
    b.g[e] = corrected_direction(b.g[e], b.correction[e], inv_bc, eps);
  }
};

// Per-block norm rescaling factor |P_g| / (|P_s| + 1e-16), squared norms summed in double.
template <class T>
struct GraftRatioBody {
  T* ratio;
  template <class Sums>
  KOKKOS_INLINE_FUNCTION void operator()(const Sums& sums, const BlockPointers<T>& b) const {
    const T* q      = b.q;
    const T* p      = b.p;
    const double ng = sums([&](const std::int64_t e) { return static_cast<double>(q[e]) * static_cast<double>(q[e]); });
    const double ns = sums([&](const std::int64_t e) { return static_cast<double>(p[e]) * static_cast<double>(p[e]); });
    sums.once([&]() { ratio[b.index] = static_cast<T>(Impl::sqrt(ng) / (Impl::sqrt(ns) + 1e-16)); });
  }
};

// Steps 4 and 5: the direction (rescaled when grafting), weight decay, momentum, U = lr P.
template <class T>
struct UpdateBody {
  bool shampoo, rescale, momentum, nesterov;
  T alpha, lr, mu, one_minus_d;
  const T* ratio;
  T scale = T(1);  // the block's ratio, once bound to it
  KOKKOS_INLINE_FUNCTION UpdateBody bind(const BlockPointers<T>& b) const {
    UpdateBody bound = *this;
    if (rescale) bound.scale = ratio[b.index];
    return bound;
  }
  KOKKOS_INLINE_FUNCTION void operator()(const BlockPointers<T>& b, std::int64_t e, std::int64_t) const {
    T d = shampoo ? b.p[e] : b.q[e];
    if (rescale) d = d * scale;
    T P = d + alpha * b.w[e];
    if (momentum) {
      const T Bn    = mu * b.momentum[e] + one_minus_d * P;
      b.momentum[e] = Bn;
      P             = nesterov ? one_minus_d * P + mu * Bn : Bn;
    }
    b.update[e] = lr * P;
  }
};

// W -= U for every block (of every rank), from the gathered updates.
template <class T>
struct WriteBackBody {
  KOKKOS_INLINE_FUNCTION void operator()(const BlockPointers<T>& b, std::int64_t e, std::int64_t k) const {
    b.param[k] -= b.update[e];
  }
};

}  // namespace

// Where factor j of a block lives: a slot of the bank of its size.
struct FactorRef {
  std::int64_t n    = 0;
  std::int64_t slot = -1;  // -1: unpreconditioned dimension (exponent 0), no factor
  double exponent   = 0.0;
};

template <class T>
struct BlockState {
  int param         = 0;
  std::size_t block = 0;  // index in the parameter's BlockLayout
  shampoo::BlockMap map;
  std::vector<std::int64_t> shape;  // block extents
  std::int64_t size = 0;
  std::vector<FactorRef> factors;
  std::vector<int> preconditioned;  // the dimensions j with a factor (slot >= 0), ascending
  Vec<T> filtered;                  // M (first moment), when b1 > 0
  Vec<T> graft;                     // grafting accumulator, AdaGrad/RMSProp/Adam
  Vec<T> momentum;                  // classic momentum, when momentum > 0
  Vec<T> correction;                // eigenvalue correction E, eigenvalue-corrected variant
  // Workspace (not state).
  Vec<T> g, w, mhat, p, q;
  std::size_t piece = 0;  // of the update all-gather (the block's place in it)
  int failures      = 0;  // consecutive amortized computations of this block that failed

  std::string where(const ParameterSet& ps, const std::vector<shampoo::BlockLayout>& layouts) const {
    const auto& b = layouts[param].blocks[block];
    return "parameter '" + ps[param].name + "', block " + std::to_string(block) + " (offsets " + vec_string(b.offsets) +
           ", sizes " + vec_string(b.sizes) + " of merged shape " + vec_string(layouts[param].merged_shape) + ")";
  }
};

template <class T>
class ShampooBlocks {
 public:
  // Builds the state of the blocks of scalar type T that my_rank owns; every block (owned or
  // not) gets a place in the all-gathered update buffer.
  ShampooBlocks(const Shampoo& owner, const ParameterSet& ps, const std::vector<shampoo::BlockLayout>& layouts,
                const ShampooOptions& o, const std::vector<std::vector<int>>& owners, int my_rank, int num_ranks);

  bool empty() const { return blocks_.empty(); }
  std::size_t num_blocks() const { return blocks_.size(); }
  std::size_t state_bytes() const;
  std::int64_t failures_kept() const { return failures_kept_; }
  std::int64_t qr_iterations() const { return qr_iterations_; }
  std::int64_t qr_refreshes() const { return qr_refreshes_; }

  // Gathers every block's gradient and, with check, that its factors stay finite; returns the
  // first problem ("" if none) and the parameter it concerns. Changes no state.
  std::string prepare(const std::vector<double>& wds, bool check, std::string& parameter);
  // Of the last amortized computation: roots that failed (previous root kept), and coupled
  // Newton roots that came from the eigendecomposition.
  std::int64_t step_failures() const { return step_failures_; }
  std::int64_t step_fallbacks() const { return step_fallbacks_; }
  std::int64_t step_unconverged() const { return step_unconverged_; }
  void accumulate(std::int64_t t);
  void amortized(std::int64_t t);
  // amortized()'s roots or eigenbases.
  void compute_bases(std::int64_t t);
  void correct();
  // The lr-scaled updates U = lr P of the owned blocks, into this rank's segment.
  void apply(std::int64_t t, const std::vector<double>& lrs, const std::vector<double>& base_lrs,
             const std::vector<double>& wds);
  // Shares the segments (all-gather over the group; a copy without one) in the communication
  // precision, then W -= U for every block.
  void exchange(const comm::Communicator* group);
  void write_back();
  std::size_t all_gather_bytes() const { return updates_.exchange_bytes(); }
  // The instance of the step in progress: every phase above runs its kernels, copies and fences
  // on it.
  void set_instance(const ExecutionSpace& exec) { exec_ = exec; }

  void export_tensors(OptimizerState& s) const;
  // Throws StateError for a missing or mis-shaped entry; adds the keys of the entries this
  // precision's blocks read to held.
  void check_entries(const OptimizerState& s, Optimizer::StateKeys& held) const;
  void import_tensors(const OptimizerState& s);

 private:
  struct BankSet {
    Bank<T> L, X;  // factors, and their roots (or eigenvectors in the eigenvalue-corrected variant)
    std::vector<std::pair<std::size_t, int>> owner;  // (block, dim) of each slot
    // The amortized computation's buffers, allocated by its first run and reused after.
    std::shared_ptr<linalg::RootWorkspace<MemorySpace>> workspace;
  };
  // out = in x_1 op(X_1) ... x_k op(X_k) over the preconditioned dimensions; spare is workspace
  // distinct from in and out.
  // serial: the host-serial form, on the calling thread (inside host_batch's parallel loop).
  void precondition(BlockState<T>& b, const Vec<T>& in, const Vec<T>& out, const Vec<T>& spare, bool inverse_rotation,
                    bool serial);
  // The same for every block at once, in the device form: the plan's batched products (blocks
  // with no preconditioned dimension, and every block before the first root, copied).
  using Slot = Vec<T> BlockState<T>::*;
  struct Preconditioning {
    Slot in = nullptr, out = nullptr, spare = nullptr;
    bool inverse_rotation = false;
    linalg::ProductPlan<T> plan;
    // out <- in for every block (before the first roots: X = I) and for the blocks without
    // preconditioned dimensions (afterwards): a table each and its chunks, one kernel over them.
    std::pair<Impl::PieceTable<T>, std::int64_t> copy_all, copy_unpreconditioned;
  };
  void precondition_all(const Preconditioning& pc);
  Preconditioning preconditioning(Slot in, Slot out, Slot spare, bool inverse_rotation) const;
  void build_plans();
  // Each phase of a step runs in one of two forms. Host batch (host memory, every block within
  // BLAS's int, Shampoo::batch_blocks_on_host()): host_batch(f) calls f(bi) for every owned block,
  // the blocks concurrently on the host threads, each with single-threaded BLAS calls and its
  // element-wise bodies as plain loops (no kernel and no fence inside), between one fence before
  // and one after (Impl::host_batch: a single block runs on the calling thread). Otherwise (device memory): each
  // element-wise phase is one kernel over every block (the table), the products are Kokkos Kernels calls block after
  // block.
  bool host_batched() const { return host_batch_ && owner_.batch_blocks_on_host(); }
  template <class F>
  void host_batch(const F& f);
  const BlockPointers<T>& entry(std::size_t bi) const { return table_host_(entry_of_block_[bi]); }
  // Factor updates L_j <- b2 L_j + w G_(j) G_(j)^T of block bi.
  void factor_grams(std::size_t bi, bool serial);
  UpdateBody<T> update_body(int group, bool shampoo, const std::vector<double>& lrs,
                            const std::vector<double>& base_lrs, const std::vector<double>& wds) const;
  // body over every owned block's elements: one kernel over the table, or, with the group's
  // entries only (group >= 0), one kernel per parameter group.
  template <bool Mapped, class F>
  void each_block_element(const char* label, const F& body) const {
    for_each_block_element<Mapped>(exec_, label, table_, 0, static_cast<std::int64_t>(table_.extent(0)), 0, chunks_,
                                   body);
  }
  void build_tables();
  linalg::BatchedGemmBackend gemm_backend() const {
    return owner_.portable_products() ? linalg::BatchedGemmBackend::portable : linalg::BatchedGemmBackend::automatic;
  }
  std::string key(const BlockState<T>& b) const { return ps_[b.param].name + "/block" + std::to_string(b.block); }
  // Step t's filter (its bias correction 1 - b3 b1^(t-1) with use_bias_correction and b1 > 0).
  Filter<T> filter(std::int64_t t) const {
    const double corr =
        o_.use_bias_correction && b1_ > 0.0 ? 1.0 - b3_ * std::pow(b1_, static_cast<double>(t - 1)) : 1.0;
    return {b3_ != b1_,          static_cast<T>(b1_),       static_cast<T>(1.0 - b1_),
            static_cast<T>(b3_), static_cast<T>(1.0 - b3_), static_cast<T>(1.0 / corr)};
  }

  const Shampoo& owner_;
  const ParameterSet& ps_;
  const std::vector<shampoo::BlockLayout>& layouts_;
  ShampooOptions o_;
  double b1_, b2_, b3_, graft_beta_;
  double factor_w_;  // the factors' weight rule: 1 - b2 when b2 < 1, else 1 (also for E)
  // The largest |G|^2 and trace a block may reach: the largest T less the rounding of the sums in
  // T that form its factors (each entry of a mode's Gram matrix sums size / n_j squares, at most
  // size / min_j n_j; such a sum can exceed the exact one by terms + 2 units of roundoff,
  // relative), and at least half the range, so that no GEMM rounds up to Inf.
  static double squares_limit(const BlockState<T>& b) {
    std::int64_t smallest = 1;
    if (!b.shape.empty()) smallest = std::max<std::int64_t>(1, *std::min_element(b.shape.begin(), b.shape.end()));
    const double terms    = static_cast<double>(b.size) / static_cast<double>(smallest);
    const double roundoff = std::numeric_limits<T>::epsilon() / 2;
    return static_cast<double>(std::numeric_limits<T>::max()) * std::max(0.5, 1.0 - (terms + 2.0) * roundoff);
  }
  std::int64_t start_;
  std::vector<BlockState<T>> blocks_;
  std::map<std::int64_t, BankSet> banks_;
  // Every block of type T (piece k of updates_): its parameter and where it goes in W.
  struct Placement {
    int param;
    shampoo::BlockMap map;
  };
  std::vector<Placement> placements_;
  // The lr-scaled updates of every block of type T: this rank writes its blocks' updates into
  // their pieces, one all-gather shares them.
  Impl::Distributor<T> updates_;
  // Per owned block, on the device: sums_(bi) = |G|^2 of this step, written by a reduction the
  // host does not wait for, and sums_(n + bi) = trace(L_j) (n blocks), the same for every j of
  // block bi: b2 trace + w |G|^2 each step, updated by accumulate(), 0 for a block without
  // factors. The trace bounds every factor entry (|L_ik| <= max_i L_ii <= trace for a PSD
  // matrix), so the factors cannot overflow while it is finite in T: a checked step copies both
  // halves to the host in one copy (its one wait) and rejects a gradient that would break that
  // before changing anything; an unchecked step never copies them. traced_: the blocks with
  // factors. Then the grafting norms |P_g|^2, |P_s|^2 as lanes and the rescaling ratio they give,
  // which stay on the device.
  Kokkos::View<double*, MemorySpace> sums_;
  Kokkos::View<double*, MemorySpace>::HostMirror sums_host_;
  Kokkos::View<int*, MemorySpace> traced_;
  // The trace of block bi after this step's update, from the host copy of sums_.
  double next_trace(std::size_t bi) const { return b2_ * sums_host_(blocks_.size() + bi) + factor_w_ * sums_host_(bi); }
  // sums_ into sums_host_ outside a step (export, import), after a fence of every instance.
  void traces_to_host() const;
  Kokkos::View<T*, MemorySpace> graft_ratio_;
  // The owned blocks as a table ordered by parameter group (entry_of_block_: a block's entry),
  // chunks_ chunks of block_chunk elements in all; groups_: each group's entries and chunks.
  BlockTable<T> table_;
  typename BlockTable<T>::HostMirror table_host_;
  std::vector<std::size_t> entry_of_block_;
  std::int64_t chunks_ = 0;
  struct GroupRange {
    int group;
    std::int64_t first, last, chunk_begin, chunk_end;
  };
  std::vector<GroupRange> groups_;
  // Every block of type T (placements_), for the write-back.
  BlockTable<T> placement_table_;
  std::int64_t placement_chunks_ = 0;
  // The device form's products over every block (build_plans; empty when a block is beyond BLAS's
  // int, which takes them block after block): the factor updates, and the products of the
  // preconditioning for correct() (g -> p) and apply() (eigenvalue-corrected: mhat -> g, then
  // g -> p rotated back; otherwise mhat -> p).
  bool batched_products_ = false;
  linalg::ProductPlan<T> grams_;
  Preconditioning rotate_gradient_, rotate_mhat_, rotate_back_, apply_roots_;
  // The filtered gradient out of the eigenbasis (into mhat) before a refresh, and into the new one
  // after (filter_in_eigenbasis()).
  Preconditioning filter_out_, filter_in_;
  // Eigenvalue-corrected, betas[0] > 0, no grafting: the filtered gradient may be kept in the
  // eigenbasis; rotated_filter(): it is.
  bool filter_rotatable_ = false;
  bool rotated_filter() const { return filter_rotatable_ && owner_.filter_in_eigenbasis(); }
  // The filtered gradient's rotations between bases, every owned block (amortized()).
  void rotate_filter(bool out);
  // Its key in the state: in the parameters' coordinates, or in the eigenbasis.
  std::string filter_key(const BlockState<T>& b) const {
    return key(b) + (rotated_filter() ? "/filtered_grad_eigenbasis" : "/filtered_grad");
  }
  // The key a state's filtered gradient is read from: this form's, else (where both forms are
  // possible) the other form's when the state holds that one alone.
  std::string filter_source(const OptimizerState& s, const BlockState<T>& b) const {
    const std::string mine = filter_key(b);
    if (!filter_rotatable_ || s.tensors.count(mine)) return mine;
    const std::string other = key(b) + (rotated_filter() ? "/filtered_grad" : "/filtered_grad_eigenbasis");
    return s.tensors.count(other) ? other : mine;
  }
  bool roots_ready_           = false;  // a root (or eigenbasis) has been computed: before, X = I exactly
  bool host_batch_            = false;  // host memory and every block within BLAS's int: host_batch runs blocks at once
  std::int64_t failures_kept_ = 0;
  std::int64_t qr_iterations_ = 0, qr_refreshes_ = 0;  // eigenbasis = qr (not checkpointed: diagnostics)
  ExecutionSpace exec_;                                // set_instance()
  std::int64_t step_failures_ = 0, step_fallbacks_ = 0, step_unconverged_ = 0;
};

template <class T>
ShampooBlocks<T>::ShampooBlocks(const Shampoo& owner, const ParameterSet& ps,
                                const std::vector<shampoo::BlockLayout>& layouts, const ShampooOptions& o,
                                const std::vector<std::vector<int>>& owners, int my_rank, int num_ranks)
    : owner_(owner), ps_(ps), layouts_(layouts), o_(o) {
  b1_               = o.betas[0];
  b2_               = o.betas[1];
  factor_w_         = b2_ < 1.0 ? 1.0 - b2_ : 1.0;
  b3_               = o.beta3.value_or(b1_);
  graft_beta_       = o.grafting_beta2.value_or(o.grafting == Grafting::RMSProp ? 0.99 : 0.999);
  start_            = o.start_preconditioning_step.value_or(o.precondition_frequency);
  filter_rotatable_ = o.eigenvalue_corrected && b1_ > 0.0 && o.grafting == Grafting::none;
  std::map<std::int64_t, std::int64_t> counts;
  std::vector<std::int64_t> sizes;
  std::vector<int> piece_owners;
  for (std::size_t i = 0; i < ps.size(); ++i) {
    if (ps[i].param.dtype != scalar_type_of<T>()) continue;
    const auto& layout = layouts[i];
    for (const auto& blk : layout.blocks) {
      const int r = owners[i][blk.index];
      placements_.push_back({static_cast<int>(i), shampoo::make_block_map(layout, blk, ps[i].param)});
      sizes.push_back(blk.num_elements());
      piece_owners.push_back(r);
      if (r != my_rank) continue;
      BlockState<T> b;
      b.piece                 = placements_.size() - 1;
      b.param                 = static_cast<int>(i);
      b.block                 = blk.index;
      b.map                   = shampoo::make_block_map(layout, blk, ps[i].param);
      b.shape                 = blk.sizes;
      b.size                  = blk.num_elements();
      const std::string label = "koptim::Shampoo::" + ps[i].name + "/block" + std::to_string(blk.index);
      for (int j = 0; j < blk.order(); ++j) {
        FactorRef f;
        f.n        = blk.sizes[j];
        f.exponent = owner.inverse_exponent(blk.order(), j);
        if (o.eigenvalue_corrected || f.exponent != 0.0) f.slot = counts[f.n]++;
        if (f.slot >= 0) b.preconditioned.push_back(j);
        b.factors.push_back(f);
      }
      if (b1_ > 0.0) b.filtered = Vec<T>(label + "/filtered_grad", b.size);
      if (o.grafting == Grafting::AdaGrad || o.grafting == Grafting::RMSProp || o.grafting == Grafting::Adam)
        b.graft = Vec<T>(label + "/graft", b.size);
      if (o.momentum > 0.0) b.momentum = Vec<T>(label + "/momentum", b.size);
      if (o.eigenvalue_corrected) b.correction = Vec<T>(label + "/eigenvalue_correction", b.size);
      for (auto* v : {&b.g, &b.w, &b.mhat, &b.p, &b.q})
        *v = Vec<T>(Kokkos::view_alloc(Kokkos::WithoutInitializing, label + "/work"), b.size);
      blocks_.push_back(std::move(b));
    }
  }
  updates_ = Impl::Distributor<T>(
      "koptim::Shampoo::updates", sizes, piece_owners, my_rank, num_ranks,
      o.communication_dtype == CommunicationDType::bfloat16 ? Impl::Wire::bfloat16 : Impl::Wire::native);
  for (const auto& c : counts) {
    BankSet s;
    s.L = Bank<T>("koptim::Shampoo::factors_" + std::to_string(c.first), c.second, c.first, c.first);
    s.X = Bank<T>("koptim::Shampoo::roots_" + std::to_string(c.first), c.second, c.first, c.first);
    s.owner.resize(c.second);
    s.workspace = std::make_shared<linalg::RootWorkspace<MemorySpace>>();
    fill_identity(s.X);
    banks_[c.first] = s;
  }
  for (std::size_t bi = 0; bi < blocks_.size(); ++bi)
    for (int j = 0; j < static_cast<int>(blocks_[bi].factors.size()); ++j) {
      const auto& f = blocks_[bi].factors[j];
      if (f.slot >= 0) banks_[f.n].owner[f.slot] = {bi, j};
    }
  host_batch_ = Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemorySpace>::accessible;
  for (const auto& b : blocks_) host_batch_ = host_batch_ && linalg::fits_host_blas(b.shape);
  sums_      = Kokkos::View<double*, MemorySpace>("koptim::Shampoo::block_sums", 2 * blocks_.size());
  sums_host_ = Kokkos::create_mirror_view(sums_);
  std::vector<int> traced;
  for (std::size_t bi = 0; bi < blocks_.size(); ++bi)
    if (!blocks_[bi].preconditioned.empty()) traced.push_back(static_cast<int>(bi));
  traced_ = Kokkos::View<int*, MemorySpace>("koptim::Shampoo::traced_blocks", traced.size());
  Kokkos::deep_copy(traced_, Kokkos::View<const int*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                                 traced.data(), traced.size()));
  graft_ratio_ = Kokkos::View<T*, MemorySpace>("koptim::Shampoo::graft_ratio", blocks_.size());
  build_tables();
  build_plans();
}

template <class T>
void ShampooBlocks<T>::build_plans() {
  batched_products_ = std::all_of(blocks_.begin(), blocks_.end(),
                                  [](const BlockState<T>& b) { return linalg::ProductPlan<T>::fits(b.shape); });
  // Without batched products the preconditionings keep their slots only (precondition_all then
  // runs block after block).
  if (batched_products_) {
    for (const auto& b : blocks_)
      for (int j = 0; j < static_cast<int>(b.factors.size()); ++j) {
        const auto& f = b.factors[j];
        if (f.slot >= 0) grams_.add_gram(0, b.g.data(), b.shape, j, banks_.at(f.n).L.data() + f.slot * f.n * f.n);
      }
    grams_.finish();
  }
  using B = BlockState<T>;
  if (o_.eigenvalue_corrected) {
    rotate_gradient_ = preconditioning(&B::g, &B::p, &B::q, false);
    rotate_mhat_     = preconditioning(&B::mhat, &B::g, &B::p, false);
    rotate_back_     = preconditioning(&B::g, &B::p, &B::mhat, true);
    if (filter_rotatable_) {
      filter_out_ = preconditioning(&B::filtered, &B::mhat, &B::p, true);
      filter_in_  = preconditioning(&B::mhat, &B::filtered, &B::p, false);
    }
  } else {
    apply_roots_ = preconditioning(&B::mhat, &B::p, &B::g, false);
  }
}

// Product i of a block's chain at stage i: blocks with fewer preconditioned dimensions end earlier.
template <class T>
typename ShampooBlocks<T>::Preconditioning ShampooBlocks<T>::preconditioning(Slot in, Slot out, Slot spare,
                                                                             bool inverse_rotation) const {
  Preconditioning pc{in, out, spare, inverse_rotation, {}, {}, {}};
  if (!batched_products_) return pc;
  const char trans = o_.eigenvalue_corrected ? (inverse_rotation ? 'T' : 'N') : 'T';
  std::vector<Impl::PieceArrays<T>> all, unpreconditioned;
  for (const auto& b : blocks_) {
    Impl::PieceArrays<T> copy;
    copy.w    = (b.*out).data();
    copy.g    = (b.*in).data();
    copy.size = b.size;
    all.push_back(copy);
    if (b.preconditioned.empty()) unpreconditioned.push_back(copy);
  }
  pc.copy_all              = Impl::make_piece_table("koptim::Shampoo::copy_all", all);
  pc.copy_unpreconditioned = Impl::make_piece_table("koptim::Shampoo::copy_unpreconditioned", unpreconditioned);
  for (const auto& b : blocks_) {
    const std::vector<int>& dims = b.preconditioned;
    const T* src                 = (b.*in).data();
    for (std::size_t i = 0; i < dims.size(); ++i) {
      T* dst        = ((dims.size() - 1 - i) % 2 == 0) ? (b.*out).data() : (b.*spare).data();
      const auto& f = b.factors[dims[i]];
      pc.plan.add_mode_product(static_cast<int>(i), src, b.shape, dims[i], banks_.at(f.n).X.data() + f.slot * f.n * f.n,
                               trans, dst);
      src = dst;
    }
  }
  pc.plan.finish();
  return pc;
}

template <class T>
void ShampooBlocks<T>::precondition_all(const Preconditioning& pc) {
  if (!batched_products_) {
    for (auto& b : blocks_) precondition(b, b.*pc.in, b.*pc.out, b.*pc.spare, pc.inverse_rotation, false);
    return;
  }
  const auto& copies = roots_ready_ ? pc.copy_unpreconditioned : pc.copy_all;
  Impl::for_each_piece_element(exec_, "koptim::Shampoo::copy_through", copies.first, copies.second, CopyPiece<T>{});
  if (roots_ready_) pc.plan.run(exec_, T(1), T(0), gemm_backend());
}

template <class T>
void ShampooBlocks<T>::build_tables() {
  auto chunks_of = [](std::int64_t n) { return (n + block_chunk - 1) / block_chunk; };
  std::vector<std::size_t> order(blocks_.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return ps_[blocks_[a].param].group < ps_[blocks_[b].param].group;
  });
  table_      = BlockTable<T>("koptim::Shampoo::block_table", order.size());
  table_host_ = Kokkos::create_mirror_view(table_);
  entry_of_block_.resize(blocks_.size());
  for (std::size_t i = 0; i < order.size(); ++i) {
    const auto& b        = blocks_[order[i]];
    const Parameter& prm = ps_[b.param];
    BlockPointers<T> e;
    e.g = b.g.data(), e.w = b.w.data(), e.mhat = b.mhat.data(), e.p = b.p.data(), e.q = b.q.data();
    e.filtered = b.filtered.data(), e.graft = b.graft.data(), e.momentum = b.momentum.data();
    e.correction  = b.correction.data();
    e.update      = updates_.piece(b.piece).data();
    e.param       = static_cast<T*>(prm.param.data);
    e.grad        = static_cast<const T*>(prm.grad.data);
    e.size        = b.size;
    e.first_chunk = chunks_;
    e.index       = static_cast<std::int64_t>(order[i]);
    e.map         = b.map;
    if (groups_.empty() || groups_.back().group != prm.group)
      groups_.push_back({prm.group, static_cast<std::int64_t>(i), static_cast<std::int64_t>(i), chunks_, chunks_});
    chunks_ += chunks_of(b.size);
    groups_.back().last       = static_cast<std::int64_t>(i) + 1;
    groups_.back().chunk_end  = chunks_;
    table_host_(i)            = e;
    entry_of_block_[order[i]] = i;
  }
  Kokkos::deep_copy(table_, table_host_);
  placement_table_ = BlockTable<T>("koptim::Shampoo::placement_table", placements_.size());
  auto placements  = Kokkos::create_mirror_view(placement_table_);
  for (std::size_t k = 0; k < placements_.size(); ++k) {
    BlockPointers<T> e;
    e.update      = updates_.piece(k).data();
    e.param       = static_cast<T*>(ps_[placements_[k].param].param.data);
    e.size        = updates_.size(k);
    e.first_chunk = placement_chunks_;
    e.index       = static_cast<std::int64_t>(k);
    e.map         = placements_[k].map;
    placements(k) = e;
    placement_chunks_ += chunks_of(e.size);
  }
  Kokkos::deep_copy(placement_table_, placements);
}

template <class T>
std::size_t ShampooBlocks<T>::state_bytes() const {
  std::size_t n = 0;
  for (const auto& kv : banks_) n += (kv.second.L.size() + kv.second.X.size()) * sizeof(T);
  for (const auto& b : blocks_)
    n += (b.filtered.size() + b.graft.size() + b.momentum.size() + b.correction.size()) * sizeof(T);
  return n;
}

// docs/shampoo.md step 1 for every block: the gradient gathered (L2 weight decay added), the
// factor updates, the grafting accumulators and the filtered gradient.
template <class T>
std::string ShampooBlocks<T>::prepare(const std::vector<double>& wds, bool check, std::string& parameter) {
  auto gather = [&](int group) {
    return GatherBody<T>{o_.weight_decay_type == WeightDecayType::L2 && wds[group] != 0.0, static_cast<T>(wds[group])};
  };
  const SquaredNormBody<T> norm{sums_.data(), std::numeric_limits<double>::quiet_NaN()};
  if (host_batched()) {
    host_batch([&](std::size_t bi) {
      const auto& e = entry(bi);
      block_elements_serial<true>(e, gather(ps_[blocks_[bi].param].group));
      norm(SerialSums{e.size}, e);
    });
  } else {
    for (const auto& r : groups_)
      for_each_block_element<true>(exec_, "koptim::Shampoo::gather", table_, r.first, r.last, r.chunk_begin,
                                   r.chunk_end, gather(r.group));
    for_each_block_team(exec_, "koptim::Shampoo::gradient_norm", table_, norm);
  }
  // nonfinite_gradient = unchecked: the gradient is used as it is, and |G|^2 and the traces stay
  // on the device (accumulate() updates the traces there).
  if (!check || blocks_.empty()) return "";
  // The one wait of a checked gather: every block's |G|^2 and trace to the host, for the rules below.
  Kokkos::deep_copy(exec_, sums_host_, sums_);
  Impl::fence(exec_, "koptim::Shampoo::gather: every block's |G|^2 and trace to the host");
  for (std::size_t bi = 0; bi < blocks_.size(); ++bi) {
    const auto& b        = blocks_[bi];
    const Parameter& prm = ps_[b.param];
    const double sumsq   = sums_host_(bi);
    const double trace   = next_trace(bi);
    if (std::isnan(sumsq)) {
      // The gradient passed the NaN/Inf check, so L2 weight decay (G + wd W) made it non-finite.
      parameter = prm.name;
      return "koptim::Shampoo::step: " + b.where(ps_, layouts_) +
             ": the gradient holds a NaN or Inf value after L2 weight decay (G + weight_decay W, weight_decay = " +
             std::to_string(wds[prm.group]) + "); nothing was updated";
    }
    // The squares themselves: the factors' products G G^T are summed before their weight 1 - b2
    // scales them, and the grafting accumulators and E square each element before weighting it.
    // Every such product and partial sum is at most |G|^2 (Cauchy-Schwarz), so |G|^2 within T's
    // range, less the rounding of the Gram sums (squares_limit), keeps them finite. A block
    // without factors, E or squaring grafting forms no squares.
    const double largest = squares_limit(b);
    const bool squares   = !b.preconditioned.empty() || b.correction.size() > 0 || b.graft.size() > 0;
    const char* type     = std::is_same<T, float>::value ? "float" : "double";
    if (squares && !(sumsq <= largest)) {
      std::ostringstream msg;
      msg << "koptim::Shampoo::step: " << b.where(ps_, layouts_) << ": the gradient's squared norm ("
          << Impl::real_string(sumsq) << ") is beyond " << Impl::real_string(largest) << " (the largest " << type
          << " less the rounding of the factors' sums): its squares could overflow to Inf in the factor matrices or "
             "second moments (a NaN or Inf result); nothing was updated";
      parameter = prm.name;
      return msg.str();
    }
    if (!b.preconditioned.empty() && !(trace <= largest)) {
      std::ostringstream msg;
      msg << "koptim::Shampoo::step: " << b.where(ps_, layouts_) << ": the gradient's squared norm ("
          << Impl::real_string(sumsq) << ") would take the trace of its factor matrices to " << Impl::real_string(trace)
          << ", beyond " << Impl::real_string(largest) << " (the largest " << type
          << " less the rounding of the factors' sums): the factors could overflow to Inf (a NaN or Inf result); "
             "nothing was updated";
      parameter = prm.name;
      return msg.str();
    }
  }
  return "";
}

template <class T>
void ShampooBlocks<T>::factor_grams(std::size_t bi, bool serial) {
  const auto& b    = blocks_[bi];
  const T factor_w = static_cast<T>(factor_w_), b2 = static_cast<T>(b2_);
  for (int j = 0; j < static_cast<int>(b.factors.size()); ++j) {
    const auto& f = b.factors[j];
    if (f.slot < 0) continue;
    T* L = banks_.at(f.n).L.data() + f.slot * f.n * f.n;
    if (serial)
      linalg::host_gram_of_unfolding<T>(b.g.data(), b.shape, j, factor_w, b2, L);
    else
      linalg::gram_of_unfolding<T>(exec_, b.g.data(), b.shape, j, factor_w, b2, L);
  }
}

template <class T>
void ShampooBlocks<T>::accumulate(std::int64_t t) {
  // The traces of the blocks with factors, on the device. A block without factors keeps no trace
  // (0): nothing bounds its gradient by it, and a trace accumulated there could exceed what a
  // state import accepts.
  const TraceBody traces{sums_, traced_, static_cast<std::int64_t>(blocks_.size()), b2_, factor_w_};
  const std::int64_t traced = static_cast<std::int64_t>(traced_.extent(0));
  if (host_batched()) {
    // Host memory, written by the gather's batch (which fenced): a plain loop, no kernel.
    for (std::int64_t k = 0; k < traced; ++k) traces(k);
  } else if (traced > 0) {
    Kokkos::parallel_for("koptim::Shampoo::traces", Kokkos::RangePolicy<ExecutionSpace>(exec_, 0, traced), traces);
  }
  const AccumulateBody<T> body{
      o_.grafting == Grafting::AdaGrad || o_.grafting == Grafting::RMSProp || o_.grafting == Grafting::Adam,
      o_.grafting == Grafting::AdaGrad,
      b1_ > 0.0,
      static_cast<T>(graft_beta_),
      static_cast<T>(1.0 - graft_beta_),
      filter(t)};
  // With the filtered gradient in the eigenbasis and no grafting, apply() filters: nothing to do here.
  const bool elements = !rotated_filter();
  if (host_batched()) {
    host_batch([&](std::size_t bi) {
      factor_grams(bi, true);
      if (elements) block_elements_serial<false>(entry(bi), body);
    });
    return;
  }
  if (batched_products_)
    grams_.run(exec_, static_cast<T>(factor_w_), static_cast<T>(b2_), gemm_backend());
  else
    for (std::size_t bi = 0; bi < blocks_.size(); ++bi) factor_grams(bi, false);
  if (elements) each_block_element<false>("koptim::Shampoo::accumulate", body);
}

// The filtered gradient of every owned block out of the eigenbasis into mhat (out), or from mhat
// into the eigenbasis (before the first computation X = I: copies).
template <class T>
void ShampooBlocks<T>::rotate_filter(bool out) {
  const Preconditioning& pc = out ? filter_out_ : filter_in_;
  if (host_batched()) {
    host_batch([&](std::size_t bi) {
      auto& b = blocks_[bi];
      precondition(b, b.*pc.in, b.*pc.out, b.*pc.spare, pc.inverse_rotation, true);
    });
    return;
  }
  precondition_all(pc);
}

// Eigenvalue correction (docs/shampoo.md step 3): E <- b2 E + w R^2, R = G rotated into the eigenbasis, after the
// factors' eigenvectors have been refreshed at this step (as the reference implementation does).
template <class T>
void ShampooBlocks<T>::correct() {
  if (!o_.eigenvalue_corrected) return;
  const CorrectionBody<T> body{static_cast<T>(b2_), static_cast<T>(factor_w_)};
  if (host_batched()) {
    host_batch([&](std::size_t bi) {
      auto& b = blocks_[bi];
      precondition(b, b.g, b.p, b.q, false, true);  // b.p = R
      block_elements_serial<false>(entry(bi), body);
    });
    return;
  }
  precondition_all(rotate_gradient_);
  each_block_element<false>("koptim::Shampoo::eigenvalue_correction", body);
}

// Rotation or root products over every preconditioned dimension: out = in x_1 op(X_1) ... x_k op(X_k).
// Roots: op(X) = X. Eigenvalue-corrected: inverse_rotation = false applies Q^T (into the
// eigenbasis), true applies Q (back). Before the first amortized computation X = Q = I: a copy.
template <class T>
void ShampooBlocks<T>::precondition(BlockState<T>& b, const Vec<T>& in, const Vec<T>& out, const Vec<T>& spare,
                                    bool inverse_rotation, bool serial) {
  const std::vector<int>& dims = b.preconditioned;
  if (!roots_ready_ || dims.empty()) {
    if (serial)
      std::copy(in.data(), in.data() + in.size(), out.data());
    else
      Kokkos::deep_copy(exec_, out, in);
    return;
  }
  // The bank slice is row-major X(i, k); seen column-major it is X^T.
  const char trans = o_.eigenvalue_corrected ? (inverse_rotation ? 'T' : 'N') : 'T';
  // Alternate between out and spare so that the last product lands in out.
  const T* src = in.data();
  for (std::size_t i = 0; i < dims.size(); ++i) {
    T* dst        = ((dims.size() - 1 - i) % 2 == 0) ? out.data() : spare.data();
    const auto& f = b.factors[dims[i]];
    const T* X    = banks_.at(f.n).X.data() + f.slot * f.n * f.n;
    if (serial)
      linalg::host_mode_product<T>(src, b.shape, dims[i], X, trans, dst);
    else
      linalg::mode_product<T>(exec_, src, b.shape, dims[i], X, trans, dst);
    src = dst;
  }
}

template <class T>
template <class F>
void ShampooBlocks<T>::host_batch(const F& f) {
  if (blocks_.empty()) return;
  linalg::host_blas_fence(exec_, "before a batch of blocks");  // kernels wrote the inputs
  // Fenced after, before kernels read the results.
  Impl::host_batch(Impl::host_instance(exec_), "koptim::Shampoo::host_batch", blocks_.size(),
                   [&](const std::size_t bi) { f(bi); });
}

// Step 2 (docs/shampoo.md): inverse roots (or eigenvectors) of every factor, batched by size.
template <class T>
void ShampooBlocks<T>::amortized(std::int64_t t) {
  if (!rotated_filter()) {
    compute_bases(t);
    return;
  }
  // The filtered gradient leaves the old eigenbasis and enters the new one; also when the
  // computation throws, so that it stays in the basis the next steps use.
  rotate_filter(true);
  try {
    compute_bases(t);
  } catch (...) {
    rotate_filter(false);
    throw;
  }
  rotate_filter(false);
}

// What the errors of the amortized computation add: the factors already hold the step's gradient.
const char* const interrupts =
    "; the factors had taken this step's gradient: the optimizer refuses to step or export until a state is "
    "imported";

template <class T>
void ShampooBlocks<T>::compute_bases(std::int64_t t) {
  const double scale = o_.use_bias_correction && b2_ < 1.0 ? 1.0 / (1.0 - std::pow(b2_, static_cast<double>(t))) : 1.0;
  std::vector<char> block_failed(blocks_.size(), 0);
  step_failures_ = step_fallbacks_ = step_unconverged_ = 0;
  for (auto& kv : banks_) {
    BankSet& s           = kv.second;
    const std::int64_t n = kv.first;
    const std::int64_t m = static_cast<std::int64_t>(s.owner.size());
    auto& ws             = *s.workspace;
    const auto Lhat      = ws.template batch<T>("koptim::Shampoo::Lhat", m, n, n);
    // Both contiguous, in the same order: one flat pass.
    const T* const L = s.L.data();
    T* const lhat    = Lhat.data();
    const T sc       = static_cast<T>(scale);
    Kokkos::parallel_for(
        "koptim::Shampoo::bias_correct", Kokkos::RangePolicy<ExecutionSpace>(exec_, 0, m * n * n),
        KOKKOS_LAMBDA(const std::int64_t k) { lhat[k] = L[k] * sc; });
    std::vector<int> status(m, 0);  // 0 ok, 1 solver failure, 2 non-finite input, 3 non-finite output
    if (o_.eigenvalue_corrected) {
      // Eigenvectors of the factors (bias correction and eps do not change them).
      const auto w    = ws.template matrix<T>("koptim::Shampoo::eigenvalues", m, n, true, exec_);
      const auto info = ws.template vector<int>("koptim::Shampoo::eigh_info", m, true, exec_);
      const bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemorySpace>::accessible;
      // The QR refresh in Kokkos where LAPACK cannot (or should not: eigensolver = jacobi) run it.
      const bool team_qr = o_.eigenbasis == Eigenbasis::qr && (!host || o_.eigensolver == linalg::EighSolver::jacobi);
      // The team refresh's buffers, taken at the first (exact) refresh already, so that no later
      // step allocates.
      using Workspace = linalg::RootWorkspace<MemorySpace>;
      typename Workspace::template Batch<T> Q, P;
      typename Workspace::template Matrix<T> tau;
      typename Workspace::template Matrix<double> d;
      typename Workspace::template Vector<int> iters;
      // The status of every matrix from its solver's code: 0 done, a non-finite input, or a failure.
      const auto take_status = [&](const auto& codes) {
        for (std::int64_t a = 0; a < m; ++a)
          status[a] = codes(a) == 0 ? 0 : (codes(a) == linalg::eigh_info_nonfinite_input ? 2 : 1);
      };
      if (team_qr) {
        Q     = ws.template batch<T>("koptim::Shampoo::qr_basis", m, n, n);
        P     = ws.template batch<T>("koptim::Shampoo::qr_product", m, n, n);
        tau   = ws.template matrix<T>("koptim::Shampoo::qr_tau", m, n);
        d     = ws.template matrix<double>("koptim::Shampoo::qr_estimates", m, n);
        iters = ws.template vector<int>("koptim::Shampoo::qr_iterations", m);
      }
      if (o_.eigenbasis == Eigenbasis::qr && roots_ready_) {
        // Warm start from the current eigenvectors: one Kokkos team per matrix where the memory is
        // not the host's (or eigensolver = jacobi asks for the device solvers), else LAPACK's QR with
        // the matrices concurrently on the host threads.
        linalg::QrRefreshOptions qo;
        qo.max_iterations = o_.qr_max_iterations;
        qo.tolerance      = o_.qr_tolerance;
        const auto hi     = ws.host_mirror("koptim::Shampoo::eigh_info/host", info);
        std::vector<int> qr_steps(m);
        const Kokkos::View<int*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> steps(qr_steps.data(), m);
        if (team_qr) {
          linalg::batched_eigenbasis_qr_team(exec_, Lhat, s.X, info, iters, qo, Q, P, tau, d);
          Kokkos::deep_copy(exec_, hi, info);
          Kokkos::deep_copy(exec_, steps, iters);
          Impl::fence(exec_, "koptim::Shampoo: the QR refresh's outcome to the host");
        } else {
          // Host mirrors (the same memory when it is the host's), copied on exec_: no global fence.
          const auto Lh = ws.host_mirror("koptim::Shampoo::bias_corrected/host", Lhat);
          const auto Xh = ws.host_mirror("koptim::Shampoo::eigenvectors/host", s.X);
          Kokkos::deep_copy(exec_, Lh, Lhat);
          Kokkos::deep_copy(exec_, Xh, s.X);
          Impl::fence(exec_, "koptim::Shampoo: the factors to LAPACK");
          linalg::batched_eigenbasis_qr(Impl::host_instance(exec_), Lh, Xh, hi, steps, qo);
          Kokkos::deep_copy(exec_, s.X, Xh);
        }
        take_status(hi);
        for (const int k : qr_steps) qr_iterations_ += k;
        qr_refreshes_ += m;
      } else if (o_.eigensolver == linalg::EighSolver::lapack ||
                 (o_.eigensolver == linalg::EighSolver::automatic && host)) {
        // cuSOLVER where the factors are in device memory and koptim has it (the eigenvectors in the
        // rows of Lhat). Else LAPACK, on host memory: device factors go through host mirrors (a
        // no-op copy-free alias when the memory is already host-accessible).
        if (linalg::Impl::cusolver_eigh_batch(exec_, ws, Lhat, w, info, false)) {
          const auto hi = ws.host_mirror("koptim::Shampoo::eigh_info/host", info);
          take_eigenvectors(exec_, s.X, Lhat, info, true);
          Kokkos::deep_copy(exec_, hi, info);
          Impl::fence(exec_, "koptim::Shampoo: the eigensolver's outcome to the host");
          take_status(hi);
        } else {
          const auto Lh = ws.host_mirror("koptim::Shampoo::bias_corrected/host", Lhat);
          const auto wh = ws.host_mirror("koptim::Shampoo::eigenvalues/host", w);
          const auto hi = ws.host_mirror("koptim::Shampoo::eigh_info/host", info);
          Kokkos::deep_copy(exec_, Lh, Lhat);
          Impl::fence(exec_, "koptim::Shampoo: the factors to LAPACK");
          linalg::batched_eigh_lapack(Impl::host_instance(exec_), Lh, wh, hi);
          Kokkos::deep_copy(exec_, Lhat, Lh);
          Kokkos::deep_copy(exec_, info, hi);
          take_status(hi);
          take_eigenvectors(exec_, s.X, Lhat, info);
        }
      } else {
        const auto V      = ws.template batch<T>("koptim::Shampoo::eigenvectors", m, n, n, true, exec_);
        const auto sweeps = ws.template vector<int>("koptim::Shampoo::sweeps", m, true, exec_);
        linalg::batched_eigh_jacobi(exec_, Lhat, w, V, info, sweeps);
        const auto hi = ws.host_mirror("koptim::Shampoo::eigh_info/host", info);
        Kokkos::deep_copy(exec_, hi, info);
        Impl::fence(exec_, "koptim::Shampoo: the eigensolver's outcome to the host");
        take_status(hi);
        take_eigenvectors(exec_, s.X, V, info);
      }
    } else {
      std::vector<double> exponents(m);
      for (std::int64_t a = 0; a < m; ++a) exponents[a] = blocks_[s.owner[a].first].factors[s.owner[a].second].exponent;
      linalg::InverseRootOptions ro;
      ro.method                = o_.root_method;
      ro.solver                = o_.eigensolver;
      ro.epsilon               = o_.epsilon;
      ro.use_pseudo_inverse    = o_.pseudo_inverse;
      ro.rank_rtol             = o_.rank_rtol;
      ro.rank_atol             = o_.rank_atol;
      ro.products              = gemm_backend();
      ro.newton_max_iterations = newton_iteration_limit;
      const auto infos         = linalg::batched_inverse_root(exec_, Lhat, s.X, exponents, ro, &ws);
      for (std::int64_t a = 0; a < m; ++a) {
        if (infos[a].newton_fell_back) ++step_fallbacks_;
        if (infos[a].ok() && !infos[a].newton_converged && !infos[a].newton_fell_back) ++step_unconverged_;
        switch (infos[a].status) {
          case linalg::RootStatus::success:
            status[a] = 0;
            break;
          case linalg::RootStatus::solver_failure:
            status[a] = 1;
            break;
          case linalg::RootStatus::nonfinite_input:
            status[a] = 2;
            break;
          case linalg::RootStatus::nonfinite_output:
            status[a] = 3;
            break;
        }
      }
    }
    for (std::int64_t a = 0; a < m; ++a) {
      const auto& b = blocks_[s.owner[a].first];
      if (status[a] >= 2) {
        std::ostringstream why;
        if (status[a] == 2) {
          why << "the factor matrix holds a NaN or Inf";
        } else if (o_.epsilon == 0.0) {
          why << "its inverse root is not finite: a zero eigenvalue with epsilon = 0 (use pseudo_inverse, or "
                 "epsilon > 0)";
        } else {
          why << "its inverse root is not finite: the smallest eigenvalue plus epsilon = " << o_.epsilon
              << " raised to the power -" << blocks_[s.owner[a].first].factors[s.owner[a].second].exponent
              << " overflows " << (std::is_same<T, float>::value ? "float" : "double")
              << " (a larger epsilon, or pseudo_inverse with epsilon = 0)";
        }
        throw NonFiniteError("koptim::Shampoo::step: " + b.where(ps_, layouts_) + ", factor " +
                             std::to_string(s.owner[a].second) + ": " + why.str() + interrupts);
      }
      if (status[a] == 1) {
        block_failed[s.owner[a].first] = 1;
        ++step_failures_;
      }
    }
  }
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    auto& b = blocks_[i];
    if (!block_failed[i]) {
      b.failures = 0;
      continue;
    }
    ++failures_kept_;
    if (++b.failures > o_.num_tolerated_failed_amortized_computations) {
      throw Error("koptim::Shampoo::step: " + b.where(ps_, layouts_) + ": the root-inverse computation failed " +
                  std::to_string(b.failures) + " times in a row (num_tolerated_failed_amortized_computations = " +
                  std::to_string(o_.num_tolerated_failed_amortized_computations) + ")" + interrupts);
    }
  }
  roots_ready_ = true;
}

template <class T>
UpdateBody<T> ShampooBlocks<T>::update_body(int group, bool shampoo, const std::vector<double>& lrs,
                                            const std::vector<double>& base_lrs, const std::vector<double>& wds) const {
  const double lr = lrs[group], wd = wds[group], peak = base_lrs[group];
  double alpha = 0.0;
  switch (o_.weight_decay_type) {
    case WeightDecayType::L2:
      alpha = 0.0;
      break;
    case WeightDecayType::decoupled:
      alpha = wd;
      break;
    case WeightDecayType::corrected:
      alpha = peak > 0 ? wd * lr / peak : 0.0;
      break;
    case WeightDecayType::independent:
      alpha = peak > 0 ? wd / peak : 0.0;
      break;
  }
  return UpdateBody<T>{shampoo,
                       shampoo && o_.grafting != Grafting::none,
                       o_.momentum > 0.0,
                       o_.use_nesterov,
                       static_cast<T>(alpha),
                       static_cast<T>(lr),
                       static_cast<T>(o_.momentum),
                       static_cast<T>(1.0 - o_.dampening),
                       graft_ratio_.data()};
}

// Steps 4 and 5 (docs/shampoo.md) up to the update U = lr P of every owned block: the grafting
// direction P_g (q), the Shampoo direction P_s (p; eigenvalue-corrected: rotate, divide, rotate
// back), the per-block rescaling P = P_s |P_g| / (|P_s| + 1e-16), weight decay and momentum.
template <class T>
void ShampooBlocks<T>::apply(std::int64_t t, const std::vector<double>& lrs, const std::vector<double>& base_lrs,
                             const std::vector<double>& wds) {
  const bool started    = t >= start_;
  const bool graft      = o_.grafting != Grafting::none;
  const bool shampoo    = started || !graft;  // the Shampoo direction, else the grafting direction alone
  const bool corrected  = shampoo && o_.eigenvalue_corrected;
  const double graft_bc = o_.grafting == Grafting::Adam ? 1.0 - std::pow(graft_beta_, static_cast<double>(t)) : 1.0;
  const double bc       = o_.use_bias_correction && b2_ < 1.0 ? 1.0 - std::pow(b2_, static_cast<double>(t)) : 1.0;
  const GraftDirectionBody<T> direction{
      o_.grafting == Grafting::AdaGrad || o_.grafting == Grafting::RMSProp || o_.grafting == Grafting::Adam,
      static_cast<T>(1.0 / graft_bc), static_cast<T>(o_.grafting_epsilon)};
  const CorrectedDivideBody<T> divide{static_cast<T>(1.0 / bc), static_cast<T>(o_.epsilon)};
  const bool rotated = corrected && rotated_filter();
  const RotatedDirectionBody<T> rotated_direction{filter(t), static_cast<T>(1.0 / bc), static_cast<T>(o_.epsilon)};
  const GraftRatioBody<T> ratio{graft_ratio_.data()};
  // Each form in the same order per block: the bodies are the same, and so are the results.
  if (host_batched()) {
    host_batch([&](std::size_t bi) {
      auto& b       = blocks_[bi];
      const auto& e = entry(bi);
      if (graft) block_elements_serial<false>(e, direction);
      if (rotated) {
        block_elements_serial<false>(e, rotated_direction);  // g = the direction in the eigenbasis
        precondition(b, b.g, b.p, b.mhat, true, true);
      } else if (corrected) {
        precondition(b, b.mhat, b.g, b.p, false, true);  // g = rotated M_hat
        block_elements_serial<false>(e, divide);
        precondition(b, b.g, b.p, b.mhat, true, true);
      } else if (shampoo) {
        precondition(b, b.mhat, b.p, b.g, false, true);
      }
      if (shampoo && graft) ratio(SerialSums{e.size}, e);
      block_elements_serial<false>(e, update_body(ps_[b.param].group, shampoo, lrs, base_lrs, wds));
    });
    return;
  }
  if (graft) each_block_element<false>("koptim::Shampoo::graft_direction", direction);
  if (rotated) {
    each_block_element<false>("koptim::Shampoo::eigenvalue_corrected", rotated_direction);
    precondition_all(rotate_back_);
  } else if (corrected) {
    precondition_all(rotate_mhat_);
    each_block_element<false>("koptim::Shampoo::eigenvalue_corrected", divide);
    precondition_all(rotate_back_);
  } else if (shampoo) {
    precondition_all(apply_roots_);
  }
  if (shampoo && graft) for_each_block_team(exec_, "koptim::Shampoo::graft_ratio", table_, ratio);
  for (const auto& r : groups_)
    for_each_block_element<false>(exec_, "koptim::Shampoo::update", table_, r.first, r.last, r.chunk_begin, r.chunk_end,
                                  update_body(r.group, shampoo, lrs, base_lrs, wds));
}

template <class T>
void ShampooBlocks<T>::exchange(const comm::Communicator* group) {
  updates_.exchange(exec_, group);
}

template <class T>
void ShampooBlocks<T>::write_back() {
  for_each_block_element<true>(exec_, "koptim::Shampoo::write_back", placement_table_, 0,
                               static_cast<std::int64_t>(placement_table_.extent(0)), 0, placement_chunks_,
                               WriteBackBody<T>{});
}

template <class T>
void ShampooBlocks<T>::traces_to_host() const {
  // Outside a step (export, import): after whatever instance the last step ran on. export_state()
  // is const but writes this mirror: two exports of one optimizer at once would race (no call of
  // an optimizer is made for concurrent use).
  Kokkos::deep_copy(sums_host_, sums_);
}

template <class T>
void ShampooBlocks<T>::export_tensors(OptimizerState& s) const {
  auto put = [&](const std::string& k, const Vec<T>& v, const std::vector<std::int64_t>& shape) {
    if (v.size() == 0) return;
    StateTensor st;
    st.dtype = scalar_type_of<T>();
    st.shape = shape;
    Impl::set_bytes(st, v);
    s.tensors[k] = std::move(st);
  };
  traces_to_host();
  const bool roots                                                                                       = roots_ready_;
  s.integers[std::string("shampoo/") + (std::is_same<T, float>::value ? "f32" : "f64") + "/roots_ready"] = roots;
  for (std::size_t bi = 0; bi < blocks_.size(); ++bi) {
    const auto& b       = blocks_[bi];
    const std::string k = key(b);
    put(filter_key(b), b.filtered, b.shape);
    put(k + "/graft", b.graft, b.shape);
    put(k + "/momentum", b.momentum, b.shape);
    put(k + "/eigenvalue_correction", b.correction, b.shape);
    s.integers[k + "/failures"] = b.failures;
    s.reals[k + "/trace"]       = sums_host_(blocks_.size() + bi);
    for (std::size_t j = 0; j < b.factors.size(); ++j) {
      const auto& f = b.factors[j];
      if (f.slot < 0) continue;
      // The bank's slot is contiguous (slots x n x n, row-major): copied straight to the host.
      const auto& bank = banks_.at(f.n);
      const Vec<T> L(bank.L.data() + f.slot * f.n * f.n, f.n * f.n), X(bank.X.data() + f.slot * f.n * f.n, f.n * f.n);
      put(k + "/factor" + std::to_string(j), L, {f.n, f.n});
      put(k + (o_.eigenvalue_corrected ? "/eigenvectors" : "/root") + std::to_string(j), X, {f.n, f.n});
    }
  }
}

template <class T>
void ShampooBlocks<T>::check_entries(const OptimizerState& s, Optimizer::StateKeys& held) const {
  const std::string who = "koptim::Shampoo::import_state: ";
  enum Values { finite, nonnegative, factor };
  // The exact shape (a transposed block is another block) and the values: every entry finite,
  // accumulators of squares >= 0, factors with a diagonal >= 0 (they are sums of G G^T).
  auto need = [&](const std::string& k, const std::vector<std::int64_t>& shape, Values values) {
    held.tensors.insert(k);
    auto it = s.tensors.find(k);
    if (it == s.tensors.end()) throw StateError(who + "the state has no tensor '" + k + "'");
    const StateTensor& t = it->second;
    if (t.dtype != scalar_type_of<T>())
      throw StateError(who + "state tensor '" + k + "' has scalar type " + to_string(t.dtype) + ", expected " +
                       to_string(scalar_type_of<T>()));
    std::int64_t n = 1;
    for (auto e : shape) n *= e;
    if (t.shape != shape || t.data.size() != static_cast<std::size_t>(n) * sizeof(T))
      throw StateError(who + "state tensor '" + k + "' has shape " + shape_string(t.shape) + " (" +
                       std::to_string(t.data.size()) + " bytes), expected " + shape_string(shape));
    Impl::check_values(t, k, values == nonnegative);
    if (values == factor) {
      for (std::int64_t i = 0; i < shape[0]; ++i) {
        T x;
        std::memcpy(&x, t.data.data() + (i * shape[0] + i) * sizeof(T), sizeof(T));
        if (x < T(0)) {
          std::ostringstream m;
          m << who << "state tensor '" << k << "' has diagonal entry " << x << " at (" << i << ", " << i
            << "); a factor matrix is a sum of G G^T terms, its diagonal is >= 0";
          throw StateError(m.str());
        }
      }
    }
  };
  auto integer = [&](const std::string& k, std::int64_t lo, std::int64_t hi, const std::string& allowed) {
    held.integers.insert(k);
    auto it = s.integers.find(k);
    if (it == s.integers.end()) throw StateError(who + "the state has no integer '" + k + "'");
    if (it->second < lo || it->second > hi)
      throw StateError(who + "integer '" + k + "' = " + std::to_string(it->second) +
                       " is not allowed; allowed: " + allowed);
  };
  const std::string rk = std::string("shampoo/") + (std::is_same<T, float>::value ? "f32" : "f64") + "/roots_ready";
  integer(rk, 0, 1, "0 or 1");
  const std::int64_t tolerated = o_.num_tolerated_failed_amortized_computations;
  for (const auto& b : blocks_) {
    const std::string k = key(b);
    // Where it may be kept in the eigenbasis, either form is read (a state written with the other
    // setting of filter_in_eigenbasis, or by a koptim before it), and import_tensors rotates it.
    if (b.filtered.size()) {
      const std::string source = filter_source(s, b);
      if (filter_rotatable_ && !s.tensors.count(source))
        throw StateError(
            who + "the state has no tensor '" + key(b) + "/filtered_grad_eigenbasis' or '" + key(b) +
            "/filtered_grad' (the filtered gradient, in the eigenbasis or in the parameters' coordinates)");
      need(source, b.shape, finite);
    }
    if (b.graft.size()) need(k + "/graft", b.shape, nonnegative);
    if (b.momentum.size()) need(k + "/momentum", b.shape, finite);
    if (b.correction.size()) need(k + "/eigenvalue_correction", b.shape, nonnegative);
    // One more than tolerated: the count a block keeps after the failure that raised the error.
    integer(k + "/failures", 0, tolerated + 1,
            "0 to num_tolerated_failed_amortized_computations + 1 = " + std::to_string(tolerated + 1));
    held.reals.insert(k + "/trace");
    auto tr = s.reals.find(k + "/trace");
    if (tr == s.reals.end()) throw StateError(who + "the state has no real '" + k + "/trace'");
    if (!Impl::is_finite(tr->second) || tr->second < 0.0 || tr->second > squares_limit(b)) {
      std::ostringstream m;
      m << who << "real '" << k << "/trace' = " << Impl::real_string(tr->second)
        << " is not allowed; allowed: finite values >= 0 up to " << Impl::real_string(squares_limit(b))
        << " (the trace of the block's factor matrices; the largest "
        << (std::is_same<T, float>::value ? "float" : "double") << " less the rounding of the factors' sums)";
      throw StateError(m.str());
    }
    for (std::size_t j = 0; j < b.factors.size(); ++j) {
      if (b.factors[j].slot < 0) continue;
      const std::int64_t n = b.factors[j].n;
      need(k + "/factor" + std::to_string(j), {n, n}, factor);
      need(k + (o_.eigenvalue_corrected ? "/eigenvectors" : "/root") + std::to_string(j), {n, n}, finite);
    }
  }
}

template <class T>
void ShampooBlocks<T>::import_tensors(const OptimizerState& s) {
  // Set-up, on the default instance: the last step's instance may be the caller's stream, busy
  // with other work or destroyed since (a Kokkos::Cuda made from a stream does not own it).
  exec_    = ExecutionSpace();
  auto get = [&](const std::string& k, T* dst, std::int64_t n) {
    const auto& st = s.tensors.at(k);
    Kokkos::View<const T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> h(
        reinterpret_cast<const T*>(st.data.data()), n);
    Kokkos::deep_copy(Kokkos::View<T*, MemorySpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(dst, n), h);
  };
  roots_ready_ =
      s.integers.at(std::string("shampoo/") + (std::is_same<T, float>::value ? "f32" : "f64") + "/roots_ready") != 0;
  bool rotate = false;  // a filtered gradient in the other form
  traces_to_host();     // also: nothing on the device writes them while the host does
  for (std::size_t bi = 0; bi < blocks_.size(); ++bi) {
    auto& b             = blocks_[bi];
    const std::string k = key(b);
    if (b.filtered.size()) {
      const std::string source = filter_source(s, b);
      const bool other         = source != filter_key(b);
      get(source, (other ? b.mhat : b.filtered).data(), b.size);
      rotate = rotate || other;
    }
    if (b.graft.size()) get(k + "/graft", b.graft.data(), b.size);
    if (b.momentum.size()) get(k + "/momentum", b.momentum.data(), b.size);
    if (b.correction.size()) get(k + "/eigenvalue_correction", b.correction.data(), b.size);
    b.failures                      = static_cast<int>(s.integers.at(k + "/failures"));
    sums_host_(blocks_.size() + bi) = s.reals.at(k + "/trace");
    for (std::size_t j = 0; j < b.factors.size(); ++j) {
      const auto& f = b.factors[j];
      if (f.slot < 0) continue;
      auto& bank = banks_.at(f.n);
      get(k + "/factor" + std::to_string(j), bank.L.data() + f.slot * f.n * f.n, f.n * f.n);
      get(k + (o_.eigenvalue_corrected ? "/eigenvectors" : "/root") + std::to_string(j),
          bank.X.data() + f.slot * f.n * f.n, f.n * f.n);
    }
  }
  Kokkos::deep_copy(sums_, sums_host_);
  if (rotate) {
    // Once every basis is in: the blocks whose filtered gradient came in the other form, from mhat
    // into the eigenbasis or out of it.
    for (auto& b : blocks_)
      if (b.filtered.size() && filter_source(s, b) != filter_key(b))
        precondition(b, b.mhat, b.filtered, b.p, !rotated_filter(), false);
    Impl::fence(exec_, "koptim::Shampoo::import_state: the filtered gradient between forms");
  }
}

}  // namespace Impl

Shampoo::Shampoo(ParameterSet params, CommonOptions common, ShampooOptions options,
                 std::shared_ptr<comm::Communicator> comm)
    : Optimizer("Shampoo", std::move(params), Impl::with_defaults(std::move(common), default_lr, default_weight_decay),
                comm.get()),
      options_(std::move(options)),
      comm_(std::move(comm)) {
  // The trace bound of each block (ShampooBlocks::prepare) refuses the gradients that could
  // overflow a factor (with a margin for rounding); the element-wise check before it refuses only
  // NaN and Inf.
  refuse_overflowing_squares(false);
  const auto& o        = options_;
  namespace R          = Impl::ranges::shampoo;
  const std::string me = "Shampoo";
  // The override keys as a parameter list writes them (inverse_exponent_override/<key>).
  auto order_key = [](int k) { return "order_" + std::to_string(k); };
  auto dim_key   = [&](const std::pair<int, int>& kj) {
    return order_key(kj.first) + "_dim_" + std::to_string(kj.second);
  };
  // This rank's own checks, agreed on before the ranks compare their optimizers (a rank that
  // threw alone would leave the others waiting in that comparison).
  Impl::run_together(comm_.get(), [&] {
    Impl::check_option_ranges(me, o);
    if (o.start_preconditioning_step && *o.start_preconditioning_step < o.precondition_frequency) {
      throw ConfigError(
          "koptim::Shampoo: start_preconditioning_step = " + std::to_string(*o.start_preconditioning_step) +
          " is not allowed; allowed: at least precondition_frequency = " + std::to_string(o.precondition_frequency));
    }
    if (o.pseudo_inverse && o.epsilon != 0.0) {
      throw ConfigError("koptim::Shampoo: pseudo_inverse = true needs epsilon = 0 (got epsilon = " +
                        Impl::real_string(o.epsilon) + ")");
    }
    if (o.use_nesterov && o.momentum <= 0.0) {
      throw ConfigError("koptim::Shampoo: use_nesterov = true needs momentum > 0");
    }
    if (o.eigenbasis == Eigenbasis::qr && !o.eigenvalue_corrected) {
      throw ConfigError(
          "koptim::Shampoo: eigenbasis = qr needs eigenvalue_corrected = true (only that variant keeps "
          "eigenbases)");
    }
    // A key that the other keys' values make irrelevant is refused unless it holds its default: the
    // value written would otherwise be ignored without a word.
    const ShampooOptions defaults;
    Impl::refuse_ineffective(
        me,
        o.eigenbasis != Eigenbasis::qr &&
            (o.qr_max_iterations != defaults.qr_max_iterations || o.qr_tolerance != defaults.qr_tolerance),
        "qr_max_iterations = " + std::to_string(o.qr_max_iterations) +
            " and qr_tolerance = " + Impl::real_string(o.qr_tolerance),
        std::string("they apply to eigenbasis = qr (eigenbasis is ") + to_string(o.eigenbasis) + ")");
    const std::string corrected = "eigenvalue_corrected = true computes eigenbases, not inverse roots";
    Impl::refuse_ineffective(me, o.eigenvalue_corrected && o.root_method != defaults.root_method,
                             std::string("root_method = ") + linalg::to_string(o.root_method), corrected);
    Impl::refuse_ineffective(me, o.eigenvalue_corrected && o.pseudo_inverse, "pseudo_inverse = true", corrected);
    Impl::refuse_ineffective(
        me, o.eigenvalue_corrected && !(o.inverse_exponent_override.empty() && o.inverse_exponent_override_dim.empty()),
        "inverse_exponent_override", corrected);
    Impl::refuse_ineffective(
        me, !o.pseudo_inverse && (o.rank_rtol != defaults.rank_rtol || o.rank_atol != defaults.rank_atol),
        "rank_rtol = " + Impl::real_string(o.rank_rtol) + " and rank_atol = " + Impl::real_string(o.rank_atol),
        "they apply to pseudo_inverse = true");
    const bool second_moment = o.grafting == Grafting::RMSProp || o.grafting == Grafting::Adam;
    Impl::refuse_ineffective(
        me, o.grafting_beta2 && !second_moment, "grafting_beta2 = " + Impl::real_string(o.grafting_beta2.value_or(0)),
        std::string("it applies to grafting = RMSProp or Adam (grafting is ") + to_string(o.grafting) + ")");
    Impl::refuse_ineffective(
        me, o.grafting_epsilon != defaults.grafting_epsilon && !second_moment && o.grafting != Grafting::AdaGrad,
        "grafting_epsilon = " + Impl::real_string(o.grafting_epsilon),
        std::string("it applies to grafting = AdaGrad, RMSProp or Adam (grafting is ") + to_string(o.grafting) + ")");
    Impl::refuse_ineffective(me, o.momentum == 0.0 && o.dampening != defaults.dampening,
                             "dampening = " + Impl::real_string(o.dampening),
                             "it applies to momentum > 0 (momentum is 0)");
    Impl::refuse_ineffective(me, o.beta3 && o.betas[0] == 0.0, "beta3 = " + Impl::real_string(o.beta3.value_or(0)),
                             "with betas[0] = 0 the gradient is not filtered");
    Impl::refuse_ineffective(me, !o.use_bias_correction && o.betas[0] == 0.0 && o.betas[1] == 1.0,
                             "use_bias_correction = false",
                             "with betas = [0, 1] nothing is bias-corrected (no filter, and factors that are sums)");
    for (const auto& kv : o.inverse_exponent_override)
      Impl::require(me, "inverse_exponent_override/" + order_key(kv.first), kv.second, R::inverse_exponent);
    for (const auto& kv : o.inverse_exponent_override_dim)
      Impl::require(me, "inverse_exponent_override/" + dim_key(kv.first), kv.second, R::inverse_exponent);
    shampoo::BlockingOptions bo;
    bo.max_preconditioner_dim = o.max_preconditioner_dim;
    bo.use_merge_dims         = o.use_merge_dims;
    for (const auto& p : parameters().parameters())
      layouts_.push_back(shampoo::compute_block_layout(p.param.shape, bo));
  });
  if (comm_) {
    // Every rank must describe the same optimizer: otherwise the block assignment and the
    // all-gather would not match (a hang or silent garbage). Checked on every rank.
    auto items = Impl::describe_parameters(*this, Impl::describe_options(o));
    for (const auto& kv : o.inverse_exponent_override)
      items.push_back("override " + order_key(kv.first) + ' ' + Impl::real_string(kv.second));
    for (const auto& kv : o.inverse_exponent_override_dim)
      items.push_back("override " + dim_key(kv.first) + ' ' + Impl::real_string(kv.second));
    Impl::check_same_on_all_ranks(*comm_, name(), items,
                                  std::to_string(parameters().size()) +
                                      " parameters: " + Impl::join_items(Impl::describe_parameters(*this)) +
                                      "\nblocks: " + describe_blocks());
    const int g = o.num_trainers_per_group.value_or(comm_->size());
    group_comm_ = comm_->split_groups(g).first;
  } else if (o.num_trainers_per_group && *o.num_trainers_per_group != 1) {
    // One process is a world of one rank: the value a one-rank communicator allows.
    throw ConfigError("koptim::Shampoo: num_trainers_per_group = " + std::to_string(*o.num_trainers_per_group) +
                      " is not allowed without a communicator (one process); allowed: 1, or all ranks (-1 in a "
                      "parameter list, no value in ShampooOptions)");
  }
  // What the root computation would refuse at the first amortized step (after that step's
  // gradient had entered the factors) is refused here (after the ranks' agreement: on every rank
  // or none).
  if (o.root_method == linalg::RootMethod::coupled_newton) {
    if (o.pseudo_inverse)
      throw ConfigError("koptim::Shampoo: pseudo_inverse = true needs root_method = eigen (got coupled_newton)");
    auto newton_exponent = [&](const std::string& key, double a) {
      if (a != 0.0 && linalg::Impl::newton_root_index(a) == 0)
        throw ConfigError(
            "koptim::Shampoo: root_method = coupled_newton computes exponents 1/p with p a positive "
            "integer (or 0: not preconditioned); inverse_exponent_override/" +
            key + " = " + Impl::real_string(a) + " is not one (use root_method = eigen for it)");
    };
    for (const auto& kv : o.inverse_exponent_override) newton_exponent(order_key(kv.first), kv.second);
    for (const auto& kv : o.inverse_exponent_override_dim) newton_exponent(dim_key(kv.first), kv.second);
  }
  // An override that names no block's order, or a dimension beyond its order, would be ignored:
  // refused, naming the orders the blocks have (after merging and splitting, which the user may
  // not foresee: describe_blocks() shows them).
  if (!o.inverse_exponent_override.empty() || !o.inverse_exponent_override_dim.empty()) {
    std::set<int> orders;
    for (const auto& l : layouts_)
      for (const auto& b : l.blocks)
        if (b.order() >= 1) orders.insert(b.order());
    std::string present;
    for (int k : orders) present += (present.empty() ? "" : ", ") + std::to_string(k);
    auto refuse = [&](const std::string& key) {
      throw ConfigError("koptim::Shampoo: inverse_exponent_override/" + key +
                        " matches no block and would be ignored; the blocks have order " +
                        (present.empty() ? std::string("(none)") : present) +
                        " (after merging dimensions and splitting at max_preconditioner_dim; "
                        "describe_blocks() lists them), and dimensions 0 to order - 1");
    };
    for (const auto& kv : o.inverse_exponent_override) {
      if (!orders.count(kv.first)) refuse(order_key(kv.first));
      int own = 0;  // dimensions with an entry of their own, which wins
      for (int j = 0; j < kv.first; ++j) own += o.inverse_exponent_override_dim.count({kv.first, j}) ? 1 : 0;
      if (own == kv.first)
        throw ConfigError("koptim::Shampoo: inverse_exponent_override/" + order_key(kv.first) +
                          " would be ignored: every dimension of order " + std::to_string(kv.first) + " has an " +
                          order_key(kv.first) + "_dim_J entry of its own, which wins");
    }
    for (const auto& kv : o.inverse_exponent_override_dim)
      if (!orders.count(kv.first.first) || kv.first.second < 0 || kv.first.second >= kv.first.first)
        refuse(dim_key(kv.first));
  }
  // The block list, its costs, and the owner of every block within the group.
  const int ranks = group_size();
  std::vector<double> costs;
  const double comm_bytes_f = o.communication_dtype == CommunicationDType::bfloat16 ? 2 : 4;
  for (std::size_t i = 0; i < layouts_.size(); ++i) {
    const double elem = o.communication_dtype == CommunicationDType::bfloat16
                            ? 2.0
                            : (parameters()[i].param.dtype == ScalarType::float32 ? comm_bytes_f : 8.0);
    for (const auto& b : layouts_[i].blocks) {
      if (o.distributed_cost_model == DistributedCostModel::bytes) {
        costs.push_back(std::ceil(static_cast<double>(b.num_elements()) * elem / 64.0) * 64.0);
      } else {
        double c = 0;
        for (auto d : b.sizes) c += static_cast<double>(d) * d * d;
        costs.push_back(c);
      }
    }
  }
  const auto owner = Impl::assign_blocks(costs, ranks);
  std::size_t k    = 0;
  for (const auto& layout : layouts_) {
    owners_.emplace_back();
    for (std::size_t b = 0; b < layout.blocks.size(); ++b) owners_.back().push_back(owner[k++]);
  }
  // The memory and the allocation depend on this rank's blocks and machine: agreed on, so that a
  // rank that cannot hold its blocks fails every rank's constructor, not the others' first step.
  Impl::run_together(comm_.get(), [&] {
    // The memory this rank's blocks need, before asking for it: a huge max_preconditioner_dim
    // (a factor matrix of d x d per dimension of a block) must be a koptim error that says how much
    // was asked, not an allocation failure deep inside Kokkos.
    double bytes = 0.0;
    for (std::size_t i = 0; i < layouts_.size(); ++i) {
      const double elem = parameters()[i].param.dtype == ScalarType::float32 ? 4.0 : 8.0;
      for (const auto& b : layouts_[i].blocks) {
        if (owners_[i][b.index] != group_rank()) continue;
        // Factor, root and the amortized computation's copy per preconditioned dimension; state
        // and workspace vectors (at most 9) of the block's size.
        for (int j = 0; j < b.order(); ++j)
          if (o.eigenvalue_corrected || inverse_exponent(b.order(), j) != 0.0)
            bytes += 3.0 * elem * static_cast<double>(b.sizes[j]) * static_cast<double>(b.sizes[j]);
        bytes += 9.0 * elem * static_cast<double>(b.num_elements());
      }
    }
    auto too_much = [&](const std::string& why) {
      std::ostringstream m;
      m.precision(4);
      m << "koptim::Shampoo: the optimizer state of this rank needs about " << bytes / 1073741824.0 << " GiB (" << bytes
        << " bytes: factor matrices up to max_preconditioner_dim = " << o.max_preconditioner_dim
        << " squared, 3 copies each, and the block buffers); " << why
        << ". Lower max_preconditioner_dim, or distribute the blocks over more ranks";
      return Error(m.str());
    };
#if defined(__unix__)
    if (Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemorySpace>::accessible) {
      const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
      if (pages > 0 && page > 0 && bytes > static_cast<double>(pages) * static_cast<double>(page)) {
        std::ostringstream m;
        m << "this machine has " << static_cast<double>(pages) * static_cast<double>(page) << " bytes of memory";
        throw too_much(m.str());
      }
    }
#endif
    try {
      f32_ = std::make_unique<Impl::ShampooBlocks<float>>(*this, parameters(), layouts_, options_, owners_,
                                                          group_rank(), ranks);
      f64_ = std::make_unique<Impl::ShampooBlocks<double>>(*this, parameters(), layouts_, options_, owners_,
                                                           group_rank(), ranks);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      // Kokkos reports a failed allocation as std::runtime_error.
      throw too_much(std::string("the allocation failed: ") + e.what());
    }
  });
}

int Shampoo::group_rank() const { return group_comm_ ? group_comm_->rank() : 0; }
int Shampoo::group_size() const { return group_comm_ ? group_comm_->size() : 1; }
std::size_t Shampoo::all_gather_bytes() const {
  if (group_size() <= 1) return 0;
  return f32_->all_gather_bytes() + f64_->all_gather_bytes();
}

Shampoo::~Shampoo() = default;

double Shampoo::inverse_exponent(int order, int dim) const {
  auto d = options_.inverse_exponent_override_dim.find({order, dim});
  if (d != options_.inverse_exponent_override_dim.end()) return d->second;
  auto o = options_.inverse_exponent_override.find(order);
  if (o != options_.inverse_exponent_override.end()) return o->second;
  return 1.0 / (2.0 * std::max(order, 1));
}

std::size_t Shampoo::state_bytes() const { return f32_->state_bytes() + f64_->state_bytes(); }
std::size_t Shampoo::num_blocks() const { return f32_->num_blocks() + f64_->num_blocks(); }
std::int64_t Shampoo::failed_amortized_computations() const { return f32_->failures_kept() + f64_->failures_kept(); }
std::int64_t Shampoo::qr_iterations() const { return f32_->qr_iterations() + f64_->qr_iterations(); }
std::int64_t Shampoo::qr_refreshes() const { return f32_->qr_refreshes() + f64_->qr_refreshes(); }

std::string Shampoo::describe_blocks() const {
  std::ostringstream s;
  for (std::size_t i = 0; i < layouts_.size(); ++i) s << parameters()[i].name << ": " << layouts_[i].describe() << "\n";
  return s.str();
}

void Shampoo::update(const ExecutionSpace& exec, std::int64_t t, const std::vector<double>& lrs) {
  filter_form_fixed_ = true;  // even if this step throws: it may have filtered the gradient already
  f32_->set_instance(exec);
  f64_->set_instance(exec);
  const std::int64_t f = options_.precondition_frequency;
  const std::int64_t s = options_.start_preconditioning_step.value_or(f);
  std::vector<double> wds(lrs.size()), peaks(lrs.size());
  for (std::size_t g = 0; g < lrs.size(); ++g) {
    wds[g]   = weight_decay(static_cast<int>(g));
    peaks[g] = base_lr(static_cast<int>(g));
  }
  // Each rank works on its own blocks; an error on any rank stops every rank with the same message.
  Kokkos::Timer timer;
  auto lap = [&](double& phase) {
    if (!time_phases_) return;
    Impl::fence(exec, "koptim::Shampoo: phase timing");
    phase += timer.seconds();
    timer.reset();
  };
  std::string error;
  {
    // Nothing has changed yet: a gradient that would overflow a factor is rejected here, on
    // every rank, before any state is touched (under skip_step, the step is skipped).
    Impl::ScopedRegion r("koptim::Shampoo::gather");
    const auto policy = common_options().nonfinite_gradient;
    const bool check  = policy != NonFiniteGradient::unchecked;
    std::string parameter;
    error = f32_->prepare(wds, check, parameter);
    if (error.empty()) error = f64_->prepare(wds, check, parameter);
    if (comm_ && check) {
      // (Unchecked, prepare() refuses nothing: no agreement, no wait.) Every rank has the same
      // gradients but checks only its own blocks: the lowest rank that
      // refused one tells every rank its message and parameter (a name holds no NUL byte), so
      // that every rank skips the step or throws the same NonFiniteError. Over the whole
      // communicator, not the group: groups agreeing each on their own would part ways (one
      // group skipping, or throwing, while the others step) if they were given different
      // gradients.
      const auto first = Impl::agree_on_refusal(*comm_, {error.empty() ? '\0' : 'n', parameter, error});
      if (first.kind != 0) {
        parameter = first.parameter;
        error     = (comm_->size() > 1 ? "rank " + std::to_string(first.rank) + ": " : std::string()) + first.message;
      }
    }
    if (!error.empty()) {
      step_status().refused_parameter = parameter;
      if (policy == NonFiniteGradient::skip_step) {
        step_status().skipped = true;
        return;
      }
      throw NonFiniteError(error);
    }
  }
  // From here on the state changes: an error (below, a root that is not finite or too many failed
  // root computations, found after the factors took this step's gradient) interrupts the
  // optimizer (Optimizer::interrupted()). An error on one rank (a failed allocation in the
  // amortized computation) reaches every rank, in every group, before the all-gather.
  state_changing();
  Impl::run_together(comm_.get(), [&] {
    {
      Impl::ScopedRegion r("koptim::Shampoo::accumulate");
      f32_->accumulate(t);
      f64_->accumulate(t);
      lap(times_.accumulate);
    }
    if ((t % f == 0 && t > s) || t == s) {
      Impl::ScopedRegion r("koptim::Shampoo::amortized_computation");
      f32_->amortized(t);
      f64_->amortized(t);
      step_status().failed_root_computations = f32_->step_failures() + f64_->step_failures();
      step_status().root_fallbacks           = f32_->step_fallbacks() + f64_->step_fallbacks();
      step_status().unconverged_roots        = f32_->step_unconverged() + f64_->step_unconverged();
      lap(times_.amortized_computation);
      ++times_.amortized_computations;
    }
    if (options_.eigenvalue_corrected) {
      Impl::ScopedRegion r("koptim::Shampoo::eigenvalue_correction");
      f32_->correct();
      f64_->correct();
      lap(times_.eigenvalue_correction);
    }
    Impl::ScopedRegion r("koptim::Shampoo::compute_updates");
    f32_->apply(t, lrs, peaks, wds);
    f64_->apply(t, lrs, peaks, wds);
    lap(times_.compute_updates);
  });
  {
    Impl::ScopedRegion r("koptim::Shampoo::all_gather");
    f32_->exchange(group_comm_.get());
    f64_->exchange(group_comm_.get());
    lap(times_.all_gather);
  }
  Impl::ScopedRegion r("koptim::Shampoo::write_back");
  f32_->write_back();
  f64_->write_back();
  lap(times_.write_back);
}

void Shampoo::filter_in_eigenbasis(bool on) {
  if (on != filter_in_eigenbasis_ && filter_form_fixed_)
    throw ConfigError(
        "koptim::Shampoo::filter_in_eigenbasis: only before the first step and before a state is imported (this "
        "optimizer has taken " +
        std::to_string(step_count()) +
        " steps, or began one that threw, or imported a state); the filtered gradient it holds is in one form");
  filter_in_eigenbasis_ = on;
}

Optimizer::StatePart Shampoo::state_part(const std::string& key) const {
  // "<name>/block<b>/<entry>", where the name may itself hold slashes.
  const auto last = key.rfind('/');
  if (last == std::string::npos) return {};
  const auto mark = key.rfind("/block", last);
  if (mark == std::string::npos || mark + 6 >= last) return {};
  const std::string digits = key.substr(mark + 6, last - mark - 6);
  if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) return {};
  const int p = parameters().find(key.substr(0, mark));
  if (p < 0) return {};
  const std::size_t b = std::stoul(digits);
  if (b >= owners_[static_cast<std::size_t>(p)].size() || block_owner(p, b) == group_rank()) return {};
  return {StatePart::none, 0, 0};
}

void Shampoo::export_tensors(OptimizerState& s) const {
  f32_->export_tensors(s);
  f64_->export_tensors(s);
}

Optimizer::StateKeys Shampoo::check_entries(const OptimizerState& s) const {
  StateKeys held;
  f32_->check_entries(s, held);
  f64_->check_entries(s, held);
  return held;
}

void Shampoo::import_tensors(const OptimizerState& s) {
  filter_form_fixed_ = true;
  f32_->import_tensors(s);
  f64_->import_tensors(s);
}

}  // namespace koptim
