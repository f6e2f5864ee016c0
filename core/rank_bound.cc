#include "core/rank_bound.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <queue>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace zpipe::core {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// One kind of action on the rank (F, B or W of one of its stages): m of them, first-in
// first-out, the i-th ready `delay` after the i-th of `pred` ends (pred -1: always ready).
struct Kind {
  double dur = 0, mem = 0;
  int pred = -1;
  double delay = 0;
  std::vector<int> succ = {};
  // Whether its time counts towards the end the problem measures: not for the Ws when the end
  // is the last B of the rank's first stage (they may all run after it).
  bool counts = true;
  // For a stage's F, when the memory limit makes release times of it (MemoryReleases): the kind
  // (its B) whose ends free the memory it holds, and for a stage below the rank's last one, that
  // stage's F, which must have run for an earlier microbatch first; -1 otherwise.
  int freed_by = -1;
  int waits_for = -1;
};

// The states a search has settled, with the least time from each to the end that it proved.
// States with the same counts (so the same memory and work left) are kept together, because one
// bounds the other: from a state A with ready times a_i, and a state B with the same counts and
// ready times b_i, let d = max_i (a_i - b_i, 0). A can idle d and then be ahead of B in every queue
// (its times a_i - d are at most b_i; an earlier ready time never delays anything, and the memory
// is the same), so A's least time to the end is at most d plus B's: B needs at least A's least
// time minus d. With d = 0 (equal times, or A everywhere earlier) A's proven time holds for B as
// it is. A settled state that another bounds at least as well is dropped, so each group keeps
// only the states that prove something the others do not. Stored flat, a state costs its rest and
// ready times (8 bytes each) and no allocation of its own: about 80 bytes, where a hash map of
// vectors took 200.
class StateMemo {
 public:
  // `dominance` false: a state is bounded only by an equal one, found by reading its whole group
  // (for tests on small shapes).
  explicit StateMemo(bool dominance) : dominance_(dominance) {}

  // Whether some remembered state proves that the state (`counts`, `times`) reached at `t` ends
  // at `cut` or later.
  bool Prunes(const std::string& counts, const std::vector<double>& times, double t,
              double cut) const {
    auto it = groups_.find(counts);
    if (it == groups_.end()) return false;
    const std::vector<double>& group = it->second;
    const size_t n = times.size(), stride = n + 1;
    const size_t first = group.size() - std::min(group.size() / stride, ScanLimit()) * stride;
    for (size_t e = first; e < group.size(); e += stride) {
      // The entry proves enough when its d is at most `slack`.
      const double slack = t + group[e] - cut;
      if (slack < 0) continue;
      size_t i = 0;
      if (dominance_) {
        while (i < n && group[e + 1 + i] - times[i] <= slack) ++i;
      } else {
        while (i < n && group[e + 1 + i] == times[i]) ++i;
      }
      if (i == n) return true;
    }
    return false;
  }

  // Records that the state (`counts`, `times`) needs at least `rest` to the end.
  void Remember(const std::string& counts, const std::vector<double>& times, double rest) {
    std::vector<double>& group = groups_[counts];
    const size_t n = times.size(), stride = n + 1;
    for (size_t e = group.size() - std::min(group.size() / stride, ScanLimit()) * stride;
         e < group.size();) {
      const double* other = &group[e + 1];
      // d from the new state to the entry, and from the entry to the new state.
      double to_entry = 0, from_entry = 0;
      for (size_t i = 0; i < n; ++i) {
        to_entry = std::max(to_entry, times[i] - other[i]);
        from_entry = std::max(from_entry, other[i] - times[i]);
      }
      if (!dominance_ && (to_entry > 0 || from_entry > 0)) {
        e += stride;
        continue;
      }
      if (rest <= group[e] - from_entry) return;  // the entry already proves as much
      if (group[e] <= rest - to_entry) {          // the new state proves what the entry does
        std::copy(group.end() - stride, group.end(), group.begin() + e);
        group.resize(group.size() - stride);
        --size_;
        continue;
      }
      e += stride;
    }
    group.push_back(rest);
    group.insert(group.end(), times.begin(), times.end());
    ++size_;
  }

  // Remembered states.
  int64_t size() const { return size_; }

  void Clear() {
    groups_.clear();
    size_ = 0;
  }

 private:
  // How many of a group's latest entries a look-up reads. A group can grow to thousands of
  // incomparable states: on V-Half p = 8, m = 16 (skewed costs) 20 million nodes took 18 s reading
  // whole groups and 8 s reading 16 (as long as the equal-state memo took), while the latest
  // entries, the search's neighbourhood, make nearly all the cuts (ZB-1p p = 8, m = 32 skewed:
  // the same nodes within 0.1%). Entries left unread cost only the cuts they would have made (and
  // a duplicate of an equal state, which is harmless).
  size_t ScanLimit() const { return dominance_ ? 16 : std::numeric_limits<size_t>::max(); }

  absl::flat_hash_map<std::string, std::vector<double>> groups_;  // by counts: (rest, times...)*
  int64_t size_ = 0;
  const bool dominance_;
};

// A chain's rank ends at the last B of its first stage: kind k, with k stages. The Ws then do
// not count (they still free memory). Returns the kind.
int FinishForChain(std::vector<Kind>& kinds, bool split) {
  const int finish = static_cast<int>(kinds.size()) / (split ? 3 : 2);
  if (split) {
    for (size_t k = 2 * finish; k < kinds.size(); ++k) kinds[k].counts = false;
  }
  return finish;
}

// The earliest start of kind k's microbatch i (not done yet), at least `from`: one after another
// from `from` for the kind with no predecessor; a queued microbatch's ready time; else its
// predecessor's earliest end (est[pred][i]) plus the delay. With `fifo`, also no earlier than the
// kind's previous action's earliest end (est[k][i - 1]).
template <typename KindT>
double EarliestStart(const std::vector<KindT>& kinds, int k, int i, double from,
                     const std::vector<int>& done, const std::vector<std::vector<double>>& queue,
                     const std::vector<size_t>& head, bool fifo,
                     const std::vector<std::vector<double>>& est) {
  const KindT& kind = kinds[k];
  double e;
  if (kind.pred < 0) {
    e = from + (i - done[k]) * kind.dur;
  } else if (i < done[kind.pred]) {
    e = std::max(from, queue[k][head[k] + (i - done[k])]);
  } else {
    e = std::max(from, est[kind.pred][i] + kinds[kind.pred].dur + kind.delay);
  }
  if (fifo && i > done[k]) e = std::max(e, est[k][i - 1] + kind.dur);
  return e;
}

