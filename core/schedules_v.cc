// V-shape schedules: ZB-V, V-Half, V-Min and DualPipeV.
//
// All four place stage s < p on rank s (chunk 0) and stage s >= p on rank 2p-1-s (chunk 1), so a
// microbatch runs down the ranks on chunk 0, turns around locally on rank p-1 and comes back up on
// chunk 1; its backward retraces the V. Rank 0 holds both the first and the last stage.
//
// ZB-V, V-Half and V-Min come from one memory-bounded list scheduler (VGreedy): an event-driven
// simulation that, whenever a rank is free, starts the best ready action under a policy
// (forwards or backwards first, which chunk first, whether to wait briefly for an action on
// the V's return path rather than start a chunk-0 forward or a W), and fills idle time with
// deferred Ws, or runs them when memory blocks a forward. A chunk-0 forward is admitted only
// while the rank keeps room for at least one chunk-1 forward after it. That rule makes the
// scheduler deadlock-free under any limit that holds one microbatch's two chunks:
// microbatches pass through each rank's chunk-1 slot in order, and the slot always drains (the
// chunk-1 backward only needs ranks closer to rank 0, which drain the same way), so every
// microbatch admitted on chunk 0 can finish. Policies that reserve more chunk-1 slots on ranks
// far from rank 0 flow better but may get stuck under tight limits; they are simply skipped
// then, and the one-slot policy always completes. Each policy is simulated and the plan with
// the shortest makespan (docs/design.md's span: the longest of the ranks' own spans) is kept;
// DualPipeV's fixed order competes as one more ZB-V candidate. Finally the best F/B order and
// DualPipeV's are replayed with their Ws placed anew (VGreedy's fixed-order mode: a W goes
// where its rank would otherwise idle, unless a backward is due, or where memory needs it),
// which removes most of what the greedy loses in the cool-down. The three schedules differ only
// in their memory limit: ZB-V the 1F1B-equal 2p chunk activations, V-Half and V-Min about a
// half and a third of that (DefaultMemoryLimit). With equal F/B/W and no comm, ZB-V is
// bubble-free.
//
// The greedy pass runs every candidate below on small problems and a short list of the usual
// winners as p * m grows (p = 32, m = 256 in about 35 ms); a search budget (SearchOptions) runs
// the rest, seeded random policies and core/internal/order_search's local moves.
//
// DualPipeV follows DeepSeek's step structure (warm-up forwards, then F/B pairs that DualPipe
// would overlap, zero-bubble Ws in the cool-down). Without overlap each pair runs one after the
// other; both orders of the pair are tried and the shorter plan within the memory limit kept.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <deque>
#include <iterator>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "core/internal/generators.h"
#include "core/internal/order_search.h"
#include "core/span_bound.h"
#include "core/status_field.h"

namespace zpipe::core::internal {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kUnset = -1;  // "not started yet" in the time tables (times are >= 0)

// The shape and the per-stage costs, flattened for the inner loops.
struct VProblem {
  int p = 1;
  int m = 1;
  int S = 2;
  std::vector<double> f, b, w, mf, mb, mw;
  double comm = 0;
  double limit = 0;
  double eps = 0;  // tolerance of memory comparisons

  VProblem(const ScheduleRequest& req, double memory_limit)
      : p(req.pipeline),
        m(req.microbatches),
        S(2 * req.pipeline),
        comm(req.cost.comm),
        limit(memory_limit) {
    double scale = 0;
    for (const StageCost& c : req.cost.stages) {
      f.push_back(c.f);
      b.push_back(c.b);
      w.push_back(c.w);
      mf.push_back(c.mem_f);
      mb.push_back(c.mem_b);
      mw.push_back(c.mem_w);
      scale = std::max({scale, std::abs(c.mem_f), std::abs(c.mem_b), std::abs(c.mem_w)});
    }
    eps = 1e-9 * std::max(1.0, scale) * std::max(1, m);
  }

  int RankOf(int s) const { return s < p ? s : S - 1 - s; }
  int StageOf(int r, int chunk) const { return chunk == 0 ? r : S - 1 - r; }
  // Latency of the edge s -> s + 1: T_comm unless it is the local turn-around on rank p-1.
  double Edge(int s) const { return s == p - 1 ? 0 : comm; }
  size_t Idx(int s, int i) const { return size_t(s) * m + i; }
};

// ------------------------------------------------------------------------------------------
// Evaluation: a fast simulator for V-shape compute plans, used to rank candidate plans. It
// follows the rules of core::Simulate (per-rank order, dependency edges, T_comm across ranks).

struct Score {
  // docs/design.md's span (core::Simulate's SimResult::span): the longest of the ranks' own spans,
  // each from the start of the rank's first action to the end of its last.
  double rank_span = kInf;
  double span = kInf;  // first start of any rank to last end of any rank
  double peak = 0;     // max over ranks of peak memory
  bool Better(const Score& o) const {
    if (rank_span != o.rank_span) return rank_span < o.rank_span;
    if (span != o.span) return span < o.span;
    return peak < o.peak;
  }
};

// Returns false when the orders deadlock.
bool Evaluate(const VProblem& pb, const Orders& orders, Score* out) {
  const int p = pb.p;
  std::vector<double> f_end(size_t(pb.S) * pb.m, kUnset), b_end(f_end);
  std::vector<size_t> cursor(p, 0);
  std::vector<double> now(p, 0), first(p, kInf), mem(p, 0);
  Score score;
  score.peak = 0;
  size_t remaining = 0;
  for (const auto& o : orders) remaining += o.size();
  bool progress = true;
  while (remaining > 0 && progress) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      const auto& order = orders[r];
      while (cursor[r] < order.size()) {
        const Action& a = order[cursor[r]];
        const int s = a.stage, i = a.microbatch;
        double ready = 0, dur = 0, dmem = 0;
        if (a.kind == ActionKind::kForward) {
          if (s > 0) {
            const double t = f_end[pb.Idx(s - 1, i)];
            if (t == kUnset) break;
            ready = t + pb.Edge(s - 1);
          }
          dur = pb.f[s];
          dmem = pb.mf[s];
        } else if (a.kind == ActionKind::kBackwardInput) {
          const double tf = f_end[pb.Idx(s, i)];
          if (tf == kUnset) break;
          ready = tf;
          if (s < pb.S - 1) {
            const double t = b_end[pb.Idx(s + 1, i)];
            if (t == kUnset) break;
            ready = std::max(ready, t + pb.Edge(s));
          }
          dur = pb.b[s];
          dmem = pb.mb[s];
        } else {  // W
          const double t = b_end[pb.Idx(s, i)];
          if (t == kUnset) break;
          ready = t;
          dur = pb.w[s];
          dmem = pb.mw[s];
        }
        const double start = std::max(now[r], ready);
        const double end = start + dur;
        if (a.kind == ActionKind::kForward) f_end[pb.Idx(s, i)] = end;
        if (a.kind == ActionKind::kBackwardInput) b_end[pb.Idx(s, i)] = end;
        first[r] = std::min(first[r], start);
        now[r] = end;
        mem[r] += dmem;
        score.peak = std::max(score.peak, mem[r]);
        ++cursor[r];
        --remaining;
        progress = true;
      }
    }
  }
  if (remaining > 0) return false;
  double lo = kInf, hi = 0;
  score.rank_span = 0;
  for (int r = 0; r < p; ++r) {
    if (orders[r].empty()) continue;
    lo = std::min(lo, first[r]);
    hi = std::max(hi, now[r]);
    score.rank_span = std::max(score.rank_span, now[r] - first[r]);
  }
  score.span = lo <= hi ? hi - lo : 0;
  *out = score;
  return true;
}

