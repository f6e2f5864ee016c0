// The gRPC implementation of zpipe::Client: the only client file that sees gRPC types.
#include <grpc/support/log.h>
#include <grpcpp/grpcpp.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "zpipe/v1/artifact.grpc.pb.h"
#include "zpipe/v1/coordinator.grpc.pb.h"

namespace zpipe {
namespace {

// gRPC and absl share the canonical code numbering (both follow google.rpc.Code).
absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

void SetDeadline(grpc::ClientContext& ctx, absl::Duration timeout) {
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

void AddToken(grpc::ClientContext& ctx, const std::string& token) {
  if (!token.empty()) ctx.AddMetadata("authorization", absl::StrCat("Bearer ", token));
}

class GrpcJobWatch : public JobWatch {
 public:
  GrpcJobWatch(std::shared_ptr<v1::CoordinatorService::Stub> stub, std::string job_id,
               WatchOptions options, std::string token)
      : token_(std::move(token)),
        stub_(std::move(stub)),
        job_id_(std::move(job_id)),
        options_(options),
        last_sequence_(options.after_sequence) {}

  ~GrpcJobWatch() override {
    Cancel();
    if (reader_ != nullptr) reader_->Finish();
  }

  absl::StatusOr<std::optional<v1::JobEvent>> Next() override {
    absl::Time retry_until = absl::InfinitePast();
    while (true) {
      if (done_) return std::optional<v1::JobEvent>();
      if (reader_ == nullptr) {
        if (absl::Status s = Open(); !s.ok()) return s;
      }
      v1::JobEvent event;
      if (reader_->Read(&event)) {
        if (IsReplay(event)) continue;
        if (event.sequence() > last_sequence_) last_sequence_ = event.sequence();
        delivered_any_ = true;
        return std::optional<v1::JobEvent>(std::move(event));
      }
      absl::Status status = FromGrpc(reader_->Finish());
      reader_.reset();
      {
        absl::MutexLock lock(&mu_);
        ctx_.reset();
        if (cancelled_) return absl::CancelledError("watch cancelled");
      }
      if (status.ok()) {
        done_ = true;
        continue;
      }
      // Only a broken connection is worth resuming; anything else is the coordinator's answer.
      // A coordinator shutting down may also cancel the call from its side (CANCELLED that we
      // did not ask for).
      const bool broken = status.code() == absl::StatusCode::kUnavailable ||
                          status.code() == absl::StatusCode::kCancelled;
      if (!broken || !delivered_any_) return status;
      const absl::Time now = absl::Now();
      if (retry_until == absl::InfinitePast()) retry_until = now + options_.reconnect_timeout;
      if (now >= retry_until) {
        return absl::UnavailableError(
            absl::StrCat("watch of job ", job_id_, " lost the coordinator: ", status.message()));
      }
      absl::SleepFor(absl::Milliseconds(200));
    }
  }

  void Cancel() override {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    if (ctx_ != nullptr) ctx_->TryCancel();
  }

  uint64_t last_sequence() const override { return last_sequence_; }

 private:
  absl::Status Open() {
    v1::WatchJobRequest request;
    request.set_job_id(job_id_);
    request.set_after_sequence(last_sequence_);
    request.set_progress_interval_ms(options_.progress_interval_ms);
    absl::MutexLock lock(&mu_);
    if (cancelled_) return absl::CancelledError("watch cancelled");
    ctx_ = std::make_unique<grpc::ClientContext>();
    AddToken(*ctx_, token_);
    reader_ = stub_->WatchJob(ctx_.get(), request);
    return absl::OkStatus();
  }

  // A resumed stream replays state changes and summaries after `after_sequence`; it can also
  // restart with a snapshot. Progress events repeat the last non-progress sequence by design.
  bool IsReplay(const v1::JobEvent& event) const {
    if (event.has_snapshot() || event.has_progress()) return false;
    return delivered_any_ && event.sequence() <= last_sequence_;
  }

  const std::string token_;
  std::shared_ptr<v1::CoordinatorService::Stub> stub_;
  const std::string job_id_;
  const WatchOptions options_;
  uint64_t last_sequence_;
  bool delivered_any_ = false;
  bool done_ = false;
  absl::Mutex mu_;  // ctx_ and cancelled_ against Cancel() from another thread
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::unique_ptr<grpc::ClientContext> ctx_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader_;
};

class GrpcClient : public Client {
 public:
  GrpcClient(const std::string& address, ClientOptions options) : options_(options) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);  // plans of large pipelines exceed the 4 MiB default
    // Reconnect quickly after a coordinator (re)start: gRPC's default backoff grows to 2 minutes,
    // and after a failed connect the channel re-resolves the address at most every 30 s by default.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    args.SetInt(GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS, 100);
    std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
    if (options_.tls.has_value()) {
      grpc::SslCredentialsOptions ssl;
      ssl.pem_root_certs = options_.tls->root_certs;
      ssl.pem_cert_chain = options_.tls->cert_chain;
      ssl.pem_private_key = options_.tls->private_key;
      credentials = grpc::SslCredentials(ssl);
    }
    std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(address, credentials, args);
    stub_ = v1::CoordinatorService::NewStub(channel);
    artifact_stub_ = v1::ArtifactService::NewStub(channel);
  }

