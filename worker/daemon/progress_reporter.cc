#include "worker/daemon/progress_reporter.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_format.h"
#include "worker/daemon/log.h"

namespace zpipe::worker {
namespace {

zpipe::v1::ComputeOp OpOf(core::ActionKind kind) {
  switch (kind) {
    case core::ActionKind::kForward:
      return zpipe::v1::COMPUTE_OP_F;
    case core::ActionKind::kBackwardInput:
      return zpipe::v1::COMPUTE_OP_B;
    case core::ActionKind::kBackwardWeight:
      return zpipe::v1::COMPUTE_OP_W;
    case core::ActionKind::kBackwardFull:
      return zpipe::v1::COMPUTE_OP_BW;
    case core::ActionKind::kSendAct:
      return zpipe::v1::COMPUTE_OP_SEND_ACT;
    case core::ActionKind::kRecvAct:
      return zpipe::v1::COMPUTE_OP_RECV_ACT;
    case core::ActionKind::kSendGrad:
      return zpipe::v1::COMPUTE_OP_SEND_GRAD;
    case core::ActionKind::kRecvGrad:
      return zpipe::v1::COMPUTE_OP_RECV_GRAD;
    case core::ActionKind::kReduce:
      return zpipe::v1::COMPUTE_OP_REDUCE;
  }
  return zpipe::v1::COMPUTE_OP_UNSPECIFIED;
}

}  // namespace

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
      p->add_ops(OpOf(r.action.kind));
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
