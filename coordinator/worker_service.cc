#include "coordinator/worker_service.h"

#include <deque>
#include <memory>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "coordinator/grpc_auth.h"
#include "coordinator/grpc_status.h"
#include "coordinator/job_proto.h"
#include "coordinator/worker_proto.h"
#include "google/protobuf/util/time_util.h"
#include "util/log.h"

namespace zpipe::coordinator {
namespace {

ProgressBatchData BatchFromProto(const v1::ProgressBatch& b) {
  ProgressBatchData data;
  data.job_id = b.job_id();
  data.pipeline_rank = b.pipeline_rank();
  data.data_rank = b.data_rank();
  data.events.iterations = absl::MakeConstSpan(b.iterations().data(), b.iterations_size());
  data.events.ops = absl::MakeConstSpan(b.ops().data(), b.ops_size());
  data.events.stages = absl::MakeConstSpan(b.stages().data(), b.stages_size());
  data.events.microbatches = absl::MakeConstSpan(b.microbatches().data(), b.microbatches_size());
  data.start_times = absl::MakeConstSpan(b.start_times().data(), b.start_times_size());
  data.end_times = absl::MakeConstSpan(b.end_times().data(), b.end_times_size());
  data.peers = absl::MakeConstSpan(b.peers().data(), b.peers_size());
  data.chunks = absl::MakeConstSpan(b.chunks().data(), b.chunks_size());
  data.buckets = absl::MakeConstSpan(b.buckets().data(), b.buckets_size());
  return data;
}

// Reports that no longer apply (a cancelled job, a stale rank) are expected in races; only a
// replaced registration ends the session.
bool EndsSession(const absl::Status& st) { return st.code() == absl::StatusCode::kAborted; }

// The job a report is about; null for messages that are not reports.
const std::string* ReportedJob(const v1::WorkerMessage& msg) {
  switch (msg.kind_case()) {
    case v1::WorkerMessage::kProgress:
      return &msg.progress().job_id();
    case v1::WorkerMessage::kIteration:
      return &msg.iteration().job_id();
    case v1::WorkerMessage::kProfileResult:
      return &msg.profile_result().job_id();
    case v1::WorkerMessage::kFinished:
      return &msg.finished().job_id();
    case v1::WorkerMessage::kFailure:
      return &msg.failure().job_id();
    case v1::WorkerMessage::kLog:
      return &msg.log().job_id();
    default:
      return nullptr;
  }
}

std::vector<std::pair<absl::Time, std::string>> LinesFromProto(v1::JobLogBatch& batch) {
  std::vector<std::pair<absl::Time, std::string>> lines;
  lines.reserve(batch.lines_size());
  for (v1::LogLine& line : *batch.mutable_lines()) {
    lines.emplace_back(
        absl::FromUnixSeconds(line.time().seconds()) + absl::Nanoseconds(line.time().nanos()),
        std::move(*line.mutable_text()));
  }
  return lines;
}

// One worker's Session after its hello: reads the worker's messages and hands each to the job
// manager, until the stream ends or a message ends the session.
class SessionReader {
 public:
  // `check_jobs`: with tokens, a report about a job this worker holds no rank of ends the
  // session.
  SessionReader(JobManager& manager, const Authenticator& auth, grpc::ServerContextBase* ctx,
                WorkerConnection& connection, std::string worker_id, std::string name,
                bool check_jobs)
      : manager_(manager),
        auth_(auth),
        ctx_(ctx),
        connection_(connection),
        worker_id_(std::move(worker_id)),
        name_(std::move(name)),
        check_jobs_(check_jobs) {}

  // Hands one message read from the stream to the job manager; not OK when it ends the session.
  absl::Status OnMessage(v1::WorkerMessage& msg) {
    // Every message is a sign of life, noted without the jobs lock; while it is handled (which
    // may wait for that lock) the worker counts as heard from now.
    connection_.Heard(manager_.Now());
    absl::Status result = HandleChecked(msg);
    connection_.Handled();
    return result;
  }