// ------------------------------------------------------------------------------------------
// VGreedy: the memory-bounded list scheduler behind ZB-V, V-Half and V-Min.

struct GreedyPolicy {
  // Whether ready forwards go before ready backwards. Forward-first keeps the forward wave (and
  // so the last microbatches' round trips) short; backward-first frees memory sooner.
  bool forward_first = true;
  // Which of two ready backwards goes first: 0 = chunk 1 (the later stage), 1 = chunk 0.
  int b_order = 0;
  // Which of two ready forwards goes first: 0 = chunk 1, 1 = chunk 0.
  int f_order = 0;
  // A rank with nothing ready but pending Ws waits instead of starting a W when a B or F
  // becomes ready within w_wait * T_W (0 = always fill with W).
  double w_wait = 0;
  // A rank whose best ready choice is a chunk-0 forward waits instead when a backward or a
  // chunk-1 forward (the V's return path, which gates memory release) becomes ready within
  // f0_wait * T_F; the chunk-0 forward would otherwise hold it up.
  double f0_wait = 0;
  // Rank r admits a chunk-0 forward only while its chunk-0 activations leave room for
  // 1 + round(reserve_per_rank * r) chunk-1 activations. One slot is what deadlock freedom
  // needs; ranks further from rank 0 keep chunk-1 microbatches longer (their chunk-1 backward
  // has to come back from rank 0) and need more slots to keep the return path flowing.
  double reserve_per_rank = 0;
};

// VGreedy's events, (time, rank), as a radix heap: no event is pushed earlier than the time the
// queue was last advanced to (an action ends, or an input arrives, no earlier than the time it
// was started at), and a non-negative double's bits order like the double, so each event moves
// down at most 64 buckets in all. VGreedy takes every event up to a time at once and only needs
// which ranks they name, so the order among events at the same time does not matter. A binary
// heap's sifting was half of VGreedy's run time at p = 32, m = 256.
// Appends compute action `a` to `order` field by field: an Action made on the stack and copied
// whole stalled on store forwarding, a tenth of VGreedy's time.
void AppendCompute(std::vector<Action>& order, const Action& a) {
  Action& to = order.emplace_back();
  to.kind = a.kind;
  to.stage = a.stage;
  to.microbatch = a.microbatch;
}

class EventQueue {
 public:
  void Clear() {
    for (auto& b : buckets_) b.clear();
    size_ = 0;
    last_ = 0;
  }
  bool empty() const { return size_ == 0; }
  // `time` >= 0 and >= now(), the time the queue was last advanced to (0 at first).
  void Push(double time, int rank) {
    const uint64_t key = Key(time);
    // Field by field: an Entry built whole on the stack and copied stalled on store forwarding.
    Entry& e = buckets_[Bucket(key)].emplace_back();
    e.key = key;
    e.rank = rank;
    ++size_;
  }
  // Removes the events at now() (no event is earlier), setting dirty[rank] for each.
  void PopNow(std::vector<char>& dirty) {
    for (const Entry& e : buckets_[0]) dirty[e.rank] = 1;
    size_ -= buckets_[0].size();
    buckets_[0].clear();
  }
  // Advances now() to the earliest event and returns it; not empty(), and no event at now().
  double Advance() {
    int i = 1;
    while (buckets_[i].empty()) ++i;
    uint64_t least = buckets_[i][0].key;
    for (const Entry& e : buckets_[i]) least = std::min(least, e.key);
    last_ = least;
    moving_.swap(buckets_[i]);
    for (const Entry& e : moving_) buckets_[Bucket(e.key)].push_back(e);
    moving_.clear();
    return std::bit_cast<double>(last_);
  }

 private:
  struct Entry {
    uint64_t key;
    int rank;
  };
  static uint64_t Key(double time) { return std::bit_cast<uint64_t>(time + 0.0); }  // -0 -> +0
  int Bucket(uint64_t key) const { return key == last_ ? 0 : 64 - std::countl_zero(key ^ last_); }

  std::array<std::vector<Entry>, 65> buckets_;
  std::vector<Entry> moving_;
  size_t size_ = 0;
  uint64_t last_ = 0;  // the key of now()
};

class VGreedy {
 public:
  VGreedy(const VProblem& pb, const GreedyPolicy& policy) : pb_(pb), pol_(policy) {}
  // Follows `fb_order`'s per-rank order of Fs and Bs (its Ws are ignored) and places the Ws
  // anew: in idle time (w_wait applies) and wherever memory needs them.
  VGreedy(const VProblem& pb, const GreedyPolicy& policy, const Orders& fb_order)
      : pb_(pb), pol_(policy), fb_order_(&fb_order) {}

  // Fills `orders` and, timed against the problem it was given, `score`. False if the scheduler
  // got stuck (only possible with unusual memory deltas, e.g. a B that needs memory), once some
  // rank's span is sure to exceed `give_up_above`, or once the peak memory reaches
  // `give_up_at_peak`.
  bool Run(Orders* orders, Score* score, double give_up_above = kInf,
           double give_up_at_peak = kInf);

 private:
  struct RankState {
    double free = 0;
    double first = kInf;   // start of the rank's first action
    double work_left = 0;  // duration of the actions not started yet
    int actions_left = 0;  // and their number
    double mem = 0;
    double peak = 0;
    double mem0 = 0;     // the part of mem held by chunk-0 activations
    int nf[2] = {0, 0};  // next microbatch to forward, per chunk
    int nb[2] = {0, 0};  // next microbatch to backward, per chunk
    std::deque<int> wq;  // pending Ws, as stage * m + microbatch, in B order
  };
  // A compute action a rank could start next; no kind = no candidate.
  struct Cand {
    std::optional<ActionKind> kind;
    int chunk = 0;
    int mb = 0;
    double ready = kInf;
  };

  double FReady(int s, int i) const {
    if (s == 0) return 0;
    const double t = f_end_[pb_.Idx(s - 1, i)];
    return t == kUnset ? kInf : t + pb_.Edge(s - 1);
  }
  double BReady(int s, int i) const {
    const double tf = f_end_[pb_.Idx(s, i)];
    if (tf == kUnset) return kInf;
    if (s == pb_.S - 1) return tf;
    const double t = b_end_[pb_.Idx(s + 1, i)];
    return t == kUnset ? kInf : std::max(tf, t + pb_.Edge(s));
  }
  bool Admissible(int r, int chunk, int s) const {
    const RankState& st = ranks_[r];
    if (chunk == 1) return st.mem + pb_.mf[s] <= pb_.limit + pb_.eps;
    const int slots = 1 + int(std::lround(pol_.reserve_per_rank * r));
    return st.mem + pb_.mf[s] <= pb_.limit + pb_.eps &&
           st.mem0 + pb_.mf[s] + slots * pb_.mf[pb_.StageOf(r, 1)] <= pb_.limit + pb_.eps;
  }
  bool TryStart(int r, double now);
  void Start(int r, double now, ActionKind kind, int stage, int mb);

