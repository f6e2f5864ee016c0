#include "worker/executor/executor.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/comm/peer_error.h"
#include "worker/executor/bucket_step.h"
#include "worker/executor/device_timer.h"
#include "worker/model/torch_compat.h"

namespace zpipe::worker {
namespace {

using core::Action;
using core::ActionKind;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Wall clock minus steady clock, in seconds, for stamping records with wall-clock times. Of a few
// readings the one whose steady-clock bracket is tightest: a preemption between the two reads
// would otherwise shift every reported time of the rank (by milliseconds on a loaded machine).
double WallMinusSteady() {
  double best_gap = 1e300, best = 0;
  for (int i = 0; i < 5; ++i) {
    const SteadyTime s0 = Clock::now();
    const auto wall = std::chrono::system_clock::now();
    const SteadyTime s1 = Clock::now();
    const double gap = Seconds(s1 - s0);
    if (gap < best_gap) {
      best_gap = gap;
      best = std::chrono::duration<double>(wall.time_since_epoch()).count() -
             (Seconds(s0.time_since_epoch()) + gap / 2);
    }
  }
  return best;
}

constexpr int kMaxTag = (1 << 24) - 1;
constexpr int kNormGatherTag = kMaxTag - 1;
constexpr int kNormBroadcastTag = kMaxTag - 2;
constexpr int kEvalTag = kMaxTag - 3;     // activations of Evaluate, in stage order per pair
constexpr int kEvalMicrobatch = 1 << 29;  // microbatch ids of Evaluate's forwards
// Beyond this many pooled receive buffers (a stage that keeps its inputs), receives allocate.
constexpr size_t kMaxPooledRecvBuffers = 64;

std::string SpecString(const model::TensorSpec& spec) {
  return absl::StrCat(c10::str(c10::IntArrayRef(spec.shape)), " ", c10::toString(spec.dtype));
}

// The tensor `what` ("activation", "gradient") of stage `stage` microbatch `mb`, about to cross a
// boundary, checked against `want`: the spec its consumer sized its receive buffer from (found
// before any data flowed). A shape that differs fails the job here, naming both shapes, rather
// than as a size mismatch (or, on a transport that cannot tell, a hang) on the receiving rank.
// The dtype is converted to the spec's (a block under bf16 autocast may return bf16 where the
// consumer expects float32).
absl::StatusOr<torch::Tensor> CheckBoundary(const char* what, int stage, int mb,
                                            torch::Tensor t, const model::TensorSpec& want) {
  if (!t.defined() || t.sizes() != c10::IntArrayRef(want.shape)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stage ", stage, " microbatch ", mb, ": its ", what, " is ",
        t.defined() ? absl::StrCat(c10::str(t.sizes()), " ", c10::toString(t.scalar_type()))
                    : "undefined",
        " but the stage's boundary was found to be ", SpecString(want),
        " by the dry forward at job start; every block's output shape must depend only on its "
        "input's shape, not on the data"));
  }
  if (t.scalar_type() != want.dtype) t = t.to(want.dtype);
  return t;
}

// Sum of pairwise intersections of two sorted lists of disjoint intervals.
double Overlap(const std::vector<std::pair<SteadyTime, SteadyTime>>& a,
               const std::vector<std::pair<SteadyTime, SteadyTime>>& b) {
  double total = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const SteadyTime lo = std::max(a[i].first, b[j].first);
    const SteadyTime hi = std::min(a[i].second, b[j].second);
    if (hi > lo) total += Seconds(hi - lo);
    if (a[i].second < b[j].second) {
      ++i;
    } else {
      ++j;
    }
  }
  return total;
}

}  // namespace

struct Executor::Impl {
  core::Plan plan;
  int rank = 0;
  int data_rank = 0;
  ExecutorConfig config;
  std::vector<std::unique_ptr<model::Stage>> stages;
  Communicator* comm = nullptr;
  const model::TokenData* data = nullptr;
  GradSyncDriver* grad_sync = nullptr;
  ActionSink* sink = nullptr;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::vector<torch::Tensor> params;
  double wall_offset_s = 0;            // system_clock - steady_clock, in seconds
  std::unique_ptr<DeviceTimer> timer;  // times compute actions where they run
  bool bf16 = false;                   // forward passes under bf16 autocast
  // Steps buckets during the iteration (config.overlap_step); made by the first iteration that
  // can use it.
  std::unique_ptr<BucketStepper> stepper;
  std::vector<size_t> chunk_last;  // per local chunk: position of its last compute action
  std::vector<GradSyncDriver::Launched> unreleased;  // launched; their chunk still computes

  // Whether this iteration steps buckets as they reduce (ExecutorConfig::overlap_step).
  bool OverlapStep() const {
    return config.overlap_step && grad_sync != nullptr && optimizer != nullptr &&
           config.max_grad_norm <= 0 && config.device.is_cpu() && comm->device().is_cpu();
  }

  // Hands the stepper every launched bucket whose chunk has run its last compute action of the
  // iteration (at or before plan position `k`), in launch order.
  void ReleaseSteps(size_t k) {
    for (GradSyncDriver::Launched& b : grad_sync->TakeLaunched()) {
      unreleased.push_back(std::move(b));
    }
    auto keep = unreleased.begin();
    for (auto it = unreleased.begin(); it != unreleased.end(); ++it) {
      if (chunk_last[plan.placement.ChunkOf(it->stage)] <= k) {
        stepper->Submit(std::move(it->params), it->reduced);
      } else {
        *keep++ = std::move(*it);
      }
    }
    unreleased.erase(keep, unreleased.end());
  }