// The earliest starts of kind k's remaining actions, est[k][done[k]] .. est[k][m - 1]
// (EarliestStart). Kinds before their successors.
template <typename KindT>
void EarliestStarts(const std::vector<KindT>& kinds, int k, int m, double from,
                    const std::vector<int>& done, const std::vector<std::vector<double>>& queue,
                    const std::vector<size_t>& head, bool fifo,
                    std::vector<std::vector<double>>& est) {
  est[k].assign(m, 0);
  for (int i = done[k]; i < m; ++i) {
    est[k][i] = EarliestStart(kinds, k, i, from, done, queue, head, fifo, est);
  }
}

// What RankRelaxationBound's rounds ask of a problem: one rank's, or a pair's. Both search depth
// first from their first state (Dfs), cut at best_, over `kinds` kinds of m actions each run
// first-in first-out, and remember the states they settle.
class BoundProblem {
 public:
  BoundProblem(size_t kinds, int m, double limit, int64_t state_limit, bool dominance)
      : m_(m),
        limit_(limit),
        tol_(1e-9 * std::max(1.0, std::abs(limit))),
        state_limit_(state_limit),
        done_(kinds, 0),
        queue_(kinds),
        head_(kinds, 0),
        est_(kinds),
        memo_(dominance) {}
  virtual ~BoundProblem() = default;

  // The least span, at most `upper`: `upper` itself when no order is shorter. nullopt when the
  // search needed more than `nodes` more nodes, or when no order fits the memory limit. It may be
  // called again, with more nodes: the remembered states carry over, so the work an unfinished
  // call did is not lost.
  //
  // `cut_at_upper`: the search cuts at `upper` from the start (fast when the least span is at
  // least `upper`); otherwise only at the shortest order found so far, so it explores the early
  // subtrees under a loose cut, and what it remembers of them proves much more (their states'
  // least times, not just `upper`), which dominance (StateMemo) then spreads to their
  // neighbours. Where the least span is below `upper` that finds it several times faster: the
  // chain of rank 7 in ZB-V at p = 8, m = 16 settles in 10 million nodes, not 34 million.
  std::optional<double> Solve(double upper, int64_t nodes, bool cut_at_upper) {
    aborted_ = false;
    node_limit_ = nodes_ + nodes;
    const double initial = cut_at_upper ? std::min(upper, shortest_) : shortest_;
    best_ = initial;
    Dfs();
    if (best_ < initial) shortest_ = best_;  // (an unfinished search's orders are real too)
    if (aborted_) return std::nullopt;
    if (!std::isfinite(best_)) {  // no order at all: nothing fits the memory limit
      too_large_ = true;          // never settles
      return std::nullopt;
    }
    return std::min(best_, upper);
  }

  int64_t nodes() const { return nodes_; }
  int64_t states() const { return memo_.size(); }
  // The span of the shortest order Solve has found (infinity: none yet).
  double shortest() const { return shortest_; }
  // The search stopped at the state limit (or found no order that fits the memory limit).
  bool TooLarge() const { return too_large_; }

 protected:
  // From the current state (the first one, in Solve: Dfs undoes every step it takes).
  virtual void Dfs() = 0;

  double Cut() const {
    return std::isfinite(best_) ? best_ - 1e-12 * std::max(1.0, std::abs(best_)) : best_;
  }

  const int m_;
  const double limit_, tol_;
  const int64_t state_limit_;
  // The search's state: the count done of each kind, and the ready times of its queued
  // microbatches (the first head_[k] are taken), at time t_.
  std::vector<int> done_;
  std::vector<std::vector<double>> queue_;
  std::vector<size_t> head_;
  double t_ = 0;
  mutable std::vector<std::vector<double>> est_;  // the node bounds' earliest starts (scratch)
  std::string counts_;         // Key's scratch: the counts' bytes
  std::vector<double> times_;  // and the ready times
  StateMemo memo_;
  double best_ = kInf;
  double shortest_ = kInf;  // the shortest order Solve found (from the first state)
  int64_t nodes_ = 0, node_limit_ = 0;
  bool aborted_ = false, too_large_ = false;
};

// The memory limit as release times, for a rank's one-machine bound (RankProblem::OneMachine).
// KindsOf sets freed_by and waits_for only where no stage's microbatch on the rank ever holds
// less than nothing (M_F, M_F + M_B and M_F + M_B + M_W each at least 0), so every other stage
// there holds at least 0:
// - the i-th F of a stage (0-based) cannot start before the B of microbatch i - slots has ended,
//   for at most slots = L / M_F of the stage's microbatches hold their F's memory without their B;
// - where the rank has a later stage (a V's turn or last stage), not before the F there of
//   microbatch i - ahead has ended: a microbatch's B here comes after its F there, so the Fs here
//   of the microbatches that have not reached there cannot free their memory before the first of
//   them does, and that F needs its own; at most ahead = (L - M_F there) / M_F of them fit beside
//   it. ZB-V and V-Half: rank 0 runs at most L / M_F - 1 Fs of stage 0 before its first F of the
//   last stage (V-Half at p = 8, m = 32: rank 0's root bound 198.4 -> 199.4).
// (The pairs' bounds do without: with both releases the pairs' searches took the same nodes
// within 0.1%.)
class MemoryReleases {
 public:
  // `tol`: the problem's tolerance on the memory limit.
  MemoryReleases(const std::vector<Kind>& kinds, int m, double limit, double tol)
      : slots_(kinds.size(), m), ahead_(kinds.size(), m) {
    for (size_t k = 0; k < kinds.size(); ++k) {
      if (kinds[k].freed_by < 0 || kinds[k].mem <= 0) continue;
      // (At least 1: below that no F fits at all, and no plan exists to bound.)
      slots_[k] = Fit(limit + tol, kinds[k].mem, m);
      const int last = kinds[k].waits_for;
      if (last >= 0) {
        ahead_[k] = Fit(limit - std::max(0.0, kinds[last].mem) + tol, kinds[k].mem, m);
      }
    }
  }

  // The earliest start of kind k's microbatch i, `start` without the memory limit, given the
  // earliest starts `est` of the microbatches before it (not done yet).
  double Start(const std::vector<Kind>& kinds, int k, int i, double start,
               const std::vector<int>& done, const std::vector<std::vector<double>>& est) const {
    const int b = kinds[k].freed_by;
    if (b < 0) return start;
    const int before = i - slots_[k];  // the microbatch whose B must have ended
    if (before >= done[b]) start = std::max(start, est[b][before] + kinds[b].dur);
    const int last = kinds[k].waits_for;
    const int first = i - ahead_[k];  // the microbatch whose F there must have ended
    if (last >= 0 && first >= done[last]) {
      start = std::max(start, est[last][first] + kinds[last].dur);
    }
    return start;
  }

