// A plan as the compute-only CSV schedule that PyTorch's pipeline runtime loads
// (torch.distributed.pipelining.schedules._PipelineScheduleRuntime._load_csv, format
// "compute_only"; torchtitan's `parallelism.pipeline_parallel_schedule_csv`).
//
// The CSV has one row per pipeline rank, rank 0 first, each the rank's compute actions in plan
// order as PyTorch spells them: `<stage><kind><microbatch>`, e.g. `0F0`, `1I0`, `1W0`. Kinds map
//   F -> F (forward), B -> I (input gradient), W -> W (weight gradient), BW -> B (full backward).
// Stages keep ZeroPipe's global stage numbers, which are PyTorch's stage indices: both number the
// model's stages 0..S-1 in model order and place them alike (core/placement.h: interleaved puts
// stage s on rank s mod p, as PyTorch's "loop" style; V puts stages r and 2p-1-r on rank r, as its
// "v" style for ScheduleZBVZeroBubble and ScheduleDualPipeV). PyTorch infers the stage-to-rank map
// from the CSV, so each rank must build exactly the stages its row names.
//
// Communication is left out: PyTorch's loader refuses SEND/RECV in a compute-only schedule and
// derives them from the compute order itself (_add_send_recv), so a lowered plan exports the same
// CSV as the plan it was lowered from.
#ifndef ZPIPE_RENDER_TORCH_CSV_H_
#define ZPIPE_RENDER_TORCH_CSV_H_

#include <string>

#include "absl/status/statusor.h"
#include "core/plan.h"

namespace zpipe::render {

// The CSV text, one '\n'-terminated row per rank. INVALID_ARGUMENT, saying what to change, for
// what the runtime cannot express: REDUCE actions (PyTorch reduces each stage's gradients once,
// after its last backward, not per bucket) and a compute action on a rank other than its stage's
// (PyTorch requires every stage on one rank, the one the placement names).
absl::StatusOr<std::string> PlanToTorchCsv(const core::Plan& plan);

}  // namespace zpipe::render

#endif  // ZPIPE_RENDER_TORCH_CSV_H_
