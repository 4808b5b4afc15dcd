#include <koptim/core/koptim_Optimizer.hpp>
#include <koptim/core/impl/koptim_Elementwise.hpp>

#include "../comm/koptim_Distributor.hpp"
#include "../config/koptim_KeyRanges.hpp"

#include "koptim_Check.hpp"
#include <koptim/core/impl/koptim_Math.hpp>
#include <koptim/core/impl/koptim_Profiling.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <type_traits>

namespace koptim {

const ParameterGroup& Optimizer::group(int group, const char* what) const {
  const auto& groups = params_.groups();
  if (group < 0 || static_cast<std::size_t>(group) >= groups.size()) {
    throw ConfigError("koptim::" + name_ + "::" + what + ": group " + std::to_string(group) +
                      " does not exist; allowed: 0 to " + std::to_string(static_cast<long>(groups.size()) - 1) +
                      " (the parameter set's groups)");
  }
  return groups[static_cast<std::size_t>(group)];
}

double Optimizer::base_lr(int group) const {
  const auto& g = this->group(group, "base_lr");
  return g.options.lr ? *g.options.lr : *common_.lr;
}

double Optimizer::weight_decay(int group) const {
  const auto& g = this->group(group, "weight_decay");
  return g.options.weight_decay ? *g.options.weight_decay : *common_.weight_decay;
}

double Optimizer::lr(int group) const {
  this->group(group, "lr");
  return base_lr(group) * common_.lr_schedule.factor(step_ + 1);
}

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
// Elements per chunk: a CPU thread's vectorized pass, a GPU team's range.
constexpr std::int64_t gradient_chunk = 2048;

// The entries of x[lo, hi) whose magnitude bits exceed `limit`. On CPUs, first the chunk's
// largest magnitude bits (an unsigned maximum: one vector instruction per register of elements),
// compared with the limit once; only a chunk over it is counted element by element. Vectorizes
// fully; a count per element did not.
template <class T, class Bits>
KOKKOS_INLINE_FUNCTION std::int64_t count_over(const T* x, std::int64_t lo, std::int64_t hi, Bits limit) {
  Bits m = 0;
  for (std::int64_t i = lo; i < hi; ++i) {
    const Bits b = magnitude_bits(x[i]);
    m            = b > m ? b : m;
  }
  std::int64_t n = 0;
  if (m > limit)
    for (std::int64_t i = lo; i < hi; ++i) n += magnitude_bits(x[i]) > limit ? 1 : 0;
  return n;
}

// A named template, not a generic lambda: CUDA does not allow device lambdas inside generic
// lambdas or functions with deduced return types. Counts the entries whose magnitude bits exceed
// `limit`: NaN and Inf always, and finite values above the limit's value.
template <class T>
GradientCheck check_gradient_of(const ExecutionSpace& exec, const TensorRef& t, const T limit_value) {
  using Bits       = decltype(magnitude_bits(T{}));
  const Bits limit = magnitude_bits(limit_value);
  const auto x     = t.flat<T>();
  GradientCheck r;
  std::int64_t bad = 0;
  if (std::is_same<ExecutionSpace::memory_space, Kokkos::HostSpace>::value) {
    // On CPUs, a chunk per iteration, one vectorized pass.
    const std::int64_t n = t.size, chunks = (n + gradient_chunk - 1) / gradient_chunk;
    const T* data = x.data();
    Kokkos::parallel_reduce(
        "koptim::check_gradient", Kokkos::RangePolicy<ExecutionSpace>(exec, 0, chunks),
        KOKKOS_LAMBDA(const std::int64_t c, std::int64_t& acc) {
          const std::int64_t lo = c * gradient_chunk, hi = lo + gradient_chunk < n ? lo + gradient_chunk : n;
          acc += count_over(data, lo, hi, limit);
        },
        bad);
  } else {
    Kokkos::parallel_reduce(
        "koptim::check_gradient", Kokkos::RangePolicy<ExecutionSpace>(exec, 0, t.size),
        KOKKOS_LAMBDA(const std::int64_t i, std::int64_t& n) { n += magnitude_bits(x(i)) > limit ? 1 : 0; }, bad);
  }
  r.refused = bad;
  if (bad > 0) {
    // Rare path: the first offending entry and the number of non-finite ones, for the message.
    std::int64_t first = t.size, nonfinite = 0;
    Kokkos::parallel_reduce(
        "koptim::first_refused", Kokkos::RangePolicy<ExecutionSpace>(exec, 0, t.size),
        KOKKOS_LAMBDA(const std::int64_t i, std::int64_t& m) {
          if (magnitude_bits(x(i)) > limit && i < m) m = i;
        },
        Kokkos::Min<std::int64_t>(first));
    Kokkos::parallel_reduce(
        "koptim::count_nonfinite", Kokkos::RangePolicy<ExecutionSpace>(exec, 0, t.size),
        KOKKOS_LAMBDA(const std::int64_t i, std::int64_t& n) { n += is_finite(x(i)) ? 0 : 1; }, nonfinite);
    T value{};
    Kokkos::deep_copy(exec, Kokkos::View<T, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(&value),
                      Kokkos::subview(x, first));
    Impl::fence(exec, "koptim::check_gradient: the first refused value");
    r.first       = first;
    r.nonfinite   = nonfinite;
    r.first_value = static_cast<double>(value);
  }
  return r;
}
}  // namespace

