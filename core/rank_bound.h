// A lower bound on the span of any plan from one rank on its own: every other rank is given
// unlimited capacity (each of its actions runs as soon as its inputs arrive, alongside any other),
// so what is left is a one-machine problem, solved exactly.
//
// The relaxation. On rank r with stages L_0 < ... < L_{k-1} (one for a linear pipeline, two for
// a V, v when interleaved), a microbatch's actions there form a chain: F(L_0), F(L_1), ...,
// F(L_{k-1}), B(L_{k-1}), ..., B(L_0), and each W(L_j) after its B. Between two consecutive ones
// lies the work of the stages in between, on other ranks, plus T_comm per cross-rank edge: a fixed
// delay once those ranks never queue. F(L_0) waits for nothing (the span is counted from the
// rank's own first start, and earlier ranks have no queue). Any plan's rank r meets every one of
// these constraints, its memory limit included, so its span is at least the least span of the
// relaxed problem; the plan's span is the largest rank span, so the bound is the maximum over
// ranks.
//
// Solving it. Actions of one kind and stage have the same duration and memory and the same
// delay to their successor, so two of them that are both ready can swap places (relabelling the
// microbatches from there on) without changing any time or memory: some optimal order runs each
// kind first-in first-out. What is left to choose is which kind runs next; the state is the count
// done of each kind and, for the microbatches in flight, how long until each becomes ready (only
// what lies after the current time matters, so the state is shift-invariant). A depth-first
// search with memoised states gives the exact least span. A remembered state also bounds the
// states with the same counts and later ready times: one whose queues are each at most d later
// needs at least its proven time minus d (it could do no better than idle d and follow it), which
// settles ZB-1p at p = 8, m = 32 (T_comm = 0.1) in 19 thousand nodes and 664 states, where an
// exact-match memo ran out of its million states (after 4 million nodes, 200 MB). Where the
// search needs more than `state_limit` states or its share of `node_limit` nodes, that rank
// contributes nothing (the bound then rests on the other ranks). A search may run in several
// calls, each going on from what the last one remembered, and need not cut at the plan's span:
// searched without that cut, its early subtrees prove how long their states really need, which
// dominance spreads to their neighbours, so a least span below the cut is found several times
// faster (the chain of rank 7 in ZB-V at p = 8, m = 16: 10 million nodes, not 34 million).
//
// The memory limit. Each node's bound is the preemptive one-machine bound over the remaining
// actions, each released at its earliest start (the delays from what is done). Alone that ignores
// the memory limit, which is what keeps a V's rank 0 idle before its first F of the last stage
// arrives: rank 0 may hold the activations of at most L / M_F microbatches of a stage whose B has
// not run (when no stage's microbatch ever holds less than nothing: M_F, M_F + M_B and
// M_F + M_B + M_W each at least 0, so every other stage holds at least 0). So the i-th F of a stage
// is also released no earlier than the earliest end of the B of microbatch i - L / M_F, computed
// microbatch by microbatch. And where the rank has a later stage (a V's turn or last stage), no
// earlier than the end of the F there of microbatch i - (L - M_F there) / M_F: the Fs here of the
// microbatches that have not reached there hold their memory until after the first of them does,
// and that F needs room of its own. V-Half at p = 8, m = 32 (skewed costs, T_comm = 0.3): rank 0's
// root bound 210.6 -> 212.3 with the Bs' release times, 213.3 with both (it runs at most 9 Fs of
// stage 0 in its memory of 10 before its first F of stage 15 can start).
//
// It sees what the closed-form arguments of core/span_bound.h miss: how a memory limit and the
// round trip to the last stage interleave in the steady state, microbatch by microbatch (ZB-1p at
// p = 4, m = 8, T_comm = 0.1: SpanLowerBound 27.6, this bound 28.2, the span of the plan the
// generators make, so that plan is optimal).
//
// Chains. A rank alone cannot see the other ranks' limits: in V-Half at p = 8, m = 8, rank 7
// holds 5 microbatches before the first comes back, which throttles everything, and rank 0's
// relaxation says 56.4 where the plan spans 69.2. So each rank b whose first stage L_0 > 0 also
// bounds rank 0, as a link of a chain: rank b's first action is an F of L_0, whose microbatch
// left rank 0's F of stage 0 at least the forward path before (the Fs of stages 0 .. L_0 - 1 and
// T_comm per cross-rank edge); rank b then needs at least T_b until the last B of L_0 ends; that
// microbatch's backward path down to stage 0 (the Bs of stages L_0 - 1 .. 0 and the edges) and
// rank 0's W of stage 0 come after. So rank 0 spans at least forward + T_b + backward + W(0).
// T_b is the same one-machine problem measured to the end of the last B of L_0, not the last
// action (the Ws still free memory, and take time when they run before it; those after it do
// not count). V-Half at p = 4, m = 4 (30.8) and p = 8, m = 8 (69.2) are then proven optimal, and
// checked against the exact solver's optimum on thousands of small random shapes.
//
// Pairs. Neither a rank alone nor a chain sees how two ranks' queues interleave: in 1F1B at
// p = 4, m = 16, rank 1's Bs come back to rank 0 no closer than rank 1 can run them between its
// own Fs. So rank 0 is also solved together with rank 1 and with rank p - 1 (the last stage's,
// or a V's turn) (RankBoundOptions::pairs): both exact, every other rank unlimited, the least
// end of rank 0. Each kind still runs first-in first-out (two
// ready actions of one kind swap their microbatches from there on, on both ranks: the same times
// and memory), and a branch and bound over the order of the two ranks' starts (rank_bound.cc:
// PairProblem) finds it exactly. Rank 0 starts at 0 in every plan, so its end is its span. 1F1B
// at p = 4, m = 16 then gets 59.8 from ranks 0 and 1 (rank 0 alone: 59.4), the plan's span; ZB-V
// at p = 4, m = 8 gets 49.2 from ranks 0 and 3 (the chains: 48.8; the plan spans 49.4); at p = 2
// the pair is every rank, and ZB-V and V-Half at m = 8 are proven optimal (48.4, where the ranks
// and chains say 48.2 and the exact solver's tree does not finish in 3 million nodes).
//
// The last round trip. Where a unit's search cannot settle, two counts still bound it, in closed
// form, when its stages' microbatches never hold less than nothing (as for the memory limit's
// release times). When the last F of the rank's last stage ends, at t, every F has run; each
// microbatch stage whose B is still to run holds M_F, each with only its W left M_F + M_B, and
// together they fit the limit. After t the last microbatch still has its round trip and its Bs
// down to the first stage (the drain), and every B still to run runs after t. So a rank needs at
// least its work plus what of the drain (and the last W) the work that memory holds at t cannot
// fill; and a chain's rank, whose Ws may run after its end, at least its work less the W time it
// leaves for after its end, which is at most what memory holds at t less the part of the drain
// the Bs do not fill. Before the first B only Fs run, at most memory's worth, while that B waits
// for the first microbatch's Fs and its round trip; where not every F fits in memory at once (so
// a B runs before t), that idle comes on top. The counts run over every split of memory at t
// (whole microbatch stages waiting for their Bs; those waiting for their Ws filled as a fractional
// knapsack, which can only say more). ZB-V at p = 8 (T_comm 0.1), the turn (rank 7) as a link:
// its first B waits 17.4 for the round trip, with room for 16 Fs before it (1.4 idle), and its
// last B ends 17.4 after t, of which Ws worth at most 14.6 can be left for after the end: it needs
// 6 m + 1.4 - 14.6, the value its search finds at every m it settles from 9 on, where at m = 32
// the search takes 286 million nodes (two minutes) and the table's 10 s left the bound at 193.4;
// with the path there and back, 195.2. Each unit's value is checked against its exact search on
// random small shapes (rank_bound_test).
#ifndef ZPIPE_CORE_RANK_BOUND_H_
#define ZPIPE_CORE_RANK_BOUND_H_