 private:
  static int Fit(double room, double each, int m) {
    return static_cast<int>(std::clamp(std::floor(room / each), 1.0, static_cast<double>(m)));
  }

  std::vector<int> slots_, ahead_;
};

}  // namespace

// The relaxed one-machine problem of one rank (see the header): branch and bound over which kind
// runs next, depth first, with the least span found so far as the cut. A state (the counts done
// and how long until each queued microbatch is ready) remembers the least time to the end that
// its explored subtree proved; reached again later, it (or a state it bounds: StateMemo) is cut
// when that time does not fit.
class RankProblem : public BoundProblem {
 public:
  // `finish_kind`: the problem ends when every action of that kind is done (-1: when all are).
  RankProblem(std::vector<Kind> kinds, int m, double limit, int64_t state_limit, bool dominance,
              bool keep_searching = false, int finish_kind = -1)
      : BoundProblem(kinds.size(), m, limit, state_limit, dominance),
        kinds_(std::move(kinds)),
        tail_(kinds_.size(), 0),
        releases_(kinds_, m, limit, tol_),
        keep_searching_(keep_searching),
        finish_kind_(finish_kind) {
    // tail_[k]: the least time from the start of a kind-k action to the end of the last action of
    // its microbatch on this rank (itself, then its successors here and the delays to them).
    for (int k = static_cast<int>(kinds_.size()) - 1; k >= 0; --k) Tail(k);
    for (size_t k = 0; k < kinds_.size(); ++k) left_ += m_ * Counted(k);
    // Kinds in an order where each comes after its predecessor.
    std::vector<bool> placed(kinds_.size(), false);
    while (topo_.size() < kinds_.size()) {
      for (size_t k = 0; k < kinds_.size(); ++k) {
        if (!placed[k] && (kinds_[k].pred < 0 || placed[kinds_[k].pred])) {
          placed[k] = true;
          topo_.push_back(static_cast<int>(k));
        }
      }
    }
  }

  // From a state of the rank (the counts done of each kind; for each kind with a predecessor, how
  // long from now until each of its queued microbatches may start, sorted), the least time to
  // the end, or `need` when that is at least `need`. When the search would pass `node_limit`
  // nodes (0: only the remembered states and the node bound are asked): the node bound of the
  // state, a weaker lower bound. The remembered states stay for the
  // next call (they are shift-invariant: a least time to the end).
  double SolveFrom(const std::vector<int>& done, const std::vector<std::vector<double>>& ready,
                   double need, int64_t node_limit) {
    t_ = 0;
    mem_ = 0;
    left_ = 0;
    for (size_t k = 0; k < kinds_.size(); ++k) {
      done_[k] = done[k];
      queue_[k] = ready[k];
      head_[k] = 0;
      mem_ += done[k] * kinds_[k].mem;
      left_ += (m_ - done[k]) * Counted(k);
    }
    best_ = need;
    // What the remembered states and the node bound say costs no search.
    Key();
    if (memo_.Prunes(counts_, times_, t_, Cut())) return need;
    const double bound = NodeBound();
    if (bound >= Cut() || node_limit <= 0) return std::min(need, bound);
    aborted_ = false;
    node_limit_ = nodes_ + node_limit;
    Dfs();
    if (!aborted_) return best_;
    aborted_ = false;
    return bound;
  }

 private:
  // The part of a kind's duration the measured end counts.
  double Counted(size_t k) const { return kinds_[k].counts ? kinds_[k].dur : 0; }

  double Tail(int k) {
    double after = 0;
    for (int s : kinds_[k].succ) after = std::max(after, kinds_[s].delay + Tail(s));
    return tail_[k] = Counted(k) + after;
  }

  // No completion from here ends before this.
  double NodeBound() const {
    double end = t_ + left_;
    for (size_t k = 0; k < kinds_.size(); ++k) {
      if (done_[k] == m_ || !kinds_[k].counts) continue;
      // The kind's remaining actions run one after another from now on, and the last one's
      // microbatch still has its tail to go.
      end = std::max(end, t_ + (m_ - done_[k]) * kinds_[k].dur + tail_[k] - kinds_[k].dur);
      if (kinds_[k].pred >= 0 && head_[k] < queue_[k].size()) {
        end = std::max(end, queue_[k].back() + tail_[k]);  // its last queued microbatch
      }
    }
    if (end >= Cut()) return end;
    return std::max(end, OneMachine());
  }

  // The preemptive one-machine bound over the remaining actions with their earliest starts
  // (release times): some action's release plus the work released at or after it. An action's
  // earliest start: now for the next F of the first stage, one F later for each after it; the
  // queued ready time; else its predecessor's earliest end plus the delay.
  double OneMachine() const {
    jobs_.clear();
    // Microbatch by microbatch: an F's memory release time is a B's of an earlier one.
    for (int k : topo_) est_[k].assign(m_, 0);
    for (int i = 0; i < m_; ++i) {
      for (int k : topo_) {
        if (i < done_[k]) continue;
        const double start =
            EarliestStart(kinds_, k, i, t_, done_, queue_, head_, /*fifo=*/false, est_);
        est_[k][i] = releases_.Start(kinds_, k, i, start, done_, est_);
      }
    }
    for (int k : topo_) {
      if (!kinds_[k].counts) continue;
      for (int i = done_[k]; i < m_; ++i) jobs_.push_back({est_[k][i], kinds_[k].dur});
    }
    std::sort(jobs_.begin(), jobs_.end(), [](const auto& a, const auto& b) { return a > b; });
    double end = 0, work = 0;
    for (const auto& [release, dur] : jobs_) {
      work += dur;
      end = std::max(end, release + work);
    }
    return end;
  }

  void Dfs() override {
    if (++nodes_ > node_limit_) aborted_ = true;
    if (aborted_) return;
    if (Finished()) {
      best_ = std::min(best_, t_);
      return;
    }
    Key();  // the memo first: a look-up costs less than OneMachine's sort
    if (memo_.Prunes(counts_, times_, t_, Cut())) return;
    if (NodeBound() >= Cut()) return;
    for (int k = 0; k < static_cast<int>(kinds_.size()) && !aborted_; ++k) {
      const Kind& kind = kinds_[k];
      if (done_[k] == m_ || (kind.pred >= 0 && done_[k] >= done_[kind.pred])) continue;
      if (mem_ + kind.mem > limit_ + tol_) continue;
      const double now = t_;
      const double start = kind.pred < 0 ? now : std::max(now, queue_[k][head_[k]]);
      if (start + tail_[k] >= Cut()) continue;
      Apply(k, start + kind.dur);
      Dfs();
      Undo(k, now);
    }
    if (aborted_) return;
    // Every completion from here either was found (and best_ is at most its end) or was cut at
    // best_: none ends before best_ now. (The children overwrote the key's scratch: rebuild it.)
    Key();
    memo_.Remember(counts_, times_, best_ - t_);
    if (memo_.size() > state_limit_) {
      // A search that keeps going between calls starts remembering afresh; a single one stops.
      if (keep_searching_) {
        memo_.Clear();
      } else {
        aborted_ = too_large_ = true;
      }
    }
  }

