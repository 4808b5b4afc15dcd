// Reading parameter lists from XML and YAML text. Teuchos' readers do the parsing, but on their
// own they misread some inputs without a word (a mis-indented YAML key is dropped, an XML
// value="0.01abc" becomes 0.01, a repeated XML key keeps its last value). So the text is checked
// here first, by small strict scanners that know only what koptim needs, and what Teuchos
// produced is compared with what was written: a value is used exactly as written, or refused.
#include <koptim/config/koptim_Factory.hpp>
#include <koptim/core/koptim_Error.hpp>
#include "koptim_TeuchosText.hpp"
#include "koptim_Validators.hpp"
#include <koptim/core/impl/koptim_Profiling.hpp>

#include <Teuchos_StringInputSource.hpp>
#include <Teuchos_XMLObject.hpp>
#include <Teuchos_XMLParameterListReader.hpp>
#include <Teuchos_YamlParameterListCoreHelpers.hpp>

#include <algorithm>
#include <cerrno>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
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
  // A subnormal keeps fewer digits than the value has (3e-324 is read as 4.9e-324): refused
  // unless it holds the written value to a double's precision, as one a double printed does (a
  // list built in code and printed, a checkpoint's configuration). Measured against the text read
  // as a long double, whose range holds these values as normal numbers where it is wider than
  // double (x86); where it is double itself, every subnormal passes.
  if (out != 0.0 && std::fabs(out) < std::numeric_limits<double>::min()) {
    const long double written = std::strtold(t.c_str(), nullptr);
    if (std::fabs(static_cast<long double>(out) - written) >
        std::fabs(written) * static_cast<long double>(std::numeric_limits<double>::epsilon())) {
      why = "too small for a double to hold as written (below 2.2250738585072014e-308 it keeps fewer digits)";
      return false;
    }
  }
  return true;
}

// A decimal integer in [lo, hi] ("range" names it in the message): [+-] digits.
bool parse_integer(const std::string& t, long long& out, std::string& why,
                   long long lo             = std::numeric_limits<long long>::min(),
                   long long hi             = std::numeric_limits<long long>::max(),
                   const std::string& range = "a 64-bit integer") {
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
  if (errno == ERANGE || out < lo || out > hi) {
    why = "outside the range of " + range;
    return false;
  }
  return true;
}