  bool TryStartFixed(int r, double now);
  void Append(int r, const Action& a) { AppendCompute((*out_)[r], a); }

  const VProblem& pb_;
  const GreedyPolicy& pol_;
  const Orders* fb_order_ = nullptr;
  std::vector<size_t> fb_pos_;  // per rank, the next entry of fb_order_ to consider
  std::vector<RankState> ranks_;
  std::vector<double> f_end_, b_end_;
  // (time, rank): when something that may let the rank start an action happens (its own action
  // ends, or an input arrives); only such ranks are re-examined.
  EventQueue events_;
  Orders* out_ = nullptr;
  size_t started_ = 0;
  double peak_ = 0;  // the most memory any rank has held so far
};

bool VGreedy::Run(Orders* orders, Score* score, double give_up_above, double give_up_at_peak) {
  const int p = pb_.p;
  ranks_.assign(p, RankState{});
  for (int r = 0; r < p; ++r) {
    for (int c = 0; c < 2; ++c) {
      const int s = pb_.StageOf(r, c);
      ranks_[r].work_left += pb_.m * (pb_.f[s] + pb_.b[s] + pb_.w[s]);
    }
    ranks_[r].actions_left = 6 * pb_.m;
  }
  f_end_.assign(size_t(pb_.S) * pb_.m, kUnset);
  b_end_.assign(f_end_.size(), kUnset);
  events_.Clear();
  orders->assign(p, {});
  for (auto& o : *orders) o.reserve(size_t(6) * pb_.m);
  out_ = orders;
  started_ = 0;
  peak_ = 0;
  const size_t total = size_t(3) * pb_.S * pb_.m;
  fb_pos_.assign(p, 0);
  std::vector<char> dirty(p, 1);
  double now = 0;
  while (true) {
    events_.PopNow(dirty);  // `now` is where the queue was advanced to
    bool any = false;
    for (int r = 0; r < p; ++r) {
      if (!dirty[r]) continue;
      dirty[r] = 0;
      if (ranks_[r].free <= now && TryStart(r, now)) any = true;
    }
    if (peak_ >= give_up_at_peak) return false;
    if (started_ == total) break;
    if (any) continue;                  // zero-length actions may have made more ready at `now`
    if (events_.empty()) return false;  // nothing running and nothing can start
    now = events_.Advance();
    if (give_up_above < kInf) {
      // A rank that has started cannot end before it has run what it has left.
      for (int r = 0; r < p; ++r) {
        const RankState& st = ranks_[r];
        if (st.first == kInf) continue;
        const double end =
            st.actions_left > 0 ? std::max(now, st.free) + std::max(0.0, st.work_left) : st.free;
        if (end - st.first > give_up_above) return false;
      }
    }
  }
  *score = Score{};
  double lo = kInf, hi = 0;
  score->rank_span = 0;
  score->peak = 0;
  for (const RankState& st : ranks_) {
    if (st.first == kInf) continue;
    lo = std::min(lo, st.first);
    hi = std::max(hi, st.free);
    score->rank_span = std::max(score->rank_span, st.free - st.first);
    score->peak = std::max(score->peak, st.peak);
  }
  score->span = lo <= hi ? hi - lo : 0;
  return true;
}

bool VGreedy::TryStartFixed(int r, double now) {
  RankState& st = ranks_[r];
  const std::vector<Action>& seq = (*fb_order_)[r];
  size_t& pos = fb_pos_[r];
  while (pos < seq.size() && seq[pos].kind == ActionKind::kBackwardWeight) ++pos;
  double due = kInf;
  if (pos < seq.size()) {
    const Action& a = seq[pos];
    const bool fwd = a.kind == ActionKind::kForward;
    due = fwd ? FReady(a.stage, a.microbatch) : BReady(a.stage, a.microbatch);
    const double dmem = fwd ? pb_.mf[a.stage] : pb_.mb[a.stage];
    if (st.mem + dmem <= pb_.limit + pb_.eps) {
      if (due <= now) {
        ++pos;
        Start(r, now, fwd ? ActionKind::kForward : ActionKind::kBackwardInput, a.stage,
              a.microbatch);
        return true;
      }
    } else {
      due = kInf;  // only Ws can make room
    }
  }
  if (st.wq.empty()) return false;
  const int w_key = st.wq.front();
  // Rank 0 holds the first and the last stage, so its span is the iteration's: it fills every
  // gap. The other ranks may wait instead, to pass the returning backwards on sooner.
  const double w_wait = r == 0 ? 0 : pol_.w_wait;
  if (due < kInf && due - now < w_wait * pb_.w[w_key / pb_.m]) return false;
  Start(r, now, ActionKind::kBackwardWeight, w_key / pb_.m, w_key % pb_.m);
  return true;
}

bool VGreedy::TryStart(int r, double now) {
  if (fb_order_ != nullptr) return TryStartFixed(r, now);
  RankState& st = ranks_[r];
  Cand fc[2], bc[2];
  for (int c = 0; c < 2; ++c) {
    const int s = pb_.StageOf(r, c);
    if (st.nf[c] < pb_.m && Admissible(r, c, s)) {
      fc[c] = {ActionKind::kForward, c, st.nf[c], FReady(s, st.nf[c])};
    }
    if (st.nb[c] < pb_.m) bc[c] = {ActionKind::kBackwardInput, c, st.nb[c], BReady(s, st.nb[c])};
  }
  // The ready one of a pair, or the preferred chunk (0 = chunk 1 first) when both are.
  auto pick = [&](const Cand(&cands)[2], int order) -> const Cand* {
    const bool r0 = cands[0].kind.has_value() && cands[0].ready <= now;
    const bool r1 = cands[1].kind.has_value() && cands[1].ready <= now;
    if (!r0 && !r1) return nullptr;
    if (r0 != r1) return r0 ? &cands[0] : &cands[1];
    return order == 0 ? &cands[1] : &cands[0];
  };
  const Cand* bsel = pick(bc, pol_.b_order);
  const Cand* fsel = pick(fc, pol_.f_order);
  const Cand* sel = pol_.forward_first ? (fsel ? fsel : bsel) : (bsel ? bsel : fsel);
  if (sel && sel->kind == ActionKind::kForward && sel->chunk == 0 && pol_.f0_wait > 0) {
    double due = kInf;
    if (fc[1].kind.has_value()) due = std::min(due, fc[1].ready);
    for (const Cand& c : bc) {
      if (c.kind.has_value()) due = std::min(due, c.ready);
    }
    if (due > now && due - now < pol_.f0_wait * pb_.f[pb_.StageOf(r, 0)]) return false;
  }
  if (sel) {
    Start(r, now, *sel->kind, pb_.StageOf(r, sel->chunk), sel->mb);
    return true;
  }
  if (st.wq.empty()) return false;
  const int w_key = st.wq.front();
  if (pol_.w_wait > 0) {
    double due = kInf;
    for (int c = 0; c < 2; ++c) {
      if (fc[c].kind.has_value()) due = std::min(due, fc[c].ready);
      if (bc[c].kind.has_value()) due = std::min(due, bc[c].ready);
    }
    if (due < kInf && due - now < pol_.w_wait * pb_.w[w_key / pb_.m]) return false;
  }
  Start(r, now, ActionKind::kBackwardWeight, w_key / pb_.m, w_key % pb_.m);
  return true;
}