  bool Finished() const {
    if (finish_kind_ >= 0) return done_[finish_kind_] == m_;
    for (int n : done_) {
      if (n != m_) return false;
    }
    return true;
  }

  // The counts done and, for every kind that waits on another rank, how long until each of its
  // queued microbatches is ready (0 once it is): all the future depends on. Into counts_, times_.
  void Key() {
    counts_.clear();
    times_.clear();
    counts_.assign(reinterpret_cast<const char*>(done_.data()), done_.size() * sizeof(int));
    for (size_t k = 0; k < kinds_.size(); ++k) {
      if (kinds_[k].delay <= 0) continue;  // ready when its predecessor on this rank ended
      for (size_t i = head_[k]; i < queue_[k].size(); ++i) {
        times_.push_back(std::max(0.0, queue_[k][i] - t_));
      }
    }
  }

  void Apply(int k, double end) {
    const Kind& kind = kinds_[k];
    if (kind.pred >= 0) ++head_[k];
    for (int s : kind.succ) queue_[s].push_back(end + kinds_[s].delay);
    ++done_[k];
    mem_ += kind.mem;
    left_ -= Counted(k);
    t_ = end;
  }

  void Undo(int k, double now) {
    const Kind& kind = kinds_[k];
    if (kind.pred >= 0) --head_[k];
    for (int s : kind.succ) queue_[s].pop_back();
    --done_[k];
    mem_ -= kind.mem;
    left_ += Counted(k);
    t_ = now;
  }

  const std::vector<Kind> kinds_;
  std::vector<double> tail_;
  std::vector<int> topo_;
  MemoryReleases releases_;
  mutable std::vector<std::pair<double, double>> jobs_;  // OneMachine's: (release, duration)
  double mem_ = 0, left_ = 0;
  const bool keep_searching_;
  const int finish_kind_;
};

namespace {

// A pair's relaxation (see the header): the ranks listed exact, every other rank unlimited.
// A kind is an F, B (BW) or W of one stage on either rank; a microbatch's kinds form the chain
// F(0) .. F(S-1), B(S-1) .. B(0) restricted to the two ranks' stages, with the work of the stages
// in between (and T_comm per cross-rank edge) as a fixed delay, and each W after its B.
struct PairKind {
  int machine = 0;  // the index of its rank in the problem's ranks (0: rank 0)
  double dur = 0, mem = 0;
  int pred = -1;
  double delay = 0;
  std::vector<int> succ = {};
};

// `ranks` lists the exact ranks, rank 0 (which holds stage 0) first; machine j is ranks[j].
std::vector<PairKind> PairKindsOf(const Placement& placement, const CostModel& cost, bool split,
                                  const std::vector<int>& ranks) {
  const int S = placement.num_stages();
  auto machine = [&](int s) {
    auto it = std::find(ranks.begin(), ranks.end(), placement.RankOf(s));
    return it == ranks.end() ? -1 : static_cast<int>(it - ranks.begin());
  };
  auto backward = [&](int s) {
    return split ? cost.stages[s].b : cost.stages[s].b + cost.stages[s].w;
  };
  std::vector<PairKind> kinds;
  std::vector<int> b_kind(S, -1);
  int prev = -1;
  double delay = 0;
  // Step i of the chain: F(i) for i < S, then B(2S - 1 - i).
  for (int i = 0; i < 2 * S; ++i) {
    const bool forward = i < S;
    const int s = forward ? i : 2 * S - 1 - i;
    const int before = i - 1 < S ? i - 1 : 2 * S - i;  // the previous step's stage
    if (i > 0 && i != S && placement.RankOf(before) != placement.RankOf(s)) delay += cost.comm;
    const double dur = forward ? cost.stages[s].f : backward(s);
    if (machine(s) < 0) {
      delay += dur;
      continue;
    }
    const StageCost& sc = cost.stages[s];
    kinds.push_back({.machine = machine(s),
                     .dur = dur,
                     .mem = forward ? sc.mem_f : (split ? sc.mem_b : sc.mem_b + sc.mem_w),
                     .pred = prev,
                     .delay = prev < 0 ? 0 : delay});
    prev = static_cast<int>(kinds.size()) - 1;
    delay = 0;
    if (!forward) b_kind[s] = prev;
  }
  if (split) {
    for (int s = 0; s < S; ++s) {
      if (b_kind[s] < 0) continue;
      kinds.push_back({.machine = machine(s),
                       .dur = cost.stages[s].w,
                       .mem = cost.stages[s].mem_w,
                       .pred = b_kind[s]});
    }
  }
  for (int k = 0; k < static_cast<int>(kinds.size()); ++k) {
    if (kinds[k].pred >= 0) kinds[kinds[k].pred].succ.push_back(k);
  }
  return kinds;
}

// The least time by which the preemptive one-machine schedule of `jobs` (release, duration,
// tail) delivers every job: each job's end plus its tail, at the latest. Jackson's rule (run the
// released job with the longest tail, preempting when a longer one arrives) is optimal with
// preemption, so no order of the jobs on one machine delivers them all sooner. Sorts `jobs`.
double PreemptiveDelivery(std::vector<std::array<double, 3>>& jobs) {
  std::sort(jobs.begin(), jobs.end());
  std::priority_queue<std::pair<double, double>> ready;  // (tail, work left)
  double now = 0, out = 0;
  size_t next = 0;
  while (next < jobs.size() || !ready.empty()) {
    if (ready.empty()) now = std::max(now, jobs[next][0]);
    while (next < jobs.size() && jobs[next][0] <= now) {
      ready.push({jobs[next][2], jobs[next][1]});
      ++next;
    }
    auto [tail, left] = ready.top();
    ready.pop();
    const double until = next < jobs.size() ? jobs[next][0] : kInf;
    if (now + left <= until) {
      now += left;
      out = std::max(out, now + tail);
    } else {
      ready.push({tail, left - (until - now)});
      now = until;
    }
  }
  return out;
}

}  // namespace

