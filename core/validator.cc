#include "core/validator.h"

#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/simulator.h"

namespace zpipe::core {
namespace {

absl::Status Bad(int rank, size_t index, const Action& a, absl::string_view why) {
  return absl::FailedPreconditionError(
      absl::StrCat("rank ", rank, " #", index, " '", ActionToString(a), "': ", why));
}

struct Slot {
  int count = 0;
  int rank = -1;
  size_t index = 0;
};

class Validator {
 public:
  Validator(const Plan& plan, const ValidateOptions& options)
      : plan_(plan), options_(options), pl_(plan.placement) {}

  absl::Status Run() {
    if (static_cast<int>(plan_.ranks.size()) != pl_.num_ranks()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "plan has ", plan_.ranks.size(), " rank lists but ", pl_.num_ranks(), " ranks"));
    }
    if (plan_.num_microbatches < 1) return absl::InvalidArgumentError("plan has no microbatches");
    const int s = pl_.num_stages(), m = plan_.num_microbatches;
    for (auto* t : {&f_, &b_, &w_, &bw_, &r_}) t->assign(size_t(s) * m, Slot{});
    if (auto st = CheckActions(); !st.ok()) return st;
    if (auto st = CheckCounts(); !st.ok()) return st;
    if (auto st = CheckLocalOrder(); !st.ok()) return st;
    if (plan_.IsLowered()) {
      if (auto st = CheckComm(); !st.ok()) return st;
    }
    return CheckTimedExecution();
  }

 private:
  Slot& SlotOf(std::vector<Slot>& t, int stage, int mb) {
    return t[size_t(stage) * plan_.num_microbatches + mb];
  }

  absl::Status CheckActions() {
    const int p = pl_.num_ranks(), s = pl_.num_stages(), m = plan_.num_microbatches;
    for (int r = 0; r < p; ++r) {
      std::set<std::pair<int, int>> reduces;
      const auto& actions = plan_.ranks[r];
      for (size_t k = 0; k < actions.size(); ++k) {
        const Action& a = actions[k];
        if (a.kind == ActionKind::kReduce) {
          if (a.chunk < 0 || a.chunk >= pl_.chunks_per_rank() || a.bucket < 0) {
            return Bad(r, k, a, "chunk or bucket out of range");
          }
          if (!reduces.insert({a.chunk, a.bucket}).second) {
            return Bad(r, k, a, "bucket reduced twice in one iteration");
          }
          continue;
        }
        if (a.stage < 0 || a.stage >= s)
          return Bad(r, k, a, absl::StrCat("stage not in [0, ", s, ")"));
        if (a.microbatch < 0 || a.microbatch >= m) {
          return Bad(r, k, a, absl::StrCat("microbatch not in [0, ", m, ")"));
        }
        if (IsComm(a.kind)) {
          if (a.peer < 0 || a.peer >= p) return Bad(r, k, a, "peer rank out of range");
          if (a.peer == r) return Bad(r, k, a, "comm within a rank");
          continue;
        }
        if (pl_.RankOf(a.stage) != r) {
          return Bad(r, k, a,
                     absl::StrCat("stage ", a.stage, " is placed on rank ", pl_.RankOf(a.stage)));
        }
        std::vector<Slot>* table = nullptr;
        switch (a.kind) {
          case ActionKind::kForward:
            table = &f_;
            break;
          case ActionKind::kBackwardInput:
            table = &b_;
            break;
          case ActionKind::kBackwardWeight:
            table = &w_;
            break;
          case ActionKind::kBackwardFull:
            table = &bw_;
            break;
          case ActionKind::kRecompute:
            table = &r_;
            break;
          default:
            break;
        }
        Slot& slot = SlotOf(*table, a.stage, a.microbatch);
        if (++slot.count > 1) return Bad(r, k, a, "appears more than once");
        slot.rank = r;
        slot.index = k;
      }
    }
    return absl::OkStatus();
  }

  absl::Status CheckCounts() {
    for (int s = 0; s < pl_.num_stages(); ++s) {
      for (int i = 0; i < plan_.num_microbatches; ++i) {
        const Slot &f = SlotOf(f_, s, i), &b = SlotOf(b_, s, i), &w = SlotOf(w_, s, i),
                   &bw = SlotOf(bw_, s, i);
        auto missing = [&](absl::string_view what) {
          return absl::FailedPreconditionError(
              absl::StrCat("stage ", s, " microbatch ", i, " (rank ", pl_.RankOf(s), "): ", what));
        };
        if (f.count == 0) return missing("no F");
        if (bw.count == 1 && (b.count || w.count)) return missing("has BW and also B or W");
        if (bw.count == 0 && b.count == 0) return missing("no B (or BW)");
        if (bw.count == 0 && w.count == 0) return missing("no W (or BW)");
      }
    }
    return absl::OkStatus();
  }