  model::AutocastScope Autocast() const {
    return model::AutocastScope(config.device, torch::kBFloat16, bf16);
  }

  // `t` on the communicator's device: a copy when the stages compute elsewhere (CUDA stages over
  // the TCP streams), else `t` itself.
  torch::Tensor ToComm(const torch::Tensor& t) const {
    if (!t.defined() || t.device() == comm->device()) return t;
    return t.to(comm->device());
  }

  // Per-iteration state.
  using Key = std::tuple<ActionKind, int, int>;  // (SEND kind, producing stage, microbatch)
  struct PendingRecv {
    torch::Tensor tensor;
    std::unique_ptr<CommHandle> handle;
    Action action;  // the plan's RECV, for the sink
    SteadyTime posted;
    model::TensorSpec spec;  // what the buffer was sized for, for errors
  };
  struct PendingSend {
    Action action;
    SteadyTime posted;
    std::unique_ptr<CommHandle> handle;
  };
  std::map<std::pair<int, int>, torch::Tensor> outputs;  // F outputs by (stage, mb)
  // (stage, mb) the plan recomputes on this rank (it has their R): their F keeps no graph.
  std::set<std::pair<int, int>> recomputed;
  std::map<std::pair<int, int>, torch::Tensor> grads;    // B input grads by (stage, mb)
  std::map<Key, PendingRecv> recvs;
  std::vector<PendingSend> sends;
  int current_iteration = 0;             // the one running, for the sink's records
  size_t next_recv = 0;                  // index into recv_positions of the next receive to post
  std::vector<size_t> recv_positions;    // indices of RECV actions in the rank's plan
  std::vector<torch::Tensor> recv_pool;  // receive buffers, kept across iterations (RecvBuffer)
  double p2p_wait_s = 0;

  int Tag(ActionKind send_kind, int stage, int mb) const {
    const int kind = send_kind == ActionKind::kSendAct ? 0 : 1;
    return ((kind * plan.num_stages() + stage) * plan.num_microbatches + mb) % (kMaxTag - 2);
  }

  model::Stage& StageOf(int s) { return *stages[plan.placement.ChunkOf(s)]; }

  double Wall(SteadyTime t) const {
    return wall_offset_s + std::chrono::duration<double>(t.time_since_epoch()).count();
  }

  void Emit(const Action& a, SteadyTime start, SteadyTime end) {
    if (sink != nullptr) sink->OnAction({current_iteration, a, Wall(start), Wall(end)});
  }

  // A finished send or receive posted at `posted`: completed when the transport says so (a
  // transport without its own times reports now, when its completion was seen).
  void EmitComm(const Action& a, SteadyTime posted, const CommHandle& handle) {
    if (sink == nullptr) return;
    const SteadyTime done = handle.times().end;
    Emit(a, posted, done >= posted ? done : Clock::now());
  }

  absl::Status PostRecv(const Action& a) {
    const bool act = a.kind == ActionKind::kRecvAct;
    // The boundary between the producing stage s and the local consumer: an activation of s is
    // stage s+1's input; a gradient of s (its input gradient) is that of stage s-1's output.
    const model::TensorSpec spec =
        act ? StageOf(a.stage + 1).InputSpec(config.microbatch_size)
            : StageOf(a.stage - 1).OutputGradSpec(config.microbatch_size);
    torch::Tensor buffer = RecvBuffer(spec);
    const ActionKind send_kind = act ? ActionKind::kSendAct : ActionKind::kSendGrad;
    PendingRecv pending;
    pending.action = a;
    pending.posted = Clock::now();
    pending.handle = comm->Recv(buffer, a.peer, Tag(send_kind, a.stage, a.microbatch));
    pending.tensor = buffer;
    pending.spec = spec;
    recvs[{send_kind, a.stage, a.microbatch}] = std::move(pending);
    return absl::OkStatus();
  }

  // A receive buffer for `spec`. On the CPU from a pool: a pooled buffer is reused once nothing
  // but the pool holds its storage (the stage copied the input or let it go), so steady-state
  // receives allocate nothing (a fresh 4 MB buffer costs page faults on every receive). Each
  // receive gets its own tensor over the storage, so no autograd state carries over. Device
  // buffers come from the caching allocator, which also knows when the device is done with them.
  torch::Tensor RecvBuffer(const model::TensorSpec& spec) {
    const auto options = torch::TensorOptions().dtype(spec.dtype).device(comm->device());
    if (!comm->device().is_cpu()) return torch::empty(spec.shape, options);
    const torch::Tensor* free = nullptr;
    for (const torch::Tensor& t : recv_pool) {
      if (t.storage().use_count() == 1 && t.scalar_type() == spec.dtype &&
          t.sizes() == c10::IntArrayRef(spec.shape)) {
        free = &t;
        break;
      }
    }
    if (free == nullptr) {
      torch::Tensor t = torch::empty(spec.shape, options);
      if (recv_pool.size() >= kMaxPooledRecvBuffers) return t;
      recv_pool.push_back(std::move(t));
      free = &recv_pool.back();
    }
    torch::Tensor out = torch::empty({0}, options);
    out.set_(*free);
    return out;
  }