// Several ranks at once (see the header: RankBoundOptions::pairs), each a machine with its own
// memory limit, every other rank unlimited. Each kind runs first-in first-out, as in RankProblem
// (two ready actions of one kind swap their microbatches from there on: the same times, the same
// memory). Branch and bound over the order in which the machines' actions start: the tree
// appends one action at a time, each starting at the latest of now (the start of the action
// appended before it), its machine's free time and its input's ready time. Appended in the order
// of their starts, any schedule's actions each start no later than in it, so the least end of
// rank 0 the tree finds is exact. Clamping at now only adds orders that idle, and makes the
// future of a node depend on nothing but its counts and how long from now until each queued
// microbatch is ready and each machine is free: the state, remembered with dominance (StateMemo)
// as in RankProblem. (A tie-break on the machine among equal starts, as the exact solver's tree
// has, would not be sound here: a state's shifted completion may tie where the original did
// not.) The problem ends when rank 0's last action does; rank 0 starts at 0, as in every plan,
// so its least end bounds rank 0's span.
class PairProblem : public BoundProblem {
 public:
  // `kinds` on machines 0 .. (the largest machine a kind names).
  PairProblem(std::vector<PairKind> kinds, int m, double limit, int64_t state_limit,
              bool dominance)
      : BoundProblem(kinds.size(), m, limit, state_limit, dominance),
        kinds_(std::move(kinds)),
        reach_(kinds_.size(), -kInf) {
    int machines = 0;
    for (const PairKind& kind : kinds_) machines = std::max(machines, kind.machine + 1);
    jobs_.resize(machines);
    free_.assign(machines, 0);
    mem_.assign(machines, 0);
    // reach_[k]: the least time from the start of a kind-k action to the end of the last action
    // of its microbatch on rank 0 (-infinity: none after it). Successors come later in kinds_.
    for (int k = static_cast<int>(kinds_.size()) - 1; k >= 0; --k) {
      const PairKind& kind = kinds_[k];
      if (kind.machine == 0) reach_[k] = kind.dur;
      for (int s : kind.succ) {
        reach_[k] = std::max(reach_[k], kind.dur + kinds_[s].delay + reach_[s]);
      }
      if (kind.machine == 0) left0_ += m_ * kind.dur;
    }
  }

 private:
  bool Finished() const {
    for (size_t k = 0; k < kinds_.size(); ++k) {
      if (kinds_[k].machine == 0 && done_[k] != m_) return false;
    }
    return true;
  }

  // No completion from here ends rank 0 before this: rank 0's work left after it is free, and on
  // each machine the preemptive one-machine schedule of its remaining actions, released at their
  // earliest starts (the chains' delays from what is done, every machine unlimited), each with
  // the least time from its end to the end of its microbatch's last action on rank 0.
  double NodeBound() const {
    const double end = std::max(t_, free_[0]) + left0_;
    if (end >= Cut()) return end;
    for (auto& jobs : jobs_) jobs.clear();
    for (int k = 0; k < static_cast<int>(kinds_.size()); ++k) {
      const PairKind& kind = kinds_[k];
      EarliestStarts(kinds_, k, m_, std::max(t_, free_[kind.machine]), done_, queue_, head_,
                     /*fifo=*/true, est_);
      if (!std::isfinite(reach_[k])) continue;
      for (int i = done_[k]; i < m_; ++i) {
        jobs_[kind.machine].push_back({est_[k][i], kind.dur, reach_[k] - kind.dur});
      }
    }
    double bound = end;
    for (auto& jobs : jobs_) bound = std::max(bound, PreemptiveDelivery(jobs));
    return bound;
  }

  void Dfs() override {
    if (++nodes_ > node_limit_) aborted_ = true;
    if (aborted_) return;
    if (Finished()) {
      best_ = std::min(best_, free_[0]);
      return;
    }
    Key();
    if (memo_.Prunes(counts_, times_, t_, Cut())) return;
    if (NodeBound() >= Cut()) return;
    for (int k = 0; k < static_cast<int>(kinds_.size()) && !aborted_; ++k) {
      const PairKind& kind = kinds_[k];
      const int mc = kind.machine;
      if (done_[k] == m_ || (kind.pred >= 0 && done_[k] >= done_[kind.pred])) continue;
      if (mem_[mc] + kind.mem > limit_ + tol_) continue;
      const double start =
          std::max({t_, free_[mc], kind.pred < 0 ? 0.0 : queue_[k][head_[k]]});
      if (std::isfinite(reach_[k]) && start + reach_[k] >= Cut()) continue;
      const double now = t_, free = free_[mc];
      Apply(k, start);
      Dfs();
      Undo(k, now, free);
    }
    if (aborted_) return;
    Key();
    memo_.Remember(counts_, times_, best_ - t_);
    if (memo_.size() > state_limit_) aborted_ = too_large_ = true;
  }

  // The counts done; how long from now until each queued microbatch is ready (for the kinds
  // whose input comes from elsewhere or later than their machine frees) and until each machine
  // is free, 0 once it is.
  void Key() {
    counts_.assign(reinterpret_cast<const char*>(done_.data()), done_.size() * sizeof(int));
    times_.clear();
    for (size_t k = 0; k < kinds_.size(); ++k) {
      const PairKind& kind = kinds_[k];
      if (kind.pred < 0) continue;
      if (kinds_[kind.pred].machine == kind.machine && kind.delay <= 0) continue;
      for (size_t i = head_[k]; i < queue_[k].size(); ++i) {
        times_.push_back(std::max(0.0, queue_[k][i] - t_));
      }
    }
    for (double free : free_) times_.push_back(std::max(0.0, free - t_));
  }

  void Apply(int k, double start) {
    const PairKind& kind = kinds_[k];
    if (kind.pred >= 0) ++head_[k];
    const double end = start + kind.dur;
    for (int s : kind.succ) queue_[s].push_back(end + kinds_[s].delay);
    ++done_[k];
    mem_[kind.machine] += kind.mem;
    if (kind.machine == 0) left0_ -= kind.dur;
    free_[kind.machine] = end;
    t_ = start;
  }

  void Undo(int k, double now, double free) {
    const PairKind& kind = kinds_[k];
    if (kind.pred >= 0) --head_[k];
    for (int s : kind.succ) queue_[s].pop_back();
    --done_[k];
    mem_[kind.machine] -= kind.mem;
    if (kind.machine == 0) left0_ += kind.dur;
    free_[kind.machine] = free;
    t_ = now;
  }

  const std::vector<PairKind> kinds_;
  std::vector<double> reach_;
  mutable std::vector<std::vector<std::array<double, 3>>> jobs_;  // (release, duration, tail)
  double left0_ = 0;
  std::vector<double> free_, mem_;
};

