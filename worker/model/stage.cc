#include "worker/model/stage.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/model/internal/torch_status.h"

namespace zpipe::worker::model {
namespace {

// The generators a stage's forward may draw from: the CPU's, and its parameters' device's when
// that is another (a CUDA stage's dropout draws there).
std::vector<at::Generator> Generators(const Stage& stage) {
  std::vector<at::Generator> out = {at::detail::getDefaultCPUGenerator()};
  const std::vector<ParamInfo>& params = stage.params();
  if (!params.empty() && !params.front().tensor.device().is_cpu()) {
    out.push_back(at::globalContext().defaultGenerator(params.front().tensor.device()));
  }
  return out;
}

std::vector<std::pair<at::Generator, torch::Tensor>> SaveStates(std::vector<at::Generator> gens) {
  std::vector<std::pair<at::Generator, torch::Tensor>> out;
  for (at::Generator& g : gens) {
    std::lock_guard<std::mutex> lock(g.mutex());
    torch::Tensor state = g.get_state();
    out.emplace_back(std::move(g), std::move(state));
  }
  return out;
}

void RestoreStates(const std::vector<std::pair<at::Generator, torch::Tensor>>& states) {
  for (const auto& [gen, state] : states) {
    at::Generator g = gen;
    std::lock_guard<std::mutex> lock(g.mutex());
    g.set_state(state);
  }
}

}  // namespace

uint64_t ForwardSeed(uint64_t job_seed, int iteration, int data_rank, int stage, int mb) {
  uint64_t h = internal::SplitMix64(job_seed ^ 0xd40f5eedULL);
  for (int v : {iteration, data_rank, stage, mb}) {
    h = internal::SplitMix64(h ^ static_cast<uint64_t>(static_cast<uint32_t>(v)));
  }
  return h;
}

absl::Status Stage::SeedGenerators(uint64_t seed) {
  try {
    for (at::Generator g : Generators(*this)) {
      std::lock_guard<std::mutex> lock(g.mutex());
      g.set_current_seed(seed);
    }
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("stage ", stage(), ": seeding the random generators: ", e.what()));
  }
  return absl::OkStatus();
}

absl::StatusOr<torch::Tensor> Stage::ForwardAndForget(int mb, const torch::Tensor& input,
                                                      const torch::Tensor* targets) {
  if (kept_.count(mb)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "stage ", stage(), " F microbatch ", mb, ": input already kept for recomputation"));
  }
  Kept kept;
  try {
    kept.rng = SaveStates(Generators(*this));
    if (input.defined()) kept.input = input.detach().clone();
    if (targets != nullptr && targets->defined()) kept.targets = targets->detach().clone();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("stage ", stage(), " F microbatch ", mb,
                                            ": keeping the input for recomputation: ", e.what()));
  }
  absl::StatusOr<torch::Tensor> out = Forward(mb, input, targets);
  if (!out.ok()) return out;
  FreeMicrobatch(mb);  // the graph goes; R builds it again
  kept_.emplace(mb, std::move(kept));
  return out;
}

absl::Status Stage::Recompute(int mb) {
  auto it = kept_.find(mb);
  if (it == kept_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("stage ", stage(), " R microbatch ", mb,
                     ": nothing kept to recompute (R without its F, or R twice)"));
  }
  Kept kept = std::move(it->second);
  kept_.erase(it);
  std::vector<std::pair<at::Generator, torch::Tensor>> now;
  try {
    std::vector<at::Generator> gens;
    for (const auto& saved : kept.rng) gens.push_back(saved.first);
    now = SaveStates(std::move(gens));
    RestoreStates(kept.rng);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("stage ", stage(), " R microbatch ", mb,
                                            ": setting the random generators: ", e.what()));
  }
  absl::StatusOr<torch::Tensor> out =
      Forward(mb, kept.input, kept.targets.defined() ? &kept.targets : nullptr);
  try {
    RestoreStates(now);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("stage ", stage(), " R microbatch ", mb,
                                            ": restoring the random generators: ", e.what()));
  }
  return out.status();
}

}  // namespace zpipe::worker::model
