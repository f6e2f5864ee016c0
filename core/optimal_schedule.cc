#include "core/optimal_schedule.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/internal/order_search.h"
#include "core/rank_bound.h"
#include "core/simulator.h"
#include "core/span_bound.h"
#include "core/validator.h"

namespace zpipe::core {
namespace {

constexpr int kF = 0, kB = 1, kW = 2;  // kB is BW when the backward is fused
constexpr double kUnset = -1;
// A rank's relaxation at a node: the nodes one question may take (past them, the state's
// one-machine bound answers), and the states it remembers (about 80 bytes each).
constexpr int64_t kRelaxationNodes = 2000;
// The relaxations' searches may take this many of their nodes per tree node on average (past
// it, a question is answered by the remembered states and the node bound alone): where they
// seldom cut (V placements at p = 8), the tree keeps most of its speed.
constexpr int64_t kRelaxationNodesPerNode = 20;
constexpr int64_t kRelaxationCredit = 1'000'000;
constexpr int64_t kRelaxationStates = 1'000'000;

// One compute action of the problem, with its inputs (ids, -1 = none) and their hand-over cost.
struct Act {
  int kind = kF, stage = 0, mb = 0, rank = 0;
  double dur = 0, mem = 0;
  int in1 = -1, in2 = -1;
  double comm1 = 0, comm2 = 0;
};

class Solver {
 public:
  Solver(const Plan& incumbent, const CostModel& cost, double limit, bool split,
         const OptimalOptions& options, double static_bound)
      : placement_(incumbent.placement),
        m_(incumbent.num_microbatches),
        S_(placement_.num_stages()),
        p_(placement_.num_ranks()),
        K_(split ? 3 : 2),
        limit_(limit),
        tol_(1e-9 * std::max(1.0, std::abs(limit))),
        static_bound_(static_bound),
        options_(options) {
    acts_.resize(static_cast<size_t>(S_) * m_ * K_);
    by_rank_.resize(p_);
    auto edge = [&](int s) {  // T_comm of the edge s -> s + 1
      return placement_.RankOf(s) == placement_.RankOf(s + 1) ? 0.0 : cost.comm;
    };
    bool strict = cost.comm > 0;  // every cross-rank input ends strictly before its consumer
    if (!strict) {
      strict = true;
      for (const StageCost& sc : cost.stages) {
        strict = strict && sc.f > 0 && sc.b + (split ? 0 : sc.w) > 0;
      }
    }
    rank_tie_break_ = strict;
    for (int s = 0; s < S_; ++s) {
      const StageCost& sc = cost.stages[s];
      for (int i = 0; i < m_; ++i) {
        for (int k = 0; k < K_; ++k) {
          Act& a = acts_[Id(k, s, i)];
          a.kind = k;
          a.stage = s;
          a.mb = i;
          a.rank = placement_.RankOf(s);
          if (k == kF) {
            a.dur = sc.f;
            a.mem = sc.mem_f;
            if (s > 0) a.in1 = Id(kF, s - 1, i), a.comm1 = edge(s - 1);
          } else if (k == kB) {
            a.dur = split ? sc.b : sc.b + sc.w;
            a.mem = split ? sc.mem_b : sc.mem_b + sc.mem_w;
            a.in1 = Id(kF, s, i);
            if (s + 1 < S_) a.in2 = Id(kB, s + 1, i), a.comm2 = edge(s);
          } else {
            a.dur = sc.w;
            a.mem = sc.mem_w;
            a.in1 = Id(kB, s, i);
          }
          by_rank_[a.rank].push_back(Id(k, s, i));
        }
      }
    }
    start_.assign(acts_.size(), kUnset);
    end_.assign(acts_.size(), kUnset);
    est_.assign(acts_.size(), 0);
    free_.assign(p_, 0);
    mem_.assign(p_, 0);
    first_.assign(p_, kUnset);
    rem_.assign(p_, 0);
    for (const Act& a : acts_) rem_[a.rank] += a.dur;
    order_.assign(p_, {});
    b_order_.assign(S_, {});
    w_done_.assign(S_, 0);
    if (options.rank_relaxation_at_nodes) BuildRankRelaxations(cost, split);
  }

