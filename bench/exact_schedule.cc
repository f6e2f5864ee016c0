// A throwaway research tool, not product code: branch and bound for the shortest span of a
// ZB-1p / ZB-2p / ZB-V plan on one row of bench/reference_schedules.tsv, to learn whether the
// search's (and the reference generator's) span there is optimal.
//
// Exact over per-rank orders of F, B and W in which every stage runs its forwards, its
// backwards and its weight passes each in microbatch order (FIFO per stage and kind; Ws of one
// stage are interchangeable, so for W this loses nothing), timed with OrderProblem::Evaluate's
// rules (an action starts when its rank is free and its inputs have arrived; memory is a
// running sum per rank that must stay within the limit).
//
// The tree fixes the next action of the unblocked rank that is free first; an action whose
// input is not scheduled yet blocks its rank until it is (all ranks blocked = deadlock). Every
// rank's first start is fixed (its first forward of microbatch 0), so the span only grows with
// completion times: a node is pruned by a lower bound (relaxed earliest times of the remaining
// forwards and backwards, then per rank the preemptive one-machine schedule of what is left with
// those release times and the chains each action still starts as tails), and by dominance
// (same counts, every time that matters no later than a node already expanded).
// The bound at the root only counts the k-th F, B or W of a stage, so it holds for any order in
// which every rank starts with the first microbatch to reach it (per-rank spans reward a rank
// that starts late, so an order that holds its first forward back is not covered); `all`
// prints it for every row beside core's SpanLowerBound and our span at --budget.
//   zpipe_exact_schedule KIND P M [--budget S] [--seconds S] [--nodes N] [--slack X]
//                        [--data PATH] [--row K]
//   zpipe_exact_schedule all 0 0 [--budget S]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "bench/reference_rows.h"
#include "core/internal/order_search.h"
#include "core/planning.h"
#include "flags/flags.h"

namespace zpipe {
namespace {

using Row = bench::ReferenceRow;

constexpr double kUnknown = -1;
enum Kind { kF = 0, kB = 1, kW = 2 };

struct Op {
  int kind = 0, stage = 0, mb = 0;
};

class Solver {
 public:
  Solver(const Row& row, double incumbent, double seconds, long node_limit)
      : p_(row.p),
        v_(row.kind == "zb-v" ? 2 : 1),
        S_(p_ * v_),
        m_(row.m),
        row_(row),
        best_(incumbent),
        deadline_(std::chrono::steady_clock::now() +
                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                      std::chrono::duration<double>(seconds))),
        node_limit_(node_limit) {
    rank_.resize(S_);
    for (int s = 0; s < S_; ++s) rank_[s] = s < p_ ? s : 2 * p_ - 1 - s;
    stages_.resize(p_);
    for (int r = 0; r < p_; ++r) {
      stages_[r].push_back(r);
      if (v_ == 2) stages_[r].push_back(2 * p_ - 1 - r);
    }
    dur_[kF] = row.f;
    dur_[kB] = row.b;
    dur_[kW] = row.w;
    mem_[kF] = row.mem_f;
    mem_[kB] = row.mem_b;
    mem_[kW] = row.mem_w;
    tol_ = 1e-9 * std::max(1.0, std::abs(row.limit));
    first_.resize(p_);
    for (int r = 0; r < p_; ++r) first_[r] = r * (row.f + row.comm);
    // Tails: after B(s, i) ends, its W runs on the same rank and B(s - 1, i) ... B(0, i) each
    // on theirs, each followed by its W; after F(s, i) ends, the forward chain to the last
    // stage and then the backward chain. Each bounds (end of some rank) - (its first start).
    qb_.assign(S_, 0);
    qf_.assign(S_, 0);
    for (int s = 0; s < S_; ++s) {
      qb_[s] = row.w - first_[rank_[s]];
      if (s > 0) qb_[s] = std::max(qb_[s], Edge(s - 1) + row.b + qb_[s - 1]);
    }
    for (int s = S_ - 1; s >= 0; --s) {
      qf_[s] = row.b + qb_[s];
      if (s + 1 < S_) qf_[s] = std::max(qf_[s], Edge(s) + row.f + qf_[s + 1]);
    }
  }