  // Posts receives in plan order up to `upto` (inclusive) and keeps `lookahead` more posted.
  absl::Status PostRecvsThrough(size_t upto) {
    const auto& actions = plan.ranks[rank];
    while (next_recv < recv_positions.size()) {
      const size_t pos = recv_positions[next_recv];
      const bool needed = pos <= upto;
      const bool ahead = static_cast<int>(recvs.size()) < config.recv_lookahead;
      if (!needed && !ahead) break;
      if (absl::Status st = PostRecv(actions[pos]); !st.ok()) return st;
      ++next_recv;
    }
    return absl::OkStatus();
  }

  // Waits for `handle` up to the configured timeout, giving up early on a cancel.
  absl::Status WaitFor(CommHandle& handle) {
    const auto deadline = Clock::now() + absl::ToChronoNanoseconds(config.timeout);
    while (true) {
      if (config.cancelled != nullptr && config.cancelled->load()) {
        return absl::CancelledError("job cancelled");
      }
      absl::Status st = handle.Wait(absl::Milliseconds(50));
      if (st.ok()) return st;
      // Done between the timed-out wait and now: its own status, not the wait's timeout.
      if (handle.Test()) return handle.Wait(absl::ZeroDuration());
      if (Clock::now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            "no progress for ", absl::FormatDuration(config.timeout), " (peer gone or stuck?)"));
      }
    }
  }

  absl::StatusOr<torch::Tensor> TakeRecv(ActionKind send_kind, int stage, int mb) {
    auto it = recvs.find({send_kind, stage, mb});
    if (it == recvs.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("rank ", rank, ": no receive posted for ",
                       send_kind == ActionKind::kSendAct ? "ACT" : "GRAD", " s", stage, " mb", mb,
                       " (plan lacks the RECV before its consumer)"));
    }
    const auto t0 = Clock::now();
    absl::Status st = WaitFor(*it->second.handle);
    p2p_wait_s += Seconds(Clock::now() - t0);
    if (!st.ok()) {
      return Reworded(
          st, absl::StrCat("rank ", rank, ": receiving ",
                           send_kind == ActionKind::kSendAct ? "activation" : "gradient",
                           " of stage ", stage, " microbatch ", mb, " (expecting ",
                           SpecString(it->second.spec), "): ", st.message()));
    }
    EmitComm(it->second.action, it->second.posted, *it->second.handle);
    torch::Tensor t = std::move(it->second.tensor);
    recvs.erase(it);
    return t;
  }

  absl::StatusOr<torch::Tensor> ForwardInput(int iteration, const Action& a,
                                             model::TokenBatch* batch) {
    const int s = a.stage;
    if (s == 0) {
      if (data != nullptr) return batch->tokens;
      return torch::Tensor();
    }
    if (plan.placement.RankOf(s - 1) == rank) {
      auto it = outputs.find({s - 1, a.microbatch});
      if (it == outputs.end()) {
        return absl::FailedPreconditionError(
            absl::StrCat("rank ", rank, ": F s", s, " mb", a.microbatch, " before F s", s - 1));
      }
      torch::Tensor t = it->second;
      outputs.erase(it);
      return t;
    }
    (void)iteration;
    return TakeRecv(ActionKind::kSendAct, s - 1, a.microbatch);
  }

  absl::StatusOr<torch::Tensor> OutputGrad(const Action& a) {
    const int s = a.stage;
    if (s == plan.num_stages() - 1) return torch::Tensor();
    if (plan.placement.RankOf(s + 1) == rank) {
      auto it = grads.find({s + 1, a.microbatch});
      if (it == grads.end()) {
        return absl::FailedPreconditionError(
            absl::StrCat("rank ", rank, ": B s", s, " mb", a.microbatch, " before B s", s + 1));
      }
      torch::Tensor t = it->second;
      grads.erase(it);
      return t;
    }
    return TakeRecv(ActionKind::kSendGrad, s + 1, a.microbatch);
  }

  absl::Status Send(const Action& a) {
    const bool act = a.kind == ActionKind::kSendAct;
    auto& source = act ? outputs : grads;
    auto it = source.find({a.stage, a.microbatch});
    if (it == source.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", rank, ": '", core::ActionToString(a), "' before its tensor was produced"));
    }
    const SteadyTime posted = Clock::now();
    sends.push_back(
        {a, posted, comm->Send(ToComm(it->second), a.peer, Tag(a.kind, a.stage, a.microbatch))});
    source.erase(it);
    // Reap finished sends so their errors surface early and the list stays short.
    std::erase_if(sends, [this](const PendingSend& s) {
      if (!s.handle->Test() || !s.handle->Wait(absl::ZeroDuration()).ok()) return false;
      EmitComm(s.action, s.posted, *s.handle);
      return true;
    });
    return absl::OkStatus();
  }

  absl::StatusOr<double> GlobalGradNorm() {
    double local = 0;
    if (config.device.is_cuda()) {
      // One read of the device for all tensors, not one per tensor.
      torch::NoGradGuard no_grad;
      std::vector<torch::Tensor> norms;
      for (const torch::Tensor& p : params) {
        if (p.grad().defined()) norms.push_back(p.grad().norm().to(torch::kFloat64));
      }
      if (!norms.empty()) local = torch::stack(norms).square().sum().item<double>();
    } else {
      torch::NoGradGuard no_grad;
      for (const torch::Tensor& p : params) {
        // Per tensor in its own dtype (as torch.nn.utils.clip_grad_norm_ does), summed in
        // double: converting every gradient to float64 first cost 0.4 s per step for 5.7 M
        // parameters (bench/model_bench.py).
        if (p.grad().defined()) {
          const double n = p.grad().norm().item<double>();
          local += n * n;
        }
      }
    }
    const int p = plan.num_ranks();
    if (p == 1) return std::sqrt(local);
    auto opts = torch::TensorOptions().dtype(torch::kFloat64).device(comm->device());
    if (rank == 0) {
      double total = local;
      for (int r = 1; r < p; ++r) {
        torch::Tensor buf = torch::empty({1}, opts);
        auto h = comm->Recv(buf, r, kNormGatherTag);
        if (absl::Status st = WaitFor(*h); !st.ok()) {
          return Reworded(st, absl::StrCat("gradient norm from rank ", r, ": ", st.message()));
        }
        total += buf.cpu().item<double>();
      }
      torch::Tensor out = torch::full({1}, total, opts);
      std::vector<std::unique_ptr<CommHandle>> hs;
      for (int r = 1; r < p; ++r) hs.push_back(comm->Send(out, r, kNormBroadcastTag));
      for (auto& h : hs) {
        if (absl::Status st = WaitFor(*h); !st.ok()) return st;
      }
      return std::sqrt(total);
    }
    torch::Tensor mine = torch::full({1}, local, opts);
    auto hs = comm->Send(mine, 0, kNormGatherTag);
    torch::Tensor buf = torch::empty({1}, opts);
    auto hr = comm->Recv(buf, 0, kNormBroadcastTag);
    if (absl::Status st = WaitFor(*hs); !st.ok()) return st;
    if (absl::Status st = WaitFor(*hr); !st.ok()) {
      return Reworded(st, absl::StrCat("gradient norm from rank 0: ", st.message()));
    }
    return std::sqrt(buf.cpu().item<double>());
  }

  // One iteration, in named steps: begin (reset, learning rate), every action of the rank's
  // plan in order, the compute times, the drained sends, the summary's times, the loss, the
  // optimizer step.
  absl::StatusOr<IterationSummary> Run(int iteration);

  // What one iteration accumulates as it runs.
  struct Timed {
    Action action;
    int start_mark, end_mark;
    SteadyTime host_start, host_end;  // the host clock around the call
  };
  struct IterationRun {
    IterationSummary summary;
    bool overlap_step = false;  // OverlapStep() for this iteration
    std::vector<std::pair<SteadyTime, SteadyTime>> compute;
    std::vector<Timed> timed;                  // compute actions by their timer marks
    std::map<int, model::TokenBatch> batches;  // by microbatch, for stage 0 and the last stage
    std::vector<int> loss_microbatches;        // of the last stage, read after the last action
  };
  absl::Status BeginIteration(IterationRun& run);
  // The data of microbatch `mb` (null without a data source), read once per iteration.
  model::TokenBatch* BatchFor(IterationRun& run, int mb);
  // Action `k` of the rank's plan: posts receives, sends, or computes (timed).
  absl::Status RunAction(IterationRun& run, size_t k);
  // The compute action `a` itself, on `input` (activation or output gradient).
  absl::Status Compute(IterationRun& run, const Action& a, torch::Tensor input,
                       model::TokenBatch* batch);
  // A device timer's marks, resolved once the last action was queued.
  absl::Status ResolveComputeTimes(IterationRun& run);
  // Waits for every send; a receive left unconsumed is an error in the plan.
  absl::Status DrainComm();
  // The reductions and the iteration's span, idle time and bubble ratio.
  absl::Status SummarizeTimes(IterationRun& run);
  absl::Status AverageLoss(IterationRun& run);
  // The optimizer step: buckets stepped during the iteration, clipping, the remaining
  // parameters.
  absl::Status Step(IterationRun& run);

  // Adds compute action `a`, which ran from `start` to `end`, to the iteration's busy time and
  // compute intervals, and reports it to the sink.
  void RecordCompute(const Action& a, SteadyTime start, SteadyTime end,
                     std::vector<std::pair<SteadyTime, SteadyTime>>* compute,
                     IterationSummary* summary) {
    compute->push_back({start, end});
    const double secs = Seconds(end - start);
    summary->busy_s += secs;
    const ActionKind kind = a.kind;
    if (kind == ActionKind::kForward) summary->forward_s += secs;
    if (kind == ActionKind::kBackwardInput || kind == ActionKind::kBackwardFull) {
      summary->backward_s += secs;
    }
    if (kind == ActionKind::kBackwardWeight) summary->weight_s += secs;
    Emit(a, start, end);
  }

  absl::StatusOr<std::optional<double>> Evaluate(
      int batches, const std::function<model::TokenBatch(int k)>& batch_of) {
    const core::Placement& pl = plan.placement;
    const int last = plan.num_stages() - 1;
    double sum = 0;
    torch::NoGradGuard no_grad;
    // Eval mode (dropout off) for the evaluation, training mode again however it ends.
    for (auto& st : stages) st->SetTraining(false);
    struct Restore {
      std::vector<std::unique_ptr<model::Stage>>& stages;
      ~Restore() {
        for (auto& st : stages) st->SetTraining(true);
      }
    } restore{stages};
    for (int k = 0; k < batches; ++k) {
      const int mb = kEvalMicrobatch + k;
      model::TokenBatch batch;
      if (pl.RankOf(0) == rank || pl.RankOf(last) == rank) batch = batch_of(k);
      torch::Tensor x;  // the activation entering the next stage held here
      for (int s = 0; s <= last; ++s) {
        if (pl.RankOf(s) != rank) continue;
        model::Stage& st = StageOf(s);
        torch::Tensor input;
        if (s == 0) {
          input = batch.tokens;
        } else if (pl.RankOf(s - 1) == rank) {
          input = x;
        } else {
          const model::TensorSpec spec = st.InputSpec(config.microbatch_size);
          input = torch::empty(spec.shape,
                               torch::TensorOptions().dtype(spec.dtype).device(comm->device()));
          auto h = comm->Recv(input, pl.RankOf(s - 1), kEvalTag);
          if (absl::Status w = WaitFor(*h); !w.ok()) {
            return Reworded(w, absl::StrCat("eval: activation of stage ", s - 1, " (expecting ",
                                            SpecString(spec), "): ", w.message()));
          }
        }
        absl::StatusOr<torch::Tensor> out;
        {
          const model::AutocastScope autocast = Autocast();
          out = st.Forward(mb, input, s == last ? &batch.targets : nullptr);
        }
        if (!out.ok()) return out.status();
        if (s == last) {
          absl::StatusOr<float> loss = st.Loss(mb);
          st.FreeMicrobatch(mb);
          if (!loss.ok()) return loss.status();
          sum += *loss;
          continue;
        }
        st.FreeMicrobatch(mb);
        absl::StatusOr<torch::Tensor> checked = CheckBoundary(
            "output activation", s, mb, *std::move(out), st.OutputSpec(config.microbatch_size));
        if (!checked.ok()) return checked.status();
        x = *std::move(checked);
        if (pl.RankOf(s + 1) != rank) {
          auto h = comm->Send(ToComm(x), pl.RankOf(s + 1), kEvalTag);
          if (absl::Status w = WaitFor(*h); !w.ok()) {
            return Reworded(w, absl::StrCat("eval: activation of stage ", s, ": ", w.message()));
          }
        }
      }
    }
    if (pl.RankOf(last) != rank || batches == 0) return std::optional<double>();
    return std::optional<double>(sum / batches);
  }
};