namespace {

// The kinds of rank r's actions and the delays between them when no other rank queues.
// `memory_releases`: whether the Fs get release times from the memory limit (freed_by).
std::vector<Kind> KindsOf(const Placement& placement, const CostModel& cost, bool split, int r,
                          bool memory_releases = true) {
  const int S = placement.num_stages();
  std::vector<int> local;
  for (int s = 0; s < S; ++s) {
    if (placement.RankOf(s) == r) local.push_back(s);
  }
  auto edge = [&](int s) {  // T_comm of the edge s -> s + 1
    return placement.RankOf(s) == placement.RankOf(s + 1) ? 0.0 : cost.comm;
  };
  auto backward = [&](int s) {
    return split ? cost.stages[s].b : cost.stages[s].b + cost.stages[s].w;
  };
  // Forward work from the end of F(a) to the start of F(b), a < b, and backward work from the end
  // of B(b) to the start of B(a): the stages strictly between, and every edge from a to b.
  auto forward_between = [&](int a, int b) {
    double d = 0;
    for (int x = a; x < b; ++x) d += (x > a ? cost.stages[x].f : 0) + edge(x);
    return d;
  };
  auto backward_between = [&](int a, int b) {
    double d = 0;
    for (int x = a; x < b; ++x) d += (x > a ? backward(x) : 0) + edge(x);
    return d;
  };
  const int k = static_cast<int>(local.size());
  // Kinds: F_j = j, B_j = k + j, W_j = 2k + j.
  std::vector<Kind> kinds(split ? 3 * k : 2 * k);
  for (int j = 0; j < k; ++j) {
    const StageCost& sc = cost.stages[local[j]];
    kinds[j] = {.dur = sc.f, .mem = sc.mem_f};
    if (j > 0) {
      kinds[j].pred = j - 1;
      kinds[j].delay = forward_between(local[j - 1], local[j]);
    }
    Kind& b = kinds[k + j];
    b.dur = backward(local[j]);
    b.mem = split ? sc.mem_b : sc.mem_b + sc.mem_w;
    if (j == k - 1) {  // the round trip through the stages above
      b.pred = k - 1;
      b.delay = forward_between(local[j], S - 1) + (local[j] < S - 1 ? cost.stages[S - 1].f : 0) +
                (local[j] < S - 1 ? backward_between(local[j], S - 1) + backward(S - 1) : 0);
    } else {
      b.pred = k + j + 1;
      b.delay = backward_between(local[j], local[j + 1]);
    }
    if (split) kinds[2 * k + j] = {.dur = sc.w, .mem = sc.mem_w, .pred = k + j, .delay = 0};
  }
  for (int i = 0; i < static_cast<int>(kinds.size()); ++i) {
    if (kinds[i].pred >= 0) kinds[kinds[i].pred].succ.push_back(i);
  }
  // The memory limit gives each F a release time (RankProblem::MemoryLimitedStart) when no stage's
  // microbatch ever holds less than nothing: an F's memory, then after its B, then after its W,
  // each at least 0. Then the rank holds at least (F's done - B's done) * M_F of any one stage.
  bool releases = memory_releases;
  for (int j = 0; j < k; ++j) {
    const StageCost& sc = cost.stages[local[j]];
    releases = releases && sc.mem_f >= 0 && sc.mem_f + sc.mem_b >= 0 &&
                  sc.mem_f + sc.mem_b + sc.mem_w >= 0;
  }
  for (int j = 0; releases && j < k; ++j) {
    if (kinds[j].mem <= 0) continue;
    kinds[j].freed_by = k + j;
    if (j < k - 1) kinds[j].waits_for = k - 1;
  }
  return kinds;
}

// A unit's stages as the last round trip (below) counts them: stage j's durations, and what its
// microbatch holds with its B still to come (a) and with only its W left (c).
struct RoundTripStages {
  std::vector<double> f, b, w, a, c;
  double work = 0;       // every action of every microbatch, Ws included
  double own_f = 0;      // the first microbatch's Fs
  double own_mem = 0;    // what its Fs hold together
  double f_path = 0;     // from its first F's start to its last F's end, with the delays between
  double turn = 0;       // its last stage's B after its F
  double drain = 0;      // from that F's end to the end of its B of the first stage
};

// nullopt where a stage's microbatch may hold less than nothing, after any of its actions.
std::optional<RoundTripStages> RoundTripStagesOf(const std::vector<Kind>& kinds, int k, int m,
                                                 bool split) {
  RoundTripStages st;
  for (int j = 0; j < k; ++j) {
    const Kind& fk = kinds[j];
    const Kind& bk = kinds[k + j];
    const double w = split ? kinds[2 * k + j].dur : 0;
    const double after = fk.mem + bk.mem + (split ? kinds[2 * k + j].mem : 0);
    if (fk.mem < 0 || fk.mem + bk.mem < 0 || after < 0) return std::nullopt;
    st.f.push_back(fk.dur);
    st.b.push_back(bk.dur);
    st.w.push_back(w);
    st.a.push_back(fk.mem);
    st.c.push_back(fk.mem + bk.mem);
    st.work += m * (fk.dur + bk.dur + w);
    st.own_f += fk.dur;
    st.own_mem += fk.mem;
    st.f_path += fk.dur + (j > 0 ? fk.delay : 0);
  }
  st.turn = kinds[2 * k - 1].delay;
  st.drain = st.turn;
  for (int j = 0; j < k; ++j) st.drain += st.b[j] + (j < k - 1 ? kinds[k + j].delay : 0);
  return st;
}

// The first fill. Before the first B only Fs run, at most memory's worth of them (the first
// microbatch's, then the most F time per unit of memory), while that B waits for the first
// microbatch's Fs and its round trip: the idle no plan avoids there.
double FirstFillIdle(const RoundTripStages& st, int m, double limit) {
  double per_memory = 0;  // F time per unit of memory, at best (infinite: an F holding nothing)
  for (size_t j = 0; j < st.f.size(); ++j) {
    per_memory = std::max(per_memory, st.a[j] > 0 ? st.f[j] / st.a[j] : kInf);
  }
  const double f_work =
      std::isfinite(per_memory)
          ? std::min(m * st.own_f, st.own_f + std::max(0.0, limit - st.own_mem) * per_memory)
          : m * st.own_f;
  return std::max(0.0, st.f_path + st.turn - f_work);
}

// When the last F of the last stage ends, the microbatch stages still waiting for their B (n_a per
// stage, at least the last microbatch's) hold a each and those with only their W left c each,
// within the limit. Over every such split (whole n_a; the Cs filled by W time per unit of memory
// as a fractional knapsack, which can only say more): for a chain, the most W time it can leave
// after its end, W(A and C) - max(0, drain - B(A)); for a rank, the most work left then,
// B(A) + W(A and C), enough to end the count once it fills `enough`. `room`: the limit with the
// problems' tolerance, for the whole counts. nullopt where the splits are too many to count.
std::optional<double> MostLeftAtLastF(const RoundTripStages& st, int m, double limit, double room,
                                      bool chain, double enough) {
  const int k = static_cast<int>(st.f.size());
  std::vector<int> most(k);
  double ways = 1;
  for (int j = 0; j < k; ++j) {
    most[j] = st.a[j] > 0 ? static_cast<int>(std::min<double>(m, std::floor(room / st.a[j]))) : m;
    ways *= most[j];
  }
  if (ways > 1e5) return std::nullopt;
  std::vector<int> by_ratio(k);
  for (int j = 0; j < k; ++j) by_ratio[j] = j;
  std::sort(by_ratio.begin(), by_ratio.end(), [&](int x, int y) {
    return st.w[x] * std::max(st.c[y], 0.0) > st.w[y] * std::max(st.c[x], 0.0);
  });
  double best = -kInf;
  std::vector<int> n_a(k, 1);
  std::function<void(int, double)> count = [&](int j, double held) {
    if (best >= enough) return;
    if (j < k) {
      for (int n = 1; n <= most[j] && held + n * st.a[j] <= room; ++n) {
        n_a[j] = n;
        count(j + 1, held + n * st.a[j]);
      }
      return;
    }
    double left = std::max(0.0, limit - held), ws = 0, bs = 0;
    for (int x = 0; x < k; ++x) {
      ws += n_a[x] * st.w[x];
      bs += n_a[x] * st.b[x];
    }
    for (int x : by_ratio) {
      const int can = m - n_a[x];
      if (can <= 0) continue;
      const double take = st.c[x] > 0 ? std::min<double>(can, left / st.c[x]) : can;
      ws += take * st.w[x];
      left = std::max(0.0, left - take * std::max(st.c[x], 0.0));
    }
    best = std::max(best, chain ? ws + std::min(bs, st.drain) - st.drain : ws + bs);
  };
  count(0, 0);
  if (!std::isfinite(best)) return std::nullopt;
  return best;
}

// The last round trip, in closed form (see the header): a lower bound on a unit's least time,
// `chain` to the last B of its first stage (the Ws do not count), else to its last action. 0
// where it does not apply: a stage whose microbatch may hold less than nothing, or too many ways
// to fill the memory to count. When the last F of the last stage ends, at t, every F has run;
// after t come the Bs still to run and the last microbatch's drain. So a chain ends no earlier
// than its work plus the first fill's idle less the W time it leaves for after its end, and a
// rank no earlier than its work plus that idle plus what of the drain (and the last microbatch's
// W of the first stage) the work left at t cannot fill. The first fill's idle counts only where
// not every F fits in memory at once: then a B runs before t.
double LastRoundTripBound(const std::vector<Kind>& kinds, int m, double limit, bool split,
                          bool chain) {
  const int k = static_cast<int>(kinds.size()) / (split ? 3 : 2);
  if (k == 0 || m <= 0) return 0;
  const std::optional<RoundTripStages> st = RoundTripStagesOf(kinds, k, m, split);
  const double room = limit + 1e-9 * std::max(1.0, std::abs(limit));
  if (!st || st->own_mem > room) return 0;  // (not even one microbatch fits: no plan to bound)
  const double first_idle = m * st->own_mem > room ? FirstFillIdle(*st, m, limit) : 0;
  const double full_drain = st->drain + st->w[0];
  const std::optional<double> left =
      MostLeftAtLastF(*st, m, limit, room, chain, chain ? kInf : full_drain);
  if (!left) return 0;
  return chain ? st->work + first_idle - *left
               : st->work + first_idle + std::max(0.0, full_drain - *left);
}

}  // namespace

