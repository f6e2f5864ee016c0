#include "api/json.h"

#include <cctype>
#include <cmath>
#include <map>
#include <optional>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/duration.pb.h"
#include "google/protobuf/reflection.h"
#include "google/protobuf/timestamp.pb.h"
#include "google/protobuf/util/time_util.h"

namespace zpipe::api {
namespace {

using google::protobuf::EnumDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// "DeviceKind" -> "DEVICE_KIND_" (the prefix every value of the enum carries).
std::string EnumPrefix(const EnumDescriptor& e) {
  std::string prefix;
  for (size_t i = 0; i < e.name().size(); ++i) {
    const char c = e.name()[i];
    if (i > 0 && std::isupper(static_cast<unsigned char>(c))) prefix += '_';
    prefix += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return prefix + "_";
}

Json EnumJson(const EnumDescriptor& e, int number) {
  const google::protobuf::EnumValueDescriptor* value = e.FindValueByNumber(number);
  if (value == nullptr) return number;  // newer than this build
  std::string name = value->name();
  if (absl::EndsWith(name, "_UNSPECIFIED")) return nullptr;
  if (const std::string prefix = EnumPrefix(e); absl::StartsWith(name, prefix)) {
    name = name.substr(prefix.size());
  }
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

Json Double(double v) {
  if (!std::isfinite(v)) return nullptr;
  return v;
}

// A oneof the user wrote, not the synthetic one of a proto3 `optional` field.
const google::protobuf::OneofDescriptor* RealOneof(const FieldDescriptor& field) {
  const google::protobuf::OneofDescriptor* oneof = field.containing_oneof();
  if (oneof == nullptr || oneof->is_synthetic()) return nullptr;
  return oneof;
}

// One value of `f`: its value (i < 0) or element i of a repeated field.
Json FieldValue(const Message& m, const FieldDescriptor& f, int i) {
  const Reflection& r = *m.GetReflection();
  const bool one = i < 0;
  switch (f.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return one ? r.GetInt32(m, &f) : r.GetRepeatedInt32(m, &f, i);
    case FieldDescriptor::CPPTYPE_INT64:
      return one ? r.GetInt64(m, &f) : r.GetRepeatedInt64(m, &f, i);
    case FieldDescriptor::CPPTYPE_UINT32:
      return one ? r.GetUInt32(m, &f) : r.GetRepeatedUInt32(m, &f, i);
    case FieldDescriptor::CPPTYPE_UINT64:
      return one ? r.GetUInt64(m, &f) : r.GetRepeatedUInt64(m, &f, i);
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return Double(one ? r.GetDouble(m, &f) : r.GetRepeatedDouble(m, &f, i));
    case FieldDescriptor::CPPTYPE_FLOAT:
      return Double(one ? r.GetFloat(m, &f) : r.GetRepeatedFloat(m, &f, i));
    case FieldDescriptor::CPPTYPE_BOOL:
      return one ? r.GetBool(m, &f) : r.GetRepeatedBool(m, &f, i);
    case FieldDescriptor::CPPTYPE_ENUM:
      return EnumJson(*f.enum_type(),
                      one ? r.GetEnumValue(m, &f) : r.GetRepeatedEnumValue(m, &f, i));
    case FieldDescriptor::CPPTYPE_STRING: {
      const std::string value = one ? r.GetString(m, &f) : r.GetRepeatedString(m, &f, i);
      return f.type() == FieldDescriptor::TYPE_BYTES ? absl::Base64Escape(value) : value;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return MessageJson(one ? r.GetMessage(m, &f) : r.GetRepeatedMessage(m, &f, i));
  }
  return nullptr;
}

// The well-known types that are values rather than objects; nullopt for any other message.
std::optional<Json> WellKnownJson(const Message& message) {
  const std::string& name = message.GetDescriptor()->full_name();
  if (name == "google.protobuf.Timestamp") {
    return google::protobuf::util::TimeUtil::ToString(
        static_cast<const google::protobuf::Timestamp&>(message));
  }
  if (name == "google.protobuf.Duration") {
    const auto& d = static_cast<const google::protobuf::Duration&>(message);
    return static_cast<double>(d.seconds()) + d.nanos() / 1e9;
  }
  return std::nullopt;
}

}  // namespace

Json MessageJson(const Message& message) {
  if (std::optional<Json> value = WellKnownJson(message)) return *std::move(value);
  const google::protobuf::Descriptor& d = *message.GetDescriptor();
  const Reflection& r = *message.GetReflection();
  Json out = Json::object();
  for (int i = 0; i < d.field_count(); ++i) {
    const FieldDescriptor& f = *d.field(i);
    if (const google::protobuf::OneofDescriptor* oneof = RealOneof(f)) {
      if (!r.HasField(message, &f)) continue;
      out[oneof->name()] = f.name();
    }
    if (f.is_map()) {
      // An object by key, in key order (the map's own order is unspecified): labels.
      const FieldDescriptor& key = *f.message_type()->map_key();
      const FieldDescriptor& value = *f.message_type()->map_value();
      std::map<std::string, Json> entries;
      for (int k = 0; k < r.FieldSize(message, &f); ++k) {
        const Message& entry = r.GetRepeatedMessage(message, &f, k);
        Json name = FieldValue(entry, key, -1);
        entries[name.is_string() ? name.get<std::string>() : name.dump()] =
            FieldValue(entry, value, -1);
      }
      Json object = Json::object();
      for (auto& [name, v] : entries) object[name] = std::move(v);
      out[f.name()] = std::move(object);
    } else if (f.is_repeated()) {
      Json list = Json::array();
      for (int k = 0; k < r.FieldSize(message, &f); ++k) list.push_back(FieldValue(message, f, k));
      out[f.name()] = std::move(list);
    } else if (f.has_presence() && !r.HasField(message, &f)) {
      out[f.name()] = nullptr;
    } else {
      out[f.name()] = FieldValue(message, f, -1);
    }
  }
  return out;
}

Json SpecJson(const v1::JobSpec& spec) {
  Json out = MessageJson(spec);
  if (out["model"].is_object()) out["model"].erase("kind");
  return out;
}

Json JobJson(const v1::Job& job) {
  Json out = MessageJson(job);
  out["spec"] = job.has_spec() ? SpecJson(job.spec()) : Json();
  return out;
}

Json JobListJson(const std::vector<v1::Job>& jobs) {
  Json list = Json::array();
  for (const v1::Job& job : jobs) list.push_back(JobJson(job));
  return Json{{"jobs", std::move(list)}};
}

Json EventJson(const v1::JobEvent& event) {
  Json out = MessageJson(event);
  if (event.has_snapshot()) out["snapshot"] = JobJson(event.snapshot());
  return out;
}

Json WorkerListJson(const std::vector<v1::Worker>& workers) {
  Json list = Json::array();
  for (const v1::Worker& worker : workers) list.push_back(MessageJson(worker));
  return Json{{"workers", std::move(list)}};
}

Json TraceJson(const v1::GetTraceResponse& trace) { return MessageJson(trace); }

Json ErrorJson(const absl::Status& status) {
  return Json{{"code", absl::StatusCodeToString(status.code())},
              {"message", std::string(status.message())}};
}

std::string Dump(const Json& value, bool pretty) {
  return value.dump(pretty ? 2 : -1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

}  // namespace zpipe::api
