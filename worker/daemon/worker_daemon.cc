#include "worker/daemon/worker_daemon.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "util/log.h"
#include "worker/comm/peer_error.h"
#include "worker/daemon/capabilities.h"
#include "worker/daemon/grpc_store.h"
#include "worker/daemon/job_proto.h"
#include "worker/daemon/permanent_error.h"
#include "worker/daemon/progress_reporter.h"

namespace zpipe::worker {
namespace {

absl::Duration FromProto(const google::protobuf::Duration& d, absl::Duration fallback) {
  const absl::Duration out = absl::Seconds(d.seconds()) + absl::Nanoseconds(d.nanos());
  return out > absl::ZeroDuration() ? out : fallback;
}

// The longest pause of gRPC's own reconnect loop (GRPC_ARG_MAX_RECONNECT_BACKOFF_MS): a
// connection attempt costs the coordinator little, and re-registering within 1 s of its return
// is what lets --recovery-grace be short.
constexpr absl::Duration kChannelMaxBackoff = absl::Milliseconds(250);
// How long one connection attempt (TCP connect and TLS handshake) may take
// (GRPC_ARG_MIN_RECONNECT_BACKOFF_MS is gRPC's minimum connect timeout).
constexpr absl::Duration kConnectTimeout = absl::Seconds(1);

// 128 random bits as hex, from the kernel's CSPRNG.
std::string NewInstanceId() {
  unsigned char bytes[16] = {};
  std::ifstream urandom("/dev/urandom", std::ios::binary);
  urandom.read(reinterpret_cast<char*>(bytes), sizeof(bytes));
  std::string out;
  for (unsigned char b : bytes) out += absl::StrFormat("%02x", b);
  return out;
}

}  // namespace

WorkerDaemon::WorkerDaemon(DaemonOptions options)
    : options_(std::move(options)),
      capabilities_(options_.capabilities ? *options_.capabilities
                                          : BuildCapabilities(ProbeRuntime())),
      instance_id_(NewInstanceId()),
      outbox_(options_.outbox_capacity_bytes, options_.log_lines),
      job_log_(options_.log_lines) {
  Log(absl::StrCat("capabilities: ", DescribeCapabilities(capabilities_)));
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  // gRPC's own reconnect backoff grows to minutes by default: a coordinator back after a restart
  // would not be seen for that long. Capped at kChannelMaxBackoff (plus gRPC's 20% jitter), so
  // a coordinator that is back is connected to within about 0.3 s; a connection attempt (TCP
  // and TLS handshake) gets kConnectTimeout before it is abandoned and retried.
  const int max_backoff_ms = static_cast<int>(std::clamp<int64_t>(
      absl::ToInt64Milliseconds(options_.reconnect_max_backoff), 10,
      absl::ToInt64Milliseconds(kChannelMaxBackoff)));
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, std::min(100, max_backoff_ms));
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(kConnectTimeout)));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, max_backoff_ms);
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (options_.tls.has_value()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options_.tls->root_certs;
    ssl.pem_cert_chain = options_.tls->cert_chain;
    ssl.pem_private_key = options_.tls->private_key;
    credentials = grpc::SslCredentials(ssl);
  }
  channel_ = grpc::CreateCustomChannel(options_.coordinator, credentials, args);
  stub_ = zpipe::v1::WorkerService::NewStub(channel_);
}

void WorkerDaemon::Authorize(grpc::ClientContext& ctx) const {
  if (!options_.token.empty()) ctx.AddMetadata("authorization", "Bearer " + options_.token);
}

WorkerDaemon::~WorkerDaemon() {
  Stop();
  JoinJobIfDone(/*wait=*/true);
}

void WorkerDaemon::Stop() {
  absl::MutexLock lock(&mu_);
  if (stopping_) return;
  stopping_ = true;
  if (job_cancelled_) job_cancelled_->store(true);
  if (session_ctx_ != nullptr) session_ctx_->TryCancel();
  cv_.SignalAll();
}

