#include <koptim/config/koptim_Factory.hpp>

#include "../comm/koptim_Distributor.hpp"
#include "../diagonal/koptim_DiagonalKeys.hpp"
#include "../gefen/koptim_GefenKeys.hpp"
#include "../shampoo/koptim_ShampooKeys.hpp"
#include "koptim_EnumNames.hpp"
#include "koptim_KeyRanges.hpp"
#include "koptim_OptionKeys.hpp"
#include "koptim_ScheduleKeys.hpp"
#include "koptim_TeuchosText.hpp"

#include <koptim/comm/koptim_Communicator.hpp>
#include "koptim_Validators.hpp"
#include <koptim/core/impl/koptim_Profiling.hpp>
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
#include <mutex>
#include <optional>
#include <set>
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
  // A sublist whose keys follow a pattern rather than a fixed list (checked by build()), and its
  // row of the parameter reference: the keys' forms and what their values may be.
  std::string pattern_sublist           = "";
  std::vector<std::string> pattern_keys = {};
  std::string pattern_allowed           = "";
};

template <class T>
void add(ParameterList& l, const std::string& key, const T& value, const std::string& doc,
         const RCP<const V>& validator) {
  l.set(key, value, doc, validator);
}

void add_common(ParameterList& l, double lr, double weight_decay, const std::string& decay_doc) {
  add(l, "lr", lr, "Learning rate (groups may override it; at most 3.4e38 for float32 parameters).", V::real(R::lr));
  add(l, "weight_decay", weight_decay, decay_doc + " (groups may override it; at most 3.4e38 for float32 parameters).",
      V::real(R::weight_decay));
  Impl::ListWriter(l).choice(
      "nonfinite_gradient", CommonOptions{}.nonfinite_gradient,
      "What a gradient with a NaN or Inf (or, except for SGD, a value whose square overflows its type) does: error "
      "(throw, nothing changes), skip_step (skip the step, nothing changes) or unchecked (no check; fastest, a NaN "
      "then reaches the parameters).");
  ParameterList& s = l.sublist("lr_schedule", false, "Learning-rate schedule: a factor on every group's lr.");
  add(s, "type", std::string("constant"),
      "constant, linear_warmup (warmup then constant), cosine, linear or step decay; warmup_steps prefixes any of "
      "them with a linear warmup. The keys of the other types must stay at their defaults (they would be ignored).",
      V::choice({"constant", "linear_warmup", "cosine", "linear", "step"}));
  add(s, "warmup_steps", 0,
      "Steps of linear warmup from lr/warmup_steps to lr (with cosine and linear, fewer than total_steps).",
      V::integer(R::warmup_steps));
  // The schedule's length has no default (see require_schedule_length): unset (-1) until written, so
  // a list printed with every default and then given type cosine is refused, not decayed in a step.
  add(s, "total_steps", Impl::unset_in_lists,
      "cosine, linear (required with them): the step at which the decay reaches min_lr_factor; more than "
      "warmup_steps.",
      V::integer(R::total_steps, V::Special{Impl::unset_in_lists, "unset"}));
  add(s, "min_lr_factor", 0.0, "cosine, linear: the final factor.", V::real(R::min_lr_factor));
  add(s, "step_size", Impl::unset_in_lists, "step (required with it): steps between two decays.",
      V::integer(R::step_size, V::Special{Impl::unset_in_lists, "unset"}));
  add(s, "gamma", 0.1, "step: the factor of each decay.", V::real(R::gamma));
}

// The sharding switch of the diagonal optimizers (slices of the concatenated parameters) and
// Gefen (whole tensors: its scale and second-moment blocks span a tensor).
void add_shard_key(ParameterList& l, bool whole_tensors = false) {
  add(l, "shard_state", false,
      whole_tensors ? "Distributed (koptim::create with a communicator): each rank keeps the state of whole tensors "
                      "(balanced by element count), updates them and all-gathers the parameters; memory per rank "
                      "~1/N plus at most one tensor, results bitwise equal to one process."
                    : "Distributed (koptim::create with a communicator): each rank keeps the state of a slice of the "
                      "parameters, updates it and all-gathers the parameters; memory per rank ~1/N, results bitwise "
                      "equal to one process.",
      V::boolean());
}

std::shared_ptr<comm::Communicator> sharding(const ParameterList& l, std::shared_ptr<comm::Communicator> comm) {
  return l.get<bool>("shard_state") ? std::move(comm) : nullptr;
}

