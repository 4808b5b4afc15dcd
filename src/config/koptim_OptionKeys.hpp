// Each optimizer declares its own keys once, beside it, as one function template that visits the
// fields of its options struct:
//
//   template <class O, class V, Impl::OptionsOf<O, SGDOptions> = 0>
//   void visit_keys(O& o, V& v) {
//     v.real("momentum", o.momentum, "Momentum factor mu.", ranges::sgd::momentum);
//     v.boolean("nesterov", o.nesterov, "Nesterov momentum (needs momentum > 0).");
//   }
//
// and the visitors below derive everything else from that one declaration: the valid parameter
// list (keys, defaults from the struct's own defaults, documentation, validators; and so
// docs/parameters.md), the reading of a validated list into the struct, the constructor's range
// checks, and the text every rank compares to check that all ranks built the same optimizer.
// A std::optional field is written -1 in a list ("unset"); an enum's names come from its table
// (koptim_EnumNames.hpp).
#ifndef KOPTIM_SRC_CONFIG_OPTIONKEYS_HPP
#define KOPTIM_SRC_CONFIG_OPTIONKEYS_HPP

#include "koptim_EnumNames.hpp"
#include "koptim_KeyRanges.hpp"

#include "koptim_Validators.hpp"
#include "../core/koptim_Check.hpp"

#include <Teuchos_ParameterList.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>

namespace koptim {
namespace Impl {

// The signature of an options struct's visit_keys, for a const or non-const Options:
//   template <class O, class V, Impl::OptionsOf<O, SGDOptions> = 0> void visit_keys(O& o, V& v);
template <class O, class Options>
using OptionsOf = std::enable_if_t<std::is_same_v<std::remove_const_t<O>, Options>, int>;

// A parameter list writes an unset std::optional option as -1 (outside every such key's range).
inline constexpr int unset_in_lists = -1;

// Adds every key to a valid parameter list, its default the visited struct's value.
class ListWriter {
 public:
  explicit ListWriter(Teuchos::ParameterList& l) : l_(l) {}
  void real(const char* key, double v, const char* doc, const Range& r) { l_.set(key, v, doc, KeyValidator::real(r)); }
  template <class I>
  void integer(const char* key, I v, const char* doc, const Range& r) {
    l_.set(key, static_cast<int>(v), doc, KeyValidator::integer(r));
  }
  void boolean(const char* key, bool v, const char* doc) { l_.set(key, v, doc, KeyValidator::boolean()); }
  template <class E>
  void choice(const char* key, E v, const char* doc) {
    l_.set(key, std::string(enum_name(v)), doc, KeyValidator::choice(enum_names<E>()));
  }
  void optional_real(const char* key, const std::optional<double>& v, const char* doc, const Range& r,
                     const char* unset) {
    l_.set(key, v.value_or(unset_in_lists), doc, KeyValidator::real(r, KeyValidator::Special{unset_in_lists, unset}));
  }
  template <class I>
  void optional_integer(const char* key, const std::optional<I>& v, const char* doc, const Range& r,
                        const char* unset) {
    l_.set(key, v ? static_cast<int>(*v) : unset_in_lists, doc,
           KeyValidator::integer(r, KeyValidator::Special{unset_in_lists, unset}));
  }
  void real_pair(const char* key, const std::array<double, 2>& v, const char* doc, const Range& r0, const Range& r1) {
    Teuchos::Array<double> a(2);
    a[0] = v[0];
    a[1] = v[1];
    l_.set(key, a, doc, KeyValidator::real_array({r0, r1}));
  }