void WorkerDaemon::Leave(const std::string& reason) {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
  }
  zpipe::v1::WorkerMessage bye;
  bye.mutable_leaving()->set_reason(reason);
  bool told = false;
  {
    absl::MutexLock wlock(&write_mu_);
    // Half-close after the goodbye instead of cancelling right away: a cancel may discard a
    // written message that has not left yet, and the coordinator would then see only "its
    // session closed". It answers the half-close by ending the session.
    if (auto* stream = WriteNow(bye)) {
      told = true;
      writes_done_ = true;
      stream->WritesDone();
    }
  }
  if (told) {
    Log(absl::StrCat("told the coordinator this worker is leaving (", reason, ")"));
    auto session_ended = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stream_ == nullptr;
    };
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&session_ended), absl::Seconds(2));
  }
  Stop();
}

WorkerDaemon::Stream* WorkerDaemon::WriteNow(const zpipe::v1::WorkerMessage& msg) {
  Stream* stream;
  {
    absl::MutexLock lock(&mu_);
    stream = stream_;
  }
  // In order: nothing overtakes what already waits in the outbox.
  if (stream != nullptr && !writes_done_ && outbox_.empty() && stream->Write(msg)) return stream;
  return nullptr;
}

void WorkerDaemon::NoteWritten(const zpipe::v1::WorkerMessage& msg) {
  if (!msg.has_iteration()) return;
  written_reports_.push_back(msg);
  if (written_reports_.size() > kResentReports) written_reports_.pop_front();
}

bool WorkerDaemon::Send(const zpipe::v1::WorkerMessage& msg) {
  absl::MutexLock wlock(&write_mu_);
  if (WriteNow(msg) != nullptr) {
    NoteWritten(msg);
    return true;
  }
  if (ReportedJob(msg) == nullptr) return false;
  outbox_.Push(msg);
  return true;
}

void WorkerDaemon::SendJobLog() {
  absl::MutexLock lock(&log_send_mu_);
  if (std::optional<JobLogBatch> lines = job_log_.Take()) Send(LogBatchToProto(*lines));
}

void WorkerDaemon::JoinJobIfDone(bool wait) {
  std::thread t;
  {
    absl::MutexLock lock(&mu_);
    if (!job_thread_.joinable()) return;
    if (!wait && !(job_done_ && job_done_->load())) return;
    t = std::move(job_thread_);
  }
  t.join();
  absl::MutexLock lock(&mu_);
  if (job_done_ && job_done_->load()) {
    job_id_.clear();
    job_cancelled_.reset();
    job_plan_updates_.reset();
    job_done_.reset();
  }
}