  absl::StatusOr<UploadedArtifact> UploadArtifact(const std::string& path,
                                                  const std::string& sha256,
                                                  uint64_t size) override {
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"),
                                                          &std::fclose);
    if (file == nullptr) {
      const int err = errno;
      const std::string message = absl::StrCat("cannot read '", path, "': ", std::strerror(err));
      return err == ENOENT ? absl::NotFoundError(message) : absl::InternalError(message);
    }
    grpc::ClientContext ctx;
    AddToken(ctx, options_.token);
    v1::UploadArtifactResponse response;
    std::unique_ptr<grpc::ClientWriter<v1::UploadArtifactRequest>> writer =
        artifact_stub_->UploadArtifact(&ctx, &response);
    v1::UploadArtifactRequest msg;
    msg.set_sha256(sha256);
    msg.set_size(size);
    // 1 MiB chunks: well under the coordinator's --max-message-bytes; only one is held at a time.
    std::vector<char> buffer(1 << 20);
    bool first = true;
    absl::Status read_error = absl::OkStatus();
    while (true) {
      const size_t n = std::fread(buffer.data(), 1, buffer.size(), file.get());
      if (n == 0 && std::ferror(file.get())) {
        read_error = absl::InternalError(
            absl::StrCat("cannot read '", path, "': ", std::strerror(errno)));
        ctx.TryCancel();
        break;
      }
      if (n == 0 && !first) break;
      msg.set_data(buffer.data(), n);
      // A write fails once the coordinator has answered (it already holds the artifact, or
      // refused it): Finish() says which.
      if (!writer->Write(msg)) break;
      first = false;
      msg.clear_sha256();
      msg.clear_size();
      if (n == 0) break;
    }
    writer->WritesDone();
    absl::Status status = FromGrpc(writer->Finish());
    if (!read_error.ok()) return read_error;
    if (!status.ok()) return status;
    return UploadedArtifact{response.ref(), response.size(), response.created()};
  }

  absl::StatusOr<SubmitResult> Submit(const v1::JobSpec& spec, const std::string& job_id,
                                      bool validate_only) override {
    v1::SubmitJobRequest request;
    request.set_job_id(job_id);
    *request.mutable_spec() = spec;
    request.set_validate_only(validate_only);
    v1::SubmitJobResponse response;
    grpc::ClientContext ctx;
    Prepare(ctx);
    if (absl::Status s = FromGrpc(stub_->SubmitJob(&ctx, request, &response)); !s.ok()) {
      return ExplainOversizeRequest(std::move(s), "the job spec");
    }
    return SubmitResult{std::move(*response.mutable_job()), response.created()};
  }

