// zpipe::Client — the C++ library over the coordinator's client API (proto zpipe.v1
// CoordinatorService): what `zpipe` and any program embedding ZeroPipe use.
//
// Every call returns absl::Status(Or) with the canonical code the coordinator sent (the gRPC and
// absl codes are the same set): INVALID_ARGUMENT for a bad spec (the message names the field),
// NOT_FOUND for an unknown job, ALREADY_EXISTS for a reused id with a different spec,
// FAILED_PRECONDITION for an operation the job's state forbids, UNAVAILABLE when the coordinator
// cannot be reached, DEADLINE_EXCEEDED when it did not answer within ClientOptions::rpc_timeout,
// UNAUTHENTICATED when the coordinator requires a token and ClientOptions::token is missing or
// unknown, PERMISSION_DENIED when the token's role may not do that (e.g. a client cancelling
// another client's job).
//
// Data is exchanged as the API's own messages (v1::JobSpec, v1::Job, v1::Worker, ...); gRPC
// types (channels, contexts, grpc::Status) never leave client.cc. A Client is thread-safe; the
// channel connects lazily on the first call.
#ifndef ZPIPE_CLIENT_CLIENT_H_
#define ZPIPE_CLIENT_CLIENT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/executed_timeline.h"
#include "core/plan.h"
#include "util/tls_files.h"
#include "zpipe/v1/coordinator.pb.h"
#include "zpipe/v1/job.pb.h"
#include "zpipe/v1/worker.pb.h"

namespace zpipe {

struct ClientOptions {
  absl::Duration rpc_timeout = absl::Seconds(10);  // deadline of each unary call
  // Sent as `authorization: Bearer TOKEN` with every call (a client or admin token), for a
  // coordinator started with token files; empty = none.
  std::string token;
  // TLS to a coordinator started with --tls-cert: the CA to verify it with (empty = the system's
  // roots) and, where it requires client certificates, ours (util::LoadTlsClientPem reads them
  // from files). nullopt = plaintext. A handshake that fails (an untrusted server certificate,
  // a refused client certificate, a plaintext server) is UNAVAILABLE like an unreachable one,
  // with gRPC's reason in the message.
  std::optional<util::TlsClientPem> tls;
};

struct SubmitResult {
  v1::Job job;
  bool created = false;  // false: an identical job with this id already existed
};

// An uploaded file (UploadArtifact): what a job spec names it by.
struct UploadedArtifact {
  std::string ref;  // "artifact:sha256:<hex>"
  uint64_t size = 0;
  bool created = false;  // false: the coordinator already held it (nothing more was sent)
};

struct ListJobsOptions {
  std::vector<v1::JobState> states;  // empty = every state
  // Only jobs with every one of these labels, with that value (ListJobsRequest label_selector).
  std::map<std::string, std::string> labels;
  absl::Time created_after = absl::InfinitePast();  // only jobs created at or after
  int page_size = 0;                                // 0 = the coordinator's default
  std::string page_token;                           // empty = first page
};

struct JobPage {
  std::vector<v1::Job> jobs;
  std::string next_page_token;  // empty = last page
};

struct ListWorkersOptions {
  bool include_dead = false;  // also workers declared dead recently
  int page_size = 0;          // 0 = the coordinator's default (500)
  std::string page_token;     // empty = first page
};

struct WorkerPage {
  std::vector<v1::Worker> workers;  // by name
  std::string next_page_token;      // empty = last page
};

// A job's plan as the coordinator made it: core's plan (all pipeline ranks) and its predicted
// statistics under the job's cost model.
struct JobPlan {
  std::string job_id;
  core::Plan plan;
  v1::PlanStats predicted;
  v1::ModelLayout layout;  // TorchScript models: cuts and measured per-stage costs
  int plan_version = 0;    // Job.plan_version: re-plans from measured costs so far
};

// One iteration's executed timeline across all ranks, aligned to the coordinator's clock, beside
// the plan's predicted one (GetTrace). Times are seconds from the iteration's first executed start
// (executed) or from 0 (predicted). Render with render::ChromeTraceJson or render::RenderTimelineSvg
// (ZeroPipe::render).
struct JobTrace {
  v1::GetTraceResponse response;     // as the coordinator sent it (clock offsets, iterations held)
  core::ExecutedTimeline executed;   // one row per global rank (data_rank * p + pipeline_rank)
  core::ExecutedTimeline predicted;  // one row per pipeline rank, plan order
};

// Converts a GetTrace response; INVALID_ARGUMENT for an unknown action kind.
absl::StatusOr<JobTrace> JobTraceFromProto(v1::GetTraceResponse response);

struct WatchOptions {
  // 0 = start with a snapshot; N = resume after event N (JobEvent.sequence).
  uint64_t after_sequence = 0;
  int progress_interval_ms = 0;  // 0 = the coordinator's default
  // After the stream has delivered at least one event, a stream that breaks (UNAVAILABLE, or
  // CANCELLED by a coordinator shutting down) is reopened with after_sequence = the last sequence
  // seen, retrying for this long.
  // A stream that never delivered anything fails at once, so an unreachable coordinator is
  // reported promptly.
  absl::Duration reconnect_timeout = absl::Seconds(30);
};

// A job's event stream, read one event at a time. Reconnects transparently (WatchOptions);
// replayed events the caller has already seen are dropped, so each state change and iteration
// summary is delivered once (a resumed stream may start with a fresh snapshot).
class JobWatch {
 public:
  virtual ~JobWatch() = default;