// A decimal integer within int: [+-] digits.
bool parse_int(const std::string& t, long long& out, std::string& why) {
  return parse_integer(t, out, why, std::numeric_limits<int>::min(), std::numeric_limits<int>::max(),
                       "an int [" + std::to_string(std::numeric_limits<int>::min()) + ", " +
                           std::to_string(std::numeric_limits<int>::max()) + "]");
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
      for (const char* attribute : {"type", "value"})
        if (e.hasAttribute(attribute))
          refuse(source, "list '" + key + "' has the attribute " + attribute + "=" + shown(e.getAttribute(attribute)) +
                             ", which would be ignored; a <ParameterList> holds its keys as elements");
      check_xml_list(e, key, source, depth + 1);
      continue;
    }
    // <Parameter .../> holds nothing: what is inside one (a '/>' written as '>'?) would be dropped.
    if (e.numChildren() > 0)
      refuse(source, "key '" + key + "' is a <Parameter> with the element <" + e.getChild(0).getTag() +
                         "> inside it, which would be dropped; close a <Parameter> with '/>'");
    for (int i = 0; i < e.numContentLines(); ++i) {
      if (!trim(e.getContentLine(i)).empty())
        refuse(source, "key '" + key + "' is a <Parameter> with the text " + shown(trim(e.getContentLine(i))) +
                           " inside it, which would be dropped; its value is the attribute value");
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
      // Not trimmed: the XML reader refuses a bool with spaces around it.
      std::string l;
      for (char ch : value) l += static_cast<char>(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
      ok  = l == "true" || l == "false" || l == "yes" || l == "no" || l == "1" || l == "0";
      why = t != value && t.size() <= 5 ? "not a bool (true or false, without spaces)" : "not a bool (true or false)";
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

// The attributes of every <Parameter> and <ParameterList> start tag, from the text (Teuchos'
// XMLObject does not list them): one the reader does not read would be dropped without a word
// (value="0.5" valu="0.7" read as 0.5). Allowed: what Teuchos' writer writes (name, type, value,
// and id, isDefault, isUsed, docString, which hold no value). Called on text the XML parser took.
void check_xml_attributes(const std::string& text, const std::string& source) {
  const std::set<std::string> parameter{"name", "type", "value", "id", "isDefault", "isUsed", "docString"};
  const std::set<std::string> list{"name", "id"};
  auto name_char = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == ':';
  };
  auto space    = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  std::size_t i = 0;
  while ((i = text.find('<', i)) != std::string::npos) {
    if (text.compare(i, 4, "<!--") == 0) {
      const std::size_t end = text.find("-->", i + 4);
      i                     = end == std::string::npos ? text.size() : end + 3;
      continue;
    }
    ++i;
    std::size_t j = i;
    while (j < text.size() && name_char(text[j])) ++j;
    const std::string tag = text.substr(i, j - i);
    if (tag != "Parameter" && tag != "ParameterList") continue;
    const auto& allowed = tag == "Parameter" ? parameter : list;
    std::string named;  // the element's name, for the message
    while (j < text.size()) {
      while (j < text.size() && space(text[j])) ++j;
      if (j >= text.size() || text[j] == '>' || text[j] == '/') break;
      const std::size_t a = j;
      while (j < text.size() && name_char(text[j])) ++j;
      const std::string attribute = text.substr(a, j - a);
      while (j < text.size() && (space(text[j]) || text[j] == '=')) ++j;
      if (j >= text.size() || (text[j] != '"' && text[j] != '\'')) break;  // not XML: the parser refused it
      const std::size_t close = text.find(text[j], j + 1);
      if (close == std::string::npos) break;
      if (attribute == "name") named = text.substr(j + 1, close - j - 1);
      if (!allowed.count(attribute))
        refuse(source, "a <" + tag + ">" + (named.empty() ? std::string() : " named " + shown(named)) +
                           " has the attribute " + attribute + "=" + shown(text.substr(j + 1, close - j - 1)) +
                           ", which the reader would ignore; a <" + tag + "> takes " +
                           (tag == "Parameter" ? "name, type and value (and id, isDefault, isUsed, docString as "
                                                 "Teuchos writes them)"
                                               : "name (and id as Teuchos writes it)"));
      j = close + 1;
    }
    i = j;
  }
}

RCP<ParameterList> from_xml(const std::string& text, const std::string& source) {
  std::lock_guard<std::mutex> lock(Impl::teuchos_text_mutex());
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
  check_xml_attributes(text, source);
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

// A key the scanner found, with the line it is on and its value as written (empty for a list
// or a block sequence, whose items are then the "- item" lines below it).
struct YamlKey {
  std::vector<std::string> path;  // below the top-level list
  int line;
  std::string value;
  std::vector<std::string> items;
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
  int block_text   = -1;     // and of its text (its first line)
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
    if (block_scalar >= 0 && static_cast<int>(ind) > block_scalar) {
      if (block_text < 0) block_text = static_cast<int>(ind);
      if (static_cast<int>(ind) >= block_text) continue;
      refuse(source, "line " + std::to_string(number) + " is indented by " + std::to_string(ind) +
                         " spaces: less than the text of key '" + last_key + "' (line " + std::to_string(last_line) +
                         "), indented by " + std::to_string(block_text) +
                         ", and more than that key; indent it like "
                         "the text or like the key's siblings");
    }
    block_scalar = -1;
    block_text   = -1;
    if (ind == 0 && content[0] == '%' && !levels.empty())
      refuse(source, "line " + std::to_string(number) + " " + shown(content) +
                         " is a YAML directive after the first key; the YAML reader drops it (and a key on it): "
                         "a directive may stand only before the list");
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
    if (content == "-" || content.rfind("- ", 0) == 0) {
      // An item of the block sequence below the last key ("key:" then "- x" lines).
      if (opens_list && !keys.empty() && keys.back().line == last_line)
        keys.back().items.push_back(yaml_value(content.substr(1)));
      continue;
    }
    // Anything else must be a key line: the YAML reader drops some other lines without a word
    // ("key:value" without a space, indented less than its siblings) and joins others to the
    // value above (a plain value continued on the next line).
    if (!yaml_key_line(content, key, value))
      refuse(source, "line " + std::to_string(number) + " " + shown(content) +
                         " is neither 'key: value' (a space after the colon) nor an item '- value' below a key; "
                         "write each key as 'key: value' and each value (an array too) on its key's line");
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
    if (levels.size() > 1) keys.push_back({path, number, value, {}});
    opens_list = value.empty();
    if (!value.empty() && (value[0] == '|' || value[0] == '>')) block_scalar = indent;
    last_path   = path;
    last_key    = key;
    last_line   = number;
    last_indent = indent;
  }
  return keys;
}

// A YAML scalar as the reader takes it: single quotes removed ('' inside is one quote), double
// quotes removed with their escapes decoded; false for an escape not decoded here.
bool yaml_scalar(const std::string& v, std::string& out) {
  out.clear();
  if (v.size() >= 2 && v.front() == '\'' && v.back() == '\'') {
    for (std::size_t i = 1; i + 1 < v.size(); ++i) {
      out += v[i];
      if (v[i] == '\'') ++i;
    }
    return true;
  }
  if (v.size() >= 2 && v.front() == '"' && v.back() == '"') {
    for (std::size_t i = 1; i + 1 < v.size(); ++i) {
      if (v[i] != '\\') {
        out += v[i];
        continue;
      }
      if (i + 2 >= v.size()) return false;
      const char e = v[++i];
      if (e == '\\' || e == '"' || e == '/')
        out += e;
      else if (e == 'n')
        out += '\n';
      else if (e == 't')
        out += '\t';
      else if (e == 'r')
        out += '\r';
      else
        return false;
    }
    return true;
  }
  out = v;
  return true;
}

// The entries of a flow sequence "[a, b, ...]" as written (trimmed; no nesting).
bool yaml_flow_items(const std::string& v, std::vector<std::string>& items) {
  items.clear();
  if (v.size() < 2 || v.front() != '[' || v.back() != ']') return false;
  const std::string inner = trim(v.substr(1, v.size() - 2));
  if (inner.empty()) return true;
  std::size_t start = 0;
  char quote        = 0;
  for (std::size_t i = 0; i <= inner.size(); ++i) {
    const char c = i < inner.size() ? inner[i] : ',';
    if (quote) {
      if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '[' || c == '{') {
      return false;
    } else if (c == ',') {
      items.push_back(trim(inner.substr(start, i - start)));
      start = i + 1;
    }
  }
  return true;
}

// Whether Teuchos' value of a scalar entry is what `written` says (a number bit for bit, a bool
// in one of the forms the reader takes, a string character for character); why says otherwise.
bool same_yaml_scalar(const Teuchos::ParameterEntry& e, const std::string& written, std::string& why) {
  const Teuchos::any& a = e.getAny(false);
  // An integer written with a leading zero (09, -012) reads as octal in YAML 1.1 and as decimal
  // in YAML 1.2: refused wherever it stands, a real's place (an array of reals) included.
  const std::size_t sign  = !written.empty() && (written[0] == '+' || written[0] == '-') ? 1 : 0;
  const bool leading_zero = written.size() > sign + 1 && written[sign] == '0' &&
                            written.find_first_not_of("0123456789", sign) == std::string::npos;
  if (leading_zero && (a.type() == typeid(double) || a.type() == typeid(int) || a.type() == typeid(long long))) {
    why = "an integer with a leading zero (octal in YAML 1.1, decimal in YAML 1.2): write it without";
    return false;
  }
  if (a.type() == typeid(double)) {
    double v = 0;
    if (!parse_real(written, v, why)) return false;
    return same_bits(v, Teuchos::any_cast<double>(a));
  }
  if (a.type() == typeid(int) || a.type() == typeid(long long)) {
    long long v = 0;
    if (!parse_integer(written, v, why)) return false;
    return v == (a.type() == typeid(int) ? Teuchos::any_cast<int>(a) : Teuchos::any_cast<long long>(a));
  }
  if (a.type() == typeid(bool)) {
    std::string l;
    for (char c : written) l += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    const bool v = Teuchos::any_cast<bool>(a);
    return v ? (l == "true" || l == "yes") : (l == "false" || l == "no");
  }
  if (a.type() == typeid(std::string)) {
    std::string v;
    if (!yaml_scalar(written, v)) {
      // The reader drops the backslash of an escape it does not know ("Adam\W" read as AdamW).
      why =
          "a double-quoted string with an escape other than \\\\, \\\" or \\/; write the character itself "
          "or quote it with '...'";
      return false;
    }
    return v == Teuchos::any_cast<std::string>(a);
  }
  return true;  // another type: refused by the validators
}

template <class E>
bool same_yaml_array(const Teuchos::ParameterEntry& e, const std::vector<std::string>& items, std::string& why) {
  const auto& a = Teuchos::getValue<Teuchos::Array<E>>(e);
  if (static_cast<std::size_t>(a.size()) != items.size()) return false;
  for (std::size_t i = 0; i < items.size(); ++i) {
    Teuchos::ParameterEntry one(a[static_cast<typename Teuchos::Array<E>::size_type>(i)]);
    std::string item_why;
    if (!same_yaml_scalar(one, items[i], item_why)) {
      why = "entry " + std::to_string(i + 1) + " " + shown(items[i]) + (item_why.empty() ? "" : " is " + item_why);
      return false;
    }
  }
  return true;
}

// What Teuchos read must be what was written, both ways: every key the scanner found is in the
// list with the value written (a number bit for bit, a bool, a string, every entry of an array),
// and every entry of the list is a key the scanner found (so no entry comes from a form the
// scanner does not follow: a flow mapping, "key:value" without a space, a line indented into a
// block scalar's text).
void compare_yaml(const std::vector<YamlKey>& keys, const ParameterList& l, const std::string& source) {
  std::set<std::string> found;
  for (const auto& k : keys) {
    found.insert(joined(k.path));
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
    if (e->isList()) {
      // An empty flow mapping "{ }" (as Teuchos writes an empty list) holds nothing to misread.
      const bool empty_flow = k.value.size() >= 2 && k.value.front() == '{' && k.value.back() == '}' &&
                              trim(k.value.substr(1, k.value.size() - 2)).empty();
      if (!k.value.empty() && !empty_flow)
        refuse(source, at + " is written as a flow mapping " + shown(k.value) +
                           "; write its keys one per line, indented under it");
      continue;
    }
    if (!k.value.empty() && (k.value[0] == '|' || k.value[0] == '>')) continue;  // a block scalar's text
    std::string why;
    bool same                      = true;
    std::vector<std::string> items = k.items;
    const bool array               = e->isType<Teuchos::Array<double>>() || e->isType<Teuchos::Array<int>>() ||
                       e->isType<Teuchos::Array<std::string>>();
    if (array && !k.value.empty() && !yaml_flow_items(k.value, items))
      refuse(source, at + " = " + shown(k.value) + " was read as an array; write an array as [x, y, ...]");
    if (e->isType<Teuchos::Array<double>>())
      same = same_yaml_array<double>(*e, items, why);
    else if (e->isType<Teuchos::Array<int>>())
      same = same_yaml_array<int>(*e, items, why);
    else if (e->isType<Teuchos::Array<std::string>>())
      same = same_yaml_array<std::string>(*e, items, why);
    else
      same = same_yaml_scalar(*e, k.value, why);
    if (!same) {
      std::string written = k.value;
      if (written.empty()) {
        for (const auto& it : items) written += (written.empty() ? "[" : ", ") + it;
        written += written.empty() ? "[]" : "]";
      }
      if (!why.empty()) refuse(source, at + " = " + shown(written) + ": " + why);
      refuse(source, at + " = " + shown(written) + " was read as " + Impl::entry_value_string(*e) +
                         " by the YAML reader, not as written" +
                         (written.find('#') != std::string::npos
                              ? " ('#' starts a comment after a space; quote a value that contains one)"
                          : written.rfind('!', 0) == 0 ? " (a YAML tag such as !!str is not read: remove it)"
                                                       : ""));
    }
  }
  std::function<void(const ParameterList&, const std::string&)> walk = [&](const ParameterList& list,
                                                                           const std::string& prefix) {
    for (auto it = list.begin(); it != list.end(); ++it) {
      const std::string key = prefix.empty() ? list.name(it) : prefix + "/" + list.name(it);
      if (!found.count(key))
        refuse(source, "key '" + key +
                           "' was read by the YAML reader, but not from a line 'key: value' of its own at its "
                           "list's indentation (a flow mapping {...}, a key without a space after its colon, or a "
                           "line indented into a block of text?); write each key on a line of its own");
      if (list.entry(it).isList()) walk(Teuchos::getValue<ParameterList>(list.entry(it)), key);
    }
  };
  walk(l, "");
}

RCP<ParameterList> from_yaml(const std::string& text, const std::string& source) {
  std::string root;
  const auto keys = scan_yaml(text, source, root);
  if (root.empty()) refuse(source, "no key: a YAML parameter list is one top-level key holding the list");
  RCP<ParameterList> l;
  try {
    std::lock_guard<std::mutex> lock(Impl::teuchos_text_mutex());
    l = Teuchos::getParametersFromYamlString(text);
  } catch (const std::exception& ex) {
    refuse(source, std::string("the YAML reader refused it: ") + ex.what());
  }
  compare_yaml(keys, *l, source);
  return l;
}

}  // namespace

std::mutex& Impl::teuchos_text_mutex() {
  static std::mutex m;
  return m;
}

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
  // A UTF-8 byte-order mark (which some editors write) is no part of the text.
  const std::string bom  = "\xEF\xBB\xBF";
  const std::string body = text.compare(0, bom.size(), bom) == 0 ? text.substr(bom.size()) : text;
  return format == "xml" ? from_xml(body, where) : from_yaml(body, where);
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
