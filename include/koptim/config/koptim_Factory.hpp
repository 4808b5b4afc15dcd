// Building optimizers from Teuchos parameter lists.
//
//   auto list = koptim::read_parameter_list("adamw.yaml");   // or .xml
//   auto opt  = koptim::create(params, *list);
//
// A list names its optimizer with the key "optimizer" and holds that optimizer's keys at the
// same level, plus an optional sublist "lr_schedule". Every optimizer publishes a valid list
// (valid_parameters) in which each key has its default, a doc string and a validator. Unknown
// keys, wrong types and out-of-range values are rejected with a ConfigError naming the key, the
// value and what is allowed; nothing is built from a bad list.
//
// Host threads may call the functions here at once, each with lists of its own: each call
// returns objects of its own, and koptim's calls into Teuchos' XML and YAML readers and its XML
// writer (whose tables are process-wide) take one lock. Teuchos' objects are not thread safe in a
// Teuchos built without thread safety (Debian's): a list passed to koptim must not be used by
// another thread meanwhile (reading an entry marks it used, through a const reference too, and
// copying a list copies reference-counted validators), and a thread keeps the lists it receives
// to itself. Your own calls into Teuchos' readers, writers and list printing from other threads at
// the same time are outside that lock. (create() also builds the optimizer, which launches kernels
// on the default instance: whether several host threads may do that at once is the Kokkos
// backend's rule.)
#ifndef KOPTIM_CONFIG_FACTORY_HPP
#define KOPTIM_CONFIG_FACTORY_HPP

#include <koptim/core/koptim_Optimizer.hpp>

#include <Teuchos_ParameterList.hpp>
#include <Teuchos_RCP.hpp>

#include <cstddef>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

namespace koptim {

// The names the key "optimizer" accepts.
std::vector<std::string> optimizer_names();

// The valid list of an optimizer, a new one at every call (throws ConfigError for an unknown name).
Teuchos::RCP<const Teuchos::ParameterList> valid_parameters(const std::string& optimizer);

// A copy of the list, checked against its optimizer's valid list, with every absent key set to
// its default. Throws ConfigError.
Teuchos::ParameterList validated_parameters(const Teuchos::ParameterList& list);

namespace comm {
class Communicator;
}

// Builds the optimizer the list describes over the parameters. Throws ConfigError.
std::unique_ptr<Optimizer> create(const ParameterSet& params, const Teuchos::ParameterList& list);
// The same over a communicator: Shampoo spreads its blocks over the ranks, the diagonal
// optimizers shard their state when the list says shard_state = true; the others run replicated.
// Every rank must call it with the same parameters and list.
std::unique_ptr<Optimizer> create(const ParameterSet& params, const Teuchos::ParameterList& list,
                                  std::shared_ptr<comm::Communicator> comm);

// Reads a parameter list from an XML (.xml) or YAML (.yaml, .yml) file with Teuchos' readers,
// after a strict check of the text: every value is used exactly as written or the file is
// refused with a ConfigError naming the line or key. Refused: a YAML key indented between two
// levels or outside the top-level list (which Teuchos would drop); an XML value that is not
// exactly of its type ("0.01abc", "", "7abc" for an int, "{0.9x}" for an array; reals in decimal
// notation, within the range of a double); a key given twice; a type other than double, int,
// bool, string and Array(double); files larger than max_yaml_bytes or max_xml_bytes.
Teuchos::RCP<Teuchos::ParameterList> read_parameter_list(const std::string& path);

// The same from text in memory; format is "xml" or "yaml"; source names it in messages.
Teuchos::RCP<Teuchos::ParameterList> parameter_list_from_string(const std::string& text, const std::string& format,
                                                                const std::string& source = "");

// Size limits of parameter-list text. Teuchos' YAML reader takes time quadratic in the length of
// a value (a 250 KB value: about 20 s), so YAML is limited to 64 KiB (worst case well under a
// second); XML is read in linear time and limited to 1 MiB. Parameter lists are a few KB.
inline constexpr std::size_t max_yaml_bytes = 64 * 1024;
inline constexpr std::size_t max_xml_bytes  = 1024 * 1024;

// The defaults of an optimizer as a plain list (no validators), ready to be written to a file.
Teuchos::ParameterList default_parameter_list(const std::string& optimizer);

// The reference of every key of every optimizer, as Markdown tables (docs/parameters.md).
void print_parameter_reference(std::ostream& out);

}  // namespace koptim

#endif
