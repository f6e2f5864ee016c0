// nlohmann-json for render's JSON exports (plan_export.cc, chrome_trace.cc). Private to render's .cc
// files: no public render header includes it, so render's users (and the installed package) never
// need nlohmann-json.
#ifndef ZPIPE_RENDER_INTERNAL_JSON_H_
#define ZPIPE_RENDER_INTERNAL_JSON_H_

#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace zpipe::render::internal {

// Objects keep the order their fields are written in.
using Json = nlohmann::ordered_json;

// A double as the exports write numbers: an integer when it is one ("span":48, not 48.0), else
// the shortest text that reads back as the same double; null for NaN and infinities, which JSON
// lacks.
inline Json JsonNumber(double v) {
  if (!std::isfinite(v)) return nullptr;
  constexpr double kExactIntegers = 9007199254740992.0;  // 2^53
  if (v == std::trunc(v) && std::abs(v) < kExactIntegers) return static_cast<int64_t>(v);
  return v;
}

inline Json JsonNumbers(const std::vector<double>& values) {
  Json out = Json::array();
  for (double v : values) out.push_back(JsonNumber(v));
  return out;
}

// `value` on one line and a newline, the form every core export ends in.
inline std::string DumpLine(const Json& value) {
  return value.dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace) + "\n";
}

}  // namespace zpipe::render::internal

#endif  // ZPIPE_RENDER_INTERNAL_JSON_H_