 private:
  // Jobs once checked are remembered, so the progress path takes the manager's lock once per job.
  absl::Status AssignedTo(const std::string& job_id) {
    if (!check_jobs_ || assigned_.contains(job_id)) return absl::OkStatus();
    if (absl::Status st = manager_.CheckAssigned(name_, job_id); !st.ok()) return st;
    assigned_.insert(job_id);
    return absl::OkStatus();
  }

  absl::Status HandleChecked(v1::WorkerMessage& msg) {
    if (const std::string* job_id = ReportedJob(msg); job_id != nullptr) {
      absl::Status assigned = AssignedTo(*job_id);
      // The last lines of a rank can trail its job's end (a cancelled rank's teardown): drop
      // them rather than end the session.
      if (!assigned.ok() && msg.has_log()) return absl::OkStatus();
      if (!assigned.ok()) return assigned;
    }
    return Handle(msg);
  }

  // Not OK when `msg` ends the session.
  absl::Status Handle(v1::WorkerMessage& msg) {
    switch (msg.kind_case()) {
      case v1::WorkerMessage::kHeartbeat:
        return OnHeartbeat(msg.heartbeat());
      case v1::WorkerMessage::kProgress:
        return OnProgress(msg.progress());
      case v1::WorkerMessage::kIteration:
        return OnIteration(msg.iteration());
      case v1::WorkerMessage::kProfileResult:
        return OnProfileResult(msg.profile_result());
      case v1::WorkerMessage::kFinished:
        return OnFinished(msg.finished());
      case v1::WorkerMessage::kFailure:
        return OnFailure(msg.failure());
      case v1::WorkerMessage::kLog: {
        v1::JobLogBatch& b = *msg.mutable_log();
        manager_.logs().Append(b.job_id(), b.pipeline_rank(), b.data_rank(), LinesFromProto(b),
                               b.dropped_lines());
        return absl::OkStatus();
      }
      case v1::WorkerMessage::kLeaving:
        manager_.WorkerLeaving(worker_id_, msg.leaving().reason().substr(0, 256));
        return absl::OkStatus();
      case v1::WorkerMessage::kHello:
      case v1::WorkerMessage::KIND_NOT_SET:
        return absl::OkStatus();
    }
    return absl::OkStatus();
  }

  absl::Status OnHeartbeat(const v1::Heartbeat& heartbeat) {
    // A token removed by a reload (SIGHUP) ends the sessions opened with it at their next
    // heartbeat, so within one heartbeat interval; the worker then cannot register again.
    if (auth_.enabled()) {
      if (absl::StatusOr<Principal> still =
              CallerOf(auth_, *ctx_, Role::kWorker, "keep a worker session");
          !still.ok()) {
        return absl::Status(still.status().code(),
                            absl::StrCat("session closed: ", still.status().message(),
                                         " (the token files were reloaded without it)"));
      }
    }
    // Liveness came with the message (Heard); the jobs lock is needed only when the job the
    // worker says it runs changed since the last heartbeat (a torn-down job may free it), or the
    // registry asked for the next one (WantHeartbeat).
    absl::Status result = absl::OkStatus();
    if (connection_.TakeHeartbeatWanted() || !reported_job_ ||
        *reported_job_ != heartbeat.job_id()) {
      result = manager_.Heartbeat(worker_id_, heartbeat.job_id());
      if (result.ok()) reported_job_ = heartbeat.job_id();
    }
    if (heartbeat.has_time()) {
      const google::protobuf::Timestamp& t = heartbeat.time();
      manager_.ObserveWorkerClock(name_, static_cast<double>(t.seconds()) + 1e-9 * t.nanos());
    }
    return result;
  }

  absl::Status OnProgress(const v1::ProgressBatch& b) {
    const int n = b.iterations_size();
    if (b.ops_size() != n || b.stages_size() != n || b.microbatches_size() != n) {
      return absl::InvalidArgumentError(
          "progress: iterations, ops, stages and microbatches must have equal lengths");
    }
    manager_.Progress(name_, BatchFromProto(b));
    return absl::OkStatus();
  }

