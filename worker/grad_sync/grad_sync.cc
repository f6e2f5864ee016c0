#include "worker/grad_sync/grad_sync.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/grad_sync.h"

namespace zpipe::worker {
namespace {

using Clock = std::chrono::steady_clock;

using model::ParamInfo;

// A parameter without a tensor has nothing to reduce, like an empty one.
int64_t Numel(const ParamInfo& p) { return p.tensor.defined() ? p.tensor.numel() : 0; }

// INVALID_ARGUMENT unless `rank` is a rank of `plan` and `params_by_chunk` has one list per chunk
// the plan places on a rank.
absl::Status CheckShapes(const core::Plan& plan, int rank,
                         const std::vector<std::vector<ParamInfo>>& params_by_chunk) {
  const core::Placement& pl = plan.placement;
  if (rank < 0 || rank >= pl.num_ranks() || static_cast<int>(plan.ranks.size()) != pl.num_ranks()) {
    return absl::InvalidArgumentError(
        absl::StrCat("grad sync: rank ", rank, " is not a rank of the plan"));
  }
  if (static_cast<int>(params_by_chunk.size()) != pl.chunks_per_rank()) {
    return absl::InvalidArgumentError(absl::StrCat("grad sync: parameters for ",
                                                   params_by_chunk.size(), " chunks, the plan has ",
                                                   pl.chunks_per_rank(), " per rank"));
  }
  return absl::OkStatus();
}

// `plan` without its REDUCE actions (a lowered plan has them): PlanGradSync places its own.
core::Plan WithoutReduces(const core::Plan& plan) {
  core::Plan stripped = plan;
  for (auto& actions : stripped.ranks) {
    std::erase_if(actions,
                  [](const core::Action& a) { return a.kind == core::ActionKind::kReduce; });
  }
  return stripped;
}

// This rank's chunks packed into buckets, and the same buckets as PlanGradSync takes them.
struct PackedChunks {
  std::vector<std::vector<BucketLayout>> buckets;  // [chunk][bucket]
  core::GradSyncLayout layout;  // by stage; other ranks' stages stay empty: not ours to plan
};

// Packs every local chunk of `rank`. INVALID_ARGUMENT for a parameter that would never count as
// accumulated.
absl::StatusOr<PackedChunks> PackChunks(const core::Placement& pl, int rank,
                                        const std::vector<std::vector<ParamInfo>>& params_by_chunk,
                                        int64_t bucket_bytes) {
  PackedChunks out;
  out.buckets.resize(pl.chunks_per_rank());
  out.layout.buckets.resize(pl.num_stages());
  for (int c = 0; c < pl.chunks_per_rank(); ++c) {
    const int stage = pl.StageOf(rank, c);
    for (const ParamInfo& p : params_by_chunk[c]) {
      if (p.accumulations_per_microbatch < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("grad sync: parameter '", p.name, "' of stage ", stage,
                         " needs accumulations_per_microbatch >= 1"));
      }
    }
    out.buckets[c] = PackBuckets(stage, params_by_chunk[c], bucket_bytes);
    for (const BucketLayout& b : out.buckets[c]) {
      out.layout.buckets[stage].push_back(core::BucketSpec{b.grads_in_b, b.grads_in_w, 1});
    }
  }
  return out;
}

// What one compute action on one microbatch contributes to a bucket.
struct PerAction {
  int b = 0;  // one B
  int w = 0;  // one W (a BW brings b + w)
};

// `bucket`'s contributions; `params` are its chunk's parameters.
PerAction ContributionsOf(const BucketLayout& bucket, const std::vector<ParamInfo>& params) {
  PerAction per;
  for (int i : bucket.params) {
    per.b += model::Accumulations(params[i], core::ActionKind::kBackwardInput);
    per.w += model::Accumulations(params[i], core::ActionKind::kBackwardWeight);
  }
  return per;
}

// The contributions a bucket of `stage` receives over one iteration of a rank's `actions`.
int ExpectedContributions(const std::vector<core::Action>& actions, int stage, PerAction per) {
  int expected = 0;
  for (const core::Action& x : actions) {
    if (x.stage != stage) continue;
    if (x.kind == core::ActionKind::kBackwardInput) expected += per.b;
    if (x.kind == core::ActionKind::kBackwardWeight) expected += per.w;
    if (x.kind == core::ActionKind::kBackwardFull) expected += per.b + per.w;
  }
  return expected;
}

}  // namespace

