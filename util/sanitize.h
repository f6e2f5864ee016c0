// Text from a peer made safe to print on a terminal or into a line-based log.
//
// A worker's name and host, a failure reason, a forwarded log line or a job name is written by
// whoever sent it (a worker, another client) and reaches the user's terminal through `zpipe` and
// the operator's through the coordinator's log. Printed raw, an ESC or C1 sequence can clear the
// screen, retitle the window or hide text, a carriage return can overwrite what came before on
// the line, and a newline can forge a log line. SanitizeForTerminal shows every such character
// escaped instead, so that what is read is what was sent, on one line.
//
// For text output only: JSON output keeps the peer's string, which its own escaping carries.
#ifndef ZPIPE_UTIL_SANITIZE_H_
#define ZPIPE_UTIL_SANITIZE_H_

#include <string>

#include "absl/strings/string_view.h"

namespace zpipe::util {

// `text` with every character a terminal would act on written as an escape, on one line:
//   - C0 controls and DEL as \xNN (ESC as \x1b), newline and carriage return as \n and \r;
//     tab is kept (it only moves the cursor on, and log lines carry it);
//   - C1 controls (U+0080..U+009F, which some terminals take as CSI, OSC, ...), the
//     bidirectional embeddings, overrides and isolates (U+202A..U+202E, U+2066..U+2069, which
//     reorder what is shown) and the line and paragraph separators (U+2028, U+2029) as \uNNNN;
//   - every byte that is not part of well-formed UTF-8 as \xNN.
// Everything else, printable non-ASCII included, is kept byte for byte. A backslash is kept as
// it is: the result is for reading, not for unescaping. Newlines are always escaped because
// every caller prints a single-line field or one log line; nothing multi-line comes from a peer.
std::string SanitizeForTerminal(absl::string_view text);

}  // namespace zpipe::util

#endif  // ZPIPE_UTIL_SANITIZE_H_