  absl::Status OnIteration(const v1::IterationReport& r) {
    std::optional<double> loss;
    if (r.has_loss()) loss = r.loss();
    std::optional<double> eval_loss;
    if (r.has_eval_loss()) eval_loss = r.eval_loss();
    absl::Status st = manager_.IterationReport(worker_id_, r.job_id(), r.iteration(),
                                               RankStatsFromProto(r.stats()), loss, eval_loss);
    if (!st.ok()) {
      LogWarning("worker ", name_, ": report of iteration ", r.iteration(), " of job ",
                 r.job_id(), " ignored: ", st.message());
    }
    return EndsSession(st) ? st : absl::OkStatus();
  }

  absl::Status OnProfileResult(const v1::ProfileResult& r) {
    std::vector<BlockProfileData> blocks;
    for (const v1::BlockProfile& b : r.blocks()) {
      blocks.push_back(BlockProfileData{b.forward_ms(), b.backward_ms(), b.weight_ms(),
                                        b.activation_bytes(), b.param_bytes()});
    }
    std::vector<int> cuts(r.checkpoint_cuts().begin(), r.checkpoint_cuts().end());
    absl::Status st =
        manager_.ProfileResult(worker_id_, r.job_id(), r.attempt(), blocks, cuts, r.error());
    return EndsSession(st) ? st : absl::OkStatus();
  }

  absl::Status OnFinished(const v1::RankFinished& f) {
    absl::Status st =
        manager_.RankFinished(worker_id_, f.job_id(), f.pipeline_rank(), f.data_rank());
    if (!st.ok()) LogWarning("worker ", name_, ": finished report ignored: ", st.message());
    return EndsSession(st) ? st : absl::OkStatus();
  }

  absl::Status OnFailure(const v1::RankFailure& f) {
    absl::Status st = manager_.RankFailed(worker_id_, f.job_id(), f.pipeline_rank(), f.data_rank(),
                                          f.message(), f.permanent(), f.peer_lost());
    if (!st.ok()) LogWarning("worker ", name_, ": failure report ignored: ", st.message());
    return EndsSession(st) ? st : absl::OkStatus();
  }

