// The coordinator subcommands in-process, over a FakeClient: output, JSON shape and exit codes.
// (tests/cli/ runs the built binary against a real coordinator.)
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/cli.h"
#include "client/fake_client.h"
#include "client/json_output.h"
#include "client/trace_command.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace zpipe::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using json = nlohmann::json;

struct Result {
  int code;
  std::string out, err;
};

class CliCommandsTest : public ::testing::Test {
 protected:
  using Command = int (*)(CliContext&, const std::vector<std::string>&);

  Result Run(Command command, const std::vector<std::string>& args,
             OutputFormat format = OutputFormat::kTable, bool terminal = false) {
    std::ostringstream out, err;
    // The context owns its client; hand it a forwarding view of the shared fake.
    CliContext ctx(std::make_unique<Forwarder>(fake_, &logs_), "fake:1", format, out, err,
                   terminal);
    const int code = command(ctx, args);
    return {code, out.str(), err.str()};
  }

  std::string JobFile(const std::string& text) {
    // One file per test: ctest runs this binary's tests as parallel processes.
    std::string path = ::testing::TempDir() + "cli_commands_test_" + std::to_string(::getpid()) +
                       "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name() +
                       ".yaml";
    std::ofstream(path) << text;
    return path;
  }

  v1::JobSpec Spec() {
    v1::JobSpec spec;
    spec.set_name("t");
    spec.mutable_parallel()->set_pipeline(2);
    spec.mutable_schedule()->set_kind("1f1b");
    spec.mutable_batch()->set_microbatches(4);
    spec.mutable_train()->set_iterations(3);
    return spec;
  }

  // Forwards to the shared FakeClient, so the test keeps control of it; Logs delivers `logs`.
  class Forwarder : public Client {
   public:
    explicit Forwarder(FakeClient& f, const std::vector<v1::LogLine>* logs = nullptr)
        : f_(f), logs_(logs) {}
    absl::StatusOr<SubmitResult> Submit(const v1::JobSpec& s, const std::string& id,
                                        bool v) override {
      return f_.Submit(s, id, v);
    }
    absl::StatusOr<v1::Job> Get(const std::string& id) override { return f_.Get(id); }
    absl::StatusOr<JobPage> List(const ListJobsOptions& o) override { return f_.List(o); }
    absl::StatusOr<v1::Job> Cancel(const std::string& id, const std::string& r) override {
      return f_.Cancel(id, r);
    }
    absl::StatusOr<v1::JobState> Delete(const std::string& id, bool force) override {
      return f_.Delete(id, force);
    }
    std::unique_ptr<JobWatch> Watch(const std::string& id, WatchOptions o) override {
      return f_.Watch(id, o);
    }
    absl::StatusOr<JobPlan> Plan(const std::string& id) override { return f_.Plan(id); }
    absl::StatusOr<WorkerPage> ListWorkers(const ListWorkersOptions& o) override {
      return f_.ListWorkers(o);
    }
    absl::Status Logs(const std::string&, const LogsOptions&,
                      const std::function<bool(const v1::LogLine&)>& on_line,
                      uint64_t*) override {
      if (logs_ == nullptr) return absl::UnimplementedError("no logs");
      for (const v1::LogLine& line : *logs_) {
        if (!on_line(line)) break;
      }
      return absl::OkStatus();
    }

   private:
    FakeClient& f_;
    const std::vector<v1::LogLine>* logs_;
  };

  FakeClient fake_;
  std::vector<v1::LogLine> logs_;  // what `zpipe logs` gets, for every job
};