  absl::Status CheckLocalOrder() {
    const int s_count = pl_.num_stages();
    for (int s = 0; s < s_count; ++s) {
      for (int i = 0; i < plan_.num_microbatches; ++i) {
        const Slot& f = SlotOf(f_, s, i);
        const Slot& bwd = SlotOf(bw_, s, i).count ? SlotOf(bw_, s, i) : SlotOf(b_, s, i);
        const int r = f.rank;
        auto at = [&](const Slot& slot) { return plan_.ranks[slot.rank][slot.index]; };
        if (bwd.index < f.index) return Bad(r, bwd.index, at(bwd), "runs before its F");
        if (const Slot& rc = SlotOf(r_, s, i); rc.count) {
          if (rc.index < f.index) return Bad(r, rc.index, at(rc), "recomputes before its F");
          if (rc.index > bwd.index) return Bad(r, rc.index, at(rc), "recomputes after its backward");
        }
        const Slot& w = SlotOf(w_, s, i);
        if (w.count && w.index < bwd.index) return Bad(r, w.index, at(w), "runs before its B");
        if (s > 0 && pl_.RankOf(s - 1) == r && SlotOf(f_, s - 1, i).index > f.index) {
          return Bad(r, f.index, at(f), "runs before F of the previous stage on the same rank");
        }
        if (s + 1 < s_count && pl_.RankOf(s + 1) == r) {
          const Slot& next =
              SlotOf(bw_, s + 1, i).count ? SlotOf(bw_, s + 1, i) : SlotOf(b_, s + 1, i);
          if (next.index > bwd.index) {
            return Bad(r, bwd.index, at(bwd),
                       "runs before the backward of the next stage on the same rank");
          }
        }
      }
    }
    return absl::OkStatus();
  }

  // Lowered plans: every cross-rank edge has one SEND after its producer and one RECV before its
  // consumer, and between two ranks the k-th send and the k-th receive carry the same tensor.
  absl::Status CheckComm() {
    const int p = pl_.num_ranks();
    sends_.clear();
    recvs_.clear();
    send_order_.assign(p, std::vector<std::vector<CommKey>>(p));
    recv_order_.assign(p, std::vector<std::vector<CommKey>>(p));
    for (int r = 0; r < p; ++r) {
      const auto& actions = plan_.ranks[r];
      for (size_t k = 0; k < actions.size(); ++k) {
        const Action& a = actions[k];
        if (IsSend(a.kind)) {
          if (absl::Status st = CheckSend(r, k, a); !st.ok()) return st;
        } else if (IsRecv(a.kind)) {
          if (absl::Status st = CheckRecv(r, k, a); !st.ok()) return st;
        }
      }
    }
    if (absl::Status st = CheckEdgesCovered(); !st.ok()) return st;
    return CheckPairOrder();
  }

  // The slot of the backward of (stage, mb): its BW when it has one, else its B.
  Slot& BackwardSlotOf(int stage, int mb) {
    return SlotOf(bw_, stage, mb).count ? SlotOf(bw_, stage, mb) : SlotOf(b_, stage, mb);
  }

  // SEND `a`, action k of rank r: sent once, by the producer's rank after the producer, to the
  // consumer's rank.
  absl::Status CheckSend(int r, size_t k, const Action& a) {
    const CommKey key{a.kind, a.stage, a.microbatch};
    if (!sends_.emplace(key, std::pair{r, k}).second) return Bad(r, k, a, "sent twice");
    const bool act = a.kind == ActionKind::kSendAct;
    const int from = pl_.RankOf(a.stage);
    const int next_stage = act ? a.stage + 1 : a.stage - 1;
    if (next_stage < 0 || next_stage >= pl_.num_stages()) {
      return Bad(r, k, a, "no stage consumes this tensor");
    }
    if (from != r) return Bad(r, k, a, "sent by a rank that does not hold the stage");
    if (pl_.RankOf(next_stage) != a.peer) {
      return Bad(r, k, a,
                 absl::StrCat("stage ", next_stage, " is on rank ", pl_.RankOf(next_stage)));
    }
    const Slot& producer =
        act ? SlotOf(f_, a.stage, a.microbatch) : BackwardSlotOf(a.stage, a.microbatch);
    if (producer.index > k) return Bad(r, k, a, "sent before it is produced");
    send_order_[r][a.peer].push_back(key);
    return absl::OkStatus();
  }

  // RECV `a`, action k of rank r: received once, from the producer's rank, by the consumer's
  // rank before the consumer.
  absl::Status CheckRecv(int r, size_t k, const Action& a) {
    const ActionKind send_kind =
        a.kind == ActionKind::kRecvAct ? ActionKind::kSendAct : ActionKind::kSendGrad;
    const CommKey key{send_kind, a.stage, a.microbatch};
    if (!recvs_.emplace(key, std::pair{r, k}).second) return Bad(r, k, a, "received twice");
    const bool act = a.kind == ActionKind::kRecvAct;
    const int consumer_stage = act ? a.stage + 1 : a.stage - 1;
    if (consumer_stage < 0 || consumer_stage >= pl_.num_stages() ||
        pl_.RankOf(consumer_stage) != r) {
      return Bad(r, k, a, "received by a rank that does not consume it");
    }
    if (pl_.RankOf(a.stage) != a.peer) return Bad(r, k, a, "wrong peer");
    const Slot& consumer = act ? SlotOf(f_, consumer_stage, a.microbatch)
                               : BackwardSlotOf(consumer_stage, a.microbatch);
    if (consumer.index < k) return Bad(r, k, a, "received after its consumer ran");
    recv_order_[a.peer][r].push_back(key);
    return absl::OkStatus();
  }

