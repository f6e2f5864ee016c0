#include "core/simulator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace zpipe::core {
namespace {

constexpr double kUnknown = std::numeric_limits<double>::quiet_NaN();
inline bool Known(double t) { return !std::isnan(t); }

// Completion times of compute actions and messages, indexed by stage * m + microbatch.
struct Table {
  int m = 0;
  std::vector<double> data;
  Table(int stages, int microbatches) : m(microbatches), data(size_t(stages) * m, kUnknown) {}
  double& at(int s, int mb) { return data[size_t(s) * m + mb]; }
};

// What a compute action needs before it can start: a list of (description, ready time or NaN).
struct Dep {
  Action action;  // the producing action or message, for deadlock messages
  int rank;       // where the dependency lives
  double ready;   // when it is satisfied (NaN = not yet)
};

class Simulation {
 public:
  Simulation(const Plan& plan, const CostModel& cost, const SimOptions& options)
      : plan_(plan),
        cost_(cost),
        options_(options),
        placement_(plan.placement),
        p_(plan.num_ranks()),
        s_(plan.num_stages()),
        m_(plan.num_microbatches),
        lowered_(plan.IsLowered()),
        f_end_(s_, m_),
        b_end_(s_, m_),
        w_end_(s_, m_),
        r_end_(s_, m_),
        recomputed_(s_, m_),
        act_arrival_(s_, m_),
        grad_arrival_(s_, m_),
        act_recv_post_(s_, m_),
        grad_recv_post_(s_, m_) {}

  absl::StatusOr<SimResult> Run();

 private:
  absl::Status CheckRanges() const;
  absl::Status CheckDependenciesExist() const;
  // Dependencies of compute action `a` on rank `r`.
  void ComputeDeps(const Action& a, int r, std::vector<Dep>& deps);
  // Tries to run the next action of rank r; returns false when it must wait.
  bool Step(int r);
  // When REDUCE `reduce` (the rank's next action) is issued: the end of the previous action, or
  // with release_during_w its bucket's share of the way through its chunk's last W.
  double ReduceIssue(int r, const Action& reduce) const;
  std::string DescribeBlocked(int r);
  // The steps of Run: fresh state; every rank advanced as far as it goes (an error naming the
  // stuck ranks when some cannot finish); then the spans, and the bubbles and reduce overlap.
  void Reset();
  absl::Status AdvanceAll();
  void MeasureSpans();
  void MeasureBubblesAndReductions();

