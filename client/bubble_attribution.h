// Where a traced iteration's bubble came from: the plan, the actions themselves, or the runtime.
//
// The plan is re-simulated with the traced iteration's own action durations (each action as long
// as it actually ran) and the plan's hand-over time T_comm (core::SimOptions::action_durations).
// Against the plan's predicted bubble that replay adds what actions running longer (or shorter)
// than the cost model cost; the measured bubble adds on top what the hand-overs between ranks and
// the runtime's time between actions cost. The three bubbles are over compute actions only (a
// rank's span from its first compute start to its last compute end), per data-parallel replica,
// averaged over the replicas.
#ifndef ZPIPE_CLIENT_BUBBLE_ATTRIBUTION_H_
#define ZPIPE_CLIENT_BUBBLE_ATTRIBUTION_H_

#include "absl/status/statusor.h"
#include "core/plan.h"
#include "zpipe/v1/coordinator.pb.h"

namespace zpipe::cli {

struct BubbleAttribution {
  double predicted = 0;  // the plan's, from the trace's predicted timeline
  double replayed = 0;   // the plan re-simulated with the traced durations
  double measured = 0;   // the traced iteration's
  double comm_s = 0;     // T_comm of the predicted timeline, used by the replay
  // replayed - predicted: actions running longer than the cost model said (the machine, the model)
  double actions() const { return replayed - predicted; }
  // measured - replayed: hand-overs beyond T_comm and the runtime's time between actions
  double runtime() const { return measured - replayed; }
};

// `plan` is the plan the job ran; `trace` a traced iteration of it (GetTrace) with its predicted
// timeline. FAILED_PRECONDITION when the trace lacks a compute action of the plan (incomplete) or
// does not match the plan's ranks.
absl::StatusOr<BubbleAttribution> AttributeBubble(const core::Plan& plan,
                                                  const v1::GetTraceResponse& trace);

}  // namespace zpipe::cli

#endif  // ZPIPE_CLIENT_BUBBLE_ATTRIBUTION_H_
