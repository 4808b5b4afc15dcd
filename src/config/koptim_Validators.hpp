// The validator attached to every key of koptim's valid parameter lists. One class covers the
// kinds of values koptim takes (a real or an integer in a range, a bool, one of a set of
// strings, a fixed-length array of reals in a range); its messages name the key, the value and
// what is allowed. Integers are accepted (and converted) where a real is expected, since YAML
// readers turn "0" into an int.
#ifndef KOPTIM_SRC_CONFIG_VALIDATORS_HPP
#define KOPTIM_SRC_CONFIG_VALIDATORS_HPP

#include "../core/koptim_Check.hpp"

#include <Teuchos_ParameterEntryValidator.hpp>
#include <Teuchos_ParameterList.hpp>

#include <optional>
#include <string>
#include <vector>

namespace koptim {
namespace Impl {

class KeyValidator : public Teuchos::ParameterEntryValidator {
 public:
  enum class Kind { real, integer, boolean, choice, real_array };

  // A value a list may give outside the range, with a meaning of its own: -1 for "unset" where
  // the C++ option is a std::optional.
  struct Special {
    double value;
    std::string meaning;
  };
  static Teuchos::RCP<const KeyValidator> real(const Range& range, std::optional<Special> special = {});
  static Teuchos::RCP<const KeyValidator> integer(const Range& range, std::optional<Special> special = {});
  static Teuchos::RCP<const KeyValidator> boolean();
  static Teuchos::RCP<const KeyValidator> choice(std::vector<std::string> values);
  // A fixed-length array, one range per entry.
  static Teuchos::RCP<const KeyValidator> real_array(std::vector<Range> entries);

  // "a real in [0, inf)", "one of: error, skip_step", ...
  std::string allowed() const;
  // "double", "int", "bool", "string", "Array(double)"
  std::string type_name() const;
  Kind kind() const { return kind_; }
  // The range (one per entry of an array; empty for bool and choice) and the special value.
  const std::vector<Range>& ranges() const { return ranges_; }
  const std::optional<Special>& special() const { return special_; }
  bool accepts(double v, std::size_t entry = 0) const;

  const std::string getXMLTypeName() const override { return "koptimKeyValidator"; }
  void printDoc(const std::string& docString, std::ostream& out) const override;
  ValidStringsList validStringValues() const override;
  void validate(const Teuchos::ParameterEntry& entry, const std::string& paramName,
                const std::string& sublistName) const override;
  void validateAndModify(const std::string& paramName, const std::string& sublistName,
                         Teuchos::ParameterEntry* entry) const override;

 private:
  KeyValidator() = default;
  [[noreturn]] void reject(const Teuchos::ParameterEntry& entry, const std::string& paramName,
                           const std::string& sublistName, const std::string& problem) const;

  Kind kind_ = Kind::real;
  std::vector<Range> ranges_;
  std::optional<Special> special_;
  std::vector<std::string> choices_;
};

// "value" of an entry as text, for messages.
std::string entry_value_string(const Teuchos::ParameterEntry& entry);

}  // namespace Impl
}  // namespace koptim

#endif