std::vector<BucketLayout> PackBuckets(int stage, const std::vector<model::ParamInfo>& params,
                                      int64_t bucket_bytes) {
  std::vector<int> order(params.size());
  std::iota(order.begin(), order.end(), 0);
  // Later layers first; within a layer, later-listed first (the order backward produces them).
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    if (params[a].layer != params[b].layer) return params[a].layer > params[b].layer;
    return a > b;
  });
  const int64_t cap = std::max<int64_t>(1, bucket_bytes / static_cast<int64_t>(sizeof(float)));
  std::vector<BucketLayout> out;
  for (int i : order) {
    const ParamInfo& p = params[i];
    const int64_t numel = Numel(p);
    if (numel <= 0) continue;
    if (out.empty() || (out.back().numel > 0 && out.back().numel + numel > cap)) {
      BucketLayout b;
      b.stage = stage;
      b.index = static_cast<int>(out.size());
      out.push_back(std::move(b));
    }
    BucketLayout& b = out.back();
    b.params.push_back(i);
    b.offsets.push_back(b.numel);
    b.numel += numel;
    b.grads_in_b = b.grads_in_b || p.phase == model::GradPhase::kB;
    b.grads_in_w = b.grads_in_w || p.phase == model::GradPhase::kW;
  }
  return out;
}

absl::StatusOr<std::unique_ptr<GradSync>> GradSync::Create(
    const core::Plan& plan, int rank, std::vector<std::vector<model::ParamInfo>> params_by_chunk,
    const GradSyncOptions& options, Communicator& comm) {
  if (absl::Status s = CheckShapes(plan, rank, params_by_chunk); !s.ok()) return s;
  const core::Placement& pl = plan.placement;
  const core::Plan stripped = WithoutReduces(plan);
  auto packed = PackChunks(pl, rank, params_by_chunk, options.bucket_bytes);
  if (!packed.ok()) return packed.status();
  auto sync_plan = core::PlanGradSync(stripped, packed->layout, options.overlap);
  if (!sync_plan.ok()) return sync_plan.status();

  std::unique_ptr<GradSync> gs(new GradSync(options, comm));
  gs->placement_ = pl;
  gs->rank_ = rank;
  const int chunks = pl.chunks_per_rank();
  gs->param_slot_.resize(chunks);
  gs->param_offset_.resize(chunks);
  gs->stage_slots_.resize(chunks);
  for (int c = 0; c < chunks; ++c) {
    gs->param_slot_[c].assign(params_by_chunk[c].size(), -1);
    gs->param_offset_[c].assign(params_by_chunk[c].size(), 0);
    gs->stage_slots_[c].assign(packed->buckets[c].size(), -1);
  }
  // Slots follow this rank's REDUCE order.
  for (const core::Action& a : sync_plan->plan.ranks[rank]) {
    if (a.kind != core::ActionKind::kReduce) continue;
    const int slot = static_cast<int>(gs->buckets_.size());
    BucketLayout b = packed->buckets[a.chunk][a.bucket];
    gs->stage_slots_[a.chunk][a.bucket] = slot;
    for (size_t i = 0; i < b.params.size(); ++i) {
      gs->param_slot_[a.chunk][b.params[i]] = slot;
      gs->param_offset_[a.chunk][b.params[i]] = b.offsets[i];
    }
    const PerAction per = ContributionsOf(b, params_by_chunk[a.chunk]);
    BucketRecord rec;
    rec.chunk = a.chunk;
    rec.stage = b.stage;
    rec.bucket = a.bucket;
    rec.numel = b.numel;
    rec.expected = ExpectedContributions(stripped.ranks[rank], b.stage, per);
    gs->records_.push_back(rec);
    gs->per_b_.push_back(per.b);
    gs->per_w_.push_back(per.w);
    gs->buffers_.push_back(torch::zeros(
        {b.numel}, torch::TensorOptions().dtype(torch::kFloat32).device(comm.device())));
    gs->buckets_.push_back(std::move(b));
  }
  gs->handles_.resize(gs->buckets_.size());
  gs->params_ = std::move(params_by_chunk);
  return gs;
}

GradSync::~GradSync() = default;

std::string GradSync::Name(int slot) const {
  const BucketRecord& r = records_[slot];
  return absl::StrCat("stage ", r.stage, " bucket ", r.bucket, " (chunk ", r.chunk, ")");
}

int GradSync::SlotOf(int stage, int bucket) const {
  if (stage < 0 || stage >= placement_.num_stages() || placement_.RankOf(stage) != rank_) return -1;
  const auto& slots = stage_slots_[placement_.ChunkOf(stage)];
  if (bucket < 0 || bucket >= static_cast<int>(slots.size())) return -1;
  return slots[bucket];
}

absl::StatusOr<torch::Tensor> GradSync::GradView(int stage, int param) const {
  if (stage < 0 || stage >= placement_.num_stages() || placement_.RankOf(stage) != rank_) {
    return absl::InvalidArgumentError(
        absl::StrCat("grad sync: stage ", stage, " is not on pipeline rank ", rank_));
  }
  const int c = placement_.ChunkOf(stage);
  if (param < 0 || param >= static_cast<int>(params_[c].size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("grad sync: stage ", stage, " has no parameter ", param));
  }
  const int slot = param_slot_[c][param];
  if (slot < 0) return torch::zeros({0}, torch::TensorOptions().device(comm_.device()));
  return buffers_[slot].narrow(0, param_offset_[c][param], Numel(params_[c][param]));
}

