// WorkerDaemon: the zpipe-worker process's control loop.
//
// Registers with the coordinator under a stable name, holds one Session stream, sends heartbeats,
// runs the assignments it receives one after another on a job thread (RunAssignment), reports a
// job's failure and goes back to idle.
//
// The coordinator may go away under a running job (restart, crash): the job keeps computing, its
// reports (iterations, progress, finished, failure) wait in a bounded outbox (the oldest progress
// batches are dropped first, and counted), and the daemon reconnects with backoff (capped at
// reconnect_max_backoff), re-registering with the job it is still running, or has just finished,
// and then sends what waited. If the coordinator does not take the job back it is abandoned and
// its waiting reports are dropped. While it is away the daemon waits on gRPC's own reconnect loop
// (at most 0.25 s between connection attempts), so it re-registers within about 0.3 s of the
// coordinator's return (tests/worker/reconnect_e2e_test.cc measures it). What the daemon logs while it runs a rank goes to the
// coordinator too (JobLog: about once per heartbeat interval, and before the rank's end is
// reported), bounded per rank while the coordinator is away. Stop() (e.g. from SIGTERM) cancels the
// running job, closes the stream and makes Run() return.
#ifndef ZPIPE_WORKER_DAEMON_WORKER_DAEMON_H_
#define ZPIPE_WORKER_DAEMON_WORKER_DAEMON_H_

#include <atomic>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "util/tls_files.h"
#include "worker/comm/communicator.h"
#include "worker/daemon/artifact_cache.h"
#include "worker/daemon/data_roots.h"
#include "worker/daemon/job_log.h"
#include "worker/daemon/job_runner.h"
#include "worker/daemon/report_outbox.h"
#include "worker/daemon/worker_metrics.h"
#include "zpipe/v1/worker.grpc.pb.h"

namespace zpipe::worker {

struct DaemonOptions {
  std::string coordinator = "localhost:50051";
  std::string name;  // stable identity; required
  zpipe::v1::DeviceKind device_kind = zpipe::v1::DEVICE_KIND_CPU;
  int device_index = 0;
  std::string host = "127.0.0.1";  // address peers reach this worker's TCP streams on
  uint64_t memory_bytes = 0;
  absl::Duration comm_timeout = absl::Seconds(60);
  absl::Duration reconnect_backoff = absl::Milliseconds(200);
  // The longest wait between two attempts to register when the coordinator answers but refuses
  // (backoff doubles from reconnect_backoff), and how long one attempt waits for a connection.
  // An unreachable coordinator is retried by gRPC every 0.25 s at most, whatever this is.
  absl::Duration reconnect_max_backoff = absl::Seconds(2);
  // Reports kept for the coordinator while it is unreachable, in serialized bytes.
  size_t outbox_capacity_bytes = 32 << 20;
  // --log-lines: a running rank's log lines kept for the coordinator (the newest; older ones are
  // dropped and counted), both before they are sent and in the outbox while it is unreachable.
  size_t log_lines = 1000;
  WorkerMetrics* metrics = nullptr;  // optional, must outlive the daemon
  // Give up when the coordinator cannot be reached for this long (0 = retry forever).
  absl::Duration give_up_after = absl::ZeroDuration();
  // Sent as `authorization: Bearer TOKEN` on every call (a worker token); empty = none.
  std::string token;
  // Registered with every RegisterWorker; nullopt = probe this process (capabilities.h) once when
  // the daemon is made.
  std::optional<zpipe::v1::WorkerCapabilities> capabilities;
  // TLS to the coordinator (the CA to verify it with; a client certificate for mTLS);
  // nullopt = plaintext.
  std::optional<util::TlsClientPem> tls;
  // --data-root: the only folders jobs may name files in (data_roots.h); empty = the working
  // directory.
  std::vector<std::string> data_roots;
  // --artifact-cache: where uploaded artifacts a job names are kept (artifact_cache.h), allowed
  // like a data root; empty = .zpipe-artifacts under the first data root.
  std::string artifact_cache;
};

class WorkerDaemon {
 public:
  explicit WorkerDaemon(DaemonOptions options);
  ~WorkerDaemon();

  // Blocks until Stop() or, with give_up_after, until the coordinator stayed unreachable.
  // INVALID_ARGUMENT at once for a data root that is not a directory.
  absl::Status Run();
  // Thread-safe and async-signal-tolerant enough for a signal-watching thread to call.
  void Stop();
  // Stop, first telling the coordinator this worker is leaving and why (a signal's name), so a
  // job it runs is failed at once instead of after the heartbeat timeout.
  void Leave(const std::string& reason);
  // The sink that keeps the running job's log lines (log.h); main installs it.
  LogSink& log_sink() { return job_log_; }

 private:
  using Stream = grpc::ClientReaderWriter<zpipe::v1::WorkerMessage, zpipe::v1::CoordinatorMessage>;

