#include <koptim/core/koptim_Math.hpp>
#include <koptim/core/koptim_Optimizer.hpp>
#include <koptim/core/koptim_Profiling.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>

namespace koptim {

Optimizer::Optimizer(std::string name, ParameterSet params, CommonOptions common)
    : name_(std::move(name)), params_(std::move(params)), common_(std::move(common)) {
  if (params_.empty()) throw ShapeError("koptim::" + name_ + ": the ParameterSet has no parameters");
  auto check = [&](double v, const char* key, const std::string& where) {
    if (!(v >= 0.0 && v < 1e300)) {
      std::ostringstream s;
      s << "koptim::" << name_ << ": " << where << key << " = " << v << " is not allowed; allowed: a finite value >= 0";
      throw ConfigError(s.str());
    }
  };
  check(common_.lr, "lr", "");
  check(common_.weight_decay, "weight_decay", "");
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

std::pair<std::int64_t, std::int64_t> count_nonfinite(const TensorRef& t) {
  return dispatch(t.dtype, [&](auto zero) {
    using T          = decltype(zero);
    const auto x     = t.flat<T>();
    std::int64_t bad = 0;
    Kokkos::parallel_reduce(
        "koptim::check_finite", Kokkos::RangePolicy<ExecutionSpace>(0, t.size),
        KOKKOS_LAMBDA(const std::int64_t i, std::int64_t& n) { n += is_finite(x(i)) ? 0 : 1; }, bad);
    std::int64_t first = -1;
    if (bad > 0) {
      // Rare path: locate the first offending entry for the error message.
      Kokkos::parallel_reduce(
          "koptim::first_nonfinite", Kokkos::RangePolicy<ExecutionSpace>(0, t.size),
          KOKKOS_LAMBDA(const std::int64_t i, std::int64_t& m) {
            if (!is_finite(x(i)) && i < m) m = i;
          },
          Kokkos::Min<std::int64_t>(first));
    }
    return std::make_pair(bad, first);
  });
}

}  // namespace Impl

bool Optimizer::check_gradients() const {
  if (common_.nonfinite_gradient == NonFiniteGradient::unchecked) return true;
  for (const auto& p : params_.parameters()) {
    const auto bad = Impl::count_nonfinite(p.grad);
    if (bad.first == 0) continue;
    if (common_.nonfinite_gradient == NonFiniteGradient::skip_step) return false;
    throw NonFiniteError("koptim::" + name_ + "::step: the gradient of parameter '" + p.name + "' (shape " +
                         shape_string(p.grad.shape) + ") has " + std::to_string(bad.first) +
                         " non-finite value(s), the first at flat index " + std::to_string(bad.second) +
                         "; nothing was updated (set nonfinite_gradient = skip_step to skip such steps)");
  }
  return true;
}

void Optimizer::step() {
  Impl::ScopedRegion region("koptim::" + name_ + "::step");
  if (!check_gradients()) {
    ++skipped_;
    return;
  }
  const std::int64_t t = step_ + 1;
  std::vector<double> lrs(params_.groups().size());
  for (std::size_t g = 0; g < lrs.size(); ++g) lrs[g] = base_lr(static_cast<int>(g)) * common_.lr_schedule.factor(t);
  update(t, lrs);
  step_ = t;
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
  }
  check_tensors(s);
  import_tensors(s);
  step_    = s.integers.at("step");
  skipped_ = s.integers.at("skipped_steps");
}

namespace Impl {

ElementwiseOptimizer::ElementwiseOptimizer(std::string name, ParameterSet params, CommonOptions common,
                                           std::vector<std::string> slots, std::vector<double> fill)
    : Optimizer(std::move(name), std::move(params), std::move(common)), slots_(std::move(slots)) {
  fill.resize(slots_.size(), 0.0);
  for (const auto& p : parameters().parameters()) {
    std::vector<Buffer> b;
    for (std::size_t s = 0; s < slots_.size(); ++s) {
      b.emplace_back("koptim::" + p.name + "/" + slots_[s], p.param.dtype, p.param.size, fill[s]);
    }
    buffers_.push_back(std::move(b));
  }
}

std::size_t ElementwiseOptimizer::state_bytes() const {
  std::size_t n = 0;
  for (const auto& b : buffers_)
    for (const auto& s : b) n += s.bytes();
  return n;
}

void ElementwiseOptimizer::export_tensors(OptimizerState& state) const {
  const auto& ps = parameters();
  for (std::size_t i = 0; i < ps.size(); ++i)
    for (std::size_t s = 0; s < slots_.size(); ++s)
      state.tensors[ps[i].name + "/" + slots_[s]] = buffers_[i][s].to_state(ps[i].param.shape);
}

void ElementwiseOptimizer::check_tensors(const OptimizerState& state) const {
  const auto& ps     = parameters();
  std::size_t expect = 0;
  for (std::size_t i = 0; i < ps.size(); ++i) {
    for (std::size_t s = 0; s < slots_.size(); ++s) {
      const std::string key = ps[i].name + "/" + slots_[s];
      auto it               = state.tensors.find(key);
      if (it == state.tensors.end()) {
        throw StateError("koptim::" + name() + "::import_state: the state has no tensor '" + key + "'");
      }
      buffers_[i][s].check(it->second, key);
      ++expect;
    }
  }
  if (state.tensors.size() != expect) {
    for (const auto& kv : state.tensors) {
      const auto slash = kv.first.rfind('/');
      const bool known = slash != std::string::npos && ps.find(kv.first.substr(0, slash)) >= 0 &&
                         std::find(slots_.begin(), slots_.end(), kv.first.substr(slash + 1)) != slots_.end();
      if (!known) {
        throw StateError("koptim::" + name() + "::import_state: the state has tensor '" + kv.first +
                         "', which belongs to no parameter and slot of this optimizer");
      }
    }
  }
}

void ElementwiseOptimizer::import_tensors(const OptimizerState& state) {
  const auto& ps = parameters();
  for (std::size_t i = 0; i < ps.size(); ++i)
    for (std::size_t s = 0; s < slots_.size(); ++s)
      buffers_[i][s].assign(state.tensors.at(ps[i].name + "/" + slots_[s]));
}

}  // namespace Impl
}  // namespace koptim