  JobManager& manager_;
  const Authenticator& auth_;
  grpc::ServerContextBase* ctx_;
  WorkerConnection& connection_;
  const std::string worker_id_;
  const std::string name_;
  const bool check_jobs_;
  std::set<std::string> assigned_;
  // The job the last heartbeat taken by the job manager named; unset before the first.
  std::optional<std::string> reported_job_;
};

// One worker's Session stream, served by gRPC's callback API: no thread of its own while it waits
// (a synchronous handler held two per worker, thousands at scale). Reads: hello first (attach),
// then every message goes to a SessionReader on the gRPC thread that completed the read. Writes:
// commands queue here (Send never blocks the job manager) and go out one at a time. The end: a
// failed read or a message that ends the session detaches it from the job manager (no Send or
// Close after that), the queued commands are written, then Finish; OnDone deletes the reactor.
class SessionReactor final
    : public grpc::ServerBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage>,
      public WorkerConnection {
 public:
  SessionReactor(JobManager& manager, Metrics& metrics, const Authenticator& auth,
                 grpc::CallbackServerContext* ctx)
      : manager_(manager), metrics_(metrics), auth_(auth), ctx_(ctx) {
    absl::StatusOr<Principal> caller =
        CallerOf(auth_, *ctx_, Role::kWorker, "open worker sessions");
    if (!caller.ok()) {
      End(caller.status());
      return;
    }
    check_jobs_ = caller->role == Role::kWorker;
    StartRead(&in_);
  }

  void Send(WorkerCommand command) override {
    {
      absl::MutexLock lock(&mu_);
      if (ending_) return;
      queue_.push_back(std::move(command));
    }
    WriteNext();
  }

  void Close(absl::Status status) override {
    {
      absl::MutexLock lock(&mu_);
      if (close_status_.ok()) close_status_ = std::move(status);
    }
    ctx_->TryCancel();  // the pending read fails, which ends the session
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      End(reader_ == nullptr ? absl::CancelledError("stream ended before hello")
                             : absl::OkStatus());
      return;
    }
    absl::Status st = reader_ == nullptr ? Hello() : reader_->OnMessage(in_);
    if (!st.ok()) {
      End(st);
      return;
    }
    StartRead(&in_);
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok) queue_.clear();  // the stream is gone; its read fails too
    }
    WriteNext();
  }

  void OnDone() override { delete this; }

 private:
  absl::Status Hello() {
    if (!in_.has_hello()) {
      return absl::InvalidArgumentError("the first Session message must be hello");
    }
    worker_id_ = in_.hello().worker_id();
    absl::StatusOr<std::string> name = manager_.WorkerName(worker_id_);
    if (!name.ok()) return name.status();
    if (absl::Status st = manager_.AttachSession(worker_id_, in_.hello().instance_id(), this);
        !st.ok()) {
      return st;
    }
    reader_ = std::make_unique<SessionReader>(manager_, auth_, ctx_, *this, worker_id_, *name,
                                              check_jobs_);
    return absl::OkStatus();
  }

  // Called once, from the read side: detaches (no Send or Close after that), then finishes once
  // what is queued is written.
  void End(absl::Status result) {
    if (reader_ != nullptr) manager_.DetachSession(worker_id_, this);
    {
      absl::MutexLock lock(&mu_);
      ending_ = true;
      end_status_ = close_status_.ok() ? std::move(result) : close_status_;
    }
    WriteNext();
  }

  // Starts the next write, or Finish when ending and nothing is left; one operation at a time.
  void WriteNext() {
    bool finish = false;
    {
      absl::MutexLock lock(&mu_);
      if (writing_ || finished_) return;
      if (queue_.empty()) {
        if (!ending_) return;
        finished_ = finish = true;
      } else {
        out_.Clear();
        CommandToProto(queue_.front(), &out_);
        queue_.pop_front();
        writing_ = true;
      }
    }
    if (finish) {
      metrics_.CountRpc("Session", end_status_.code());
      Finish(ToGrpcStatus(end_status_));
    } else {
      StartWrite(&out_);
    }
  }

  JobManager& manager_;
  Metrics& metrics_;
  const Authenticator& auth_;
  grpc::CallbackServerContext* ctx_;
  // Read side: used only from the reaction in flight (one read at a time).
  v1::WorkerMessage in_;
  bool check_jobs_ = false;
  std::string worker_id_;
  std::unique_ptr<SessionReader> reader_;  // set once attached
  // Write side.
  absl::Mutex mu_;
  std::deque<WorkerCommand> queue_ ABSL_GUARDED_BY(mu_);
  v1::CoordinatorMessage out_;  // the write in flight; touched only by whoever set writing_
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool ending_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status close_status_ ABSL_GUARDED_BY(mu_);
  absl::Status end_status_;  // set before finished_, read by the one that finishes
};

}  // namespace

grpc::Status WorkerServiceImpl::Done(absl::string_view method, const absl::Status& status) {
  metrics_.CountRpc(method, status.code());
  return ToGrpcStatus(status);
}