#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "core/cost_model.h"
#include "core/placement.h"

namespace zpipe::core {

struct RankBound {
  // The max over the units solved of their least relaxed span (or `upper`) and over every unit
  // of its last round trip (at most `upper`).
  double span = 0;
  int ranks_solved = 0;    // ranks whose search finished within the limits
  int chains_solved = 0;   // chain links (RankBoundOptions::chains) whose search finished
  int pairs_solved = 0;    // pairs of ranks (RankBoundOptions::pairs) whose search finished
  int64_t nodes = 0;       // search nodes over all ranks
  int64_t states = 0;      // the most states one rank's search remembered
};

struct RankBoundOptions {
  // A rank whose relaxed span is at least `upper` (a plan's span, say) counts as `upper`: enough
  // to prove that plan optimal, and much faster to settle than the exact value.
  double upper = std::numeric_limits<double>::infinity();
  // Search nodes over all ranks and chains (in rounds: each unsettled one gets a share that
  // doubles a round, and goes on where it stopped; after the first round the deepest chain
  // gets three times as much as the other chains together), and remembered states over all of
  // them (about 80 bytes each). One that needs more contributes nothing.
  int64_t node_limit = 1'000'000;
  int64_t state_limit = 1'000'000;
  // Whether a remembered state also bounds the states with the same counts and other ready times
  // (see StateMemo in rank_bound.cc); off, only an equal state does. Off is for tests.
  bool dominance = true;
  // Whether each rank past stage 0's also bounds rank 0 as a link of a chain (see above); off,
  // only each rank on its own. Off is for tests.
  bool chains = true;
  // Whether rank 0 with rank 1, and with rank p - 1, also bound rank 0 (see above); off is for
  // tests.
  bool pairs = true;
  // Whether a memory-limited rank's Fs get release times from its Bs in each node's one-machine
  // bound (see "The memory limit" above); off is for tests.
  bool memory_releases = true;
  // Whether each unit's last round trip in closed form (see above) floors the bound whether or
  // not its search settles; off is for tests of the searches.
  bool last_round_trip = true;
};

// `cost` has placement.num_stages() stages; `memory_limit` is per rank. Deterministic. The chains
// are problems of their own beside the ranks' (sharing `node_limit`); the search ends as soon as
// one reaches `upper`.
RankBound RankRelaxationBound(const Placement& placement, int microbatches, const CostModel& cost,
                              double memory_limit, bool split_backward,
                              const RankBoundOptions& options = {});

// The same units (each rank, and each rank past stage 0's as a link of a chain) bounded without a
// search: each one's one-machine bound at its first state (the release times of its actions,
// the memory limit's included) and its last round trip, the largest over them. A sort of each
// rank's actions, no search, so every plan gets it (core/planning.h:
// PlannedSchedule::span_lower_bound, what `zpipe plan` prints): ZB-V at p = 32, m = 256 with the
// skewed costs of the optimality table gets 1642.7 where SpanLowerBound says 1625.1 (the plan
// spans 1643.7). At most RankRelaxationBound's value with enough nodes.
double RankRootBound(const Placement& placement, int microbatches, const CostModel& cost,
                     double memory_limit, bool split_backward);

class RankProblem;  // rank_bound.cc

// The same relaxation of one rank, from a state of a partial plan: what the exact solver's tree
// (core/optimal_schedule.cc) asks at its nodes. Its remembered states stay between calls, so a
// state that many nodes share is searched once. Not thread-safe.
class RankRelaxation {
 public:
  // `state_limit`: remembered states (about 80 bytes each); past it, it starts afresh.
  // `chain`: the problem ends at the last B of the rank's first stage, not its last action (the
  // rank as a link of a chain, see above: the Ws' time does not count).
  RankRelaxation(const Placement& placement, int microbatches, const CostModel& cost,
                 double memory_limit, bool split_backward, int rank, int64_t state_limit,
                 bool chain = false);
  ~RankRelaxation();
  RankRelaxation(const RankRelaxation&) = delete;
  RankRelaxation& operator=(const RankRelaxation&) = delete;

