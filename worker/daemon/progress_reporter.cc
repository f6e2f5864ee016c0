#include "worker/daemon/progress_reporter.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_format.h"
#include "util/log.h"
#include "wire/compute_op.h"

namespace zpipe::worker {

ProgressReporter::ProgressReporter(std::string job_id, int pipeline_rank, int data_rank,
                                   SendFn send, Options options)
    : job_id_(std::move(job_id)),
      pipeline_rank_(pipeline_rank),
      data_rank_(data_rank),
      send_(std::move(send)),
      options_(options),
      thread_([this] { Loop(); }) {}

ProgressReporter::~ProgressReporter() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;  // wakes Loop (its Await)
  }
  thread_.join();
}

void ProgressReporter::OnAction(const ActionRecord& record) {
  absl::MutexLock lock(&mu_);
  if (queue_.size() >= options_.capacity) {
    ++dropped_;
    return;
  }
  queue_.push_back(record);  // a full batch wakes Loop (its Await)
}

void ProgressReporter::Flush() {
  std::vector<ActionRecord> batch;
  {
    absl::MutexLock lock(&mu_);
    batch.swap(queue_);
  }
  SendQueued(batch);
}

bool ProgressReporter::ReportIteration(const IterationReport& r) {
  zpipe::v1::WorkerMessage msg;
  zpipe::v1::IterationReport* report = msg.mutable_iteration();
  report->set_job_id(job_id_);
  report->set_iteration(r.iteration);
  const IterationSummary& s = r.summary;
  zpipe::v1::RankIterationStats* out = report->mutable_stats();
  out->set_pipeline_rank(pipeline_rank_);
  out->set_data_rank(data_rank_);
  out->set_duration_s(s.duration_s);
  out->set_busy_s(s.busy_s);
  out->set_idle_s(s.idle_s);
  out->set_forward_s(s.forward_s);
  out->set_backward_s(s.backward_s);
  out->set_weight_s(s.weight_s);
  out->set_bubble_ratio(s.bubble_ratio);
  out->set_reduce_s(s.reduce_s);
  out->set_exposed_reduce_s(s.exposed_reduce_s);
  out->set_p2p_wait_s(s.p2p_wait_s);
  out->set_tokens(s.tokens);
  out->set_step_s(s.step_s);
  out->set_overlapped_step_s(s.overlapped_step_s);
  out->set_checkpoint_stall_s(absl::ToDoubleSeconds(r.checkpoint_stall));
  out->set_checkpoint_error(r.checkpoint_error);
  out->set_plan_version(r.plan_version);
  if (s.loss) report->set_loss(*s.loss);
  if (r.eval_loss) report->set_eval_loss(*r.eval_loss);
  return send_(msg);
}

bool ProgressReporter::ReportFinished() {
  zpipe::v1::WorkerMessage done;
  done.mutable_finished()->set_job_id(job_id_);
  done.mutable_finished()->set_pipeline_rank(pipeline_rank_);
  done.mutable_finished()->set_data_rank(data_rank_);
  return send_(done);
}

void ProgressReporter::SendQueued(std::vector<ActionRecord>& batch) {
  absl::MutexLock lock(&send_mu_);
  for (size_t begin = 0; begin < batch.size(); begin += options_.batch_size) {
    const size_t end = std::min(batch.size(), begin + options_.batch_size);
    zpipe::v1::WorkerMessage msg;
    auto* p = msg.mutable_progress();
    p->set_job_id(job_id_);
    p->set_pipeline_rank(pipeline_rank_);
    p->set_data_rank(data_rank_);
    // peers / chunks / buckets only when the batch holds a send, receive or reduction.
    const bool all_compute =
        std::all_of(batch.begin() + begin, batch.begin() + end,
                    [](const ActionRecord& r) { return core::IsCompute(r.action.kind); });
    for (size_t k = begin; k < end; ++k) {
      const ActionRecord& r = batch[k];
      p->add_iterations(r.iteration);
      p->add_ops(wire::ComputeOpOf(r.action.kind));
      p->add_stages(r.action.stage);
      p->add_microbatches(r.action.microbatch);
      p->add_start_times(r.start_s);
      p->add_end_times(r.end_s);
      if (!all_compute) {
        p->add_peers(core::IsComm(r.action.kind) ? r.action.peer : -1);
        p->add_chunks(r.action.kind == core::ActionKind::kReduce ? r.action.chunk : 0);
        p->add_buckets(r.action.kind == core::ActionKind::kReduce ? r.action.bucket : 0);
      }
    }
    p->set_dropped_events(dropped_.load());
    if (!send_(msg)) return;
    sent_ += end - begin;
  }
  batch.clear();
}

void ProgressReporter::Loop() {
  std::vector<ActionRecord> batch;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(this, &ProgressReporter::FlushDue),
                           options_.flush_interval);
      batch.swap(queue_);
      if (stop_ && batch.empty()) break;
    }
    if (!batch.empty()) SendQueued(batch);
    batch.clear();
  }
  if (dropped_.load() > 0) {
    Log(absl::StrFormat("job %s rank %d/%d: %d progress events dropped (queue full)", job_id_,
                        pipeline_rank_, data_rank_, dropped_.load()));
  }
}

}  // namespace zpipe::worker