  // Each rank's relaxation (core/rank_bound.h), and how the tree's actions map to its kinds.
  void BuildRankRelaxations(const CostModel& cost, bool split) {
    local_kind_.assign(acts_.size(), -1);
    kind_ids_.resize(p_);
    local_done_.resize(p_);
    chain_relax_.resize(p_);
    chain_back_.assign(p_, 0);
    for (int r = 0; r < p_; ++r) {
      relax_.push_back(std::make_unique<RankRelaxation>(placement_, m_, cost, limit_, split, r,
                                                        kRelaxationStates));
      if (r > 0) {
        chain_relax_[r] = std::make_unique<RankRelaxation>(placement_, m_, cost, limit_, split, r,
                                                           kRelaxationStates, /*chain=*/true);
        // The backward path from the end of a B of r's first stage to the end of the B of stage
        // 0 (each stage's B, and T_comm per cross-rank edge), and a W of stage 0.
        double& back = chain_back_[r];
        back = split ? cost.stages[0].w : 0;
        for (int s = 0; s < chain_relax_[r]->stages()[0]; ++s) {
          back += cost.stages[s].b + (split ? 0 : cost.stages[s].w) +
                  (placement_.RankOf(s) == placement_.RankOf(s + 1) ? 0 : cost.comm);
        }
      }
      const RankRelaxation& rel = *relax_.back();
      const int k = static_cast<int>(rel.stages().size());
      kind_ids_[r].assign(rel.num_kinds(), std::vector<int>(m_));
      local_done_[r].assign(rel.num_kinds(), 0);
      for (int q = 0; q < rel.num_kinds(); ++q) {
        const int stage = rel.stages()[q % k];
        const int kind = q / k;  // kF, kB, kW, as the relaxation numbers its kinds
        for (int i = 0; i < m_; ++i) {
          const int id = Id(kind, stage, i);
          kind_ids_[r][q][i] = id;
          local_kind_[id] = q;
        }
      }
    }
    ready_.resize(p_);
    ready_call_.assign(p_, -1);
    ready_now_.assign(p_, 0);
  }

  // A rank's span in any completion of this node is at least `now`, when it can next start, plus
  // its relaxation's least time to the end from the node's state, minus its first start. The
  // state: the counts done of each kind, and for each microbatch whose predecessor on the rank
  // is done, the earliest start LowerBound gave it. Asks each started rank until one cuts.
  //
  // Then each rank r past stage 0's as a link of a chain (core/rank_bound.h): from its state
  // (when it has not started, its first start is at least the earliest start of an F of its
  // first stage), the last B of its first stage ends no earlier than `now` plus the chain
  // relaxation's least time, and rank 0 ends at least the backward path down to stage 0 and a W
  // of stage 0 later. This sees what the root's chains see, from the node: a forward the partial
  // plan held back delays the whole round trip.
  double RankRelaxationsBound(double lb) {
    const double target = BestCut();
    for (int r = 0; r < p_ && lb < Cut(); ++r) {
      // (A rank with nothing left ends at free_[r], which the plain bound counts.)
      if (first_[r] == kUnset || order_[r].size() == by_rank_[r].size()) continue;
      const double now = std::max(free_[r], t_last_);
      lb = std::max(lb, now + LeastRest(*relax_[r], r, now, target + first_[r] - now) - first_[r]);
    }
    for (int r = 1; r < p_ && lb < Cut(); ++r) {
      RankRelaxation& rel = *chain_relax_[r];
      const int first_stage = rel.stages()[0];
      const int k = static_cast<int>(rel.stages().size());
      if (first_[0] == kUnset || local_done_[r][k] == m_) continue;
      double now = std::max(free_[r], t_last_);
      if (first_[r] == kUnset) {
        now = std::numeric_limits<double>::infinity();
        for (int i = 0; i < m_; ++i) now = std::min(now, est_[Id(kF, first_stage, i)]);
        now = std::max(now, t_last_);
      }
      const double back = chain_back_[r];
      lb = std::max(lb, now + back - first_[0]);
      if (lb >= Cut()) break;
      lb = std::max(
          lb, now + LeastRest(rel, r, now, target + first_[0] - now - back) + back - first_[0]);
    }
    return lb;
  }