TEST_F(CliCommandsTest, StatusShowsRestartsAndAttempts) {
  v1::JobSpec spec = Spec();
  spec.mutable_restart()->set_max_restarts(2);
  ASSERT_TRUE(fake_.Submit(spec, "r", false).ok());
  ASSERT_TRUE(fake_.EditJob("r", [](v1::Job& job) {
    job.set_restarts(1);
    v1::JobAttempt* first = job.add_attempts();
    first->set_attempt(1);
    first->add_workers("w0");
    first->add_workers("w1");
    first->mutable_start_time()->set_seconds(1);
    first->mutable_end_time()->set_seconds(2);
    first->set_start_iteration(0);
    first->set_iterations_done(8);
    first->set_end_reason("worker w1 (pipeline rank 1, data rank 0) lost: no heartbeat for 10s");
    v1::JobAttempt* second = job.add_attempts();
    second->set_attempt(2);
    second->add_workers("w0");
    second->add_workers("w2");
    second->mutable_start_time()->set_seconds(3);
    second->set_start_iteration(6);
  }));
  Result r = Run(RunStatusCommand, {"r"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("restarts    1 of 2 (backoff 2s)"));
  EXPECT_THAT(r.out, HasSubstr("ATTEMPT  WORKERS  STARTED"));
  EXPECT_THAT(r.out, HasSubstr("w0,w1"));
  EXPECT_THAT(r.out, HasSubstr("worker w1 (pipeline rank 1, data rank 0) lost: no heartbeat"));
  EXPECT_THAT(r.out, HasSubstr("w0,w2"));
  EXPECT_THAT(r.out, HasSubstr("running"));
}

TEST_F(CliCommandsTest, SubmitThenStatusAndList) {
  const std::string file = JobFile(
      "name: t\nmodel: {synthetic: {forward_ms: 1, backward_ms: 1}}\nparallel: {pipeline: 2}\n"
      "schedule: {kind: 1f1b}\nbatch: {microbatches: 4}\ntrain: {iterations: 3}\n");
  Result submit = Run(RunSubmitCommand, {file, "--id", "a"});
  ASSERT_EQ(submit.code, kExitOk) << submit.err;
  EXPECT_EQ(submit.out, "submitted job a (pending)\n");
  Result again = Run(RunSubmitCommand, {file, "--id", "a"});
  EXPECT_EQ(again.out, "job already submitted: a (pending)\n");

  Result status = Run(RunStatusCommand, {"a"});
  ASSERT_EQ(status.code, kExitOk);
  EXPECT_THAT(status.out, HasSubstr("state       pending"));
  EXPECT_THAT(status.out, HasSubstr("schedule    1f1b p=2 d=1 m=4"));

  Result list = Run(RunListCommand, {}, OutputFormat::kJson);
  ASSERT_EQ(list.code, kExitOk);
  json j = json::parse(list.out);
  ASSERT_EQ(j["jobs"].size(), 1u);
  EXPECT_EQ(j["jobs"][0]["state"], "pending");
}

// Labels from the job file and --label (which wins for a key both give), shown by status and
// list -o wide, selected by list -l (all of them) and --since.
TEST_F(CliCommandsTest, LabelsAtSubmitShownAndFilteredByList) {
  const std::string file = JobFile(
      "name: t\nmodel: {synthetic: {forward_ms: 1, backward_ms: 1}}\nparallel: {pipeline: 2}\n"
      "schedule: {kind: 1f1b}\nbatch: {microbatches: 4}\ntrain: {iterations: 3}\n"
      "labels: {team: vision, size: big}\n");
  ASSERT_EQ(Run(RunSubmitCommand, {file, "--id", "a", "--label", "team=nlp"}).code, kExitOk);
  ASSERT_EQ(Run(RunSubmitCommand, {file, "--id", "b"}).code, kExitOk);
  ASSERT_EQ(Run(RunSubmitCommand, {file, "--id", "c", "--label", "team=nlp", "--label", "size=small"})
                .code,
            kExitOk);
  EXPECT_EQ(fake_.Get("a")->spec().labels().at("team"), "nlp");
  EXPECT_EQ(fake_.Get("a")->spec().labels().at("size"), "big");

  Result status = Run(RunStatusCommand, {"a"});
  EXPECT_THAT(status.out, HasSubstr("labels      size=big,team=nlp\n"));
  Result wide = Run(RunListCommand, {}, OutputFormat::kWide);
  EXPECT_THAT(wide.out, HasSubstr("LABELS"));
  EXPECT_THAT(wide.out, HasSubstr("size=small,team=nlp"));
  Result json_list = Run(RunListCommand, {}, OutputFormat::kJson);
  EXPECT_EQ(json::parse(json_list.out)["jobs"][1]["spec"]["labels"],
            json({{"size", "big"}, {"team", "vision"}}));

  EXPECT_EQ(Run(RunListCommand, {"-l", "team=nlp"}, OutputFormat::kName).out, "a\nc\n");
  EXPECT_EQ(Run(RunListCommand, {"-l", "team=nlp", "--label", "size=big"}, OutputFormat::kName).out,
            "a\n");
  EXPECT_EQ(Run(RunListCommand, {"-l", "team=audio"}, OutputFormat::kName).out, "");
  // --since: only "b" was created in the last hour.
  ASSERT_TRUE(fake_.EditJob("b", [](v1::Job& job) {
    job.mutable_create_time()->set_seconds(absl::ToUnixSeconds(absl::Now()) - 60);
  }));
  EXPECT_EQ(Run(RunListCommand, {"--since", "1h"}, OutputFormat::kName).out, "b\n");
  EXPECT_EQ(Run(RunListCommand, {"--since", "7d", "-l", "team=vision"}, OutputFormat::kName).out,
            "b\n");

  Result bad = Run(RunListCommand, {"-l", "team"});
  EXPECT_EQ(bad.code, kExitUsage);
  EXPECT_THAT(bad.err, HasSubstr("--label 'team': want KEY=VALUE"));
  EXPECT_EQ(Run(RunSubmitCommand, {file, "--label", "=x"}).code, kExitUsage);
  EXPECT_EQ(Run(RunListCommand, {"--since", "soon"}).code, kExitUsage);
}

TEST_F(CliCommandsTest, ExitCodes) {
  EXPECT_EQ(Run(RunStatusCommand, {"missing"}).code, kExitJobFailed);
  EXPECT_EQ(Run(RunStatusCommand, {}).code, kExitUsage);
  EXPECT_EQ(Run(RunSubmitCommand, {"/nonexistent.yaml"}).code, kExitUsage);
  fake_.SetUnavailable(true);
  Result r = Run(RunListCommand, {});
  EXPECT_EQ(r.code, kExitUnreachable);
  EXPECT_THAT(r.err, HasSubstr("cannot reach the coordinator at fake:1"));
}

TEST_F(CliCommandsTest, CancelAndCancelFinished) {
  ASSERT_TRUE(fake_.Submit(Spec(), "c", false).ok());
  Result r = Run(RunCancelCommand, {"c", "--reason", "enough"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out, "c cancelled 0/3 iterations: enough\n");
  ASSERT_TRUE(fake_.Submit(Spec(), "done", false).ok());
  fake_.SetState("done", v1::JOB_STATE_SUCCEEDED, "all ranks finished");
  EXPECT_EQ(Run(RunCancelCommand, {"done"}).code, kExitJobFailed);  // FAILED_PRECONDITION
}

TEST_F(CliCommandsTest, DeleteRemovesFinishedJobsAndActiveOnesOnlyWithForce) {
  ASSERT_TRUE(fake_.Submit(Spec(), "done", false).ok());
  fake_.SetState("done", v1::JOB_STATE_SUCCEEDED, "all ranks finished");
  ASSERT_TRUE(fake_.Submit(Spec(), "busy", false).ok());
  // Each id on its own: the active one is refused, the finished one deleted; exit 1.
  Result r = Run(RunDeleteCommand, {"busy", "done"});
  EXPECT_EQ(r.code, kExitJobFailed);
  EXPECT_EQ(r.out, "done deleted (succeeded)\n");
  EXPECT_THAT(r.err, HasSubstr("zpipe delete: job 'busy' is pending; add --force"));
  EXPECT_TRUE(absl::IsNotFound(fake_.Get("done").status()));
  EXPECT_TRUE(fake_.Get("busy").ok());

  r = Run(RunDeleteCommand, {"busy", "--force"}, OutputFormat::kName);
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out, "busy\n");
  EXPECT_TRUE(absl::IsNotFound(fake_.Get("busy").status()));
  EXPECT_EQ(Run(RunListCommand, {}, OutputFormat::kName).out, "");
  EXPECT_EQ(Run(RunDeleteCommand, {"busy"}).code, kExitJobFailed);  // NOT_FOUND
  EXPECT_EQ(Run(RunDeleteCommand, {}).code, kExitUsage);
}

TEST_F(CliCommandsTest, WatchPrintsLinesAndExitsWithTheJobsOutcome) {
  ASSERT_TRUE(fake_.Submit(Spec(), "w", false).ok());
  std::thread driver([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    fake_.SetState("w", v1::JOB_STATE_RUNNING, "assignments sent");
    v1::JobEvent it;
    it.mutable_iteration()->set_iteration(0);
    it.mutable_iteration()->set_duration_s(0.5);
    it.mutable_iteration()->set_loss(2.5);
    it.mutable_iteration()->set_bubble_rate(0.25);
    it.mutable_iteration()->set_predicted_bubble_rate(0.2);
    fake_.AddEvent("w", it);
    // A skipped checkpoint write and the checkpoint stall, from rank 1.
    it.mutable_iteration()->set_iteration(1);
    auto* rank = it.mutable_iteration()->add_ranks();
    rank->set_pipeline_rank(1);
    rank->set_checkpoint_stall_s(0.0123);
    rank->set_checkpoint_error("checkpoint: cannot write '/c/iter-2/stage-1.pt': File too large");
    fake_.AddEvent("w", it);
    fake_.SetState("w", v1::JOB_STATE_FAILED, "rank 1 on worker x failed");
  });
  Result r = Run(RunWatchCommand, {"w"});
  driver.join();
  EXPECT_EQ(r.code, kExitJobFailed);
  EXPECT_THAT(r.out, HasSubstr("w pending -> running: assignments sent\n"));
  EXPECT_THAT(r.out,
              HasSubstr("iteration 1/3: 500ms  loss 2.5000  bubble 25.0% (predicted 20.0%)\n"));
  EXPECT_THAT(r.out, HasSubstr("(predicted 20.0%)  checkpoint stall 12.3ms\n  checkpoint skipped "
                               "on rank 1/0: checkpoint: cannot write '/c/iter-2/stage-1.pt': "
                               "File too large\n"));
  EXPECT_THAT(r.out, HasSubstr("w running -> failed: rank 1 on worker x failed\n"));
}

TEST_F(CliCommandsTest, WorkersTable) {
  v1::Worker w;
  w.set_name("host-a/cuda0");
  w.set_state(v1::WORKER_STATE_BUSY);
  w.set_device_kind(v1::DEVICE_KIND_CUDA);
  w.set_job_id("j");
  w.set_pipeline_rank(3);
  fake_.SetWorkers({w});
  Result r = Run(RunWorkersCommand, {});
  ASSERT_EQ(r.code, kExitOk);
  EXPECT_THAT(r.out, HasSubstr("host-a/cuda0  busy   cuda:0"));
  EXPECT_THAT(r.out, HasSubstr("3/0"));
}

// What workers can run: GPU, its memory, LibTorch (+cuda / +cpu) and NCCL, within 100 columns;
// --wide adds the CUDA runtime, host and last heartbeat; "?" for a worker that reported nothing.
// Every listing pages (issue 30: a flood of registrations made `workers --all` take 11 s):
// --limit N prints one page and says on stderr how to get the next; -o json carries the token.
TEST_F(CliCommandsTest, WorkersAndListPageWithLimitAndContinue) {
  std::vector<v1::Worker> workers;
  for (const char* name : {"w3", "w1", "w5", "w2", "w4"}) {
    v1::Worker w;
    w.set_name(name);
    w.set_state(v1::WORKER_STATE_IDLE);
    workers.push_back(w);
  }
  fake_.SetWorkers(workers);
  Result first = Run(RunWorkersCommand, {"--limit", "2"}, OutputFormat::kName);
  ASSERT_EQ(first.code, kExitOk) << first.err;
  EXPECT_EQ(first.out, "w1\nw2\n");
  EXPECT_EQ(first.err, "more: zpipe workers --limit 2 --continue w2\n");
  Result second = Run(RunWorkersCommand, {"--limit", "2", "--continue", "w2"}, OutputFormat::kJson);
  ASSERT_EQ(second.code, kExitOk) << second.err;
  json page = json::parse(second.out);
  ASSERT_EQ(page["workers"].size(), 2u);
  EXPECT_EQ(page["workers"][0]["name"], "w3");
  EXPECT_EQ(page["next_page_token"], "w4");
  Result last = Run(RunWorkersCommand, {"--limit", "2", "--continue", "w4"}, OutputFormat::kName);
  EXPECT_EQ(last.out, "w5\n");
  EXPECT_EQ(last.err, "") << "no more pages";
  Result all = Run(RunWorkersCommand, {}, OutputFormat::kName);
  EXPECT_EQ(all.out, "w1\nw2\nw3\nw4\nw5\n");

  for (const char* id : {"a", "b", "c"}) ASSERT_TRUE(fake_.Submit(Spec(), id, false).ok());
  Result jobs = Run(RunListCommand, {"--limit", "2"}, OutputFormat::kName);
  ASSERT_EQ(jobs.code, kExitOk) << jobs.err;
  EXPECT_EQ(jobs.out, "a\nb\n");
  EXPECT_THAT(jobs.err, HasSubstr("more: zpipe list --limit 2 --continue "));
  std::string token = jobs.err.substr(jobs.err.rfind(' ') + 1);
  token.pop_back();  // the newline
  Result rest = Run(RunListCommand, {"--limit", "2", "--continue", token}, OutputFormat::kName);
  EXPECT_EQ(rest.out, "c\n");

  Result bad = Run(RunWorkersCommand, {"--limit", "0"});
  EXPECT_EQ(bad.code, kExitUsage);
  EXPECT_THAT(bad.err, HasSubstr("--limit"));
  Result lonely = Run(RunListCommand, {"--continue", "x"});
  EXPECT_EQ(lonely.code, kExitUsage);
  EXPECT_THAT(lonely.err, HasSubstr("--continue TOKEN goes with --limit N"));
}

TEST_F(CliCommandsTest, WorkersTableShowsCapabilities) {
  v1::Worker gpu;
  gpu.set_name("host-a/cuda1");
  gpu.set_state(v1::WORKER_STATE_BUSY);
  gpu.set_device_kind(v1::DEVICE_KIND_CUDA);
  gpu.set_device_index(1);
  gpu.set_host("10.0.0.12");
  gpu.set_memory_bytes(512ull << 30);
  gpu.set_job_id("job-6b0c4998-0");
  gpu.set_pipeline_rank(1);
  v1::WorkerCapabilities* c = gpu.mutable_capabilities();
  c->set_libtorch_version("2.3.1");
  c->set_torch_cuda(true);
  c->set_cuda_device_count(2);
  c->set_cuda_runtime_version("12.1");
  c->set_nccl(true);
  c->set_nccl_version("2.20.5");
  for (int i = 0; i < 2; ++i) {
    v1::CudaDevice* d = c->add_devices();
    d->set_index(i);
    d->set_name("NVIDIA H100 80GB HBM3");
    d->set_total_memory_bytes(i == 1 ? 80ull << 30 : 1);
  }
  v1::Worker cpu;
  cpu.set_name("host-b/cpu0");
  cpu.set_state(v1::WORKER_STATE_IDLE);
  cpu.set_device_kind(v1::DEVICE_KIND_CPU);
  cpu.set_memory_bytes(16ull << 30);
  cpu.mutable_capabilities()->set_libtorch_version("1.13.0");
  v1::Worker old;
  old.set_name("host-c/cpu0");
  old.set_state(v1::WORKER_STATE_IDLE);
  old.set_device_kind(v1::DEVICE_KIND_CPU);
  fake_.SetWorkers({gpu, cpu, old});

  Result r = Run(RunWorkersCommand, {});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(
      r.out,
      "NAME          STATE  DEVICE  GPU             MEMORY   LIBTORCH    NCCL    JOB"
      "             RANK\n"
      "host-a/cuda1  busy   cuda:1  H100 80GB HBM3  80.0GiB  2.3.1+cuda  2.20.5  job-6b0c4998-0"
      "  1/0\n"
      "host-b/cpu0   idle   cpu:0   -               16.0GiB  1.13.0+cpu  -       -"
      "               -\n"
      "host-c/cpu0   idle   cpu:0   -               -        ?           ?       -"
      "               -\n");
  for (absl::string_view line : absl::StrSplit(r.out, '\n')) EXPECT_LE(line.size(), 100u) << line;

  r = Run(RunWorkersCommand, {"--wide"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("CUDA  HOST"));
  EXPECT_THAT(r.out,
              HasSubstr("NVIDIA H100 80GB HBM3  80.0GiB  2.3.1+cuda  12.1  10.0.0.12  2.20.5"));
  EXPECT_THAT(r.out, HasSubstr("LAST HEARTBEAT"));

  r = Run(RunWorkersCommand, {}, OutputFormat::kJson);
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["workers"][0]["capabilities"]["nccl_version"], "2.20.5");
  EXPECT_EQ(j["workers"][0]["capabilities"]["devices"][1]["name"], "NVIDIA H100 80GB HBM3");
  // docs/json.md's vocabulary: numbers as numbers, lower-case states and kinds, null when unset.
  EXPECT_EQ(j["workers"][0]["memory_bytes"], 512ull << 30);
  EXPECT_EQ(j["workers"][0]["capabilities"]["devices"][1]["total_memory_bytes"], 80ull << 30);
  EXPECT_EQ(j["workers"][0]["state"], "busy");
  EXPECT_EQ(j["workers"][0]["device_kind"], "cuda");
  EXPECT_EQ(j["workers"][1]["device_kind"], "cpu");
  EXPECT_TRUE(j["workers"][2]["capabilities"].is_null());
  EXPECT_TRUE(j["workers"][0]["last_heartbeat_time"].is_null());
}

TEST_F(CliCommandsTest, PlanForAJob) {
  ASSERT_TRUE(fake_.Submit(Spec(), "p", false).ok());
  EXPECT_EQ(Run(RunJobPlanCommand, {"--job", "p"}).code, kExitJobFailed);  // no plan yet
  JobPlan plan;
  plan.job_id = "p";
  plan.plan = core::EmptyPlan("1f1b", core::Placement::Linear(2), 1);
  plan.plan.ranks[0] = {core::Action::F(0, 0), core::Action::BW(0, 0)};
  plan.plan.ranks[1] = {core::Action::F(1, 0), core::Action::BW(1, 0)};
  plan.predicted.set_bubble_rate(0.5);
  fake_.SetPlan("p", plan);
  Result r = Run(RunJobPlanCommand, {"--job", "p", "--rank", "1"}, OutputFormat::kJson);
  ASSERT_EQ(r.code, kExitOk) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["ranks"], 2);
  ASSERT_EQ(j["plan"].size(), 1u);
  EXPECT_EQ(j["plan"][0]["rank"], 1);
  EXPECT_EQ(j["plan"][0]["actions"][1], "BW s1 mb0");
  EXPECT_EQ(j["predicted"]["bubble_rate"], 0.5);
  EXPECT_EQ(j["recomputed_stages"], json::array());
  EXPECT_EQ(Run(RunJobPlanCommand, {"--job", "p", "--rank", "2"}).code, kExitUsage);

  // A plan that recomputes stage 0 (schedule.recompute) says so, in text and JSON.
  plan.plan.ranks[0] = {core::Action::F(0, 0), core::Action::R(0, 0), core::Action::BW(0, 0)};
  fake_.SetPlan("p", plan);
  r = Run(RunJobPlanCommand, {"--job", "p"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("recompute: stages 0 of 2 run their forwards again before B"));
  r = Run(RunJobPlanCommand, {"--job", "p"}, OutputFormat::kJson);
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(json::parse(r.out)["recomputed_stages"], json::array({0}));
}

// -o json of a job (status, list, cancel, submit, watch): docs/guide.md "JSON output".
TEST_F(CliCommandsTest, JobJsonSpeaksTheDocumentedVocabulary) {
  v1::JobSpec spec = Spec();
  spec.mutable_model()->mutable_synthetic()->set_forward_ms(1.5);
  spec.mutable_train()->set_optimizer("adam");
  spec.mutable_train()->set_seed(1ull << 40);
  ASSERT_TRUE(fake_.Submit(spec, "v", false).ok());
  fake_.SetState("v", v1::JOB_STATE_RUNNING, "assignments sent");

  Result status = Run(RunStatusCommand, {"v"}, OutputFormat::kJson);
  ASSERT_EQ(status.code, kExitOk) << status.err;
  const json j = json::parse(status.out);
  EXPECT_EQ(j["id"], "v");
  EXPECT_EQ(j["state"], "running");
  EXPECT_TRUE(j["end_time"].is_null());  // unset message: null, never left out
  EXPECT_TRUE(j["latest_summary"].is_null());
  EXPECT_EQ(j["spec"]["train"]["seed"], 1ull << 40);  // a number, not "1099511627776"
  // The model shows only its member, without the oneof's name.
  EXPECT_EQ(j["spec"]["model"], json::parse(R"({"synthetic": {"forward_ms": 1.5,
      "backward_ms": 0.0, "weight_ms": 0.0, "activation_kb": 0.0, "params_mb": 0.0,
      "param_tensors": 0, "w_slowdown": null}})"));
  // The spec as the coordinator returned it: resolving defaults is the coordinator's job
  // (coordinator/spec_defaults.h; tests/cli/cli_test.cc checks them through a real one), so a
  // field this fake leaves unset prints as its zero / null, never a client-side guess.
  EXPECT_EQ(j["spec"]["train"]["optimizer"], "adam");
  EXPECT_EQ(j["spec"]["parallel"]["data"], 0);
  EXPECT_TRUE(j["spec"]["train"]["eps"].is_null());
  EXPECT_TRUE(j["spec"]["train"]["betas"].empty());
  EXPECT_TRUE(j["spec"]["restart"].is_null());
  EXPECT_TRUE(j["spec"]["schedule"]["memory_limit"].is_null());  // auto
  EXPECT_TRUE(j["spec"]["data"].is_null());                      // no data section
  EXPECT_EQ(j["spec"]["schedule"]["chunks"], 0);                 // fixed by 1f1b

  // The same object from every command that prints a job.
  json listed = json::parse(Run(RunListCommand, {}, OutputFormat::kJson).out)["jobs"][0];
  EXPECT_EQ(listed, j);
  Result cancel = Run(RunCancelCommand, {"v"}, OutputFormat::kJson);
  ASSERT_EQ(cancel.code, kExitOk) << cancel.err;
  const json cancelled = json::parse(cancel.out);
  EXPECT_EQ(cancelled["state"], "cancelled");
  EXPECT_EQ(cancelled["spec"], j["spec"]);
}

