// `zpipe trace ID [--iteration N] [--format chrome|svg] [--predicted] -f FILE`: one iteration's
// executed timeline across all ranks (GetTrace) as a Chrome trace (loads in Perfetto) or SVG.
#ifndef ZPIPE_CLIENT_TRACE_COMMAND_H_
#define ZPIPE_CLIENT_TRACE_COMMAND_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/cli.h"
#include "client/client.h"

namespace zpipe::cli {

int RunTraceCommand(CliContext& ctx, const std::vector<std::string>& args);

// Writes `trace` to `path` ("-" = stdout is not supported here) as "chrome" or "svg"; the Chrome
// trace includes the predicted timeline as separate processes. For `zpipe run`, too.
absl::Status WriteTrace(const JobTrace& trace, const std::string& format, const std::string& path,
                        bool predicted_svg = false);

}  // namespace zpipe::cli

#endif  // ZPIPE_CLIENT_TRACE_COMMAND_H_
