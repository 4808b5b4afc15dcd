#include "koptim_Validators.hpp"

#include "../core/koptim_Check.hpp"

#include <Teuchos_StrUtils.hpp>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

namespace koptim {
namespace Impl {

namespace {
// Integers up to 2^53 in magnitude are exact in a double.
constexpr long long exact_integer_limit = 1LL << 53;

// An Array(double) or Array(int) entry's values as doubles (ints convert exactly).
Teuchos::Array<double> as_reals(const Teuchos::any& a) {
  if (a.type() == typeid(Teuchos::Array<double>)) return Teuchos::any_cast<Teuchos::Array<double>>(a);
  const auto& i = Teuchos::any_cast<Teuchos::Array<int>>(a);
  return Teuchos::Array<double>(i.begin(), i.end());
}
}  // namespace

std::string entry_value_string(const Teuchos::ParameterEntry& entry) {
  if (entry.isType<bool>()) return Teuchos::getValue<bool>(entry) ? "true" : "false";
  if (entry.isType<std::string>()) {
    // A string with control characters (a line break or CR from a block scalar or a CRLF file) or
    // with surrounding spaces is shown quoted, its control characters escaped: printed raw, they
    // would make the value look like a known one.
    const auto& v = Teuchos::getValue<std::string>(entry);
    bool plain    = !v.empty() && v.front() != ' ' && v.back() != ' ';
    for (unsigned char c : v) plain = plain && c >= 0x20 && c != 0x7f;
    if (plain) return v;
    std::string q = "'";
    for (unsigned char c : v) {
      if (c == '\n') {
        q += "\\n";
      } else if (c == '\r') {
        q += "\\r";
      } else if (c == '\t') {
        q += "\\t";
      } else if (c < 0x20 || c == 0x7f) {
        const char* hex = "0123456789abcdef";
        q += std::string("\\x") + hex[c >> 4] + hex[c & 15];
      } else {
        q += static_cast<char>(c);
      }
    }
    return q + "'";
  }
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

Teuchos::RCP<const KeyValidator> KeyValidator::real(const Range& range, std::optional<Special> special) {
  Teuchos::RCP<KeyValidator> v(new KeyValidator);
  v->kind_    = Kind::real;
  v->ranges_  = {range};
  v->special_ = std::move(special);
  return v;
}

Teuchos::RCP<const KeyValidator> KeyValidator::integer(const Range& range, std::optional<Special> special) {
  Teuchos::RCP<KeyValidator> v(new KeyValidator);
  v->kind_    = Kind::integer;
  v->ranges_  = {range};
  v->special_ = std::move(special);
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

Teuchos::RCP<const KeyValidator> KeyValidator::real_array(std::vector<Range> entries) {
  Teuchos::RCP<KeyValidator> v(new KeyValidator);
  v->kind_   = Kind::real_array;
  v->ranges_ = std::move(entries);
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
  const bool integer = kind_ == Kind::integer;
  std::string special;
  if (special_) {
    special = (integer ? std::to_string(static_cast<long long>(special_->value)) : real_string(special_->value)) +
              " (" + special_->meaning + ") or ";
  }
  switch (kind_) {
    case Kind::real:
    case Kind::integer:
      return special + ranges_[0].text(integer);
    case Kind::boolean:
      return "true or false";
    case Kind::choice: {
      std::string s = "one of: ";
      for (std::size_t i = 0; i < choices_.size(); ++i) s += (i ? ", " : "") + choices_[i];
      return s;
    }
    case Kind::real_array: {
      bool same = true;
      for (const auto& r : ranges_) same = same && r.bounds(false) == ranges_[0].bounds(false);
      std::string s = std::to_string(ranges_.size()) + " reals";
      if (same) return s + ", each in " + ranges_[0].bounds(false);
      for (std::size_t i = 0; i < ranges_.size(); ++i)
        s += (i == 0 ? ", in " : i + 1 == ranges_.size() ? " and " : ", ") + ranges_[i].bounds(false);
      return s;
    }
  }
  return "";
}

bool KeyValidator::accepts(double v, std::size_t entry) const {
  if (special_ && v == special_->value) return true;
  return entry < ranges_.size() && ranges_[entry].contains(v);
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
      } else if (a.type() == typeid(long long)) {
        // YAML reads an integer beyond int as long long: taken where a double holds it exactly.
        const long long i = Teuchos::any_cast<long long>(a);
        if (i > exact_integer_limit || i < -exact_integer_limit)
          reject(entry, paramName, sublistName, "an integer beyond 2^53, which a double does not hold exactly");
        v = static_cast<double>(i);
      } else {
        // A YAML number beyond a double's range (1e400) reaches here as text: say so.
        if (a.type() == typeid(std::string)) {
          const auto& text   = Teuchos::any_cast<std::string>(a);
          const bool numeral = !text.empty() && text.find_first_not_of("+-.0123456789eE") == std::string::npos &&
                               text.find_first_of("0123456789") != std::string::npos;
          char* end = nullptr;
          if (numeral && std::isinf(std::strtod(text.c_str(), &end)) && *end == '\0')
            reject(entry, paramName, sublistName, "a number too large for a double, which reads it as text");
        }
        reject(entry, paramName, sublistName, "wrong type, expected double");
      }
      if (!accepts(v)) reject(entry, paramName, sublistName, "out of range");
      break;
    }
    case Kind::integer: {
      long long v;
      if (a.type() == typeid(int)) {
        v = Teuchos::any_cast<int>(a);
      } else if (a.type() == typeid(long long)) {
        v = Teuchos::any_cast<long long>(a);
        if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
          reject(entry, paramName, sublistName, "out of range (beyond an int)");
      } else {
        reject(entry, paramName, sublistName, "wrong type, expected int");
      }
      if (!accepts(static_cast<double>(v))) reject(entry, paramName, sublistName, "out of range");
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
      if (a.type() != typeid(Teuchos::Array<double>) && a.type() != typeid(Teuchos::Array<int>)) {
        reject(entry, paramName, sublistName, "wrong type, expected Array(double)");
      }
      const auto v = as_reals(a);
      if (static_cast<std::size_t>(v.size()) != ranges_.size()) {
        reject(entry, paramName, sublistName, "has " + std::to_string(v.size()) + " entries");
      }
      for (std::size_t i = 0; i < ranges_.size(); ++i)
        if (!accepts(v[static_cast<Teuchos::Array<double>::size_type>(i)], i))
          reject(entry, paramName, sublistName, "entry " + std::to_string(i) + " is out of range");
      break;
    }
  }
}

void KeyValidator::validateAndModify(const std::string& paramName, const std::string& sublistName,
                                     Teuchos::ParameterEntry* entry) const {
  validate(*entry, paramName, sublistName);
  // The value in the type the key is read as (validate() accepted it, so it converts exactly).
  const Teuchos::any& a = entry->getAny(false);
  if (kind_ == Kind::real && a.type() == typeid(int)) {
    const double v = Teuchos::any_cast<int>(a);
    entry->setValue<double>(v, entry->isDefault(), entry->docString(), entry->validator());
  } else if (kind_ == Kind::real && a.type() == typeid(long long)) {
    const double v = static_cast<double>(Teuchos::any_cast<long long>(a));
    entry->setValue<double>(v, entry->isDefault(), entry->docString(), entry->validator());
  } else if (kind_ == Kind::integer && a.type() == typeid(long long)) {
    const int v = static_cast<int>(Teuchos::any_cast<long long>(a));
    entry->setValue<int>(v, entry->isDefault(), entry->docString(), entry->validator());
  } else if (kind_ == Kind::real_array && a.type() == typeid(Teuchos::Array<int>)) {
    const Teuchos::Array<double> v = as_reals(a);
    entry->setValue<Teuchos::Array<double>>(v, entry->isDefault(), entry->docString(), entry->validator());
  }
}

}  // namespace Impl
}  // namespace koptim
