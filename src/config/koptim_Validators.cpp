#include <koptim/config/koptim_Validators.hpp>

#include <koptim/core/koptim_Check.hpp>

#include <Teuchos_StrUtils.hpp>

#include <cmath>
#include <sstream>

namespace koptim {
namespace Impl {

namespace {
// A bound: integers (the range of an int key) in full, reals in their shortest round-trip form.
std::string number(double v, bool integer) {
  if (integer && std::isfinite(v)) return std::to_string(static_cast<long long>(v));
  return real_string(v);
}
}  // namespace

std::string entry_value_string(const Teuchos::ParameterEntry& entry) {
  if (entry.isType<bool>()) return Teuchos::getValue<bool>(entry) ? "true" : "false";
  if (entry.isType<double>()) return real_string(Teuchos::getValue<double>(entry));
  if (entry.isType<Teuchos::Array<double>>()) {
    std::string s = "{";
    for (double v : Teuchos::getValue<Teuchos::Array<double>>(entry)) s += (s.size() > 1 ? ", " : "") + real_string(v);
    return s + "}";
  }
  std::ostringstream s;
  s << entry.getAny(false);
  return s.str();
}

Teuchos::RCP<const KeyValidator> KeyValidator::real(double lo, double hi, bool lo_open, bool hi_open) {
  Teuchos::RCP<KeyValidator> v(new KeyValidator);
  v->kind_    = Kind::real;
  v->lo_      = lo;
  v->hi_      = hi;
  v->lo_open_ = lo_open;
  v->hi_open_ = hi_open;
  return v;
}

Teuchos::RCP<const KeyValidator> KeyValidator::integer(long long lo, long long hi) {
  Teuchos::RCP<KeyValidator> v(new KeyValidator);
  v->kind_ = Kind::integer;
  v->lo_   = static_cast<double>(lo);
  v->hi_   = static_cast<double>(hi);
  return v;
}

Teuchos::RCP<const KeyValidator> KeyValidator::boolean() {
  Teuchos::RCP<KeyValidator> v(new KeyValidator);
  v->kind_ = Kind::boolean;
  return v;
}

Teuchos::RCP<const KeyValidator> KeyValidator::choice(std::vector<std::string> values) {
  Teuchos::RCP<KeyValidator> v(new KeyValidator);
  v->kind_    = Kind::choice;
  v->choices_ = std::move(values);
  return v;
}

Teuchos::RCP<const KeyValidator> KeyValidator::real_array(int length, double lo, double hi, bool lo_open,
                                                          bool hi_open) {
  Teuchos::RCP<KeyValidator> v(new KeyValidator);
  v->kind_    = Kind::real_array;
  v->length_  = length;
  v->lo_      = lo;
  v->hi_      = hi;
  v->lo_open_ = lo_open;
  v->hi_open_ = hi_open;
  return v;
}

std::string KeyValidator::type_name() const {
  switch (kind_) {
    case Kind::real:
      return "double";
    case Kind::integer:
      return "int";
    case Kind::boolean:
      return "bool";
    case Kind::choice:
      return "string";
    case Kind::real_array:
      return "Array(double)";
  }
  return "";
}

std::string KeyValidator::allowed() const {
  std::ostringstream s;
  const std::string range = std::string(lo_open_ ? "(" : "[") + number(lo_, kind_ == Kind::integer) + ", " +
                            number(hi_, kind_ == Kind::integer) + (hi_open_ ? ")" : "]");
  switch (kind_) {
    case Kind::real:
      s << "a real in " << range;
      break;
    case Kind::integer:
      s << "an integer in " << range;
      break;
    case Kind::boolean:
      s << "true or false";
      break;
    case Kind::choice:
      s << "one of: ";
      for (std::size_t i = 0; i < choices_.size(); ++i) s << (i ? ", " : "") << choices_[i];
      break;
    case Kind::real_array:
      s << length_ << " reals, each in " << range;
      break;
  }
  return s.str();
}

bool KeyValidator::in_range(double v) const {
  return v == v && (lo_open_ ? v > lo_ : v >= lo_) && (hi_open_ ? v < hi_ : v <= hi_);
}

void KeyValidator::printDoc(const std::string& docString, std::ostream& out) const {
  Teuchos::StrUtils::printLines(out, "# ", docString);
  out << "#  Allowed: " << allowed() << "\n";
}

Teuchos::ParameterEntryValidator::ValidStringsList KeyValidator::validStringValues() const {
  if (kind_ != Kind::choice) return Teuchos::null;
  return Teuchos::rcp(new Teuchos::Array<std::string>(choices_.begin(), choices_.end()));
}

void KeyValidator::reject(const Teuchos::ParameterEntry& entry, const std::string& paramName,
                          const std::string& sublistName, const std::string& problem) const {
  std::ostringstream s;
  s << "key '" << paramName << "' in list '" << sublistName << "' = " << entry_value_string(entry) << " ("
    << entry.getAny(false).typeName() << "): " << problem << "; allowed: " << allowed();
  throw Teuchos::Exceptions::InvalidParameterValue(s.str());
}

void KeyValidator::validate(const Teuchos::ParameterEntry& entry, const std::string& paramName,
                            const std::string& sublistName) const {
  const Teuchos::any& a = entry.getAny(false);
  switch (kind_) {
    case Kind::real: {
      double v;
      if (a.type() == typeid(double)) {
        v = Teuchos::any_cast<double>(a);
      } else if (a.type() == typeid(int)) {
        v = Teuchos::any_cast<int>(a);
      } else {
        reject(entry, paramName, sublistName, "wrong type, expected double");
      }
      if (!in_range(v)) reject(entry, paramName, sublistName, "out of range");
      break;
    }
    case Kind::integer: {
      long long v;
      if (a.type() == typeid(int)) {
        v = Teuchos::any_cast<int>(a);
      } else if (a.type() == typeid(long long)) {
        v = Teuchos::any_cast<long long>(a);
      } else {
        reject(entry, paramName, sublistName, "wrong type, expected int");
      }
      if (!in_range(static_cast<double>(v))) reject(entry, paramName, sublistName, "out of range");
      break;
    }
    case Kind::boolean:
      if (a.type() != typeid(bool)) reject(entry, paramName, sublistName, "wrong type, expected bool");
      break;
    case Kind::choice: {
      if (a.type() != typeid(std::string)) reject(entry, paramName, sublistName, "wrong type, expected string");
      const auto& v = Teuchos::any_cast<std::string>(a);
      bool found    = false;
      for (const auto& c : choices_) found = found || c == v;
      if (!found) reject(entry, paramName, sublistName, "not a known value");
      break;
    }
    case Kind::real_array: {
      if (a.type() != typeid(Teuchos::Array<double>)) {
        reject(entry, paramName, sublistName, "wrong type, expected Array(double)");
      }
      const auto& v = Teuchos::any_cast<Teuchos::Array<double>>(a);
      if (static_cast<int>(v.size()) != length_) {
        reject(entry, paramName, sublistName, "has " + std::to_string(v.size()) + " entries");
      }
      for (double x : v)
        if (!in_range(x)) reject(entry, paramName, sublistName, "an entry is out of range");
      break;
    }
  }
}

void KeyValidator::validateAndModify(const std::string& paramName, const std::string& sublistName,
                                     Teuchos::ParameterEntry* entry) const {
  validate(*entry, paramName, sublistName);
  if (kind_ == Kind::real && entry->getAny(false).type() == typeid(int)) {
    const double v = Teuchos::any_cast<int>(entry->getAny(false));
    entry->setValue<double>(v, entry->isDefault(), entry->docString(), entry->validator());
  }
}

}  // namespace Impl
}  // namespace koptim
