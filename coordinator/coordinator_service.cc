#include "coordinator/coordinator_service.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "coordinator/grpc_auth.h"
#include "coordinator/grpc_status.h"
#include "coordinator/job_logs.h"
#include "coordinator/job_proto.h"
#include "coordinator/trace_proto.h"
#include "coordinator/worker_proto.h"
#include "zpipe/build_info.h"

namespace zpipe::coordinator {
namespace {

void WriteSnapshot(const JobView& view, v1::JobEvent* event) {
  event->set_sequence(view.record.last_sequence);
  TimeToProto(absl::Now(), event->mutable_time());
  *event->mutable_snapshot() = JobViewToProto(view);
}

}  // namespace

grpc::Status CoordinatorServiceImpl::Done(absl::string_view method, const absl::Status& status) {
  metrics_.CountRpc(method, status.code());
  return ToGrpcStatus(status);
}

absl::StatusOr<Principal> CoordinatorServiceImpl::Caller(grpc::ServerContext* ctx,
                                                         absl::string_view call) const {
  return CallerOf(auth_, *ctx, Role::kClient, call);
}

absl::Status CoordinatorServiceImpl::StillAllowed(grpc::ServerContext* ctx,
                                                  absl::string_view call) const {
  if (!auth_.enabled()) return absl::OkStatus();
  absl::StatusOr<Principal> still = Caller(ctx, call);
  if (still.ok()) return absl::OkStatus();
  return absl::Status(still.status().code(),
                      absl::StrCat("stream closed: ", still.status().message(),
                                   " (the token files were reloaded without it)"));
}

grpc::Status CoordinatorServiceImpl::SubmitJob(grpc::ServerContext* ctx,
                                               const v1::SubmitJobRequest* req,
                                               v1::SubmitJobResponse* resp) {
  absl::StatusOr<Principal> caller = Caller(ctx, "submit jobs");
  if (!caller.ok()) return Done("SubmitJob", caller.status());
  absl::StatusOr<JobSpec> spec = SpecFromProto(req->spec());
  if (!spec.ok()) return Done("SubmitJob", spec.status());
  if (absl::Status st = CheckArtifacts(artifacts_, *spec); !st.ok()) return Done("SubmitJob", st);
  absl::StatusOr<SubmitResult> result =
      manager_.Submit(req->job_id(), *spec, req->validate_only(), caller->name);
  if (!result.ok()) return Done("SubmitJob", result.status());
  *resp->mutable_job() = JobViewToProto(result->job);
  if (req->validate_only()) resp->mutable_job()->set_state(v1::JOB_STATE_UNSPECIFIED);
  resp->set_created(result->created);
  return Done("SubmitJob", absl::OkStatus());
}

grpc::Status CoordinatorServiceImpl::GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req,
                                            v1::Job* resp) {
  absl::StatusOr<Principal> caller = Caller(ctx, "read jobs");
  if (!caller.ok()) return Done("GetJob", caller.status());
  absl::StatusOr<JobView> view = manager_.Get(req->job_id());
  if (!view.ok()) return Done("GetJob", view.status());
  *resp = JobViewToProto(*view);
  return Done("GetJob", absl::OkStatus());
}

grpc::Status CoordinatorServiceImpl::ListJobs(grpc::ServerContext* ctx,
                                              const v1::ListJobsRequest* req,
                                              v1::ListJobsResponse* resp) {
  absl::StatusOr<Principal> caller = Caller(ctx, "list jobs");
  if (!caller.ok()) return Done("ListJobs", caller.status());
  JobFilter filter;
  for (int s : req->states()) {
    absl::StatusOr<JobState> state = StateFromProto(static_cast<v1::JobState>(s));
    if (!state.ok()) {
      return Done("ListJobs",
                  absl::InvalidArgumentError(absl::StrCat("states: ", state.status().message())));
    }
    filter.states.insert(*state);
  }
  for (const auto& label : req->label_selector()) filter.labels[label.first] = label.second;
  if (req->has_created_after()) {
    filter.created_after = absl::FromUnixSeconds(req->created_after().seconds()) +
                           absl::Nanoseconds(req->created_after().nanos());
  }
  absl::StatusOr<ListResult> result = manager_.List(filter, req->page_size(), req->page_token());
  if (!result.ok()) return Done("ListJobs", result.status());
  for (const JobView& view : result->jobs) *resp->add_jobs() = JobViewToProto(view);
  resp->set_next_page_token(result->next_page_token);
  return Done("ListJobs", absl::OkStatus());
}

