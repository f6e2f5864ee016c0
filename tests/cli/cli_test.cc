// End-to-end tests of the `zpipe` CLI: a real zpipe-coordinator on a free loopback port with an
// in-memory database, fake workers (threads speaking the real worker API), and the built `zpipe`
// binary run as a subprocess. -o json outputs are parsed, never grepped.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cli/fake_worker.h"
#include "tests/cli/subprocess.h"

namespace zpipe::testing {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

constexpr char kJobYaml[] = R"(name: cli-test
model:
  synthetic: {forward_ms: 1, backward_ms: 1, weight_ms: 1, activation_kb: 1, params_mb: 1}
parallel: {pipeline: 2, data: 1}
schedule: {kind: 1f1b, memory_limit: auto}
batch: {microbatches: 4, microbatch_size: 1}
train: {iterations: ITERATIONS, optimizer: sgd, lr: 0.1, seed: 1}
)";

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "zpipe_cli_" + std::to_string(getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::string mkdir = "mkdir -p " + dir_;
    ASSERT_EQ(std::system(mkdir.c_str()), 0);
    StartCoordinator();
  }

  void TearDown() override {
    workers_.clear();
    if (coordinator_ != nullptr) {
      coordinator_->Signal(SIGTERM);
      ProcessResult r = coordinator_->Wait(20);
      if (HasFailure()) std::cerr << "coordinator stderr:\n" << r.err << "\n";
    }
  }

  // Starts the coordinator on a fresh port, or on the current one with `keep_port` (a restart).
  void StartCoordinator(const std::string& db = ":memory:", bool keep_port = false) {
    if (!keep_port) port_ = FreePort();
    address_ = absl::StrCat("127.0.0.1:", port_);
    std::vector<std::string> argv = {ZPIPE_COORDINATOR_BIN, absl::StrCat("--listen=", address_),
                                     absl::StrCat("--metrics-listen=127.0.0.1:", FreePort()),
                                     "--db=" + db, "--heartbeat-timeout=5s"};
    argv.insert(argv.end(), coordinator_args_.begin(), coordinator_args_.end());
    coordinator_ = std::make_unique<Subprocess>(argv);
    std::unique_ptr<Client> client = Client::Create(address_);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!client->Workers().ok()) {
      ASSERT_TRUE(coordinator_->Running()) << "coordinator exited:\n" << coordinator_->ReadErr();
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "coordinator did not come up";
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  // Starts n fake workers and waits until the coordinator lists them.
  void AddWorkers(int n, FakeWorkerOptions::Mode mode,
                  absl::Duration iteration_time = absl::Milliseconds(20)) {
    const size_t before = workers_.size();
    for (int i = 0; i < n; ++i) {
      FakeWorkerOptions o;
      o.name = absl::StrCat("fake-", before + i);
      o.device_index = static_cast<int>(before) + i;
      o.mode = mode;
      o.iteration_time = iteration_time;
      workers_.push_back(std::make_unique<FakeWorker>(address_, o));
      ASSERT_TRUE(workers_.back()->Start().ok());
    }
    std::unique_ptr<Client> client = Client::Create(address_);
    // Generous deadlines throughout: ctest runs these in parallel on a small, busy machine.
    for (int tries = 0; tries < 1200; ++tries) {
      absl::StatusOr<std::vector<v1::Worker>> ws = client->Workers();
      if (ws.ok() && ws->size() == workers_.size()) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    FAIL() << "workers did not register";
  }

  std::string WriteFile(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }

  std::string JobFile(int iterations = 3) {
    const std::string text =
        absl::StrReplaceAll(kJobYaml, {{"ITERATIONS", std::to_string(iterations)}});
    return WriteFile(absl::StrCat("job", iterations, ".yaml"), text);
  }

  std::vector<std::string> Zpipe(std::vector<std::string> args) {
    args.insert(args.begin(), {ZPIPE_CLI_BIN, "--coordinator", address_});
    return args;
  }

  ProcessResult RunZpipe(const std::vector<std::string>& args) { return RunProcess(Zpipe(args)); }

  static json Parse(const ProcessResult& r) {
    json j = json::parse(r.out, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(j.is_discarded()) << "not JSON:\n" << r.out << "\nstderr:\n" << r.err;
    return j;
  }

  // Polls `status -o json` until the job reaches `state` (e.g. "running").
  void WaitForState(const std::string& id, const std::string& state) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      ProcessResult r = RunZpipe({"status", id, "-o", "json"});
      if (r.exit_code == 0 && Parse(r)["state"] == state) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    FAIL() << "job " << id << " never reached " << state;
  }

  std::string dir_;
  int port_ = 0;
  std::string address_;
  std::unique_ptr<Subprocess> coordinator_;
  std::vector<std::string> coordinator_args_;  // more flags for the next StartCoordinator
  std::vector<std::unique_ptr<FakeWorker>> workers_;
};

TEST_F(CliTest, SubmitStatusListWithJson) {
  ProcessResult submit = RunZpipe({"submit", JobFile(), "--id", "job-a", "-o", "json"});
  ASSERT_EQ(submit.exit_code, 0) << submit.err;
  json s = Parse(submit);
  EXPECT_EQ(s["job"]["id"], "job-a");
  EXPECT_EQ(s["created"], true);
  EXPECT_EQ(s["job"]["state"], "pending");  // no workers yet
  EXPECT_EQ(s["job"]["spec"]["schedule"]["kind"], "1f1b");

  ProcessResult status = RunZpipe({"status", "job-a", "-o", "json"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  json st = Parse(status);
  EXPECT_EQ(st["id"], "job-a");
  EXPECT_EQ(st["spec"]["name"], "cli-test");
  EXPECT_EQ(st["spec"]["parallel"]["pipeline"], 2);

  ASSERT_EQ(RunZpipe({"submit", JobFile(), "--id", "job-b"}).exit_code, 0);
  ProcessResult list = RunZpipe({"-o", "json", "list"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  json l = Parse(list);
  ASSERT_EQ(l["jobs"].size(), 2u);
  EXPECT_EQ(l["jobs"][0]["id"], "job-a");
  EXPECT_EQ(l["jobs"][1]["id"], "job-b");

  ProcessResult filtered = RunZpipe({"list", "--state", "running,succeeded", "-o", "json"});
  ASSERT_EQ(filtered.exit_code, 0) << filtered.err;
  EXPECT_EQ(Parse(filtered)["jobs"].size(), 0u);

  ProcessResult table = RunZpipe({"list"});
  ASSERT_EQ(table.exit_code, 0);
  EXPECT_THAT(table.out, HasSubstr("ID"));
  EXPECT_THAT(table.out, HasSubstr("job-b"));
}

TEST_F(CliTest, ResubmitIsIdempotent) {
  const std::string file = JobFile();
  ASSERT_EQ(RunZpipe({"submit", file, "--id", "same"}).exit_code, 0);
  ProcessResult again = RunZpipe({"submit", file, "--id", "same", "-o", "json"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(Parse(again)["created"], false);
  ProcessResult different = RunZpipe({"submit", JobFile(5), "--id", "same"});
  // ALREADY_EXISTS: the coordinator refused it (docs/guide.md, exit codes: "1 ... the operation
  // was refused").
  EXPECT_EQ(different.exit_code, 1) << different.err;
  EXPECT_THAT(different.err, HasSubstr("already exists"));
}

// The coordinator resolves a spec's defaults once, at submit: status prints what runs, and that
// printed spec submitted again under the id is the same job, not "a different spec".
TEST_F(CliTest, ThePrintedResolvedSpecIsTheSameJobAsTheFile) {
  const std::string file = JobFile();
  ProcessResult dry = RunZpipe({"submit", file, "--dry-run", "-o", "json"});
  ASSERT_EQ(dry.exit_code, 0) << dry.err;
  EXPECT_EQ(Parse(dry)["spec"]["train"]["clip_grad_norm"], 1.0);  // resolved in the dry run too

  ASSERT_EQ(RunZpipe({"submit", file, "--id", "raw"}).exit_code, 0);
  ProcessResult status = RunZpipe({"status", "raw", "-o", "json"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  const json spec = Parse(status)["spec"];
  // Every default docs/reference.md's job spec table documents, as the coordinator filled it in.
  EXPECT_EQ(spec["parallel"]["data"], 1);
  EXPECT_EQ(spec["train"]["optimizer"], "sgd");      // the file's
  EXPECT_EQ(spec["train"]["weight_decay"], 0.0);     // 0.01 only for adamw
  EXPECT_EQ(spec["train"]["betas"], json::array());  // adam and adamw only
  EXPECT_TRUE(spec["train"]["eps"].is_null());
  EXPECT_EQ(spec["train"]["clip_grad_norm"], 1.0);
  EXPECT_EQ(spec["train"]["lr_schedule"]["decay"], "constant");
  EXPECT_EQ(spec["train"]["precision"], "fp32");
  EXPECT_EQ(spec["grad_sync"], json::parse(R"({"bucket_mb": 25.0, "overlap": true})"));
  EXPECT_EQ(spec["checkpoint"]["on_error"], "fail");
  EXPECT_EQ(spec["device"], "cpu");
  EXPECT_EQ(spec["restart"]["backoff"], "2s");
  EXPECT_TRUE(spec["schedule"]["memory_limit"].is_null());  // auto stays auto
  EXPECT_TRUE(spec["data"].is_null());                      // no data section

  const std::string printed = WriteFile("printed.json", spec.dump());
  ProcessResult same = RunZpipe({"submit", printed, "--id", "raw", "-o", "json"});
  ASSERT_EQ(same.exit_code, 0) << same.err;
  EXPECT_EQ(Parse(same)["created"], false);
  EXPECT_EQ(Parse(same)["job"]["spec"], spec);
  // ... and the other way round: the resolved spec first, then the raw file.
  ASSERT_EQ(RunZpipe({"submit", printed, "--id", "resolved-first"}).exit_code, 0);
  ProcessResult raw_again = RunZpipe({"submit", file, "--id", "resolved-first", "-o", "json"});
  ASSERT_EQ(raw_again.exit_code, 0) << raw_again.err;
  EXPECT_EQ(Parse(raw_again)["created"], false);

  json changed = spec;
  changed["grad_sync"]["bucket_mb"] = 8;
  ProcessResult different =
      RunZpipe({"submit", WriteFile("changed.json", changed.dump()), "--id", "raw"});
  EXPECT_EQ(different.exit_code, 1) << different.err;
  EXPECT_THAT(different.err, HasSubstr("different spec"));
}

TEST_F(CliTest, WorkersListsRegisteredWorkers) {
  AddWorkers(2, FakeWorkerOptions::Mode::kHold);
  ProcessResult r = RunZpipe({"workers", "-o", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json w = Parse(r);
  ASSERT_EQ(w["workers"].size(), 2u);
  EXPECT_EQ(w["workers"][0]["name"], "fake-0");
  EXPECT_EQ(w["workers"][1]["name"], "fake-1");
  EXPECT_EQ(w["workers"][0]["state"], "idle");
  EXPECT_EQ(w["workers"][0]["device_kind"], "cpu");
  // Fake workers report no capabilities (like workers older than them).
  EXPECT_TRUE(w["workers"][0]["capabilities"].is_null());

  ProcessResult table = RunZpipe({"workers"});
  ASSERT_EQ(table.exit_code, 0);
  EXPECT_THAT(table.out, HasSubstr("fake-1"));
  EXPECT_THAT(table.out, HasSubstr("LIBTORCH"));
}

// Issue 30: 13,869 registrations under new names made `zpipe workers --all` take 11 s and grew
// the coordinator for good. Live workers are capped (--max-workers, refused naming the flag, the
// coordinator carries on), dead ones remembered up to --max-dead-workers, and lists page.
TEST_F(CliTest, RegistrationsAreCappedAndWorkersListsPage) {
  coordinator_->Signal(SIGTERM);
  coordinator_->Wait(20);
  coordinator_args_ = {"--max-workers=4", "--max-dead-workers=2"};
  StartCoordinator();
  AddWorkers(4, FakeWorkerOptions::Mode::kHold);
  FakeWorkerOptions extra;
  extra.name = "one-too-many";
  FakeWorker refused(address_, extra);
  const absl::Status st = refused.Start();
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("--max-workers 4"));

  ProcessResult page = RunZpipe({"workers", "--limit", "3", "-o", "name"});
  ASSERT_EQ(page.exit_code, 0) << page.err;
  EXPECT_EQ(page.out, "fake-0\nfake-1\nfake-2\n");
  EXPECT_EQ(page.err, "more: zpipe workers --limit 3 --continue fake-2\n");
  ProcessResult rest = RunZpipe({"workers", "--limit", "3", "--continue", "fake-2", "-o", "name"});
  EXPECT_EQ(rest.out, "fake-3\n");

  // Three leave: at most two dead are remembered, and a new name fits again.
  for (int i = 0; i < 3; ++i) workers_[i]->Stop();
  // Which dead one goes depends on their last heartbeats (the longest silent first).
  std::vector<std::string> all;
  for (int tries = 0; tries < 400; ++tries) {
    all = absl::StrSplit(RunZpipe({"workers", "--all", "-o", "name"}).out, '\n',
                         absl::SkipEmpty());
    if (all.size() == 3) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(all.size(), 3u) << absl::StrJoin(all, " ");
  EXPECT_THAT(all, ::testing::Contains("fake-3"));
  EXPECT_TRUE(refused.Start().ok());
}

TEST_F(CliTest, SubmitWaitSucceedsWithWorkers) {
  AddWorkers(2, FakeWorkerOptions::Mode::kRun);
  ProcessResult r = RunZpipe({"submit", JobFile(3), "--id", "run-1", "--wait", "-o", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  json j = Parse(r);
  EXPECT_EQ(j["state"], "succeeded");
  EXPECT_EQ(j["progress"]["iterations_done"], 3);
  ASSERT_EQ(j["ranks"].size(), 2u);
  // docs/guide.md "JSON output": numbers as numbers, times as RFC 3339, defaults resolved, null
  // unset.
  EXPECT_TRUE(j["predicted"]["num_actions"].is_number_integer()) << j["predicted"];
  EXPECT_TRUE(j["predicted"]["makespan_ms"].is_number()) << j["predicted"];
  EXPECT_TRUE(j["create_time"].is_string());
  EXPECT_THAT(j["end_time"].get<std::string>(), ::testing::MatchesRegex("20[0-9-]+T[0-9:.]+Z"));
  EXPECT_EQ(j["spec"]["parallel"]["data"], 1);
  EXPECT_EQ(j["spec"]["train"]["optimizer"], "sgd");   // as written
  EXPECT_EQ(j["spec"]["grad_sync"]["bucket_mb"], 25);  // resolved
  EXPECT_EQ(j["spec"]["restart"]["backoff"], "2s");
  EXPECT_TRUE(j["spec"]["schedule"]["memory_limit"].is_null());  // auto
  EXPECT_TRUE(j["spec"]["model"].contains("synthetic"));
  EXPECT_FALSE(j["spec"]["model"].contains("kind"));
  EXPECT_EQ(j["latest_summary"]["iteration"], 2);

  // The plan the coordinator made: one action list per pipeline rank.
  ProcessResult plan = RunZpipe({"plan", "--job", "run-1", "-o", "json"});
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  json p = Parse(plan);
  EXPECT_EQ(p["ranks"], 2);
  EXPECT_EQ(p["microbatches"], 4);
  ASSERT_EQ(p["plan"].size(), 2u);
  EXPECT_EQ(p["plan"][0]["actions"][0], "F s0 mb0");
  ProcessResult plan_table = RunZpipe({"plan", "--job", "run-1"});
  ASSERT_EQ(plan_table.exit_code, 0) << plan_table.err;
  EXPECT_THAT(plan_table.out, HasSubstr("rank 1"));
}

TEST_F(CliTest, FollowPrintsPlainLinesWhenNotATerminal) {
  AddWorkers(2, FakeWorkerOptions::Mode::kRun);
  ProcessResult r = RunZpipe({"submit", JobFile(3), "--id", "follow-1", "--follow"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("submitted job follow-1"));
  EXPECT_THAT(r.out, HasSubstr("iteration 3/3"));
  EXPECT_THAT(r.out, HasSubstr("follow-1 succeeded"));
  EXPECT_EQ(r.out.find("\x1b["), std::string::npos) << "no terminal escapes in a pipe";
}

TEST_F(CliTest, FollowDrawsPerRankBarsOnATerminal) {
  // Slow enough iterations that the rate-limited progress events arrive while it runs.
  AddWorkers(2, FakeWorkerOptions::Mode::kRun, absl::Milliseconds(100));
  ProcessResult r = RunInTerminal(Zpipe({"submit", JobFile(15), "--id", "tty-1", "--follow"}));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("\x1b["));  // redrawn in place
  EXPECT_THAT(r.out, HasSubstr("rank  1/0  F ["));
  EXPECT_THAT(r.out, HasSubstr("tty-1 succeeded"));
}

TEST_F(CliTest, WatchJsonStreamsEventsAsJsonLines) {
  AddWorkers(2, FakeWorkerOptions::Mode::kRun);
  ASSERT_EQ(RunZpipe({"submit", JobFile(2), "--id", "watch-1"}).exit_code, 0);
  ProcessResult r = RunZpipe({"watch", "watch-1", "-o", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<json> events;
  size_t start = 0;
  while (start < r.out.size()) {
    size_t end = r.out.find('\n', start);
    if (end == std::string::npos) end = r.out.size();
    if (end > start) events.push_back(json::parse(r.out.substr(start, end - start)));
    start = end + 1;
  }
  ASSERT_FALSE(events.empty());
  EXPECT_TRUE(events.front().contains("snapshot"));
  // The snapshot's spec is the stored one, defaults resolved by the coordinator.
  EXPECT_EQ(events.front()["snapshot"]["spec"]["train"]["clip_grad_norm"], 1.0);
  EXPECT_EQ(events.front()["snapshot"]["spec"]["restart"]["backoff"], "2s");
  ASSERT_TRUE(events.back().contains("state_change") || events.back().contains("snapshot"))
      << events.back();
  const json& last = events.back();
  const std::string final_state =
      last.contains("state_change") ? last["state_change"]["to"] : last["snapshot"]["state"];
  EXPECT_EQ(final_state, "succeeded");
}

TEST_F(CliTest, CancelPendingJob) {
  ASSERT_EQ(RunZpipe({"submit", JobFile(), "--id", "to-cancel"}).exit_code, 0);
  ProcessResult r = RunZpipe({"cancel", "to-cancel", "--reason", "not needed", "-o", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = Parse(r);
  EXPECT_EQ(j["state"], "cancelled");
  EXPECT_THAT(j["reason"].get<std::string>(), HasSubstr("not needed"));
  // Watching a cancelled job ends at once with exit 1.
  EXPECT_EQ(RunZpipe({"watch", "to-cancel"}).exit_code, 1);
}

TEST_F(CliTest, WaitOnJobThatGetsCancelledExitsOne) {
  AddWorkers(2, FakeWorkerOptions::Mode::kHold);
  Subprocess waiter(Zpipe({"submit", JobFile(), "--id", "held", "--wait"}));
  WaitForState("held", "running");
  ProcessResult cancel = RunZpipe({"cancel", "held"});
  ASSERT_EQ(cancel.exit_code, 0) << cancel.err;
  ProcessResult r = waiter.Wait(30);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("held cancelled"));
  // The workers were told and released.
  for (const auto& w : workers_) EXPECT_EQ(w->cancels(), 1);
}

TEST_F(CliTest, WatchSurvivesACoordinatorRestart) {
  // A file database, so the job outlives the coordinator process.
  coordinator_->Signal(SIGTERM);
  coordinator_->Wait(20);
  const std::string db = dir_ + "/coordinator.db";
  StartCoordinator(db, /*keep_port=*/true);
  ASSERT_EQ(RunZpipe({"submit", JobFile(), "--id", "survivor"}).exit_code, 0);
  Subprocess watcher(Zpipe({"watch", "survivor"}));
  for (int i = 0; i < 1200 && watcher.ReadOut().find("survivor pending") == std::string::npos;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  ASSERT_THAT(watcher.ReadOut(), HasSubstr("survivor pending"));

  coordinator_->Signal(SIGTERM);
  coordinator_->Wait(20);
  StartCoordinator(db, /*keep_port=*/true);
  ASSERT_TRUE(watcher.Running()) << "watch gave up on the restart:\n" << watcher.ReadErr();
  ASSERT_EQ(RunZpipe({"cancel", "survivor"}).exit_code, 0);
  ProcessResult r = watcher.Wait(30);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("survivor cancelled"));
}

TEST_F(CliTest, InvalidJobFileIsAUsageErrorNamingTheLine) {
  const std::string bad =
      WriteFile("bad.yaml", "name: x\nparallel:\n  pipeline: 2\n  pipelines: 3\n");
  ProcessResult r = RunZpipe({"submit", bad});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("line 4"));
  EXPECT_THAT(r.err, HasSubstr("parallel.pipelines"));

  const std::string typed =
      WriteFile("typed.json", "{\n  \"batch\": {\"microbatches\": \"eight\"}\n}\n");
  ProcessResult t = RunZpipe({"submit", typed});
  EXPECT_EQ(t.exit_code, 2);
  EXPECT_THAT(t.err, HasSubstr("line 2"));
  EXPECT_THAT(t.err, HasSubstr("batch.microbatches"));
}

TEST_F(CliTest, SpecRejectedByCoordinatorIsAUsageError) {
  const std::string file =
      WriteFile("p0.yaml",
                "name: x\nmodel: {synthetic: {forward_ms: 1, backward_ms: 1}}\n"
                "parallel: {pipeline: 0}\nschedule: {kind: 1f1b}\n"
                "batch: {microbatches: 4, microbatch_size: 1}\n"
                "train: {iterations: 1, lr: 0.1}\n");
  ProcessResult r = RunZpipe({"submit", file});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("parallel.pipeline"));
}

TEST_F(CliTest, UsageErrors) {
  EXPECT_EQ(RunZpipe({}).exit_code, 2);
  EXPECT_EQ(RunZpipe({"frobnicate"}).exit_code, 2);
  EXPECT_EQ(RunZpipe({"status"}).exit_code, 2);
  EXPECT_EQ(RunZpipe({"list", "--bogus"}).exit_code, 2);
  EXPECT_EQ(RunZpipe({"list", "--state", "sleeping"}).exit_code, 2);
  EXPECT_EQ(RunZpipe({"list", "-o", "xml"}).exit_code, 2);
  // Issue 33: -o is the format on every command; trace's -o json wrote a file named "json".
  ProcessResult trace = RunZpipe({"trace", "x", "-o", "json"});
  EXPECT_EQ(trace.exit_code, 2) << trace.err;
  EXPECT_THAT(trace.err, HasSubstr("zpipe trace: -o json: trace prints text only"));
  EXPECT_EQ(RunZpipe({"submit", JobFile(), "--wait", "--follow"}).exit_code, 2);
}

TEST_F(CliTest, UnknownJobExitsOne) {
  const std::string out = dir_ + "/out";
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"status", "nope"},
                                             {"cancel", "nope"},
                                             {"watch", "nope"},
                                             {"plan", "--job", "nope"},
                                             {"trace", "nope", "-f", out},
                                             {"export", "nope", "--file", out}}) {
    ProcessResult r = RunZpipe(args);
    EXPECT_EQ(r.exit_code, 1) << args[0] << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr("zpipe " + args[0] + ": job 'nope' not found")) << args[0];
  }
}

// The command names `zpipe --help` lists (its "commands:" section), each once.
std::vector<std::string> CommandsInUsage() {
  ProcessResult r = RunProcess({ZPIPE_CLI_BIN, "--help"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> names;
  bool in_commands = false;
  for (absl::string_view line : absl::StrSplit(r.out, '\n')) {
    if (line == "commands:") {
      in_commands = true;
    } else if (in_commands && line.empty()) {
      break;
    } else if (in_commands && absl::StartsWith(line, "  ") && line.size() > 2 && line[2] != ' ') {
      std::string name(line.substr(2, line.find(' ', 2) - 2));
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
  }
  return names;
}

TEST_F(CliTest, EveryCommandAnswersHelpWithItsUsage) {
  const std::vector<std::string> commands = CommandsInUsage();
  ASSERT_GE(commands.size(), 11u);  // submit ... export, completion
  for (const std::string& command : commands) {
    for (const char* flag : {"--help", "-h"}) {
      // Even with a token file that does not exist: help needs no credentials.
      ProcessResult r =
          RunProcess({ZPIPE_CLI_BIN, "--token-file", dir_ + "/missing-token", command, flag});
      EXPECT_EQ(r.exit_code, 0) << command << " " << flag << ": " << r.err;
      EXPECT_TRUE(absl::StartsWith(r.out, "usage: zpipe " + command)) << command << ":\n" << r.out;
      EXPECT_EQ(r.err, "") << command;
    }
  }
  ProcessResult top = RunProcess({ZPIPE_CLI_BIN, "--help"});
  EXPECT_THAT(top.out, HasSubstr("zpipe COMMAND --help"));
}

TEST_F(CliTest, UnknownFlagsExitTwoNamingThem) {
  for (const std::string& command : CommandsInUsage()) {
    ProcessResult r = RunZpipe({command, "--frobnicate"});
    EXPECT_EQ(r.exit_code, 2) << command << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr("'--frobnicate'")) << command;
  }
  ProcessResult global = RunProcess({ZPIPE_CLI_BIN, "--frobnicate", "list"});
  EXPECT_EQ(global.exit_code, 2);
  EXPECT_THAT(global.err, HasSubstr("zpipe: unknown option '--frobnicate'"));
}

TEST_F(CliTest, MissingArgumentsExitTwo) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"submit"},
                                             {"status"},
                                             {"cancel"},
                                             {"watch"},
                                             {"logs"},
                                             {"logs", "a", "b"},
                                             {"logs", "x", "--tail", "-1"},
                                             {"logs", "x", "--since", "yesterday"},
                                             {"list", "extra"},
                                             {"workers", "extra"},
                                             {"plan", "--job"},
                                             {"trace", "x"},
                                             {"run"},
                                             {"export", "x"},
                                             {"completion"}}) {
    ProcessResult r = RunZpipe(args);
    EXPECT_EQ(r.exit_code, 2) << args[0] << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr("usage: zpipe")) << args[0];
  }
}

TEST_F(CliTest, NonUtf8JobNameExitsTwoNamingTheField) {
  const std::string file = WriteFile(
      "latin1.yaml",
      absl::StrReplaceAll(kJobYaml, {{"name: cli-test", "name: caf\xe9"}, {"ITERATIONS", "1"}}));
  ProcessResult r = RunZpipe({"submit", file});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("line 1: field 'name' is not UTF-8 text"));
  ProcessResult list = RunZpipe({"list", "-o", "json"});
  EXPECT_TRUE(Parse(list)["jobs"].empty());
}

TEST_F(CliTest, CompletionBashIsValidBashListingEveryCommand) {
  ProcessResult script = RunProcess({ZPIPE_CLI_BIN, "completion", "bash"});
  ASSERT_EQ(script.exit_code, 0) << script.err;
  const std::string path = WriteFile("zpipe.bash", script.out);
  ProcessResult syntax = RunProcess({"/bin/bash", "-n", path});
  EXPECT_EQ(syntax.exit_code, 0) << syntax.err;
  // Every command of `zpipe --help` is offered after "zpipe " (and nothing needs a coordinator).
  auto complete = [&](const std::string& words, int cword) {
    ProcessResult r =
        RunProcess({"/bin/bash", "-c",
                    absl::StrCat("source ", path, "; COMP_WORDS=(", words, "); COMP_CWORD=", cword,
                                 "; _zpipe; printf '%s\\n' \"${COMPREPLY[@]}\"")});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return std::vector<std::string>(absl::StrSplit(r.out, '\n', absl::SkipEmpty()));
  };
  const std::vector<std::string> offered = complete("zpipe ''", 1);
  for (const std::string& command : CommandsInUsage()) {
    EXPECT_THAT(offered, ::testing::Contains(command)) << command;
  }
  EXPECT_THAT(complete("zpipe su", 1), ::testing::ElementsAre("submit"));
  EXPECT_THAT(complete("zpipe -o json list --state ru", 5), ::testing::ElementsAre("running"));
  EXPECT_THAT(complete("zpipe workers --w", 2), ::testing::ElementsAre("--wide"));
  // Job ids come from the coordinator the command line names (zpipe list -o name).
  ASSERT_EQ(RunZpipe({"submit", JobFile(), "--id", "abc-1"}).exit_code, 0);
  const std::string zpipe = absl::StrCat(ZPIPE_CLI_BIN, " --coordinator ", address_);
  EXPECT_THAT(complete(zpipe + " status ab", 4), ::testing::ElementsAre("abc-1"));
  EXPECT_THAT(complete(zpipe + " logs abc-1 --fo", 5), ::testing::ElementsAre("--follow"));
  EXPECT_THAT(complete("zpipe trace x -", 3), ::testing::Contains("-f"));
  EXPECT_THAT(complete("zpipe -o ya", 2), ::testing::ElementsAre("yaml"));
}

// zsh and fish: the scripts made from the same table parse and load (skipped where the shell is
// not installed; scripts/setup installs both).
TEST_F(CliTest, CompletionZshAndFishLoad) {
  for (const std::string shell : {"zsh", "fish"}) {
    ProcessResult script = RunProcess({ZPIPE_CLI_BIN, "completion", shell});
    ASSERT_EQ(script.exit_code, 0) << script.err;
    for (const std::string& command : CommandsInUsage()) {
      EXPECT_THAT(script.out, HasSubstr(command)) << shell;
    }
    const std::string path = WriteFile("zpipe." + shell, script.out);
    ProcessResult which = RunProcess({"/bin/sh", "-c", "command -v " + shell});
    const std::string bin(absl::StripAsciiWhitespace(which.out));
    if (which.exit_code != 0 || bin.empty()) {
      std::cerr << shell << " is not installed: not loaded\n";
      continue;
    }
    ProcessResult syntax = RunProcess({bin, "-n", path});
    EXPECT_EQ(syntax.exit_code, 0) << shell << ": " << syntax.err;
    ProcessResult load =
        shell == "zsh"
            ? RunProcess({bin, "-f", "-c",
                          "autoload -Uz compinit && compinit -u -D && source " + path +
                              " && print -r -- $_comps[zpipe]"})
            : RunProcess({bin, "--no-config", "-c",
                          "source " + path + "; complete -C 'zpipe sub'"});
    EXPECT_EQ(load.exit_code, 0) << shell << ": " << load.err;
    EXPECT_THAT(load.out, HasSubstr(shell == "zsh" ? "_zpipe" : "submit")) << shell;
  }
}

TEST_F(CliTest, TyposGetASuggestionAndOneLine) {
  ProcessResult r = RunZpipe({"sumbit", JobFile()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err,
            "zpipe: unknown command 'sumbit'; did you mean 'submit'?\n"
            "Run 'zpipe --help' for the commands and options.\n");
  r = RunZpipe({"logs", "x", "--folow"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown option '--folow'; did you mean '--follow'?"));
}

TEST_F(CliTest, VersionNamesClientAndCoordinatorBuilds) {
  ProcessResult flag = RunProcess({ZPIPE_CLI_BIN, "--version"});
  EXPECT_EQ(flag.exit_code, 0) << flag.err;
  EXPECT_THAT(flag.out, ::testing::StartsWith("client: zpipe "));
  EXPECT_THAT(flag.out, HasSubstr("commit "));
  ProcessResult r = RunZpipe({"version", "-o", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = Parse(r);
  EXPECT_FALSE(j["client"]["version"].get<std::string>().empty());
  // The same build tree made both binaries: the same build info.
  EXPECT_EQ(j["coordinator"], j["client"]);
  ProcessResult text = RunZpipe({"version"});
  EXPECT_THAT(text.out, HasSubstr("coordinator " + address_ + ": zpipe "));
}

// Contexts: set-context / use-context write the file; flags > ZPIPE_* environment > context.
TEST_F(CliTest, ContextsChooseTheCoordinatorUnderFlagsAndEnvironment) {
  const std::map<std::string, std::string> env = {{"XDG_CONFIG_HOME", dir_ + "/xdg"},
                                                  {"ZPIPE_COORDINATOR", ""}};
  auto zpipe = [&](std::vector<std::string> args,
                   std::map<std::string, std::string> more = {}) {
    args.insert(args.begin(), ZPIPE_CLI_BIN);
    for (const auto& [k, v] : env) more.emplace(k, v);
    return RunProcess(args, more);
  };
  const std::string dead = absl::StrCat("127.0.0.1:", FreePort());
  ASSERT_EQ(zpipe({"config", "set-context", "here", "--coordinator", address_}).exit_code, 0);
  ASSERT_EQ(zpipe({"config", "set-context", "gone", "--coordinator", dead}).exit_code, 0);
  std::ifstream file(dir_ + "/xdg/zeropipe/config.yaml");
  std::stringstream text;
  text << file.rdbuf();
  EXPECT_THAT(text.str(), HasSubstr("current-context: here"));  // the first one made
  ProcessResult names = zpipe({"config", "get-contexts", "-o", "name"});
  EXPECT_EQ(names.out, "here\ngone\n") << names.err;

  EXPECT_EQ(zpipe({"list"}).exit_code, 0);  // current-context: here
  ASSERT_EQ(zpipe({"config", "use-context", "gone"}).exit_code, 0);
  EXPECT_EQ(zpipe({"list"}).exit_code, 3);
  EXPECT_EQ(zpipe({"--context", "here", "list"}).exit_code, 0);
  EXPECT_EQ(zpipe({"list"}, {{"ZPIPE_CONTEXT", "here"}}).exit_code, 0);
  // The environment beats the context; the flag beats both.
  EXPECT_EQ(zpipe({"list"}, {{"ZPIPE_COORDINATOR", address_}}).exit_code, 0);
  EXPECT_EQ(zpipe({"--context", "here", "list"}, {{"ZPIPE_COORDINATOR", dead}}).exit_code, 3);
  EXPECT_EQ(zpipe({"--coordinator", address_, "list"}, {{"ZPIPE_COORDINATOR", dead}}).exit_code, 0);
  ProcessResult unknown = zpipe({"--context", "nope", "list"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_THAT(unknown.err, HasSubstr("no context 'nope'"));
}

TEST_F(CliTest, UnreachableCoordinatorExitsThree) {
  const std::string dead = absl::StrCat("127.0.0.1:", FreePort());
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"list"},
                                             {"status", "x"},
                                             {"workers"},
                                             {"cancel", "x"},
                                             {"watch", "x"},
                                             {"submit", JobFile()},
                                             {"submit", JobFile(), "--dry-run"},
                                             {"plan", "--job", "x"},
                                             {"trace", "x", "-f", dir_ + "/t.json"},
                                             {"export", "x", "-f", dir_ + "/m.pt"},
                                             {"version"}}) {
    std::vector<std::string> argv = {ZPIPE_CLI_BIN, "--coordinator", dead};
    argv.insert(argv.end(), args.begin(), args.end());
    ProcessResult r = RunProcess(argv);
    EXPECT_EQ(r.exit_code, 3) << args[0] << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr("cannot reach the coordinator")) << args[0];
  }
}

// docs/guide.md "The `zpipe` CLI", exit codes, 1: a job that fails ends `submit --wait`,
// `submit --follow` and `watch` with 1 (as a cancelled one does:
// WaitOnJobThatGetsCancelledExitsOne), in table and JSON output; cancelling the failed job is
// refused with 1.
TEST_F(CliTest, FailedJobExitsOne) {
  AddWorkers(2, FakeWorkerOptions::Mode::kHold);
  Subprocess wait(Zpipe({"submit", JobFile(), "--id", "doomed", "--wait"}));
  WaitForState("doomed", "running");
  Subprocess follow(Zpipe({"watch", "doomed"}));
  Subprocess follow_json(Zpipe({"watch", "doomed", "-o", "json"}));
  Subprocess submit_follow(Zpipe({"submit", JobFile(), "--id", "doomed", "--follow"}));
  for (int i = 0; i < 400 && follow.ReadOut().find("doomed running") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  workers_[1].reset();  // rank 1's worker goes away: the job fails (no restarts allowed)
  for (Subprocess* p : {&wait, &follow, &follow_json, &submit_follow}) {
    ProcessResult r = p->Wait(60);
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  }
  ProcessResult status = RunZpipe({"status", "doomed", "-o", "json"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_EQ(Parse(status)["state"], "failed");
  ProcessResult cancel = RunZpipe({"cancel", "doomed"});
  EXPECT_EQ(cancel.exit_code, 1) << cancel.err;  // FAILED_PRECONDITION: refused
  EXPECT_THAT(cancel.err, HasSubstr("zpipe cancel: "));
}

// docs/guide.md "The `zpipe` CLI", exit codes, 0 for every command that succeeds, -o json included.
TEST_F(CliTest, SuccessExitsZeroForEveryCommand) {
  AddWorkers(2, FakeWorkerOptions::Mode::kRun);
  ASSERT_EQ(RunZpipe({"submit", JobFile(2), "--id", "ok", "--wait"}).exit_code, 0);
  const std::string out = dir_ + "/out";
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"status", "ok"},
                                             {"list"},
                                             {"workers"},
                                             {"workers", "--all", "--wide"},
                                             {"watch", "ok"},
                                             {"plan", "--job", "ok"},
                                             {"submit", JobFile(2), "--dry-run"},
                                             {"completion", "bash"}}) {
    for (const char* format : {"table", "json"}) {
      std::vector<std::string> argv = args;
      argv.insert(argv.end(), {"-o", format});
      if (args[0] == "completion") argv = args;  // prints a script, not a table
      ProcessResult r = RunZpipe(argv);
      EXPECT_EQ(r.exit_code, 0) << absl::StrJoin(argv, " ") << ": " << r.err;
      if (std::string(format) == "json" && args[0] != "completion") {
        std::string first_line =
            r.out.substr(0, args[0] == "watch" ? r.out.find('\n') : r.out.size());
        EXPECT_FALSE(json::parse(first_line, nullptr, false).is_discarded())
            << absl::StrJoin(argv, " ") << ":\n"
            << r.out;
      }
    }
  }
  EXPECT_EQ(RunZpipe({"cancel", "ok"}).exit_code, 1);  // finished: refused
  // Fake workers trace nothing: refused (FAILED_PRECONDITION), 1. A trace that is written
  // exits 0: tests/trace.
  ProcessResult trace = RunZpipe({"trace", "ok", "-f", out + ".json"});
  EXPECT_EQ(trace.exit_code, 1) << trace.err;
  EXPECT_THAT(trace.err, HasSubstr("no complete iteration"));
  // The old spelling still works this release, with a warning.
  ProcessResult old_trace = RunZpipe({"trace", "ok", "-o", out + ".json"});
  EXPECT_EQ(old_trace.exit_code, 1) << old_trace.err;
  EXPECT_THAT(old_trace.err, HasSubstr("-o FILE is deprecated"));
  EXPECT_THAT(old_trace.err, HasSubstr("no complete iteration"));
  // -o name: the ids alone; -o yaml: the JSON document as YAML.
  ProcessResult names = RunZpipe({"list", "-o", "name"});
  EXPECT_EQ(names.out, "ok\n") << names.err;
  ProcessResult yaml = RunZpipe({"status", "ok", "-o", "yaml"});
  EXPECT_EQ(yaml.exit_code, 0) << yaml.err;
  EXPECT_THAT(yaml.out, HasSubstr("id: ok\n"));
  EXPECT_THAT(yaml.out, HasSubstr("\nstate: succeeded\n"));
}

// Issue 33: `zpipe delete` against a real coordinator: a finished job goes at once, a running one
// only with --force (which cancels it first); either is gone from status and list afterwards.
TEST_F(CliTest, DeleteFinishedJobsAndRunningOnesWithForce) {
  AddWorkers(2, FakeWorkerOptions::Mode::kHold);
  ASSERT_EQ(RunZpipe({"submit", JobFile(2), "--id", "busy"}).exit_code, 0);
  WaitForState("busy", "running");
  // A second job waits for workers; cancelled, it is finished and deleted without --force.
  ASSERT_EQ(RunZpipe({"submit", JobFile(2), "--id", "done"}).exit_code, 0);
  ASSERT_EQ(RunZpipe({"cancel", "done"}).exit_code, 0);
  ProcessResult del = RunZpipe({"delete", "done"});
  ASSERT_EQ(del.exit_code, 0) << del.err;
  EXPECT_EQ(del.out, "done deleted (cancelled)\n");
  EXPECT_EQ(RunZpipe({"status", "done"}).exit_code, 1);

  ProcessResult refused = RunZpipe({"delete", "busy"});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(refused.err, HasSubstr("job 'busy' is RUNNING; add --force"));
  ProcessResult forced = RunZpipe({"delete", "busy", "--force", "-o", "name"});
  ASSERT_EQ(forced.exit_code, 0) << forced.err;
  EXPECT_EQ(forced.out, "busy\n");
  ProcessResult list = RunZpipe({"list", "-o", "name"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_EQ(list.out, "");
}

// Issue 33: labels travel from `submit --label` to the coordinator, which filters `list -l` and
// `--since` itself (paging through the matches), and refuses a bad label naming the field.
TEST_F(CliTest, LabelsSelectJobsOnTheCoordinator) {
  for (const char* id : {"a", "b", "c"}) {
    ASSERT_EQ(RunZpipe({"submit", JobFile(2), "--id", id, "--label",
                        std::string(id) == "b" ? "team=vision" : "team=nlp"})
                  .exit_code,
              0);
  }
  ProcessResult page = RunZpipe({"list", "-l", "team=nlp", "--limit", "1", "-o", "name"});
  ASSERT_EQ(page.exit_code, 0) << page.err;
  EXPECT_EQ(page.out, "a\n");
  EXPECT_THAT(page.err, HasSubstr("more: zpipe list -l team=nlp --limit 1 --continue "));
  ProcessResult all = RunZpipe({"list", "-l", "team=nlp", "--since", "1h", "-o", "name"});
  EXPECT_EQ(all.out, "a\nc\n") << all.err;
  EXPECT_EQ(RunZpipe({"list", "--since", "0s", "-o", "name"}).out, "");
  ProcessResult status = RunZpipe({"status", "b", "-o", "json"});
  EXPECT_EQ(Parse(status)["spec"]["labels"]["team"], "vision");
  ProcessResult bad = RunZpipe({"submit", JobFile(2), "--label", "my team=x"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_THAT(bad.err, HasSubstr("spec.labels"));
}

TEST_F(CliTest, CoordinatorFromEnvironment) {
  ProcessResult r =
      RunProcess({ZPIPE_CLI_BIN, "list", "-o", "json"}, {{"ZPIPE_COORDINATOR", address_}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Parse(r)["jobs"].is_array());
}

}  // namespace
}  // namespace zpipe::testing

namespace zpipe::testing {
namespace {

// A token bound for another machine without TLS: refused with --require-tls (before anything is
// sent), and on a loopback address sent as before.
TEST(PlaintextTokenCliTest, RequireTlsRefusesATokenInPlaintextToAnotherMachine) {
  const std::string token = ::testing::TempDir() + "/plaintext-token";
  std::ofstream(token) << "secret-client-token\n";
  ProcessResult refused = RunProcess({ZPIPE_CLI_BIN, "--coordinator", "192.0.2.1:50051",
                                      "--token-file", token, "--require-tls", "list"});
  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  EXPECT_THAT(refused.err, ::testing::HasSubstr("refusing to send a token to 192.0.2.1:50051 "
                                                "without TLS (--require-tls); give --tls-ca"));
  ProcessResult local = RunProcess({ZPIPE_CLI_BIN, "--coordinator", "127.0.0.1:1", "--token-file",
                                    token, "--require-tls", "list"});
  EXPECT_EQ(local.exit_code, 3) << local.err;  // nothing listens there: unreachable, not refused
  EXPECT_THAT(local.err, ::testing::Not(::testing::HasSubstr("without TLS")));
}

}  // namespace
}  // namespace zpipe::testing