  // Rank r's relaxation `rel` from the node's state, its time counted from `now`. The rank and its
  // chain share the kinds, so the queued ready times built for one serve the other at the same
  // node and `now`.
  double LeastRest(RankRelaxation& rel, int r, double now, double need) {
    std::vector<std::vector<double>>& ready = ready_[r];
    if (ready_call_[r] != relax_calls_ || ready_now_[r] != now) {
      BuildReady(rel, r, now);
      ready_call_[r] = relax_calls_;
      ready_now_[r] = now;
    }
    const int64_t before = rel.nodes();
    const double rest =
        rel.LeastRest(local_done_[r], ready, need, std::min(kRelaxationNodes, relax_credit_));
    relax_credit_ -= rel.nodes() - before;
    return rest;
  }

  // Into ready_[r]: for each kind of rank r with a predecessor there, how long from `now` until
  // each microbatch whose predecessor is done (and which is not) may start, ascending.
  void BuildReady(const RankRelaxation& rel, int r, double now) {
    std::vector<std::vector<double>>& ready = ready_[r];
    ready.resize(rel.num_kinds());
    for (int q = 0; q < rel.num_kinds(); ++q) {
      ready[q].clear();
      const int pred = rel.PredecessorOf(q);
      if (pred < 0) continue;
      for (int i = 0; i < m_; ++i) {
        const int id = kind_ids_[r][q][i];
        if (Scheduled(id) || !Scheduled(kind_ids_[r][pred][i])) continue;
        ready[q].push_back(std::max(0.0, est_[id] - now));
      }
      std::sort(ready[q].begin(), ready[q].end());
    }
  }

  // The one W of stage s the tree may append next: Ws of a stage run in the order of their Bs.
  // Two Ws of one stage have the same duration and memory and nothing waits for them, so
  // swapping two that are both ready changes no time and no memory of any plan: every span is
  // still reached, and the (m!) orders of deferred Ws are not searched again and again.
  int NextW(int s) const {
    return w_done_[s] < static_cast<int>(b_order_[s].size()) ? b_order_[s][w_done_[s]] : -1;
  }

  int Id(int kind, int s, int i) const { return (s * m_ + i) * K_ + kind; }

  // The action id of a compute action of the incumbent, or -1 when it does not belong here.
  int IdOf(const Action& a) const {
    int k = -1;
    if (a.kind == ActionKind::kForward) k = kF;
    if (a.kind == (K_ == 3 ? ActionKind::kBackwardInput : ActionKind::kBackwardFull)) k = kB;
    if (K_ == 3 && a.kind == ActionKind::kBackwardWeight) k = kW;
    if (k < 0 || a.stage < 0 || a.stage >= S_ || a.microbatch < 0 || a.microbatch >= m_) return -1;
    return Id(k, a.stage, a.microbatch);
  }

  void Run(double incumbent_span, std::vector<std::vector<int>> incumbent_orders) {
    best_ = incumbent_span;
    best_orders_ = std::move(incumbent_orders);
    t0_ = std::chrono::steady_clock::now();
    const double root = LowerBound();
    proven_ = std::min(best_, root);
    // First the plain search, cut at the incumbent, for half the budget: it finds shorter plans
    // and, when it finishes, proves the best one optimal. Its open nodes prove little (most hang
    // near the root), so when it does not finish, the rest of the budget goes to iterative
    // deepening on the bound (IDA*): each pass explores only the nodes whose bound is at most a
    // threshold, so a pass that ends without a plan within it proves that no plan is shorter
    // than the least bound it cut, which is the next pass's threshold.
    // Between the two, when the plain search did not finish, the neighbourhood rounds (a polish's
    // OptimalOptions::neighbourhood_nodes).
    threshold_ = std::numeric_limits<double>::infinity();
    budget_end_ = 0.5;
    if (root < Cut()) Dfs(root);
    if (!aborted_) {
      proven_ = best_;
    } else {
      proven_ = std::max(proven_, std::min(best_, open_bound_));
      aborted_ = false;
      if (options_.neighbourhood_nodes > 0 && proven_ < BestCut()) Neighbourhoods();
      budget_end_ = 1;
      threshold_ = root;
      while (proven_ < BestCut()) {
        cut_off_ = std::numeric_limits<double>::infinity();
        open_bound_ = std::numeric_limits<double>::infinity();
        if (root < Cut()) Dfs(root);
        if (aborted_) {
          // Every plan not found yet lies below a node this pass cut or one it left open.
          proven_ = std::max(proven_, std::min({best_, cut_off_, open_bound_}));
          break;
        }
        proven_ = std::max(proven_, std::min(best_, cut_off_));
        threshold_ = cut_off_;
      }
      if (!aborted_) proven_ = best_;  // the last pass reached the incumbent
    }
    seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }

  double best() const { return best_; }
  bool aborted() const { return aborted_; }
  bool improved() const { return improved_; }
  int64_t nodes() const { return nodes_; }
  double seconds() const { return seconds_; }
  // Every valid plan's span is at least this.
  double Bound() const { return std::min(best_, std::max(static_bound_, proven_)); }
  Plan BestPlan(const Plan& incumbent) const {
    Plan plan = EmptyPlan(incumbent.schedule, placement_, m_);
    for (int r = 0; r < p_; ++r) {
      for (int id : best_orders_[r]) {
        const Act& a = acts_[id];
        plan.ranks[r].push_back(a.kind == kF   ? Action::F(a.stage, a.mb)
                                : a.kind == kW ? Action::W(a.stage, a.mb)
                                : K_ == 3      ? Action::B(a.stage, a.mb)
                                               : Action::BW(a.stage, a.mb));
      }
    }
    return plan;
  }

 private:
  // A node is expanded while its bound is below this: under the incumbent, and at most the pass's
  // threshold.
  double Cut() const {
    return std::min(BestCut(), threshold_ + 1e-9 * std::max(1.0, std::abs(threshold_)));
  }
  // A plan is an improvement when its span is below this.
  double BestCut() const { return best_ - 1e-12 * std::max(1.0, std::abs(best_)); }
  // A node of bound `lb` was not expanded: remember it when the threshold cut it (the incumbent
  // did not), since the next pass starts there.
  void NoteCut(double lb) {
    if (lb < BestCut()) cut_off_ = std::min(cut_off_, lb);
  }

  bool Scheduled(int id) const { return end_[id] != kUnset; }

  // Ready time of `id` from its inputs; kUnset when an input is not scheduled.
  double Ready(int id) const {
    const Act& a = acts_[id];
    double ready = 0;
    if (a.in1 >= 0) {
      if (!Scheduled(a.in1)) return kUnset;
      ready = std::max(ready, end_[a.in1] + a.comm1);
    }
    if (a.in2 >= 0) {
      if (!Scheduled(a.in2)) return kUnset;
      ready = std::max(ready, end_[a.in2] + a.comm2);
    }
    return ready;
  }

  // The node bound described in the header.
  double LowerBound() {
    // Earliest starts of the unscheduled actions: F chains forward, then B chains backward.
    auto input_end = [&](int in, double comm) {
      return (Scheduled(in) ? end_[in] : est_[in] + acts_[in].dur) + comm;
    };
    auto relax = [&](int id) {
      const Act& a = acts_[id];
      double t = std::max(t_last_, free_[a.rank]);
      if (a.in1 >= 0) t = std::max(t, input_end(a.in1, a.comm1));
      if (a.in2 >= 0) t = std::max(t, input_end(a.in2, a.comm2));
      est_[id] = t;
    };
    for (int s = 0; s < S_; ++s) {
      for (int i = 0; i < m_; ++i) {
        if (!Scheduled(Id(kF, s, i))) relax(Id(kF, s, i));
      }
    }
    for (int s = S_ - 1; s >= 0; --s) {
      for (int i = 0; i < m_; ++i) {
        if (!Scheduled(Id(kB, s, i))) relax(Id(kB, s, i));
        if (K_ == 3 && !Scheduled(Id(kW, s, i))) relax(Id(kW, s, i));
      }
    }
    double lb = static_bound_;
    for (int r = 0; r < p_; ++r) {
      if (first_[r] == kUnset) {
        lb = std::max(lb, rem_[r]);
        continue;
      }
      jobs_.clear();
      for (int id : by_rank_[r]) {
        if (!Scheduled(id)) jobs_.push_back({est_[id], acts_[id].dur});
      }
      double end = free_[r];
      std::sort(jobs_.begin(), jobs_.end(), [](const auto& a, const auto& b) { return a > b; });
      double work = 0;  // durations released at or after the current release
      for (const auto& [release, dur] : jobs_) {
        work += dur;
        end = std::max(end, release + work);
      }
      lb = std::max(lb, end - first_[r]);
    }
    if (!relax_.empty() && lb < Cut() && AskRelaxations()) {
      ++relax_calls_;
      lb = RankRelaxationsBound(lb);
      relax_cuts_ += lb >= Cut();
    }
    return lb;
  }

