// The validator attached to every key of koptim's valid parameter lists. One class covers the
// kinds of values koptim takes (a real or an integer in a range, a bool, one of a set of
// strings, a fixed-length array of reals in a range); its messages name the key, the value and
// what is allowed. Integers are accepted (and converted) where a real is expected, since YAML
// readers turn "0" into an int.
#ifndef KOPTIM_CONFIG_VALIDATORS_HPP
#define KOPTIM_CONFIG_VALIDATORS_HPP

#include <Teuchos_ParameterEntryValidator.hpp>
#include <Teuchos_ParameterList.hpp>

#include <limits>
#include <string>
#include <vector>

namespace koptim {
namespace Impl {

class KeyValidator : public Teuchos::ParameterEntryValidator {
 public:
  enum class Kind { real, integer, boolean, choice, real_array };

  static Teuchos::RCP<const KeyValidator> real(double lo, double hi, bool lo_open = false, bool hi_open = false);
  static Teuchos::RCP<const KeyValidator> integer(long long lo, long long hi = std::numeric_limits<int>::max());
  static Teuchos::RCP<const KeyValidator> boolean();
  static Teuchos::RCP<const KeyValidator> choice(std::vector<std::string> values);
  static Teuchos::RCP<const KeyValidator> real_array(int length, double lo, double hi, bool lo_open = false,
                                                     bool hi_open = false);

  // "a real in [0, inf)", "one of: error, skip_step", ...
  std::string allowed() const;
  // "double", "int", "bool", "string", "Array(double)"
  std::string type_name() const;
  Kind kind() const { return kind_; }

  const std::string getXMLTypeName() const override { return "koptimKeyValidator"; }
  void printDoc(const std::string& docString, std::ostream& out) const override;
  ValidStringsList validStringValues() const override;
  void validate(const Teuchos::ParameterEntry& entry, const std::string& paramName,
                const std::string& sublistName) const override;
  void validateAndModify(const std::string& paramName, const std::string& sublistName,
                         Teuchos::ParameterEntry* entry) const override;

 private:
  KeyValidator() = default;
  bool in_range(double v) const;
  [[noreturn]] void reject(const Teuchos::ParameterEntry& entry, const std::string& paramName,
                           const std::string& sublistName, const std::string& problem) const;

  Kind kind_    = Kind::real;
  double lo_    = 0.0;
  double hi_    = 0.0;
  bool lo_open_ = false;
  bool hi_open_ = false;
  int length_   = 0;
  std::vector<std::string> choices_;
};

// "value" of an entry as text, for messages.
std::string entry_value_string(const Teuchos::ParameterEntry& entry);

}  // namespace Impl
}  // namespace koptim

#endif