void VGreedy::Start(int r, double now, ActionKind kind, int s, int i) {
  RankState& st = ranks_[r];
  const int chunk = s < pb_.p ? 0 : 1;
  double end = now;
  switch (kind) {
    case ActionKind::kForward:
      end += pb_.f[s];
      st.mem += pb_.mf[s];
      if (chunk == 0) st.mem0 += pb_.mf[s];
      ++st.nf[chunk];
      f_end_[pb_.Idx(s, i)] = end;
      Append(r, Action::F(s, i));
      if (s < pb_.S - 1) events_.Push(end + pb_.Edge(s), pb_.RankOf(s + 1));
      break;
    case ActionKind::kBackwardInput:
      end += pb_.b[s];
      st.mem += pb_.mb[s];
      if (chunk == 0) st.mem0 += pb_.mb[s];
      ++st.nb[chunk];
      b_end_[pb_.Idx(s, i)] = end;
      st.wq.push_back(int(pb_.Idx(s, i)));
      Append(r, Action::B(s, i));
      if (s > 0) events_.Push(end + pb_.Edge(s - 1), pb_.RankOf(s - 1));
      break;
    case ActionKind::kBackwardWeight:
      end += pb_.w[s];
      st.mem += pb_.mw[s];
      if (chunk == 0) st.mem0 += pb_.mw[s];
      st.wq.pop_front();
      Append(r, Action::W(s, i));
      break;
    default:  // VGreedy starts only F, B and W
      return;
  }
  st.free = end;
  st.work_left -= end - now;
  --st.actions_left;
  st.first = std::min(st.first, now);
  st.peak = std::max(st.peak, st.mem);
  peak_ = std::max(peak_, st.mem);
  events_.Push(end, r);
  ++started_;
}

// The smallest memory limit under which VGreedy always finds a plan: every rank must hold one
// microbatch's chunk-0 and chunk-1 activations at once.
absl::Status CheckGreedyLimit(const VProblem& pb, absl::string_view name) {
  for (int r = 0; r < pb.p; ++r) {
    const int s0 = pb.StageOf(r, 0), s1 = pb.StageOf(r, 1);
    const double need = std::max(0.0, pb.mf[s0]) + std::max(0.0, pb.mf[s1]);
    if (need > pb.limit + pb.eps) {
      return WithField(
          absl::InvalidArgumentError(absl::StrCat(
              name, ": memory limit ", pb.limit, " is below ", need, ", the activations of stages ",
              s0, " and ", s1, " that rank ", r, " must hold at once for one microbatch")),
          "memory_limit");
    }
    for (int s : {s0, s1}) {
      if (pb.mb[s] > 0 || pb.mw[s] > 0) {
        return WithField(absl::InvalidArgumentError(absl::StrCat(
                             name, ": stage ", s, " has mem_b ", pb.mb[s], " and mem_w ", pb.mw[s],
                             "; the V schedulers need B and W to free memory (both <= 0)")),
                         absl::StrCat("cost.stages[", s, "]"));
      }
    }
  }
  return absl::OkStatus();
}

Plan MakePlan(absl::string_view name, const VProblem& pb, Orders orders) {
  Plan plan = EmptyPlan(std::string(name), Placement::VShape(pb.p), pb.m);
  plan.ranks = std::move(orders);
  return plan;
}

// The policies every V generator tries; the plan with the shortest makespan wins. The first is
// the safe one (a single chunk-1 slot), which always completes. The forward-first ones were
// picked as the smallest sets that match policy grids (up to 384 policies) on a spread of
// shapes and costs at the ZB-V limit; the backward-first ones win under the tighter V-Half
// and V-Min limits.
std::vector<GreedyPolicy> Policies() {
  return {
      {.forward_first = false},
      {.forward_first = true, .w_wait = 0.5, .f0_wait = 0.5, .reserve_per_rank = 0.75},
      {.forward_first = true, .f0_wait = 0.5, .reserve_per_rank = 1.0},
      {.forward_first = true, .w_wait = 0.75, .f0_wait = 0.5, .reserve_per_rank = 0.75},
      {.forward_first = false,
       .b_order = 1,
       .w_wait = 0.5,
       .f0_wait = 0.5,
       .reserve_per_rank = 1.0},
      {.forward_first = true, .b_order = 1, .w_wait = 0.5, .f0_wait = 0.5, .reserve_per_rank = 1.0},
      {.forward_first = true,
       .b_order = 1,
       .w_wait = 0.5,
       .f0_wait = 0.5,
       .reserve_per_rank = 0.75},
      {.forward_first = false, .f0_wait = 0.6, .reserve_per_rank = 0.5},
      {.forward_first = false, .w_wait = 0.5, .reserve_per_rank = 1.0},
      {.forward_first = false, .b_order = 1, .w_wait = 0.5, .reserve_per_rank = 0.5},
      {.forward_first = false, .w_wait = 0.5, .f0_wait = 0.5, .reserve_per_rank = 0.5},
      {.forward_first = false, .w_wait = 1.0, .f0_wait = 0.5},
  };
}

// Per rank, DualPipeV's eight steps (below). In the pairs DualPipe overlaps, the backward
// runs first in (F0, B1) pairs when bit 0 of `b_first` is set, in (F1, B0) pairs for bit 1.
constexpr int kDualPipeVariants = 4;
Orders DualPipeVOrders(const VProblem& pb, int b_first);

// The greedy pass's work, in simulated actions (a list-scheduler run counts twice its actions,
// an evaluation once): every candidate below when the problem is small, else the short list
// (kShortPolicies, then the best order's Ws placed anew), so that p = 32, m = 256 takes a few
// tens of milliseconds.
constexpr int64_t kGreedyWork = 2'000'000;
// The short list: indices into Policies() of the ones that win most often at large p * m, at
// ZB-V's limit (where DualPipeV's order, refilled, usually wins) and under the tighter ones.
constexpr int kShortPoliciesZbV[] = {1};
constexpr int kShortPoliciesTight[] = {0, 7, 9, 11};
constexpr double kShortRefillWaits[] = {0.25, 0.5};

