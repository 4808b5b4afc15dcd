#include <koptim/diagonal/koptim_ElementwiseOptimizer.hpp>

#include "../comm/koptim_Distributor.hpp"

#include <koptim/comm/koptim_Communicator.hpp>
#include <koptim/core/impl/koptim_Profiling.hpp>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <tuple>

namespace koptim {
namespace Impl {

struct ElementwiseOptimizer::Sharing {
  ParameterSharing<float> f32;
  ParameterSharing<double> f64;
};

namespace {
// The elements of all parameters of type T, concatenated in registration order, cut into one
// slice of ceil(total / ranks) elements per rank: a part for each piece of a parameter in one
// slice, owned by that slice's rank.
template <class T>
ParameterSharing<T> slices(const ParameterSet& ps, const std::string& name, int rank, int ranks) {
  std::int64_t total = 0;
  for (const auto& p : ps.parameters())
    if (p.param.dtype == scalar_type_of<T>()) total += p.param.size;
  const std::int64_t chunk = (total + ranks - 1) / ranks;
  std::vector<ParameterPart> parts;
  std::int64_t start = 0;
  for (std::size_t i = 0; i < ps.size(); ++i) {
    if (ps[i].param.dtype != scalar_type_of<T>()) continue;
    const std::int64_t n = ps[i].param.size;
    for (std::int64_t r = n > 0 ? start / chunk : 0; n > 0 && r <= (start + n - 1) / chunk; ++r) {
      const std::int64_t a = std::max(start, r * chunk), b = std::min(start + ps[i].param.size, (r + 1) * chunk);
      if (a < b) parts.push_back({static_cast<int>(i), a - start, b - a, static_cast<int>(r)});
    }
    start += ps[i].param.size;
  }
  return ParameterSharing<T>("koptim::" + name + "::parameters", std::move(parts), rank, ranks);
}
}  // namespace

ElementwiseOptimizer::~ElementwiseOptimizer() = default;

ElementwiseOptimizer::ElementwiseOptimizer(std::string name, ParameterSet params, CommonOptions common,
                                           std::vector<std::string> slots, std::vector<double> fill,
                                           std::shared_ptr<comm::Communicator> comm,
                                           const std::vector<std::string>& options)
    : Optimizer(std::move(name), std::move(params), std::move(common), comm.get()), slots_(std::move(slots)) {
  if (slots_.size() > 3) throw std::logic_error("koptim::" + this->name() + ": more than 3 state slots per parameter");
  fill.resize(slots_.size(), 0.0);
  const auto& ps = parameters();
  if (comm && comm->size() > 1) {
    comm_ = std::move(comm);
    check_same_on_all_ranks(*comm_, this->name(), describe_parameters(*this, options));
  }
  // This rank's slice of the concatenation of each scalar type: a piece of state per fragment.
  const int ranks = comm_ ? comm_->size() : 1, me = comm_ ? comm_->rank() : 0;
  auto add_piece = [&](std::size_t i, std::int64_t offset, std::int64_t size) {
    Piece pc;
    pc.param  = static_cast<int>(i);
    pc.offset = offset;
    pc.size   = size;
    for (std::size_t s = 0; s < slots_.size(); ++s)
      pc.buffers.emplace_back("koptim::" + ps[i].name + "/" + slots_[s], ps[i].param.dtype, pc.size, fill[s]);
    pieces_.push_back(std::move(pc));
  };
  // The state's allocation (the pieces, the gather's buffers, the runs' device tables), agreed on:
  // a rank whose memory runs out fails every rank's constructor.
  Impl::run_together(comm_.get(), [&] {
    if (!comm_) {
      for (std::size_t i = 0; i < ps.size(); ++i) add_piece(i, 0, ps[i].param.size);
    } else {
      sharing_      = std::make_unique<Sharing>();
      sharing_->f32 = slices<float>(ps, this->name(), me, ranks);
      sharing_->f64 = slices<double>(ps, this->name(), me, ranks);
      auto mine     = [&](const auto& sharing) {
        for (std::size_t k = 0; k < sharing.parts().size(); ++k) {
          const auto& part = sharing.parts()[k];
          if (sharing.mine(k)) add_piece(static_cast<std::size_t>(part.param), part.offset, part.size);
        }
      };
      mine(sharing_->f32);
      mine(sharing_->f64);
      sharing_->f32.prepare(ps);
      sharing_->f64.prepare(ps);
    }
    std::sort(pieces_.begin(), pieces_.end(), [](const Piece& a, const Piece& b) { return a.param < b.param; });
    runs_f32_ = make_runs<float>();
    runs_f64_ = make_runs<double>();
  });
}

template <class T>
std::vector<ElementwiseOptimizer::PieceRun<T>> ElementwiseOptimizer::make_runs() const {
  const auto& ps = parameters();
  std::vector<PieceRun<T>> runs;
  for (int group = 0; group < static_cast<int>(ps.groups().size()); ++group) {
    std::vector<PieceArrays<T>> entries;
    for (const auto& pc : pieces_) {
      const auto& p = ps[pc.param];
      if (p.param.dtype != scalar_type_of<T>() || p.group != group || pc.size == 0) continue;
      PieceArrays<T> e;
      e.w = static_cast<T*>(p.param.data) + pc.offset;
      e.g = static_cast<const T*>(p.grad.data) + pc.offset;
      for (std::size_t s = 0; s < pc.buffers.size(); ++s) e.s[s] = pc.buffers[s].view<T>().data();
      e.size = pc.size;
      entries.push_back(e);
    }
    if (entries.empty()) continue;
    PieceRun<T> run;
    run.group                       = group;
    std::tie(run.table, run.chunks) = make_piece_table("koptim::" + name() + "::pieces", std::move(entries));
    runs.push_back(run);
  }
  return runs;
}

std::size_t ElementwiseOptimizer::state_bytes() const {
  std::size_t n = 0;
  for (const auto& pc : pieces_)
    for (const auto& b : pc.buffers) n += b.bytes();
  return n;
}

void ElementwiseOptimizer::update(const ExecutionSpace& exec, std::int64_t t, const std::vector<double>& lrs) {
  state_changing();  // the gradients were checked: from here on a failure interrupts
  update_pieces(exec, t, lrs);
  if (comm_) {
    ScopedRegion region("koptim::" + name() + "::all_gather_parameters");
    sharing_->f32.share(exec, parameters(), comm_.get());
    sharing_->f64.share(exec, parameters(), comm_.get());
  }
}

std::string ElementwiseOptimizer::key(const Piece& pc, std::size_t slot) const {
  return parameters()[pc.param].name + "/" + slots_[slot];
}

void ElementwiseOptimizer::export_tensors(OptimizerState& state) const {
  const auto& ps = parameters();
  for (const auto& pc : pieces_) {
    for (std::size_t s = 0; s < slots_.size(); ++s) {
      auto& t  = state.tensors[key(pc, s)];
      t        = pc.buffers[s].to_state(sharded() ? std::vector<std::int64_t>{pc.size} : ps[pc.param].param.shape);
      t.layout = Impl::state_layout(ps[pc.param].param);
      if (sharded()) {
        t.whole  = ps[pc.param].param.shape;
        t.offset = pc.offset;
      }
    }
  }
}

Optimizer::StatePart ElementwiseOptimizer::state_part(const std::string& k) const {
  if (!sharded()) return {};
  for (const auto& slot : slots_) {
    const std::string suffix = "/" + slot;
    if (k.size() <= suffix.size() || k.compare(k.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    const int p = parameters().find(k.substr(0, k.size() - suffix.size()));
    if (p < 0) continue;
    for (const auto& pc : pieces_)
      if (pc.param == p) return {StatePart::slice, pc.offset, pc.size};
    return {StatePart::none, 0, 0};
  }
  return {};
}

namespace {
// Second moments and sums of squares: a negative value would make sqrt NaN.
bool nonnegative_slot(const std::string& slot) {
  return slot == "sum" || slot == "square_avg" || slot == "exp_avg_sq" || slot == "max_exp_avg_sq";
}
}  // namespace

Optimizer::StateKeys ElementwiseOptimizer::check_entries(const OptimizerState& state) const {
  StateKeys held;
  const auto& ps = parameters();
  for (const auto& pc : pieces_) {
    for (std::size_t s = 0; s < slots_.size(); ++s) {
      const std::string k = key(pc, s);
      auto it             = state.tensors.find(k);
      // A parameter without elements has no state to restore; a sharded run (where it is in no
      // rank's slice) exports none for it, so its absence is not a missing piece.
      if (it == state.tensors.end() && pc.size == 0) continue;
      if (it == state.tensors.end()) {
        throw StateError("koptim::" + name() + "::import_state: the state has no tensor '" + k + "'");
      }
      const auto& t = it->second;
      if (sharded() ? (t.whole != ps[pc.param].param.shape || t.offset != pc.offset) : !t.whole.empty()) {
        throw StateError("koptim::" + name() + "::import_state: state tensor '" + k + "' is " +
                         (t.whole.empty() ? std::string("a whole tensor")
                                          : "the slice at element " + std::to_string(t.offset) +
                                                " of a tensor of shape " + shape_string(t.whole)) +
                         "; this rank keeps " +
                         (sharded() ? "the slice at element " + std::to_string(pc.offset) + " of shape " +
                                          shape_string(ps[pc.param].param.shape)
                                    : std::string("the whole tensor")) +
                         " (a state saved on another rank or number of ranks?)");
      }
      pc.buffers[s].check(t, k);
      // The exact shape, not only the element count: a transposed tensor is another tensor.
      const std::vector<std::int64_t> shape = sharded() ? std::vector<std::int64_t>{pc.size} : ps[pc.param].param.shape;
      if (t.shape != shape) {
        throw StateError(
            "koptim::" + name() + "::import_state: state tensor '" + k + "' has shape " + shape_string(t.shape) +
            ", expected " + shape_string(shape) +
            (sharded() ? " (this rank's slice)" : " (the shape of parameter '" + ps[pc.param].name + "')"));
      }
      check_layout(t, state_layout(ps[pc.param].param), "koptim::" + name() + "::import_state", k, ps[pc.param].name);
      check_values(t, k, nonnegative_slot(slots_[s]));
      if (first_step_sets_slots_ && state.integers.at("step") == 0) {
        check_zeros(t, "koptim::" + name() + "::import_state", k,
                    " in a state at step 0; allowed there: zeros (the first step sets it from the gradient without "
                    "reading it, so a value held before any step would be discarded)");
      }
      held.tensors.insert(k);
    }
  }
  return held;
}

void ElementwiseOptimizer::import_tensors(const OptimizerState& state) {
  for (auto& pc : pieces_)
    for (std::size_t s = 0; s < slots_.size(); ++s) {
      const auto it = state.tensors.find(key(pc, s));
      if (it != state.tensors.end()) pc.buffers[s].assign(it->second);  // absent: no elements (check_entries)
    }
}

}  // namespace Impl
}  // namespace koptim
