// `zpipe logs` against a real coordinator and two real zpipe-worker processes (LocalCluster, the
// processes `zpipe run --local` starts): the lines each rank's worker logged while it ran a job
// reach the coordinator and come back with their rank and time, filtered by rank, followed until
// the job ends, bounded per rank; bad requests exit with the documented codes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cctype>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "client/local_cluster.h"
#include "tests/cli/subprocess.h"

namespace zpipe {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::ProcessResult;
using testing::RunProcess;
using testing::Subprocess;

// p = 2 synthetic 1F1B; `iterations` of about 8 * 3 * forward_ms each.
std::string JobYaml(const std::string& name, int iterations, int forward_ms,
                    const std::string& extra = "") {
  return absl::StrCat("name: ", name, "\nmodel:\n  synthetic: {forward_ms: ", forward_ms,
                      ", backward_ms: ", forward_ms, ", weight_ms: ", forward_ms,
                      ", activation_kb: 4}\nparallel: {pipeline: 2}\nschedule: {kind: 1f1b}\n",
                      "batch: {microbatches: 4, microbatch_size: 1}\n",
                      "train: {iterations: ", iterations, ", lr: 0.001}\n", extra);
}

class Cluster {
 public:
  explicit Cluster(std::vector<std::string> coordinator_flags = {}) {
    cli::LocalClusterOptions options;
    options.coordinator_bin = ZPIPE_COORDINATOR_BIN;
    options.worker_bin = ZPIPE_WORKER_BIN;
    options.workers = 2;
    options.coordinator_flags = std::move(coordinator_flags);
    auto cluster = cli::LocalCluster::Start(options, absl::Seconds(60));
    EXPECT_TRUE(cluster.ok()) << cluster.status();
    if (cluster.ok()) cluster_ = *std::move(cluster);
  }
  bool ok() const { return cluster_ != nullptr; }

  std::map<std::string, std::string> Env() const {
    return {{"ZPIPE_TOKEN", cluster_->client_token()}, {"ZPIPE_COORDINATOR", cluster_->address()}};
  }
  std::vector<std::string> Argv(std::vector<std::string> args) const {
    args.insert(args.begin(), ZPIPE_CLI_BIN);
    return args;
  }
  ProcessResult Zpipe(std::vector<std::string> args, double timeout_s = 120) const {
    return RunProcess(Argv(std::move(args)), Env(), timeout_s);
  }
  // Submits `yaml` under `id` without waiting.
  void Submit(const std::string& id, const std::string& yaml) const {
    const std::string file = cluster_->dir() + "/" + id + ".yaml";
    std::ofstream(file) << yaml;
    ProcessResult r = Zpipe({"submit", file, "--id", id});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  // Waits for `id` to end; its final state ("succeeded", ...).
  std::string Wait(const std::string& id) const {
    Zpipe({"watch", id});
    ProcessResult r = Zpipe({"-o", "json", "status", id});
    nlohmann::json job = nlohmann::json::parse(r.out, nullptr, false);
    if (job.is_discarded()) return "?";
    std::string state = job.value("state", "");
    for (char& c : state) c = static_cast<char>(std::tolower(c));
    return absl::StrReplaceAll(state, {{"job_state_", ""}});
  }
  std::string WorkerLog(int i) const { return cluster_->Tail(absl::StrCat("worker-", i), 60); }

 private:
  std::unique_ptr<cli::LocalCluster> cluster_;
};

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

// "2026-12-01T01:02:03.456Z rank 1: TEXT", or "... job: TEXT" for the coordinator's line about the
// whole job (kept under rank -1 here).
const std::regex kLine(R"(^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (?:rank ([0-9]+)|job): (.*)$)");

std::map<int, std::vector<std::string>> ByRank(const std::string& out) {
  std::map<int, std::vector<std::string>> by_rank;
  for (const std::string& line : Lines(out)) {
    std::smatch m;
    EXPECT_TRUE(std::regex_match(line, m, kLine)) << "not TIME rank R: TEXT: " << line;
    if (!m.empty()) by_rank[m[1].matched ? std::stoi(m[1]) : -1].push_back(m[2]);
  }
  return by_rank;
}

class LogsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = new Cluster(); }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(cluster_->ok()); }

  static Cluster* cluster_;
};
Cluster* LogsTest::cluster_ = nullptr;