grpc::Status CoordinatorServiceImpl::CancelJob(grpc::ServerContext* ctx,
                                               const v1::CancelJobRequest* req, v1::Job* resp) {
  absl::StatusOr<Principal> caller = Caller(ctx, "cancel jobs");
  if (!caller.ok()) return Done("CancelJob", caller.status());
  if (absl::Status st = CheckOwner(*caller, req->job_id(), "cancel"); !st.ok()) {
    return Done("CancelJob", st);
  }
  if (req->reason().size() > 4096) {
    return Done("CancelJob", absl::InvalidArgumentError("reason: at most 4096 characters"));
  }
  absl::StatusOr<JobView> view = manager_.Cancel(req->job_id(), req->reason());
  if (!view.ok()) return Done("CancelJob", view.status());
  *resp = JobViewToProto(*view);
  return Done("CancelJob", absl::OkStatus());
}

grpc::Status CoordinatorServiceImpl::DeleteJob(grpc::ServerContext* ctx,
                                               const v1::DeleteJobRequest* req,
                                               v1::DeleteJobResponse* resp) {
  absl::StatusOr<Principal> caller = Caller(ctx, "delete jobs");
  if (!caller.ok()) return Done("DeleteJob", caller.status());
  if (absl::Status st = CheckOwner(*caller, req->job_id(), "delete"); !st.ok()) {
    return Done("DeleteJob", st);
  }
  absl::StatusOr<JobState> state = manager_.Delete(req->job_id(), req->force());
  if (!state.ok()) return Done("DeleteJob", state.status());
  resp->set_state(StateToProto(*state));
  return Done("DeleteJob", absl::OkStatus());
}

absl::Status CoordinatorServiceImpl::CheckOwner(const Principal& caller, const std::string& job_id,
                                                absl::string_view verb) const {
  if (caller.role != Role::kClient) return absl::OkStatus();
  absl::StatusOr<std::string> by = manager_.SubmittedBy(job_id);
  if (!by.ok()) return by.status();
  if (*by == caller.name) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "your token's role 'client' (", caller.name, ") may not ", verb, " job '", job_id,
      "' submitted by ", by->empty() ? "an unauthenticated caller" : *by, "; a client ", verb,
      "s only its own jobs, an admin token ", verb, "s any"));
}

grpc::Status CoordinatorServiceImpl::WatchJob(grpc::ServerContext* ctx,
                                              const v1::WatchJobRequest* req,
                                              grpc::ServerWriter<v1::JobEvent>* writer) {
  absl::StatusOr<Principal> caller = Caller(ctx, "watch jobs");
  if (!caller.ok()) return Done("WatchJob", caller.status());
  return Done("WatchJob", Watch(ctx, *req, writer));
}

