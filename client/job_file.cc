#include "client/job_file.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/internal/spec_tree.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace zpipe {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::EnumDescriptor;
using google::protobuf::EnumValueDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using internal::SpecNode;

absl::Status Error(int line, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("line ", line, ": ", message));
}

// What an unquoted scalar looks like, for messages and type checks.
bool IsBoolText(absl::string_view t) {
  return t == "true" || t == "false" || t == "True" || t == "False" || t == "TRUE" || t == "FALSE";
}
bool IsIntText(absl::string_view t) {
  int64_t i;
  uint64_t u;
  return absl::SimpleAtoi(t, &i) || absl::SimpleAtoi(t, &u);
}
// An integer written out in digits, whatever its size ("-123", not "1e5").
bool IsDigitsText(absl::string_view t) {
  absl::ConsumePrefix(&t, "-");
  return !t.empty() && std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; });
}
bool IsFloatText(absl::string_view t) {
  double d;
  return absl::SimpleAtod(t, &d) && std::isfinite(d) &&
         !absl::StrContains(absl::AsciiStrToLower(t), "inf") &&
         !absl::StrContains(absl::AsciiStrToLower(t), "nan");
}

// Whether `t` is well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF);
// otherwise sets `*offset` to the first bad byte. Proto3 strings must be UTF-8: protobuf refuses
// to serialize anything else.
bool IsUtf8(absl::string_view t, size_t* offset) {
  for (size_t i = 0; i < t.size();) {
    const auto c = static_cast<unsigned char>(t[i]);
    int len = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      len = 2, cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3, cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4, cp = c & 0x07;
    } else {
      *offset = i;
      return false;
    }
    if (i + len > t.size()) {
      *offset = i;
      return false;
    }
    for (int k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(t[i + k]);
      if ((cc & 0xC0) != 0x80) {
        *offset = i;
        return false;
      }
      cp = (cp << 6) | (cc & 0x3F);
    }
    const bool overlong = (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000);
    if (overlong || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
      *offset = i;
      return false;
    }
    i += len;
  }
  return true;
}

// Like SpecNodeKindName, but a scalar is shown with its text.
std::string Describe(const SpecNode& node) {
  if (node.kind != SpecNode::Kind::kScalar) return std::string(internal::SpecNodeKindName(node));
  if (node.quoted) {
    return node.text.size() <= 40 ? absl::StrCat("the string \"", node.text, "\"")
                                  : absl::StrCat("the string ", internal::QuoteCut(node.text));
  }
  if (IsBoolText(node.text)) return absl::StrCat("the boolean ", node.text);
  if (IsIntText(node.text) || IsFloatText(node.text) || IsDigitsText(node.text)) {
    return node.text.size() <= 40 ? absl::StrCat("the number ", node.text)
                                  : absl::StrCat("the number ", internal::QuoteCut(node.text));
  }
  return internal::QuoteCut(node.text);
}

std::string FieldPath(absl::string_view prefix, absl::string_view name) {
  return prefix.empty() ? std::string(name) : absl::StrCat(prefix, ".", name);
}

// "DeviceKind" -> "DEVICE_KIND_".
std::string EnumPrefix(const EnumDescriptor& e) {
  std::string out;
  for (char c : e.name()) {
    if (std::isupper(static_cast<unsigned char>(c)) && !out.empty()) out.push_back('_');
    out.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  }
  return out + "_";
}

// Accepts "cuda", "CUDA", "DEVICE_KIND_CUDA" (and '-' for '_'); never the UNSPECIFIED value by
// its short name, so that a typo cannot silently pick the default.
const EnumValueDescriptor* FindEnumValue(const EnumDescriptor& e, absl::string_view text) {
  std::string upper = absl::AsciiStrToUpper(absl::StrReplaceAll(text, {{"-", "_"}}));
  if (const EnumValueDescriptor* v = e.FindValueByName(upper)) return v;
  return e.FindValueByName(EnumPrefix(e) + upper);
}