// The keys of inverse_exponent_override: order_K or order_K_dim_J, K and J decimal integers below
// 10^6 (an order or a dimension index beyond is no tensor's) without leading zeros (order_02
// would name order_2's entry a second time). Parsed by hand: std::regex recurses per character,
// and std::stoi throws std::out_of_range, on a long key.
enum class Override { none, order, dim };
Override override_key(const std::string& k, int& order, int& dim) {
  std::size_t i = 0;
  auto number   = [&](int& out) {
    const std::size_t start = i;
    out                     = 0;
    while (i < k.size() && k[i] >= '0' && k[i] <= '9' && i - start < 6) out = out * 10 + (k[i++] - '0');
    return i > start && !(i < k.size() && k[i] >= '0' && k[i] <= '9') && !(k[start] == '0' && i - start > 1);
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

ShampooOptions shampoo_options(const ParameterList& l) {
  auto o                  = Impl::read_option_keys<ShampooOptions>(l);
  const ParameterList& ov = l.sublist("inverse_exponent_override");
  for (auto it = ov.begin(); it != ov.end(); ++it) {
    const std::string& k = ov.name(it);
    const auto& e        = ov.entry(it);
    double a             = 0;
    if (e.isList()) {
      throw ConfigError("koptim: key 'inverse_exponent_override/" + k + "' is a list; expected a number (" +
                        R::shampoo::inverse_exponent.text(false) + ")");
    } else if (e.isType<double>()) {
      a = Teuchos::getValue<double>(e);
    } else if (e.isType<int>()) {
      a = Teuchos::getValue<int>(e);
    } else if (e.isType<long long>() && Teuchos::getValue<long long>(e) >= -(1LL << 53) &&
               Teuchos::getValue<long long>(e) <= (1LL << 53)) {
      // YAML reads an integer beyond int as long long: taken where a double holds it exactly.
      a = static_cast<double>(Teuchos::getValue<long long>(e));
    } else if (e.isType<long long>()) {
      throw ConfigError("koptim: key 'inverse_exponent_override/" + k + "' = " + Impl::entry_value_string(e) +
                        " is an integer beyond 2^53, which a double does not hold exactly");
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
                        "'; allowed: order_K or order_K_dim_J (K, J integers below 1000000, without leading zeros)");
    }
  }
  return o;
}

const std::vector<Entry>& entries() {
  static const std::vector<Entry> table = {
      {"SGD",
       "Stochastic gradient descent with momentum (torch.optim.SGD).",
       [](ParameterList& l) {
         add_common(l, SGD::default_lr, SGD::default_weight_decay, "L2 weight decay: G <- G + weight_decay W");
         add_shard_key(l);
         l.getEntryRCP("lr")->setDocString(
             "Learning rate. Required for SGD (groups may override it; at most 3.4e38 for float32 parameters).");
         Impl::add_option_keys(l, SGDOptions{});
       },
       {"lr"},
       [](const ParameterSet& p, const CommonOptions& c, const ParameterList& l,
          std::shared_ptr<comm::Communicator> comm) -> std::unique_ptr<Optimizer> {
         return std::make_unique<SGD>(p, c, Impl::read_option_keys<SGDOptions>(l), sharding(l, comm));
       }},
      {"AdaGrad",
       "AdaGrad (torch.optim.Adagrad).",
       [](ParameterList& l) {
         add_common(l, AdaGrad::default_lr, AdaGrad::default_weight_decay, "L2 weight decay: G <- G + weight_decay W");
         add_shard_key(l);
         Impl::add_option_keys(l, AdaGradOptions{});
       },
       {},
       [](const ParameterSet& p, const CommonOptions& c, const ParameterList& l,
          std::shared_ptr<comm::Communicator> comm) -> std::unique_ptr<Optimizer> {
         return std::make_unique<AdaGrad>(p, c, Impl::read_option_keys<AdaGradOptions>(l), sharding(l, comm));
       }},
      {"RMSProp",
       "RMSProp (torch.optim.RMSprop).",
       [](ParameterList& l) {
         add_common(l, RMSProp::default_lr, RMSProp::default_weight_decay, "L2 weight decay: G <- G + weight_decay W");
         add_shard_key(l);
         Impl::add_option_keys(l, RMSPropOptions{});
       },
       {},
       [](const ParameterSet& p, const CommonOptions& c, const ParameterList& l,
          std::shared_ptr<comm::Communicator> comm) -> std::unique_ptr<Optimizer> {
         return std::make_unique<RMSProp>(p, c, Impl::read_option_keys<RMSPropOptions>(l), sharding(l, comm));
       }},
      {"Adam",
       "Adam with L2 weight decay (torch.optim.Adam).",
       [](ParameterList& l) {
         add_common(l, Adam::default_lr, Adam::default_weight_decay, "L2 weight decay: G <- G + weight_decay W");
         add_shard_key(l);
         Impl::add_option_keys(l, AdamOptions{});
       },
       {},
       [](const ParameterSet& p, const CommonOptions& c, const ParameterList& l,
          std::shared_ptr<comm::Communicator> comm) -> std::unique_ptr<Optimizer> {
         return std::make_unique<Adam>(p, c, Impl::read_option_keys<AdamOptions>(l), false, sharding(l, comm));
       }},
      {"AdamW",
       "Adam with decoupled weight decay (torch.optim.AdamW).",
       [](ParameterList& l) {
         add_common(l, AdamW::default_lr, AdamW::default_weight_decay,
                    "Decoupled weight decay: W <- W (1 - lr weight_decay) before the update");
         add_shard_key(l);
         Impl::add_option_keys(l, AdamOptions{});
       },
       {},
       [](const ParameterSet& p, const CommonOptions& c, const ParameterList& l,
          std::shared_ptr<comm::Communicator> comm) -> std::unique_ptr<Optimizer> {
         return std::make_unique<AdamW>(p, c, Impl::read_option_keys<AdamOptions>(l), sharding(l, comm));
       }},
      {"Shampoo",
       "Distributed Shampoo: block-diagonal Kronecker-factored preconditioning with grafting.",
       [](ParameterList& l) {
         add_common(l, Shampoo::default_lr, Shampoo::default_weight_decay,
                    "Weight decay, applied as weight_decay_type says");
         Impl::add_option_keys(l, ShampooOptions{});
         l.sublist(
             "inverse_exponent_override", false,
             "Exponent a of X = L^-a: keys order_K (every dimension of blocks of order K) or order_K_dim_J (one "
             "dimension), values >= 0; 0 leaves the dimension unpreconditioned. Default a = 1/(2 max(K, 1)). A key "
             "that no block matches (K is a block's order after merging and splitting; J < K), or order_K when every "
             "dimension has its own key, is refused. With root_method coupled_newton only values 1/p (p a positive "
             "integer) and 0. Not with eigenvalue_corrected, which computes no inverse roots.");
       },
       {},
       [](const ParameterSet& p, const CommonOptions& c, const ParameterList& l,
          std::shared_ptr<comm::Communicator> comm) -> std::unique_ptr<Optimizer> {
         return std::make_unique<Shampoo>(p, c, shampoo_options(l), std::move(comm));
       },
       "inverse_exponent_override",
       {"order_K", "order_K_dim_J"},
       R::shampoo::inverse_exponent.text(false)},
      {"Gefen",
       "Gefen: AdamW with a shared second moment per automatic block and an 8-bit momentum with a learned codebook "
       "(about 1 byte of state per parameter).",
       [](ParameterList& l) {
         add_common(l, Gefen::default_lr, Gefen::default_weight_decay,
                    "Decoupled weight decay: W <- W (1 - lr weight_decay) before the update");
         Impl::add_option_keys(l, GefenOptions{});
         add_shard_key(l, true);
       },
       {},
       [](const ParameterSet& p, const CommonOptions& c, const ParameterList& l,
          std::shared_ptr<comm::Communicator> comm) -> std::unique_ptr<Optimizer> {
         return std::make_unique<Gefen>(p, c, Impl::read_option_keys<GefenOptions>(l), sharding(l, comm));
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

// A key of lr_schedule that its type does not read (total_steps with type step, or with no type,
// which is constant) would be ignored: refused unless it holds its default (for total_steps and
// step_size also 1, their default before -1, unset, which lists printed by then hold).
void reject_ignored_schedule_keys(const ParameterList& s, const ParameterList& defaults, const std::string& optimizer) {
  const auto type = s.get<std::string>("type");
  for (auto it = s.begin(); it != s.end(); ++it) {
    const std::string& key = s.name(it);
    if (Impl::schedule_reads(type, key)) continue;
    const auto& given = s.entry(it);
    const auto& dflt  = defaults.getEntry(key);
    const bool same   = given.isType<int>() ? Teuchos::getValue<int>(given) == Teuchos::getValue<int>(dflt) ||
                                                Teuchos::getValue<int>(given) == 1
                                            : Teuchos::getValue<double>(given) == Teuchos::getValue<double>(dflt);
    if (same) continue;
    std::string readers;
    for (const auto& r : Impl::schedule_key_readers(key)) readers += (readers.empty() ? "" : " or ") + r;
    throw ConfigError("koptim: key 'lr_schedule/" + key + "' = " + Impl::entry_value_string(given) + " for optimizer " +
                      optimizer + " is not read by lr_schedule type '" + type +
                      "' and would be ignored; set type to the schedule it belongs to (" + readers + "), or remove it");
  }
}

// The length of a decaying schedule has no default that could be right: total_steps (cosine,
// linear) and step_size (step) must be written. A default of 1 would decay to min_lr_factor (0)
// at the first step, or by gamma at every step, and the training would go on without a word. Their
// listed default is -1 (unset), so a list printed with every default and then given a decaying
// type is refused here too.
void require_schedule_length(const ParameterList& list, const ParameterList& s, const ParameterList& defaults,
                             const std::string& optimizer) {
  const auto type       = s.get<std::string>("type");
  const std::string key = Impl::schedule_length_key(type);
  if (key.empty() || s.get<int>(key) != Impl::unset_in_lists) return;
  const bool written = list.isSublist("lr_schedule") && list.sublist("lr_schedule").isParameter(key);
  throw ConfigError("koptim: key 'lr_schedule/" + key + "' is required with lr_schedule type '" + type +
                    "' for optimizer " + optimizer + (written ? " and is -1 (unset)" : "") + " (" +
                    defaults.getEntry(key).docString() + ")");
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

// A new list at every call, nothing kept between calls: a list shared by host threads would share
// its reference counts (and its validators'), which a Teuchos built without thread safety does not
// make atomic. Building one takes microseconds beside what a create() does.
RCP<const ParameterList> valid_parameters(const std::string& optimizer) {
  Impl::ScopedRegion region("koptim::valid_parameters");
  const Entry& e = entry(optimizer);
  auto l         = Teuchos::rcp(new ParameterList(optimizer));
  l->set("optimizer", optimizer, "The optimizer: " + names_string() + ".", V::choice(optimizer_names()));
  e.add_keys(*l);
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
  reject_ignored_schedule_keys(copy.sublist("lr_schedule"), valid->sublist("lr_schedule"), optimizer);
  require_schedule_length(list, copy.sublist("lr_schedule"), valid->sublist("lr_schedule"), optimizer);
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
  // Read everything first; the optimizer is built only from a complete, valid set of values.
  // With several ranks, on every rank alike: a list refused on one rank is refused on every rank
  // (the lowest failing rank's error), and ranks whose lists differ (a shard_state on some ranks
  // only would build optimizers that do not meet in their collectives) are refused together.
  const comm::Communicator* ranks = comm && comm->size() > 1 ? comm.get() : nullptr;
  ParameterList l;
  const Entry* e = nullptr;
  CommonOptions c;
  std::string xml;
  Impl::run_together(ranks, [&] {
    l              = validated_parameters(list);
    e              = &entry(l.get<std::string>("optimizer"));
    c.lr           = l.get<double>("lr");
    c.weight_decay = l.get<double>("weight_decay");
    Impl::ListReader(l).choice("nonfinite_gradient", c.nonfinite_gradient, "");
    c.lr_schedule = schedule_from(l.sublist("lr_schedule"));
    std::ostringstream text;
    {
      std::lock_guard<std::mutex> lock(Impl::teuchos_text_mutex());
      Teuchos::writeParameterListToXmlOStream(plain_copy(l), text);
    }
    xml = text.str();
  });
  if (ranks && !ranks->same_on_all_ranks(xml))
    throw ConfigError(
        "koptim::create: the ranks of the communicator pass different parameter lists (after their "
        "defaults); every rank must pass the same list. This rank's (" +
        std::to_string(ranks->rank()) + "):\n" + xml);
  auto opt = e->build(params, c, l, std::move(comm));
  Impl::set_configuration(*opt, xml);
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
    const auto valid = valid_parameters(e.name);
    table(*valid, "");
    if (!e.pattern_sublist.empty()) {
      std::string keys;
      for (const auto& k : e.pattern_keys) keys += (keys.empty() ? "`" : ", `") + e.pattern_sublist + "/" + k + "`";
      out << "| " << keys << " | double | none | " << e.pattern_allowed << " | "
          << valid->getEntry(e.pattern_sublist).docString() << " |\n";
    }
    out << "\n";
  }
}

}  // namespace koptim