// The balanced-idle V construction (after the ZB paper's ZB-V heuristic), for the search. It
// builds the orders step by step: a warm-up of chunk-0 and chunk-1 Fs, then 2m rounds in which
// every rank gets its next B (the chunk-0 B once its input is known, else the chunk-1 B) and then
// its next F. Before each F or B a rank runs deferred Ws where memory needs them, where a whole W
// fits the wait for the input, or where waiting would leave the rank more idle than it may
// afford: the most idle rank's idle time so far, or the rank's own allowance when that is larger.
// The Ws held back fill the drain, where the ranks would idle anyway.
struct VFill {
  bool fill_before_f = true;      // an unaffordable wait before an F gets a W
  bool fill_before_b = true;      // same before a chunk-1 B (before a chunk-0 B, always)
  std::vector<double> allowance;  // per rank (empty = none)
};

struct VBuilt {
  Orders orders;
  std::vector<double> idle;  // per rank: how long it waited after its first action
  double most_idle = 0;
};

// Builds one balanced-idle V plan (see VFill); each step below appends to every rank's order.
class BalancedVBuilder {
 public:
  BalancedVBuilder(const VProblem& pb, const VFill& fill)
      : pb_(pb),
        fill_(fill),
        f_end_(size_t(pb.S) * pb.m, kUnset),
        b_end_(size_t(pb.S) * pb.m, kUnset),
        nf_(pb.p, {0, 0}),
        nb_(pb.p, {0, 0}),
        pending_(pb.p),
        now_(pb.p, 0),
        mem_(pb.p, 0) {
    out_.orders.assign(pb.p, {});
    out_.idle.assign(pb.p, 0);
  }

  // The plan, or nullopt when an input is never placed or memory overflows.
  std::optional<VBuilt> Build() {
    if (!WarmUp() || !CatchUp()) return std::nullopt;
    for (int round = 0; round < 2 * pb_.m; ++round) {
      if (!RoundOfBackwards() || !RoundOfForwards()) return std::nullopt;
    }
    if (!Drain()) return std::nullopt;
    return std::move(out_);
  }

 private:
  // When the input of rank r's next F (or B) of `chunk` arrives from another rank: kUnset while
  // its producer is not placed, -kInf when there is none.
  double Arrival(int r, int chunk, bool backward) const {
    const int s = pb_.StageOf(r, chunk);
    const int i = backward ? nb_[r][chunk] : nf_[r][chunk];
    if (i >= pb_.m) return kUnset;
    if (!backward) {
      if (s == 0 || pb_.RankOf(s - 1) == r) return -kInf;
      const double t = f_end_[pb_.Idx(s - 1, i)];
      return t == kUnset ? kUnset : t + pb_.Edge(s - 1);
    }
    if (s == pb_.S - 1 || pb_.RankOf(s + 1) == r) return -kInf;
    const double t = b_end_[pb_.Idx(s + 1, i)];
    return t == kUnset ? kUnset : t + pb_.Edge(s);
  }

  // Appends rank r's next action; false when its input is not placed or memory overflows.
  bool Put(int r, ActionKind kind, int chunk) {
    Action a;
    double start = now_[r];
    if (kind == ActionKind::kBackwardWeight) {
      a = pending_[r].front();
      pending_[r].pop_front();
    } else if (!TakeNext(r, kind == ActionKind::kBackwardInput, chunk, &a, &start)) {
      return false;
    }
    return Place(r, a, start);
  }

  // Rank r's next F or B of `chunk` and the earliest it may start (raised from `*start`); false
  // when there is none left or an input is not placed yet. Queues a B's W.
  bool TakeNext(int r, bool backward, int chunk, Action* a, double* start) {
    const int s = pb_.StageOf(r, chunk);
    const int i = backward ? nb_[r][chunk] : nf_[r][chunk];
    if (i >= pb_.m) return false;
    if (backward && f_end_[pb_.Idx(s, i)] == kUnset) return false;
    const double t = Arrival(r, chunk, backward);
    if (t == kUnset) return false;
    *start = std::max(*start, t);
    // The same-rank inputs: the local turn-around of the V.
    if (backward && s + 1 < pb_.S && pb_.RankOf(s + 1) == r) {
      if (b_end_[pb_.Idx(s + 1, i)] == kUnset) return false;
      *start = std::max(*start, b_end_[pb_.Idx(s + 1, i)]);
    }
    if (!backward && s > 0 && pb_.RankOf(s - 1) == r) {
      if (f_end_[pb_.Idx(s - 1, i)] == kUnset) return false;
      *start = std::max(*start, f_end_[pb_.Idx(s - 1, i)]);
    }
    *a = backward ? Action::B(s, i) : Action::F(s, i);
    (backward ? nb_ : nf_)[r][chunk]++;
    if (backward) pending_[r].push_back(Action::W(s, i));
    return true;
  }

  // Times `a` on rank r from `start` and appends it; false when memory overflows.
  bool Place(int r, const Action& a, double start) {
    double len = pb_.w[r], delta = pb_.mw[r];
    if (a.kind == ActionKind::kForward) len = pb_.f[r], delta = pb_.mf[r];
    if (a.kind == ActionKind::kBackwardInput) len = pb_.b[r], delta = pb_.mb[r];
    mem_[r] += delta;
    if (mem_[r] > pb_.limit + pb_.eps) return false;
    if (!out_.orders[r].empty()) {
      out_.idle[r] += start - now_[r];
      out_.most_idle = std::max(out_.most_idle, out_.idle[r]);
    }
    now_[r] = start + len;
    if (a.kind == ActionKind::kForward) f_end_[pb_.Idx(a.stage, a.microbatch)] = now_[r];
    if (a.kind == ActionKind::kBackwardInput) b_end_[pb_.Idx(a.stage, a.microbatch)] = now_[r];
    AppendCompute(out_.orders[r], a);
    return true;
  }

  // Ws until `delta` more memory fits; false when none is left.
  bool MakeRoom(int r, double delta) {
    while (mem_[r] + delta > pb_.limit + pb_.eps) {
      if (pending_[r].empty() || !Put(r, ActionKind::kBackwardWeight, 0)) return false;
    }
    return true;
  }

  // Ws into rank r's wait for an input arriving at `t`, as VFill describes.
  bool FillWait(int r, double t, bool unaffordable_too) {
    if (t == kUnset || t == -kInf) return true;
    while (!pending_[r].empty() && t >= now_[r] + pb_.w[r]) {
      if (!Put(r, ActionKind::kBackwardWeight, 0)) return false;
    }
    double afford = out_.most_idle;
    if (!fill_.allowance.empty()) afford = std::max(afford, fill_.allowance[r]);
    if (!pending_[r].empty() && unaffordable_too && t - now_[r] > afford - out_.idle[r]) {
      return Put(r, ActionKind::kBackwardWeight, 0);
    }
    return true;
  }