// A synthetic model computes no loss: status says so instead of printing a number.
TEST_F(CliCommandsTest, StatusOfASyntheticJobSaysItHasNoLoss) {
  v1::JobSpec spec = Spec();
  spec.mutable_model()->mutable_synthetic()->set_forward_ms(1);
  ASSERT_TRUE(fake_.Submit(spec, "s", false).ok());
  v1::JobEvent it;
  it.mutable_iteration()->set_iteration(0);
  it.mutable_iteration()->set_duration_s(0.5);
  it.mutable_iteration()->set_bubble_rate(0.25);
  ASSERT_TRUE(fake_.AddEvent("s", it));
  Result r = Run(RunStatusCommand, {"s"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("iteration 1: 500ms, bubble 25.0%, no loss (synthetic)\n"));
  const json j = json::parse(Run(RunStatusCommand, {"s"}, OutputFormat::kJson).out);
  EXPECT_TRUE(j["latest_summary"]["loss"].is_null());
}

TEST_F(CliCommandsTest, EventsAreJsonLinesNamingTheirKind) {
  ASSERT_TRUE(fake_.Submit(Spec(), "e", false).ok());
  std::thread driver([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    v1::JobEvent it;
    it.mutable_iteration()->set_iteration(0);
    it.mutable_iteration()->set_bubble_rate(0.25);
    fake_.AddEvent("e", it);
    fake_.SetState("e", v1::JOB_STATE_SUCCEEDED, "done");
  });
  Result r = Run(RunWatchCommand, {"e"}, OutputFormat::kJson);
  driver.join();
  ASSERT_EQ(r.code, kExitOk) << r.err;
  std::vector<json> events;
  for (absl::string_view line : absl::StrSplit(r.out, '\n', absl::SkipEmpty())) {
    events.push_back(json::parse(line));
  }
  ASSERT_GE(events.size(), 3u) << r.out;
  EXPECT_EQ(events.front()["kind"], "snapshot");
  EXPECT_EQ(events.front()["snapshot"]["spec"]["parallel"]["pipeline"], 2);  // a job as JobJson
  EXPECT_FALSE(events.front().contains("iteration"));  // only the member that is set
  bool saw_iteration = false;
  for (const json& e : events) {
    if (e["kind"] != "iteration") continue;
    saw_iteration = true;
    EXPECT_EQ(e["iteration"]["bubble_rate"], 0.25);
    EXPECT_TRUE(e["iteration"]["loss"].is_null());  // no loss reported: null, not 0
  }
  EXPECT_TRUE(saw_iteration) << r.out;
  EXPECT_EQ(events.back()["kind"], "state_change");
  EXPECT_EQ(events.back()["state_change"]["to"], "succeeded");
}

TEST_F(CliCommandsTest, DryRunJsonShowsTheAnsweredSpecAndPrediction) {
  const std::string file = JobFile(
      "name: t\nmodel: {synthetic: {forward_ms: 1, backward_ms: 1}}\nparallel: {pipeline: 2}\n"
      "schedule: {kind: 1f1b}\nbatch: {microbatches: 4}\ntrain: {iterations: 3}\n");
  Result r = Run(RunSubmitCommand, {file, "--dry-run"}, OutputFormat::kJson);
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["spec"]["name"], "t");     // the spec the coordinator answered with
  EXPECT_TRUE(j.contains("predicted"));  // the fake plans nothing: null
  EXPECT_FALSE(j.contains("job"));       // nothing was created
}

