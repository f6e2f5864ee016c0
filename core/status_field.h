// Which request field an error came from, carried in the absl::Status itself (a payload), so that
// the adapters at the edges (the coordinator's spec paths, the CLI's flags) name the field
// without reading the message.
#ifndef ZPIPE_CORE_STATUS_FIELD_H_
#define ZPIPE_CORE_STATUS_FIELD_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace zpipe::core {

// `status` with `field` attached: a path into core::PlanRequest, e.g. "microbatches",
// "memory_limit", "cost.stages[3].f". An OK status stays OK (and carries nothing).
absl::Status WithField(absl::Status status, absl::string_view field);

// The field attached to `status`, or "" when none is.
std::string ErrorField(const absl::Status& status);

// The first component of a field path: "cost" for "cost.stages[3].f".
absl::string_view FieldRoot(absl::string_view field);

}  // namespace zpipe::core

#endif  // ZPIPE_CORE_STATUS_FIELD_H_