absl::StatusOr<IterationSummary> Executor::Impl::Run(int iteration) {
  IterationRun run;
  run.summary.iteration = iteration;
  if (absl::Status st = BeginIteration(run); !st.ok()) return st;
  const auto& actions = plan.ranks[rank];
  for (size_t k = 0; k < actions.size(); ++k) {
    if (absl::Status st = RunAction(run, k); !st.ok()) return st;
  }
  if (absl::Status st = ResolveComputeTimes(run); !st.ok()) return st;
  if (absl::Status st = DrainComm(); !st.ok()) return st;
  if (absl::Status st = SummarizeTimes(run); !st.ok()) return st;
  if (absl::Status st = AverageLoss(run); !st.ok()) return st;
  if (absl::Status st = Step(run); !st.ok()) return st;
  for (auto& st : stages) {
    if (st->pending_microbatches() != 0) {
      return absl::InternalError(absl::StrCat("stage ", st->stage(), " still holds ",
                                              st->pending_microbatches(),
                                              " microbatch(es) after the iteration"));
    }
    if (st->kept_for_recompute() != 0) {
      return absl::InternalError(absl::StrCat("stage ", st->stage(), " still keeps the input of ",
                                              st->kept_for_recompute(),
                                              " microbatch(es) for an R that never ran"));
    }
  }
  return std::move(run.summary);
}

