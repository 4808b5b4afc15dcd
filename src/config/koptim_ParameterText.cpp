// Reading parameter lists from XML and YAML text. Teuchos' readers do the parsing, but on their
// own they misread some inputs without a word (a mis-indented YAML key is dropped, an XML
// value="0.01abc" becomes 0.01, a repeated XML key keeps its last value). So the text is checked
// here first, by small strict scanners that know only what koptim needs, and what Teuchos
// produced is compared with what was written: a value is used exactly as written, or refused.
#include <koptim/config/koptim_Factory.hpp>
#include <koptim/core/koptim_Error.hpp>
#include <koptim/core/impl/koptim_Profiling.hpp>

#include <Teuchos_StringInputSource.hpp>
#include <Teuchos_XMLObject.hpp>
#include <Teuchos_XMLParameterListReader.hpp>
#include <Teuchos_YamlParameterListCoreHelpers.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <vector>

namespace koptim {

namespace {

using Teuchos::ParameterList;
using Teuchos::RCP;

[[noreturn]] void refuse(const std::string& source, const std::string& what) {
  throw ConfigError("koptim: parameter list " + source + ": " + what);
}

// Shown in a message: long values are cut, so that a message stays readable.
std::string shown(const std::string& s) {
  const std::size_t max = 80;
  return "'" + (s.size() <= max ? s : s.substr(0, max) + "...' (" + std::to_string(s.size()) + " characters)") +
         (s.size() <= max ? "'" : "");
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

std::string trim(const std::string& s) {
  std::size_t b = 0, e = s.size();
  while (b < e && is_space(s[b])) ++b;
  while (e > b && is_space(s[e - 1])) --e;
  return s.substr(b, e - b);
}

// A decimal real as C and C++ write it: [+-] digits [. digits] [e [+-] digits] (at least one digit
// before or after the point). No hexadecimal, no inf or nan, nothing after it. Refuses a value that
// does not fit a double (overflow, or a nonzero value that underflows to 0).
bool parse_real(const std::string& t, double& out, std::string& why) {
  std::size_t i = 0, n = t.size();
  if (i < n && (t[i] == '+' || t[i] == '-')) ++i;
  std::size_t digits = 0, nonzero = 0;
  for (; i < n && is_digit(t[i]); ++i, ++digits) nonzero += t[i] != '0';
  if (i < n && t[i] == '.') {
    for (++i; i < n && is_digit(t[i]); ++i, ++digits) nonzero += t[i] != '0';
  }
  if (digits == 0) {
    why = "not a real number";
    return false;
  }
  if (i < n && (t[i] == 'e' || t[i] == 'E')) {
    ++i;
    if (i < n && (t[i] == '+' || t[i] == '-')) ++i;
    std::size_t exp_digits = 0;
    for (; i < n && is_digit(t[i]); ++i) ++exp_digits;
    if (exp_digits == 0) {
      why = "not a real number (an exponent without digits)";
      return false;
    }
  }
  if (i != n) {
    why = "not a real number (unexpected '" + std::string(1, t[i]) + "' at character " + std::to_string(i + 1) + ")";
    return false;
  }
  errno     = 0;
  char* end = nullptr;
  out       = std::strtod(t.c_str(), &end);
  if (!std::isfinite(out)) {
    why = "too large for a double";
    return false;
  }
  if (out == 0.0 && nonzero > 0) {
    why = "too small for a double (it would be read as 0)";
    return false;
  }
  return true;
}

// A decimal integer within int: [+-] digits.
bool parse_int(const std::string& t, long long& out, std::string& why) {
  std::size_t i = (!t.empty() && (t[0] == '+' || t[0] == '-')) ? 1 : 0;
  if (i == t.size()) {
    why = "not an integer";
    return false;
  }
  for (std::size_t j = i; j < t.size(); ++j) {
    if (!is_digit(t[j])) {
      why = "not an integer (unexpected '" + std::string(1, t[j]) + "' at character " + std::to_string(j + 1) + ")";
      return false;
    }
  }
  errno = 0;
  out   = std::strtoll(t.c_str(), nullptr, 10);
  if (errno == ERANGE || out < std::numeric_limits<int>::min() || out > std::numeric_limits<int>::max()) {
    why = "outside the range of an int [" + std::to_string(std::numeric_limits<int>::min()) + ", " +
          std::to_string(std::numeric_limits<int>::max()) + "]";
    return false;
  }
  return true;
}

// {a, b, ...} of reals (or {} for none).
bool parse_real_array(const std::string& t, std::vector<double>& out, std::string& why) {
  if (t.size() < 2 || t.front() != '{' || t.back() != '}') {
    why = "not an array: write {x, y, ...}";
    return false;
  }
  const std::string inner = trim(t.substr(1, t.size() - 2));
  out.clear();
  if (inner.empty()) return true;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = inner.find(',', start);
    const std::string item  = trim(inner.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    double v                = 0;
    std::string item_why;
    if (!parse_real(item, v, item_why)) {
      why = "entry " + std::to_string(out.size() + 1) + " " + shown(item) + " is " + item_why;
      return false;
    }
    out.push_back(v);
    if (comma == std::string::npos) return true;
    start = comma + 1;
  }
}

// Lists nested deeper than this are refused (the readers recurse once per level).
constexpr int max_depth = 32;

bool same_bits(double a, double b) { return a == b && std::signbit(a) == std::signbit(b); }

// ---- XML ---------------------------------------------------------------------------------------

// Checks one <ParameterList> element and its children: only Parameter and ParameterList elements,
// each name once, every value exactly of its type. Returns nothing; throws ConfigError.
void check_xml_list(const Teuchos::XMLObject& x, const std::string& path, const std::string& source, int depth) {
  if (depth > max_depth)
    refuse(source,
           "list '" + path.substr(0, 200) + "...' is nested more than " + std::to_string(max_depth) + " levels deep");
  for (int i = 0; i < x.numContentLines(); ++i) {
    if (!trim(x.getContentLine(i)).empty())
      refuse(source, "list '" + path + "' contains the text " + shown(trim(x.getContentLine(i))) +
                         "; a list holds only <Parameter> and <ParameterList> elements");
  }
  std::map<std::string, std::string> seen;  // name -> what it was the first time
  for (int c = 0; c < x.numChildren(); ++c) {
    const Teuchos::XMLObject& e = x.getChild(c);
    const std::string& tag      = e.getTag();
    // Teuchos writes an empty <Validators/> into every list it writes; validators in a file would
    // be Teuchos' own, which koptim's lists do not use.
    if ((tag == "Validators" || tag == "Dependencies") && depth == 0) {
      if (e.numChildren() == 0) continue;
      refuse(source, "list '" + path + "' contains a non-empty <" + tag +
                         "> element; koptim reads values only (its validators are built in): remove it");
    }
    if (tag != "Parameter" && tag != "ParameterList")
      refuse(source, "list '" + path + "' contains an element <" + tag +
                         ">; a list holds only <Parameter> and <ParameterList> elements");
    if (!e.hasAttribute("name")) refuse(source, "a <" + tag + "> in list '" + path + "' has no attribute name");
    const std::string& name = e.getAttribute("name");
    const std::string key   = path + "/" + name;
    const auto first        = seen.find(name);
    if (first != seen.end())
      refuse(source, "key '" + key + "' is given twice (as " + first->second + " and as " +
                         (tag == "Parameter" ? "a <Parameter>" : "a <ParameterList>") + "); give each key once");
    seen[name] = tag == "Parameter" ? "a <Parameter>" : "a <ParameterList>";
    if (tag == "ParameterList") {
      check_xml_list(e, key, source, depth + 1);
      continue;
    }
    if (!e.hasAttribute("type")) refuse(source, "key '" + key + "' has no attribute type");
    if (!e.hasAttribute("value")) refuse(source, "key '" + key + "' has no attribute value");
    const std::string& type  = e.getAttribute("type");
    const std::string& value = e.getAttribute("value");
    const std::string t      = trim(value);
    std::string why;
    bool ok = true;
    if (type == "double") {
      double v;
      ok = parse_real(t, v, why);
    } else if (type == "int") {
      long long v;
      ok = parse_int(t, v, why);
    } else if (type == "bool") {
      std::string l;
      for (char ch : t) l += static_cast<char>(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
      ok  = l == "true" || l == "false" || l == "yes" || l == "no" || l == "1" || l == "0";
      why = "not a bool (true or false)";
    } else if (type == "Array(double)") {
      std::vector<double> v;
      ok = parse_real_array(t, v, why);
    } else if (type != "string") {
      refuse(source, "key '" + key + "' has type " + shown(type) +
                         "; koptim reads the types double, int, bool, string and Array(double)");
    }
    if (!ok) refuse(source, "key '" + key + "' (type " + type + ") has value " + shown(value) + ": " + why);
  }
}

// What Teuchos made of the XML must be what was written (the scanner above accepted exactly the
// forms for which it is; this guards against a difference between Teuchos versions).
void compare_xml_values(const Teuchos::XMLObject& x, const ParameterList& l, const std::string& path,
                        const std::string& source) {
  for (int c = 0; c < x.numChildren(); ++c) {
    const Teuchos::XMLObject& e = x.getChild(c);
    if (e.getTag() != "Parameter" && e.getTag() != "ParameterList") continue;  // an empty <Validators/>
    const std::string& name          = e.getAttribute("name");
    const std::string key            = path + "/" + name;
    const Teuchos::ParameterEntry* p = l.getEntryPtr(name);
    if (p == nullptr) refuse(source, "key '" + key + "' was not read by the XML reader");
    if (e.getTag() == "ParameterList") {
      if (!p->isList()) refuse(source, "key '" + key + "' was not read as a list");
      compare_xml_values(e, Teuchos::getValue<ParameterList>(*p), key, source);
      continue;
    }
    const std::string& type = e.getAttribute("type");
    const std::string t     = trim(e.getAttribute("value"));
    std::string why;
    bool same = true;
    if (type == "double") {
      double v = 0;
      parse_real(t, v, why);
      same = p->isType<double>() && same_bits(Teuchos::getValue<double>(*p), v);
    } else if (type == "int") {
      long long v = 0;
      parse_int(t, v, why);
      same = p->isType<int>() && Teuchos::getValue<int>(*p) == v;
    } else if (type == "Array(double)") {
      std::vector<double> v;
      parse_real_array(t, v, why);
      same = p->isType<Teuchos::Array<double>>();
      if (same) {
        const auto& a = Teuchos::getValue<Teuchos::Array<double>>(*p);
        same          = a.size() == static_cast<Teuchos::Array<double>::size_type>(v.size());
        for (std::size_t i = 0; same && i < v.size(); ++i) same = same_bits(a[i], v[i]);
      }
    } else if (type == "bool") {
      same = p->isType<bool>();
    } else {
      same = p->isType<std::string>();
    }
    if (!same)
      refuse(source, "key '" + key + "' = " + shown(e.getAttribute("value")) +
                         " was read as another value by the XML reader; please report this");
  }
}

RCP<ParameterList> from_xml(const std::string& text, const std::string& source) {
  Teuchos::XMLObject x;
  try {
    Teuchos::StringInputSource in(text);
    x = in.getObject();
  } catch (const std::exception& ex) {
    refuse(source, std::string("not valid XML: ") + ex.what());
  }
  if (x.isEmpty()) refuse(source, "no XML element");
  if (x.getTag() != "ParameterList")
    refuse(source, "the top element is <" + x.getTag() + ">; it must be <ParameterList>");
  const std::string root = x.hasAttribute("name") ? x.getAttribute("name") : std::string("ANONYMOUS");
  check_xml_list(x, root, source, 0);
  RCP<ParameterList> l;
  try {
    l = Teuchos::rcp(new ParameterList(Teuchos::XMLParameterListReader().toParameterList(x)));
  } catch (const std::exception& ex) {
    refuse(source, std::string("the XML reader refused it: ") + ex.what());
  }
  compare_xml_values(x, *l, root, source);
  return l;
}

// ---- YAML --------------------------------------------------------------------------------------

// A key the scanner found, with the line it is on and its value as written (empty for a list).
struct YamlKey {
  std::vector<std::string> path;  // below the top-level list
  int line;
  std::string value;
};

std::string joined(const std::vector<std::string>& path) {
  std::string s;
  for (const auto& p : path) s += (s.empty() ? "" : "/") + p;
  return s;
}

// The value part of "key: value  # comment" (no comment, trimmed). A '#' starts a comment only
// after a space and outside quotes.
std::string yaml_value(const std::string& v) {
  char quote = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const char c = v[i];
    if (quote) {
      if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '#' && (i == 0 || v[i - 1] == ' ' || v[i - 1] == '\t')) {
      return trim(v.substr(0, i));
    }
  }
  return trim(v);
}

// Splits "key: value" (or "key:"); false when the line is not a key line.
bool yaml_key_line(const std::string& content, std::string& key, std::string& value) {
  std::size_t colon = std::string::npos;
  if (content[0] == '"' || content[0] == '\'') {
    const std::size_t close = content.find(content[0], 1);
    if (close == std::string::npos) return false;
    if (close + 1 < content.size() && content[close + 1] == ':') colon = close + 1;
    if (colon == std::string::npos) return false;
    key = content.substr(1, close - 1);
  } else {
    if (content[0] == '[' || content[0] == '{' || content[0] == '#') return false;
    for (std::size_t i = 0; i < content.size(); ++i) {
      if (content[i] == ':' && (i + 1 == content.size() || content[i + 1] == ' ' || content[i + 1] == '\t')) {
        colon = i;
        break;
      }
      if (content[i] == '#' && i > 0 && (content[i - 1] == ' ' || content[i - 1] == '\t')) return false;
    }
    if (colon == std::string::npos) return false;
    key = trim(content.substr(0, colon));
  }
  value = yaml_value(content.substr(colon + 1));
  return true;
}

// Checks the block structure Teuchos' reader needs and returns the keys it must find: one
// top-level key holding the list; under it, keys at one indentation per level. A key at an
// indentation between two levels, or a second top-level entry, is refused here (Teuchos would
// drop it or move it to another list).
std::vector<YamlKey> scan_yaml(const std::string& text, const std::string& source, std::string& root) {
  struct Level {
    int indent;
    std::vector<std::string> path;
    std::string first_key;
    int first_line;
  };
  std::vector<Level> levels;
  std::vector<YamlKey> keys;
  bool opens_list  = false;  // the previous key line was "key:" with no value
  int block_scalar = -1;     // indentation of the key of a | or > value being skipped
  std::vector<std::string> last_path;
  std::string last_key;
  int last_line = 0, last_indent = 0;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::size_t ind = 0;
    while (ind < line.size() && line[ind] == ' ') ++ind;
    const std::string content = trim(line.substr(ind));
    if (content.empty() || content[0] == '#') continue;
    if (block_scalar >= 0 && static_cast<int>(ind) > block_scalar) continue;
    block_scalar = -1;
    if (ind == 0 && (content.rfind("---", 0) == 0 || content.rfind("...", 0) == 0 || content[0] == '%')) continue;
    if (ind < line.size() && line[ind] == '\t')
      refuse(source, "line " + std::to_string(number) + " is indented with a tab; indent with spaces");
    const int indent = static_cast<int>(ind);
    int flow = 0, deepest = 0;  // nesting of [ and { on the line (Teuchos reads flow collections recursively)
    for (char ch : content) {
      flow += (ch == '[' || ch == '{') - (ch == ']' || ch == '}');
      deepest = std::max(deepest, flow);
    }
    if (deepest > max_depth)
      refuse(source, "line " + std::to_string(number) + " nests [ and { more than " + std::to_string(max_depth) +
                         " levels deep");
    std::string key, value;
    if (content[0] == '-' || !yaml_key_line(content, key, value)) continue;  // sequence item or continuation
    const std::string at = "line " + std::to_string(number) + ": key '" + key + "'";
    if (levels.empty()) {
      levels.push_back({indent, {}, key, number});
      root = key;
    } else if (opens_list && indent > last_indent) {
      if (static_cast<int>(levels.size()) > max_depth)
        refuse(source, at + " is nested more than " + std::to_string(max_depth) + " levels deep");
      levels.push_back({indent, levels.size() == 1 ? std::vector<std::string>{} : last_path, key, number});
    } else {
      if (indent > levels.back().indent)
        refuse(source, at + " is indented by " + std::to_string(indent) + " spaces, more than the key '" + last_key +
                           "' above it (line " + std::to_string(last_line) +
                           "), which already has a value; indent it like its siblings");
      Level popped = levels.back();
      while (levels.size() > 1 && indent < levels.back().indent) {
        popped = levels.back();
        levels.pop_back();
      }
      if (indent != levels.back().indent) {
        const std::string list = popped.path.empty() ? root : root + "/" + joined(popped.path);
        refuse(source, at + " is indented by " + std::to_string(indent) + " spaces, but the keys of list '" + list +
                           "' are indented by " + std::to_string(popped.indent) + " and the keys around that list by " +
                           std::to_string(levels.back().indent) +
                           "; indent it exactly like the keys it belongs with (the YAML reader would drop it or "
                           "move it to another list)");
      }
      if (levels.size() == 1)
        refuse(source, at + " is at the top level, outside the list '" + root + "' (line " +
                           std::to_string(levels[0].first_line) +
                           "); a file holds one list and the YAML reader would drop this key; indent it like the "
                           "keys of '" +
                           root + "'");
    }
    std::vector<std::string> path = levels.back().path;
    if (levels.size() > 1) path.push_back(key);
    if (levels.size() > 1) keys.push_back({path, number, value});
    opens_list = value.empty();
    if (!value.empty() && (value[0] == '|' || value[0] == '>')) block_scalar = indent;
    last_path   = path;
    last_key    = key;
    last_line   = number;
    last_indent = indent;
  }
  return keys;
}

// Every key the scanner found must be in what Teuchos read, and a number must be what was written.
void compare_yaml(const std::vector<YamlKey>& keys, const ParameterList& l, const std::string& source) {
  for (const auto& k : keys) {
    const ParameterList* list        = &l;
    const Teuchos::ParameterEntry* e = nullptr;
    for (std::size_t i = 0; i < k.path.size(); ++i) {
      e = list->getEntryPtr(k.path[i]);
      if (e == nullptr || (i + 1 < k.path.size() && !e->isList())) {
        e = nullptr;
        break;
      }
      if (i + 1 < k.path.size()) list = &Teuchos::getValue<ParameterList>(*e);
    }
    const std::string at = "line " + std::to_string(k.line) + ": key '" + joined(k.path) + "'";
    if (e == nullptr)
      refuse(source, at + " was not read by the YAML reader (it would be dropped); check its indentation");
    std::string why;
    if (e->isType<double>()) {
      double v = 0;
      if (!parse_real(k.value, v, why)) refuse(source, at + " = " + shown(k.value) + " is " + why);
      if (!same_bits(v, Teuchos::getValue<double>(*e)))
        refuse(source, at + " = " + shown(k.value) + " was read as another value by the YAML reader");
    }
  }
}

RCP<ParameterList> from_yaml(const std::string& text, const std::string& source) {
  std::string root;
  const auto keys = scan_yaml(text, source, root);
  if (root.empty()) refuse(source, "no key: a YAML parameter list is one top-level key holding the list");
  RCP<ParameterList> l;
  try {
    l = Teuchos::getParametersFromYamlString(text);
  } catch (const std::exception& ex) {
    refuse(source, std::string("the YAML reader refused it: ") + ex.what());
  }
  compare_yaml(keys, *l, source);
  return l;
}

}  // namespace

RCP<ParameterList> parameter_list_from_string(const std::string& text, const std::string& format,
                                              const std::string& source) {
  Impl::ScopedRegion region("koptim::parameter_list_from_string");
  const std::string where = source.empty() ? std::string("(text)") : "'" + source + "'";
  const std::size_t limit = format == "yaml" ? max_yaml_bytes : max_xml_bytes;
  if (format != "xml" && format != "yaml")
    throw ConfigError("koptim: parameter-list format '" + format + "' is neither xml nor yaml");
  if (text.size() > limit)
    refuse(where, "is " + std::to_string(text.size()) + " bytes; a " + format + " parameter list may have at most " +
                      std::to_string(limit) + " bytes (the reader's time grows faster than the size)");
  if (text.find('\0') != std::string::npos) refuse(where, "contains a NUL byte; it is not text");
  return format == "xml" ? from_xml(text, where) : from_yaml(text, where);
}

RCP<ParameterList> read_parameter_list(const std::string& path) {
  Impl::ScopedRegion region("koptim::read_parameter_list");
  auto ends_with = [&](const std::string& s) {
    return path.size() >= s.size() && path.compare(path.size() - s.size(), s.size(), s) == 0;
  };
  const std::string format = ends_with(".xml") ? "xml" : (ends_with(".yaml") || ends_with(".yml")) ? "yaml" : "";
  std::ifstream f(path, std::ios::binary);
  if (!f) throw ConfigError("koptim: cannot open parameter-list file '" + path + "'");
  if (format.empty()) throw ConfigError("koptim: parameter-list file '" + path + "' must end in .xml, .yaml or .yml");
  const std::size_t limit = format == "yaml" ? max_yaml_bytes : max_xml_bytes;
  std::string text;
  char buf[65536];
  while (f.read(buf, sizeof buf) || f.gcount() > 0) {
    text.append(buf, static_cast<std::size_t>(f.gcount()));
    if (text.size() > limit) {
      throw ConfigError("koptim: parameter list '" + path + "': is larger than " + std::to_string(limit) +
                        " bytes; a " + format + " parameter list may have at most " + std::to_string(limit) +
                        " bytes (the reader's time grows faster than the size)");
    }
  }
  if (f.bad()) throw ConfigError("koptim: cannot read parameter-list file '" + path + "'");
  return parameter_list_from_string(text, format, path);
}

}  // namespace koptim