  // The rank's stages, lowest first. The kinds: F of its j-th stage is kind j, B (BW when the
  // backward is fused) kind k + j, W kind 2k + j, with k stages.
  const std::vector<int>& stages() const { return stages_; }
  int num_kinds() const;
  // The kind on this rank whose microbatch must be done before a kind's is (-1: none, the F of
  // its first stage).
  int PredecessorOf(int kind) const;

  // The least time from a state to the end of the rank's remaining work, with every other rank
  // unlimited, or `need` when that is at least `need`; when the search would pass `node_limit`
  // nodes, a weaker lower bound (the state's one-machine bound). `done[kind]`: how many are done.
  // `ready[kind]`, for a kind with a predecessor: for each microbatch whose predecessor is done
  // and which is not, how long from now until it may start (>= 0), ascending.
  double LeastRest(const std::vector<int>& done, const std::vector<std::vector<double>>& ready,
                   double need, int64_t node_limit);
  int64_t nodes() const;  // over all calls

  // The last round trip's closed form (see above): a lower bound on LeastRest from the first
  // state (nothing done), no search; 0 where it does not apply.
  double LastRoundTrip() const { return last_round_trip_; }

 private:
  std::vector<int> stages_;
  std::vector<int> preds_;
  double last_round_trip_ = 0;
  std::unique_ptr<RankProblem> problem_;
};

}  // namespace zpipe::core

#endif  // ZPIPE_CORE_RANK_BOUND_H_