void WorkerDaemon::StartJob(const zpipe::v1::Assignment& assignment) {
  {
    // A new run (or attempt) starts: an earlier one's reports must never be sent for it.
    absl::MutexLock wlock(&write_mu_);
    written_reports_.clear();
  }
  // The coordinator frees this worker as soon as its rank reports finished, a moment before the
  // job's thread ends, and a cancelled job (a restart) takes its communicator down first: give
  // that thread up to the communication timeout (its teardown is bounded by it) rather than
  // refuse a job that arrives meanwhile.
  // The heartbeat thread may be joining the finished thread right now (job_id_ clears when that
  // join returns), so wait for job_id_ itself.
  const absl::Time deadline = absl::Now() + options_.comm_timeout + absl::Seconds(2);
  while (absl::Now() < deadline) {
    JoinJobIfDone(/*wait=*/false);
    {
      absl::MutexLock lock(&mu_);
      if (stopping_ || job_id_.empty() || job_id_ == assignment.job_id()) break;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  absl::MutexLock lock(&mu_);
  if (!job_id_.empty()) {
    if (job_id_ == assignment.job_id()) return;  // a repeated delivery after a reconnect
    Log(absl::StrCat("job ", assignment.job_id(), ": refused, still running job ", job_id_));
    zpipe::v1::WorkerMessage msg;
    auto* f = msg.mutable_failure();
    f->set_job_id(assignment.job_id());
    f->set_pipeline_rank(assignment.pipeline_rank());
    f->set_data_rank(assignment.data_rank());
    f->set_message(absl::StrCat("worker ", options_.name, " is still running job ", job_id_));
    std::thread([this, msg] { Send(msg); }).detach();
    return;
  }
  job_id_ = assignment.job_id();
  finished_.reset();
  failed_.reset();
  job_pipeline_rank_ = assignment.pipeline_rank();
  job_data_rank_ = assignment.data_rank();
  job_cancelled_ = std::make_shared<std::atomic<bool>>(false);
  job_done_ = std::make_shared<std::atomic<bool>>(false);
  job_plan_updates_ = std::make_shared<PlanUpdateChannel>();
  auto plan_updates = job_plan_updates_;
  auto cancelled = job_cancelled_;
  auto done = job_done_;
  job_log_.Begin(job_id_, job_pipeline_rank_, job_data_rank_);
  Log(absl::StrCat("job ", job_id_, ": rank ", assignment.pipeline_rank(), "/",
                   assignment.data_rank(), " of p=", assignment.pipeline_size(),
                   " d=", assignment.data_size(), ", ", assignment.spec().train().iterations(),
                   " iterations"));
  job_thread_ = std::thread([this, assignment, cancelled, done, plan_updates] {
    RunJobThread(assignment, *cancelled, plan_updates.get());
    done->store(true);
    cv_.SignalAll();  // an early heartbeat: this worker no longer runs the job
  });
}

void WorkerDaemon::RunJobThread(const zpipe::v1::Assignment& assignment,
                                const std::atomic<bool>& cancelled,
                                PlanUpdateChannel* plan_updates) {
  if (options_.metrics != nullptr) options_.metrics->SetBusy(true);
  const absl::Status st = RunAssignment(assignment, cancelled, plan_updates);
  if (st.ok()) {
    Log(absl::StrCat("job ", assignment.job_id(), ": rank finished"));
    zpipe::v1::RankFinished finished;
    finished.set_job_id(assignment.job_id());
    finished.set_pipeline_rank(assignment.pipeline_rank());
    finished.set_data_rank(assignment.data_rank());
    absl::MutexLock lock(&mu_);
    finished_ = finished;
  } else if (cancelled.load()) {
    Log(absl::StrCat("job ", assignment.job_id(), ": cancelled"));
  } else {
    Log(absl::StrCat("job ", assignment.job_id(), ": failed: ", st.ToString()));
  }
  // The rank's last lines (its failure included) go before the failure report.
  job_log_.End();
  SendJobLog();
  if (!st.ok() && !cancelled.load()) {
    zpipe::v1::WorkerMessage msg;
    auto* f = msg.mutable_failure();
    f->set_job_id(assignment.job_id());
    f->set_pipeline_rank(assignment.pipeline_rank());
    f->set_data_rank(assignment.data_rank());
    f->set_message(std::string(st.message()));
    f->set_permanent(IsPermanent(st));  // a full checkpoint disk: not worth a restart
    f->set_peer_lost(IsPeerLost(st));   // a broken connection: another rank has the cause
    {
      absl::MutexLock lock(&mu_);
      failed_ = *f;
    }
    Send(msg);
  }
  if (options_.metrics != nullptr) {
    options_.metrics->OnJobEnd(assignment.job_id(), st.ok());
    options_.metrics->SetBusy(false);
  }
}

absl::Status WorkerDaemon::RunAssignment(const zpipe::v1::Assignment& assignment,
                                         const std::atomic<bool>& cancelled,
                                         PlanUpdateChannel* plan_updates) {
  zpipe::v1::Assignment local = assignment;  // artifact references -> local copies
  if (absl::Status st = ResolveArtifacts(*local.mutable_spec()); !st.ok()) return st;
  // The edge: from here on the job is its domain view.
  absl::StatusOr<JobConfig> job = FromAssignment(local);
  if (!job.ok()) return job.status();
  JobRunnerOptions jo;
  jo.hostname = options_.host;
  jo.comm_timeout = options_.comm_timeout;
  jo.metrics = options_.metrics;
  jo.device_kind = DeviceKindFromProto(options_.device_kind);
  jo.device_index = options_.device_index;
  jo.data_roots = &*data_roots_;
  jo.plan_updates = plan_updates;
  std::unique_ptr<KeyValueStore> rendezvous =
      NewGrpcRendezvousStore(*stub_, job->job_id, {instance_id_, options_.token});
  ProgressReporter reporter(job->job_id, job->rank.pipeline_rank, job->rank.data_rank,
                            [this](const zpipe::v1::WorkerMessage& m) { return Send(m); });
  return RunJob(*job, *rendezvous, reporter, jo, cancelled);
}

absl::Status WorkerDaemon::ResolveArtifacts(zpipe::v1::JobSpec& spec) {
  return artifacts_->Resolve(spec, *artifact_source_);
}

JobProfile WorkerDaemon::Profile(const zpipe::v1::JobSpec& spec) {
  zpipe::v1::JobSpec local = spec;  // artifact references -> local copies
  absl::Status st = ResolveArtifacts(local);
  absl::StatusOr<JobSettings> settings = st.ok() ? JobSettingsFromProto(local) : st;
  if (settings.ok()) return ProfileJob(*settings, *data_roots_);
  JobProfile failed;
  failed.error = std::string(settings.status().message());
  return failed;
}

void WorkerDaemon::CancelJob(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  if (job_id_ == job_id && job_cancelled_) {
    Log(absl::StrCat("job ", job_id, ": cancel received"));
    job_cancelled_->store(true);
  }
}

bool WorkerDaemon::AwaitChannel(absl::Duration timeout) {
  const absl::Time end = absl::Now() + timeout;
  while (true) {
    const grpc_connectivity_state state = channel_->GetState(/*try_to_connect=*/true);
    if (state == GRPC_CHANNEL_READY) return true;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return false;
    }
    const absl::Time now = absl::Now();
    if (now >= end) return false;
    // Short slices, so Stop() is seen promptly.
    channel_->WaitForStateChange(state,
                                 absl::ToChronoTime(std::min(end, now + absl::Milliseconds(50))));
  }
}

zpipe::v1::RegisterWorkerRequest WorkerDaemon::RegistrationRequest() {
  zpipe::v1::RegisterWorkerRequest req;
  req.set_name(options_.name);
  req.set_device_kind(options_.device_kind);
  req.set_device_index(options_.device_index);
  req.set_host(options_.host);
  req.set_memory_bytes(options_.memory_bytes);
  req.set_version("0.1.0");
  req.set_instance_id(instance_id_);
  *req.mutable_capabilities() = capabilities_;
  JoinJobIfDone(/*wait=*/false);
  absl::MutexLock lock(&mu_);
  if (!job_id_.empty()) {
    req.set_running_job_id(job_id_);
    req.set_running_pipeline_rank(job_pipeline_rank_);
    req.set_running_data_rank(job_data_rank_);
  } else if (finished_.has_value()) {
    req.set_running_job_id(finished_->job_id());
    req.set_running_pipeline_rank(finished_->pipeline_rank());
    req.set_running_data_rank(finished_->data_rank());
    req.set_running_job_finished(true);
  } else if (failed_.has_value()) {
    req.set_running_job_id(failed_->job_id());
    req.set_running_pipeline_rank(failed_->pipeline_rank());
    req.set_running_data_rank(failed_->data_rank());
    req.set_running_job_failed(true);
  }
  return req;
}

void WorkerDaemon::SettleRunningJob(const zpipe::v1::RegisterWorkerRequest& req,
                                    const zpipe::v1::RegisterWorkerResponse& resp) {
  std::optional<zpipe::v1::RankFinished> finished;
  std::optional<zpipe::v1::RankFailure> failed;
  if (req.running_job_finished() || req.running_job_failed()) {
    absl::MutexLock lock(&mu_);
    if (finished_.has_value() && finished_->job_id() == req.running_job_id()) {
      finished = std::move(finished_);
      finished_.reset();
    }
    if (failed_.has_value() && failed_->job_id() == req.running_job_id()) {
      failed = std::move(failed_);
      failed_.reset();
    }
  }
  if (!req.running_job_id().empty() && !resp.resume_running_job()) {
    if (!req.running_job_finished() && !req.running_job_failed()) {
      Log(absl::StrCat("job ", req.running_job_id(),
                       ": coordinator did not take it back; abandoning"));
    }
    CancelJob(req.running_job_id());
  }
  // Reports waiting for the coordinator: only those of the job it took back still matter.
  absl::MutexLock wlock(&write_mu_);
  const size_t dropped = outbox_.RetainJob(resp.resume_running_job() ? req.running_job_id() : "");
  // Its last reports written to the old session go again, first: the old coordinator may have
  // read them and died before it stored their summaries (the new one ignores those it has).
  std::vector<zpipe::v1::WorkerMessage> again;
  for (zpipe::v1::WorkerMessage& m : written_reports_) {
    if (resp.resume_running_job() && m.iteration().job_id() == req.running_job_id()) {
      again.push_back(std::move(m));
    }
  }
  written_reports_.clear();
  outbox_.Prepend(std::move(again));
  if (dropped > 0) {
    Log(absl::StrCat("dropped ", dropped,
                     " waiting reports of jobs the coordinator did not take back"));
  }
  // A rank finished while the coordinator was away ends with its RankFinished, after its
  // reports (the one sent may have been lost with the old coordinator; a repeat is harmless).
  if (finished.has_value() && resp.resume_running_job() &&
      !outbox_.HasFinished(finished->job_id())) {
    zpipe::v1::WorkerMessage again;
    *again.mutable_finished() = *finished;
    outbox_.Push(std::move(again));
  }
  // Likewise a rank that failed: its RankFailure, unless it still waits in the outbox.
  if (failed.has_value() && resp.resume_running_job() && !outbox_.HasFailure(failed->job_id())) {
    zpipe::v1::WorkerMessage again;
    *again.mutable_failure() = *failed;
    outbox_.Push(std::move(again));
  }
}

bool WorkerDaemon::OpenSession(const std::string& worker_id, grpc::ClientContext& ctx,
                               Stream& stream) {
  // Hello first, then what waited in the outbox, then new messages (the stream is published
  // only after both, under the write lock).
  absl::MutexLock wlock(&write_mu_);
  zpipe::v1::WorkerMessage hello;
  hello.mutable_hello()->set_worker_id(worker_id);
  hello.mutable_hello()->set_instance_id(instance_id_);
  bool ok = stream.Write(hello);
  size_t flushed = 0;
  while (ok && !outbox_.empty()) {
    ok = stream.Write(outbox_.front());
    if (ok) {
      NoteWritten(outbox_.front());
      outbox_.PopFront();
      ++flushed;
    }
  }
  if (const uint64_t dropped = outbox_.TakeDropped(); flushed > 0 || dropped > 0) {
    Log(absl::StrCat(
        "sent ", flushed, " reports that waited for the coordinator",
        dropped > 0 ? absl::StrCat("; ", dropped, " were dropped (outbox full)") : ""));
  }
  absl::MutexLock lock(&mu_);
  if (stopping_) return false;
  session_ctx_ = &ctx;
  stream_ = &stream;
  return true;
}

void WorkerDaemon::SendHeartbeats(absl::Duration interval, const std::atomic<bool>& session_over) {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_ || session_over.load()) break;
      cv_.WaitWithTimeout(&mu_, interval);
      if (stopping_ || session_over.load()) break;
    }
    // A finished job thread is joined first, so the heartbeat says this worker is free.
    JoinJobIfDone(/*wait=*/false);
    zpipe::v1::WorkerMessage hb;
    {
      // Full precision: the coordinator estimates this worker's clock offset from it.
      const absl::Time now = absl::Now();
      const int64_t seconds = absl::ToUnixSeconds(now);
      hb.mutable_heartbeat()->mutable_time()->set_seconds(seconds);
      hb.mutable_heartbeat()->mutable_time()->set_nanos(
          static_cast<int32_t>(absl::ToInt64Nanoseconds(now - absl::FromUnixSeconds(seconds))));
    }
    {
      absl::MutexLock lock(&mu_);
      hb.mutable_heartbeat()->set_job_id(job_id_);
    }
    SendJobLog();
    Send(hb);
  }
}