absl::Status Executor::Impl::BeginIteration(IterationRun& run) {
  const int iteration = run.summary.iteration;
  current_iteration = iteration;
  wall_offset_s = WallMinusSteady();  // follows the wall clock's slewing between iterations
  outputs.clear();
  grads.clear();
  recvs.clear();
  sends.clear();
  next_recv = 0;
  p2p_wait_s = 0;
  for (auto& st : stages) {
    st->ZeroGrad();
    st->ClearLosses();
  }
  if (grad_sync != nullptr) {
    if (absl::Status st = grad_sync->BeginIteration(iteration); !st.ok()) return st;
  }
  if (absl::Status st = timer->Begin(); !st.ok()) return st;
  const auto& actions = plan.ranks[rank];
  recomputed.clear();
  for (const Action& a : actions) {
    if (a.kind == ActionKind::kRecompute) recomputed.insert({a.stage, a.microbatch});
  }
  // The iteration's learning rate, before any parameter is stepped.
  if (optimizer != nullptr && config.lr_schedule) {
    const double lr = config.lr_schedule->At(iteration);
    for (auto& group : optimizer->param_groups()) group.options().set_lr(lr);
  }
  run.overlap_step = OverlapStep();
  if (run.overlap_step) {
    if (stepper == nullptr) stepper = std::make_unique<BucketStepper>(*optimizer, config.timeout);
    chunk_last.assign(stages.size(), 0);
    for (size_t k = 0; k < actions.size(); ++k) {
      if (core::IsCompute(actions[k].kind)) {
        chunk_last[plan.placement.ChunkOf(actions[k].stage)] = k;
      }
    }
    unreleased.clear();
  }
  return absl::OkStatus();
}