RankRelaxation::RankRelaxation(const Placement& placement, int microbatches,
                               const CostModel& cost, double memory_limit, bool split_backward,
                               int rank, int64_t state_limit, bool chain) {
  for (int s = 0; s < placement.num_stages(); ++s) {
    if (placement.RankOf(s) == rank) stages_.push_back(s);
  }
  std::vector<Kind> kinds = KindsOf(placement, cost, split_backward, rank);
  for (const Kind& kind : kinds) preds_.push_back(kind.pred);
  const int finish = chain ? FinishForChain(kinds, split_backward) : -1;
  last_round_trip_ =
      LastRoundTripBound(kinds, microbatches, memory_limit, split_backward, chain);
  problem_ = std::make_unique<RankProblem>(std::move(kinds), microbatches, memory_limit,
                                           state_limit, /*dominance=*/true,
                                           /*keep_searching=*/true, finish);
}

RankRelaxation::~RankRelaxation() = default;

int RankRelaxation::num_kinds() const { return static_cast<int>(preds_.size()); }

int RankRelaxation::PredecessorOf(int kind) const { return preds_[kind]; }

double RankRelaxation::LeastRest(const std::vector<int>& done,
                                 const std::vector<std::vector<double>>& ready, double need,
                                 int64_t node_limit) {
  return problem_->SolveFrom(done, ready, need, node_limit);
}

int64_t RankRelaxation::nodes() const { return problem_->nodes(); }

namespace {

// How many of the budget's nodes one node of a pair's search counts as (RankRelaxationBound).
constexpr int64_t kPairNodeWeight = 4;

// One problem of RankRelaxationBound: a rank's relaxation, measured to its last action (`chain`
// false) or to the last B of its first stage, with what the bound adds to its least time.
struct Unit {
  int rank = 0;
  bool chain = false;
  bool pair = false;  // rank 0 and `rank` together, measured to rank 0's end (PairProblem)
  double offset = 0;
};

// The units: each rank, and each rank past the first stage's as a link of a chain (see the
// header): rank 0 spans at least the forward path from its F of stage 0 to the rank's first
// stage, that rank's first start to its last B there, and the backward path down to stage 0 with
// rank 0's W after it.
std::vector<Unit> UnitsOf(const Placement& placement, const CostModel& cost, bool split,
                          const RankBoundOptions& options) {
  const int p = placement.num_ranks();
  std::vector<Unit> units;
  for (int r = 0; r < p; ++r) units.push_back({.rank = r});
  if (options.pairs && placement.RankOf(0) == 0) {
    if (p >= 2) units.push_back({.rank = 1, .pair = true});
    if (p >= 3) units.push_back({.rank = p - 1, .pair = true});
  }
  if (!options.chains) return units;
  auto edge = [&](int s) {
    return placement.RankOf(s) == placement.RankOf(s + 1) ? 0.0 : cost.comm;
  };
  std::vector<int> first_stage(p, -1);
  for (int s = placement.num_stages() - 1; s >= 0; --s) first_stage[placement.RankOf(s)] = s;
  for (int r = 0; r < p; ++r) {
    if (first_stage[r] <= 0) continue;
    double offset = split ? cost.stages[0].w : 0;
    for (int s = 0; s < first_stage[r]; ++s) {
      const StageCost& sc = cost.stages[s];
      offset += sc.f + (split ? sc.b : sc.b + sc.w) + 2 * edge(s);
    }
    units.push_back({.rank = r, .chain = true, .offset = offset});
  }
  return units;
}

}  // namespace