  // Whether this node asks the ranks' relaxations. Where they seldom cut (under 1 node in 32
  // once 4096 have asked: ZB-V at p = 4, m = 8 cuts 1 in 140, V-Half at p = 4, m = 4 1 in 110,
  // 1F1B at p = 8, m = 16 3 in 4), only every 256th node asks, so that the tree keeps most of
  // its speed (V-Half p = 4, m = 4: 1.6 million nodes in 2 s, 0.6 million asking at each); the
  // rate is measured all along.
  bool AskRelaxations() {
    const bool seldom = relax_calls_ >= 4096 && relax_cuts_ * 32 < relax_calls_;
    return !seldom || (++relax_skipped_ & 255) == 0;
  }

  struct Candidate {
    double start;
    int kind_order;
    int rank;
    int id;
  };

  void Apply(int id, double start) {
    const Act& a = acts_[id];
    start_[id] = start;
    end_[id] = start + a.dur;
    free_[a.rank] = end_[id];
    mem_[a.rank] += a.mem;
    if (first_[a.rank] == kUnset) first_[a.rank] = start;
    rem_[a.rank] -= a.dur;
    order_[a.rank].push_back(id);
    if (!relax_.empty()) ++local_done_[a.rank][local_kind_[id]];
    ++done_;
    if (a.kind == kF && a.stage == 0) ++stage0_forwards_;
    if (K_ == 3 && a.kind == kB) b_order_[a.stage].push_back(a.mb);
    if (a.kind == kW) ++w_done_[a.stage];
  }

  void Undo(int id, double prev_free, double prev_first, double prev_t_last, int prev_rank_last) {
    const Act& a = acts_[id];
    start_[id] = kUnset;
    end_[id] = kUnset;
    free_[a.rank] = prev_free;
    mem_[a.rank] -= a.mem;
    first_[a.rank] = prev_first;
    rem_[a.rank] += a.dur;
    order_[a.rank].pop_back();
    if (!relax_.empty()) --local_done_[a.rank][local_kind_[id]];
    --done_;
    if (a.kind == kF && a.stage == 0) --stage0_forwards_;
    if (K_ == 3 && a.kind == kB) b_order_[a.stage].pop_back();
    if (a.kind == kW) --w_done_[a.stage];
    t_last_ = prev_t_last;
    rank_last_ = prev_rank_last;
  }

  // One action a neighbourhood round replayed, with what Undo needs.
  struct Replayed {
    int id;
    double prev_free, prev_first, prev_t_last;
    int prev_rank_last;
  };

  // Appends the best plan's first `k` actions in the order the tree visits that plan (each
  // rank's next action, the earliest start first, the lower rank on a tie), each recorded in
  // `replayed`. False when the plan breaks a rule of the tree (it then stops there): the best
  // plan is the incumbent relabelled (CanonicalLabels) or one the tree found, so it should not.
  bool ReplayPrefix(int k, std::vector<Replayed>& replayed) {
    std::vector<size_t> next(p_, 0);
    const std::vector<std::vector<int>>& orders = best_orders_;  // unchanged until the round
    for (int n = 0; n < k; ++n) {
      int rank = -1;
      double start = std::numeric_limits<double>::infinity();
      for (int r = 0; r < p_; ++r) {
        if (next[r] == orders[r].size()) continue;
        const double ready = Ready(orders[r][next[r]]);
        if (ready == kUnset) continue;
        const double earliest = std::max(free_[r], ready);
        if (earliest < start) rank = r, start = earliest;
      }
      if (rank < 0) return false;
      const int id = orders[rank][next[rank]];
      const Act& a = acts_[id];
      const bool in_order =
          start > t_last_ || (start == t_last_ && (!rank_tie_break_ || rank >= rank_last_));
      if (!in_order || (a.kind == kF && a.stage == 0 && a.mb != stage0_forwards_) ||
          (a.kind == kW && a.mb != NextW(a.stage)) || mem_[rank] + a.mem > limit_ + tol_) {
        return false;
      }
      replayed.push_back({id, free_[rank], first_[rank], t_last_, rank_last_});
      Apply(id, start);
      t_last_ = start;
      rank_last_ = rank;
      ++next[rank];
    }
    return true;
  }