void WorkerDaemon::StartProfile(const zpipe::v1::ProfileRequest& request) {
  // Profiling takes seconds: off the session thread, like a job.
  Log(absl::StrCat("job ", request.job_id(), ": timing the model's blocks"));
  std::thread([this, request] {
    zpipe::v1::WorkerMessage reply;
    *reply.mutable_profile_result() =
        ProfileResultToProto(request.job_id(), request.attempt(), Profile(request.spec()));
    if (!reply.profile_result().error().empty()) {
      Log(absl::StrCat("job ", request.job_id(),
                       ": profile failed: ", reply.profile_result().error()));
    }
    Send(reply);
  }).detach();
}

bool WorkerDaemon::ReadCommands(Stream& stream) {
  zpipe::v1::CoordinatorMessage msg;
  while (stream.Read(&msg)) {
    if (msg.has_assignment()) {
      StartJob(msg.assignment());
    } else if (msg.has_profile()) {
      StartProfile(msg.profile());
    } else if (msg.has_plan_update()) {
      std::shared_ptr<PlanUpdateChannel> channel;
      {
        absl::MutexLock lock(&mu_);
        if (job_id_ == msg.plan_update().job_id()) channel = job_plan_updates_;
      }
      // Answered at once (a rendezvous write), so a rank past the switch iteration says so.
      if (channel != nullptr) channel->Deliver(PlanUpdateFromProto(msg.plan_update()));
    } else if (msg.has_cancel()) {
      CancelJob(msg.cancel().job_id());
    } else if (msg.has_shutdown()) {
      Log(absl::StrCat("shutdown requested: ", msg.shutdown().reason()));
      return true;
    }
  }
  return false;
}