TEST_F(LogsTest, ShowsEachRanksLinesWithTimeAndRankAndFiltersByRank) {
  cluster_->Submit("logs-basic", JobYaml("logs-basic", 2, 5));
  ASSERT_EQ(cluster_->Wait("logs-basic"), "succeeded");
  ProcessResult all = cluster_->Zpipe({"logs", "logs-basic"});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  std::map<int, std::vector<std::string>> by_rank = ByRank(all.out);
  ASSERT_EQ(by_rank.size(), 3u) << all.out;
  // One line per iteration from the coordinator, with tokens/s and bubble (a synthetic model has
  // no loss; RunMonitorTest checks the loss and eval loss parts).
  const std::regex iteration_line(
      R"(^iteration ([0-9]+):( [0-9]+ tokens/s,)? bubble [0-9.]+% \(predicted [0-9.]+%( at measured costs, planned [0-9.]+%)?\)$)");
  ASSERT_EQ(by_rank[-1].size(), 2u) << all.out;
  for (int i = 0; i < 2; ++i) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(by_rank[-1][i], m, iteration_line)) << by_rank[-1][i];
    EXPECT_EQ(std::stoi(m[1]), i);
  }
  for (int r = 0; r < 2; ++r) {
    EXPECT_THAT(by_rank[r], ::testing::Contains(HasSubstr(absl::StrCat(
                                "job logs-basic: rank ", r, "/0 of p=2 d=1, 2 iterations"))))
        << all.out;
    EXPECT_THAT(by_rank[r], ::testing::Contains(HasSubstr("TCP streams data path"))) << all.out;
    EXPECT_THAT(by_rank[r].back(), HasSubstr("job logs-basic: rank finished")) << all.out;
  }

  ProcessResult one = cluster_->Zpipe({"logs", "logs-basic", "--rank", "1"});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  std::map<int, std::vector<std::string>> only = ByRank(one.out);
  ASSERT_EQ(only.size(), 1u) << one.out;
  EXPECT_EQ(only.begin()->first, 1);
  EXPECT_EQ(only[1], by_rank[1]);

  ProcessResult tail = cluster_->Zpipe({"logs", "logs-basic", "--rank", "0", "--tail", "1"});
  ASSERT_EQ(tail.exit_code, 0) << tail.err;
  ASSERT_EQ(Lines(tail.out).size(), 1u) << tail.out;
  EXPECT_THAT(tail.out, HasSubstr("rank finished"));

  ProcessResult json = cluster_->Zpipe({"-o", "json", "logs", "logs-basic"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  std::set<int> ranks;
  for (const std::string& line : Lines(json.out)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << line;
    ASSERT_TRUE(j["rank"].is_number_integer()) << line;
    EXPECT_EQ(j["rank"], j["pipeline_rank"]) << "d = 1";
    EXPECT_TRUE(j["time"].is_string());
    EXPECT_TRUE(j["text"].is_string());
    ranks.insert(j["rank"].get<int>());
  }
  EXPECT_EQ(ranks, (std::set<int>{-1, 0, 1}));

  ProcessResult since = cluster_->Zpipe({"logs", "logs-basic", "--since", "10m"});
  EXPECT_EQ(Lines(since.out).size(), Lines(all.out).size());
  ProcessResult future = cluster_->Zpipe({"logs", "logs-basic", "--since", "2999-01-01T00:00:00Z"});
  EXPECT_EQ(future.exit_code, 0);
  EXPECT_EQ(future.out, "");
}

TEST_F(LogsTest, FollowPrintsLinesAsTheyComeAndEndsWhenTheJobEnds) {
  // About 15 * 30 ms per iteration: several seconds in all.
  cluster_->Submit("logs-follow", JobYaml("logs-follow", 16, 30));
  Subprocess follow(cluster_->Argv({"logs", "logs-follow", "--follow"}), cluster_->Env());
  // Lines arrive while the job runs (the workers send them about once per heartbeat).
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (follow.ReadOut().find("TCP streams data path") == std::string::npos &&
         absl::Now() < deadline) {
    ASSERT_TRUE(follow.Running()) << follow.ReadErr();
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_THAT(follow.ReadOut(), Not(HasSubstr("rank finished"))) << "the job has not ended";
  ProcessResult r = follow.Wait(120);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::map<int, std::vector<std::string>> by_rank = ByRank(r.out);
  ASSERT_EQ(by_rank.size(), 3u) << r.out;  // ranks 0 and 1, and the coordinator's job lines
  EXPECT_EQ(by_rank[-1].size(), 16u) << "one per iteration";
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_THAT(by_rank[rank].back(), HasSubstr("rank finished")) << r.out;
  }
  EXPECT_EQ(cluster_->Wait("logs-follow"), "succeeded");
}

TEST_F(LogsTest, AFailedRankShowsItsFailureMessage) {
  cluster_->Submit("logs-fail", JobYaml("logs-fail", 2, 5,
                                        "checkpoint: {every: 1, dir: /zpipe-no-such-root/ckpt}\n"));
  ASSERT_EQ(cluster_->Wait("logs-fail"), "failed");
  ProcessResult r = cluster_->Zpipe({"logs", "logs-fail"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("job logs-fail: failed: "));
  EXPECT_THAT(r.out, HasSubstr("/zpipe-no-such-root/ckpt"));
}

TEST_F(LogsTest, BadRankAndUnknownJobExitWithTheDocumentedCodes) {
  cluster_->Submit("logs-ranks", JobYaml("logs-ranks", 1, 5));
  ASSERT_EQ(cluster_->Wait("logs-ranks"), "succeeded");
  ProcessResult bad = cluster_->Zpipe({"logs", "logs-ranks", "--rank", "2"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_THAT(bad.err, HasSubstr("rank: must be in [0, 2)"));
  ProcessResult word = cluster_->Zpipe({"logs", "logs-ranks", "--rank", "one"});
  EXPECT_EQ(word.exit_code, 2);
  EXPECT_THAT(word.err, HasSubstr("--rank"));
  ProcessResult unknown = cluster_->Zpipe({"logs", "no-such-job"});
  EXPECT_EQ(unknown.exit_code, 1) << unknown.err;
  EXPECT_THAT(unknown.err, HasSubstr("job 'no-such-job' not found"));
  ProcessResult follow_unknown = cluster_->Zpipe({"logs", "no-such-job", "--follow"});
  EXPECT_EQ(follow_unknown.exit_code, 1);
  ProcessResult missing = cluster_->Zpipe({"logs"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.err, HasSubstr("usage: zpipe logs"));
}

TEST(LogsBoundTest, TheCoordinatorKeepsTheNewestLinesOfEachRank) {
  Cluster cluster({"--log-lines", "2"});
  ASSERT_TRUE(cluster.ok());
  cluster.Submit("logs-bound", JobYaml("logs-bound", 2, 5));
  ASSERT_EQ(cluster.Wait("logs-bound"), "succeeded");
  ProcessResult r = cluster.Zpipe({"logs", "logs-bound"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<int, std::vector<std::string>> by_rank = ByRank(r.out);
  ASSERT_EQ(by_rank.size(), 3u) << r.out;
  for (int rank = -1; rank < 2; ++rank) {  // -1: the coordinator's job lines, bounded alike
    ASSERT_EQ(by_rank[rank].size(), 2u) << r.out;
    if (rank < 0) continue;
    EXPECT_THAT(by_rank[rank].back(), HasSubstr("rank finished")) << "the newest are kept";
    EXPECT_THAT(r.out, Not(HasSubstr(absl::StrCat("rank ", rank, "/0 of p=2"))))
        << "the oldest went";
  }
  EXPECT_THAT(r.err, HasSubstr("older lines of the selected ranks were dropped"));
}

}  // namespace
}  // namespace zpipe