  double Edge(int s) const { return rank_[s] == rank_[s + 1] ? 0 : row_.comm; }

  struct State {
    std::vector<int> n;           // [stage * 3 + kind]: committed count
    std::vector<double> end;      // [(stage * 2 + kind) * m + mb] for F, B
    std::vector<double> free_at;  // per rank
    std::vector<double> mem;      // per rank
    std::vector<int> blocked;     // per rank: -1 or index into the rank's op list
    std::vector<int> done;        // per rank: ops committed
  };

  // Runs the search; returns whether it finished (the result is then optimal).
  bool Run() {
    State st;
    st.n.assign(S_ * 3, 0);
    st.end.assign(size_t(S_) * 2 * m_, kUnknown);
    st.free_at.assign(p_, 0);
    st.mem.assign(p_, 0);
    st.blocked.assign(p_, -1);
    st.done.assign(p_, 0);
    ops_.assign(p_, {});
    for (int r = 0; r < p_; ++r) ops_[r].reserve(3 * v_ * m_);
    total_per_rank_ = 3 * v_ * m_;
    root_bound_ = LowerBound(st);
    Dfs(st);
    return !aborted_;
  }

  double best() const { return best_; }
  double root_bound() const { return root_bound_; }
  long nodes() const { return nodes_; }
  bool improved() const { return improved_; }
  const std::vector<std::vector<Op>>& best_orders() const { return best_orders_; }

 private:
  double& EndOf(State& st, int kind, int s, int mb) const {
    return st.end[(size_t(s) * 2 + kind) * m_ + mb];
  }
  double EndOf(const State& st, int kind, int s, int mb) const {
    return st.end[(size_t(s) * 2 + kind) * m_ + mb];
  }

  // Ready time of `op` from its inputs, or kUnknown when one is not timed yet.
  double Ready(const State& st, const Op& op) const {
    const int s = op.stage, i = op.mb;
    if (op.kind == kF) {
      if (s == 0) return 0;
      const double d = EndOf(st, kF, s - 1, i);
      return d == kUnknown ? kUnknown : d + Edge(s - 1);
    }
    if (op.kind == kW) return EndOf(st, kB, s, i);
    const double d = EndOf(st, kF, s, i);
    if (d == kUnknown) return kUnknown;
    if (s + 1 == S_) return d;
    const double u = EndOf(st, kB, s + 1, i);
    return u == kUnknown ? kUnknown : std::max(d, u + Edge(s));
  }

  void Time(State& st, int r, const Op& op, double ready) {
    const double start = std::max(st.free_at[r], ready);
    const double end = start + dur_[op.kind];
    if (op.kind != kW) EndOf(st, op.kind, op.stage, op.mb) = end;
    st.free_at[r] = end;
  }

  void Resolve(State& st) const {
    for (bool changed = true; changed;) {
      changed = false;
      for (int r = 0; r < p_; ++r) {
        if (st.blocked[r] < 0) continue;
        const Op& op = ops_[r][st.blocked[r]];
        const double ready = Ready(st, op);
        if (ready == kUnknown) continue;
        const_cast<Solver*>(this)->Time(st, r, op, ready);
        st.blocked[r] = -1;
        changed = true;
      }
    }
  }