absl::Status WorkerDaemon::RunSession(bool* registered) {
  *registered = false;
  const zpipe::v1::RegisterWorkerRequest req = RegistrationRequest();
  zpipe::v1::RegisterWorkerResponse resp;
  {
    grpc::ClientContext ctx;
    Authorize(ctx);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::Status st = stub_->RegisterWorker(&ctx, req, &resp);
    if (!st.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                          absl::StrCat("register: ", st.error_message()));
    }
  }
  *registered = true;
  SettleRunningJob(req, resp);
  const absl::Duration interval = FromProto(resp.heartbeat_interval(), absl::Seconds(1));
  grpc::ClientContext ctx;
  Authorize(ctx);
  auto stream = stub_->Session(&ctx);
  if (!OpenSession(resp.worker_id(), ctx, *stream)) return absl::OkStatus();  // stopping
  Log(absl::StrCat("registered as ", options_.name, " with ", options_.coordinator));

  std::atomic<bool> session_over{false};
  std::thread heartbeats([&] { SendHeartbeats(interval, session_over); });
  const bool shutdown = ReadCommands(*stream);
  session_over = true;
  cv_.SignalAll();
  heartbeats.join();
  {
    absl::MutexLock wlock(&write_mu_);
    absl::MutexLock lock(&mu_);
    stream_ = nullptr;  // wakes Leave(), which waits for the session to end (its Await)
    session_ctx_ = nullptr;
    writes_done_ = false;
  }
  if (!shutdown) ctx.TryCancel();
  grpc::Status st = stream->Finish();
  if (shutdown) {
    Stop();
    return absl::OkStatus();
  }
  return absl::UnavailableError(absl::StrCat("session ended: ", st.error_message()));
}