absl::Status CoordinatorServiceImpl::Watch(grpc::ServerContext* ctx, const v1::WatchJobRequest& req,
                                           grpc::ServerWriter<v1::JobEvent>* writer) {
  const std::string& id = req.job_id();
  const absl::Duration interval = absl::Milliseconds(
      req.progress_interval_ms() == 0 ? 200 : std::max(20, req.progress_interval_ms()));
  const JobEventLog& log = manager_.events();
  const absl::Status gone = absl::CancelledError("watcher went away");

  absl::StatusOr<JobView> view = manager_.Get(id);
  if (!view.ok()) return view.status();
  uint64_t cursor = 0;
  bool terminal = false;
  std::vector<JobEvent> batch;

  // Sends the events after `cursor`, or a snapshot when some are no longer retained.
  auto catch_up = [&]() -> absl::Status {
    if (!log.EventsAfter(id, cursor, &batch)) {
      absl::StatusOr<JobView> now = manager_.Get(id);
      if (!now.ok()) return now.status();
      v1::JobEvent event;
      WriteSnapshot(*now, &event);
      if (!writer->Write(event)) return gone;
      cursor = now->record.last_sequence;
      terminal = IsTerminal(now->record.state);
      return absl::OkStatus();
    }
    for (const JobEvent& e : batch) {
      v1::JobEvent event;
      JobEventToProto(e, &event);
      if (!writer->Write(event)) return gone;
      cursor = e.sequence;
      if (e.kind == JobEvent::Kind::kStateChange && IsTerminal(e.to)) terminal = true;
    }
    return absl::OkStatus();
  };

  if (req.after_sequence() > 0) {
    cursor = req.after_sequence();
    if (absl::Status st = catch_up(); !st.ok()) return st;
    // Resumed at (or past) the end of a finished job: the client has seen everything.
    if (IsTerminal(view->record.state) && cursor >= view->record.last_sequence) terminal = true;
  } else {
    v1::JobEvent event;
    WriteSnapshot(*view, &event);
    if (!writer->Write(event)) return gone;
    cursor = view->record.last_sequence;
    terminal = IsTerminal(view->record.state);
  }

  uint64_t progress_version = manager_.ProgressVersion(id);
  absl::Time next_progress = absl::Now() + interval;
  absl::Time next_auth_check = absl::Now() + kStreamAuthInterval;
  while (!terminal) {
    if (ctx->IsCancelled()) return gone;
    if (absl::Now() >= next_auth_check) {  // a token revoked meanwhile closes the stream
      if (absl::Status st = StillAllowed(ctx, "watch jobs"); !st.ok()) return st;
      next_auth_check = absl::Now() + kStreamAuthInterval;
    }
    if (log.closed()) return absl::UnavailableError("coordinator shutting down");
    if (log.WaitForEventAfter(id, cursor, std::min(next_progress, next_auth_check))) {
      if (absl::Status st = catch_up(); !st.ok()) return st;
      if (terminal) break;
    }
    if (absl::Now() < next_progress) continue;
    next_progress = absl::Now() + interval;
    const uint64_t version = manager_.ProgressVersion(id);
    if (version == progress_version) continue;
    progress_version = version;
    absl::StatusOr<JobView> now = manager_.Get(id);
    if (!now.ok()) return now.status();
    if (!now->progress) continue;
    v1::JobEvent event;
    event.set_sequence(cursor);
    TimeToProto(absl::Now(), event.mutable_time());
    *event.mutable_progress() = ProgressToProto(*now->progress);
    if (!writer->Write(event)) return gone;
  }
  return absl::OkStatus();
}

grpc::Status CoordinatorServiceImpl::GetPlan(grpc::ServerContext* ctx,
                                             const v1::GetPlanRequest* req,
                                             v1::GetPlanResponse* resp) {
  absl::StatusOr<Principal> caller = Caller(ctx, "read plans");
  if (!caller.ok()) return Done("GetPlan", caller.status());
  absl::StatusOr<std::shared_ptr<const JobPlan>> plan = manager_.Plan(req->job_id());
  if (!plan.ok()) return Done("GetPlan", plan.status());
  const JobPlan& p = **plan;
  resp->set_job_id(req->job_id());
  resp->set_schedule(p.plan.schedule);
  resp->set_plan_text(p.text);
  for (int r = 0; r < p.plan.num_ranks(); ++r) {
    v1::RankPlan* rank = resp->add_ranks();
    rank->set_pipeline_rank(r);
    std::string text;
    for (const core::Action& a : p.plan.ranks[r])
      absl::StrAppend(&text, core::ActionToString(a), "\n");
    rank->set_text(std::move(text));
    rank->set_num_actions(static_cast<int>(p.plan.ranks[r].size()));
  }
  *resp->mutable_predicted() = PlanStatsToProto(p);
  resp->set_plan_version(p.version);
  if (absl::StatusOr<JobView> view = manager_.Get(req->job_id(), /*with_microbatches=*/false);
      view.ok() && view->record.layout) {
    *resp->mutable_layout() = ModelLayoutToProto(*view->record.layout);
  }
  return Done("GetPlan", absl::OkStatus());
}