grpc::Status WorkerServiceImpl::RegisterWorker(grpc::ServerContext* ctx,
                                               const v1::RegisterWorkerRequest* req,
                                               v1::RegisterWorkerResponse* resp) {
  absl::StatusOr<Principal> caller = CallerOf(auth_, *ctx, Role::kWorker, "register workers");
  if (!caller.ok()) return Done("RegisterWorker", caller.status());
  absl::StatusOr<WorkerRegistration> reg = RegistrationFromProto(*req);
  if (!reg.ok()) return Done("RegisterWorker", reg.status());
  absl::StatusOr<RegisterResult> result = manager_.RegisterWorker(*reg);
  if (!result.ok()) return Done("RegisterWorker", result.status());
  resp->set_worker_id(result->worker_id);
  resp->set_resume_running_job(result->resume_running_job);
  using google::protobuf::util::TimeUtil;
  *resp->mutable_heartbeat_interval() = TimeUtil::NanosecondsToDuration(
      absl::ToInt64Nanoseconds(manager_.options().heartbeat_interval));
  *resp->mutable_heartbeat_timeout() = TimeUtil::NanosecondsToDuration(
      absl::ToInt64Nanoseconds(manager_.options().heartbeat_timeout));
  return Done("RegisterWorker", absl::OkStatus());
}

grpc::ServerBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage>* WorkerServiceImpl::Session(
    grpc::CallbackServerContext* ctx) {
  return new SessionReactor(manager_, metrics_, auth_, ctx);
}

absl::Status WorkerServiceImpl::CheckRendezvous(grpc::ServerContext* ctx, const std::string& job_id,
                                                const std::string& instance_id) const {
  absl::StatusOr<Principal> caller = CallerOf(auth_, *ctx, Role::kWorker, "use rendezvous");
  if (!caller.ok()) return caller.status();
  if (caller->role != Role::kWorker) return absl::OkStatus();  // an open coordinator
  return manager_.CheckAssignedInstance(instance_id, job_id);
}

grpc::Status WorkerServiceImpl::RendezvousSet(grpc::ServerContext* ctx,
                                              const v1::RendezvousSetRequest* req,
                                              v1::RendezvousSetResponse*) {
  if (absl::Status st = CheckRendezvous(ctx, req->job_id(), req->instance_id()); !st.ok()) {
    return Done("RendezvousSet", st);
  }
  return Done("RendezvousSet", manager_.RendezvousSet(req->job_id(), req->key(), req->value()));
}

grpc::Status WorkerServiceImpl::RendezvousGet(grpc::ServerContext* ctx,
                                              const v1::RendezvousGetRequest* req,
                                              v1::RendezvousGetResponse* resp) {
  if (absl::Status st = CheckRendezvous(ctx, req->job_id(), req->instance_id()); !st.ok()) {
    return Done("RendezvousGet", st);
  }
  absl::StatusOr<std::string> value = manager_.RendezvousGet(req->job_id(), req->key());
  if (!value.ok()) return Done("RendezvousGet", value.status());
  resp->set_value(std::move(*value));
  return Done("RendezvousGet", absl::OkStatus());
}

grpc::Status WorkerServiceImpl::RendezvousWait(grpc::ServerContext* ctx,
                                               const v1::RendezvousWaitRequest* req,
                                               v1::RendezvousWaitResponse* resp) {
  if (absl::Status st = CheckRendezvous(ctx, req->job_id(), req->instance_id()); !st.ok()) {
    return Done("RendezvousWait", st);
  }
  absl::Time deadline = absl::FromChrono(ctx->deadline());
  if (req->has_timeout()) {
    const absl::Duration timeout =
        absl::Seconds(req->timeout().seconds()) + absl::Nanoseconds(req->timeout().nanos());
    if (timeout < absl::ZeroDuration()) {
      return Done("RendezvousWait", absl::InvalidArgumentError("timeout: must be >= 0"));
    }
    if (timeout > absl::ZeroDuration()) deadline = std::min(deadline, absl::Now() + timeout);
  }
  std::vector<std::string> keys(req->keys().begin(), req->keys().end());
  absl::StatusOr<std::vector<std::string>> values =
      manager_.RendezvousWait(req->job_id(), keys, deadline, [ctx] { return ctx->IsCancelled(); });
  if (!values.ok()) return Done("RendezvousWait", values.status());
  for (std::string& v : *values) resp->add_values(std::move(v));
  return Done("RendezvousWait", absl::OkStatus());
}

}  // namespace zpipe::coordinator