std::string EnumChoices(const EnumDescriptor& e) {
  const std::string prefix = EnumPrefix(e);
  std::vector<std::string> names;
  for (int i = 0; i < e.value_count(); ++i) {
    absl::string_view name = e.value(i)->name();
    if (absl::EndsWith(name, "_UNSPECIFIED")) continue;
    if (absl::StartsWith(name, prefix)) name.remove_prefix(prefix.size());
    names.push_back(absl::AsciiStrToLower(name));
  }
  return absl::StrJoin(names, ", ");
}

absl::Status SetMessage(const SpecNode& node, absl::string_view path, Message& msg);

// Where SetScalar writes a value: `field` of `msg` (appended to, when repeated), from `node`.
struct ScalarTarget {
  const SpecNode& node;
  const std::string& path;
  const FieldDescriptor& field;
  Message& msg;
  const Reflection& refl;
  bool repeated;

  // The error for a value that is not what the field takes.
  absl::Status Wrong(absl::string_view expected) const {
    return Error(node.line,
                 absl::StrCat("field '", path, "' expects ", expected, ", got ", Describe(node)));
  }
};

// What a scalar field expects, for the error about a list or map in its place.
std::string ScalarExpected(const FieldDescriptor& field) {
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_STRING:
      return "a string";
    case FieldDescriptor::CPPTYPE_BOOL:
      return "true or false";
    case FieldDescriptor::CPPTYPE_ENUM:
      return absl::StrCat("one of: ", EnumChoices(*field.enum_type()));
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT:
      return "a number";
    default:
      return "an integer";
  }
}

absl::Status SetStringScalar(const ScalarTarget& to) {
  const std::string& t = to.node.text;
  if (!to.node.quoted && (IsBoolText(t) || IsIntText(t) || IsFloatText(t))) {
    return to.Wrong("a string (quote it to use it as text)");
  }
  if (size_t bad = 0; !IsUtf8(t, &bad)) {
    return Error(to.node.line,
                 absl::StrFormat("field '%s' is not UTF-8 text (byte 0x%02X at offset %d of "
                                 "the value); save the job file as UTF-8",
                                 to.path, static_cast<unsigned char>(t[bad]), bad));
  }
  to.repeated ? to.refl.AddString(&to.msg, &to.field, t) : to.refl.SetString(&to.msg, &to.field, t);
  return absl::OkStatus();
}

absl::Status SetBoolScalar(const ScalarTarget& to) {
  const std::string& t = to.node.text;
  if (to.node.quoted || !IsBoolText(t)) return to.Wrong("true or false");
  const bool v = absl::AsciiStrToLower(t) == "true";
  to.repeated ? to.refl.AddBool(&to.msg, &to.field, v) : to.refl.SetBool(&to.msg, &to.field, v);
  return absl::OkStatus();
}

absl::Status SetEnumScalar(const ScalarTarget& to) {
  const EnumDescriptor& e = *to.field.enum_type();
  const EnumValueDescriptor* v = nullptr;
  if (!IsBoolText(to.node.text)) v = FindEnumValue(e, to.node.text);
  if (v == nullptr) return to.Wrong(absl::StrCat("one of: ", EnumChoices(e)));
  to.repeated ? to.refl.AddEnum(&to.msg, &to.field, v) : to.refl.SetEnum(&to.msg, &to.field, v);
  return absl::OkStatus();
}

// A double or float field.
absl::Status SetRealScalar(const ScalarTarget& to) {
  const std::string& t = to.node.text;
  double v;
  if (to.node.quoted || !IsFloatText(t) || !absl::SimpleAtod(t, &v)) return to.Wrong("a number");
  if (to.field.cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE) {
    to.repeated ? to.refl.AddDouble(&to.msg, &to.field, v)
                : to.refl.SetDouble(&to.msg, &to.field, v);
  } else {
    to.repeated ? to.refl.AddFloat(&to.msg, &to.field, static_cast<float>(v))
                : to.refl.SetFloat(&to.msg, &to.field, static_cast<float>(v));
  }
  return absl::OkStatus();
}