absl::Status WorkerDaemon::Run() {
  if (options_.name.empty()) return absl::InvalidArgumentError("worker name is empty");
  absl::StatusOr<DataRoots> roots = DataRoots::Make(options_.data_roots);
  if (!roots.ok()) return roots.status();
  data_roots_ = *std::move(roots);
  // Uploaded artifacts: under the first data root, or a folder of their own that jobs may then
  // read too.
  auto cache = ArtifactCache::Open(options_.artifact_cache.empty()
                                       ? data_roots_->roots().front() / ".zpipe-artifacts"
                                       : std::filesystem::path(options_.artifact_cache));
  if (!cache.ok()) return cache.status();
  artifacts_ = *std::move(cache);
  artifact_source_ = MakeGrpcArtifactSource(channel_, options_.token);
  if (!options_.artifact_cache.empty()) {
    std::vector<std::string> with_cache = options_.data_roots;
    if (with_cache.empty()) with_cache.push_back(std::filesystem::current_path().string());
    with_cache.push_back(artifacts_->dir().string());
    absl::StatusOr<DataRoots> more = DataRoots::Make(with_cache);
    if (!more.ok()) return more.status();
    data_roots_ = *std::move(more);
  }
  std::vector<std::string> root_names;
  for (const auto& root : data_roots_->roots()) root_names.push_back(root.string());
  Log(absl::StrCat(
      "jobs may use files under ", absl::StrJoin(root_names, ", "),
      options_.data_roots.empty() ? " (the working directory; --data-root to change)" : ""));
  absl::Time unreachable_since = absl::Now();
  absl::Duration backoff = options_.reconnect_backoff;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) break;
    }
    // Wait (up to the longest backoff) for gRPC's reconnect loop to reach the coordinator, so
    // registration follows its return at once; if it does not come, the RPC below fails fast
    // with the connection's error (e.g. TLS), which is logged.
    const absl::Time attempt_start = absl::Now();
    AwaitChannel(options_.reconnect_max_backoff);
    bool registered = false;
    absl::Status st = RunSession(&registered);
    // A token the coordinator does not accept will not start working by retrying.
    if (!registered && (st.code() == absl::StatusCode::kUnauthenticated ||
                        st.code() == absl::StatusCode::kPermissionDenied)) {
      Stop();
      JoinJobIfDone(/*wait=*/true);
      return absl::Status(st.code(), absl::StrCat(st.message(),
                                                  " (give a worker token with --token-file "
                                                  "FILE or ZPIPE_TOKEN)"));
    }
    if (registered) {
      unreachable_since = absl::Now();
      backoff = options_.reconnect_backoff;
    }
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) break;
    }
    const bool tls_failure = util::LooksLikeTlsFailure(st.message());
    Log(absl::StrCat(st.ToString(), "; reconnecting",
                     !tls_failure ? ""
                     : options_.tls.has_value()
                         ? " (TLS failed: check that --tls-ca (or ZPIPE_TLS_CA) signed the "
                           "coordinator's certificate, and give --tls-cert and --tls-key if it "
                           "requires client certificates)"
                         : " (TLS failed: this worker speaks plaintext; give --tls-ca FILE or "
                           "ZPIPE_TLS_CA if the coordinator serves TLS)"));
    if (options_.give_up_after > absl::ZeroDuration() &&
        absl::Now() - unreachable_since > options_.give_up_after) {
      Stop();
      JoinJobIfDone(/*wait=*/true);
      return absl::UnavailableError(absl::StrCat("coordinator ", options_.coordinator,
                                                 " unreachable for ",
                                                 absl::FormatDuration(options_.give_up_after)));
    }
    // An attempt that already waited (for the channel, or in a session) needs no more; one
    // refused at once waits out the backoff, which doubles up to --reconnect-max-backoff.
    const absl::Duration pause = backoff - (absl::Now() - attempt_start);
    if (pause > absl::ZeroDuration()) {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), pause);
    }
    backoff = std::min(backoff * 2, options_.reconnect_max_backoff);  // exponential, capped
  }
  JoinJobIfDone(/*wait=*/true);
  Log("stopped");
  return absl::OkStatus();
}

}  // namespace zpipe::worker
