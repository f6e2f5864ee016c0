// Plan bounds: the largest pipeline a plan may describe, shared by everything that makes one.
//
// Plan size (actions, memory, generation and simulation time) grows with p x v x m, and with
// p x v x buckets once grad-sync REDUCE actions are added. These bounds keep one plan to a few
// hundred thousand actions, generated and simulated in about a second, so that a request (a job
// spec, `zpipe plan` flags, a plan text) cannot make a process work for minutes or take GBs.
// The coordinator's spec validator checks job specs against them (spec.parallel.pipeline, ...);
// `zpipe plan` checks its flags before any work; each error names its bound.
#ifndef ZPIPE_CORE_PLAN_LIMITS_H_
#define ZPIPE_CORE_PLAN_LIMITS_H_

namespace zpipe::core {

// Pipeline ranks (p).
inline constexpr int kMaxPipeline = 64;
// Microbatches per iteration (m).
inline constexpr int kMaxMicrobatches = 4096;
// Chunks per rank (v) of the interleaved schedule; the V schedules have 2.
inline constexpr int kMaxChunks = 16;
// p x v x m: stage-microbatches per iteration, each a few actions.
inline constexpr int kMaxStageMicrobatches = 65536;
// Grad-sync buckets per stage, and p x v x buckets: one REDUCE action per bucket and stage.
inline constexpr int kMaxBucketsPerStage = 1024;
inline constexpr int kMaxStageBuckets = 65536;
// Cost-model values (times, memory deltas, memory limits, reduce time): finite and at most this
// in absolute value, so that sums over a plan stay finite and exact to well below one unit.
inline constexpr double kMaxCostValue = 1e12;
// Schedule search budget (SearchOptions::budget_seconds), in seconds of one core.
inline constexpr double kMaxSearchSeconds = 600;

}  // namespace zpipe::core

#endif  // ZPIPE_CORE_PLAN_LIMITS_H_