  // Relaxed earliest ends of every remaining F and B; a lower bound on the span.
  double LowerBound(const State& st) const {
    std::vector<double> t(p_);
    for (int r = 0; r < p_; ++r) {
      t[r] = st.free_at[r];
    }
    double lb = 0;
    std::vector<double> ef(size_t(S_) * m_), eb(size_t(S_) * m_);
    for (int s = 0; s < S_; ++s) {
      for (int i = 0; i < m_; ++i) {
        double e = EndOf(st, kF, s, i);
        if (e == kUnknown) {
          double ready = s == 0 ? 0 : ef[size_t(s - 1) * m_ + i] + Edge(s - 1);
          ready = std::max(ready, t[rank_[s]]);
          if (i > 0) ready = std::max(ready, ef[size_t(s) * m_ + i - 1]);
          e = ready + row_.f;
        }
        ef[size_t(s) * m_ + i] = e;
      }
    }
    for (int s = S_ - 1; s >= 0; --s) {
      const int r = rank_[s];
      for (int i = 0; i < m_; ++i) {
        double e = EndOf(st, kB, s, i);
        if (e == kUnknown) {
          double ready = ef[size_t(s) * m_ + i];
          if (s + 1 < S_) ready = std::max(ready, eb[size_t(s + 1) * m_ + i] + Edge(s));
          ready = std::max(ready, t[r]);
          if (i > 0) ready = std::max(ready, eb[size_t(s) * m_ + i - 1]);
          e = ready + row_.b;
          // From this B's start on, the stage still runs (m - i) Bs and as many Ws.
          lb = std::max(lb, ready + (m_ - i) * (row_.b + row_.w) - first_[r]);
        }
        eb[size_t(s) * m_ + i] = e;
      }
    }
    // Per rank, a one-machine bound with heads and tails: the preemptive schedule that runs
    // the released action with the longest tail first (Jackson) minimises max(C_j + q_j), and
    // q_j bounds what the span still needs after action j ends (chains through other ranks).
    for (int r = 0; r < p_; ++r) {
      struct Job {
        double release, duration, tail;
      };
      std::vector<Job> jobs;
      for (int s : stages_[r]) {
        for (int i = 0; i < m_; ++i) {
          const size_t k = size_t(s) * m_ + i;
          if (EndOf(st, kF, s, i) == kUnknown) jobs.push_back({ef[k] - row_.f, row_.f, qf_[s]});
          if (EndOf(st, kB, s, i) == kUnknown) jobs.push_back({eb[k] - row_.b, row_.b, qb_[s]});
          if (i >= st.n[s * 3 + kW]) jobs.push_back({eb[k], row_.w, -first_[r]});
        }
      }
      std::sort(jobs.begin(), jobs.end(),
                [](const Job& a, const Job& b) { return a.release < b.release; });
      std::vector<std::pair<double, double>> heap;  // (tail, remaining)
      double now = 0;
      size_t next = 0;
      while (next < jobs.size() || !heap.empty()) {
        if (heap.empty()) now = std::max(now, jobs[next].release);
        while (next < jobs.size() && jobs[next].release <= now) {
          heap.push_back({jobs[next].tail, jobs[next].duration});
          std::push_heap(heap.begin(), heap.end());
          ++next;
        }
        std::pop_heap(heap.begin(), heap.end());
        auto& top = heap.back();
        const double until = next < jobs.size() ? jobs[next].release : now + top.second;
        const double run = std::min(top.second, until - now);
        now += run;
        top.second -= run;
        if (top.second <= 0) {
          lb = std::max(lb, now + top.first);
          heap.pop_back();
        } else {
          std::push_heap(heap.begin(), heap.end());
        }
      }
    }
    // Timed actions whose chains are still open.
    for (int s = 0; s < S_; ++s) {
      for (int i = 0; i < m_; ++i) {
        const double e = EndOf(st, kB, s, i);
        if (e != kUnknown)
          lb = std::max(lb, e + (s > 0 && EndOf(st, kB, s - 1, i) == kUnknown
                                     ? Edge(s - 1) + row_.b + qb_[s - 1]
                                     : 0));
      }
    }
    for (int r = 0; r < p_; ++r) {
      double rem = 0;
      for (int s : stages_[r]) {
        rem += (m_ - st.n[s * 3 + kF]) * row_.f + (m_ - st.n[s * 3 + kB]) * row_.b +
               (m_ - st.n[s * 3 + kW]) * row_.w;
      }
      double tr = st.free_at[r];
      if (st.blocked[r] >= 0) tr += dur_[ops_[r][st.blocked[r]].kind];
      lb = std::max(lb, tr + rem - first_[r]);
      // The last W of each stage follows that stage's last B.
      for (int s : stages_[r]) {
        if (st.n[s * 3 + kW] < m_)
          lb = std::max(lb, eb[size_t(s) * m_ + m_ - 1] + row_.w - first_[r]);
      }
    }
    return lb;
  }

