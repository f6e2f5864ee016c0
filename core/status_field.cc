#include "core/status_field.h"

#include "absl/strings/cord.h"

namespace zpipe::core {
namespace {

constexpr char kFieldPayload[] = "type.zeropipe.dev/zpipe.core.ErrorField";

}  // namespace

absl::Status WithField(absl::Status status, absl::string_view field) {
  if (!status.ok()) status.SetPayload(kFieldPayload, absl::Cord(field));
  return status;
}

std::string ErrorField(const absl::Status& status) {
  const auto field = status.GetPayload(kFieldPayload);  // absl::optional<absl::Cord>
  return field.has_value() ? std::string(*field) : std::string();
}

absl::string_view FieldRoot(absl::string_view field) {
  return field.substr(0, field.find_first_of(".["));
}

}  // namespace zpipe::core