grpc::Status CoordinatorServiceImpl::ListWorkers(grpc::ServerContext* ctx,
                                                 const v1::ListWorkersRequest* req,
                                                 v1::ListWorkersResponse* resp) {
  absl::StatusOr<Principal> caller = Caller(ctx, "list workers");
  if (!caller.ok()) return Done("ListWorkers", caller.status());
  WorkerPage page = manager_.WorkersPage(req->include_dead(), req->page_size(), req->page_token());
  for (const WorkerInfo& w : page.workers) *resp->add_workers() = WorkerInfoToProto(w);
  resp->set_next_page_token(page.next_page_token);
  return Done("ListWorkers", absl::OkStatus());
}

grpc::Status CoordinatorServiceImpl::GetServerInfo(grpc::ServerContext* ctx,
                                                   const v1::GetServerInfoRequest*,
                                                   v1::ServerInfo* resp) {
  absl::StatusOr<Principal> caller = Caller(ctx, "read server info");
  if (!caller.ok()) return Done("GetServerInfo", caller.status());
  resp->set_version(build_info::kVersion);
  resp->set_commit(build_info::kCommit);
  resp->set_torch(build_info::kTorch);
  resp->set_cuda(build_info::kCuda);
  return Done("GetServerInfo", absl::OkStatus());
}

grpc::Status CoordinatorServiceImpl::GetTrace(grpc::ServerContext* ctx,
                                              const v1::GetTraceRequest* req,
                                              v1::GetTraceResponse* resp) {
  absl::StatusOr<Principal> caller = Caller(ctx, "read traces");
  if (!caller.ok()) return Done("GetTrace", caller.status());
  std::optional<int> iteration;
  if (req->has_iteration()) iteration = req->iteration();
  absl::StatusOr<TraceView> view = manager_.Trace(req->job_id(), iteration);
  if (!view.ok()) return Done("GetTrace", view.status());
  TraceToProto(req->job_id(), *view, resp);
  return Done("GetTrace", absl::OkStatus());
}

grpc::Status CoordinatorServiceImpl::GetJobLogs(
    grpc::ServerContext* ctx, const v1::GetJobLogsRequest* req,
    grpc::ServerWriter<v1::GetJobLogsResponse>* writer) {
  // Reading a job's logs needs what reading its status does.
  absl::StatusOr<Principal> caller = Caller(ctx, "read job logs");
  if (!caller.ok()) return Done("GetJobLogs", caller.status());
  JobLogsRequest request;
  request.job_id = req->job_id();
  if (req->has_rank()) request.rank = req->rank();
  request.tail = req->tail();
  if (req->has_since()) {
    request.since =
        absl::FromUnixSeconds(req->since().seconds()) + absl::Nanoseconds(req->since().nanos());
  }
  request.after_sequence = req->after_sequence();
  request.follow = req->follow();
  // At most this many lines per message, so a large tail stays well under the message limit.
  constexpr size_t kLinesPerMessage = 500;
  auto write = [&](const LogRead& batch, int p) {
    size_t i = 0;
    bool first = true;
    do {
      v1::GetJobLogsResponse resp;
      if (first) resp.set_dropped_lines(batch.dropped);
      first = false;
      for (const size_t end = std::min(batch.lines.size(), i + kLinesPerMessage); i < end; ++i) {
        const LogLineData& line = batch.lines[i];
        v1::LogLine* out = resp.add_lines();
        TimeToProto(line.time, out->mutable_time());
        out->set_text(line.text);
        out->set_pipeline_rank(line.pipeline_rank);
        out->set_data_rank(line.data_rank);
        out->set_rank(GlobalRank(line, p));
        out->set_sequence(line.sequence);
      }
      if (!writer->Write(resp)) return false;
    } while (i < batch.lines.size());
    return true;
  };
  // A token revoked while the stream follows closes it (checked every kStreamAuthInterval).
  absl::Status revoked;
  absl::Time next_auth_check = absl::Now() + kStreamAuthInterval;
  auto stop = [&] {
    if (ctx->IsCancelled()) return true;
    if (absl::Now() < next_auth_check) return false;
    next_auth_check = absl::Now() + kStreamAuthInterval;
    revoked = StillAllowed(ctx, "read job logs");
    return !revoked.ok();
  };
  absl::Status streamed = StreamJobLogs(manager_, request, write, stop);
  return Done("GetJobLogs", revoked.ok() ? streamed : revoked);
}

}  // namespace zpipe::coordinator
