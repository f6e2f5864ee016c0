// The final summary of `zpipe run`: what a job's iteration summaries add up to.
//
// Steady state: the first iteration carries the warm-up (allocations, first connections, page
// faults), so the figures below are taken over iterations 2..N (all of them when a job ran only
// one). Bubble rates and iteration times are medians over those iterations, which a single
// iteration disturbed by a busy machine does not move; tokens/s and reduce figures are totals
// over them.
#ifndef ZPIPE_CLIENT_RUN_SUMMARY_H_
#define ZPIPE_CLIENT_RUN_SUMMARY_H_

#include <optional>
#include <string>
#include <vector>

#include "zpipe/v1/job.pb.h"

namespace zpipe::cli {

struct RankSummary {
  int pipeline_rank = 0;
  int data_rank = 0;
  double bubble_measured = 0;   // median of 1 - busy_r / iteration span (docs/design.md)
  double bubble_predicted = 0;  // the plan's rank_bubble for this pipeline rank
  double busy_s = 0;            // median compute time per iteration
  double reduce_s = 0;          // reduce wall time, total over the steady iterations
  double exposed_reduce_s = 0;  // the part of it that overlapped no compute
  // The optimizer step per iteration, mean over the steady iterations: after the last reduction
  // (on the critical path, outside the span), and bucket by bucket during the iteration.
  double step_s = 0;
  double overlapped_step_s = 0;
};

struct RunSummary {
  std::string job_id;
  std::string state;  // "succeeded", ...
  std::string reason;
  std::string schedule;
  int pipeline = 0;
  int data = 1;
  int microbatches = 0;
  int iterations = 0;         // summaries received
  int steady_iterations = 0;  // the ones the figures below use
  bool synthetic = false;     // a synthetic model: it computes no loss, so none is reported
  std::optional<double> loss_first;
  std::optional<double> loss_last;
  std::vector<double> losses;  // every iteration's loss, in order (iterations that have one)
  std::vector<std::pair<int, double>> eval_losses;  // (iteration, eval loss), in order
  v1::ModelLayout layout;      // TorchScript models: cuts and measured stage costs
  std::string model_file;      // zpipe run: the exported trained model, when written
  std::string model_error;     // why it was not
  double iteration_s = 0;      // median iteration time
  double tokens_per_s = 0;     // 0 for synthetic models
  double bubble_measured = 0;  // median over steady iterations
  // What the coordinator predicted for the same iterations (median of their
  // predicted_bubble_rate); the plan's bubble rate under the job's cost model when none ran.
  double bubble_predicted = 0;
  // The plan re-simulated at the costs the workers measured (median over the steady iterations
  // that have it): what the schedule leaves at the real costs; unset when none has it.
  std::optional<double> bubble_predicted_measured_costs;
  std::vector<RankSummary> ranks;
  double reduce_total_s = 0;             // per iteration, summed over ranks
  double reduce_exposed_s = 0;           // per iteration, summed over ranks
  std::optional<double> reduce_overlap;  // 1 - exposed / total; unset when nothing was reduced
  double reduce_overlap_predicted = 1;
  double wall_s = 0;  // from submit to the end
  // zpipe run --local: the CPU threads its workers compute with (workers x --threads) and the
  // cores this process may use; when the first exceeds the second, ranks wait for a core and the
  // measured bubble counts that wait (the report says so beside the bubble).
  int local_threads = 0;
  int cores = 0;
};

RunSummary Summarize(const v1::Job& job, const std::vector<v1::IterationSummary>& iterations);

}  // namespace zpipe::cli

#endif  // ZPIPE_CLIENT_RUN_SUMMARY_H_