  // Microbatch 0's chunk-0 F everywhere; then, from the last rank down, each rank's chunk-1 F of
  // microbatch 0, preceded by as many more chunk-0 Fs (on it and every earlier rank) as fit
  // before that F's input arrives and leave room for the rank's later Fs.
  bool WarmUp() {
    const int p = pb_.p;
    for (int r = 0; r < p; ++r) {
      if (!Put(r, ActionKind::kForward, 0)) return false;
    }
    for (int r = p - 1; r >= 0; --r) {
      if (r < p - 1) {
        const int next = pb_.StageOf(r + 1, 1);
        const double t = f_end_[pb_.Idx(next, 0)] + pb_.Edge(next);
        while (mem_[r] + pb_.mf[r] * (2 + 2 * r) <= pb_.limit + pb_.eps &&
               now_[r] + pb_.f[r] <= t && nf_[0][0] < pb_.m) {
          for (int j = 0; j <= r; ++j) {
            if (!Put(j, ActionKind::kForward, 0)) return false;
          }
        }
      }
      if (!Put(r, ActionKind::kForward, 1)) return false;
    }
    return true;
  }

  // Each rank catches up with the one before it, the later ranks taking chunk-0 and chunk-1 Fs
  // in turn.
  bool CatchUp() {
    const int p = pb_.p, m = pb_.m;
    int chunk = 0;
    for (int r = 1; r < p; ++r) {
      for (int idle_turns = 0; nf_[r][0] + nf_[r][1] < nf_[r - 1][0] + nf_[r - 1][1] ||
                               (nf_[r][1] <= nf_[r - 1][1] && nf_[r - 1][1] < m);
           chunk = 1 - chunk) {
        bool placed = false;
        for (int j = p - 1; j >= r; --j) {
          if (nf_[j][chunk] >= m) continue;
          if (!Put(j, ActionKind::kForward, chunk)) return false;
          placed = true;
        }
        idle_turns = placed ? 0 : idle_turns + 1;
        if (idle_turns > 1) return false;
      }
    }
    return true;
  }

  // Every rank's next B: the chunk-0 B once its input is known, else the chunk-1 B. Chunk-0 Bs
  // run back from the last rank, chunk-1 Bs forward from rank 0.
  bool RoundOfBackwards() {
    const int p = pb_.p, m = pb_.m;
    for (int r = 0; r < p; ++r) {
      if (!MakeRoom(r, pb_.mb[r])) return false;
    }
    std::vector<int> chunk0, chunk1;
    for (int r = 0; r < p; ++r) {
      const bool take0 =
          nb_[r][0] < nb_[r][1] && (r == p - 1 || nb_[r][1] >= m || Arrival(r, 0, true) != kUnset);
      (take0 ? chunk0 : chunk1).push_back(r);
    }
    std::vector<std::pair<int, int>> turn;
    for (auto it = chunk0.rbegin(); it != chunk0.rend(); ++it) turn.push_back({*it, 0});
    for (int r : chunk1) turn.push_back({r, 1});
    for (const auto& [r, c] : turn) {
      if (!FillWait(r, Arrival(r, c, true), c == 0 || fill_.fill_before_b)) return false;
      if (!Put(r, ActionKind::kBackwardInput, c)) return false;
    }
    return true;
  }

  // Every rank's next F, of whichever chunk can go.
  bool RoundOfForwards() {
    const int p = pb_.p, m = pb_.m;
    for (int r = 0; r < p; ++r) {
      if (nf_[r][1] >= m) continue;
      int c = -1;
      if (nf_[r][1] >= nf_[r][0]) {
        c = 0;
      } else if (r == p - 1 || Arrival(r, 1, false) != kUnset) {
        c = 1;
      } else if (nf_[r][0] < m && (r == 0 || Arrival(r, 0, false) != kUnset)) {
        c = 0;
      }
      if (c < 0) continue;
      if (!MakeRoom(r, pb_.mf[r])) return false;
      if (!FillWait(r, Arrival(r, c, false), fill_.fill_before_f)) return false;
      if (!Put(r, ActionKind::kForward, c)) return false;
    }
    return true;
  }

  // The Ws held back; false when some rank has not run everything.
  bool Drain() {
    const int m = pb_.m;
    for (int r = 0; r < pb_.p; ++r) {
      while (!pending_[r].empty()) {
        if (!Put(r, ActionKind::kBackwardWeight, 0)) return false;
      }
      if (nf_[r][0] < m || nf_[r][1] < m || nb_[r][0] < m || nb_[r][1] < m) return false;
    }
    return true;
  }

  const VProblem& pb_;
  const VFill& fill_;
  std::vector<double> f_end_, b_end_;        // per (stage, microbatch); kUnset until placed
  std::vector<std::array<int, 2>> nf_, nb_;  // per rank and chunk: next microbatch to place
  std::vector<std::deque<Action>> pending_;  // per rank: deferred Ws, in B order
  std::vector<double> now_, mem_;            // per rank: end of its last action, its memory
  VBuilt out_;
};

std::optional<VBuilt> BalancedV(const VProblem& pb, const VFill& fill) {
  return BalancedVBuilder(pb, fill).Build();
}

// Every member of the balanced-idle V family worth trying: each F/B fill switch, first with no
// allowances, then again with each rank allowed what it idled less than the most idle rank in
// the previous run, for as long as that lowers the most idle rank's idle time.
template <typename Consider>
void RunBalancedV(const VProblem& pb, int64_t& work, int64_t run_cost, Consider consider) {
  for (bool fill_b : {true, false}) {
    for (bool fill_f : {true, false}) {
      VFill fill{fill_f, fill_b, {}};
      double previous = kInf;
      for (int rerun = 0; rerun < 16 && work >= run_cost; ++rerun) {
        work -= run_cost;
        std::optional<VBuilt> built = BalancedV(pb, fill);
        if (!built) break;
        consider(std::move(built->orders));  // only its idle times are read below
        if (!(built->most_idle < previous)) break;
        previous = built->most_idle;
        fill.allowance.assign(pb.p, 0);
        for (int r = 0; r < pb.p; ++r) fill.allowance[r] = built->most_idle - built->idle[r];
      }
    }
  }
}

// A random policy of the same family, for the search.
GreedyPolicy RandomPolicy(SearchRng& rng) {
  GreedyPolicy pol;
  pol.forward_first = rng.Uniform(2) == 0;
  pol.b_order = rng.Uniform(2);
  pol.f_order = rng.Uniform(4) == 0 ? 1 : 0;
  pol.w_wait = rng.Uniform(3) == 0 ? 0 : 1.2 * rng.Real();
  pol.f0_wait = rng.Uniform(3) == 0 ? 0 : rng.Real();
  pol.reserve_per_rank = 0.25 * rng.Uniform(6);
  return pol;
}

// The generator behind ZB-V, V-Half and V-Min (see the top of this file): DualPipeV's orders, the
// greedy policies and the best order with its Ws placed anew, then with a budget the search, and
// last the balanced-idle construction. Keeps the best plan within the memory limit.
class GreedyVSearch {
 public:
  GreedyVSearch(const ScheduleRequest& req, const VProblem& pb, double memory_limit,
                absl::string_view name)
      : req_(req),
        pb_(pb),
        memory_limit_(memory_limit),
        name_(name),
        dualpipe_(pb.m >= 2 * pb.p),
        actions_(int64_t{6} * pb.p * pb.m),
        short_policies_(name == "zb-v" ? absl::Span<const int>(kShortPoliciesZbV)
                                       : kShortPoliciesTight),
        work_(SearchWork(req.search.budget_seconds)),
        span_bound_(SpanLowerBound(Placement::VShape(pb.p), pb.m, req.cost, memory_limit,
                                   /*split_backward=*/true)),
        makespan_bound_(MakespanLowerBound(Placement::VShape(pb.p), pb.m, req.cost)) {
    const int64_t all_runs =
        (dualpipe_ ? kDualPipeVariants : 0) +
        2 * (int64_t(policies_.size()) + std::size(kRefillWaits) * (1 + (dualpipe_ ? 4 : 0)));
    short_pass_ = all_runs * actions_ > kGreedyWork;
  }