  // Every cross-rank edge has its SEND and its RECV.
  absl::Status CheckEdgesCovered() const {
    for (int s = 0; s < pl_.num_stages(); ++s) {
      for (int i = 0; i < plan_.num_microbatches; ++i) {
        for (ActionKind kind : {ActionKind::kSendAct, ActionKind::kSendGrad}) {
          const int other = kind == ActionKind::kSendAct ? s + 1 : s - 1;
          if (other < 0 || other >= pl_.num_stages() || pl_.RankOf(other) == pl_.RankOf(s))
            continue;
          const CommKey key{kind, s, i};
          const Action a = Action::Comm(kind, s, i, pl_.RankOf(other));
          if (!sends_.count(key)) {
            return absl::FailedPreconditionError(
                absl::StrCat("missing '", ActionToString(a), "' on rank ", pl_.RankOf(s)));
          }
          if (!recvs_.count(key)) {
            return absl::FailedPreconditionError(absl::StrCat(
                "missing receive of '", ActionToString(a), "' on rank ", pl_.RankOf(other)));
          }
        }
      }
    }
    return absl::OkStatus();
  }

  // Pairwise ordering rule: the k-th SEND a->b and the k-th RECV on b from a match.
  absl::Status CheckPairOrder() const {
    const int p = pl_.num_ranks();
    auto name = [](const CommKey& key) {
      return absl::StrCat(std::get<0>(key) == ActionKind::kSendAct ? "ACT" : "GRAD", " s",
                          std::get<1>(key), " mb", std::get<2>(key));
    };
    for (int a = 0; a < p; ++a) {
      for (int b = 0; b < p; ++b) {
        const auto& so = send_order_[a][b];
        const auto& ro = recv_order_[a][b];
        for (size_t k = 0; k < std::min(so.size(), ro.size()); ++k) {
          if (so[k] != ro[k]) {
            return absl::FailedPreconditionError(absl::StrCat(
                "comm order: send #", k, " from rank ", a, " to rank ", b, " carries ", name(so[k]),
                " but receive #", k, " on rank ", b, " expects ", name(ro[k])));
          }
        }
      }
    }
    return absl::OkStatus();
  }

  absl::Status CheckTimedExecution() {
    CostModel unit;
    const CostModel* cost = options_.cost;
    if (cost == nullptr) {
      unit = CostModel::Uniform(pl_.num_stages(), StageCost{});
      cost = &unit;
    }
    auto sim = Simulate(plan_, *cost);
    if (!sim.ok()) return sim.status();
    if (plan_.IsLowered()) {
      SimOptions strict;
      strict.blocking_recv = true;
      auto in_order = Simulate(plan_, *cost, strict);
      if (!in_order.ok()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "in-order execution with blocking receives fails: ", in_order.status().message()));
      }
    }
    if (options_.memory_limit) {
      const double limit = *options_.memory_limit;
      const double eps = 1e-9 * std::max(1.0, std::abs(limit));
      for (int r = 0; r < pl_.num_ranks(); ++r) {
        double mem = 0;
        const auto& actions = plan_.ranks[r];
        for (size_t k = 0; k < actions.size(); ++k) {
          const Action& a = actions[k];
          const bool recomputed =
              IsCompute(a.kind) && SlotOf(r_, a.stage, a.microbatch).count > 0;
          mem += cost->MemoryDelta(a, recomputed);
          if (mem > limit + eps) {
            return Bad(r, k, actions[k],
                       absl::StrCat("memory ", mem, " exceeds the limit ", limit));
          }
        }
      }
    }
    return absl::OkStatus();
  }

  const Plan& plan_;
  const ValidateOptions& options_;
  const Placement& pl_;
  std::vector<Slot> f_, b_, w_, bw_, r_;
  // CheckComm's ledger. A tensor is keyed by its SEND's kind, its stage and its microbatch.
  using CommKey = std::tuple<ActionKind, int, int>;
  std::map<CommKey, std::pair<int, size_t>> sends_, recvs_;  // where it is sent / received
  // [sender][receiver]: the tensors in the order the sender sends / the receiver receives them.
  std::vector<std::vector<std::vector<CommKey>>> send_order_, recv_order_;
};

}  // namespace

absl::Status ValidatePlan(const Plan& plan, const ValidateOptions& options) {
  return Validator(plan, options).Run();
}

}  // namespace zpipe::core