  absl::StatusOr<v1::Job> Get(const std::string& job_id) override {
    v1::GetJobRequest request;
    request.set_job_id(job_id);
    v1::Job job;
    grpc::ClientContext ctx;
    Prepare(ctx);
    if (absl::Status s = FromGrpc(stub_->GetJob(&ctx, request, &job)); !s.ok()) return s;
    return job;
  }

  absl::StatusOr<JobPage> List(const ListJobsOptions& options) override {
    v1::ListJobsRequest request;
    for (v1::JobState state : options.states) request.add_states(state);
    for (const auto& [key, value] : options.labels) (*request.mutable_label_selector())[key] = value;
    if (options.created_after != absl::InfinitePast()) {
      const int64_t seconds = absl::ToUnixSeconds(options.created_after);
      request.mutable_created_after()->set_seconds(seconds);
      request.mutable_created_after()->set_nanos(static_cast<int32_t>(
          absl::ToInt64Nanoseconds(options.created_after - absl::FromUnixSeconds(seconds))));
    }
    request.set_page_size(options.page_size);
    request.set_page_token(options.page_token);
    v1::ListJobsResponse response;
    grpc::ClientContext ctx;
    Prepare(ctx);
    if (absl::Status s = FromGrpc(stub_->ListJobs(&ctx, request, &response)); !s.ok()) return s;
    JobPage page;
    page.jobs.assign(std::make_move_iterator(response.mutable_jobs()->begin()),
                     std::make_move_iterator(response.mutable_jobs()->end()));
    page.next_page_token = response.next_page_token();
    return page;
  }

  absl::StatusOr<v1::Job> Cancel(const std::string& job_id, const std::string& reason) override {
    v1::CancelJobRequest request;
    request.set_job_id(job_id);
    request.set_reason(reason);
    v1::Job job;
    grpc::ClientContext ctx;
    Prepare(ctx);
    if (absl::Status s = FromGrpc(stub_->CancelJob(&ctx, request, &job)); !s.ok()) return s;
    return job;
  }

  absl::StatusOr<v1::JobState> Delete(const std::string& job_id, bool force) override {
    v1::DeleteJobRequest request;
    request.set_job_id(job_id);
    request.set_force(force);
    v1::DeleteJobResponse response;
    grpc::ClientContext ctx;
    Prepare(ctx);
    if (absl::Status s = FromGrpc(stub_->DeleteJob(&ctx, request, &response)); !s.ok()) return s;
    return response.state();
  }

  std::unique_ptr<JobWatch> Watch(const std::string& job_id, WatchOptions options) override {
    return std::make_unique<GrpcJobWatch>(stub_, job_id, options, options_.token);
  }

  absl::StatusOr<JobPlan> Plan(const std::string& job_id) override {
    v1::GetPlanRequest request;
    request.set_job_id(job_id);
    v1::GetPlanResponse response;
    grpc::ClientContext ctx;
    Prepare(ctx);
    if (absl::Status s = FromGrpc(stub_->GetPlan(&ctx, request, &response)); !s.ok()) return s;
    absl::StatusOr<core::Plan> plan = core::ParsePlanText(response.plan_text());
    if (!plan.ok()) {
      return absl::InternalError(absl::StrCat("the coordinator sent a plan that does not parse: ",
                                              plan.status().message()));
    }
    return JobPlan{response.job_id(), *std::move(plan), response.predicted(), response.layout(),
                   response.plan_version()};
  }

  absl::StatusOr<JobTrace> Trace(const std::string& job_id, std::optional<int> iteration) override {
    v1::GetTraceRequest request;
    request.set_job_id(job_id);
    if (iteration.has_value()) request.set_iteration(*iteration);
    v1::GetTraceResponse response;
    grpc::ClientContext ctx;
    Prepare(ctx);
    if (absl::Status s = FromGrpc(stub_->GetTrace(&ctx, request, &response)); !s.ok()) return s;
    return JobTraceFromProto(std::move(response));
  }