model::TokenBatch* Executor::Impl::BatchFor(IterationRun& run, int mb) {
  if (data == nullptr) return nullptr;
  auto it = run.batches.find(mb);
  if (it == run.batches.end()) {
    it = run.batches.emplace(mb, data->Microbatch(run.summary.iteration, data_rank, mb)).first;
  }
  return &it->second;
}

absl::Status Executor::Impl::RunAction(IterationRun& run, size_t k) {
  const Action& a = plan.ranks[rank][k];
  if (absl::Status st = PostRecvsThrough(k); !st.ok()) return st;
  if (core::IsRecv(a.kind) || a.kind == ActionKind::kReduce) {
    if (a.kind == ActionKind::kReduce && grad_sync != nullptr) {
      if (absl::Status st = grad_sync->OnReduceAction(a.chunk, a.bucket); !st.ok()) return st;
    }
    return absl::OkStatus();  // receives were posted above
  }
  if (core::IsSend(a.kind)) return Send(a);
  // Compute. Inputs are gathered first so waiting on a receive is not counted as busy.
  torch::Tensor input;
  model::TokenBatch* batch = nullptr;
  if (a.kind == ActionKind::kForward) {
    batch = BatchFor(run, a.microbatch);
    auto in = ForwardInput(run.summary.iteration, a, batch);
    if (!in.ok()) return in.status();
    input = *std::move(in);
  } else if (a.kind == ActionKind::kBackwardInput || a.kind == ActionKind::kBackwardFull) {
    auto g = OutputGrad(a);
    if (!g.ok()) return g.status();
    input = *std::move(g);
  }
  comm->Flush();  // the sends and receives queued since the last action go out meanwhile
  const SteadyTime host_start = Clock::now();
  const int start_mark = timer->Mark();
  if (absl::Status st = Compute(run, a, std::move(input), batch); !st.ok()) return st;
  if (grad_sync != nullptr) {
    if (absl::Status st = grad_sync->OnCompute(a); !st.ok()) return st;
    if (run.overlap_step) ReleaseSteps(k);
  }
  const int end_mark = timer->Mark();
  run.timed.push_back({a, start_mark, end_mark, host_start, Clock::now()});
  // On the CPU the host clock times the action itself: report it to the sink now (live view).
  // A device timer's marks resolve after the last action.
  if (!timer->deferred()) {
    RecordCompute(a, host_start, run.timed.back().host_end, &run.compute, &run.summary);
  }
  const int last_stage = plan.num_stages() - 1;
  if (a.kind == ActionKind::kForward && a.stage != 0 && a.stage != last_stage) {
    run.batches.erase(a.microbatch);
  }
  return absl::OkStatus();
}

absl::Status Executor::Impl::Compute(IterationRun& run, const Action& a, torch::Tensor input,
                                     model::TokenBatch* batch) {
  model::Stage& stage = StageOf(a.stage);
  const int last_stage = plan.num_stages() - 1;
  switch (a.kind) {
    case ActionKind::kForward: {
      const torch::Tensor* targets = nullptr;
      if (a.stage == last_stage && batch != nullptr) targets = &batch->targets;
      if (config.forward_seed) {
        const uint64_t seed = model::ForwardSeed(*config.forward_seed, run.summary.iteration,
                                                 data_rank, a.stage, a.microbatch);
        if (absl::Status st = stage.SeedGenerators(seed); !st.ok()) return st;
      }
      absl::StatusOr<torch::Tensor> out;
      {
        const model::AutocastScope autocast = Autocast();
        out = recomputed.count({a.stage, a.microbatch})
                  ? stage.ForwardAndForget(a.microbatch, input, targets)
                  : stage.Forward(a.microbatch, input, targets);
      }
      if (!out.ok()) return out.status();
      if (a.stage == last_stage) {
        run.loss_microbatches.push_back(a.microbatch);  // read after the last action
      } else {
        absl::StatusOr<torch::Tensor> checked =
            CheckBoundary("output activation", a.stage, a.microbatch, *std::move(out),
                          stage.OutputSpec(config.microbatch_size));
        if (!checked.ok()) return checked.status();
        outputs[{a.stage, a.microbatch}] = *std::move(checked);
      }
      if (a.stage == 0 && batch != nullptr) run.summary.tokens += batch->tokens.numel();
      return absl::OkStatus();
    }
    case ActionKind::kBackwardInput:
    case ActionKind::kBackwardFull: {
      auto g = a.kind == ActionKind::kBackwardInput ? stage.BackwardInput(a.microbatch, input)
                                                    : stage.BackwardFull(a.microbatch, input);
      if (!g.ok()) return g.status();
      if (a.stage > 0) {
        absl::StatusOr<torch::Tensor> checked =
            CheckBoundary("input gradient", a.stage, a.microbatch, *std::move(g),
                          stage.InputGradSpec(config.microbatch_size));
        if (!checked.ok()) return checked.status();
        grads[{a.stage, a.microbatch}] = *std::move(checked);
      }
      return absl::OkStatus();
    }
    case ActionKind::kBackwardWeight:
      return stage.BackwardWeight(a.microbatch);
    case ActionKind::kRecompute: {
      const model::AutocastScope autocast = Autocast();
      return stage.Recompute(a.microbatch);
    }
    default:
      return absl::OkStatus();
  }
}

