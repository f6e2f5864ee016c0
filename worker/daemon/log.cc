#include "worker/daemon/log.h"

#include <atomic>
#include <cstdio>
#include <string>

#include "absl/base/const_init.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

namespace zpipe::worker {
namespace {

ABSL_CONST_INIT absl::Mutex sink_mu(absl::kConstInit);
LogSink* sink ABSL_GUARDED_BY(sink_mu) = nullptr;

}  // namespace

void Log(std::string_view line) {
  const absl::Time now = absl::Now();
  const std::string out = std::string("zpipe-worker: ").append(line).append("\n");
  std::fwrite(out.data(), 1, out.size(), stderr);
  std::fflush(stderr);
  // Held while writing so that SetLogSink(nullptr) returns only once no Write is in flight.
  absl::MutexLock lock(&sink_mu);
  if (sink != nullptr) sink->Write(now, line);
}

void SetLogSink(LogSink* new_sink) {
  absl::MutexLock lock(&sink_mu);
  sink = new_sink;
}

}  // namespace zpipe::worker
