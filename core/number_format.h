// Numbers as people read them in tables and headers: plain notation, never an exponent.
#ifndef ZPIPE_CORE_NUMBER_FORMAT_H_
#define ZPIPE_CORE_NUMBER_FORMAT_H_

#include <string>

namespace zpipe::core {

// `value` in plain decimal notation with about `significant` significant digits: every digit of
// the integer part is kept (1630260, not 1.63026e+06), the fraction is rounded to what is left
// of `significant` and its trailing zeros dropped (33, 0.5, 0.000123). NaN and infinities print
// as "nan", "inf", "-inf".
std::string PlainNumber(double value, int significant = 6);

}  // namespace zpipe::core

#endif  // ZPIPE_CORE_NUMBER_FORMAT_H_
