#include "client/json_output.h"

#include <cctype>
#include <ostream>
#include <set>
#include <string>

#include "yaml-cpp/yaml.h"

namespace zpipe::cli {

void PrintJson(std::ostream& out, const Json& value, bool pretty) {
  out << api::Dump(value, pretty) << "\n";
}

namespace {

// Whether YAML's core schema would read `s`, unquoted, as something other than this string.
bool NeedsQuotes(const std::string& s) {
  if (s.empty()) return true;
  static const std::set<std::string> kSpecial = {"~",     "null", "Null", "NULL", "true", "True",
                                                 "TRUE",  "false", "False", "FALSE", "yes", "no",
                                                 "on",    "off",  "y",    "n",    ".inf", ".nan"};
  if (kSpecial.count(s)) return true;
  // Numbers, timestamps (PyYAML reads 2026-05-01T12:00:00Z as a datetime), 0x1f, 1:20, .5.
  return std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '+' || s[0] == '-' ||
         s[0] == '.';
}

void Emit(YAML::Emitter& out, const Json& value) {
  if (value.is_object()) {
    out << YAML::BeginMap;
    for (const auto& [key, item] : value.items()) {
      out << YAML::Key << key << YAML::Value;
      Emit(out, item);
    }
    out << YAML::EndMap;
  } else if (value.is_array()) {
    out << YAML::BeginSeq;
    for (const Json& item : value) Emit(out, item);
    out << YAML::EndSeq;
  } else if (value.is_string()) {
    const std::string& s = value.get_ref<const std::string&>();
    if (NeedsQuotes(s)) out << YAML::DoubleQuoted;
    out << s;
  } else if (value.is_null()) {
    out << YAML::Null;
  } else {
    // Numbers and booleans as JSON writes them: the shortest text that reads back the same.
    out << value.dump();
  }
}

}  // namespace

std::string JsonToYaml(const Json& value) {
  YAML::Emitter out;
  out.SetIndent(2);
  Emit(out, value);
  return out.c_str();
}

void PrintDocument(CliContext& ctx, const Json& value, bool stream) {
  if (ctx.output() == OutputFormat::kYaml) {
    ctx.out() << (stream ? "---\n" : "") << JsonToYaml(value) << "\n";
    return;
  }
  PrintJson(ctx.out(), value, /*pretty=*/!stream);
}

}  // namespace zpipe::cli