double RankRootBound(const Placement& placement, int microbatches, const CostModel& cost,
                     double memory_limit, bool split_backward) {
  double bound = 0;
  for (const Unit& unit : UnitsOf(placement, cost, split_backward, {.pairs = false})) {
    std::vector<Kind> kinds = KindsOf(placement, cost, split_backward, unit.rank);
    const int finish = unit.chain ? FinishForChain(kinds, split_backward) : -1;
    const int n = static_cast<int>(kinds.size());
    const double closed =
        LastRoundTripBound(kinds, microbatches, memory_limit, split_backward, unit.chain);
    RankProblem problem(std::move(kinds), microbatches, memory_limit, /*state_limit=*/0,
                        /*dominance=*/true, /*keep_searching=*/false, finish);
    const double root = problem.SolveFrom(std::vector<int>(n, 0),
                                          std::vector<std::vector<double>>(n), kInf,
                                          /*node_limit=*/0);
    bound = std::max(bound, std::max(root, closed) + unit.offset);
  }
  return bound;
}

RankBound RankRelaxationBound(const Placement& placement, int microbatches, const CostModel& cost,
                              double memory_limit, bool split_backward,
                              const RankBoundOptions& options) {
  RankBound out;
  const std::vector<Unit> units = UnitsOf(placement, cost, split_backward, options);
  const int n = static_cast<int>(units.size());
  std::vector<std::unique_ptr<BoundProblem>> problems;
  for (int u = 0; u < n; ++u) {
    if (units[u].pair) {
      problems.push_back(std::make_unique<PairProblem>(
          PairKindsOf(placement, cost, split_backward, {0, units[u].rank}), microbatches,
          memory_limit, options.state_limit, options.dominance));
      continue;
    }
    std::vector<Kind> kinds =
        KindsOf(placement, cost, split_backward, units[u].rank, options.memory_releases);
    const int finish = units[u].chain ? FinishForChain(kinds, split_backward) : -1;
    // The unit's last round trip holds whether or not its search settles.
    if (options.last_round_trip) {
      const double closed = LastRoundTripBound(kinds, microbatches, memory_limit, split_backward,
                                               units[u].chain);
      out.span = std::max(out.span, std::min(options.upper, closed + units[u].offset));
    }
    problems.push_back(std::make_unique<RankProblem>(
        std::move(kinds), microbatches, memory_limit, options.state_limit,
        options.dominance, /*keep_searching=*/false, finish));
  }
  // Rounds: every unit not settled yet gets a share that doubles each round and goes on where its
  // last round stopped (BoundProblem::Solve), so an easy unit costs little and a hard one gets
  // most of the budget. In the first round half of the share cuts at `upper`, which settles the
  // units that prove the plan optimal at once; the rest, and every later round, search without
  // that cut, which finds a least span below it several times faster (both add to what the unit
  // remembers). After the first round the chain through the deepest rank (the largest offset:
  // it sees the most of the pipeline, and is nearly always the one that lifts the bound) gets
  // three times as much as all the other chains together: V-Half at p = 8, m = 16 gets 117.2
  // from 8 million nodes, where the ranks alone say 103.4.
  std::vector<bool> settled(n, false);
  // A unit that reaches `upper` returns it less its offset; added back, it may round below.
  const double reached = std::isfinite(options.upper)
                             ? options.upper - 1e-9 * std::max(1.0, std::abs(options.upper))
                             : options.upper;
  const int64_t first_share = std::max<int64_t>(1000, options.node_limit / (16 * n));
  int64_t nodes = 0, states = 0;
  for (int64_t share = first_share;; share *= 2) {
    int open = 0, open_chains = 0, deepest = -1;
    for (int u = 0; u < n; ++u) {
      open += !settled[u];
      if (settled[u] || !units[u].chain) continue;
      ++open_chains;
      if (deepest < 0 || units[u].offset > units[deepest].offset) deepest = u;
    }
    // A unit that reached `upper` already says all the bound may say.
    if (open == 0 || nodes >= options.node_limit || out.span >= reached) break;
    for (int u = 0; u < n; ++u) {
      const int64_t left = options.node_limit - nodes;
      if (settled[u]) continue;
      if (left <= 0 || out.span >= reached) break;
      const Unit& unit = units[u];
      BoundProblem& problem = *problems[u];
      const int64_t states_before = problem.states();
      // A pair's node (two machines, a preemptive bound on each) takes about 4 times a rank's
      // time, and counts so against the budget.
      const int64_t weight = unit.pair ? kPairNodeWeight : 1;
      auto solve = [&](int64_t unit_nodes, bool cut_at_upper) {
        const int64_t before = problem.nodes();
        const int64_t allowed = std::min(unit_nodes, options.node_limit - nodes) / weight;
        if (allowed <= 0) return std::optional<double>();
        std::optional<double> span =
            problem.Solve(options.upper - unit.offset, allowed, cut_at_upper);
        nodes += (problem.nodes() - before) * weight;
        return span;
      };
      std::optional<double> span;
      if (share == first_share) {
        // Half cut at `upper`, half not.
        span = solve(share / 2, /*cut_at_upper=*/true);
        if (!span && !problem.TooLarge() && nodes < options.node_limit) {
          span = solve(share / 2, /*cut_at_upper=*/false);
        }
      } else {
        span = solve(u == deepest ? 3 * open_chains * share : share, /*cut_at_upper=*/false);
      }
      states += problem.states() - states_before;
      out.states = std::max(out.states, problem.states());
      if (problem.TooLarge()) settled[u] = true;  // out of states: more nodes would not help
      // An order it found already says that the unit cannot lift the bound: leave it.
      if (problem.shortest() + unit.offset <= out.span) settled[u] = true;
      // The units' remembered states together stay within `state_limit` too.
      if (states > options.state_limit) settled[u] = true;
      if (span) {
        settled[u] = true;
        if (unit.pair) {
          ++out.pairs_solved;
        } else {
          ++(unit.chain ? out.chains_solved : out.ranks_solved);
        }
        out.span = std::max(out.span, *span + unit.offset);
      }
      if (settled[u]) {  // its memory goes back
        states -= problem.states();
        problems[u].reset();
      }
    }
  }
  out.nodes = nodes;
  return out;
}

}  // namespace zpipe::core