  // Blocks for the next event. Returns nullopt once the stream has ended normally (after the
  // job's terminal state change), an error status if it broke and could not be resumed, or
  // CANCELLED after Cancel().
  virtual absl::StatusOr<std::optional<v1::JobEvent>> Next() = 0;

  // Makes a blocked or later Next() return CANCELLED. Safe from any thread.
  virtual void Cancel() = 0;

  // The highest JobEvent.sequence delivered so far (what a later Watch can resume after).
  virtual uint64_t last_sequence() const = 0;
};

struct LogsOptions {
  // Only this global rank (data_rank * p + pipeline_rank); nullopt = every rank.
  std::optional<int> rank;
  // Keep streaming new lines until the job has ended (and its ranks' last lines are in).
  bool follow = false;
  int tail = 0;                     // only the last N lines held; 0 = all
  std::optional<absl::Time> since;  // only lines written at or after this (worker clock)
  // With `follow`: a stream that breaks (UNAVAILABLE) after delivering something is reopened
  // after the last line seen, retrying for this long.
  absl::Duration reconnect_timeout = absl::Seconds(30);
};

class Client {
 public:
  // A client for the coordinator at `address` ("host:port"). Does not connect yet.
  static std::unique_ptr<Client> Create(const std::string& address, ClientOptions options = {});

  virtual ~Client() = default;

  // Submits `spec` under `job_id` (empty: the coordinator picks one, and the call is not
  // idempotent). Resubmitting an identical spec under the same id returns the existing job.
  // validate_only: validate and plan, create nothing (job.predicted is filled in).
  virtual absl::StatusOr<SubmitResult> Submit(const v1::JobSpec& spec, const std::string& job_id,
                                              bool validate_only = false) = 0;
  virtual absl::StatusOr<v1::Job> Get(const std::string& job_id) = 0;
  // One page of jobs, oldest first.
  virtual absl::StatusOr<JobPage> List(const ListJobsOptions& options) = 0;
  // Every job in `states` (all when empty), following the pages.
  absl::StatusOr<std::vector<v1::Job>> ListAll(const std::vector<v1::JobState>& states = {});
  // Every job `options` selects (its page fields ignored), following the pages.
  absl::StatusOr<std::vector<v1::Job>> ListAll(ListJobsOptions options);
  // Cancels a PENDING/SCHEDULING/RUNNING job; a CANCELLED job comes back unchanged.
  virtual absl::StatusOr<v1::Job> Cancel(const std::string& job_id,
                                         const std::string& reason = "") = 0;
  // Deletes a finished job with its history, trace and logs; `force` cancels an active one first
  // (else FAILED_PRECONDITION). Returns the state it was deleted in.
  virtual absl::StatusOr<v1::JobState> Delete(const std::string& job_id, bool force = false) = 0;