  // Dominance: true when a node with the same counts and no later times was expanded.
  bool Dominated(const State& st) {
    std::string key(reinterpret_cast<const char*>(st.n.data()), st.n.size() * sizeof(int));
    for (int r = 0; r < p_; ++r) {
      const int b = st.blocked[r] < 0
                        ? -1
                        : ops_[r][st.blocked[r]].kind * 1000 + ops_[r][st.blocked[r]].stage;
      key.append(reinterpret_cast<const char*>(&b), sizeof b);
    }
    std::vector<double> times(st.free_at);
    for (int s = 0; s < S_; ++s) {
      const int nf = st.n[s * 3 + kF], nb = st.n[s * 3 + kB], nw = st.n[s * 3 + kW];
      const int nf_next = s + 1 < S_ ? st.n[(s + 1) * 3 + kF] : m_;
      for (int i = std::min(nf_next, nb); i < nf; ++i) times.push_back(EndOf(st, kF, s, i));
      const int nb_prev = s > 0 ? st.n[(s - 1) * 3 + kB] : m_;
      for (int i = std::min(nb_prev, nw); i < nb; ++i) times.push_back(EndOf(st, kB, s, i));
    }
    // A blocked action's inputs that are already timed count too.
    for (int r = 0; r < p_; ++r) {
      if (st.blocked[r] < 0) continue;
      const Op& op = ops_[r][st.blocked[r]];
      if (op.kind == kB) times.push_back(EndOf(st, kF, op.stage, op.mb));
    }
    std::vector<std::vector<double>>& seen = memo_[key];
    for (const auto& u : seen) {
      if (u.size() != times.size()) continue;
      bool le = true;
      for (size_t k = 0; k < u.size() && le; ++k) le = u[k] <= times[k];
      if (le) return true;
    }
    if (seen.size() < 16) {
      seen.push_back(std::move(times));
      ++memo_entries_;
    }
    return false;
  }

  void Dfs(const State& in) {
    if (aborted_) return;
    if (++nodes_ % 4096 == 0 &&
        (std::chrono::steady_clock::now() > deadline_ || nodes_ > node_limit_)) {
      aborted_ = true;
      return;
    }
    State st = in;
    Resolve(st);
    bool finished = true;
    for (int r = 0; r < p_; ++r)
      finished = finished && st.done[r] == total_per_rank_ && st.blocked[r] < 0;
    if (finished) {
      double span = 0;
      for (int r = 0; r < p_; ++r) span = std::max(span, st.free_at[r] - first_[r]);
      if (span < best_ - 1e-9 * best_) {
        best_ = span;
        improved_ = true;
        best_orders_ = ops_;
      }
      return;
    }
    if (LowerBound(st) >= best_ - 1e-9 * best_) return;
    if (memo_entries_ < 40'000'000 && Dominated(st)) return;
    int r = -1;
    for (int k = 0; k < p_; ++k) {
      if (st.blocked[k] >= 0 || st.done[k] == total_per_rank_) continue;
      if (r < 0 || st.free_at[k] < st.free_at[r]) r = k;
    }
    if (r < 0) return;  // every unfinished rank waits: deadlock
    // Candidates: B before W before F, later chunk first (tends to find short plans early).
    for (int kind : {kB, kW, kF}) {
      for (int c = v_ - 1; c >= 0; --c) {
        const int s = stages_[r][c];
        const int n = st.n[s * 3 + kind];
        if (n >= m_) continue;
        if (kind == kB && n >= st.n[s * 3 + kF]) continue;
        if (kind == kW && n >= st.n[s * 3 + kB]) continue;
        // A same-rank input not yet in the order would deadlock.
        if (kind == kF && s > 0 && rank_[s - 1] == r && st.n[(s - 1) * 3 + kF] <= n) continue;
        if (kind == kB && s + 1 < S_ && rank_[s + 1] == r && st.n[(s + 1) * 3 + kB] <= n) continue;
        if (st.mem[r] + mem_[kind] > row_.limit + tol_) continue;
        const Op op{kind, s, n};
        State next = st;
        next.n[s * 3 + kind]++;
        next.mem[r] += mem_[kind];
        next.done[r]++;
        ops_[r].push_back(op);
        const double ready = Ready(next, op);
        if (ready == kUnknown) {
          next.blocked[r] = static_cast<int>(ops_[r].size()) - 1;
        } else {
          Time(next, r, op, ready);
        }
        Dfs(next);
        ops_[r].pop_back();
      }
    }
  }