  absl::StatusOr<Plan> Run() && {
    // A search ends with the balanced-idle construction; its work is set aside here, so that the
    // rest of the search runs as it would without it.
    const int64_t balanced_work = std::min(work_, int64_t{64} * 2 * actions_);
    work_ -= balanced_work;
    std::vector<Orders> dualpipe_orders = TryDualPipeV();
    TryPolicies();
    if (!best_orders_.empty()) RefillWs(std::move(dualpipe_orders));
    if (best_orders_.empty()) {
      return WithField(absl::FailedPreconditionError(absl::StrCat(
                           name_, ": found no schedule within the memory limit ", memory_limit_,
                           " (the memory deltas need B and W to free what F allocates)")),
                       "memory_limit");
    }
    if (work_ > 0 && !AtBound(best_.rank_span, span_bound_)) Search(span_bound_);
    // At both lower bounds no plan is shorter, and the balanced-idle construction, which aims at
    // the idle time, is left out (it could win only on peak memory, the score's last tie-break,
    // which it did on none of 480 shapes of the three schedules, p 2 to 32): a third of `zpipe
    // plan`'s time for ZB-V at p = 32, m = 256 (39 -> 28 ms).
    if (balanced_work > 0 && !AtBothBounds() && Evaluate(pb_, best_orders_, &best_)) {
      TryBalanced(balanced_work);
    }
    return MakePlan(name_, pb_, std::move(best_orders_));
  }

 private:
  static constexpr double kRefillWaits[] = {0.0, 0.25, 0.5, 0.75, 1.0};

  // Whether the best plan's rank span and span are at their lower bounds: no plan has shorter
  // ones, so another can be Better only with a lower peak.
  bool AtBothBounds() const {
    return AtBound(best_.rank_span, span_bound_) && AtBound(best_.span, makespan_bound_);
  }

  // Keeps `orders_` when `score` is the best so far within the memory limit.
  void Consider(const Score& score) {
    if (score.peak > pb_.limit + pb_.eps || !score.Better(best_)) return;
    best_ = score;
    best_orders_ = orders_;
  }
  void ConsiderOrders(Orders orders) {
    orders_ = std::move(orders);
    Score score;
    if (Evaluate(pb_, orders_, &score)) Consider(score);
  }
  // Whether a candidate runs: always in the full pass, in the short one when listed, else while
  // the search budget lasts.
  bool Admit(bool listed, int64_t cost) {
    if (!short_pass_ || listed) return true;
    if (work_ < cost) return false;
    work_ -= cost;
    return true;
  }
  void RunGreedy(const GreedyPolicy& pol, const Orders* fb_order) {
    VGreedy greedy = fb_order ? VGreedy(pb_, pol, *fb_order) : VGreedy(pb_, pol);
    Score score;
    // Once the best plan's span and rank span are at their lower bounds, no plan has shorter
    // ones, and a run can only be Better with a lower peak: it gives up as soon as its peak
    // reaches the best's (peak memory only grows during a run). On uniform costs the first runs
    // reach both bounds, and the rest give up in their warm-up.
    if (greedy.Run(&orders_, &score, best_.rank_span, AtBothBounds() ? best_.peak : kInf)) {
      Consider(score);  // else stuck, behind, or no better
    }
  }

  // DualPipeV's fixed order is a zero-bubble V schedule too (its warm-up is ZB-V's); with
  // m >= 2p it competes as one more candidate. It is cheap, so it goes first and sets the bar
  // at which the greedy runs give up. Returns the orders, for RefillWs.
  std::vector<Orders> TryDualPipeV() {
    std::vector<Orders> dualpipe_orders;
    if (!dualpipe_) return dualpipe_orders;
    for (int variant = 0; variant < kDualPipeVariants; ++variant) {
      dualpipe_orders.push_back(DualPipeVOrders(pb_, variant));
      ConsiderOrders(dualpipe_orders.back());
    }
    return dualpipe_orders;
  }

  void TryPolicies() {
    for (size_t k = 0; k < policies_.size(); ++k) {
      const bool listed = std::find(short_policies_.begin(), short_policies_.end(), int(k)) !=
                          short_policies_.end();
      if (Admit(listed, 2 * actions_)) RunGreedy(policies_[k], nullptr);
    }
  }

  // The best F/B order found so far and DualPipeV's, with their Ws placed anew: a W in an order
  // can hold up a backward that arrives while it runs, or be missing where a gap needs filling.
  // This step is what brings ZB-V to (p=16) and below (p=32) the ZB paper's Table 8.
  void RefillWs(std::vector<Orders> dualpipe_orders) {
    std::vector<Orders> bases = {best_orders_};
    for (Orders& base : dualpipe_orders) bases.push_back(std::move(base));
    for (size_t b = 0; b < bases.size(); ++b) {
      for (double w_wait : kRefillWaits) {
        const bool listed =
            b == 0 && std::find(std::begin(kShortRefillWaits), std::end(kShortRefillWaits),
                                w_wait) != std::end(kShortRefillWaits);
        if (!Admit(listed, 2 * actions_)) continue;
        GreedyPolicy pol;
        pol.w_wait = w_wait;
        RunGreedy(pol, &bases[b]);
      }
    }
  }

  // The search: a third of what is left on random policies and on the best order's Ws placed
  // anew with random waits, the rest on local moves.
  void Search(double bound) {
    SearchRng rng(req_.search.seed);
    int64_t variants = std::min(work_ / 3, kMaxRandomPolicies * 2 * actions_);
    for (; variants >= 2 * actions_ && !AtBound(best_.rank_span, bound); variants -= 2 * actions_) {
      work_ -= 2 * actions_;
      if (rng.Uniform(3) == 0) {
        GreedyPolicy pol;
        pol.w_wait = 1.2 * rng.Real();
        const Orders base = best_orders_;
        RunGreedy(pol, &base);
      } else {
        RunGreedy(RandomPolicy(rng), nullptr);
      }
    }
    const OrderProblem problem(Placement::VShape(pb_.p), pb_.m, req_.cost, memory_limit_);
    if (std::optional<OrderScore> score = problem.Evaluate(best_orders_)) {
      ImproveOrders(problem, best_orders_, *score, work_, rng.Next(), bound);
    }
  }

  void TryBalanced(int64_t balanced_work) {
    RunBalancedV(pb_, balanced_work, 2 * actions_,
                 [&](Orders built) { ConsiderOrders(std::move(built)); });
  }