  // OptimalOptions::neighbourhood_nodes: rounds that keep the best plan's first k actions and
  // search every completion below them, for kNeighbourhoodRoundNodes nodes each. A round's
  // replay is charged 1 + k / 8 nodes. The nodes count apart from node_limit.
  void Neighbourhoods() {
    const int n = static_cast<int>(acts_.size());
    const int64_t begin = nodes_, end = nodes_ + options_.neighbourhood_nodes;
    internal::SearchRng rng(n);
    while (nodes_ < end) {
      const int k = rng.Uniform(n);
      nodes_ += 1 + k / 8;
      std::vector<Replayed> replayed;
      bool clock = false;  // the time limit, not the round's nodes, stopped the round
      if (ReplayPrefix(k, replayed)) {
        round_end_ = std::min(end, nodes_ + kNeighbourhoodRoundNodes);
        const double lb = LowerBound();
        if (lb < Cut()) Dfs(lb);
        clock = aborted_ && nodes_ < round_end_;
        round_end_ = 0;
      }
      for (auto it = replayed.rbegin(); it != replayed.rend(); ++it) {
        Undo(it->id, it->prev_free, it->prev_first, it->prev_t_last, it->prev_rank_last);
      }
      if (clock) break;  // aborted_ stays: the search after it stops at once
      aborted_ = false;
    }
    neighbourhood_spent_ = nodes_ - begin;
    // What the rounds left open or cut proves nothing about the whole tree.
    open_bound_ = std::numeric_limits<double>::infinity();
    cut_off_ = std::numeric_limits<double>::infinity();
  }

  bool OutOfBudget() {
    if (round_end_ > 0) {
      if (nodes_ >= round_end_) return true;
    } else if (options_.node_limit > 0 &&
               nodes_ - neighbourhood_spent_ >= budget_end_ * options_.node_limit) {
      return true;
    }
    if (options_.time_limit_seconds > 0 && (nodes_ & 255) == 0) {
      const double spent =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
      if (spent > budget_end_ * options_.time_limit_seconds) return true;
    }
    return false;
  }

  void Dfs(double node_bound) {
    if (done_ == static_cast<int>(acts_.size())) {
      double span = 0;
      for (int r = 0; r < p_; ++r) span = std::max(span, free_[r] - first_[r]);
      if (span < BestCut()) {
        best_ = span;
        best_orders_ = order_;
        improved_ = true;
      }
      return;
    }
    std::vector<Candidate> cands;
    for (int r = 0; r < p_; ++r) {
      for (int id : by_rank_[r]) {
        if (Scheduled(id)) continue;
        const Act& a = acts_[id];
        if (a.kind == kF && a.stage == 0 && a.mb != stage0_forwards_) continue;  // symmetry
        if (a.kind == kW && a.mb != NextW(a.stage)) continue;                      // W order
        if (mem_[r] + a.mem > limit_ + tol_) continue;
        const double ready = Ready(id);
        if (ready == kUnset) continue;
        const double start = std::max(free_[r], ready);
        if (start < t_last_) continue;
        if (start == t_last_ && rank_tie_break_ && r < rank_last_) continue;
        cands.push_back({start, a.kind == kB ? 0 : a.kind == kF ? 1 : 2, r, id});
      }
    }
    std::sort(cands.begin(), cands.end(), [](const Candidate& x, const Candidate& y) {
      if (x.start != y.start) return x.start < y.start;
      if (x.kind_order != y.kind_order) return x.kind_order < y.kind_order;
      return x.id < y.id;
    });
    for (const Candidate& c : cands) {
      if (aborted_ || OutOfBudget()) {
        aborted_ = true;
        open_bound_ = std::min(open_bound_, node_bound);
        return;
      }
      if (node_bound >= Cut()) return;  // the incumbent improved meanwhile
      ++nodes_;
      if (!relax_.empty()) {
        relax_credit_ = std::min(kRelaxationCredit, relax_credit_ + kRelaxationNodesPerNode);
      }
      const double prev_free = free_[c.rank], prev_first = first_[c.rank];
      const double prev_t_last = t_last_;
      const int prev_rank_last = rank_last_;
      Apply(c.id, c.start);
      t_last_ = c.start;
      rank_last_ = c.rank;
      const double lb = std::max(node_bound, LowerBound());
      if (lb < Cut()) {
        Dfs(lb);
      } else {
        NoteCut(lb);
      }
      Undo(c.id, prev_free, prev_first, prev_t_last, prev_rank_last);
    }
  }

