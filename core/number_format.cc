#include "core/number_format.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace zpipe::core {

std::string PlainNumber(double value, int significant) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  const int integer_digits =
      value == 0 ? 1 : static_cast<int>(std::floor(std::log10(std::fabs(value)))) + 1;
  // %f of a double has at most 17 meaningful digits; beyond that the fraction is noise.
  const int decimals = std::clamp(significant - integer_digits, 0, 17);
  std::string out = absl::StrFormat("%.*f", decimals, value);
  if (out.find('.') != std::string::npos) {
    out.erase(out.find_last_not_of('0') + 1);
    if (out.back() == '.') out.pop_back();
  }
  if (out == "-0") out = "0";
  return out;
}

}  // namespace zpipe::core
