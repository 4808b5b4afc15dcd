#include <koptim/config/koptim_Factory.hpp>

#include "koptim_KeyRanges.hpp"

#include <koptim/comm/koptim_Communicator.hpp>
#include <koptim/config/koptim_Validators.hpp>
#include <koptim/core/koptim_Profiling.hpp>
#include <koptim/diagonal/koptim_AdaGrad.hpp>
#include <koptim/diagonal/koptim_Adam.hpp>
#include <koptim/diagonal/koptim_RMSProp.hpp>
#include <koptim/diagonal/koptim_SGD.hpp>
#include <koptim/gefen/koptim_Gefen.hpp>
#include <koptim/shampoo/koptim_Shampoo.hpp>

#include <Teuchos_XMLParameterListCoreHelpers.hpp>

#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

namespace koptim {

namespace {

using Teuchos::ParameterList;
using Teuchos::RCP;
using V     = Impl::KeyValidator;
namespace R = Impl::ranges;

// One optimizer the factory knows: its valid list and how to build it from a validated list.
struct Entry {
  std::string name;
  std::string summary;
  std::function<void(ParameterList&)> add_keys;
  std::vector<std::string> required;
  // Builds it from a validated list; comm is null without a communicator.
  std::function<std::unique_ptr<Optimizer>(const ParameterSet&, const CommonOptions&, const ParameterList&,
                                           std::shared_ptr<comm::Communicator>)>
      build;
  // A sublist whose keys follow a pattern rather than a fixed list (checked by build()).
  std::string pattern_sublist = "";
};

template <class T>
void add(ParameterList& l, const std::string& key, const T& value, const std::string& doc,
         const RCP<const V>& validator) {
  l.set(key, value, doc, validator);
}

void add_common(ParameterList& l, double lr, double weight_decay, const std::string& decay_doc) {
  add(l, "lr", lr, "Learning rate (groups may override it).", V::real(R::lr));
  add(l, "weight_decay", weight_decay, decay_doc + " (groups may override it).", V::real(R::weight_decay));
  add(l, "nonfinite_gradient", std::string("error"),
      "What a gradient with a NaN or Inf (or, except for SGD, a value whose square overflows its type) does: error "
      "(throw, nothing changes), skip_step (skip the step, nothing changes) or unchecked (no check; fastest, a NaN "
      "then reaches the parameters).",
      V::choice({"error", "skip_step", "unchecked"}));
  ParameterList& s = l.sublist("lr_schedule", false, "Learning-rate schedule: a factor on every group's lr.");
  add(s, "type", std::string("constant"),
      "constant, linear_warmup (warmup then constant), cosine, linear or step decay; warmup_steps prefixes any of "
      "them with a linear warmup.",
      V::choice({"constant", "linear_warmup", "cosine", "linear", "step"}));
  add(s, "warmup_steps", 0, "Steps of linear warmup from lr/warmup_steps to lr.", V::integer(R::warmup_steps));
  add(s, "total_steps", 1, "cosine, linear: the step at which the decay reaches min_lr_factor.",
      V::integer(R::total_steps));
  add(s, "min_lr_factor", 0.0, "cosine, linear: the final factor.", V::real(R::min_lr_factor));
  add(s, "step_size", 1, "step: steps between two decays.", V::integer(R::step_size));
  add(s, "gamma", 0.1, "step: the factor of each decay.", V::real(R::gamma));
}

// The sharding switch of the diagonal optimizers and Gefen, and the communicator it hands them.
void add_shard_key(ParameterList& l) {
  add(l, "shard_state", false,
      "Distributed (koptim::create with a communicator): each rank keeps the state of a slice of the parameters, "
      "updates it and all-gathers the parameters; memory per rank ~1/N, results bitwise equal to one process.",
      V::boolean());
}

std::shared_ptr<comm::Communicator> sharding(const ParameterList& l, std::shared_ptr<comm::Communicator> comm) {
  return l.get<bool>("shard_state") ? std::move(comm) : nullptr;
}

AdamOptions adam_options(const ParameterList& l) {
  AdamOptions o;
  const auto& b = l.get<Teuchos::Array<double>>("betas");
  o.betas       = {b[0], b[1]};
  o.eps         = l.get<double>("eps");
  o.amsgrad     = l.get<bool>("amsgrad");
  return o;
}

void add_adam_keys(ParameterList& l) {
  Teuchos::Array<double> betas(2);
  betas[0] = 0.9;
  betas[1] = 0.999;
  add(l, "betas", betas, "Decay rates (b1, b2) of the first and second moments.",
      V::real_array({R::adam::beta1, R::adam::beta2}));
  add(l, "eps", 1e-8, "Added to the denominator sqrt(v_hat).", V::real(R::adam::eps));
  add(l, "amsgrad", false, "Use the running maximum of the second moment (AMSGrad).", V::boolean());
}

// The keys of inverse_exponent_override: order_K or order_K_dim_J, K and J decimal integers below
// 10^6 (an order or a dimension index beyond is no tensor's). Parsed by hand: std::regex recurses
// per character, and std::stoi throws std::out_of_range, on a long key.
enum class Override { none, order, dim };
Override override_key(const std::string& k, int& order, int& dim) {
  std::size_t i = 0;
  auto number   = [&](int& out) {
    const std::size_t start = i;
    out                     = 0;
    while (i < k.size() && k[i] >= '0' && k[i] <= '9' && i - start < 6) out = out * 10 + (k[i++] - '0');
    return i > start && !(i < k.size() && k[i] >= '0' && k[i] <= '9');
  };
  if (k.compare(0, 6, "order_") != 0) return Override::none;
  i = 6;
  if (!number(order)) return Override::none;
  if (i == k.size()) return Override::order;
  if (k.compare(i, 5, "_dim_") != 0) return Override::none;
  i += 5;
  if (!number(dim) || i != k.size()) return Override::none;
  return Override::dim;
}

// A list writes an unset std::optional option as -1 (its validator's special value).
constexpr int unset_in_lists = -1;
template <class T>
std::optional<T> optional_key(const ParameterList& l, const std::string& key) {
  const T v = l.get<T>(key);
  return v == static_cast<T>(unset_in_lists) ? std::nullopt : std::optional<T>(v);
}

ShampooOptions shampoo_options(const ParameterList& l) {
  ShampooOptions o;
  const auto& b            = l.get<Teuchos::Array<double>>("betas");
  o.betas                  = {b[0], b[1]};
  o.beta3                  = optional_key<double>(l, "beta3");
  o.epsilon                = l.get<double>("epsilon");
  o.momentum               = l.get<double>("momentum");
  o.dampening              = l.get<double>("dampening");
  o.use_nesterov           = l.get<bool>("use_nesterov");
  const auto wdt           = l.get<std::string>("weight_decay_type");
  o.weight_decay_type      = wdt == "L2"          ? WeightDecayType::L2
                             : wdt == "decoupled" ? WeightDecayType::decoupled
                             : wdt == "corrected" ? WeightDecayType::corrected
                                                  : WeightDecayType::independent;
  o.max_preconditioner_dim = l.get<int>("max_preconditioner_dim");
  o.use_merge_dims         = l.get<bool>("use_merge_dims");
  o.precondition_frequency = l.get<int>("precondition_frequency");
  if (const auto s = optional_key<int>(l, "start_preconditioning_step")) o.start_preconditioning_step = *s;
  o.use_bias_correction  = l.get<bool>("use_bias_correction");
  const auto g           = l.get<std::string>("grafting");
  o.grafting             = g == "none"      ? Grafting::none
                           : g == "SGD"     ? Grafting::SGD
                           : g == "AdaGrad" ? Grafting::AdaGrad
                           : g == "RMSProp" ? Grafting::RMSProp
                                            : Grafting::Adam;
  o.grafting_beta2       = optional_key<double>(l, "grafting_beta2");
  o.grafting_epsilon     = l.get<double>("grafting_epsilon");
  o.eigenvalue_corrected = l.get<bool>("eigenvalue_corrected");
  o.root_method =
      l.get<std::string>("root_method") == "eigen" ? linalg::RootMethod::eigen : linalg::RootMethod::coupled_newton;
  const auto es                                 = l.get<std::string>("eigensolver");
  o.eigensolver                                 = es == "automatic" ? linalg::EighSolver::automatic
                                                  : es == "lapack"  ? linalg::EighSolver::lapack
                                                                    : linalg::EighSolver::jacobi;
  o.pseudo_inverse                              = l.get<bool>("pseudo_inverse");
  o.rank_rtol                                   = l.get<double>("rank_rtol");
  o.rank_atol                                   = l.get<double>("rank_atol");
  o.num_tolerated_failed_amortized_computations = l.get<int>("num_tolerated_failed_amortized_computations");
  const ParameterList& ov                       = l.sublist("inverse_exponent_override");
  for (auto it = ov.begin(); it != ov.end(); ++it) {
    const std::string& k = ov.name(it);
    const auto& e        = ov.entry(it);
    double a             = 0;
    if (e.isType<double>()) {
      a = Teuchos::getValue<double>(e);
    } else if (e.isType<int>()) {
      a = Teuchos::getValue<int>(e);
    } else {
      throw ConfigError("koptim: key 'inverse_exponent_override/" + k + "' = " + Impl::entry_value_string(e) +
                        " is not a number; allowed: " + R::shampoo::inverse_exponent.text(false));
    }
    int order = 0, dim = 0;
    const Override form = override_key(k, order, dim);
    if (form == Override::dim) {
      o.inverse_exponent_override_dim[{order, dim}] = a;
    } else if (form == Override::order) {
      o.inverse_exponent_override[order] = a;
    } else {
      throw ConfigError("koptim: unknown key 'inverse_exponent_override/" + k +
                        "'; allowed: order_K or order_K_dim_J (K, J integers below 1000000)");
    }
  }
  o.num_trainers_per_group = optional_key<int>(l, "num_trainers_per_group");
  o.communication_dtype    = l.get<std::string>("communication_dtype") == "bfloat16" ? CommunicationDType::bfloat16
                                                                                     : CommunicationDType::float32;
  o.distributed_cost_model = l.get<std::string>("distributed_cost_model") == "cubic" ? DistributedCostModel::cubic
                                                                                     : DistributedCostModel::bytes;
  return o;
}

const std::vector<Entry>& entries() {
  static const std::vector<Entry> table = {
      {"SGD",
       "Stochastic gradient descent with momentum (torch.optim.SGD).",
       [](ParameterList& l) {
         add_common(l, 1e-3, 0.0, "L2 weight decay: G <- G + weight_decay W");
         add_shard_key(l);
         l.getEntryRCP("lr")->setDocString("Learning rate. Required for SGD (groups may override it).");
         add(l, "momentum", 0.0, "Momentum factor mu.", V::real(R::sgd::momentum));
         add(l, "dampening", 0.0, "Dampening d of the momentum: B <- mu B + (1 - d) G.", V::real(R::sgd::dampening));
         add(l, "nesterov", false, "Nesterov momentum (needs momentum > 0 and dampening = 0).", V::boolean());
       },
       {"lr"},
       [](const ParameterSet& p, const CommonOptions& c, const ParameterList& l,
          std::shared_ptr<comm::Communicator> comm) -> std::unique_ptr<Optimizer> {
         SGDOptions o;
         o.momentum  = l.get<double>("momentum");
         o.dampening = l.get<double>("dampening");
         o.nesterov  = l.get<bool>("nesterov");
         return std::make_unique<SGD>(p, c, o, sharding(l, comm));
       }},
      {"AdaGrad",
       "AdaGrad (torch.optim.Adagrad).",
       [](ParameterList& l) {
         add_common(l, 1e-2, 0.0, "L2 weight decay: G <- G + weight_decay W");
         add_shard_key(l);
         add(l, "lr_decay", 0.0, "The lr at step t is lr / (1 + (t - 1) lr_decay).", V::real(R::adagrad::lr_decay));
         add(l, "initial_accumulator_value", 0.0, "Initial value of the sum of squared gradients.",
             V::real(R::adagrad::initial_accumulator_value));
         add(l, "eps", 1e-10, "Added to the denominator sqrt(sum).", V::real(R::adagrad::eps));
       },
       {},
       [](const ParameterSet& p, const CommonOptions& c, const ParameterList& l,
          std::shared_ptr<comm::Communicator> comm) -> std::unique_ptr<Optimizer> {
         AdaGradOptions o;
         o.lr_decay                  = l.get<double>("lr_decay");
         o.initial_accumulator_value = l.get<double>("initial_accumulator_value");
         o.eps                       = l.get<double>("eps");
         return std::make_unique<AdaGrad>(p, c, o, sharding(l, comm));
       }},
      {"RMSProp",
       "RMSProp (torch.optim.RMSprop).",
       [](ParameterList& l) {
         add_common(l, 1e-2, 0.0, "L2 weight decay: G <- G + weight_decay W");
         add_shard_key(l);
         add(l, "alpha", 0.99, "Smoothing constant of the squared-gradient average.", V::real(R::rmsprop::alpha));
         add(l, "eps", 1e-8, "Added to the denominator.", V::real(R::rmsprop::eps));
         add(l, "momentum", 0.0, "Momentum factor.", V::real(R::rmsprop::momentum));
         add(l, "centered", false, "Normalise by the variance estimate (subtract the squared mean gradient).",
             V::boolean());
       },
       {},
       [](const ParameterSet& p, const CommonOptions& c, const ParameterList& l,
          std::shared_ptr<comm::Communicator> comm) -> std::unique_ptr<Optimizer> {
         RMSPropOptions o;
         o.alpha    = l.get<double>("alpha");
         o.eps      = l.get<double>("eps");
         o.momentum = l.get<double>("momentum");
         o.centered = l.get<bool>("centered");
         return std::make_unique<RMSProp>(p, c, o, sharding(l, comm));
       }},
      {"Adam",
       "Adam with L2 weight decay (torch.optim.Adam).",
       [](ParameterList& l) {
         add_common(l, 1e-3, 0.0, "L2 weight decay: G <- G + weight_decay W");
         add_shard_key(l);
         add_adam_keys(l);
       },
       {},
       [](const ParameterSet& p, const CommonOptions& c, const ParameterList& l,
          std::shared_ptr<comm::Communicator> comm) -> std::unique_ptr<Optimizer> {
         return std::make_unique<Adam>(p, c, adam_options(l), false, sharding(l, comm));
       }},
      {"AdamW",
       "Adam with decoupled weight decay (torch.optim.AdamW).",
       [](ParameterList& l) {
         add_common(l, 1e-3, 0.01, "Decoupled weight decay: W <- W (1 - lr weight_decay) before the update");
         add_shard_key(l);
         add_adam_keys(l);
       },
       {},
       [](const ParameterSet& p, const CommonOptions& c, const ParameterList& l,
          std::shared_ptr<comm::Communicator> comm) -> std::unique_ptr<Optimizer> {
         return std::make_unique<AdamW>(p, c, adam_options(l), sharding(l, comm));
       }},
      {"Shampoo",
       "Distributed Shampoo: block-diagonal Kronecker-factored preconditioning with grafting.",
       [](ParameterList& l) {
         add_common(l, 1e-2, 0.0, "Weight decay, applied as weight_decay_type says");
         Teuchos::Array<double> betas(2);
         betas[0] = 0.9;
         betas[1] = 1.0;
         add(l, "betas", betas,
             "(b1, b2): b1 filters the gradient (0: no filtering), b2 weighs the factor matrices (1: sum).",
             V::real_array({R::shampoo::beta1, R::shampoo::beta2}));
         add(l, "beta3", -1.0, "Filter of the gradient fed to the preconditioner.",
             V::real(R::shampoo::beta3, V::Special{unset_in_lists, "beta3 = betas[0]"}));
         add(l, "epsilon", 1e-12,
             "Added to the factors before the inverse root (and the eigenvalue-corrected denominator).",
             V::real(R::shampoo::epsilon));
         add(l, "momentum", 0.0, "Classic momentum mu applied to the preconditioned direction.",
             V::real(R::shampoo::momentum));
         add(l, "dampening", 0.0, "Dampening d of the momentum.", V::real(R::shampoo::dampening));
         add(l, "use_nesterov", false, "Nesterov momentum (needs momentum > 0).", V::boolean());
         add(l, "weight_decay_type", std::string("decoupled"),
             "L2 (added to the gradient), decoupled (weight_decay W added to the direction), corrected "
             "(weight_decay lr/lr_peak W) or independent (weight_decay/lr_peak W); lr_peak is the group's lr.",
             V::choice({"L2", "decoupled", "corrected", "independent"}));
         add(l, "max_preconditioner_dim", 1024,
             "Largest side of a factor matrix: dims are merged up to it and split above it.",
             V::integer(R::shampoo::max_preconditioner_dim));
         add(l, "use_merge_dims", true, "Merge adjacent dimensions (from the last one) while their product fits.",
             V::boolean());
         add(l, "precondition_frequency", 1, "Inverse roots are recomputed every this many steps.",
             V::integer(R::shampoo::precondition_frequency));
         add(l, "start_preconditioning_step", -1,
             "First step that uses the Shampoo direction (at least precondition_frequency); the grafting method "
             "alone before.",
             V::integer(R::shampoo::start_preconditioning_step, V::Special{unset_in_lists, "precondition_frequency"}));
         add(l, "use_bias_correction", true, "Bias-correct the filtered gradient and the factors.", V::boolean());
         add(l, "grafting", std::string("none"), "Grafting method giving each block's step size.",
             V::choice({"none", "SGD", "AdaGrad", "RMSProp", "Adam"}));
         add(l, "grafting_beta2", -1.0, "Second-moment decay of RMSProp/Adam grafting.",
             V::real(R::shampoo::grafting_beta2, V::Special{unset_in_lists, "0.99 for RMSProp, 0.999 for Adam"}));
         add(l, "grafting_epsilon", 1e-10, "Epsilon of the grafting method.", V::real(R::shampoo::grafting_epsilon));
         add(l, "eigenvalue_corrected", false,
             "Eigenvalue-corrected Shampoo (SOAP-like): Adam-style second moment in the factors' eigenbasis.",
             V::boolean());
         add(l, "root_method", std::string("eigen"), "Inverse roots by symmetric eigendecomposition or coupled Newton.",
             V::choice({"eigen", "coupled_newton"}));
         add(l, "eigensolver", std::string("automatic"),
             "automatic (LAPACK for host memory, batched Jacobi otherwise), lapack or jacobi.",
             V::choice({"automatic", "lapack", "jacobi"}));
         add(l, "pseudo_inverse", false, "Pseudo-inverse roots of rank-deficient factors (needs epsilon = 0).",
             V::boolean());
         add(l, "rank_rtol", 0.0, "Pseudo-inverse: eigenvalues <= max(rank_rtol lambda_max, rank_atol) count as zero.",
             V::real(R::shampoo::rank_rtol));
         add(l, "rank_atol", 0.0, "Pseudo-inverse: see rank_rtol.", V::real(R::shampoo::rank_atol));
         add(l, "num_tolerated_failed_amortized_computations", 3,
             "Consecutive root-inverse solver failures of a block tolerated (the previous root is kept) before an "
             "error.",
             V::integer(R::shampoo::num_tolerated_failed_amortized_computations));
         add(l, "num_trainers_per_group", -1,
             "Distributed: ranks per group sharing the preconditioner work; groups replicate it.",
             V::integer(R::shampoo::num_trainers_per_group, V::Special{unset_in_lists, "all ranks"}));
         add(l, "communication_dtype", std::string("float32"),
             "Distributed: precision of the update all-gather: float32 (each update in its parameter's precision; "
             "N ranks equal 1 rank bitwise) or bfloat16.",
             V::choice({"float32", "bfloat16"}));
         add(l, "distributed_cost_model", std::string("bytes"),
             "Distributed: cost of a block when assigning blocks to ranks: bytes (of its update, rounded up to 64) or "
             "cubic (sum of the cubes of its dimensions, as eigensolves).",
             V::choice({"bytes", "cubic"}));
         l.sublist("inverse_exponent_override", false,
                   "Exponent a of X = L^-a: keys order_K (every dimension of blocks of order K) or order_K_dim_J (one "
                   "dimension), values >= 0; 0 leaves the dimension unpreconditioned. Default a = 1/(2 max(K, 1)).");
       },
       {},
       [](const ParameterSet& p, const CommonOptions& c, const ParameterList& l,
          std::shared_ptr<comm::Communicator> comm) -> std::unique_ptr<Optimizer> {
         return std::make_unique<Shampoo>(p, c, shampoo_options(l), std::move(comm));
       },
       "inverse_exponent_override"},
      {"Gefen",
       "Gefen: AdamW with a shared second moment per automatic block and an 8-bit momentum with a learned codebook "
       "(about 1 byte of state per parameter).",
       [](ParameterList& l) {
         add_common(l, 1e-3, 0.0, "Decoupled weight decay: W <- W (1 - lr weight_decay) before the update");
         Teuchos::Array<double> betas(2);
         betas[0] = 0.9;
         betas[1] = 0.999;
         add(l, "betas", betas, "Decay rates (b1, b2) of the first and second moments, as AdamW.",
             V::real_array({R::gefen::beta1, R::gefen::beta2}));
         add(l, "eps", 1e-8, "Added to the denominator sqrt(v_hat), as AdamW.", V::real(R::gefen::eps));
         add(l, "partition_rule", std::string("neighbour_contrast"),
             "Expert: the rule that picks each tensor's block size p from the first gradients: neighbour_contrast "
             "(default) or variance_drop (gefen 1.1.1).",
             V::choice({"neighbour_contrast", "variance_drop"}));
         add(l, "p1_second_moment", std::string("factored"),
             "Expert: second moment of tensors with p = 1: factored (row/column estimate for tensors of 2+ dimensions "
             "and >= 4096 elements, per element otherwise) or full (per element, as the reference).",
             V::choice({"factored", "full"}));
         add(l, "force_p1", false, "Expert: no second-moment sharing (p = 1 for every tensor).", V::boolean());
         add_shard_key(l);
       },
       {},
       [](const ParameterSet& p, const CommonOptions& c, const ParameterList& l,
          std::shared_ptr<comm::Communicator> comm) -> std::unique_ptr<Optimizer> {
         GefenOptions o;
         const auto& b      = l.get<Teuchos::Array<double>>("betas");
         o.betas            = {b[0], b[1]};
         o.eps              = l.get<double>("eps");
         o.partition_rule   = l.get<std::string>("partition_rule") == "variance_drop"
                                  ? GefenPartitionRule::variance_drop
                                  : GefenPartitionRule::neighbour_contrast;
         o.p1_second_moment = l.get<std::string>("p1_second_moment") == "full" ? GefenP1SecondMoment::full
                                                                               : GefenP1SecondMoment::factored;
         o.force_p1         = l.get<bool>("force_p1");
         return std::make_unique<Gefen>(p, c, o, sharding(l, comm));
       }},
  };
  return table;
}

std::string names_string() {
  std::string s;
  for (const auto& e : entries()) s += (s.empty() ? "" : ", ") + e.name;
  return s;
}

const Entry& entry(const std::string& name) {
  for (const auto& e : entries())
    if (e.name == name) return e;
  throw ConfigError("koptim: unknown optimizer '" + name + "'; allowed: " + names_string());
}

std::string keys_string(const ParameterList& l) {
  std::string s;
  for (auto it = l.begin(); it != l.end(); ++it) s += (s.empty() ? "" : ", ") + l.name(it);
  return s;
}

// Unknown keys and sublists, before Teuchos sees the list (its message would list every valid
// entry with its documentation).
void reject_unknown_keys(const ParameterList& given, const ParameterList& valid, const std::string& optimizer,
                         const std::string& where, const std::string& pattern_sublist = "") {
  for (auto it = given.begin(); it != given.end(); ++it) {
    const std::string& key = given.name(it);
    if (!pattern_sublist.empty() && key == pattern_sublist) {
      if (!given.entry(it).isList())
        throw ConfigError("koptim: key '" + key + "' in list '" + where + "' for optimizer " + optimizer +
                          " must be a sublist");
      continue;
    }
    const auto& e                    = given.entry(it);
    const Teuchos::ParameterEntry* v = valid.getEntryPtr(key);
    if (v == nullptr) {
      throw ConfigError("koptim: unknown key '" + key + "' (value " + Impl::entry_value_string(e) + ") in list '" +
                        where + "' for optimizer " + optimizer + "; allowed keys: " + keys_string(valid));
    }
    if (e.isList() != v->isList()) {
      throw ConfigError("koptim: key '" + key + "' in list '" + where + "' for optimizer " + optimizer +
                        (v->isList() ? " must be a sublist" : " must be a value, not a sublist"));
    }
    if (e.isList()) reject_unknown_keys(given.sublist(key), valid.sublist(key), optimizer, where + "/" + key);
  }
}

std::string optimizer_of(const ParameterList& list) {
  const Teuchos::ParameterEntry* e = list.getEntryPtr("optimizer");
  if (e == nullptr) throw ConfigError("koptim: the list has no key 'optimizer'; allowed: " + names_string());
  if (!e->isType<std::string>()) {
    throw ConfigError("koptim: key 'optimizer' = " + Impl::entry_value_string(*e) +
                      " must be a string; allowed: " + names_string());
  }
  const auto& name = Teuchos::getValue<std::string>(*e);
  entry(name);  // throws for an unknown name
  return name;
}

LRSchedule schedule_from(const ParameterList& s) {
  const auto type   = s.get<std::string>("type");
  const auto warmup = static_cast<std::int64_t>(s.get<int>("warmup_steps"));
  LRSchedule sched;
  if (type == "cosine") sched = LRSchedule::cosine(s.get<int>("total_steps"), s.get<double>("min_lr_factor"));
  if (type == "linear") sched = LRSchedule::linear(s.get<int>("total_steps"), s.get<double>("min_lr_factor"));
  if (type == "step") sched = LRSchedule::step(s.get<int>("step_size"), s.get<double>("gamma"));
  if (type == "linear_warmup" && warmup == 0) {
    throw ConfigError("koptim: lr_schedule type linear_warmup needs warmup_steps >= 1");
  }
  return sched.with_warmup(warmup);
}

}  // namespace

std::vector<std::string> optimizer_names() {
  std::vector<std::string> n;
  for (const auto& e : entries()) n.push_back(e.name);
  return n;
}

RCP<const ParameterList> valid_parameters(const std::string& optimizer) {
  Impl::ScopedRegion region("koptim::valid_parameters");
  static std::map<std::string, RCP<const ParameterList>> cache;
  const Entry& e = entry(optimizer);
  auto it        = cache.find(optimizer);
  if (it != cache.end()) return it->second;
  auto l = Teuchos::rcp(new ParameterList(optimizer));
  l->set("optimizer", optimizer, "The optimizer: " + names_string() + ".", V::choice(optimizer_names()));
  e.add_keys(*l);
  cache[optimizer] = l;
  return l;
}

ParameterList validated_parameters(const ParameterList& list) {
  Impl::ScopedRegion region("koptim::validated_parameters");
  const std::string optimizer = optimizer_of(list);
  const auto valid            = valid_parameters(optimizer);
  const std::string& pattern  = entry(optimizer).pattern_sublist;
  reject_unknown_keys(list, *valid, optimizer, list.name(), pattern);
  for (const auto& key : entry(optimizer).required) {
    if (!list.isParameter(key)) {
      throw ConfigError("koptim: key '" + key + "' is required for optimizer " + optimizer + " (" +
                        valid->getEntry(key).docString() + ")");
    }
  }
  ParameterList copy(list);
  ParameterList patterned;
  if (!pattern.empty() && copy.isSublist(pattern)) {
    patterned = copy.sublist(pattern);
    copy.remove(pattern);
  }
  try {
    copy.validateParametersAndSetDefaults(*valid);
  } catch (const std::exception& ex) {
    throw ConfigError(std::string("koptim: optimizer ") + optimizer + ": " + ex.what());
  }
  if (!pattern.empty()) copy.sublist(pattern) = patterned;
  return copy;
}

namespace {
// The values of a list without its validators and doc strings (what a checkpoint records).
ParameterList plain_copy(const ParameterList& l) {
  ParameterList out(l.name());
  for (auto it = l.begin(); it != l.end(); ++it) {
    const std::string& key = l.name(it);
    const auto& e          = l.entry(it);
    if (e.isList())
      out.set(key, plain_copy(Teuchos::getValue<ParameterList>(e)));
    else
      out.setEntry(key, Teuchos::ParameterEntry(e.getAny(false), false, false));
  }
  return out;
}
}  // namespace

std::unique_ptr<Optimizer> create(const ParameterSet& params, const ParameterList& list) {
  return create(params, list, nullptr);
}

std::unique_ptr<Optimizer> create(const ParameterSet& params, const ParameterList& list,
                                  std::shared_ptr<comm::Communicator> comm) {
  Impl::ScopedRegion region("koptim::create");
  const ParameterList l = validated_parameters(list);
  const Entry& e        = entry(l.get<std::string>("optimizer"));
  // Read everything first; the optimizer is built only from a complete, valid set of values.
  CommonOptions c;
  c.lr                 = l.get<double>("lr");
  c.weight_decay       = l.get<double>("weight_decay");
  const auto& policy   = l.get<std::string>("nonfinite_gradient");
  c.nonfinite_gradient = policy == "error"       ? NonFiniteGradient::error
                         : policy == "skip_step" ? NonFiniteGradient::skip_step
                                                 : NonFiniteGradient::unchecked;
  c.lr_schedule        = schedule_from(l.sublist("lr_schedule"));
  auto opt             = e.build(params, c, l, std::move(comm));
  std::ostringstream xml;
  Teuchos::writeParameterListToXmlOStream(plain_copy(l), xml);
  Impl::set_configuration(*opt, xml.str());
  return opt;
}

ParameterList default_parameter_list(const std::string& optimizer) {
  Impl::ScopedRegion region("koptim::default_parameter_list");
  const auto valid                                               = valid_parameters(optimizer);
  std::function<void(const ParameterList&, ParameterList&)> copy = [&](const ParameterList& from, ParameterList& to) {
    for (auto it = from.begin(); it != from.end(); ++it) {
      const auto& e = from.entry(it);
      if (e.isList()) {
        copy(from.sublist(from.name(it)), to.sublist(from.name(it)));
      } else {
        to.setEntry(from.name(it), Teuchos::ParameterEntry(e.getAny(false)));
      }
    }
  };
  ParameterList l("koptim");
  copy(*valid, l);
  return l;
}

void print_parameter_reference(std::ostream& out) {
  Impl::ScopedRegion region("koptim::print_parameter_reference");
  std::function<void(const ParameterList&, const std::string&)> table = [&](const ParameterList& l,
                                                                            const std::string& prefix) {
    for (auto it = l.begin(); it != l.end(); ++it) {
      const auto& e = l.entry(it);
      if (e.isList()) continue;
      auto v = Teuchos::rcp_dynamic_cast<const Impl::KeyValidator>(e.validator());
      out << "| `" << prefix << l.name(it) << "` | " << (v.is_null() ? "" : v->type_name()) << " | `"
          << Impl::entry_value_string(e) << "` | " << (v.is_null() ? "" : v->allowed()) << " | " << e.docString()
          << " |\n";
    }
    for (auto it = l.begin(); it != l.end(); ++it)
      if (l.entry(it).isList()) table(l.sublist(l.name(it)), prefix + l.name(it) + "/");
  };
  for (const auto& e : entries()) {
    out << "## " << e.name << "\n\n" << e.summary << "\n\n";
    out << "| key | type | default | allowed | meaning |\n|---|---|---|---|---|\n";
    table(*valid_parameters(e.name), "");
    out << "\n";
  }
}

}  // namespace koptim