  // Iterator form of WatchJob; the stream opens on the first Next().
  virtual std::unique_ptr<JobWatch> Watch(const std::string& job_id, WatchOptions options = {}) = 0;
  // Callback form: calls `on_event` for every event until the job's stream ends (OK) or
  // `on_event` returns false (OK), or the stream fails (its status).
  absl::Status Watch(const std::string& job_id, const WatchOptions& options,
                     const std::function<bool(const v1::JobEvent&)>& on_event);

  // The job's plan; FAILED_PRECONDITION while it has none yet (PENDING).
  virtual absl::StatusOr<JobPlan> Plan(const std::string& job_id) = 0;
  // One page of registered workers, by name.
  virtual absl::StatusOr<WorkerPage> ListWorkers(const ListWorkersOptions& options) = 0;
  // Every registered worker (and recently dead one with `include_dead`), following the pages.
  absl::StatusOr<std::vector<v1::Worker>> Workers(bool include_dead = false);
  // The executed timeline of `iteration` (nullopt = the latest one every rank completed).
  // NOT_FOUND for an unknown job or an iteration the coordinator no longer holds (it keeps the
  // last few); FAILED_PRECONDITION before the first iteration completes. The default
  // implementation returns UNIMPLEMENTED (for fakes).
  virtual absl::StatusOr<JobTrace> Trace(const std::string& job_id,
                                         std::optional<int> iteration = std::nullopt);

  // The job's worker log lines (GetJobLogs), oldest first: calls `on_line` for each until they
  // are all delivered (with `follow`, until the job has ended) or `on_line` returns false (OK).
  // `dropped`, when set, gets how many older lines of the selected ranks the bounds dropped.
  // NOT_FOUND for an unknown job, INVALID_ARGUMENT for a rank outside the job's. The default
  // implementation returns UNIMPLEMENTED (for fakes).
  virtual absl::Status Logs(const std::string& job_id, const LogsOptions& options,
                            const std::function<bool(const v1::LogLine&)>& on_line,
                            uint64_t* dropped = nullptr);

  // Streams the file at `path` to the coordinator's artifact store in chunks
  // (proto/zpipe/v1/artifact.proto), claiming it holds `size` bytes whose SHA-256 is `sha256`
  // (64 lower-case hex digits; the caller hashes it, e.g. with zpipe::artifact::HashFile). No
  // deadline: a large file takes as long as it takes. NOT_FOUND / INTERNAL naming the file when
  // it cannot be read; the coordinator's INVALID_ARGUMENT (a digest or size that does not match),
  // RESOURCE_EXHAUSTED (over its --artifact-max-job-bytes) or UNAVAILABLE. The default
  // implementation returns UNIMPLEMENTED (for fakes).
  virtual absl::StatusOr<UploadedArtifact> UploadArtifact(const std::string& path,
                                                          const std::string& sha256,
                                                          uint64_t size);

  // The coordinator's version and build (GetServerInfo). UNIMPLEMENTED from a coordinator older
  // than the call, and from the default implementation (for fakes).
  virtual absl::StatusOr<v1::ServerInfo> ServerInfo();

  // Convenience: follows the job until it is terminal and returns its final record.
  absl::StatusOr<v1::Job> WaitForTerminal(const std::string& job_id);
};

// Drops gRPC's own log lines (e.g. "Handshake failed" on stderr) unless $GRPC_VERBOSITY is set:
// for command-line tools that report every failed call themselves. Process-wide.
void SilenceGrpcLogging();

// A request the coordinator refused for its size (gRPC's RESOURCE_EXHAUSTED "Received message
// larger than max (N vs. M)") restated for people: `what` (e.g. "the job spec") and its size, the
// coordinator's limit and the flag that sets it (--max-message-bytes). Every other status comes
// back unchanged. Submit applies it; for callers of other requests that carry user data.
absl::Status ExplainOversizeRequest(absl::Status status, const std::string& what);

// PENDING..CANCELLED as lower-case words ("running"); "unspecified" for 0.
std::string JobStateName(v1::JobState state);
// Parses "running" / "RUNNING" / "JOB_STATE_RUNNING". INVALID_ARGUMENT naming the valid states.
absl::StatusOr<v1::JobState> ParseJobState(const std::string& text);
bool IsTerminal(v1::JobState state);

}  // namespace zpipe

#endif  // ZPIPE_CLIENT_CLIENT_H_