  const Placement placement_;
  const int m_, S_, p_, K_;
  const double limit_, tol_, static_bound_;
  const OptimalOptions options_;
  bool rank_tie_break_ = true;
  std::vector<Act> acts_;
  std::vector<std::vector<int>> by_rank_;
  // Search state.
  std::vector<double> start_, end_, est_, free_, mem_, first_, rem_;
  std::vector<std::vector<int>> order_;
  std::vector<std::pair<double, double>> jobs_;  // LowerBound's scratch: (release, duration)
  int done_ = 0, stage0_forwards_ = 0, rank_last_ = 0;
  std::vector<std::vector<int>> b_order_;  // per stage, the microbatches of its Bs so far
  std::vector<int> w_done_;                // per stage, how many of its Ws are scheduled
  double t_last_ = 0;
  // Result.
  double best_ = 0, open_bound_ = std::numeric_limits<double>::infinity(), seconds_ = 0;
  // Iterative deepening: this pass's threshold, the least bound it cut, and the bound proven by
  // the passes that finished.
  double threshold_ = 0, cut_off_ = std::numeric_limits<double>::infinity(), proven_ = 0;
  double budget_end_ = 1;  // the share of the budget the current phase may use up to
  std::vector<std::vector<int>> best_orders_;
  bool aborted_ = false, improved_ = false;
  // The ranks' relaxations at the nodes (empty when off): per action its kind on its rank; per
  // rank and kind the action of each microbatch, and how many are done; RankRelaxationsBound's
  // scratch.
  std::vector<std::unique_ptr<RankRelaxation>> relax_;
  // Per rank past the first (null for rank 0): its relaxation as a link of a chain, and the
  // backward path from its first stage to rank 0's end.
  std::vector<std::unique_ptr<RankRelaxation>> chain_relax_;
  std::vector<double> chain_back_;
  std::vector<int> local_kind_;
  std::vector<std::vector<std::vector<int>>> kind_ids_;
  std::vector<std::vector<int>> local_done_;
  std::vector<std::vector<std::vector<double>>> ready_;
  std::vector<int64_t> ready_call_;  // per rank, the relax_calls_ and `now` ready_ was built for
  std::vector<double> ready_now_;
  int64_t relax_credit_ = kRelaxationNodes;  // relaxation nodes the searches may still take
  int64_t relax_calls_ = 0, relax_cuts_ = 0, relax_skipped_ = 0;  // AskRelaxations' counts
  int64_t nodes_ = 0;
  int64_t round_end_ = 0;            // a neighbourhood round's last node (0 = none)
  int64_t neighbourhood_spent_ = 0;  // nodes the rounds took (apart from node_limit)
  std::chrono::steady_clock::time_point t0_;
};

// Nodes for the per-rank relaxation and its chains: about half a second of this machine per
// second of budget (and the tree's own node limit when that is what bounds the search).
int64_t RankBoundNodes(const OptimalOptions& options) {
  if (options.time_limit_seconds > 0) {
    return std::clamp<int64_t>(static_cast<int64_t>(4e6 * options.time_limit_seconds), 100'000,
                               40'000'000);
  }
  return options.node_limit > 0 ? options.node_limit : 20'000'000;
}

// `plan` with its microbatches renamed so that the tree can replay its order: stage 0's Fs in
// order 0, 1, ..., and each stage's Ws in the order of its Bs. Microbatches are interchangeable,
// and two Ws of a stage swap freely (the k-th W of a stage runs after at least k of its Bs), so
// every time and every memory level is the same.
Plan CanonicalLabels(const Plan& plan) {
  Plan out = plan;
  std::vector<int> label(plan.num_microbatches, -1);
  int next = 0;
  for (const Action& a : plan.ranks[plan.placement.RankOf(0)]) {
    if (a.kind == ActionKind::kForward && a.stage == 0) label[a.microbatch] = next++;
  }
  if (next != plan.num_microbatches) return out;
  const int stages = plan.placement.num_stages();
  for (auto& rank : out.ranks) {
    std::vector<std::vector<int>> bs(stages);
    std::vector<size_t> ws(stages, 0);
    for (Action& a : rank) {
      a.microbatch = label[a.microbatch];
      if (a.kind == ActionKind::kBackwardInput) bs[a.stage].push_back(a.microbatch);
      if (a.kind == ActionKind::kBackwardWeight && ws[a.stage] < bs[a.stage].size()) {
        a.microbatch = bs[a.stage][ws[a.stage]++];
      }
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<OptimalResult> SolveOptimal(const Plan& incumbent, const CostModel& cost,
                                           double memory_limit, const OptimalOptions& options) {
  if (incumbent.IsLowered()) {
    return absl::InvalidArgumentError(
        "optimal: the incumbent plan has comm actions; pass the compute plan (before LowerComm)");
  }
  if (absl::Status st = cost.Check(incumbent.num_stages()); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("optimal: ", st.message()));
  }
  bool has_bw = false, has_split = false;
  for (const auto& rank : incumbent.ranks) {
    for (const Action& a : rank) {
      if (a.kind == ActionKind::kReduce) {
        return absl::InvalidArgumentError(
            "optimal: the incumbent plan has REDUCE actions; pass the compute plan");
      }
      has_bw = has_bw || a.kind == ActionKind::kBackwardFull;
      has_split = has_split || a.kind == ActionKind::kBackwardInput;
    }
  }
  if (has_bw && has_split) {
    return absl::InvalidArgumentError(
        "optimal: the incumbent plan mixes BW with B/W; the solver needs one kind of backward");
  }
  const ValidateOptions vopts{.cost = &cost, .memory_limit = memory_limit};
  if (absl::Status st = ValidatePlan(incumbent, vopts); !st.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("optimal: the incumbent plan is not valid under memory limit ", memory_limit,
                     ": ", st.message()));
  }
  absl::StatusOr<SimResult> sim = Simulate(incumbent, cost);
  if (!sim.ok()) return sim.status();
  const bool split = !has_bw;
  // The root's bound: the closed-form arguments, each rank's (and chain's) one-machine bound at
  // its first state (RankRootBound, no search), and each rank on its own with every other rank
  // unlimited, searched (core/rank_bound.h), which settles many shapes before the tree starts.
  const RankBound ranks =
      RankRelaxationBound(incumbent.placement, incumbent.num_microbatches, cost, memory_limit,
                          split, {.upper = sim->span, .node_limit = RankBoundNodes(options)});
  const double static_bound = std::max(
      {SpanLowerBound(incumbent.placement, incumbent.num_microbatches, cost, memory_limit, split),
       RankRootBound(incumbent.placement, incumbent.num_microbatches, cost, memory_limit, split),
       ranks.span});
  Solver solver(incumbent, cost, memory_limit, split, options, static_bound);
  const Plan canonical = CanonicalLabels(incumbent);
  std::vector<std::vector<int>> orders(incumbent.num_ranks());
  for (int r = 0; r < incumbent.num_ranks(); ++r) {
    for (const Action& a : canonical.ranks[r]) orders[r].push_back(solver.IdOf(a));
  }
  solver.Run(sim->span, std::move(orders));

  OptimalResult out;
  out.improved = solver.improved();
  out.incumbent_span = sim->span;
  out.plan = solver.improved() ? solver.BestPlan(incumbent) : incumbent;
  // The returned plan's span is the simulator's, as for every other plan.
  absl::StatusOr<SimResult> best_sim = Simulate(out.plan, cost);
  if (!best_sim.ok()) {
    return absl::InternalError(absl::StrCat("optimal: best plan: ", best_sim.status().message()));
  }
  out.span = best_sim->span;
  out.optimal = !solver.aborted();
  out.bound = std::min(out.span, solver.Bound());
  out.nodes = solver.nodes();
  out.seconds = solver.seconds();
  return out;
}

}  // namespace zpipe::core