// Every subcommand, by name, for the conventions below.
struct NamedCommand {
  const char* name;
  int (*run)(CliContext&, const std::vector<std::string>&);
};
constexpr NamedCommand kCommands[] = {
    {"submit", RunSubmitCommand}, {"status", RunStatusCommand}, {"list", RunListCommand},
    {"cancel", RunCancelCommand}, {"watch", RunWatchCommand},   {"workers", RunWorkersCommand},
    {"plan", RunJobPlanCommand},  {"trace", RunTraceCommand},   {"run", RunRunCommand},
    {"export", RunExportCommand},
};

TEST_F(CliCommandsTest, HelpPrintsTheCommandsUsageAndExitsZero) {
  for (const NamedCommand& c : kCommands) {
    for (const char* flag : {"--help", "-h"}) {
      // Help wins over whatever else is on the line, even a bad flag after it.
      Result r = Run(c.run, {flag, "--bogus"});
      EXPECT_EQ(r.code, kExitOk) << c.name << " " << flag << ": " << r.err;
      EXPECT_THAT(r.out, ::testing::StartsWith(std::string("usage: zpipe ") + c.name)) << c.name;
      EXPECT_EQ(r.err, "") << c.name;
    }
  }
  EXPECT_TRUE(fake_.List({})->jobs.empty());  // nothing was submitted or asked
}

