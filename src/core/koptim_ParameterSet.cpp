#include "koptim_Check.hpp"
#include "../config/koptim_KeyRanges.hpp"
#include <koptim/core/koptim_ParameterSet.hpp>
#include <koptim/core/impl/koptim_Profiling.hpp>

#include <cstdint>
#include <sstream>

namespace koptim {

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::ostringstream s;
  s << '(';
  for (std::size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  if (shape.size() == 1) s << ',';
  s << ')';
  return s.str();
}

ParameterSet::ParameterSet() { groups_.push_back({"default", {}}); }

int ParameterSet::add_group(const std::string& name, const GroupOptions& options) {
  Impl::ScopedRegion region("koptim::ParameterSet::add_group");
  if (name.empty()) throw ShapeError("koptim::ParameterSet::add_group: a group needs a non-empty name");
  if (name.find('\0') != std::string::npos)
    throw ShapeError("koptim::ParameterSet::add_group: group name '" + name.substr(0, name.find('\0')) +
                     "\\0...' contains a NUL byte; names are text");
  if (find_group(name) >= 0) throw ShapeError("koptim::ParameterSet::add_group: group '" + name + "' already exists");
  // The optimizers' own ranges of lr and weight_decay (koptim_KeyRanges.hpp).
  auto check = [&](const std::optional<double>& v, const char* key, const Impl::Range& range) {
    if (v && !range.contains(*v)) {
      std::ostringstream s;
      s << "koptim::ParameterSet::add_group: group '" << name << "': " << key << " = " << Impl::real_string(*v)
        << " is not allowed; allowed: " << range.text(false);
      throw ConfigError(s.str());
    }
  };
  check(options.lr, "lr", Impl::ranges::lr);
  check(options.weight_decay, "weight_decay", Impl::ranges::weight_decay);
  groups_.push_back({name, options});
  return static_cast<int>(groups_.size()) - 1;
}

int ParameterSet::find(const std::string& name) const {
  for (std::size_t i = 0; i < params_.size(); ++i)
    if (params_[i].name == name) return static_cast<int>(i);
  return -1;
}

int ParameterSet::find_group(const std::string& name) const {
  for (std::size_t i = 0; i < groups_.size(); ++i)
    if (groups_[i].name == name) return static_cast<int>(i);
  return -1;
}

std::int64_t ParameterSet::num_elements() const {
  std::int64_t n = 0;
  for (const auto& p : params_) n += p.param.size;
  return n;
}

void ParameterSet::add_ref(const std::string& name, TensorRef param, TensorRef grad, int group) {
  Impl::ScopedRegion region("koptim::ParameterSet::add");
  const std::string where = "koptim::ParameterSet::add('" + name + "'): ";
  if (name.empty()) throw ShapeError("koptim::ParameterSet::add: a parameter needs a non-empty name");
  // A NUL would end the name in a checkpoint (HDF5's names are C strings): another name on load.
  if (name.find('\0') != std::string::npos)
    throw ShapeError("koptim::ParameterSet::add: parameter name '" + name.substr(0, name.find('\0')) +
                     "\\0...' contains a NUL byte; names are text");
  if (find(name) >= 0) throw ShapeError(where + "a parameter named '" + name + "' is already registered");
  if (group < 0 || group >= static_cast<int>(groups_.size())) {
    throw ShapeError(where + "group index " + std::to_string(group) + " does not exist; allowed: 0.." +
                     std::to_string(groups_.size() - 1));
  }
  // add_ref() is public for bindings that build TensorRefs themselves: nothing about them is
  // trusted, since every later read and write goes through data and size.
  auto check_ref = [&](const TensorRef& t, const char* what) {
    if (t.shape.empty() || t.shape.size() > 4) {
      throw ShapeError(where + "the " + what + " has rank " + std::to_string(t.shape.size()) + "; allowed: 1 to 4");
    }
    if (t.dtype != ScalarType::float32 && t.dtype != ScalarType::float64) {
      throw ShapeError(where + "the " + what + " has scalar type " + to_string(t.dtype) +
                       "; allowed: float32 or float64");
    }
    std::int64_t n = 1;
    for (auto e : t.shape) {
      if (e < 0) throw ShapeError(where + "the " + what + " has a negative extent in shape " + shape_string(t.shape));
      if (e > 0 && n > (std::int64_t(1) << 60) / e)
        throw ShapeError(where + "the " + what + " shape " + shape_string(t.shape) + " has too many elements");
      n *= e;
    }
    if (t.size != n) {
      throw ShapeError(where + "the " + what + " has size " + std::to_string(t.size) + " but shape " +
                       shape_string(t.shape) + " (" + std::to_string(n) +
                       " elements); size must be the product of "
                       "the extents");
    }
    if (n > 0 && t.data == nullptr) throw ShapeError(where + "the " + what + " has a null data pointer");
  };
  check_ref(param, "parameter");
  check_ref(grad, "gradient");
  if (param.shape != grad.shape) {
    throw ShapeError(where + "gradient shape " + shape_string(grad.shape) + " differs from parameter shape " +
                     shape_string(param.shape));
  }
  if (param.dtype != grad.dtype) {
    throw ShapeError(where + "gradient scalar type " + to_string(grad.dtype) + " differs from parameter scalar type " +
                     to_string(param.dtype));
  }
  if (param.layout_right != grad.layout_right) {
    throw ShapeError(where + "gradient layout (" + (grad.layout_right ? "LayoutRight" : "LayoutLeft") +
                     ") differs from parameter layout (" + (param.layout_right ? "LayoutRight" : "LayoutLeft") + ")");
  }
  if (param.data == grad.data && param.size > 0) {
    throw ShapeError(where + "the gradient View is the parameter View itself");
  }
  // Optimizers write the parameters while they read the gradients: a parameter may share no
  // byte with any parameter or gradient (gradients are only read, so they may share memory with
  // each other). Subviews that partly overlap are caught here, not only equal pointers.
  auto overlaps = [](const TensorRef& a, const TensorRef& b) {
    const auto a0 = reinterpret_cast<std::uintptr_t>(a.data), b0 = reinterpret_cast<std::uintptr_t>(b.data);
    return a.size > 0 && b.size > 0 && a0 < b0 + b.bytes() && b0 < a0 + a.bytes();
  };
  if (overlaps(param, grad)) {
    throw ShapeError(where +
                     "the gradient's memory overlaps the parameter's (a subview of the same allocation?); "
                     "a gradient must not share memory with any parameter");
  }
  for (const auto& p : params_) {
    if (overlaps(p.param, param)) {
      throw ShapeError(where + "its memory is already registered as parameter '" + p.name +
                       "' (a parameter registered twice)");
    }
    if (overlaps(p.grad, param)) {
      throw ShapeError(where + "the parameter's memory overlaps the gradient of parameter '" + p.name +
                       "'; a parameter must not share memory with any gradient");
    }
    if (overlaps(p.param, grad)) {
      throw ShapeError(where + "the gradient's memory overlaps parameter '" + p.name +
                       "'; a gradient must not share memory with any parameter");
    }
  }
  params_.push_back({name, std::move(param), std::move(grad), group});
}

}  // namespace koptim