 private:
  Teuchos::ParameterList& l_;
};

// Reads every key of a validated list (every key present, of its validated type) into the struct.
class ListReader {
 public:
  explicit ListReader(const Teuchos::ParameterList& l) : l_(l) {}
  void real(const char* key, double& v, const char*, const Range&) { v = l_.get<double>(key); }
  template <class I>
  void integer(const char* key, I& v, const char*, const Range&) {
    v = static_cast<I>(l_.get<int>(key));
  }
  void boolean(const char* key, bool& v, const char*) { v = l_.get<bool>(key); }
  template <class E>
  void choice(const char* key, E& v, const char*) {
    v = enum_value<E>(key, l_.get<std::string>(key));
  }
  void optional_real(const char* key, std::optional<double>& v, const char*, const Range&, const char*) {
    const double x = l_.get<double>(key);
    if (x == unset_in_lists) {
      v.reset();
    } else {
      v = x;
    }
  }
  template <class I>
  void optional_integer(const char* key, std::optional<I>& v, const char*, const Range&, const char*) {
    const int x = l_.get<int>(key);
    if (x == unset_in_lists) {
      v.reset();
    } else {
      v = static_cast<I>(x);
    }
  }
  void real_pair(const char* key, std::array<double, 2>& v, const char*, const Range&, const Range&) {
    const auto& a = l_.get<Teuchos::Array<double>>(key);
    v             = {a[0], a[1]};
  }

 private:
  const Teuchos::ParameterList& l_;
};

// The constructor's check: ConfigError "koptim::<optimizer>: <key> = <value> is not allowed;
// allowed: <range>" for the first field outside its range (an unset optional is allowed).
class RangeChecker {
 public:
  explicit RangeChecker(std::string optimizer) : optimizer_(std::move(optimizer)) {}
  void real(const char* key, double v, const char*, const Range& r) const { require(optimizer_, key, v, r); }
  template <class I>
  void integer(const char* key, I v, const char*, const Range& r) const {
    require(optimizer_, key, static_cast<double>(v), r, true);
  }
  void boolean(const char*, bool, const char*) const {}
  template <class E>
  void choice(const char*, E, const char*) const {}
  void optional_real(const char* key, const std::optional<double>& v, const char*, const Range& r, const char*) const {
    if (v) require(optimizer_, key, *v, r);
  }
  template <class I>
  void optional_integer(const char* key, const std::optional<I>& v, const char*, const Range& r, const char*) const {
    if (v) require(optimizer_, key, static_cast<double>(*v), r, true);
  }
  void real_pair(const char* key, const std::array<double, 2>& v, const char*, const Range& r0, const Range& r1) const {
    require(optimizer_, std::string(key) + "[0]", v[0], r0);
    require(optimizer_, std::string(key) + "[1]", v[1], r1);
  }

 private:
  std::string optimizer_;
};

// "key value; " for every field, reals in their shortest exact form: what every rank compares.
class Describer {
 public:
  void real(const char* key, double v, const char*, const Range&) { add(key, real_string(v)); }
  template <class I>
  void integer(const char* key, I v, const char*, const Range&) {
    add(key, std::to_string(static_cast<long long>(v)));
  }
  void boolean(const char* key, bool v, const char*) { add(key, v ? "true" : "false"); }
  template <class E>
  void choice(const char* key, E v, const char*) {
    add(key, enum_name(v));
  }
  void optional_real(const char* key, const std::optional<double>& v, const char*, const Range&, const char*) {
    add(key, v ? real_string(*v) : "unset");
  }
  template <class I>
  void optional_integer(const char* key, const std::optional<I>& v, const char*, const Range&, const char*) {
    add(key, v ? std::to_string(static_cast<long long>(*v)) : "unset");
  }
  void real_pair(const char* key, const std::array<double, 2>& v, const char*, const Range&, const Range&) {
    add(key, real_string(v[0]) + "," + real_string(v[1]));
  }
  const std::vector<std::string>& items() const { return items_; }

 private:
  void add(const char* key, const std::string& value) { items_.push_back(std::string(key) + ' ' + value); }
  std::vector<std::string> items_;
};

// The three uses, for an options struct O with visit_keys(O&, Visitor&) found by argument-dependent
// lookup or declared before the call.
template <class O>
void add_option_keys(Teuchos::ParameterList& l, const O& defaults) {
  ListWriter w(l);
  visit_keys(defaults, w);
}
template <class O>
O read_option_keys(const Teuchos::ParameterList& l) {
  O o;
  ListReader r(l);
  visit_keys(o, r);
  return o;
}
template <class O>
void check_option_ranges(const std::string& optimizer, const O& o) {
  RangeChecker c(optimizer);
  visit_keys(o, c);
}
// Each key and its value, an item each.
template <class O>
std::vector<std::string> describe_options(const O& o) {
  Describer d;
  visit_keys(o, d);
  return d.items();
}

}  // namespace Impl
}  // namespace koptim

#endif
