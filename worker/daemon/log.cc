#include "worker/daemon/log.h"

#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>

#include "absl/time/clock.h"

namespace zpipe::worker {
namespace {

std::mutex sink_mu;
LogSink* sink = nullptr;  // guarded by sink_mu

}  // namespace

void Log(std::string_view line) {
  const absl::Time now = absl::Now();
  const std::string out = std::string("zpipe-worker: ").append(line).append("\n");
  std::fwrite(out.data(), 1, out.size(), stderr);
  std::fflush(stderr);
  // Held while writing so that SetLogSink(nullptr) returns only once no Write is in flight.
  std::lock_guard<std::mutex> lock(sink_mu);
  if (sink != nullptr) sink->Write(now, line);
}

void SetLogSink(LogSink* new_sink) {
  std::lock_guard<std::mutex> lock(sink_mu);
  sink = new_sink;
}

}  // namespace zpipe::worker