  const ScheduleRequest& req_;
  const VProblem& pb_;
  const double memory_limit_;
  const absl::string_view name_;
  const bool dualpipe_;
  const int64_t actions_;  // simulated actions of one evaluation
  const std::vector<GreedyPolicy> policies_ = Policies();
  const absl::Span<const int> short_policies_;
  bool short_pass_ = false;  // the greedy pass runs the short list only
  int64_t work_;             // what is left of the search budget
  const double span_bound_, makespan_bound_;  // no plan of the problem has shorter spans
  Orders orders_;            // the candidate under consideration
  Orders best_orders_;
  Score best_;
};

absl::StatusOr<Plan> GenerateGreedyV(const ScheduleRequest& req, double memory_limit,
                                     absl::string_view name) {
  const VProblem pb(req, memory_limit);
  if (absl::Status st = CheckGreedyLimit(pb, name); !st.ok()) return st;
  return GreedyVSearch(req, pb, memory_limit, name).Run();
}

// ------------------------------------------------------------------------------------------
// DualPipeV: DeepSeek's step structure, serialised without F/B overlap.

// One rank's DualPipeV order, built by DeepSeek's eight steps.
class DualPipeVRank {
 public:
  DualPipeVRank(const VProblem& pb, int r, int b_first)
      : p_(pb.p),
        m_(pb.m),
        r_(r),
        s0_(pb.StageOf(r, 0)),
        s1_(pb.StageOf(r, 1)),
        b1_first_(b_first & 1),
        b0_first_(b_first & 2) {}

  std::vector<Action> Build() && {
    WarmUp();
    Steady();
    CoolDown();
    return std::move(out_);
  }

 private:
  void F0() { out_.push_back(Action::F(s0_, nf0_++)); }
  void F1() { out_.push_back(Action::F(s1_, nf1_++)); }
  // A backward; `defer` queues its W (zero-bubble), otherwise W runs right after it.
  void Backward(int chunk, bool defer) {
    const Action bact = chunk == 0 ? Action::B(s0_, nb0_++) : Action::B(s1_, nb1_++);
    out_.push_back(bact);
    const Action wact = Action::W(bact.stage, bact.microbatch);
    if (defer) {
      wq_.push_back(wact);
    } else {
      out_.push_back(wact);
    }
  }
  void W() {
    out_.push_back(wq_.front());
    wq_.pop_front();
  }
  // The pairs DualPipe overlaps, in the order the variant asks for. Backward first keeps the
  // peak at the 2p chunks of the warm-up.
  void PairF0B1() {
    if (b1_first_) {
      Backward(1, false);
      F0();
    } else {
      F0();
      Backward(1, false);
    }
  }
  void PairF1B0() {
    if (b0_first_) {
      Backward(0, false);
      F1();
    } else {
      F1();
      Backward(0, false);
    }
  }

  // Steps 1 to 3.
  void WarmUp() {
    // 1: chunk-0 warm-up, deeper on ranks nearer the ends of the V.
    for (int k = 0; k < 2 * (p_ - r_ - 1); ++k) F0();
    // 2: alternate chunk-0 and chunk-1 forwards.
    for (int k = 0; k < r_ + 1; ++k) {
      F0();
      F1();
    }
    // 3: B1 W1 F1 (zero bubble: the W right after its B, before the next forward).
    for (int k = 0; k < p_ - r_ - 1; ++k) {
      Backward(1, /*defer=*/true);
      W();
      F1();
    }
  }

  // Steps 4 and 5.
  void Steady() {
    // 4: main phase, pairs (F0, B1) and (F1, B0) that DualPipe overlaps.
    const int main_steps = m_ - 2 * p_ + r_ + 1;
    for (int k = 0; k < main_steps; ++k) {
      PairF0B1();
      PairF1B0();
    }
    // 5: B1, then the pair (F1, B0).
    for (int k = 0; k < p_ - r_ - 1; ++k) {
      Backward(1, false);
      PairF1B0();
    }
  }

  // Steps 6 to 8.
  void CoolDown() {
    // 6: B1 B0; the second half defers W (exactly r + 1 deferred).
    bool defer = false;
    for (int k = 0; k < r_ + 1; ++k) {
      if (k == (r_ + 1) / 2 && r_ % 2 == 1) defer = true;
      Backward(1, defer);
      if (k == (r_ + 1) / 2 && r_ % 2 == 0) defer = true;
      Backward(0, defer);
    }
    // 7: W then B0 (deferred).
    for (int k = 0; k < p_ - r_ - 1; ++k) {
      W();
      Backward(0, true);
    }
    // 8: drain the remaining Ws.
    while (!wq_.empty()) W();
  }

  const int p_, m_, r_;
  const int s0_, s1_;  // the rank's chunk-0 and chunk-1 stages
  const bool b1_first_, b0_first_;
  int nf0_ = 0, nf1_ = 0, nb0_ = 0, nb1_ = 0;  // next microbatch per kind and chunk
  std::deque<Action> wq_;                      // deferred weight gradients, FIFO
  std::vector<Action> out_;
};

Orders DualPipeVOrders(const VProblem& pb, int b_first) {
  Orders orders(pb.p);
  for (int r = 0; r < pb.p; ++r) orders[r] = DualPipeVRank(pb, r, b_first).Build();
  return orders;
}

}  // namespace

absl::StatusOr<Plan> GenerateZbV(const ScheduleRequest& req, double memory_limit) {
  return GenerateGreedyV(req, memory_limit, "zb-v");
}

absl::StatusOr<Plan> GenerateVHalf(const ScheduleRequest& req, double memory_limit) {
  return GenerateGreedyV(req, memory_limit, "v-half");
}

absl::StatusOr<Plan> GenerateVMin(const ScheduleRequest& req, double memory_limit) {
  return GenerateGreedyV(req, memory_limit, "v-min");
}

absl::StatusOr<Plan> GenerateDualPipeV(const ScheduleRequest& req, double memory_limit) {
  const VProblem pb(req, memory_limit);
  if (pb.m < 2 * pb.p) {
    return WithField(
        absl::InvalidArgumentError(absl::StrCat("dualpipe-v: needs microbatches >= 2 * pipeline (",
                                                2 * pb.p, "), got ", pb.m)),
        "microbatches");
  }
  Orders best_orders;
  Score best;
  double lowest_peak = kInf;
  for (int variant = 0; variant < kDualPipeVariants; ++variant) {
    Orders orders = DualPipeVOrders(pb, variant);
    Score score;
    if (!Evaluate(pb, orders, &score)) {
      return absl::InternalError("dualpipe-v: generated order deadlocks");
    }
    lowest_peak = std::min(lowest_peak, score.peak);
    if (score.peak > pb.limit + pb.eps) continue;
    if (score.Better(best)) {
      best = score;
      best_orders = std::move(orders);
    }
  }
  if (best_orders.empty()) {
    return WithField(absl::FailedPreconditionError(absl::StrCat(
                         "dualpipe-v: memory limit ", memory_limit, " is below ", lowest_peak,
                         ", the least peak activation memory of a DualPipeV order")),
                     "memory_limit");
  }
  return MakePlan("dualpipe-v", pb, std::move(best_orders));
}

}  // namespace zpipe::core::internal
