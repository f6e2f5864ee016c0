// WorkerRegistry on its own: names, sessions, heartbeats, death and release, with fake
// connections recording what a worker would receive. No jobs are involved: the registry only
// records job ids it is given.
#include "coordinator/worker_registry.h"

#include <array>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/testing/fake_connection.h"
#include "gtest/gtest.h"

namespace zpipe::coordinator {
namespace {

WorkerRegistration Named(const std::string& name, const std::string& instance_id = "") {
  WorkerRegistration reg;
  reg.name = name;
  reg.instance_id = instance_id;
  return reg;
}

RankSlot Slot(int pipeline_rank, int data_rank, const std::string& worker) {
  RankSlot slot;
  slot.pipeline_rank = pipeline_rank;
  slot.data_rank = data_rank;
  slot.worker_name = worker;
  return slot;
}

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);

TEST(WorkerRegistryTest, ValidatesNamesAndCapabilities) {
  EXPECT_TRUE(WorkerRegistry::Validate(Named("w-0.a_b:1/2")).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(WorkerRegistry::Validate(Named(""))));
  EXPECT_EQ(WorkerRegistry::Validate(Named("bad name")).message(),
            "name: may only contain A-Z, a-z, 0-9 and . _ - : /");
  WorkerRegistration reg = Named("w");
  reg.capabilities = WorkerCapabilities{};
  reg.capabilities->cuda_device_count = -1;
  EXPECT_EQ(WorkerRegistry::Validate(reg).message(),
            "capabilities.cuda_device_count: must be >= 0");
}

TEST(WorkerRegistryTest, AConnectedNameIsHeldExceptByItsOwnProcess) {
  WorkerRegistry registry;
  FakeConnection c;
  const std::string id = registry.Add(Named("a", "inst-1"), kT0).info.worker_id;
  EXPECT_TRUE(registry.CheckNameFree(Named("a", "other")).ok());  // no stream yet
  ASSERT_TRUE(registry.Attach(id, "inst-1", &c, kT0).ok());
  EXPECT_TRUE(absl::IsAlreadyExists(registry.CheckNameFree(Named("a", "other"))));
  EXPECT_TRUE(registry.CheckNameFree(Named("a", "inst-1")).ok());

  // The same process re-registering replaces the entry: the old stream and id are gone.
  const std::string again = registry.Add(Named("a", "inst-1"), kT0).info.worker_id;
  EXPECT_NE(again, id);
  EXPECT_EQ(c.closed.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(registry.ById(id), nullptr);
  EXPECT_TRUE(absl::IsNotFound(registry.NameOf(id).status()));
  EXPECT_EQ(*registry.NameOf(again), "a");
  EXPECT_EQ(registry.List(true).size(), 1u);
}

TEST(WorkerRegistryTest, AttachChecksTheInstanceAndReplacesAnOlderStream) {
  WorkerRegistry registry;
  FakeConnection first, second;
  const std::string id = registry.Add(Named("a", "inst-1"), kT0).info.worker_id;
  EXPECT_TRUE(absl::IsNotFound(registry.Attach("nope", "inst-1", &first, kT0)));
  EXPECT_TRUE(absl::IsPermissionDenied(registry.Attach(id, "inst-2", &first, kT0)));
  ASSERT_TRUE(registry.Attach(id, "inst-1", &first, kT0).ok());
  ASSERT_TRUE(registry.Attach(id, "inst-1", &second, kT0).ok());
  EXPECT_EQ(first.closed.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(registry.ById(id)->connection, &second);
  EXPECT_TRUE(registry.ById(id)->info.connected);
  // Detaching a stream that is no longer current changes nothing.
  EXPECT_EQ(registry.Detach(id, &first), nullptr);
}

TEST(WorkerRegistryTest, AnIdleWorkerWhoseStreamEndsIsDeadABusyOneKeepsItsRank) {
  WorkerRegistry registry;
  FakeConnection ca, cb;
  RegisteredWorker& a = registry.Add(Named("a"), kT0);
  RegisteredWorker& b = registry.Add(Named("b"), kT0);
  ASSERT_TRUE(registry.Attach(a.info.worker_id, "", &ca, kT0).ok());
  ASSERT_TRUE(registry.Attach(b.info.worker_id, "", &cb, kT0).ok());
  WorkerRegistry::Reserve(b, "j", 1, 0);

  ASSERT_EQ(registry.Detach(a.info.worker_id, &ca), &a);
  EXPECT_EQ(a.info.state, WorkerState::kDead);
  EXPECT_EQ(a.info.reason, "session stream closed");
  EXPECT_TRUE(absl::IsFailedPrecondition(registry.Attach(a.info.worker_id, "", &ca, kT0)));

  ASSERT_EQ(registry.Detach(b.info.worker_id, &cb), &b);
  EXPECT_EQ(b.info.state, WorkerState::kBusy);
  EXPECT_EQ(*registry.WhyNotRunning(Slot(1, 0, "b"), "j"),
            "worker b (pipeline rank 1, data rank 0) lost: its session closed");
}

TEST(WorkerRegistryTest, HeartbeatsKeepWorkersAliveAndSayWhenATeardownIsDone) {
  WorkerRegistry registry;
  FakeConnection c;
  RegisteredWorker& a = registry.Add(Named("a"), kT0);
  ASSERT_TRUE(registry.Attach(a.info.worker_id, "", &c, kT0).ok());
  bool torn_down = true;
  ASSERT_TRUE(registry.Heartbeat(a.info.worker_id, "j", kT0 + absl::Seconds(5), &torn_down).ok());
  EXPECT_FALSE(torn_down);
  EXPECT_EQ(a.info.reported_job, "j");
  EXPECT_TRUE(registry.IdleFor(DeviceKind::kCpu, nullptr).empty());  // still tearing j down
  ASSERT_TRUE(registry.Heartbeat(a.info.worker_id, "", kT0 + absl::Seconds(6), &torn_down).ok());
  EXPECT_TRUE(torn_down);
  EXPECT_EQ(registry.IdleFor(DeviceKind::kCpu, nullptr).size(), 1u);

  EXPECT_TRUE(registry.SilentWorkers(kT0 + absl::Seconds(16), absl::Seconds(10)).empty());
  std::vector<RegisteredWorker*> silent =
      registry.SilentWorkers(kT0 + absl::Seconds(17), absl::Seconds(10));
  ASSERT_EQ(silent.size(), 1u);
  EXPECT_EQ(registry.MarkDead(*silent[0], "no heartbeat for 11s"), "");
  EXPECT_EQ(c.closed.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::IsAborted(registry.Heartbeat(a.info.worker_id, "", kT0, &torn_down)));

  // Listed while dead for a while, then forgotten.
  EXPECT_EQ(registry.List(false).size(), 0u);
  registry.ForgetDead(kT0 + absl::Seconds(6) + WorkerLimits{}.dead_retention);
  EXPECT_EQ(registry.List(true).size(), 1u);
  registry.ForgetDead(kT0 + absl::Seconds(7) + WorkerLimits{}.dead_retention);
  EXPECT_EQ(registry.List(true).size(), 0u);
  EXPECT_TRUE(absl::IsNotFound(registry.NameOf(a.info.worker_id).status()));
}

// Liveness without the jobs lock: what a session reads keeps its worker alive, and a worker whose
// message the coordinator is still handling (waiting for that lock) is never the silent one.
TEST(WorkerRegistryTest, MessagesTheSessionReadsKeepAWorkerAliveWithoutHeartbeats) {
  WorkerRegistry registry;
  FakeConnection c;
  RegisteredWorker& a = registry.Add(Named("a"), kT0);
  ASSERT_TRUE(registry.Attach(a.info.worker_id, "", &c, kT0).ok());
  const absl::Duration timeout = absl::Seconds(10);
  EXPECT_EQ(WorkerRegistry::LastSeen(a, kT0 + absl::Seconds(3)), kT0);

  c.Heard(kT0 + absl::Seconds(8));  // a progress batch, say: no registry call at all
  c.Handled();
  EXPECT_EQ(WorkerRegistry::LastSeen(a, kT0 + absl::Seconds(9)), kT0 + absl::Seconds(8));
  EXPECT_TRUE(registry.SilentWorkers(kT0 + absl::Seconds(17), timeout).empty());
  EXPECT_EQ(registry.List(false)[0].last_seen, kT0 + absl::Seconds(8));

  c.Heard(kT0 + absl::Seconds(9));  // and still handling it 30 s later: the delay is ours
  EXPECT_TRUE(registry.SilentWorkers(kT0 + absl::Seconds(40), timeout).empty());
  c.Handled();
  std::vector<RegisteredWorker*> silent = registry.SilentWorkers(kT0 + absl::Seconds(40), timeout);
  ASSERT_EQ(silent.size(), 1u);

  // What the session heard outlives it: the stream ends, the worker is listed as last seen then.
  registry.Detach(a.info.worker_id, &c);
  EXPECT_EQ(a.info.last_seen, kT0 + absl::Seconds(9));
}

TEST(WorkerRegistryTest, MarkDeadHandsBackTheJobAndKeepsTheRankForTheReason) {
  WorkerRegistry registry;
  FakeConnection c;
  RegisteredWorker& a = registry.Add(Named("a"), kT0);
  ASSERT_TRUE(registry.Attach(a.info.worker_id, "", &c, kT0).ok());
  WorkerRegistry::Reserve(a, "j", 2, 1);
  EXPECT_TRUE(registry.HoldsRank("a", "j", 2, 1));
  EXPECT_TRUE(WorkerRegistry::CheckRank(a, "j", 2, 1).ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(WorkerRegistry::CheckRank(a, "j", 0, 1)));
  EXPECT_EQ(registry.MarkDead(a, "left: SIGTERM"), "j");
  EXPECT_EQ(a.info.job_id, "");
  EXPECT_EQ(a.info.pipeline_rank, 2);
  EXPECT_EQ(*registry.WhyNotRunning(Slot(2, 1, "a"), "j"),
            "worker a (pipeline rank 2, data rank 1) lost: left: SIGTERM");
  EXPECT_EQ(*registry.WhyNotRunning(Slot(0, 0, "gone"), "j"),
            "worker gone (pipeline rank 0, data rank 0) lost: no longer registered");
}

TEST(WorkerRegistryTest, ReleaseCancelsTheJobsWorkersOnly) {
  WorkerRegistry registry;
  FakeConnection ca, cb, cc;
  RegisteredWorker& a = registry.Add(Named("a"), kT0);
  RegisteredWorker& b = registry.Add(Named("b"), kT0);
  RegisteredWorker& other = registry.Add(Named("c"), kT0);
  ASSERT_TRUE(registry.Attach(a.info.worker_id, "", &ca, kT0).ok());
  ASSERT_TRUE(registry.Attach(b.info.worker_id, "", &cb, kT0).ok());
  ASSERT_TRUE(registry.Attach(other.info.worker_id, "", &cc, kT0).ok());
  WorkerRegistry::Reserve(a, "j", 0, 0);
  WorkerRegistry::Reserve(b, "j", 1, 0);
  WorkerRegistry::Reserve(other, "k", 0, 0);
  ASSERT_NE(registry.Detach(b.info.worker_id, &cb), nullptr);  // b holds its rank, no stream

  registry.Release("j", {"a", "b", "c", "unknown"}, /*cancel=*/true, "cancelled by user");
  ASSERT_EQ(ca.commands.size(), 1u);
  EXPECT_EQ(ca.commands[0].kind, WorkerCommand::Kind::kCancel);
  EXPECT_EQ(ca.commands[0].job_id, "j");
  EXPECT_EQ(ca.commands[0].reason, "cancelled by user");
  EXPECT_EQ(a.info.state, WorkerState::kIdle);
  EXPECT_EQ(a.info.reported_job, "j");  // tearing down until a heartbeat says otherwise
  // ... so its session must pass that heartbeat on, though the job it names ("") may not have
  // changed since the last one it passed (it skips those: they need no jobs lock).
  EXPECT_TRUE(ca.TakeHeartbeatWanted());
  EXPECT_FALSE(ca.TakeHeartbeatWanted());
  EXPECT_FALSE(cc.TakeHeartbeatWanted());
  EXPECT_EQ(b.info.state, WorkerState::kDead);
  EXPECT_TRUE(cc.commands.empty());
  EXPECT_EQ(other.info.state, WorkerState::kBusy);
  const std::array<int64_t, 3> counts = registry.CountByState();
  EXPECT_EQ(counts[static_cast<int>(WorkerState::kIdle)], 1);
  EXPECT_EQ(counts[static_cast<int>(WorkerState::kBusy)], 1);
  EXPECT_EQ(counts[static_cast<int>(WorkerState::kDead)], 1);
}

TEST(WorkerRegistryTest, IdleForMatchesTheDeviceKindAndListsLiveWorkers) {
  WorkerRegistry registry;
  FakeConnection c0, c1;
  WorkerRegistration cuda = Named("gpu");
  cuda.device_kind = DeviceKind::kCuda;
  cuda.capabilities = WorkerCapabilities{};
  cuda.capabilities->torch_cuda = true;
  cuda.capabilities->cuda_device_count = 1;
  cuda.capabilities->nccl = true;
  ASSERT_TRUE(registry.Attach(registry.Add(cuda, kT0).info.worker_id, "", &c0, kT0).ok());
  ASSERT_TRUE(registry.Attach(registry.Add(Named("cpu"), kT0).info.worker_id, "", &c1, kT0).ok());
  registry.Add(Named("unattached"), kT0);
  std::vector<const WorkerRegistration*> live;
  std::vector<RegisteredWorker*> idle = registry.IdleFor(DeviceKind::kCpu, &live);
  ASSERT_EQ(idle.size(), 1u);
  EXPECT_EQ(idle[0]->info.registration.name, "cpu");
  EXPECT_EQ(live.size(), 3u);
  idle = registry.IdleFor(DeviceKind::kCuda, nullptr);
  ASSERT_EQ(idle.size(), 1u);
  EXPECT_EQ(idle[0]->info.registration.name, "gpu");
  EXPECT_FALSE(registry.NameByInstance("").has_value());
}

// A flood of registrations under new names (issue 30: 13,869 of them grew the coordinator by
// 0.7 GB, never returned): live workers are capped, dead ones are remembered up to a count and a
// time, the longest dead forgotten first; a live worker re-registering is never refused.
TEST(WorkerRegistryTest, LiveAndDeadWorkersAreBounded) {
  WorkerRegistry registry(WorkerLimits{.max_workers = 3, .max_dead_workers = 2,
                                       .dead_retention = absl::Minutes(5)});
  std::vector<FakeConnection> connections(8);
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    const std::string name = absl::StrCat("w", i);
    ASSERT_TRUE(registry.CheckCapacity(Named(name)).ok());
    ids.push_back(registry.Add(Named(name), kT0 + absl::Seconds(i)).info.worker_id);
    ASSERT_TRUE(registry.Attach(ids.back(), "", &connections[i], kT0).ok());
  }
  const absl::Status refused = registry.CheckCapacity(Named("w3"));
  EXPECT_TRUE(absl::IsResourceExhausted(refused)) << refused;
  EXPECT_EQ(refused.message(),
            "the coordinator has 3 live workers, its limit (--max-workers 3): worker 'w3' is "
            "refused; stop workers that should not be here, or raise --max-workers");
  EXPECT_TRUE(registry.CheckCapacity(Named("w1")).ok()) << "a live name re-registering";

  // All three die, one after another: a new one fits again, and two dead are remembered.
  for (int i = 0; i < 3; ++i) {
    registry.Detach(ids[i], &connections[i]);  // idle: dead at once
    registry.ByName(absl::StrCat("w", i))->info.last_seen = kT0 + absl::Seconds(10 + i);
  }
  EXPECT_TRUE(registry.CheckCapacity(Named("w3")).ok());
  registry.ForgetDead(kT0 + absl::Minutes(1));
  std::vector<std::string> dead;
  for (const WorkerInfo& w : registry.List(true)) dead.push_back(w.registration.name);
  EXPECT_EQ(dead, (std::vector<std::string>{"w1", "w2"})) << "w0, dead longest, is forgotten";
  EXPECT_TRUE(absl::IsNotFound(registry.NameOf(ids[0]).status()));
  registry.ForgetDead(kT0 + absl::Seconds(11) + absl::Minutes(5) + absl::Seconds(1));
  ASSERT_EQ(registry.List(true).size(), 1u);
  EXPECT_EQ(registry.List(true)[0].registration.name, "w2");
}

TEST(WorkerRegistryTest, PagesListWorkersByName) {
  WorkerRegistry registry;
  for (const char* name : {"c", "a", "e", "b", "d"}) registry.Add(Named(name), kT0);
  FakeConnection c;
  RegisteredWorker& b = *registry.ByName("b");
  ASSERT_TRUE(registry.Attach(b.info.worker_id, "", &c, kT0).ok());
  registry.Detach(b.info.worker_id, &c);  // dead
  auto names = [](const WorkerPage& page) {
    std::vector<std::string> out;
    for (const WorkerInfo& w : page.workers) out.push_back(w.registration.name);
    return out;
  };
  WorkerPage first = registry.ListPage(/*include_dead=*/false, 2, "");
  EXPECT_EQ(names(first), (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(first.next_page_token, "c");
  // A worker joining before the cursor does not shift the next page.
  registry.Add(Named("aa"), kT0);
  WorkerPage second = registry.ListPage(false, 2, first.next_page_token);
  EXPECT_EQ(names(second), (std::vector<std::string>{"d", "e"}));
  EXPECT_EQ(second.next_page_token, "");
  EXPECT_EQ(names(registry.ListPage(true, 10, "")),
            (std::vector<std::string>{"a", "aa", "b", "c", "d", "e"}));
}

}  // namespace
}  // namespace zpipe::coordinator
