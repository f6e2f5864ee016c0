#include "core/lowering.h"

#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace zpipe::core {
namespace {

// A cross-rank message: kind (SEND_ACT or SEND_GRAD), producing stage, microbatch.
using MessageKey = std::tuple<ActionKind, int, int>;

// The message a compute action produces for another rank, if any (kind is the SEND kind).
bool ProducedMessage(const Placement& pl, const Action& a, int rank, Action* send) {
  const int s = a.stage;
  if (a.kind == ActionKind::kForward && s + 1 < pl.num_stages() && pl.RankOf(s + 1) != rank) {
    *send = Action::Comm(ActionKind::kSendAct, s, a.microbatch, pl.RankOf(s + 1));
    return true;
  }
  if ((a.kind == ActionKind::kBackwardInput || a.kind == ActionKind::kBackwardFull) && s > 0 &&
      pl.RankOf(s - 1) != rank) {
    *send = Action::Comm(ActionKind::kSendGrad, s, a.microbatch, pl.RankOf(s - 1));
    return true;
  }
  return false;
}

// The message a compute action consumes from another rank, if any (kind is the RECV kind).
bool ConsumedMessage(const Placement& pl, const Action& a, int rank, Action* recv) {
  const int s = a.stage;
  if (a.kind == ActionKind::kForward && s > 0 && pl.RankOf(s - 1) != rank) {
    *recv = Action::Comm(ActionKind::kRecvAct, s - 1, a.microbatch, pl.RankOf(s - 1));
    return true;
  }
  if ((a.kind == ActionKind::kBackwardInput || a.kind == ActionKind::kBackwardFull) &&
      s + 1 < pl.num_stages() && pl.RankOf(s + 1) != rank) {
    *recv = Action::Comm(ActionKind::kRecvGrad, s + 1, a.microbatch, pl.RankOf(s + 1));
    return true;
  }
  return false;
}

ActionKind RecvKindOf(ActionKind send) {
  return send == ActionKind::kSendAct ? ActionKind::kRecvAct : ActionKind::kRecvGrad;
}

}  // namespace

absl::StatusOr<Plan> LowerComm(const Plan& compute_plan) {
  if (compute_plan.IsLowered()) {
    return absl::InvalidArgumentError("lowering: the plan already has comm actions");
  }
  const Placement& pl = compute_plan.placement;
  const int p = compute_plan.num_ranks();
  Plan out = compute_plan;
  for (auto& r : out.ranks) r.clear();

  // Pass 1: sends right after their producers; remember each pair's send order.
  std::vector<std::vector<std::vector<Action>>> sent(p, std::vector<std::vector<Action>>(p));
  std::vector<std::vector<Action>> with_sends(p);
  for (int r = 0; r < p; ++r) {
    for (const Action& a : compute_plan.ranks[r]) {
      with_sends[r].push_back(a);
      Action send;
      if (ProducedMessage(pl, a, r, &send)) {
        with_sends[r].push_back(send);
        sent[r][send.peer].push_back(
            Action::Comm(RecvKindOf(send.kind), send.stage, send.microbatch, r));
      }
    }
  }
  // Index of each message within its pair's send order.
  std::map<std::pair<int, MessageKey>, size_t> position;  // (receiver, key) -> index
  for (int a = 0; a < p; ++a) {
    for (int b = 0; b < p; ++b) {
      for (size_t k = 0; k < sent[a][b].size(); ++k) {
        const Action& m = sent[a][b][k];
        position[{b, MessageKey{m.kind, m.stage, m.microbatch}}] = k;
      }
    }
  }

  // Pass 2: before each consumer, the receives from that peer in the peer's send order.
  for (int r = 0; r < p; ++r) {
    std::vector<size_t> next(p, 0);  // receives from each peer already emitted
    for (const Action& a : with_sends[r]) {
      Action recv;
      if (IsCompute(a.kind) && ConsumedMessage(pl, a, r, &recv)) {
        auto it = position.find({r, MessageKey{recv.kind, recv.stage, recv.microbatch}});
        if (it == position.end()) {
          return absl::FailedPreconditionError(absl::StrCat(
              "lowering: rank ", r, ": '", ActionToString(a), "' needs ",
              recv.kind == ActionKind::kRecvAct ? "F" : "B", " s", recv.stage, " mb",
              recv.microbatch, " from rank ", recv.peer, ", which the plan does not produce"));
        }
        const auto& order = sent[recv.peer][r];
        while (next[recv.peer] <= it->second) out.ranks[r].push_back(order[next[recv.peer]++]);
      }
      out.ranks[r].push_back(a);
    }
    for (int peer = 0; peer < p; ++peer) {
      // Messages nobody consumes would be a plan bug; receive them at the end so the pairwise
      // order still holds and the validator can report the orphan.
      while (next[peer] < sent[peer][r].size()) out.ranks[r].push_back(sent[peer][r][next[peer]++]);
    }
  }
  return out;
}

Plan StripComm(const Plan& plan) {
  Plan out = plan;
  for (auto& r : out.ranks) {
    std::erase_if(r, [](const Action& a) { return IsComm(a.kind); });
  }
  return out;
}

}  // namespace zpipe::core