absl::Status Executor::Impl::ResolveComputeTimes(IterationRun& run) {
  if (!timer->deferred()) return absl::OkStatus();
  absl::StatusOr<std::vector<SteadyTime>> marks = timer->Resolve();
  if (!marks.ok()) return marks.status();
  for (const Timed& t : run.timed) {
    RecordCompute(t.action, (*marks)[t.start_mark], (*marks)[t.end_mark], &run.compute,
                  &run.summary);
  }
  return absl::OkStatus();
}

absl::Status Executor::Impl::DrainComm() {
  // Every send delivered.
  for (PendingSend& s : sends) {
    if (absl::Status st = WaitFor(*s.handle); !st.ok()) {
      return Reworded(st, absl::StrCat("rank ", rank, ": send: ", st.message()));
    }
    EmitComm(s.action, s.posted, *s.handle);
  }
  sends.clear();
  if (!recvs.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", rank, ": ", recvs.size(), " receive(s) posted but never consumed"));
  }
  return absl::OkStatus();
}

absl::Status Executor::Impl::SummarizeTimes(IterationRun& run) {
  IterationSummary& summary = run.summary;
  const auto& compute = run.compute;
  SteadyTime last = compute.empty() ? Clock::now() : compute.back().second;
  const SteadyTime first = compute.empty() ? last : compute.front().first;
  // Every reduction done.
  if (grad_sync != nullptr) {
    auto reductions = grad_sync->FinishIteration();
    if (!reductions.ok()) return reductions.status();
    summary.reductions = *std::move(reductions);
    std::vector<std::pair<SteadyTime, SteadyTime>> reduce;
    for (const ReduceInterval& r : summary.reductions) {
      Emit(Action::Reduce(r.chunk, r.bucket), r.start, r.end);
      reduce.push_back({r.start, r.end});
      summary.reduce_s += Seconds(r.end - r.start);
      last = std::max(last, r.end);
    }
    std::sort(reduce.begin(), reduce.end());
    summary.exposed_reduce_s = summary.reduce_s - Overlap(compute, reduce);
  }
  summary.duration_s = Seconds(last - first);
  summary.idle_s = std::max(0.0, summary.duration_s - summary.busy_s);
  summary.bubble_ratio = summary.duration_s > 0 ? 1 - summary.busy_s / summary.duration_s : 0;
  summary.p2p_wait_s = p2p_wait_s;
  return absl::OkStatus();
}

absl::Status Executor::Impl::AverageLoss(IterationRun& run) {
  if (run.loss_microbatches.empty()) return absl::OkStatus();
  double sum = 0;
  for (int mb : run.loss_microbatches) {
    absl::StatusOr<float> loss = StageOf(plan.num_stages() - 1).Loss(mb);
    if (!loss.ok()) return loss.status();
    sum += *loss;
  }
  run.summary.loss = sum / run.loss_microbatches.size();
  return absl::OkStatus();
}

