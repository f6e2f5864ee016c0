// Re-plans on the worker (PlanUpdate in worker.proto): the coordinator sends "run plan v from
// iteration k"; every rank of the job must switch at the same iteration or none may, since a
// rank running one plan against a peer running another would deadlock on mismatched sends.
//
// Protocol, through the job attempt's rendezvous store (the coordinator's, so no extra service):
// when an update arrives (Offer, on the session thread) the rank answers at once with key
// `plan/v<v>/<global rank>`: "ok" when it has not started iteration k yet, else "late". The
// answer and the job thread's start of an iteration are serialised by one mutex, so "ok" means
// this rank will stop before iteration k. Right before iteration k (BeforeIteration, on the job
// thread) a rank that said "ok" waits for all p * d answers and switches only when all are "ok";
// a rank that said "late" never switches; so all ranks agree. Answering on arrival, not at the
// next boundary, matters: a late rank is inside iteration k waiting on its peers, which are
// waiting for its answer. The wait is bounded by the communication timeout: a rank that never
// answers (its session was down the whole lead time) fails the job like a lost peer would, never
// a split switch.
//
// PlanUpdateChannel carries updates from the daemon's session thread to the running job's
// switcher (buffering those that arrive before it is attached). Both classes are thread-safe.
#ifndef ZPIPE_WORKER_DAEMON_PLAN_SWITCH_H_
#define ZPIPE_WORKER_DAEMON_PLAN_SWITCH_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/plan.h"
#include "worker/comm/key_value_store.h"

namespace zpipe::worker {

// "Run plan `plan_version` (plan_text) from iteration `switch_iteration` on", for one attempt of
// the running job (worker.proto PlanUpdate, converted in job_proto.h).
struct PlanUpdate {
  int attempt = 0;
  int plan_version = 0;
  int switch_iteration = 0;
  std::string plan_text;  // the full lowered plan; parsed when every rank agreed to switch
};

class PlanUpdateChannel {
 public:
  using Handler = std::function<void(const PlanUpdate&)>;
  // Hands `update` to the attached handler (on this thread), or keeps it until one attaches.
  void Deliver(const PlanUpdate& update);
  // Attaches `handler` (and hands it what was kept); Attach(nullptr) detaches, after which no
  // handler call is running or will run.
  void Attach(Handler handler);

 private:
  // Held while the handler runs, so Attach(nullptr) returns only once no call is running.
  absl::Mutex mu_;
  Handler handler_ ABSL_GUARDED_BY(mu_);
  std::vector<PlanUpdate> kept_ ABSL_GUARDED_BY(mu_);
};

struct PlanSwitch {
  core::Plan plan;
  int version = 0;
};

class PlanSwitcher {
 public:
  // `store`: the job attempt's rendezvous keys (already prefixed); must outlive this object.
  // `current`: the plan the assignment started with, whose version is `version`.
  PlanSwitcher(KeyValueStore& store, const core::Plan& current, int version, int attempt,
               int global_rank, int world_size, absl::Duration timeout);

  // An update from the coordinator (session thread). Answers it in the store; errors from the
  // store are logged and leave the update unanswered (the job then fails at the wait).
  void Offer(const PlanUpdate& update);

  // On the job thread, before iteration `iteration` starts. Returns the plan to run from this
  // iteration on, or nullopt to keep the current one. Errors: the wait for the other ranks'
  // answers failed or timed out (the rank should fail), or the agreed plan does not fit this
  // rank's plan shape (a coordinator bug).
  absl::StatusOr<std::optional<PlanSwitch>> BeforeIteration(int iteration);

  int version() const;

 private:
  KeyValueStore& store_;
  const int num_ranks_, num_stages_, num_microbatches_, chunks_;
  const int attempt_;
  const int global_rank_;
  const int world_size_;
  const absl::Duration timeout_;
  // Serialises an answer (Offer) with the start of an iteration (BeforeIteration).
  mutable absl::Mutex mu_;
  int version_ ABSL_GUARDED_BY(mu_);
  int started_ ABSL_GUARDED_BY(mu_) = -1;  // the iteration started last
  std::optional<PlanUpdate> pending_ ABSL_GUARDED_BY(mu_);  // answered "ok"
};

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_DAEMON_PLAN_SWITCH_H_
