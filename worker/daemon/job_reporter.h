// JobReporter: where a running rank's reports go — each executed action (ActionSink), each
// iteration's measurements, and the end of the rank. The daemon's implementation is
// ProgressReporter, which sends them to the coordinator; the job runner sees only this interface.
#ifndef ZPIPE_WORKER_DAEMON_JOB_REPORTER_H_
#define ZPIPE_WORKER_DAEMON_JOB_REPORTER_H_

#include <optional>
#include <string>

#include "absl/time/time.h"
#include "worker/executor/executor.h"

namespace zpipe::worker {

// One iteration of one rank, as reported after it (worker.proto IterationReport).
struct IterationReport {
  int iteration = 0;
  IterationSummary summary;         // its loss is set on the rank of the last stage (real models)
  absl::Duration checkpoint_stall;  // training held by checkpointing at this iteration's end
  std::string checkpoint_error;     // checkpoint.on_error skip: the writes that failed
  int plan_version = 0;             // the plan the iteration ran
  std::optional<double> eval_loss;  // measured after the iteration, on the last stage's rank
};

// Thread-safety: OnAction as ActionSink says; the other methods are called from the job's thread.
class JobReporter : public ActionSink {
 public:
  // Sends every action queued so far, before an iteration's report (blocks until sent).
  virtual void Flush() = 0;
  // False when the coordinator stream is gone (the rank then stops).
  virtual bool ReportIteration(const IterationReport& report) = 0;
  // The rank ran every iteration. False when the coordinator stream is gone.
  virtual bool ReportFinished() = 0;
};

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_DAEMON_JOB_REPORTER_H_