// An int32 or int64 field.
absl::Status SetSignedScalar(const ScalarTarget& to) {
  const std::string& t = to.node.text;
  const bool is32 = to.field.cpp_type() == FieldDescriptor::CPPTYPE_INT32;
  int64_t v;
  if (to.node.quoted || !absl::SimpleAtoi(t, &v)) {
    if (!to.node.quoted && IsDigitsText(t)) {
      return to.Wrong(is32 ? "a 32-bit integer, in [-2147483648, 2147483647]"
                           : "a 64-bit integer, in [-9223372036854775808, 9223372036854775807]");
    }
    return to.Wrong("an integer");
  }
  if (is32) {
    if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
      return to.Wrong("a 32-bit integer, in [-2147483648, 2147483647]");
    }
    to.repeated ? to.refl.AddInt32(&to.msg, &to.field, static_cast<int32_t>(v))
                : to.refl.SetInt32(&to.msg, &to.field, static_cast<int32_t>(v));
  } else {
    to.repeated ? to.refl.AddInt64(&to.msg, &to.field, v) : to.refl.SetInt64(&to.msg, &to.field, v);
  }
  return absl::OkStatus();
}

// A uint32 or uint64 field.
absl::Status SetUnsignedScalar(const ScalarTarget& to) {
  const std::string& t = to.node.text;
  const bool is32 = to.field.cpp_type() == FieldDescriptor::CPPTYPE_UINT32;
  uint64_t v;
  if (to.node.quoted || absl::StartsWith(t, "-") || !absl::SimpleAtoi(t, &v)) {
    if (!to.node.quoted && IsDigitsText(t) && !absl::StartsWith(t, "-")) {
      return to.Wrong(is32 ? "a 32-bit non-negative integer, in [0, 4294967295]"
                           : "a 64-bit non-negative integer, in [0, 18446744073709551615]");
    }
    return to.Wrong("a non-negative integer");
  }
  if (is32) {
    if (v > std::numeric_limits<uint32_t>::max()) {
      return to.Wrong("a 32-bit non-negative integer, in [0, 4294967295]");
    }
    to.repeated ? to.refl.AddUInt32(&to.msg, &to.field, static_cast<uint32_t>(v))
                : to.refl.SetUInt32(&to.msg, &to.field, static_cast<uint32_t>(v));
  } else {
    to.repeated ? to.refl.AddUInt64(&to.msg, &to.field, v)
                : to.refl.SetUInt64(&to.msg, &to.field, v);
  }
  return absl::OkStatus();
}

// Sets one scalar (or, for repeated fields, appends one element) of `field` from `node`.
absl::Status SetScalar(const SpecNode& node, const std::string& path, const FieldDescriptor& field,
                       Message& msg) {
  const ScalarTarget to{node, path, field, msg, *msg.GetReflection(), field.is_repeated()};
  if (field.cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
    if (node.kind != SpecNode::Kind::kMap) return to.Wrong("a map");
    Message* child =
        to.repeated ? to.refl.AddMessage(&msg, &field) : to.refl.MutableMessage(&msg, &field);
    return SetMessage(node, path, *child);
  }
  if (node.kind != SpecNode::Kind::kScalar) return to.Wrong(ScalarExpected(field));
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_STRING:
      return SetStringScalar(to);
    case FieldDescriptor::CPPTYPE_BOOL:
      return SetBoolScalar(to);
    case FieldDescriptor::CPPTYPE_ENUM:
      return SetEnumScalar(to);
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT:
      return SetRealScalar(to);
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64:
      return SetSignedScalar(to);
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_UINT64:
      return SetUnsignedScalar(to);
    case FieldDescriptor::CPPTYPE_MESSAGE:
      break;
  }
  return to.Wrong("a supported value");
}

// Fields whose file form differs from the plain proto mapping.
// `memory_limit: auto` means "unset" (the proto field is `optional`, unset = auto).
bool IsAutoValue(const SpecNode& node, const FieldDescriptor& field) {
  return field.name() == "memory_limit" && field.has_presence() &&
         node.kind == SpecNode::Kind::kScalar && absl::AsciiStrToLower(node.text) == "auto";
}