TEST_F(CliCommandsTest, UnknownFlagsExitTwoNamingThem) {
  for (const NamedCommand& c : kCommands) {
    Result r = Run(c.run, {"--frobnicate"});
    EXPECT_EQ(r.code, kExitUsage) << c.name;
    EXPECT_THAT(r.err,
                HasSubstr(std::string("zpipe ") + c.name + ": unknown option '--frobnicate'"))
        << c.name;
    EXPECT_THAT(r.err, HasSubstr("usage: zpipe")) << c.name;
  }
  // After "--" it is a positional, not a flag (and not a request for help).
  Result r = Run(RunStatusCommand, {"--", "--help"});
  EXPECT_EQ(r.code, kExitJobFailed);  // no job named "--help"
}

TEST_F(CliCommandsTest, ExitCodeForEveryStatusCode) {
  EXPECT_EQ(ExitCodeFor(absl::OkStatus()), kExitOk);
  EXPECT_EQ(ExitCodeFor(absl::InvalidArgumentError("spec.x: bad")), kExitUsage);
  // docs/guide.md, exit codes: "1 ... the operation was refused": another spec under an existing
  // id is refused.
  EXPECT_EQ(ExitCodeFor(absl::AlreadyExistsError("job 'a' already exists")), kExitJobFailed);
  EXPECT_EQ(ExitCodeFor(absl::NotFoundError("job 'a' not found")), kExitJobFailed);
  EXPECT_EQ(ExitCodeFor(absl::FailedPreconditionError("finished")), kExitJobFailed);
  EXPECT_EQ(ExitCodeFor(absl::PermissionDeniedError("role")), kExitJobFailed);
  EXPECT_EQ(ExitCodeFor(absl::UnauthenticatedError("token")), kExitJobFailed);
  EXPECT_EQ(ExitCodeFor(absl::ResourceExhaustedError("limit")), kExitResourceExhausted);
  EXPECT_EQ(ExitCodeFor(absl::DeadlineExceededError("slow")), kExitJobFailed);
  EXPECT_EQ(ExitCodeFor(absl::InternalError("")), kExitJobFailed);
  EXPECT_EQ(ExitCodeFor(absl::UnavailableError("down")), kExitUnreachable);
}