GradientCheck check_gradient(const TensorRef& t, bool squares, const ExecutionSpace& exec) {
  if (t.dtype == ScalarType::float32)
    return check_gradient_of<float>(exec, t, squares ? largest_squarable<float>() : std::numeric_limits<float>::max());
  return check_gradient_of<double>(exec, t, squares ? largest_squarable<double>() : std::numeric_limits<double>::max());
}

std::pair<std::int64_t, std::int64_t> count_nonfinite(const TensorRef& t, const ExecutionSpace& exec) {
  const auto r = check_gradient(t, false, exec);
  return std::make_pair(r.refused, r.first);
}

}  // namespace Impl

namespace Impl {
namespace {
// Where chunk c of the concatenated gradients lies: the gradient whose range of chunks holds it.
struct GradientEntry {
  const void* data;
  std::int64_t size;
  std::int64_t first_chunk;  // chunks of gradient_chunk elements before this gradient's
  int is_double;
};
// The number of refused values over every gradient of the table: one kernel, one value back to
// the host. (A free function: CUDA allows no device lambda in a member of a private class.)
std::int64_t count_refused(const ExecutionSpace& exec, const Kokkos::View<GradientEntry*, MemorySpace>& e,
                           std::int64_t chunks, bool squares) {
  const auto limit_f = magnitude_bits(squares ? largest_squarable<float>() : std::numeric_limits<float>::max());
  const auto limit_d = magnitude_bits(squares ? largest_squarable<double>() : std::numeric_limits<double>::max());
  std::int64_t bad   = 0;
  if (std::is_same<ExecutionSpace::memory_space, Kokkos::HostSpace>::value) {
    // CPUs: a chunk per iteration, one vectorized pass.
    Kokkos::parallel_reduce(
        "koptim::check_gradients", Kokkos::RangePolicy<ExecutionSpace>(exec, 0, chunks),
        KOKKOS_LAMBDA(const std::int64_t c, std::int64_t& acc) {
          const GradientEntry& g   = chunk_entry(e, 0, static_cast<std::int64_t>(e.extent(0)), c);
          const std::int64_t begin = (c - g.first_chunk) * gradient_chunk;
          const std::int64_t end   = begin + gradient_chunk < g.size ? begin + gradient_chunk : g.size;
          acc += g.is_double ? count_over(static_cast<const double*>(g.data), begin, end, limit_d)
                             : count_over(static_cast<const float*>(g.data), begin, end, limit_f);
        },
        bad);
  } else {
    // GPUs: a team per chunk, consecutive threads on consecutive elements.
    using TeamPolicy = Kokkos::TeamPolicy<ExecutionSpace>;
    Kokkos::parallel_reduce(
        "koptim::check_gradients", TeamPolicy(exec, static_cast<int>(chunks), Kokkos::AUTO),
        KOKKOS_LAMBDA(const TeamPolicy::member_type& team, std::int64_t& acc) {
          const std::int64_t c     = team.league_rank();
          const GradientEntry& g   = chunk_entry(e, 0, static_cast<std::int64_t>(e.extent(0)), c);
          const std::int64_t begin = (c - g.first_chunk) * gradient_chunk;
          const std::int64_t end   = begin + gradient_chunk < g.size ? begin + gradient_chunk : g.size;
          std::int64_t part        = 0;
          Kokkos::parallel_reduce(
              Kokkos::TeamThreadRange(team, begin, end),
              [&](const std::int64_t i, std::int64_t& n) {
                n += g.is_double ? (magnitude_bits(static_cast<const double*>(g.data)[i]) > limit_d ? 1 : 0)
                                 : (magnitude_bits(static_cast<const float*>(g.data)[i]) > limit_f ? 1 : 0);
              },
              part);
          Kokkos::single(Kokkos::PerTeam(team), [&]() { acc += part; });
        },
        bad);
  }
  return bad;
}
}  // namespace
}  // namespace Impl