  const Plan& plan_;
  const CostModel& cost_;
  const SimOptions& options_;
  const Placement& placement_;
  const int p_, s_, m_;
  const bool lowered_;
  Table f_end_, b_end_, w_end_, r_end_;
  Table recomputed_;  // 1 where the plan has an R for (stage, microbatch)
  Table act_arrival_, grad_arrival_;      // message arrival, by producing stage
  Table act_recv_post_, grad_recv_post_;  // when the consumer posted the receive (blocking: done)
  std::vector<size_t> cursor_;
  std::vector<double> now_;
  std::vector<double> reduce_free_;
  std::vector<std::vector<int>> buckets_per_chunk_;  // [rank][chunk]: REDUCE actions in the plan
  struct LastCompute {
    Action action;
    ActionTiming timing;
    bool known = false;
  };
  std::vector<LastCompute> last_compute_;  // per rank
  std::vector<double> memory_;
  SimResult result_;
  std::vector<Dep> deps_;
};

absl::Status Simulation::CheckRanges() const {
  if (static_cast<int>(plan_.ranks.size()) != p_) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan has ", plan_.ranks.size(), " rank lists, placement says ", p_));
  }
  if (absl::Status st = cost_.Check(s_); !st.ok()) return st;
  if (const auto* durations = options_.action_durations; durations != nullptr) {
    if (static_cast<int>(durations->size()) != p_) {
      return absl::InvalidArgumentError(
          absl::StrCat("action durations have ", durations->size(), " rank lists, the plan ", p_));
    }
    for (int r = 0; r < p_; ++r) {
      if ((*durations)[r].size() != plan_.ranks[r].size()) {
        return absl::InvalidArgumentError(absl::StrCat("action durations of rank ", r, ": ",
                                                       (*durations)[r].size(), " entries for ",
                                                       plan_.ranks[r].size(), " actions"));
      }
      for (size_t k = 0; k < plan_.ranks[r].size(); ++k) {
        const double d = (*durations)[r][k];
        if (IsCompute(plan_.ranks[r][k].kind) && !(d >= 0 && std::isfinite(d))) {
          return absl::InvalidArgumentError(
              absl::StrCat("action durations of rank ", r, ": '", ActionToString(plan_.ranks[r][k]),
                           "' has duration ", d, " (needs a finite value >= 0)"));
        }
      }
    }
  }
  for (int r = 0; r < p_; ++r) {
    for (const Action& a : plan_.ranks[r]) {
      if (a.kind == ActionKind::kReduce) continue;
      if (a.stage < 0 || a.stage >= s_ || a.microbatch < 0 || a.microbatch >= m_) {
        return absl::InvalidArgumentError(absl::StrCat("rank ", r, ": '", ActionToString(a),
                                                       "' is out of range (", s_, " stages, ", m_,
                                                       " microbatches)"));
      }
      if (IsCompute(a.kind) && placement_.RankOf(a.stage) != r) {
        return absl::InvalidArgumentError(absl::StrCat("rank ", r, ": '", ActionToString(a),
                                                       "' belongs on rank ",
                                                       placement_.RankOf(a.stage)));
      }
      if (IsComm(a.kind) && (a.peer < 0 || a.peer >= p_)) {
        return absl::InvalidArgumentError(
            absl::StrCat("rank ", r, ": '", ActionToString(a), "' names a peer out of range"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Simulation::CheckDependenciesExist() const {
  Table has_f(s_, m_), has_b(s_, m_), has_w_src(s_, m_);
  for (const auto& rank : plan_.ranks) {
    for (const Action& a : rank) {
      if (a.kind == ActionKind::kForward) has_f.data[size_t(a.stage) * m_ + a.microbatch] = 1;
      if (a.kind == ActionKind::kBackwardInput || a.kind == ActionKind::kBackwardFull) {
        has_b.data[size_t(a.stage) * m_ + a.microbatch] = 1;
      }
    }
  }
  auto has = [](const Table& t, int s, int mb) { return Known(t.data[size_t(s) * t.m + mb]); };
  for (int r = 0; r < p_; ++r) {
    for (const Action& a : plan_.ranks[r]) {
      auto missing = [&](const Action& dep) {
        return absl::FailedPreconditionError(absl::StrCat("rank ", r, ": '", ActionToString(a),
                                                          "' depends on '", ActionToString(dep),
                                                          "', which is not in the plan"));
      };
      switch (a.kind) {
        case ActionKind::kForward:
          if (a.stage > 0 && !has(has_f, a.stage - 1, a.microbatch)) {
            return missing(Action::F(a.stage - 1, a.microbatch));
          }
          break;
        case ActionKind::kBackwardInput:
        case ActionKind::kBackwardFull:
          if (!has(has_f, a.stage, a.microbatch)) return missing(Action::F(a.stage, a.microbatch));
          if (a.stage + 1 < s_ && !has(has_b, a.stage + 1, a.microbatch)) {
            return missing(Action::B(a.stage + 1, a.microbatch));
          }
          break;
        case ActionKind::kBackwardWeight:
          if (!has(has_b, a.stage, a.microbatch)) return missing(Action::B(a.stage, a.microbatch));
          break;
        case ActionKind::kRecompute:
          if (!has(has_f, a.stage, a.microbatch)) return missing(Action::F(a.stage, a.microbatch));
          break;
        default:
          break;
      }
    }
  }
  return absl::OkStatus();
}

void Simulation::ComputeDeps(const Action& a, int r, std::vector<Dep>& deps) {
  deps.clear();
  auto add_edge = [&](int producer_stage, bool is_act) {
    const int pr = placement_.RankOf(producer_stage);
    const int mb = a.microbatch;
    if (pr == r) {
      double t = is_act ? f_end_.at(producer_stage, mb) : b_end_.at(producer_stage, mb);
      deps.push_back(
          {is_act ? Action::F(producer_stage, mb) : Action::B(producer_stage, mb), pr, t});
    } else if (lowered_) {
      const double post =
          is_act ? act_recv_post_.at(producer_stage, mb) : grad_recv_post_.at(producer_stage, mb);
      const double arrival =
          is_act ? act_arrival_.at(producer_stage, mb) : grad_arrival_.at(producer_stage, mb);
      const double t = Known(post) && Known(arrival) ? std::max(post, arrival) : kUnknown;
      deps.push_back({Action::Comm(is_act ? ActionKind::kRecvAct : ActionKind::kRecvGrad,
                                   producer_stage, mb, pr),
                      r, t});
    } else {
      double t = is_act ? f_end_.at(producer_stage, mb) : b_end_.at(producer_stage, mb);
      if (Known(t)) t += cost_.comm;
      deps.push_back(
          {is_act ? Action::F(producer_stage, mb) : Action::B(producer_stage, mb), pr, t});
    }
  };
  switch (a.kind) {
    case ActionKind::kForward:
      if (a.stage > 0) add_edge(a.stage - 1, /*is_act=*/true);
      break;
    case ActionKind::kBackwardInput:
    case ActionKind::kBackwardFull:
      deps.push_back({Action::F(a.stage, a.microbatch), r, f_end_.at(a.stage, a.microbatch)});
      if (Known(recomputed_.at(a.stage, a.microbatch))) {
        deps.push_back({Action::R(a.stage, a.microbatch), r, r_end_.at(a.stage, a.microbatch)});
      }
      if (a.stage + 1 < s_) add_edge(a.stage + 1, /*is_act=*/false);
      break;
    case ActionKind::kBackwardWeight:
      deps.push_back({Action::B(a.stage, a.microbatch), r, b_end_.at(a.stage, a.microbatch)});
      break;
    case ActionKind::kRecompute:
      deps.push_back({Action::F(a.stage, a.microbatch), r, f_end_.at(a.stage, a.microbatch)});
      break;
    default:
      break;
  }
}

bool Simulation::Step(int r) {
  const auto& actions = plan_.ranks[r];
  if (cursor_[r] >= actions.size()) return false;
  const Action& a = actions[cursor_[r]];
  ActionTiming& timing = result_.timings[r][cursor_[r]];
  double& now = now_[r];
  if (IsCompute(a.kind)) {
    ComputeDeps(a, r, deps_);
    double start = now;
    for (const Dep& d : deps_) {
      if (!Known(d.ready)) return false;
      start = std::max(start, d.ready);
    }
    const double duration = options_.action_durations != nullptr
                                ? (*options_.action_durations)[r][cursor_[r]]
                                : cost_.Duration(a);
    const double end = start + duration;
    timing = {start, end};
    now = end;
    last_compute_[r] = {a, timing, true};
    result_.busy[r] += end - start;
    memory_[r] += cost_.MemoryDelta(a, Known(recomputed_.at(a.stage, a.microbatch)));
    result_.peak_memory[r] = std::max(result_.peak_memory[r], memory_[r]);
    switch (a.kind) {
      case ActionKind::kForward:
        f_end_.at(a.stage, a.microbatch) = end;
        break;
      case ActionKind::kBackwardInput:
        b_end_.at(a.stage, a.microbatch) = end;
        break;
      case ActionKind::kBackwardWeight:
        w_end_.at(a.stage, a.microbatch) = end;
        break;
      case ActionKind::kBackwardFull:
        b_end_.at(a.stage, a.microbatch) = end;
        w_end_.at(a.stage, a.microbatch) = end;
        break;
      case ActionKind::kRecompute:
        r_end_.at(a.stage, a.microbatch) = end;
        result_.recompute_time += end - start;
        break;
      default:
        break;
    }
  } else if (IsSend(a.kind)) {
    const bool is_act = a.kind == ActionKind::kSendAct;
    // A send needs its tensor: the producing compute action on this rank.
    const double produced =
        is_act ? f_end_.at(a.stage, a.microbatch) : b_end_.at(a.stage, a.microbatch);
    if (!Known(produced)) return false;
    const double t = std::max(now, produced);
    timing = {t, t};
    (is_act ? act_arrival_ : grad_arrival_).at(a.stage, a.microbatch) = t + cost_.comm;
  } else if (IsRecv(a.kind)) {
    const bool is_act = a.kind == ActionKind::kRecvAct;
    const double arrival = (is_act ? act_arrival_ : grad_arrival_).at(a.stage, a.microbatch);
    if (options_.blocking_recv) {
      if (!Known(arrival)) return false;
      now = std::max(now, arrival);
    }
    // Non-blocking: the receive is posted now and completes on arrival; the consumer waits for
    // max(post, arrival). The timing's end is filled in once every send is known.
    timing = {now, now};
    (is_act ? act_recv_post_ : grad_recv_post_).at(a.stage, a.microbatch) = now;
  } else if (a.kind == ActionKind::kReduce) {
    const double start = std::max(ReduceIssue(r, a), reduce_free_[r]);
    const double end = start + options_.reduce_cost;
    timing = {start, end};
    reduce_free_[r] = end;
    result_.reduce_total[r] += end - start;
  }
  ++cursor_[r];
  return true;
}

double Simulation::ReduceIssue(int r, const Action& reduce) const {
  const LastCompute& last = last_compute_[r];
  if (!options_.release_during_w || !last.known) return now_[r];
  const Action& c = last.action;
  if (c.kind != ActionKind::kBackwardWeight && c.kind != ActionKind::kBackwardFull) return now_[r];
  if (placement_.RankOf(c.stage) != r || placement_.ChunkOf(c.stage) != reduce.chunk) {
    return now_[r];
  }
  const int buckets = buckets_per_chunk_[r][reduce.chunk];
  if (buckets <= 0 || reduce.bucket < 0 || reduce.bucket >= buckets) return now_[r];
  const double w = std::min(cost_.Duration(Action::W(c.stage, c.microbatch)),
                            last.timing.end - last.timing.start);
  const double w_start = last.timing.end - w;
  return w_start + w * (reduce.bucket + 1) / buckets;
}

std::string Simulation::DescribeBlocked(int r) {
  const Action& a = plan_.ranks[r][cursor_[r]];
  std::string what;
  if (IsCompute(a.kind)) {
    ComputeDeps(a, r, deps_);
    std::vector<std::string> waits;
    for (const Dep& d : deps_) {
      if (!Known(d.ready))
        waits.push_back(absl::StrCat(ActionToString(d.action), " (rank ", d.rank, ")"));
    }
    what = absl::StrJoin(waits, ", ");
  } else if (IsSend(a.kind)) {
    what = absl::StrCat(a.kind == ActionKind::kSendAct ? "F" : "B", " s", a.stage, " mb",
                        a.microbatch, " (rank ", r, ")");
  } else if (IsRecv(a.kind)) {
    what = absl::StrCat(a.kind == ActionKind::kRecvAct ? "SEND_ACT" : "SEND_GRAD", " s", a.stage,
                        " mb", a.microbatch, " (rank ", a.peer, ")");
  }
  return absl::StrCat("rank ", r, " at #", cursor_[r], " '", ActionToString(a), "' waits for ",
                      what);
}

// Sum of pairwise intersections of two sorted lists of disjoint intervals.
double Intersection(const std::vector<ActionTiming>& a, const std::vector<ActionTiming>& b) {
  double total = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const double lo = std::max(a[i].start, b[j].start);
    const double hi = std::min(a[i].end, b[j].end);
    if (hi > lo) total += hi - lo;
    if (a[i].end < b[j].end) {
      ++i;
    } else {
      ++j;
    }
  }
  return total;
}

void Simulation::Reset() {
  cursor_.assign(p_, 0);
  now_.assign(p_, 0);
  reduce_free_.assign(p_, 0);
  last_compute_.assign(p_, LastCompute{});
  buckets_per_chunk_.assign(p_, std::vector<int>(placement_.chunks_per_rank(), 0));
  for (int r = 0; r < p_; ++r) {
    for (const Action& a : plan_.ranks[r]) {
      if (a.kind == ActionKind::kReduce && a.chunk >= 0 && a.chunk < placement_.chunks_per_rank()) {
        buckets_per_chunk_[r][a.chunk] = std::max(buckets_per_chunk_[r][a.chunk], a.bucket + 1);
      }
    }
  }
  for (const auto& rank : plan_.ranks) {
    for (const Action& a : rank) {
      if (a.kind == ActionKind::kRecompute) recomputed_.at(a.stage, a.microbatch) = 1;
    }
  }
  memory_.assign(p_, 0);
  result_.timings.resize(p_);
  for (int r = 0; r < p_; ++r) result_.timings[r].resize(plan_.ranks[r].size());
  result_.busy.assign(p_, 0);
  result_.peak_memory.assign(p_, 0);
  result_.reduce_total.assign(p_, 0);
  result_.reduce_exposed.assign(p_, 0);
}

absl::Status Simulation::AdvanceAll() {
  // Each pass advances every rank as far as it can; a pass without progress with work left
  // is a deadlock. Start times depend only on a rank's previous action and on dependencies,
  // so the order in which ranks are advanced does not change the result.
  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < p_; ++r) {
      while (Step(r)) progress = true;
    }
  }
  std::vector<std::string> blocked;
  for (int r = 0; r < p_; ++r) {
    if (cursor_[r] < plan_.ranks[r].size()) blocked.push_back(DescribeBlocked(r));
  }
  if (!blocked.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("deadlock: ", absl::StrJoin(blocked, "; ")));
  }
  return absl::OkStatus();
}

void Simulation::MeasureSpans() {
  // span (docs/design.md): the longest of the ranks' own spans, each from the start of its first
  // action to the end of its last (compute and reductions; comm occupies no rank time).
  double span_max = 0;
  double global_first = std::numeric_limits<double>::infinity();
  double global_last = -std::numeric_limits<double>::infinity();
  for (int r = 0; r < p_; ++r) {
    const auto& actions = plan_.ranks[r];
    double first = std::numeric_limits<double>::infinity();
    double last = -std::numeric_limits<double>::infinity();
    for (size_t k = 0; k < actions.size(); ++k) {
      ActionTiming& t = result_.timings[r][k];
      if (IsRecv(actions[k].kind) && !options_.blocking_recv) {
        // A posted receive ends when its message arrives.
        const Action& a = actions[k];
        const double arrival = (a.kind == ActionKind::kRecvAct ? act_arrival_ : grad_arrival_)
                                   .at(a.stage, a.microbatch);
        if (Known(arrival)) t.end = std::max(t.start, arrival);
      }
      if (IsComm(actions[k].kind)) continue;
      first = std::min(first, t.start);
      last = std::max(last, t.end);
    }
    if (last >= first) span_max = std::max(span_max, last - first);
    global_first = std::min(global_first, first);
    global_last = std::max(global_last, last);
  }
  result_.span = span_max;
  result_.global_makespan = global_last >= global_first ? global_last - global_first : 0;
}

void Simulation::MeasureBubblesAndReductions() {
  const double span = result_.span;
  result_.idle.resize(p_);
  result_.rank_bubble.resize(p_);
  double busy_sum = 0;
  for (int r = 0; r < p_; ++r) {
    busy_sum += result_.busy[r];
    result_.idle[r] = span - result_.busy[r];
    result_.rank_bubble[r] = span > 0 ? 1 - result_.busy[r] / span : 0;
    // Reduce overlap: reduce wall time that ran while this rank computed.
    std::vector<ActionTiming> compute, reduce;
    for (size_t k = 0; k < plan_.ranks[r].size(); ++k) {
      const ActionKind kind = plan_.ranks[r][k].kind;
      if (IsCompute(kind)) compute.push_back(result_.timings[r][k]);
      if (kind == ActionKind::kReduce) reduce.push_back(result_.timings[r][k]);
    }
    const double overlapped = Intersection(compute, reduce);
    result_.reduce_exposed[r] = result_.reduce_total[r] - overlapped;
    result_.total_reduce += result_.reduce_total[r];
    result_.total_exposed_reduce += result_.reduce_exposed[r];
  }
  result_.bubble_rate = span > 0 ? 1 - busy_sum / (p_ * span) : 0;
  result_.reduce_overlap =
      result_.total_reduce > 0 ? 1 - result_.total_exposed_reduce / result_.total_reduce : 1;
}

absl::StatusOr<SimResult> Simulation::Run() {
  if (absl::Status st = CheckRanges(); !st.ok()) return st;
  if (options_.check_dependencies_exist) {
    if (absl::Status st = CheckDependenciesExist(); !st.ok()) return st;
  }
  Reset();
  if (absl::Status st = AdvanceAll(); !st.ok()) return st;
  MeasureSpans();
  MeasureBubblesAndReductions();
  return std::move(result_);
}

}  // namespace

absl::StatusOr<SimResult> Simulate(const Plan& plan, const CostModel& cost,
                                   const SimOptions& options) {
  Simulation sim(plan, cost, options);
  return sim.Run();
}

}  // namespace zpipe::core