// model.python.args is free-form: the factory's keyword arguments, whatever they are. The proto
// carries them as JSON text; the file writes a map, or that text as a string (what a printed spec
// holds: `zpipe get -o json` gives a job file again).
bool IsJsonTextField(const FieldDescriptor& field) {
  return field.name() == "args" && field.containing_type()->full_name() == "zpipe.v1.PythonModel";
}

// A tree node as JSON: quoted scalars are strings, unquoted ones booleans, integers or numbers
// when they read as such (as YAML and JSON mean them), else strings.
nlohmann::json ToJson(const SpecNode& node) {
  switch (node.kind) {
    case SpecNode::Kind::kNull:
      return nullptr;
    case SpecNode::Kind::kList: {
      nlohmann::json out = nlohmann::json::array();
      for (const SpecNode& e : node.list) out.push_back(ToJson(e));
      return out;
    }
    case SpecNode::Kind::kMap: {
      nlohmann::json out = nlohmann::json::object();
      for (const internal::SpecField& f : node.map) out[f.key] = ToJson(f.value);
      return out;
    }
    case SpecNode::Kind::kScalar:
      break;
  }
  const std::string& t = node.text;
  if (node.quoted) return t;
  if (IsBoolText(t)) return absl::AsciiStrToLower(t) == "true";
  if (int64_t i; absl::SimpleAtoi(t, &i)) return i;
  if (double d; IsFloatText(t) && absl::SimpleAtod(t, &d)) return d;
  if (t == "null" || t == "~") return nullptr;
  return t;
}

absl::Status SetJsonText(const SpecNode& value, const std::string& path,
                         const FieldDescriptor& field, Message& msg) {
  if (value.kind == SpecNode::Kind::kScalar && value.quoted &&
      nlohmann::json::parse(value.text, nullptr, /*allow_exceptions=*/false).is_object()) {
    msg.GetReflection()->SetString(&msg, &field, value.text);
    return absl::OkStatus();
  }
  if (value.kind != SpecNode::Kind::kMap) {
    return Error(value.line, absl::StrCat("field '", path,
                                          "' expects a map of the factory's keyword arguments "
                                          "(or its JSON text), got ",
                                          Describe(value)));
  }
  std::string text;
  try {
    text = ToJson(value).dump();
  } catch (const nlohmann::json::exception& e) {  // text that is not UTF-8
    return Error(value.line, absl::StrCat("field '", path, "': ", e.what()));
  }
  msg.GetReflection()->SetString(&msg, &field, text);
  return absl::OkStatus();
}