struct Optimizer::GradientTable {
  Kokkos::View<Impl::GradientEntry*, MemorySpace> entries;
  std::int64_t chunks = 0;

  explicit GradientTable(const ParameterSet& ps) {
    std::vector<Impl::GradientEntry> h;
    for (const auto& p : ps.parameters()) {
      if (p.grad.size == 0) continue;
      h.push_back({p.grad.data, p.grad.size, chunks, p.grad.dtype == ScalarType::float64 ? 1 : 0});
      chunks += (p.grad.size + Impl::gradient_chunk - 1) / Impl::gradient_chunk;
    }
    entries = Impl::device_table("koptim::gradient_table", h);
  }

  std::int64_t refused(const ExecutionSpace& exec, bool squares) const {
    return Impl::count_refused(exec, entries, chunks, squares);
  }
};

Optimizer::Optimizer(std::string name, ParameterSet params, CommonOptions common)
    : Optimizer(std::move(name), std::move(params), std::move(common), nullptr) {}

Optimizer::Optimizer(std::string name, ParameterSet params, CommonOptions common, const comm::Communicator* agree_with)
    : name_(std::move(name)), params_(std::move(params)), common_(std::move(common)) {
  Impl::run_together(agree_with, [&] {
    // Kokkos' own error for an allocation outside initialize/finalize is a bare std::runtime_error.
    if (!Kokkos::is_initialized()) {
      throw Error("koptim::" + name_ +
                  ": Kokkos is not initialized: create optimizers after Kokkos::initialize and destroy them (and "
                  "their ParameterSets) before Kokkos::finalize");
    }
    if (params_.empty()) throw ShapeError("koptim::" + name_ + ": the ParameterSet has no parameters");
    // koptim's optimizers fill in their defaults (Impl::with_defaults); an optimizer of another
    // library built on this class must give both.
    for (const auto* v : {&common_.lr, &common_.weight_decay})
      if (!*v)
        throw ConfigError("koptim::" + name_ + ": CommonOptions::" + (v == &common_.lr ? "lr" : "weight_decay") +
                          " is not set, and this optimizer has no default for it");
    Impl::require(name_, "lr", *common_.lr, Impl::ranges::lr);
    Impl::require(name_, "weight_decay", *common_.weight_decay, Impl::ranges::weight_decay);
    // The kernels round lr and weight_decay (or values made of them) to the parameter's type:
    // beyond the largest float they are Inf for a float parameter. (Values made of them, such as
    // lr / (1 - b1^t), can still overflow with extreme settings; not checked.)
    for (const auto& p : params_.parameters()) {
      if (p.param.dtype != ScalarType::float32) continue;
      const std::string group = " of group '" + params_.groups().at(p.group).name + "'";
      Impl::require_within_float(name_, "lr", base_lr(p.group), group, p.name);
      Impl::require_within_float(name_, "weight_decay", weight_decay(p.group), group, p.name);
    }
    // The gradient check's table, here at set-up: built at the first step, its copy to the device
    // would wait on every instance (a global fence) in a step on the caller's instance.
    if (common_.nonfinite_gradient != NonFiniteGradient::unchecked)
      gradient_table_ = std::make_shared<GradientTable>(params_);
  });
}