TEST_F(CliCommandsTest, ResubmittingAnotherSpecUnderAnIdIsRefusedWithOne) {
  const std::string a = JobFile("name: a\nparallel: {pipeline: 2}\nschedule: {kind: 1f1b}\n");
  ASSERT_EQ(Run(RunSubmitCommand, {a, "--id", "same"}).code, kExitOk);
  EXPECT_EQ(Run(RunSubmitCommand, {a, "--id", "same"}).code, kExitOk);  // identical: harmless
  const std::string b = JobFile("name: b\nparallel: {pipeline: 2}\nschedule: {kind: 1f1b}\n");
  Result r = Run(RunSubmitCommand, {b, "--id", "same"});
  EXPECT_EQ(r.code, kExitJobFailed) << r.err;
  EXPECT_THAT(r.err, HasSubstr("zpipe submit: "));
  EXPECT_THAT(r.err, HasSubstr("same"));
}

TEST_F(CliCommandsTest, AnErrorWithoutAMessageStillSaysWhat) {
  std::ostringstream out, err;
  CliContext ctx(std::make_unique<Forwarder>(fake_), "fake:1", OutputFormat::kTable, out, err,
                 false);
  EXPECT_EQ(ctx.Fail("submit", absl::InternalError("")), kExitJobFailed);
  EXPECT_EQ(err.str(), "zpipe submit: the call failed with INTERNAL and no message from gRPC\n");
}

