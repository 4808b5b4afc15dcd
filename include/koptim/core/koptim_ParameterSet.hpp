// The registry of a model's parameters: named (parameter, gradient) View pairs the user owns,
// and the parameter groups they belong to (each group may override the learning rate and the
// weight decay, as torch.optim parameter groups do).
//
//   koptim::ParameterSet params;
//   int no_decay = params.add_group("no_decay", {std::nullopt, 0.0});
//   params.add("fc1.weight", W1, dW1);
//   params.add("fc1.bias", b1, db1, no_decay);
//
// Nothing is copied: optimizers update the parameter Views in place and read the gradient Views
// the user fills before each step().
#ifndef KOPTIM_CORE_PARAMETERSET_HPP
#define KOPTIM_CORE_PARAMETERSET_HPP

#include <koptim/core/koptim_Tensor.hpp>

#include <optional>
#include <string>
#include <vector>

namespace koptim {

struct GroupOptions {
  std::optional<double> lr;            // absent: the optimizer's lr
  std::optional<double> weight_decay;  // absent: the optimizer's weight_decay
};

struct ParameterGroup {
  std::string name;
  GroupOptions options;
};

struct Parameter {
  std::string name;
  TensorRef param;
  TensorRef grad;
  int group = 0;
};

class ParameterSet {
 public:
  // Group 0, "default", always exists and takes the optimizer's own lr and weight decay.
  ParameterSet();

  // Adds a group and returns its index. Names are unique.
  int add_group(const std::string& name, const GroupOptions& options = {});

  // Registers a parameter and its gradient. They must have the same shape, layout and scalar type;
  // a name or a parameter's memory may be registered only once.
  template <class ParamView, class GradView>
  void add(const std::string& name, const ParamView& param, const GradView& grad, int group = 0) {
    static_assert(!std::is_const<typename ParamView::value_type>::value,
                  "koptim: the parameter View must be writable (koptim updates it in place)");
    add_ref(name, Impl::make_tensor_ref(param, "parameter '" + name + "'"),
            Impl::make_tensor_ref(grad, "gradient of parameter '" + name + "'"), group);
  }

  std::size_t size() const { return params_.size(); }
  bool empty() const { return params_.empty(); }
  const Parameter& operator[](std::size_t i) const { return params_[i]; }
  const std::vector<Parameter>& parameters() const { return params_; }
  const std::vector<ParameterGroup>& groups() const { return groups_; }
  // Index of the parameter with this name, or -1.
  int find(const std::string& name) const;
  int find_group(const std::string& name) const;
  // Total number of scalar parameters.
  std::int64_t num_elements() const;

  // The type-erased registration behind add(); public for bindings that build TensorRefs themselves.
  void add_ref(const std::string& name, TensorRef param, TensorRef grad, int group);

 private:
  std::vector<Parameter> params_;
  std::vector<ParameterGroup> groups_;
};

}  // namespace koptim

#endif
