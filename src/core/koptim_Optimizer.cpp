#include <koptim/comm/koptim_Communicator.hpp>

#include "../config/koptim_KeyRanges.hpp"
#include <koptim/core/koptim_Check.hpp>
#include <koptim/core/koptim_Math.hpp>
#include <koptim/core/koptim_Optimizer.hpp>
#include <koptim/core/koptim_Profiling.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <type_traits>

namespace koptim {

Optimizer::Optimizer(std::string name, ParameterSet params, CommonOptions common)
    : name_(std::move(name)), params_(std::move(params)), common_(std::move(common)) {
  if (params_.empty()) throw ShapeError("koptim::" + name_ + ": the ParameterSet has no parameters");
  Impl::require(name_, "lr", common_.lr, Impl::ranges::lr);
  Impl::require(name_, "weight_decay", common_.weight_decay, Impl::ranges::weight_decay);
}

double Optimizer::base_lr(int group) const {
  const auto& g = params_.groups().at(group);
  return g.options.lr ? *g.options.lr : common_.lr;
}

double Optimizer::weight_decay(int group) const {
  const auto& g = params_.groups().at(group);
  return g.options.weight_decay ? *g.options.weight_decay : common_.weight_decay;
}

double Optimizer::lr(int group) const { return base_lr(group) * common_.lr_schedule.factor(step_ + 1); }

namespace Impl {

template <class T>
T largest_squarable() {
  // sqrt(max) = 2^(max_exponent / 2) sqrt(1 - 2^-digits) for IEEE binary formats: the largest
  // T below it is the one just below 2^(max_exponent / 2), and its square rounds to a finite T.
  return std::nextafter(std::ldexp(T(1), std::numeric_limits<T>::max_exponent / 2), T(0));
}
template float largest_squarable<float>();
template double largest_squarable<double>();

namespace {
// A named template, not a generic lambda: CUDA does not allow device lambdas inside generic
// lambdas or functions with deduced return types. Counts the entries whose magnitude bits exceed
// `limit`: NaN and Inf always, and finite values above the limit's value.
template <class T>
GradientCheck check_gradient_of(const TensorRef& t, const T limit_value) {
  using Bits       = decltype(magnitude_bits(T{}));
  const Bits limit = magnitude_bits(limit_value);
  const auto x     = t.flat<T>();
  GradientCheck r;
  std::int64_t bad = 0;
  if (std::is_same<ExecutionSpace::memory_space, Kokkos::HostSpace>::value) {
    // On CPUs, contiguous chunks with a small inner count vectorize and stream well (about
    // twice the rate of one reduction step per element).
    constexpr std::int64_t chunk = 64;
    const std::int64_t n = t.size, chunks = (n + chunk - 1) / chunk;
    Kokkos::parallel_reduce(
        "koptim::check_gradient", Kokkos::RangePolicy<ExecutionSpace>(0, chunks),
        KOKKOS_LAMBDA(const std::int64_t c, std::int64_t& acc) {
          const std::int64_t lo = c * chunk, hi = lo + chunk < n ? lo + chunk : n;
          int k = 0;
          for (std::int64_t i = lo; i < hi; ++i) k += magnitude_bits(x(i)) > limit ? 1 : 0;
          acc += k;
        },
        bad);
  } else {
    Kokkos::parallel_reduce(
        "koptim::check_gradient", Kokkos::RangePolicy<ExecutionSpace>(0, t.size),
        KOKKOS_LAMBDA(const std::int64_t i, std::int64_t& n) { n += magnitude_bits(x(i)) > limit ? 1 : 0; }, bad);
  }
  r.refused = bad;
  if (bad > 0) {
    // Rare path: the first offending entry and the number of non-finite ones, for the message.
    std::int64_t first = t.size, nonfinite = 0;
    Kokkos::parallel_reduce(
        "koptim::first_refused", Kokkos::RangePolicy<ExecutionSpace>(0, t.size),
        KOKKOS_LAMBDA(const std::int64_t i, std::int64_t& m) {
          if (magnitude_bits(x(i)) > limit && i < m) m = i;
        },
        Kokkos::Min<std::int64_t>(first));
    Kokkos::parallel_reduce(
        "koptim::count_nonfinite", Kokkos::RangePolicy<ExecutionSpace>(0, t.size),
        KOKKOS_LAMBDA(const std::int64_t i, std::int64_t& n) { n += is_finite(x(i)) ? 0 : 1; }, nonfinite);
    T value{};
    Kokkos::deep_copy(Kokkos::View<T, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(&value),
                      Kokkos::subview(x, first));
    r.first       = first;
    r.nonfinite   = nonfinite;
    r.first_value = static_cast<double>(value);
  }
  return r;
}
}  // namespace

GradientCheck check_gradient(const TensorRef& t, bool squares) {
  if (t.dtype == ScalarType::float32)
    return check_gradient_of<float>(t, squares ? largest_squarable<float>() : std::numeric_limits<float>::max());
  return check_gradient_of<double>(t, squares ? largest_squarable<double>() : std::numeric_limits<double>::max());
}

std::pair<std::int64_t, std::int64_t> count_nonfinite(const TensorRef& t) {
  const auto r = check_gradient(t, false);
  return std::make_pair(r.refused, r.first);
}

}  // namespace Impl

bool Optimizer::check_gradients() {
  if (common_.nonfinite_gradient == NonFiniteGradient::unchecked) return true;
  for (const auto& p : params_.parameters()) {
    const auto bad = Impl::check_gradient(p.grad, refuse_squares_);
    if (bad.refused == 0) continue;
    status_.refused_values    = bad.refused;
    status_.refused_parameter = p.name;
    if (common_.nonfinite_gradient == NonFiniteGradient::skip_step) return false;
    std::ostringstream msg;
    msg.precision(9);
    msg << "koptim::" << name_ << "::step: the gradient of parameter '" << p.name << "' (shape "
        << shape_string(p.grad.shape) << ") has ";
    const std::int64_t large = bad.refused - bad.nonfinite;
    if (bad.nonfinite > 0) msg << bad.nonfinite << " non-finite value(s)";
    if (bad.nonfinite > 0 && large > 0) msg << " and ";
    if (large > 0) {
      const bool f = p.grad.dtype == ScalarType::float32;
      msg << large << " value(s) whose square overflows " << (f ? "float" : "double") << " (|g| > "
          << (f ? static_cast<double>(Impl::largest_squarable<float>()) : Impl::largest_squarable<double>())
          << "; it would put Inf in the second moment and freeze the parameter)";
    }
    msg << ", the first at flat index " << bad.first << " (value " << bad.first_value
        << "); nothing was updated (set nonfinite_gradient = skip_step to skip such steps)";
    throw NonFiniteError(msg.str());
  }
  return true;
}

void Optimizer::step() {
  Impl::ScopedRegion region("koptim::" + name_ + "::step");
  status_      = StepStatus();
  status_.step = step_;
  if (step_ >= max_step_count || skipped_ >= max_step_count) {
    throw Error("koptim::" + name_ + "::step: the step counter (" + std::to_string(step_) + " steps taken, " +
                std::to_string(skipped_) + " skipped) is at its limit, max_step_count = 2^53 = " +
                std::to_string(max_step_count) + "; nothing was updated");
  }
  if (!check_gradients()) {
    ++skipped_;
    status_.skipped = true;
    return;
  }
  const std::int64_t t = step_ + 1;
  std::vector<double> lrs(params_.groups().size());
  for (std::size_t g = 0; g < lrs.size(); ++g) lrs[g] = base_lr(static_cast<int>(g)) * common_.lr_schedule.factor(t);
  update(t, lrs);
  if (status_.skipped) {
    ++skipped_;
    return;
  }
  step_         = t;
  status_.step  = t;
  status_.taken = true;
}

OptimizerState Optimizer::export_state() const {
  Impl::ScopedRegion region("koptim::" + name_ + "::export_state");
  OptimizerState s;
  s.optimizer                 = name_;
  s.integers["step"]          = step_;
  s.integers["skipped_steps"] = skipped_;
  export_tensors(s);
  return s;
}

void Optimizer::import_state(const OptimizerState& s) {
  Impl::ScopedRegion region("koptim::" + name_ + "::import_state");
  check_state(s);
  import_tensors(s);
  step_    = s.integers.at("step");
  skipped_ = s.integers.at("skipped_steps");
}

Optimizer::StatePart Optimizer::state_part(const std::string&) const { return {}; }

void Impl::set_configuration(Optimizer& opt, std::string xml) { opt.configuration_ = std::move(xml); }

void Optimizer::check_state(const OptimizerState& s) const {
  if (s.optimizer != name_) {
    throw StateError("koptim::" + name_ + "::import_state: the state belongs to optimizer '" + s.optimizer +
                     "', not '" + name_ + "'");
  }
  for (const char* key : {"step", "skipped_steps"}) {
    auto it = s.integers.find(key);
    if (it == s.integers.end()) {
      throw StateError("koptim::" + name_ + "::import_state: the state has no integer '" + key + "'");
    }
    if (it->second < 0) {
      throw StateError("koptim::" + name_ + "::import_state: integer '" + key + "' = " + std::to_string(it->second) +
                       " is negative");
    }
    if (it->second > max_step_count) {
      throw StateError("koptim::" + name_ + "::import_state: integer '" + key + "' = " + std::to_string(it->second) +
                       " is not allowed; allowed: 0 to max_step_count = 2^53 = " + std::to_string(max_step_count) +
                       " (step counters are used as doubles, exact up to 2^53)");
    }
  }
  check_tensors(s);
}

namespace Impl {

void check_same_on_all_ranks(const comm::Communicator& comm, const std::string& optimizer,
                             const std::string& descriptor) {
  if (!comm.same_on_all_ranks(descriptor)) {
    throw ConfigError("koptim::" + optimizer +
                      ": the ranks of the communicator disagree on the parameters (names, shapes, scalar types, "
                      "layouts, groups) or on the configuration; every rank must build the same optimizer. Rank " +
                      std::to_string(comm.rank()) + " has: " + descriptor);
  }
}

std::string describe_parameters(const Optimizer& opt) {
  std::ostringstream d;
  d.precision(17);
  const auto& ps = opt.parameters();
  for (std::size_t i = 0; i < ps.size(); ++i) {
    const auto& p = ps[i];
    d << p.name << ' ' << to_string(p.param.dtype) << ' ' << shape_string(p.param.shape) << ' '
      << (p.param.layout_right ? "right" : "left") << " group " << p.group << " lr " << opt.base_lr(p.group) << " wd "
      << opt.weight_decay(p.group) << "; ";
  }
  const auto& c = opt.common_options();
  d << "schedule " << c.lr_schedule.describe() << "; nonfinite " << static_cast<int>(c.nonfinite_gradient);
  return d.str();
}

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

void check_values(const StateTensor& t, const std::string& key, bool nonnegative) {
  dispatch(t.dtype, [&](auto zero) {
    using T              = decltype(zero);
    const std::int64_t n = static_cast<std::int64_t>(t.data.size() / sizeof(T));
    for (std::int64_t i = 0; i < n; ++i) {
      T x;
      std::memcpy(&x, t.data.data() + i * sizeof(T), sizeof(T));
      // is_finite first: an ordered comparison with NaN would raise FE_INVALID.
      if (!is_finite(x) || (nonnegative && x < T(0))) {
        std::ostringstream s;
        s << "koptim: state tensor '" << key << "' has value " << x << " at flat index " << i
          << "; allowed: " << (nonnegative ? "finite values >= 0" : "finite values");
        throw StateError(s.str());
      }
    }
  });
}

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