absl::Status GradSync::AttachGrads(int stage, const std::vector<torch::Tensor>& params) {
  if (stage < 0 || stage >= placement_.num_stages() || placement_.RankOf(stage) != rank_) {
    return absl::InvalidArgumentError(
        absl::StrCat("grad sync: stage ", stage, " is not on pipeline rank ", rank_));
  }
  const int c = placement_.ChunkOf(stage);
  if (params.size() != params_[c].size()) {
    return absl::InvalidArgumentError(absl::StrCat("grad sync: stage ", stage, " has ",
                                                   params_[c].size(), " parameters, got ",
                                                   params.size()));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    torch::Tensor p = params[i];
    const int64_t numel = Numel(params_[c][i]);
    if (p.numel() != numel || p.scalar_type() != torch::kFloat32 ||
        p.device() != comm_.device()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "grad sync: parameter '", params_[c][i].name, "' of stage ", stage, " has ", p.numel(),
          " elements of ", c10::toString(p.scalar_type()), " on ", p.device().str(), "; expected ",
          numel, " float32 on ", comm_.device().str()));
    }
  }
  for (size_t i = 0; i < params.size(); ++i) {
    torch::Tensor p = params[i];
    auto view = GradView(stage, static_cast<int>(i));
    if (!view.ok()) return view.status();
    p.mutable_grad() = view->view(p.sizes());
  }
  return absl::OkStatus();
}

absl::Status GradSync::BeginIteration() {
  for (size_t slot = 0; slot < handles_.size(); ++slot) {
    if (handles_[slot] != nullptr && !handles_[slot]->Test()) {
      return absl::FailedPreconditionError(
          absl::StrCat("grad sync: the all-reduce of ", Name(static_cast<int>(slot)),
                       " from the previous iteration is still running"));
    }
  }
  if (in_iteration_) {
    return absl::FailedPreconditionError(
        "grad sync: BeginIteration before the previous iteration was finished");
  }
  for (size_t slot = 0; slot < records_.size(); ++slot) {
    buffers_[slot].zero_();
    BucketRecord& r = records_[slot];
    r.received = 0;
    r.launches = 0;
    r.ready = false;
    r.finished = false;
    r.status = absl::OkStatus();
    handles_[slot].reset();
  }
  errors_.clear();
  next_launch_ = 0;
  in_iteration_ = true;
  return absl::OkStatus();
}

absl::Status GradSync::Add(int slot, int count, const std::string& from) {
  if (!in_iteration_) {
    return absl::FailedPreconditionError(
        absl::StrCat("grad sync: contribution to ", Name(slot), " from ", from,
                     " outside an iteration (call BeginIteration first)"));
  }
  BucketRecord& r = records_[slot];
  r.received += count;
  if (r.received > r.expected) {
    std::string msg =
        absl::StrCat("grad sync: ", Name(slot), " got contribution ", r.received, " of ",
                     r.expected, " expected this iteration (extra, from ", from, ")");
    errors_.push_back(msg);
    return absl::FailedPreconditionError(std::move(msg));
  }
  if (r.received == r.expected) {
    r.ready = true;
    r.ready_time = Clock::now();
    if (options_.overlap) LaunchDue();
  }
  return absl::OkStatus();
}

void GradSync::LaunchDue() {
  while (next_launch_ < static_cast<int>(records_.size()) && records_[next_launch_].ready) {
    const int slot = next_launch_++;
    BucketRecord& r = records_[slot];
    ++r.launches;
    r.launch_time = Clock::now();
    handles_[slot] = comm_.AllReduceAverage(buffers_[slot]);
  }
}

absl::Status GradSync::OnContribution(int stage, int param) {
  if (stage < 0 || stage >= placement_.num_stages() || placement_.RankOf(stage) != rank_) {
    return absl::InvalidArgumentError(
        absl::StrCat("grad sync: stage ", stage, " is not on pipeline rank ", rank_));
  }
  const int c = placement_.ChunkOf(stage);
  if (param < 0 || param >= static_cast<int>(params_[c].size()) || param_slot_[c][param] < 0) {
    return absl::InvalidArgumentError(absl::StrCat("grad sync: stage ", stage, " has no parameter ",
                                                   param, " with a gradient bucket"));
  }
  return Add(param_slot_[c][param], 1, absl::StrCat("parameter '", params_[c][param].name, "'"));
}

