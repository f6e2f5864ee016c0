// Recovery end to end, with a real coordinator and real worker processes training a small GPT:
// - the coordinator is killed (SIGKILL) or stopped (SIGTERM) mid-job and started again on the
//   same database: the workers keep computing, reconnect, send what they buffered, and the job
//   succeeds with the final loss of an uninterrupted run; its iteration count never goes back;
// - a worker is killed mid-job with restart.max_restarts and a spare worker: the job restarts
//   on its own from the latest complete checkpoint and ends bit-identical (every loss, the final
//   parameters) to an uninterrupted run; the event history names the dead worker.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/client.h"
#include "tests/support/local_cluster.h"
#include "tests/support/temp_dir.h"

namespace zpipe {
namespace {

namespace fs = std::filesystem;

class TempDir : public testing::TempDir {
 public:
  TempDir() : testing::TempDir("zpipe-recovery-e2e") {}
};

testing::LocalClusterOptions Options(const fs::path& dir) {
  testing::LocalClusterOptions o;
  o.coordinator_bin = ZPIPE_COORDINATOR_BIN;
  o.worker_bin = ZPIPE_WORKER_BIN;
  o.comm_timeout_s = "10";
  o.db = (dir / "coordinator.db").string();
  o.coordinator_args = {"--recovery-grace", "40s"};
  o.worker_args = {"--reconnect-max-backoff", "500ms"};
  return o;
}

v1::JobSpec GptSpec(const std::string& name, int iterations) {
  v1::JobSpec spec;
  spec.set_name(name);
  auto* gpt = spec.mutable_model()->mutable_gpt();
  gpt->set_layers(4);
  gpt->set_hidden(64);
  gpt->set_heads(2);
  gpt->set_seq_len(32);
  gpt->set_vocab(64);
  spec.mutable_parallel()->set_pipeline(2);
  spec.mutable_parallel()->set_data(1);
  spec.mutable_schedule()->set_kind("zb-v");
  spec.mutable_batch()->set_microbatches(4);
  spec.mutable_batch()->set_microbatch_size(4);
  spec.mutable_train()->set_iterations(iterations);
  spec.mutable_train()->set_optimizer("adamw");
  spec.mutable_train()->set_lr(3e-3);
  spec.mutable_train()->set_seed(1);
  return spec;
}

// Follows the job's events to the end: the last loss reported for each iteration (a restarted
// attempt reports the iterations it runs again), and every state change's reason.
struct Followed {
  std::map<int, double> losses;
  std::vector<std::string> reasons;
  std::chrono::steady_clock::time_point first_loss_at, last_loss_at;
};
Followed Follow(Client& client, const std::string& id) {
  Followed out;
  auto watch = client.Watch(id);
  while (true) {
    auto event = watch->Next();
    if (!event.ok() || !event->has_value()) break;
    if ((*event)->has_iteration() && (*event)->iteration().has_loss()) {
      out.losses[(*event)->iteration().iteration()] = (*event)->iteration().loss();
      out.last_loss_at = std::chrono::steady_clock::now();
      if (out.losses.size() == 1) out.first_loss_at = out.last_loss_at;
    }
    if ((*event)->has_state_change()) out.reasons.push_back((*event)->state_change().reason());
  }
  return out;
}

int IterationsDone(Client& client, const std::string& id) {
  auto job = client.Get(id);
  return job.ok() ? job->progress().iterations_done() : -1;
}

// Waits until the job has completed `n` iterations; false after `timeout_s`.
bool WaitIterations(Client& client, const std::string& id, int n, double timeout_s = 120) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    if (IterationsDone(client, id) >= n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// The last `n` lines of `text` (a process's log).
std::string TailOf(const std::string& text, size_t n) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  const size_t from = lines.size() > n ? lines.size() - n : 0;
  std::string out;
  for (size_t i = from; i < lines.size(); ++i) absl::StrAppend(&out, "  ", lines[i], "\n");
  return out;
}

std::string Slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The shortest job the tests run. How long a job must be to still be running when the
// coordinator comes back depends on the machine (LibTorch 2.x trains this GPT at 15-20 iterations
// a second on a loaded 2-core VM, several times that on a fast one), so CoordinatorGoesAway sizes
// its job from the rate the reference run measured.
constexpr int kIterations = 200;

// An uninterrupted run of `iterations`: its loss curve, and how many iterations it trained a
// second from its first loss to its last.
struct ReferenceRun {
  std::map<int, double> losses;
  double iterations_per_s = 0;
};

const ReferenceRun& Reference(int iterations = kIterations) {
  static auto* runs = new std::map<int, ReferenceRun>;  // never destroyed: used to the end
  auto it = runs->find(iterations);
  if (it != runs->end()) return it->second;
  ReferenceRun run;
  TempDir dir;
  testing::LocalCluster cluster(2, Options(dir.path()));
  EXPECT_TRUE(cluster.WaitIdle(2));
  EXPECT_TRUE(cluster.client().Submit(GptSpec("reference", iterations), "reference").ok());
  Followed f = Follow(cluster.client(), "reference");
  auto job = cluster.WaitTerminal("reference");
  EXPECT_TRUE(job.ok() && job->state() == v1::JOB_STATE_SUCCEEDED);
  run.losses = f.losses;
  const double span_s = std::chrono::duration<double>(f.last_loss_at - f.first_loss_at).count();
  run.iterations_per_s = span_s > 0 ? (f.losses.size() - 1) / span_s : 0;
  return runs->emplace(iterations, std::move(run)).first->second;
}

// Iterations enough that, at the reference's rate, the job still has `gap` plus 6 s of training
// left after the first 5 (the coordinator's restart and the workers' reconnection fit in that).
int IterationsOutlasting(std::chrono::milliseconds gap) {
  const double rate = Reference().iterations_per_s;
  const double needed_s = std::chrono::duration<double>(gap).count() + 6;
  const int needed = 5 + static_cast<int>(std::ceil(rate * needed_s));
  return std::max(kIterations, (needed + 49) / 50 * 50);
}

// Kills (or stops) the coordinator after a few iterations, starts it again after `gap`, and
// checks that the job succeeds where an uninterrupted run ends. Away less than 10 s, the job is
// sized to outlast the gap and the coordinator must find it still running; away longer, the
// workers may finish meanwhile, and the job's end and every summary reach the coordinator when it
// returns.
void CoordinatorGoesAway(int sig, std::chrono::milliseconds gap) {
  const bool outlast = gap < std::chrono::seconds(10);
  const int iterations = outlast ? IterationsOutlasting(gap) : kIterations;
  const ReferenceRun& reference = Reference(iterations);
  ASSERT_EQ(reference.losses.size(), static_cast<size_t>(iterations));
  TempDir dir;
  testing::LocalCluster cluster(2, Options(dir.path()));
  ASSERT_TRUE(cluster.WaitIdle(2));
  ASSERT_TRUE(cluster.client().Submit(GptSpec("survivor", iterations), "survivor").ok());
  ASSERT_TRUE(WaitIterations(cluster.client(), "survivor", 5));
  const int before = IterationsDone(cluster.client(), "survivor");
  const auto t0 = std::chrono::steady_clock::now();
  cluster.StopCoordinator(sig);
  std::this_thread::sleep_for(gap);
  cluster.StartCoordinator();

  // Never behind what it had before; the job was still running when the coordinator came back.
  int lowest = iterations, seen_running = 0;
  v1::Job job;
  while (true) {
    auto got = cluster.client().Get("survivor");
    if (!got.ok()) {
      ASSERT_EQ(got.status().code(), absl::StatusCode::kUnavailable) << got.status();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    job = *got;
    lowest = std::min(lowest, job.progress().iterations_done());
    seen_running += job.state() == v1::JOB_STATE_RUNNING;
    if (IsTerminal(job.state())) break;
    ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(180));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::printf("coordinator %s, back after %lld ms: %d-iteration job (reference %.1f it/s), "
              "%d iterations before, lowest after %d; %s\n",
              sig == SIGKILL ? "killed" : "stopped", static_cast<long long>(gap.count()),
              iterations, Reference().iterations_per_s, before, lowest, job.reason().c_str());
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.reason();
  EXPECT_GE(lowest, before) << "the iteration count went backwards";
  if (outlast) { EXPECT_GT(seen_running, 0) << "the coordinator came back to a finished job"; }
  EXPECT_EQ(job.attempt(), 1) << "the job continued; it was not run again";
  ASSERT_TRUE(job.has_latest_summary());
  EXPECT_EQ(job.latest_summary().iteration(), iterations - 1);
  EXPECT_EQ(job.latest_summary().loss(), reference.losses.at(iterations - 1))
      << "final loss differs from an uninterrupted run";
}

// Issue 30: away 20 s, 25-26 iteration summaries were lost. Away 60 s, longer than the whole job
// takes: the workers finish meanwhile and keep every report; when the coordinator is back (its
// --recovery-grace covers the outage), a watcher that rode out the outage has every iteration's
// summary, the job succeeded with an uninterrupted run's final loss, and its iteration count
// never went backwards.
TEST(RecoveryE2eTest, CoordinatorAwaySixtySecondsLosesNoIterationSummary) {
  const ReferenceRun& reference = Reference();
  TempDir dir;
  testing::LocalClusterOptions options = Options(dir.path());
  options.coordinator_args = {"--recovery-grace", "90s"};
  testing::LocalCluster cluster(2, options);
  ASSERT_TRUE(cluster.WaitIdle(2));
  ASSERT_TRUE(cluster.client().Submit(GptSpec("outage", kIterations), "outage").ok());
  // A watcher from the start, reconnecting for as long as the outage lasts.
  std::map<int, double> seen;
  std::thread watcher([&] {
    std::unique_ptr<Client> client = Client::Create(cluster.address());
    WatchOptions watch;
    watch.reconnect_timeout = absl::Seconds(120);
    absl::Status st = client->Watch("outage", watch, [&](const v1::JobEvent& event) {
      if (event.has_iteration() && event.iteration().has_loss()) {
        seen[event.iteration().iteration()] = event.iteration().loss();
      }
      return true;
    });
    EXPECT_TRUE(st.ok()) << st;
  });
  ASSERT_TRUE(WaitIterations(cluster.client(), "outage", 5));
  const int before = IterationsDone(cluster.client(), "outage");
  cluster.StopCoordinator(SIGKILL);
  std::this_thread::sleep_for(std::chrono::seconds(60));
  cluster.StartCoordinator();
  int lowest = kIterations;
  absl::StatusOr<v1::Job> job;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    job = cluster.client().Get("outage");
    if (job.ok()) {
      lowest = std::min(lowest, job->progress().iterations_done());
      if (IsTerminal(job->state())) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  watcher.join();
  ASSERT_TRUE(job.ok()) << job.status();
  std::printf("coordinator away 60 s: %d iterations before, lowest after %d, %zu of %d iteration "
              "summaries seen; %s\n",
              before, lowest, seen.size(), kIterations, job->reason().c_str());
  ASSERT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED) << job->reason();
  EXPECT_GE(lowest, before) << "the iteration count went backwards";
  EXPECT_EQ(job->attempt(), 1);
  EXPECT_EQ(seen.size(), static_cast<size_t>(kIterations)) << "iteration summaries were lost";
  EXPECT_EQ(seen, reference.losses) << "the losses seen differ from an uninterrupted run";
}

TEST(RecoveryE2eTest, CoordinatorKilledAndBackAfterOneSecond) {
  CoordinatorGoesAway(SIGKILL, std::chrono::milliseconds(1000));
}

TEST(RecoveryE2eTest, CoordinatorKilledAndBackAfterFiveSeconds) {
  CoordinatorGoesAway(SIGKILL, std::chrono::milliseconds(5000));
}

TEST(RecoveryE2eTest, CoordinatorKilledAndBackAfterTwentySeconds) {
  CoordinatorGoesAway(SIGKILL, std::chrono::milliseconds(20000));
}

TEST(RecoveryE2eTest, CoordinatorStoppedWithSigtermAndStartedAgain) {
  CoordinatorGoesAway(SIGTERM, std::chrono::milliseconds(500));
}

// Issue 30: with the coordinator killed first and then a worker, the failure reason named the
// surviving rank (its "connection reset" arrived, the dead one never came back). The reason must
// name the rank that died, whichever rank that is, with the survivor's failure as its effect.
void CoordinatorThenWorkerKilled(int victim_rank) {
  TempDir dir;
  testing::LocalClusterOptions options = Options(dir.path());
  // The dead worker is waited for this long after the restart before it is blamed.
  options.coordinator_args = {"--recovery-grace", "5s"};
  testing::LocalCluster cluster(2, options);
  ASSERT_TRUE(cluster.WaitIdle(2));
  ASSERT_TRUE(cluster.client().Submit(GptSpec("blame", 100000), "blame").ok());  // no restarts
  ASSERT_TRUE(WaitIterations(cluster.client(), "blame", 3));
  absl::StatusOr<v1::Job> running = cluster.client().Get("blame");
  ASSERT_TRUE(running.ok()) << running.status();
  std::string victim;
  for (const v1::RankAssignment& r : running->ranks()) {
    if (r.pipeline_rank() == victim_rank) victim = r.worker_name();
  }
  ASSERT_FALSE(victim.empty()) << running->DebugString();
  const int victim_index = victim == "w0" ? 0 : 1;

  cluster.StopCoordinator(SIGKILL);
  cluster.worker(victim_index).Signal(SIGKILL);
  cluster.worker(victim_index).Wait(30);
  // The survivor's receive from the dead rank fails meanwhile (--comm-timeout 10 s at most).
  std::this_thread::sleep_for(std::chrono::seconds(2));
  cluster.StartCoordinator();
  absl::StatusOr<v1::Job> job = cluster.WaitTerminal("blame", 120);
  ASSERT_TRUE(job.ok()) << job.status();
  std::printf("coordinator killed, then %s (pipeline rank %d): %s\n", victim.c_str(), victim_rank,
              job->reason().c_str());
  ASSERT_EQ(job->state(), v1::JOB_STATE_FAILED) << job->reason();
  // "coordinator restarted and worker w1 (pipeline rank 1, ...) did not reconnect within 5s; then
  // worker w0 (pipeline rank 0, ...) failed: ..." : the dead rank first, the survivor as effect.
  const std::string survivor = victim == "w0" ? "w1" : "w0";
  const size_t dead_at = job->reason().find(absl::StrCat("worker ", victim, " (pipeline rank ",
                                                          victim_rank, ", data rank 0)"));
  const size_t survivor_at = job->reason().find(absl::StrCat("worker ", survivor, " ("));
  ASSERT_NE(dead_at, std::string::npos) << "the dead rank is not named: " << job->reason();
  EXPECT_TRUE(survivor_at == std::string::npos || dead_at < survivor_at)
      << "the survivor is blamed first: " << job->reason();
  EXPECT_NE(job->reason().find("did not reconnect"), std::string::npos) << job->reason();
}

TEST(RecoveryE2eTest, CoordinatorThenTheLastRanksWorkerKilledBlamesThatRank) {
  CoordinatorThenWorkerKilled(1);
}

TEST(RecoveryE2eTest, CoordinatorThenTheFirstRanksWorkerKilledBlamesThatRank) {
  CoordinatorThenWorkerKilled(0);
}

TEST(RecoveryE2eTest, WorkerKilledJobRestartsOnTheSpareFromItsCheckpointBitIdentical) {
  TempDir dir;
  testing::LocalCluster cluster(3, Options(dir.path()));  // w2 is the spare
  ASSERT_TRUE(cluster.WaitIdle(3));
  constexpr int kShort = 24;
  auto with_checkpoint = [&](const std::string& name) {
    v1::JobSpec spec = GptSpec(name, kShort);
    spec.mutable_checkpoint()->set_every(3);
    spec.mutable_checkpoint()->set_dir((dir.path() / "ckpt").string());
    return spec;
  };
  // Uninterrupted, for the losses and the final parameters.
  ASSERT_TRUE(cluster.client().Submit(with_checkpoint("calm"), "calm").ok());
  const Followed calm = Follow(cluster.client(), "calm");
  ASSERT_EQ(cluster.WaitTerminal("calm")->state(), v1::JOB_STATE_SUCCEEDED);
  ASSERT_EQ(calm.losses.size(), static_cast<size_t>(kShort));
  ASSERT_TRUE(cluster.WaitIdle(3));

  v1::JobSpec spec = with_checkpoint("stormy");
  spec.mutable_restart()->set_max_restarts(2);
  spec.mutable_restart()->set_backoff("1s");
  ASSERT_TRUE(cluster.client().Submit(spec, "stormy").ok());
  Followed stormy;
  std::thread follower([&] { stormy = Follow(cluster.client(), "stormy"); });
  struct Joiner {
    testing::LocalCluster& cluster;
    std::thread& thread;
    ~Joiner() {
      (void)cluster.client().Cancel("stormy", "test over");
      thread.join();
    }
  } joiner{cluster, follower};
  ASSERT_TRUE(WaitIterations(cluster.client(), "stormy", 8));
  auto running = cluster.client().Get("stormy");
  ASSERT_TRUE(running.ok());
  // Workers are named w0, w1, w2: kill the one on pipeline rank 1.
  const std::string victim = running->ranks(1).worker_name();
  ASSERT_EQ(victim.substr(0, 1), "w");
  cluster.worker(std::stoi(victim.substr(1))).Signal(SIGKILL);

  auto job = cluster.WaitTerminal("stormy", 180);
  ASSERT_TRUE(job.ok()) << job.status() << "\n" << TailOf(cluster.coordinator().ReadErr(), 60);
  for (const std::string& r : stormy.reasons) std::printf("  event: %s\n", r.c_str());
  ASSERT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED) << job->reason();
  EXPECT_EQ(job->restarts(), 1);
  ASSERT_EQ(job->attempts_size(), 2);
  const v1::JobAttempt& first = job->attempts(0);
  const v1::JobAttempt& second = job->attempts(1);
  EXPECT_NE(first.end_reason().find(
                absl::StrCat("worker ", victim, " (pipeline rank 1, data rank 0) lost")),
            std::string::npos)
      << first.end_reason();
  ASSERT_EQ(second.workers_size(), 2);
  EXPECT_NE(second.workers(0), victim);
  EXPECT_NE(second.workers(1), victim) << "the spare takes the lost rank";
  // Killed at iteration >= 8: iter-6 is normally complete; a slow background write leaves iter-3.
  EXPECT_GE(second.start_iteration(), 3) << "resumed from a checkpoint, not from iteration 0";
  EXPECT_LE(second.start_iteration(), first.iterations_done());
  EXPECT_EQ(second.start_iteration() % 3, 0) << "resumed at a checkpoint boundary";
  std::printf("attempt 1 ended at %d iterations; attempt 2 resumed at %d\n",
              first.iterations_done(), second.start_iteration());
  bool named = false;
  for (const std::string& r : stormy.reasons) {
    named |= r.find("restart 1 of 2") != std::string::npos &&
             r.find(absl::StrCat("worker ", victim)) != std::string::npos;
  }
  EXPECT_TRUE(named) << "no RESTARTING event naming the dead worker";

  // Bit for bit: every loss, and the final parameters of every stage.
  ASSERT_EQ(stormy.losses.size(), static_cast<size_t>(kShort));
  for (const auto& [it, loss] : calm.losses) EXPECT_EQ(stormy.losses.at(it), loss) << it;
  const fs::path calm_end = dir.path() / "ckpt" / "calm" / absl::StrCat("iter-", kShort);
  const fs::path stormy_end = dir.path() / "ckpt" / "stormy" / absl::StrCat("iter-", kShort);
  int compared = 0;
  for (const auto& entry : fs::directory_iterator(calm_end)) {
    const std::string file = entry.path().filename().string();
    if (file.rfind("stage-", 0) != 0) continue;
    ++compared;
    EXPECT_TRUE(Slurp(entry.path()) == Slurp(stormy_end / file)) << file << " differs";
  }
  EXPECT_EQ(compared, 4) << "zb-v at p=2 has 4 stages";
}

// Chaos: a seeded random sequence of worker kills, worker SIGTERMs and coordinator kills under a
// job with checkpoints and restarts on; it must succeed with the loss of an uninterrupted run.
// ZPIPE_CHAOS_FAULTS (default 4), ZPIPE_CHAOS_SEED (default 1) and ZPIPE_CHAOS_ITERATIONS
// (default 60; the reference runs as long) size it; `scripts/bench chaos` runs a long one.
int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

// What a failed chaos run leaves to read: each attempt (its workers, resume point, end) and the
// last lines the live coordinator logged about the job (the killed ones' logs went with them).
std::string ChaosDiagnosis(const v1::Job& job, testing::LocalCluster& cluster) {
  std::string out = absl::StrCat("job ", job.id(), " ", v1::JobState_Name(job.state()), ": ",
                                 job.reason(), "\n");
  for (const v1::JobAttempt& a : job.attempts()) {
    absl::StrAppend(&out, "  attempt ", a.attempt(), " on ", absl::StrJoin(a.workers(), ","),
                    ": started at iteration ", a.start_iteration(), ", ended at ",
                    a.iterations_done(), ": ", a.end_reason(), "\n");
  }
  absl::StrAppend(&out, "the coordinator's log, last lines:\n",
                  TailOf(cluster.coordinator().ReadErr(), 80));
  return out;
}

TEST(RecoveryE2eTest, ChaosOfKillsAndSigtermsEndsLikeAnUninterruptedRun) {
  const int faults = EnvInt("ZPIPE_CHAOS_FAULTS", 4);
  const int seed = EnvInt("ZPIPE_CHAOS_SEED", 1);
  const int iterations = EnvInt("ZPIPE_CHAOS_ITERATIONS", kIterations);
  double reference_loss = 0;
  if (iterations == kIterations) {
    reference_loss = Reference().losses.at(kIterations - 1);
  } else {
    TempDir ref_dir;
    testing::LocalCluster calm(2, Options(ref_dir.path()));
    ASSERT_TRUE(calm.WaitIdle(2));
    ASSERT_TRUE(calm.client().Submit(GptSpec("reference", iterations), "reference").ok());
    auto done = calm.WaitTerminal("reference", 3600);
    ASSERT_TRUE(done.ok() && done->state() == v1::JOB_STATE_SUCCEEDED);
    reference_loss = done->latest_summary().loss();
  }

  TempDir dir;
  testing::LocalClusterOptions options = Options(dir.path());
  options.coordinator_args = {"--recovery-grace", "20s"};
  testing::LocalCluster cluster(3, options);
  ASSERT_TRUE(cluster.WaitIdle(3));
  v1::JobSpec spec = GptSpec("chaos", iterations);
  spec.mutable_checkpoint()->set_every(4);
  spec.mutable_checkpoint()->set_dir((dir.path() / "ckpt").string());
  spec.mutable_restart()->set_max_restarts(3 * faults + 3);
  spec.mutable_restart()->set_backoff("500ms");
  ASSERT_TRUE(cluster.client().Submit(spec, "chaos").ok());

  std::mt19937 rng(seed);
  int survived = 0, kills = 0, sigterms = 0, coordinator_kills = 0;
  int last = 0;
  std::vector<int> running_on;
  const auto t0 = std::chrono::steady_clock::now();
  for (int f = 0; f < faults; ++f) {
    // Let the job make progress between faults, so restarts do not run out.
    const auto wait_until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    bool finished = false;
    while (std::chrono::steady_clock::now() < wait_until) {
      auto job = cluster.client().Get("chaos");
      if (job.ok() && IsTerminal(job->state())) {
        finished = true;
        break;
      }
      if (job.ok() && job->state() == v1::JOB_STATE_RUNNING &&
          job->progress().iterations_done() >= last + 3) {
        last = job->progress().iterations_done();
        running_on.clear();
        for (const auto& r : job->ranks())
          running_on.push_back(std::stoi(r.worker_name().substr(1)));
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (finished) break;
    const int kind = static_cast<int>(rng() % 3);
    // A worker that holds a rank of the job (workers are named w0, w1, ...).
    const int victim = running_on.empty() ? static_cast<int>(rng() % cluster.num_workers())
                                          : running_on[rng() % running_on.size()];
    const auto downtime = std::chrono::milliseconds(300 + rng() % 1500);
    if (kind == 0) {
      std::printf("chaos: fault %d at iteration %d: kill -9 worker w%d\n", f + 1, last, victim);
      cluster.worker(victim).Signal(SIGKILL);
      std::this_thread::sleep_for(downtime);
      cluster.RestartWorker(victim);
      ++kills;
    } else if (kind == 1) {
      std::printf("chaos: fault %d at iteration %d: SIGTERM worker w%d\n", f + 1, last, victim);
      cluster.worker(victim).Signal(SIGTERM);
      cluster.worker(victim).Wait(30);
      std::this_thread::sleep_for(downtime);
      cluster.RestartWorker(victim);
      ++sigterms;
    } else {
      std::printf("chaos: fault %d at iteration %d: kill -9 the coordinator for %lld ms\n", f + 1,
                  last, static_cast<long long>(downtime.count()));
      cluster.StopCoordinator(SIGKILL);
      std::this_thread::sleep_for(downtime);
      cluster.StartCoordinator();
      ++coordinator_kills;
    }
    ++survived;
    std::fflush(stdout);
  }
  auto job = cluster.WaitTerminal("chaos", 600);
  ASSERT_TRUE(job.ok()) << job.status();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "chaos: seed %d: survived %d faults (%d worker kills, %d worker SIGTERMs, %d coordinator "
      "kills) with %d restarts in %.1f s; %s\n",
      seed, survived, kills, sigterms, coordinator_kills, job->restarts(), seconds,
      job->reason().c_str());
  ASSERT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED) << ChaosDiagnosis(*job, cluster);
  ASSERT_TRUE(job->has_latest_summary());
  EXPECT_EQ(job->latest_summary().iteration(), iterations - 1) << ChaosDiagnosis(*job, cluster);
  EXPECT_EQ(job->latest_summary().loss(), reference_loss)
      << "final loss differs from an uninterrupted run";
}

}  // namespace
}  // namespace zpipe
