#include <koptim/config/impl/koptim_Validators.hpp>

#include <koptim/core/impl/koptim_Check.hpp>

#include <Teuchos_StrUtils.hpp>

#include <cmath>
#include <sstream>

namespace koptim {
namespace Impl {

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
      } else {
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
      if (a.type() != typeid(Teuchos::Array<double>)) {
        reject(entry, paramName, sublistName, "wrong type, expected Array(double)");
      }
      const auto& v = Teuchos::any_cast<Teuchos::Array<double>>(a);
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
  if (kind_ == Kind::real && entry->getAny(false).type() == typeid(int)) {
    const double v = Teuchos::any_cast<int>(entry->getAny(false));
    entry->setValue<double>(v, entry->isDefault(), entry->docString(), entry->validator());
  }
}

}  // namespace Impl
}  // namespace koptim