absl::Status GradSync::OnBucketContribution(int stage, int bucket, int count) {
  const int slot = SlotOf(stage, bucket);
  if (slot < 0 || count < 1) {
    return absl::InvalidArgumentError(absl::StrCat("grad sync: no bucket ", bucket, " of stage ",
                                                   stage, " on pipeline rank ", rank_,
                                                   " (or count ", count, " < 1)"));
  }
  return Add(slot, count, "a bucket-level contribution");
}

absl::Status GradSync::OnActionDone(const core::Action& action) {
  const bool in_b = action.kind == core::ActionKind::kBackwardInput ||
                    action.kind == core::ActionKind::kBackwardFull;
  const bool in_w = action.kind == core::ActionKind::kBackwardWeight ||
                    action.kind == core::ActionKind::kBackwardFull;
  if (!in_b && !in_w) return absl::OkStatus();
  if (action.stage < 0 || action.stage >= placement_.num_stages() ||
      placement_.RankOf(action.stage) != rank_) {
    return absl::InvalidArgumentError(absl::StrCat("grad sync: ", core::ActionToString(action),
                                                   " is not an action of pipeline rank ", rank_));
  }
  absl::Status first;
  for (int slot : stage_slots_[placement_.ChunkOf(action.stage)]) {
    const int count = (in_b ? per_b_[slot] : 0) + (in_w ? per_w_[slot] : 0);
    if (count == 0) continue;
    absl::Status s = Add(slot, count, core::ActionToString(action));
    if (first.ok()) first = s;
  }
  return first;
}

absl::Status GradSync::ExpectLaunched(int chunk, int bucket) {
  if (chunk < 0 || chunk >= static_cast<int>(stage_slots_.size()) || bucket < 0 ||
      bucket >= static_cast<int>(stage_slots_[chunk].size())) {
    return absl::InvalidArgumentError(absl::StrCat("grad sync: REDUCE chunk", chunk, " bucket",
                                                   bucket, " names no bucket of pipeline rank ",
                                                   rank_, " (the plan used another layout?)"));
  }
  const int slot = stage_slots_[chunk][bucket];
  if (!options_.overlap || records_[slot].launches > 0) return absl::OkStatus();
  std::string msg = absl::StrCat("grad sync: the plan reduces ", Name(slot),
                                 " here, but it has not fired: received ", records_[slot].received,
                                 " of ", records_[slot].expected, " contributions");
  errors_.push_back(msg);
  return absl::FailedPreconditionError(std::move(msg));
}

absl::Status GradSync::FinishIteration() {
  if (!in_iteration_) {
    return absl::FailedPreconditionError("grad sync: FinishIteration outside an iteration");
  }
  LaunchDue();  // overlap off: everything launches here, after the last action
  int blocker = -1;
  for (int slot = 0; slot < static_cast<int>(records_.size()); ++slot) {
    const BucketRecord& r = records_[slot];
    if (!r.ready) {
      if (r.received <= r.expected) {
        errors_.push_back(absl::StrCat("grad sync: ", Name(slot), " never fired: received ",
                                       r.received, " of ", r.expected, " contributions"));
      }
      if (blocker < 0) blocker = slot;
    } else if (r.launches == 0) {
      // Launching it out of order would pair it with another bucket on the other replicas.
      errors_.push_back(absl::StrCat("grad sync: ", Name(slot), " was ready but held behind ",
                                     Name(blocker), ", which never fired"));
    }
  }
  absl::Status reduce_error;
  const auto deadline = absl::Now() + options_.wait_timeout;
  for (int slot = 0; slot < static_cast<int>(records_.size()); ++slot) {
    if (handles_[slot] == nullptr) continue;
    BucketRecord& r = records_[slot];
    r.status = handles_[slot]->Wait(std::max(deadline - absl::Now(), absl::ZeroDuration()));
    r.finished = handles_[slot]->Test();
    if (r.finished) {
      const CommTimes t = handles_[slot]->times();
      r.start_time = t.start;
      r.end_time = t.end;
    }
    if (!r.status.ok()) {
      errors_.push_back(
          absl::StrCat("grad sync: all-reduce of ", Name(slot), " failed: ", r.status.ToString()));
      if (reduce_error.ok()) reduce_error = r.status;
    }
  }
  in_iteration_ = false;
  if (errors_.empty()) return absl::OkStatus();
  constexpr size_t kShown = 5;
  std::string msg =
      absl::StrJoin(errors_.begin(), errors_.begin() + std::min(kShown, errors_.size()), "; ");
  if (errors_.size() > kShown) absl::StrAppend(&msg, "; and ", errors_.size() - kShown, " more");
  return absl::Status(
      reduce_error.ok() ? absl::StatusCode::kFailedPrecondition : reduce_error.code(), msg);
}

}  // namespace zpipe::worker