// A full job store is RESOURCE_EXHAUSTED: the coordinator answered, so the CLI says what it said
// and exits 4, not "cannot reach the coordinator" with 3.
TEST_F(CliCommandsTest, AFullStoreIsSaidAsSuchWithItsOwnExitCode) {
  std::ostringstream out, err;
  CliContext ctx(std::make_unique<Forwarder>(fake_), "fake:1", OutputFormat::kTable, out, err,
                 false);
  EXPECT_EQ(ctx.Fail("submit", absl::ResourceExhaustedError(
                                   "the coordinator's job store is full: 1 job's latest change "
                                   "waits to be written")),
            kExitResourceExhausted);
  EXPECT_EQ(err.str(),
            "zpipe submit: the coordinator at fake:1 refused for lack of resources: the "
            "coordinator's job store is full: 1 job's latest change waits to be written\n");
  EXPECT_NE(kExitResourceExhausted, kExitUnreachable);
}

TEST_F(CliCommandsTest, ANonUtf8JobNameExitsTwoNamingTheField) {
  Result r = Run(RunSubmitCommand, {JobFile("name: caf\xe9\nparallel: {pipeline: 2}\n")});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("line 1: field 'name' is not UTF-8 text (byte 0xE9"));
  EXPECT_TRUE(fake_.List({})->jobs.empty());
}