bool Optimizer::check_gradients(const ExecutionSpace& exec) {
  if (common_.nonfinite_gradient == NonFiniteGradient::unchecked) return true;
  // One kernel over all gradients; only when it refuses something, the per-parameter checks that
  // say which parameter, how many values and the first.
  if (gradient_table_->refused(exec, refuse_squares_) == 0) return true;
  for (const auto& p : params_.parameters()) {
    const auto bad = Impl::check_gradient(p.grad, refuse_squares_, exec);
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

// With the state distributed over ranks, a step is taken or refused on every rank alike: a
// gradient refused on one rank (its own copy of the gradients, not averaged) throws the same
// NonFiniteError on every rank, or skips the step on every rank, and a rank whose optimizer is
// interrupted refuses the step on every rank, instead of leaving the others in the step's
// collectives. One host collective per step, with unchecked gradients too (it then carries only
// the interruption, a host flag: no wait on the device).
const comm::Communicator* Optimizer::check_agreement() const {
  const comm::Communicator* comm = step_communicator();
  return comm && comm->size() > 1 ? comm : nullptr;
}

bool Optimizer::checked_on_every_rank(const ExecutionSpace& exec) {
  const comm::Communicator* comm = check_agreement();
  if (!comm) return check_gradients(exec);
  // Any other error of the check ('x': a Kokkos error) is agreed on too.
  Impl::Refusal mine;
  try {
    // An interrupted rank refuses here, in the agreement, so that every rank refuses with it
    // (an interruption on one rank alone: its import_state() failed).
    if (!interrupted_.empty())
      mine = {'x', "", refused_after_interruption("step")};
    else if (!check_gradients(exec))
      mine = {'s', status_.refused_parameter, ""};
  } catch (const NonFiniteError& e) {
    mine = {'n', status_.refused_parameter, e.what()};
  } catch (const std::exception& e) {
    mine = {'x', "", e.what()};
  }
  const auto first = Impl::agree_on_refusal(*comm, mine);
  if (first.kind == 0) return true;
  const std::string rank = "rank " + std::to_string(first.rank) + ": ";
  if (first.kind == 'x') throw Error(rank + first.message);
  // The rank whose gradients passed names the refused parameter as "rank R: <name>".
  if (mine.kind == 0) status_.refused_parameter = rank + first.parameter;
  if (first.kind == 'n') throw NonFiniteError(rank + first.message);
  return false;
}

template <class F, class Call>
void Optimizer::interrupting_on_throw(F&& f, Call&& call, const bool& armed) {
  try {
    f();
  } catch (const std::exception& e) {
    if (armed) interrupt(call(), e.what());
    throw;
  } catch (...) {
    if (armed) interrupt(call(), "");
    throw;
  }
}

void Optimizer::step(const ExecutionSpace& exec) {
  Impl::ScopedRegion region("koptim::" + name_ + "::step");
  // Refused at once where no rank waits for this one; else in the gradient check's agreement.
  if (!interrupted_.empty() && !check_agreement()) throw Error(refused_after_interruption("step"));
  status_      = StepStatus();
  status_.step = step_;
  if (step_ >= max_step_count || skipped_ >= max_step_count) {
    throw Error("koptim::" + name_ + "::step: the step counter (" + std::to_string(step_) + " steps taken, " +
                std::to_string(skipped_) + " skipped) is at its limit, max_step_count = 2^53 = " +
                std::to_string(max_step_count) + "; nothing was updated");
  }
  if (!checked_on_every_rank(exec)) {
    ++skipped_;
    status_.skipped = true;
    return;
  }
  const std::int64_t t = step_ + 1;
  std::vector<double> lrs(params_.groups().size());
  for (std::size_t g = 0; g < lrs.size(); ++g) lrs[g] = base_lr(static_cast<int>(g)) * common_.lr_schedule.factor(t);
  changing_ = false;
  interrupting_on_throw([&] { update(exec, t, lrs); }, [&] { return "step " + std::to_string(t); }, changing_);
  if (status_.skipped) {
    ++skipped_;
    return;
  }
  step_         = t;
  status_.step  = t;
  status_.taken = true;
}

void Optimizer::interrupt(const std::string& call, const std::string& error) {
  interrupted_ = call + " threw after it had begun to change the optimizer state, which is therefore no step's (" +
                 (error.empty() ? std::string("an exception without a message") : "the error: " + error) + ")";
}

std::string Optimizer::refused_after_interruption(const std::string& what) const {
  return "koptim::" + name_ + "::" + what + ": refused: " + interrupted_ +
         "; import_state() a saved state, or load a checkpoint, first";
}

OptimizerState Optimizer::export_state() const {
  Impl::ScopedRegion region("koptim::" + name_ + "::export_state");
  if (!interrupted_.empty()) throw Error(refused_after_interruption("export_state"));
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
  // The checks passed: the tensors are written in place, one after the other, so a failure from
  // here on (memory, a device copy) leaves some of them new.
  interrupting_on_throw([&] { import_tensors(s); }, [] { return std::string("import_state"); }, true);
  step_    = s.integers.at("step");
  skipped_ = s.integers.at("skipped_steps");
  interrupted_.clear();
}

Optimizer::StatePart Optimizer::state_part(const std::string&) const { return {}; }

void Impl::set_configuration(Optimizer& opt, std::string xml) { opt.configuration_ = std::move(xml); }

void Impl::interrupt(Optimizer& opt, const std::string& call, const std::string& error) { opt.interrupt(call, error); }

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
  StateKeys keys = check_entries(s);
  keys.integers.insert({"step", "skipped_steps"});
  // A tensor this rank keeps whole must not be a slice (StateTensor::whole, offset): read as the
  // whole tensor, a slice's elements would land at the wrong places. The optimizers that keep
  // slices check theirs (state_part says which).
  for (const auto& kv : s.tensors) {
    const StateTensor& t = kv.second;
    if (!keys.tensors.count(kv.first) || state_part(kv.first).kind == StatePart::slice) continue;
    if (!t.whole.empty() || t.offset != 0) {
      throw StateError("koptim::" + name_ + "::import_state: state tensor '" + kv.first + "' is " +
                       (t.whole.empty() ? "marked with offset " + std::to_string(t.offset) + " but no whole shape"
                                        : "the slice at element " + std::to_string(t.offset) +
                                              " of a tensor of shape " + shape_string(t.whole)) +
                       "; this rank keeps the whole tensor" + keys.hint);
    }
  }
  auto refuse_others = [&](const auto& entries, const std::set<std::string>& held, const char* kind) {
    for (const auto& kv : entries)
      if (!held.count(kv.first))
        throw StateError("koptim::" + name_ + "::import_state: the state has " + kind + " '" + kv.first +
                         "', which this optimizer does not hold" + keys.hint);
  };
  refuse_others(s.integers, keys.integers, "integer");
  refuse_others(s.reals, keys.reals, "real");
  refuse_others(s.tensors, keys.tensors, "tensor");
}

namespace Impl {

std::vector<std::string> describe_parameters(const Optimizer& opt, const std::vector<std::string>& options) {
  std::vector<std::string> items;
  const auto& ps = opt.parameters();
  for (std::size_t i = 0; i < ps.size(); ++i) {
    const auto& p = ps[i];
    // The group by index, name (with its length: any text) and the values it sets itself, which
    // a checkpoint writes apart from the values in effect.
    const auto& g = ps.groups().at(static_cast<std::size_t>(p.group));
    std::ostringstream d;
    d.precision(17);
    d << p.name << ' ' << to_string(p.param.dtype) << ' ' << shape_string(p.param.shape) << ' '
      << (p.param.layout_right ? "right" : "left") << " group " << p.group << " '" << g.name << "' (" << g.name.size()
      << ") lr " << opt.base_lr(p.group) << (g.options.lr ? " (own)" : "") << " wd " << opt.weight_decay(p.group)
      << (g.options.weight_decay ? " (own)" : "");
    items.push_back(d.str());
  }
  const auto& c = opt.common_options();
  items.push_back("schedule " + c.lr_schedule.describe());
  items.push_back(std::string("nonfinite ") + to_string(c.nonfinite_gradient));
  items.insert(items.end(), options.begin(), options.end());
  return items;
}

namespace {
// Throws StateError with message(s, x, i) written into s at the first element x (flat index i) of
// a float or double state tensor for which refused(x) holds.
template <class Refused, class Message>
void refuse_first(const StateTensor& t, Refused refused, Message message) {
  dispatch(t.dtype, [&](auto zero) {
    using T              = decltype(zero);
    const std::int64_t n = static_cast<std::int64_t>(t.data.size() / sizeof(T));
    for (std::int64_t i = 0; i < n; ++i) {
      T x;
      std::memcpy(&x, t.data.data() + i * sizeof(T), sizeof(T));
      if (!refused(x)) continue;
      std::ostringstream s;
      message(s, x, i);
      throw StateError(s.str());
    }
  });
}
}  // namespace

void check_values(const StateTensor& t, const std::string& key, bool nonnegative) {
  // is_finite first: an ordered comparison with NaN would raise FE_INVALID.
  refuse_first(
      t, [&](auto x) { return !is_finite(x) || (nonnegative && x < decltype(x)(0)); },
      [&](std::ostream& s, auto x, std::int64_t i) {
        s << "koptim: state tensor '" << key << "' has value " << x << " at flat index " << i
          << "; allowed: " << (nonnegative ? "finite values >= 0" : "finite values");
      });
}

void check_zeros(const StateTensor& t, const std::string& who, const std::string& key, const std::string& why) {
  refuse_first(
      t, [](auto x) { return x != decltype(x)(0); },
      [&](std::ostream& s, auto x, std::int64_t i) {
        s.precision(17);
        s << who << ": state tensor '" << key << "' has value " << x << " at flat index " << i << why;
      });
}

StateLayout state_layout(const TensorRef& param) {
  // With at most one extent above 1 ((1, n), (n, 1), ...) both layouts are the same memory order.
  int long_dims = 0;
  for (const auto e : param.shape) long_dims += e > 1 ? 1 : 0;
  return param.layout_right || long_dims <= 1 ? StateLayout::right : StateLayout::left;
}

void check_layout(const StateTensor& t, StateLayout expected, const std::string& who, const std::string& key,
                  const std::string& parameter) {
  if (t.layout == StateLayout::any || expected == StateLayout::any || t.layout == expected) return;
  const auto name = [](StateLayout l) { return l == StateLayout::right ? "LayoutRight" : "LayoutLeft"; };
  throw StateError(who + ": state tensor '" + key + "' was exported from a " + name(t.layout) + " parameter; '" +
                   parameter + "' here is " + name(expected) +
                   " (the same shape in the other memory order: every element would land on another entry)");
}

}  // namespace Impl
}  // namespace koptim
