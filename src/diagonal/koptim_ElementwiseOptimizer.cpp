#include <koptim/diagonal/koptim_ElementwiseOptimizer.hpp>

#include <koptim/comm/koptim_Communicator.hpp>
#include <koptim/core/koptim_Profiling.hpp>

#include <algorithm>
#include <cstring>

namespace koptim {
namespace Impl {

ElementwiseOptimizer::ElementwiseOptimizer(std::string name, ParameterSet params, CommonOptions common,
                                           std::vector<std::string> slots, std::vector<double> fill,
                                           std::shared_ptr<comm::Communicator> comm,
                                           const std::string& options_descriptor)
    : Optimizer(std::move(name), std::move(params), std::move(common)), slots_(std::move(slots)) {
  fill.resize(slots_.size(), 0.0);
  const auto& ps = parameters();
  if (comm && comm->size() > 1) {
    comm_ = std::move(comm);
    check_same_on_all_ranks(*comm_, this->name(), describe_parameters(*this) + "; " + options_descriptor);
  }
  // Elements per rank for each scalar type, and this rank's slice of the concatenation.
  const int ranks = comm_ ? comm_->size() : 1, me = comm_ ? comm_->rank() : 0;
  for (int k = 0; k < 2; ++k) {
    const ScalarType type = k == 0 ? ScalarType::float32 : ScalarType::float64;
    std::int64_t total    = 0;
    for (const auto& p : ps.parameters())
      if (p.param.dtype == type) total += p.param.size;
    chunk_[k]             = (total + ranks - 1) / ranks;
    const std::int64_t lo = std::min(total, me * chunk_[k]), hi = std::min(total, lo + chunk_[k]);
    std::int64_t start = 0;
    for (std::size_t i = 0; i < ps.size(); ++i) {
      if (ps[i].param.dtype != type) continue;
      const std::int64_t a = std::max(lo, start), b = std::min(hi, start + ps[i].param.size);
      if (a < b || (ps[i].param.size == 0 && a == b && !comm_)) {
        Piece pc;
        pc.param  = static_cast<int>(i);
        pc.offset = a - start;
        pc.size   = b - a;
        for (std::size_t s = 0; s < slots_.size(); ++s)
          pc.buffers.emplace_back("koptim::" + ps[i].name + "/" + slots_[s], type, pc.size, fill[s]);
        pieces_.push_back(std::move(pc));
      }
      start += ps[i].param.size;
    }
  }
  std::sort(pieces_.begin(), pieces_.end(), [](const Piece& a, const Piece& b) { return a.param < b.param; });
}

std::size_t ElementwiseOptimizer::state_bytes() const {
  std::size_t n = 0;
  for (const auto& pc : pieces_)
    for (const auto& b : pc.buffers) n += b.bytes();
  return n;
}

namespace {
// Every rank's slice of the parameters of type T (chunk elements per rank of their
// concatenation) to every rank. A free function: CUDA does not allow device lambdas in private
// member functions.
template <class T>
void gather_parameters(const ParameterSet& ps, const comm::Communicator& comm, const std::int64_t chunk) {
  if (chunk == 0) return;
  Kokkos::View<T*, MemorySpace> send("koptim::shard_send", chunk), recv("koptim::shard_recv", chunk * comm.size());
  const std::int64_t lo = comm.rank() * chunk;
  std::int64_t start    = 0;
  for (std::size_t i = 0; i < ps.size(); ++i) {
    if (ps[i].param.dtype != scalar_type_of<T>()) continue;
    const std::int64_t a = std::max(lo, start), b = std::min(lo + chunk, start + ps[i].param.size);
    if (a < b) {
      const auto w            = ps[i].param.template flat<T>();
      const std::int64_t from = a - start, to = a - lo;
      Kokkos::parallel_for(
          "koptim::shard_pack", Kokkos::RangePolicy<ExecutionSpace>(0, b - a),
          KOKKOS_LAMBDA(const std::int64_t e) { send(to + e) = w(from + e); });
    }
    start += ps[i].param.size;
  }
  comm.all_gather(Kokkos::View<const T*, MemorySpace>(send), recv);
  start = 0;
  for (std::size_t i = 0; i < ps.size(); ++i) {
    if (ps[i].param.dtype != scalar_type_of<T>()) continue;
    const auto w             = ps[i].param.template flat<T>();
    const std::int64_t first = start;
    Kokkos::parallel_for(
        "koptim::shard_unpack", Kokkos::RangePolicy<ExecutionSpace>(0, ps[i].param.size),
        KOKKOS_LAMBDA(const std::int64_t e) { w(e) = recv(first + e); });
    start += ps[i].param.size;
  }
}
}  // namespace

void ElementwiseOptimizer::update(std::int64_t t, const std::vector<double>& lrs) {
  update_pieces(t, lrs);
  if (comm_) {
    ScopedRegion region("koptim::" + name() + "::all_gather_parameters");
    gather_parameters<float>(parameters(), *comm_, chunk_[0]);
    gather_parameters<double>(parameters(), *comm_, chunk_[1]);
  }
}

std::string ElementwiseOptimizer::key(const Piece& pc, std::size_t slot) const {
  return parameters()[pc.param].name + "/" + slots_[slot];
}

void ElementwiseOptimizer::export_tensors(OptimizerState& state) const {
  const auto& ps = parameters();
  for (const auto& pc : pieces_) {
    for (std::size_t s = 0; s < slots_.size(); ++s) {
      auto& t = state.tensors[key(pc, s)];
      t       = pc.buffers[s].to_state(sharded() ? std::vector<std::int64_t>{pc.size} : ps[pc.param].param.shape);
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

void ElementwiseOptimizer::check_tensors(const OptimizerState& state) const {
  const auto& ps     = parameters();
  std::size_t expect = 0;
  for (const auto& pc : pieces_) {
    for (std::size_t s = 0; s < slots_.size(); ++s) {
      const std::string k = key(pc, s);
      auto it             = state.tensors.find(k);
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
      check_values(t, k, nonnegative_slot(slots_[s]));
      ++expect;
    }
  }
  if (state.tensors.size() != expect) {
    for (const auto& kv : state.tensors) {
      bool known = false;
      for (const auto& pc : pieces_)
        for (std::size_t s = 0; s < slots_.size(); ++s) known = known || key(pc, s) == kv.first;
      if (!known) {
        throw StateError("koptim::" + name() + "::import_state: the state has tensor '" + kv.first +
                         "', which belongs to no parameter and slot of this optimizer");
      }
    }
  }
}

void ElementwiseOptimizer::import_tensors(const OptimizerState& state) {
  for (auto& pc : pieces_)
    for (std::size_t s = 0; s < slots_.size(); ++s) pc.buffers[s].assign(state.tensors.at(key(pc, s)));
}

}  // namespace Impl
}  // namespace koptim
