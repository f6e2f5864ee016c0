// `zpipe trace ID [--iteration N] [--format chrome|svg] [--predicted] -f FILE`
#include "client/trace_command.h"

#include <fstream>
#include <limits>
#include <ostream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/command_table.h"
#include "core/executed_timeline.h"
#include "render/chrome_trace.h"
#include "render/timeline.h"

namespace zpipe::cli {
namespace {

std::string Render(const JobTrace& trace, const std::string& format, bool predicted_svg) {
  if (format == "svg") {
    return render::RenderTimelineSvg(predicted_svg ? trace.predicted : trace.executed);
  }
  render::ChromeTraceOptions options;
  if (!trace.predicted.ranks.empty()) options.predicted = &trace.predicted;
  return render::ChromeTraceJson(trace.executed, options);
}

}  // namespace

absl::Status WriteTrace(const JobTrace& trace, const std::string& format, const std::string& path,
                        bool predicted_svg) {
  if (format != "chrome" && format != "svg") {
    return absl::InvalidArgumentError(
        absl::StrCat("--format: expected chrome or svg, got '", format, "'"));
  }
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) return absl::InvalidArgumentError(absl::StrCat("cannot write '", path, "'"));
  file << Render(trace, format, predicted_svg);
  file.close();
  if (!file) return absl::DataLossError(absl::StrCat("writing '", path, "' failed"));
  return absl::OkStatus();
}

int RunTraceCommand(CliContext& ctx, const std::vector<std::string>& argv) {
  Args args = ArgsFor("trace");
  if (std::optional<int> exit = ParseCommandArgs(ctx, "trace", args, argv)) return *exit;
  if (args.positionals().size() != 1) return ctx.Usage("trace", "expected one job id");
  if (!args.Has("--file")) return ctx.Usage("trace", "-f FILE is required");
  const std::string path = args.Get("--file");
  std::optional<int> iteration;
  if (args.Has("--iteration")) {
    absl::StatusOr<int64_t> n = args.Integer("--iteration", 0, std::numeric_limits<int>::max());
    if (!n.ok()) return ctx.Usage("trace", n.status().message());
    iteration = static_cast<int>(*n);
  }
  std::string format = args.Get("--format");
  if (format.empty()) format = absl::EndsWith(path, ".svg") ? "svg" : "chrome";
  if (format != "chrome" && format != "svg") {
    return ctx.Usage("trace", absl::StrCat("--format: expected chrome or svg, got '", format, "'"));
  }
  absl::StatusOr<JobTrace> trace = ctx.client().Trace(args.positionals()[0], iteration);
  if (!trace.ok()) return ctx.Fail("trace", trace.status());
  const bool predicted = args.Has("--predicted");
  if (path == "-") {
    ctx.out() << Render(*trace, format, predicted);
    return kExitOk;
  }
  if (absl::Status s = WriteTrace(*trace, format, path, predicted); !s.ok()) {
    return ctx.Fail("trace", s);
  }
  size_t actions = 0;
  std::string offsets;
  for (const v1::RankTrace& r : trace->response.ranks()) {
    actions += r.actions_size();
    absl::StrAppendFormat(&offsets, "%s%d/%d %+.1fms", offsets.empty() ? "" : ", ",
                          r.pipeline_rank(), r.data_rank(), 1e3 * r.clock_offset());
  }
  ctx.err() << "wrote " << format << " trace of job " << trace->response.job_id() << " iteration "
            << trace->response.iteration() << " (" << trace->response.ranks_size() << " ranks, "
            << actions << " actions" << (trace->response.complete() ? "" : ", incomplete")
            << ") to " << path << "\nclock offsets (rank/dp): " << offsets << "\n";
  return kExitOk;
}

}  // namespace zpipe::cli