  int p_, v_, S_, m_;
  Row row_;
  std::vector<int> rank_;
  std::vector<std::vector<int>> stages_;
  double dur_[3], mem_[3], tol_;
  std::vector<double> first_, qb_, qf_;
  int total_per_rank_ = 0;
  std::vector<std::vector<Op>> ops_, best_orders_;
  double best_, root_bound_ = 0;
  bool improved_ = false, aborted_ = false;
  std::chrono::steady_clock::time_point deadline_;
  long node_limit_, nodes_ = 0;
  std::unordered_map<std::string, std::vector<std::vector<double>>> memo_;
  long memo_entries_ = 0;
};

absl::StatusOr<core::PlannedSchedule> Plan(const Row& row, double budget) {
  return bench::PlanReferenceRow(row, budget, /*seed=*/1);
}

// Compact per-rank order: F/B/W letters with a chunk mark (' for chunk 1) and microbatch.
void PrintOrders(const std::vector<std::vector<Op>>& orders, int p) {
  for (int r = 0; r < static_cast<int>(orders.size()); ++r) {
    std::printf("  r%d:", r);
    for (const Op& op : orders[r]) {
      std::printf(" %c%s%d", "FBW"[op.kind], op.stage >= p ? "'" : "", op.mb);
    }
    std::printf("\n");
  }
}

int Main(int argc, char** argv) {
  double budget = 1, seconds = 60;
  int64_t nodes = int64_t{1} << 40;
  int which = 0;
  double slack = 0;  // > 0: start above ours, to check that the solver finds ours itself
  std::string data = bench::DefaultReferenceData();
  std::unique_ptr<CLI::App> app = flags::NewApp(
      "zpipe_exact_schedule",
      "zpipe_exact_schedule KIND P M [--budget S] [--seconds S] [--nodes N] [--slack X] "
      "[--row K] [--data FILE]",
      "  branch and bound for the optimal span of one reference row (KIND all, P and M 0: the "
      "root\n  bound of every row)");
  flags::AddNumber(*app, "--budget", &budget, "our search's seconds (default 1)");
  flags::AddNumber(*app, "--seconds", &seconds, "the solver's seconds (default 60)");
  flags::AddInteger(*app, "--nodes", &nodes, 1, std::numeric_limits<int64_t>::max(),
                    "the solver's node limit");
  flags::AddNumber(*app, "--slack", &slack, "start this fraction above our span");
  flags::AddInteger(*app, "--row", &which, 0, std::numeric_limits<int>::max(),
                    "which of the matching rows (default 0)");
  flags::AddText(*app, "--data", &data, "FILE", "the reference rows");
  std::vector<std::string> operands;
  if (std::optional<int> exit =
          flags::ParseMain(*app, flags::Args(argc, argv), std::cout, std::cerr, &operands)) {
    return *exit;
  }
  if (operands.size() != 3) {
    std::cerr << flags::UsageLine(*app);
    return 2;
  }
  const std::string kind = operands[0];
  const int p = std::atoi(operands[1].c_str()), m = std::atoi(operands[2].c_str());
  if (kind == "all") {
    // Root bounds only, every row: the one-machine bound beside core's and our span.
    for (const Row& row : bench::ReadReferenceRows(data)) {
      absl::StatusOr<core::PlannedSchedule> ours = Plan(row, budget);
      if (!ours.ok()) continue;
      Solver solver(row, 0, 0, 0);
      solver.Run();
      // The root bound assumes every rank starts with the microbatch its upstream rank started
      // with (the first to reach it).
      bool early_starts = true;
      for (int r = 1; r < row.p; ++r) {
        early_starts = early_starts &&
                       ours->plan.ranks[r][0].microbatch == ours->plan.ranks[r - 1][0].microbatch;
      }
      std::printf("%-6s %3d %4d ref %8.0f ours %8.0f core_bound %8.0f root_bound %8.0f %s\n",
                  row.kind.c_str(), row.p, row.m, row.span, ours->sim.span, ours->span_lower_bound,
                  solver.root_bound(),
                  !early_starts                                         ? "late start"
                  : solver.root_bound() > ours->sim.span * (1 + 1e-12)  ? "BOUND>OURS(bug)"
                  : solver.root_bound() >= ours->sim.span * (1 - 1e-12) ? "ours optimal"
                                                                        : "");
    }
    return 0;
  }
  int seen = 0;
  for (const Row& row : bench::ReadReferenceRows(data)) {
    if (row.kind != kind || row.p != p || row.m != m || seen++ != which) continue;
    absl::StatusOr<core::PlannedSchedule> ours = Plan(row, budget);
    if (!ours.ok()) {
      std::fprintf(stderr, "plan failed: %s\n", std::string(ours.status().message()).c_str());
      return 1;
    }
    const double our_span = ours->sim.span;
    std::printf("%s p=%d m=%d: reference %.0f, ours(budget %g) %.0f, bound %.0f\n", kind.c_str(), p,
                m, row.span, budget, our_span, ours->span_lower_bound);
    std::printf("  our orders (' = chunk 1):\n");
    {
      std::vector<std::vector<Op>> orders(p);
      for (int r = 0; r < p; ++r) {
        for (const core::Action& a : ours->plan.ranks[r]) {
          const int k = a.kind == core::ActionKind::kForward         ? kF
                        : a.kind == core::ActionKind::kBackwardInput ? kB
                                                                     : kW;
          orders[r].push_back({k, a.stage, a.microbatch});
        }
      }
      PrintOrders(orders, p);
    }
    Solver solver(row, std::min(our_span, row.span) * (1 + slack), seconds, nodes);
    const auto t0 = std::chrono::steady_clock::now();
    const bool complete = solver.Run();
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf(
        "  exact (FIFO orders): root bound %.0f; %s %.0f after %ld nodes, %.1f s%s\n",
        solver.root_bound(), complete ? "optimum" : "best found (search cut off)", solver.best(),
        solver.nodes(), secs,
        solver.best() < our_span * (1 - 1e-12) ? " [BETTER than ours]" : " [not below ours]");
    if (solver.improved()) {
      PrintOrders(solver.best_orders(), p);
      // Cross-check the solver's timing with core's (OrderProblem::Evaluate).
      const core::Placement placement =
          row.kind == "zb-v" ? core::Placement::VShape(p) : core::Placement::Linear(p);
      core::CostModel cost = ours->cost;
      const core::internal::OrderProblem problem(placement, m, cost, row.limit);
      core::internal::Orders orders(p);
      for (int r = 0; r < p; ++r) {
        for (const Op& op : solver.best_orders()[r]) {
          orders[r].push_back(op.kind == kF   ? core::Action::F(op.stage, op.mb)
                              : op.kind == kB ? core::Action::B(op.stage, op.mb)
                                              : core::Action::W(op.stage, op.mb));
        }
      }
      const std::optional<core::internal::OrderScore> score = problem.Evaluate(orders);
      std::printf("  core's Evaluate of that order: %s %.0f\n", score ? "span" : "infeasible",
                  score ? score->span : 0.0);
    }
    return 0;
  }
  std::fprintf(stderr, "no row %s p=%d m=%d #%d in %s\n", kind.c_str(), p, m, which, data.c_str());
  return 1;
}

}  // namespace
}  // namespace zpipe

int main(int argc, char** argv) { return zpipe::Main(argc, argv); }