absl::Status SetField(const SpecNode& value, const std::string& path, const FieldDescriptor& field,
                      Message& msg) {
  if (value.kind == SpecNode::Kind::kNull || IsAutoValue(value, field)) return absl::OkStatus();
  if (IsJsonTextField(field)) return SetJsonText(value, path, field, msg);
  if (field.is_map()) {
    // `labels: {team: nlp}`: a map of the entry's values by key (string keys only).
    const FieldDescriptor& key = *field.message_type()->map_key();
    if (key.cpp_type() != FieldDescriptor::CPPTYPE_STRING) {
      return Error(value.line, absl::StrCat("field '", path, "' is not supported in job files"));
    }
    if (value.kind != SpecNode::Kind::kMap) {
      return Error(value.line,
                   absl::StrCat("field '", path, "' expects a map, got ", Describe(value)));
    }
    const Reflection& refl = *msg.GetReflection();
    for (size_t i = 0; i < value.map.size(); ++i) {
      const std::string entry_path = absl::StrCat(path, ".", value.map[i].key);
      if (value.map[i].value.kind == SpecNode::Kind::kNull) {
        return Error(value.key_lines[i],
                     absl::StrCat("field '", entry_path, "' expects a string, got null"));
      }
      Message* entry = refl.AddMessage(&msg, &field);
      entry->GetReflection()->SetString(entry, &key, value.map[i].key);
      absl::Status s = SetScalar(value.map[i].value, entry_path,
                                 *field.message_type()->map_value(), *entry);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if (field.is_repeated()) {
    if (value.kind != SpecNode::Kind::kList) {
      return Error(value.line,
                   absl::StrCat("field '", path, "' expects a list, got ", Describe(value)));
    }
    for (size_t i = 0; i < value.list.size(); ++i) {
      absl::Status s = SetScalar(value.list[i], absl::StrCat(path, "[", i, "]"), field, msg);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if (field.cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE && field.name() == "memory_limit" &&
      value.kind == SpecNode::Kind::kScalar && !IsFloatText(value.text)) {
    return Error(value.line, absl::StrCat("field '", path, "' expects a number or auto, got ",
                                          Describe(value)));
  }
  return SetScalar(value, path, field, msg);
}

absl::Status SetMessage(const SpecNode& node, absl::string_view path, Message& msg) {
  const Descriptor& desc = *msg.GetDescriptor();
  for (size_t i = 0; i < node.map.size(); ++i) {
    const auto& [key, value] = node.map[i];
    const int key_line = node.key_lines[i];
    const std::string field_path = FieldPath(path, key);
    const FieldDescriptor* field = desc.FindFieldByName(key);
    if (field == nullptr) {
      std::vector<std::string> known;
      for (int f = 0; f < desc.field_count(); ++f) known.push_back(desc.field(f)->name());
      return Error(key_line, absl::StrCat("unknown field '", field_path, "' (",
                                          path.empty() ? "top level" : path,
                                          " has: ", absl::StrJoin(known, ", "), ")"));
    }
    if (const auto* oneof = field->real_containing_oneof()) {
      for (size_t j = 0; j < i; ++j) {
        const FieldDescriptor* other = desc.FindFieldByName(node.map[j].key);
        if (other != nullptr && other->real_containing_oneof() == oneof &&
            node.map[j].value.kind != SpecNode::Kind::kNull) {
          return Error(key_line,
                       absl::StrCat("field '", field_path, "' conflicts with '",
                                    FieldPath(path, other->name()), "': give only one of ",
                                    path.empty() ? oneof->name() : std::string(path)));
        }
      }
    }
    absl::Status s = SetField(value, field_path, *field, msg);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::JobSpec> ParseJobSpec(absl::string_view text, JobFileFormat format) {
  if (text.size() > kMaxJobFileBytes) {
    const int line =
        1 + static_cast<int>(std::count(text.begin(), text.begin() + kMaxJobFileBytes, '\n'));
    return Error(line, absl::StrCat("the job file is larger than ", kMaxJobFileBytes >> 20,
                                    " MiB (the job-file size limit); a job spec is a few KiB"));
  }
  if (format == JobFileFormat::kAuto) {
    absl::string_view t = absl::StripLeadingAsciiWhitespace(text);
    format = absl::StartsWith(t, "{") ? JobFileFormat::kJson : JobFileFormat::kYaml;
  }
  absl::StatusOr<SpecNode> tree = format == JobFileFormat::kJson ? internal::ParseJsonTree(text)
                                                                 : internal::ParseYamlTree(text);
  if (!tree.ok()) return tree.status();
  if (tree->kind == SpecNode::Kind::kNull)
    return absl::InvalidArgumentError("the job file is empty");
  if (tree->kind != SpecNode::Kind::kMap) {
    return Error(tree->line,
                 absl::StrCat("a job file is a map of fields (name, model, parallel, ...), got ",
                              Describe(*tree)));
  }
  v1::JobSpec spec;
  absl::Status s = SetMessage(*tree, "", spec);
  if (!s.ok()) return s;
  return spec;
}

namespace {

// The job file's text (at most one byte past the size limit, so that a huge file or /dev/zero
// costs nothing and still fails in ParseJobSpec with the limit's error) and its format by name.
absl::StatusOr<std::string> ReadJobFileText(const std::string& path, JobFileFormat* format) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open the job file"));
  std::string text(kMaxJobFileBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (in.bad()) return absl::NotFoundError(absl::StrCat(path, ": cannot read the job file"));
  *format = JobFileFormat::kAuto;
  const std::string lower = absl::AsciiStrToLower(path);
  if (absl::EndsWith(lower, ".json")) *format = JobFileFormat::kJson;
  if (absl::EndsWith(lower, ".yaml") || absl::EndsWith(lower, ".yml"))
    *format = JobFileFormat::kYaml;
  return text;
}

// The line of the node at `field_path` ("batch.microbatches", "train.betas[1]") under `root`,
// or of the deepest enclosing node written in the file; 0 when not even the first segment is.
int LineOfField(const SpecNode& root, absl::string_view field_path) {
  const SpecNode* node = &root;
  int line = 0;
  for (absl::string_view segment : absl::StrSplit(field_path, '.')) {
    std::optional<size_t> index;
    if (const size_t open = segment.find('['); open != absl::string_view::npos) {
      size_t i = 0;
      if (absl::EndsWith(segment, "]") &&
          absl::SimpleAtoi(segment.substr(open + 1, segment.size() - open - 2), &i)) {
        index = i;
      }
      segment = segment.substr(0, open);
    }
    if (node->kind != SpecNode::Kind::kMap) return line;
    auto it = std::find_if(node->map.begin(), node->map.end(),
                           [&](const internal::SpecField& f) { return f.key == segment; });
    if (it == node->map.end() || it->value.kind == SpecNode::Kind::kNull) return line;
    node = &it->value;
    line = node->line;
    if (index.has_value()) {
      if (node->kind != SpecNode::Kind::kList || *index >= node->list.size()) return line;
      node = &node->list[*index];
      line = node->line;
    }
  }
  return line;
}

}  // namespace

absl::Status LocateInJobFile(const absl::Status& status, const std::string& path) {
  if (status.code() != absl::StatusCode::kInvalidArgument) return status;
  absl::string_view message = status.message();
  if (!absl::ConsumePrefix(&message, "spec.")) return status;
  const size_t colon = message.find(": ");
  if (colon == absl::string_view::npos) return status;
  const absl::string_view field_path = message.substr(0, colon);
  if (field_path.empty() || absl::StrContains(field_path, ' ')) return status;
  JobFileFormat format;
  absl::StatusOr<std::string> text = ReadJobFileText(path, &format);
  if (!text.ok() || text->size() > kMaxJobFileBytes) return status;
  if (format == JobFileFormat::kAuto) {
    format = absl::StartsWith(absl::StripLeadingAsciiWhitespace(*text), "{") ? JobFileFormat::kJson
                                                                            : JobFileFormat::kYaml;
  }
  absl::StatusOr<SpecNode> tree = format == JobFileFormat::kJson ? internal::ParseJsonTree(*text)
                                                                 : internal::ParseYamlTree(*text);
  if (!tree.ok()) return status;
  const int line = LineOfField(*tree, field_path);
  if (line <= 0) return status;
  return absl::InvalidArgumentError(absl::StrCat(path, ":", line, ": ", message));
}

absl::StatusOr<v1::JobSpec> LoadJobFile(const std::string& path) {
  JobFileFormat format;
  absl::StatusOr<std::string> text = ReadJobFileText(path, &format);
  if (!text.ok()) return text.status();
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(*text, format);
  if (!spec.ok()) {
    return absl::Status(spec.status().code(), absl::StrCat(path, ": ", spec.status().message()));
  }
  std::error_code ec;
  const std::filesystem::path base =
      std::filesystem::absolute(std::filesystem::path(path), ec).parent_path();
  auto resolve = [&](std::string* p) {
    if (p->empty() || std::filesystem::path(*p).is_absolute() || ec) return;
    *p = (base / *p).lexically_normal().string();
  };
  if (spec->model().has_torchscript())
    resolve(spec->mutable_model()->mutable_torchscript()->mutable_path());
  if (spec->model().has_python()) resolve(spec->mutable_model()->mutable_python()->mutable_file());
  if (spec->has_data()) resolve(spec->mutable_data()->mutable_path());
  if (spec->has_eval()) resolve(spec->mutable_eval()->mutable_path());
  return spec;
}

absl::StatusOr<v1::JobSpec> ReadJobSpec(std::istream& in) {
  // At most one byte past the size limit, as for a file: ParseJobSpec then names the limit.
  std::string text(kMaxJobFileBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (in.bad()) return absl::NotFoundError("cannot read the job file from standard input");
  return ParseJobSpec(text, JobFileFormat::kAuto);
}

}  // namespace zpipe