absl::Status Executor::Impl::Step(IterationRun& run) {
  IterationSummary& summary = run.summary;
  // What the stepper did during the iteration; every bucket it stepped had reduced. Waiting for
  // its last buckets is part of the step after the last reduction.
  const SteadyTime step0 = Clock::now();
  BucketStepper::Drained overlapped;
  if (run.overlap_step) {
    unreleased.clear();
    overlapped = stepper->Drain();
    if (!overlapped.status.ok()) return overlapped.status;
    summary.overlapped_step_s = overlapped.seconds;
    summary.overlapped_buckets = overlapped.buckets;
  }
  // Optimizer step with global-norm clipping (of the parameters not stepped yet).
  if (config.max_grad_norm > 0) {
    auto norm = GlobalGradNorm();
    if (!norm.ok()) return norm.status();
    summary.grad_norm = *norm;
  }
  try {
    torch::NoGradGuard no_grad;
    if (config.max_grad_norm > 0 && summary.grad_norm > config.max_grad_norm) {
      const double scale = config.max_grad_norm / (summary.grad_norm + 1e-6);
      for (torch::Tensor& p : params) {
        if (p.grad().defined()) p.mutable_grad().mul_(scale);
      }
    }
    if (optimizer != nullptr && overlapped.stepped.empty()) {
      optimizer->step();
    } else if (optimizer != nullptr) {
      std::vector<torch::Tensor> rest;
      for (const torch::Tensor& p : params) {
        if (overlapped.stepped.count(p.unsafeGetTensorImpl()) == 0) rest.push_back(p);
      }
      if (!rest.empty()) StepParams(*optimizer, std::move(rest));
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("optimizer step: ", e.what()));
  }
  summary.step_s = Seconds(Clock::now() - step0);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Executor>> Executor::Make(
    const core::Plan& plan, int pipeline_rank, int data_rank, const ExecutorConfig& config,
    std::vector<std::unique_ptr<model::Stage>> stages, Communicator& comm,
    const model::TokenData* data, GradSyncDriver* grad_sync, ActionSink* sink) {
  if (pipeline_rank < 0 || pipeline_rank >= plan.num_ranks()) {
    return absl::InvalidArgumentError(absl::StrCat("executor: pipeline rank ", pipeline_rank,
                                                   " not in a plan of ", plan.num_ranks()));
  }
  if (static_cast<int>(stages.size()) != plan.placement.chunks_per_rank()) {
    return absl::InvalidArgumentError(absl::StrCat("executor: ", stages.size(),
                                                   " stages given, the placement has ",
                                                   plan.placement.chunks_per_rank(), " per rank"));
  }
  for (int c = 0; c < static_cast<int>(stages.size()); ++c) {
    const int want = plan.placement.StageOf(pipeline_rank, c);
    if (stages[c] == nullptr || stages[c]->stage() != want) {
      return absl::InvalidArgumentError(
          absl::StrCat("executor: chunk ", c, " of rank ", pipeline_rank, " must be stage ", want));
    }
  }
  if (config.microbatch_size < 1)
    return absl::InvalidArgumentError("executor: microbatch_size < 1");
  absl::StatusOr<std::unique_ptr<DeviceTimer>> timer = NewDeviceTimer(config.device);
  if (!timer.ok()) return timer.status();
  auto impl = std::make_unique<Impl>();
  impl->plan = plan;
  impl->rank = pipeline_rank;
  impl->data_rank = data_rank;
  impl->config = config;
  impl->config.recv_lookahead = std::max(1, config.recv_lookahead);
  impl->stages = std::move(stages);
  impl->comm = &comm;
  impl->data = data;
  impl->grad_sync = grad_sync;
  impl->sink = sink;
  impl->timer = *std::move(timer);
  impl->bf16 = config.precision == Precision::kBf16;
  for (const auto& st : impl->stages) {
    for (const torch::Tensor& p : st->parameters()) impl->params.push_back(p);
  }
  const auto& actions = impl->plan.ranks[pipeline_rank];
  for (size_t k = 0; k < actions.size(); ++k) {
    if (core::IsRecv(actions[k].kind)) impl->recv_positions.push_back(k);
  }
  impl->wall_offset_s = WallMinusSteady();
  if (!impl->params.empty()) {
    try {
      switch (config.optimizer) {
        case Optimizer::kAdamW:
          impl->optimizer = std::make_unique<torch::optim::AdamW>(
              impl->params, torch::optim::AdamWOptions(config.lr)
                                .weight_decay(config.weight_decay_or_default())
                                .betas({config.beta1, config.beta2})
                                .eps(config.eps));
          break;
        case Optimizer::kAdam:
          impl->optimizer = std::make_unique<torch::optim::Adam>(
              impl->params, torch::optim::AdamOptions(config.lr)
                                .weight_decay(config.weight_decay_or_default())
                                .betas({config.beta1, config.beta2})
                                .eps(config.eps));
          break;
        case Optimizer::kSgd:
          impl->optimizer = std::make_unique<torch::optim::SGD>(
              impl->params,
              torch::optim::SGDOptions(config.lr).weight_decay(config.weight_decay_or_default()));
          break;
      }
    } catch (const std::exception& e) {
      return absl::InternalError(absl::StrCat("executor: optimizer: ", e.what()));
    }
  }
  return std::unique_ptr<Executor>(new Executor(std::move(impl)));
}

Executor::Executor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Executor::~Executor() = default;

absl::StatusOr<IterationSummary> Executor::RunIteration(int iteration) {
  absl::StatusOr<IterationSummary> out;
  try {
    out = impl_->Run(iteration);
  } catch (const std::exception& e) {
    out = absl::InternalError(absl::StrCat("rank ", impl_->rank, ": ", e.what()));
  }
  // A failed iteration leaves buckets queued on handles that are about to go.
  if (!out.ok() && impl_->stepper != nullptr) impl_->stepper->Abandon();
  return out;
}

absl::Status Executor::SetPlan(const core::Plan& plan, GradSyncDriver* grad_sync) {
  Impl& m = *impl_;
  const core::Plan& old = m.plan;
  if (plan.num_ranks() != old.num_ranks() || plan.num_stages() != old.num_stages() ||
      plan.num_microbatches != old.num_microbatches) {
    return absl::InvalidArgumentError(
        absl::StrCat("executor: new plan has ", plan.num_ranks(), " ranks, ", plan.num_stages(),
                     " stages, ", plan.num_microbatches, " microbatches; the running one ",
                     old.num_ranks(), ", ", old.num_stages(), ", ", old.num_microbatches));
  }
  for (int c = 0; c < static_cast<int>(m.stages.size()); ++c) {
    if (plan.placement.chunks_per_rank() != old.placement.chunks_per_rank() ||
        plan.placement.StageOf(m.rank, c) != old.placement.StageOf(m.rank, c)) {
      return absl::InvalidArgumentError("executor: new plan places other stages on this rank");
    }
  }
  m.plan = plan;
  m.recv_positions.clear();
  const auto& actions = m.plan.ranks[m.rank];
  for (size_t k = 0; k < actions.size(); ++k) {
    if (core::IsRecv(actions[k].kind)) m.recv_positions.push_back(k);
  }
  m.grad_sync = grad_sync;
  return absl::OkStatus();
}

absl::StatusOr<std::optional<double>> Executor::Evaluate(
    int batches, const std::function<model::TokenBatch(int k)>& batch) {
  try {
    return impl_->Evaluate(batches, batch);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("rank ", impl_->rank, ": eval: ", e.what()));
  }
}

const std::vector<std::unique_ptr<model::Stage>>& Executor::stages() const { return impl_->stages; }

torch::optim::Optimizer* Executor::optimizer() const { return impl_->optimizer.get(); }

}  // namespace zpipe::worker