// Strings from workers and other clients reach the terminal escaped in text output (an ESC
// sequence that clears the screen, a carriage return that overwrites the line, a newline that
// forges one) and exactly as sent in JSON, whose escaping carries them.
TEST_F(CliCommandsTest, TextOutputShowsPeerStringsEscaped) {
  const std::string clear = "\x1b[2J";
  v1::Worker w;
  w.set_name("evil" + clear);
  w.set_host("h\rhost-a");
  w.set_state(v1::WORKER_STATE_IDLE);
  w.set_device_kind(v1::DEVICE_KIND_CPU);
  v1::Worker accented;
  accented.set_name("n\xc5\x93ud-\xe8\xa8\x88\xe7\xae\x97");  // "nœud-計算": printable, kept
  accented.set_state(v1::WORKER_STATE_IDLE);
  fake_.SetWorkers({w, accented});
  Result r = Run(RunWorkersCommand, {"--wide"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\nevil\\x1b[2J "));
  EXPECT_THAT(r.out, HasSubstr("h\\rhost-a"));
  EXPECT_THAT(r.out, HasSubstr("n\xc5\x93ud-\xe8\xa8\x88\xe7\xae\x97"));
  EXPECT_THAT(r.out, Not(HasSubstr("\x1b")));
  EXPECT_THAT(r.out, Not(HasSubstr("\r")));
  r = Run(RunWorkersCommand, {}, OutputFormat::kJson);
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr("\x1b")));  // JSON writes it as \u001b
  EXPECT_EQ(json::parse(r.out)["workers"][0]["name"], "evil" + clear);

  // A failure reason: watch's lines, status, list (the job name).
  v1::JobSpec spec = Spec();
  spec.set_name("t" + clear);
  ASSERT_TRUE(fake_.Submit(spec, "f", false).ok());
  const std::string reason = "rank 1 on worker evil" + clear + " failed\r\nforged line";
  const std::string shown = "rank 1 on worker evil\\x1b[2J failed\\r\\nforged line";
  std::thread driver([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    fake_.SetState("f", v1::JOB_STATE_FAILED, reason);
  });
  r = Run(RunWatchCommand, {"f"});
  driver.join();
  EXPECT_EQ(r.code, kExitJobFailed) << r.err;
  EXPECT_THAT(r.out, HasSubstr("f pending -> failed: " + shown + "\n"));
  EXPECT_THAT(r.out, HasSubstr("f failed 0/3 iterations: " + shown + "\n"));  // the last line
  EXPECT_THAT(r.out, Not(HasSubstr("\x1b")));
  r = Run(RunStatusCommand, {"f"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("reason      " + shown + "\n"));
  EXPECT_THAT(r.out, HasSubstr("t\\x1b[2J"));
  EXPECT_THAT(r.out, Not(HasSubstr("\x1b")));
  r = Run(RunListCommand, {});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("f   t\\x1b[2J  failed"));
  r = Run(RunStatusCommand, {"f"}, OutputFormat::kJson);
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(json::parse(r.out)["reason"], reason);

  // Log lines: one line each, whatever the worker wrote into it; tabs kept.
  v1::LogLine line;
  line.set_rank(1);
  line.set_text("loss 2.5\rloss 0.1" + clear + "\tok");
  logs_.push_back(line);
  r = Run(RunLogsCommand, {"f"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr(" rank 1: loss 2.5\\rloss 0.1\\x1b[2J\tok\n"));
  r = Run(RunLogsCommand, {"f"}, OutputFormat::kJson);
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(json::parse(r.out)["text"], line.text());

  // An error message quoting a peer's string.
  std::ostringstream out, err;
  CliContext ctx(std::make_unique<Forwarder>(fake_), "fake:1", OutputFormat::kTable, out, err,
                 false);
  ctx.Fail("status", absl::FailedPreconditionError("worker evil" + clear + " refused"));
  EXPECT_EQ(err.str(), "zpipe status: worker evil\\x1b[2J refused\n");
}

TEST(CompletionCommandTest, PrintsABashScriptNamingEveryCommand) {
  std::ostringstream out, err;
  ASSERT_EQ(RunCompletionCommand({"bash"}, out, err), kExitOk) << err.str();
  EXPECT_EQ(err.str(), "");
  EXPECT_THAT(out.str(), HasSubstr("complete -o filenames -F _zpipe zpipe"));
  for (const NamedCommand& c : kCommands) EXPECT_THAT(out.str(), HasSubstr(c.name));

  std::ostringstream help, help_err;
  EXPECT_EQ(RunCompletionCommand({"--help"}, help, help_err), kExitOk);
  EXPECT_THAT(help.str(), ::testing::StartsWith("usage: zpipe completion bash|zsh|fish"));

  std::ostringstream none, tcsh, bad;
  EXPECT_EQ(RunCompletionCommand({}, none, bad), kExitUsage);
  EXPECT_EQ(RunCompletionCommand({"tcsh"}, tcsh, bad), kExitUsage);
  EXPECT_THAT(bad.str(), HasSubstr("unknown shell 'tcsh'"));
  EXPECT_EQ(tcsh.str(), "");
  // zsh and fish come from the same table (tests/cli loads them in their shells).
  for (const char* shell : {"zsh", "fish"}) {
    std::ostringstream script, script_err;
    ASSERT_EQ(RunCompletionCommand({shell}, script, script_err), kExitOk) << shell;
    for (const NamedCommand& c : kCommands) EXPECT_THAT(script.str(), HasSubstr(c.name)) << shell;
    EXPECT_THAT(script.str(), HasSubstr("list -o name")) << shell;  // job ids
  }
}

}  // namespace
}  // namespace zpipe::cli