  // Waits until the channel to the coordinator is connected, up to `timeout` or Stop(); gRPC
  // keeps trying to connect meanwhile. False when it is not connected.
  bool AwaitChannel(absl::Duration timeout);
  // One registration and Session, until the stream ends (Unavailable) or the coordinator says
  // shut down (OK); `*registered` once the coordinator took the registration. Its steps follow.
  absl::Status RunSession(bool* registered);
  // This worker's registration, naming the job it still runs (or has finished) if any.
  zpipe::v1::RegisterWorkerRequest RegistrationRequest();
  // After registering: the job the coordinator did not take back is cancelled, and the outbox
  // keeps only the reports of the one it did (ending with its RankFinished when it finished).
  void SettleRunningJob(const zpipe::v1::RegisterWorkerRequest& req,
                        const zpipe::v1::RegisterWorkerResponse& resp);
  // Writes hello and the outbox, then publishes the stream; false when stopping.
  bool OpenSession(const std::string& worker_id, grpc::ClientContext& ctx, Stream& stream);
  // Every `interval` until Stop() or `session_over`: joins a finished job, sends its log lines
  // and a heartbeat.
  void SendHeartbeats(absl::Duration interval, const std::atomic<bool>& session_over);
  // Runs the coordinator's commands until the stream ends; true when one said shut down.
  bool ReadCommands(Stream& stream);
  // Times the model's blocks on a thread of its own and sends the ProfileResult.
  void StartProfile(const zpipe::v1::ProfileRequest& request);
  // Writes `msg` to the open session when nothing waits in the outbox and the stream is not
  // half-closed; the stream it wrote to, or null.
  Stream* WriteNow(const zpipe::v1::WorkerMessage& msg) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Writes `msg` to the session; a job report (iteration, progress, finished, failure, profile
  // result) that cannot be written now goes to the outbox and counts as sent.
  bool Send(const zpipe::v1::WorkerMessage& msg);
  void StartJob(const zpipe::v1::Assignment& assignment);
  // The job's thread: runs the assignment, then reports how it ended.
  void RunJobThread(const zpipe::v1::Assignment& assignment, const std::atomic<bool>& cancelled,
                    PlanUpdateChannel* plan_updates);
  // Converts the assignment at the edge (job_proto.h) and runs it (job_runner.h).
  absl::Status RunAssignment(const zpipe::v1::Assignment& assignment,
                             const std::atomic<bool>& cancelled, PlanUpdateChannel* plan_updates);
  // A profile request's answer for `spec` (ProfileJob); errors go in its `error`.
  JobProfile Profile(const zpipe::v1::JobSpec& spec);
  void CancelJob(const std::string& job_id);
  void JoinJobIfDone(bool wait);
  // Sends the running job's log lines that wait (to the outbox when the coordinator is away).
  void SendJobLog();

  // Adds the token to a call's metadata.
  void Authorize(grpc::ClientContext& ctx) const;

  const DaemonOptions options_;
  const zpipe::v1::WorkerCapabilities capabilities_;
  // Random, once per process: proves to the coordinator that a registration, session or
  // rendezvous call comes from this process (worker.proto "Identity").
  const std::string instance_id_;
  std::optional<DataRoots> data_roots_;  // set by Run() before any job can arrive
  std::unique_ptr<ArtifactCache> artifacts_;  // set by Run() before any job can arrive
  std::unique_ptr<ArtifactSource> artifact_source_;
  // The spec with every artifact reference replaced by a verified local copy (artifact_cache.h).
  absl::Status ResolveArtifacts(zpipe::v1::JobSpec& spec);
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<zpipe::v1::WorkerService::Stub> stub_;

  // Three locks, always taken in this order: log_send_mu_, write_mu_, mu_.
  //
  // Held from taking the job's lines to sending them, so batches leave in the order they were
  // taken (the heartbeat thread and the job's thread both send them).
  absl::Mutex log_send_mu_ ABSL_ACQUIRED_BEFORE(write_mu_);
  // Orders writes to the stream; guards the outbox.
  absl::Mutex write_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  // Set by Leave() once it half-closed the stream: nothing may be written to it after that
  // (cleared when the session ends).
  bool writes_done_ ABSL_GUARDED_BY(write_mu_) = false;
  ReportOutbox outbox_ ABSL_GUARDED_BY(write_mu_);
  // The running job's last iteration reports written to a session (kResentReports at most): a
  // coordinator that died may have read them without storing their summaries, so they are sent
  // again ahead of the outbox when the next coordinator takes the job back (it ignores the ones
  // it has). Cleared when a job starts.
  static constexpr size_t kResentReports = 16;
  std::deque<zpipe::v1::WorkerMessage> written_reports_ ABSL_GUARDED_BY(write_mu_);
  // Remembers `msg` among written_reports_ when it is an iteration report.
  void NoteWritten(const zpipe::v1::WorkerMessage& msg) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  JobLog job_log_;  // thread-safe

  // The session and the running job. The heartbeat thread waits on cv_ for its interval, woken
  // early by Stop(), the session's end or the job's end.
  absl::Mutex mu_;
  absl::CondVar cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* session_ctx_ ABSL_GUARDED_BY(mu_) = nullptr;
  // The open session's stream (set and cleared holding write_mu_ too).
  Stream* stream_ ABSL_GUARDED_BY(mu_) = nullptr;

  // The running job.
  std::string job_id_ ABSL_GUARDED_BY(mu_);
  int job_pipeline_rank_ ABSL_GUARDED_BY(mu_) = 0;
  int job_data_rank_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread job_thread_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<std::atomic<bool>> job_cancelled_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<PlanUpdateChannel> job_plan_updates_ ABSL_GUARDED_BY(mu_);  // for job_id_
  std::shared_ptr<std::atomic<bool>> job_done_ ABSL_GUARDED_BY(mu_);
  // The rank this worker last finished, until a registration has told the coordinator so
  // (its RankFinished may have been lost with the coordinator).
  std::optional<zpipe::v1::RankFinished> finished_ ABSL_GUARDED_BY(mu_);
  // The last rank that failed, until a coordinator took its failure back (or a new job starts):
  // a coordinator that restarted meanwhile hears it again at registration.
  std::optional<zpipe::v1::RankFailure> failed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_DAEMON_WORKER_DAEMON_H_
