#include "client/run_timeline.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "client/trace_command.h"
#include "core/plan.h"

namespace zpipe::cli {
namespace {
namespace fs = std::filesystem;

bool WriteFile(const std::string& path, const std::string& text, std::string* error) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) {
    *error = absl::StrCat("cannot write ", path);
    return false;
  }
  return true;
}

}  // namespace

TimelineFiles WriteTimelineFiles(Client& client, const std::string& job_id, const std::string& dir,
                                 const std::string& stem) {
  TimelineFiles files;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    files.error = absl::StrCat("cannot create ", dir, ": ", ec.message());
    return files;
  }
  const std::string base = (fs::path(dir) / stem).string();
  absl::StatusOr<JobPlan> plan = client.Plan(job_id);
  if (plan.ok()) {
    if (WriteFile(base + ".plan.txt", core::PlanToText(plan->plan), &files.error))
      files.plan = base + ".plan.txt";
  }
  // The latest iteration every rank completed, as the coordinator recorded it (GetTrace).
  absl::StatusOr<JobTrace> trace = client.Trace(job_id);
  if (!trace.ok()) {
    files.error = absl::StrCat("no trace from the coordinator: ", trace.status().message());
    return files;
  }
  const std::string chrome = base + ".trace.json";
  const std::string svg = base + ".timeline.svg";
  if (absl::Status s = WriteTrace(*trace, "chrome", chrome); !s.ok()) {
    files.error = std::string(s.message());
    return files;
  }
  if (absl::Status s = WriteTrace(*trace, "svg", svg); !s.ok()) {
    files.error = std::string(s.message());
    return files;
  }
  files.iteration = trace->response.iteration();
  if (ReduceExposure e = AnalyzeReduceExposure(trace->response); e.reductions > 0) {
    files.exposure = e;
  }
  if (!plan.ok()) {
    files.bubble_error = absl::StrCat("no plan: ", plan.status().message());
  } else if (absl::StatusOr<BubbleAttribution> b = AttributeBubble(plan->plan, trace->response);
             b.ok()) {
    files.bubble = *b;
  } else {
    files.bubble_error = std::string(b.status().message());
  }
  files.chrome = chrome;
  files.svg = svg;
  if (!trace->response.complete())
    files.error = "the traced iteration is incomplete (events were dropped)";
  return files;
}

}  // namespace zpipe::cli