  absl::Status Logs(const std::string& job_id, const LogsOptions& options,
                    const std::function<bool(const v1::LogLine&)>& on_line,
                    uint64_t* dropped) override {
    v1::GetJobLogsRequest request;
    request.set_job_id(job_id);
    if (options.rank.has_value()) request.set_rank(*options.rank);
    request.set_follow(options.follow);
    request.set_tail(options.tail);
    if (options.since.has_value()) {
      const int64_t seconds = absl::ToUnixSeconds(*options.since);
      request.mutable_since()->set_seconds(seconds);
      request.mutable_since()->set_nanos(static_cast<int32_t>(
          absl::ToInt64Nanoseconds(*options.since - absl::FromUnixSeconds(seconds))));
    }
    if (dropped != nullptr) *dropped = 0;
    bool first_response = true;
    absl::Time retry_until = absl::InfinitePast();
    while (true) {
      grpc::ClientContext ctx;
      AddToken(ctx, options_.token);
      // Without follow the whole answer comes at once; with it, the stream lasts as the job does.
      if (!options.follow) SetDeadline(ctx, options_.rpc_timeout);
      std::unique_ptr<grpc::ClientReader<v1::GetJobLogsResponse>> reader =
          stub_->GetJobLogs(&ctx, request);
      v1::GetJobLogsResponse response;
      bool delivered = false;
      while (reader->Read(&response)) {
        if (first_response && dropped != nullptr) *dropped = response.dropped_lines();
        first_response = false;
        for (const v1::LogLine& line : response.lines()) {
          delivered = true;
          request.set_after_sequence(std::max(request.after_sequence(), line.sequence()));
          if (!on_line(line)) {
            ctx.TryCancel();
            reader->Finish();
            return absl::OkStatus();
          }
        }
      }
      absl::Status status = FromGrpc(reader->Finish());
      if (status.ok() || !options.follow || status.code() != absl::StatusCode::kUnavailable ||
          first_response) {
        return status;
      }
      // A followed stream broke (a coordinator restart): resume after the last line seen. The
      // tail was applied by the first stream.
      request.set_tail(0);
      if (delivered || retry_until == absl::InfinitePast()) {
        retry_until = absl::Now() + options.reconnect_timeout;
      }
      if (absl::Now() > retry_until) return status;
      absl::SleepFor(absl::Milliseconds(200));
    }
  }

  absl::StatusOr<WorkerPage> ListWorkers(const ListWorkersOptions& options) override {
    v1::ListWorkersRequest request;
    request.set_include_dead(options.include_dead);
    request.set_page_size(options.page_size);
    request.set_page_token(options.page_token);
    v1::ListWorkersResponse response;
    grpc::ClientContext ctx;
    Prepare(ctx);
    if (absl::Status s = FromGrpc(stub_->ListWorkers(&ctx, request, &response)); !s.ok()) return s;
    WorkerPage page;
    page.workers.assign(std::make_move_iterator(response.mutable_workers()->begin()),
                        std::make_move_iterator(response.mutable_workers()->end()));
    page.next_page_token = response.next_page_token();
    return page;
  }

  absl::StatusOr<v1::ServerInfo> ServerInfo() override {
    v1::ServerInfo response;
    grpc::ClientContext ctx;
    Prepare(ctx);
    if (absl::Status s = FromGrpc(stub_->GetServerInfo(&ctx, {}, &response)); !s.ok()) return s;
    return response;
  }

 private:
  void Prepare(grpc::ClientContext& ctx) const {
    SetDeadline(ctx, options_.rpc_timeout);
    AddToken(ctx, options_.token);
  }

  const ClientOptions options_;
  std::shared_ptr<v1::CoordinatorService::Stub> stub_;
  std::unique_ptr<v1::ArtifactService::Stub> artifact_stub_;
};

}  // namespace

void SilenceGrpcLogging() {
  const char* verbosity = std::getenv("GRPC_VERBOSITY");
  if (verbosity == nullptr || *verbosity == '\0') gpr_set_log_function([](gpr_log_func_args*) {});
}

std::unique_ptr<Client> Client::Create(const std::string& address, ClientOptions options) {
  return std::make_unique<GrpcClient>(address, options);
}

}  // namespace zpipe
