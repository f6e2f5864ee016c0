#include "client/plan_command.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/plan.h"

namespace zpipe::cli {
namespace {

struct CliRun {
  int code;
  std::string out, err;
};

CliRun Plan(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int code = RunPlanCommand(args, out, err);
  return {code, out.str(), err.str()};
}

TEST(PlanCommandTest, SummaryShowsStatistics) {
  CliRun r = Plan({"--schedule", "1f1b", "--pipeline", "4", "--microbatches", "8"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("bubble rate   0.2727"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("makespan      33"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("memory limit  4 per rank; peak 4"), std::string::npos) << r.out;
}

TEST(PlanCommandTest, TextFormatParsesBack) {
  CliRun r =
      Plan({"--schedule=gpipe", "--pipeline=2", "--microbatches=3", "--format=text", "--lower"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto plan = core::ParsePlanText(r.out);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->num_ranks(), 2);
  EXPECT_TRUE(plan->IsLowered());
}

TEST(PlanCommandTest, JsonHasTopLevelStatistics) {
  CliRun r = Plan({"--schedule", "1f1b", "--pipeline", "2", "--microbatches", "2", "--format",
                   "json", "--cost", "f=1,b=1,w=1,comm=0"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"makespan\":9"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"bubble_rate\":0.33333333333333"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"peak_memory\":[2,1]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"actions\":[["), std::string::npos) << r.out;
}

TEST(PlanCommandTest, WritesOutputFile) {
  const std::string path = ::testing::TempDir() + "/plan.svg";
  CliRun r = Plan({"--schedule", "1f1b", "--pipeline", "2", "--microbatches", "4", "--format",
                   "svg", "--file", path});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(r.out.empty());
  std::ifstream in(path);
  std::stringstream content;
  content << in.rdbuf();
  EXPECT_NE(content.str().find("<svg"), std::string::npos);
  std::remove(path.c_str());
}

// --format torch-csv prints PyTorch's compute-only schedule, and refuses per-bucket reductions.
TEST(PlanCommandTest, TorchCsvFormat) {
  CliRun r = Plan({"--schedule", "1f1b", "-p", "2", "-m", "2", "--format", "torch-csv", "--lower"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n");
  r = Plan({"--schedule", "1f1b", "-p", "2", "-m", "2", "--format", "torch-csv", "--lower",
            "--buckets", "2"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(r.out.empty());
  EXPECT_EQ(r.err.rfind("zpipe plan: --format torch-csv: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("plan without --buckets"), std::string::npos) << r.err;
}

// Issue 15: "makespan" was the longest per-rank span while ZB-V's actions run past it. The span
// and the first-start-to-last-end makespan are reported side by side.
TEST(PlanCommandTest, SpanAndMakespanSideBySide) {
  CliRun r = Plan({"--schedule", "zb-v", "-p", "4", "-m", "8"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\nspan          48 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nmakespan      51 "), std::string::npos) << r.out;
  r = Plan({"--schedule", "zb-v", "-p", "4", "-m", "8", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"span\":48,\"makespan\":51,"), std::string::npos) << r.out.substr(0, 300);
  // No action ends after "makespan".
  double last_end = 0;
  for (size_t pos = 0; (pos = r.out.find("\"end\":", pos)) != std::string::npos; pos += 6) {
    last_end = std::max(last_end, std::stod(r.out.substr(pos + 6)));
  }
  EXPECT_DOUBLE_EQ(last_end, 51);
}

// Issue 15: -o is the output format, as for every zpipe command; --output FILE writes a file.
TEST(PlanCommandTest, DashOJsonPrintsJsonAndOutputWritesAFile) {
  CliRun r = Plan({"--schedule", "zb-h1", "-p", "4", "-m", "8", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("{\"schedule\":\"zb-h1\"", 0), 0u) << r.out.substr(0, 200);
  EXPECT_NE(r.out.find("\"actions\":[["), std::string::npos);
  // The same before the other flags, and -o table is the default summary.
  EXPECT_EQ(Plan({"-o", "json", "--schedule", "zb-h1", "-p", "4", "-m", "8"}).out, r.out);
  EXPECT_EQ(Plan({"-o", "table", "--schedule", "zb-h1", "-p", "4", "-m", "8"}).out,
            Plan({"--schedule", "zb-h1", "-p", "4", "-m", "8"}).out);
  // --schedule all -o json: one object with a row per schedule.
  r = Plan({"--schedule", "all", "-p", "4", "-m", "8", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("{\"pipeline\":4,\"microbatches\":8,", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("{\"schedule\":\"zb-v\",\"span\":48,\"makespan\":51,"), std::string::npos)
      << r.out;
  // A file name after -o is refused with the flag to use; nothing is written.
  const std::string path = ::testing::TempDir() + "/json";
  std::remove(path.c_str());
  r = Plan({"--schedule", "zb-h1", "-p", "4", "-m", "8", "-o", "plan.svg"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("use -f FILE"), std::string::npos) << r.err;
  r = Plan({"--schedule", "zb-h1", "-p", "4", "-m", "8", "-o", "json", "--format", "svg"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("-o json asks for JSON but --format is svg"), std::string::npos) << r.err;
  // -f with -o json: the JSON goes to the file.
  r = Plan({"--schedule", "zb-h1", "-p", "4", "-m", "8", "-o", "json", "-f", path});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(r.out.empty());
  std::ifstream in(path);
  std::stringstream content;
  content << in.rdbuf();
  EXPECT_EQ(content.str().rfind("{\"schedule\":\"zb-h1\"", 0), 0u);
  std::remove(path.c_str());
}

// Issue 15: the comparison table printed 1.63026e+06; numbers are in plain notation.
TEST(PlanCommandTest, ComparisonTableUsesPlainNotation) {
  // --budget 0: the greedy pass's span, which a search may shorten.
  CliRun r = Plan({"--schedule", "all", "-p", "8", "-m", "32", "--cost",
                   "f=18522,b=18086,w=9337,comm=601", "--budget", "0"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.find("e+"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("p=8 m=32 cost f=18522 b=18086 w=9337 comm=601"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\nzb-2p             1475602 "), std::string::npos) << r.out;
  r = Plan(
      {"--schedule", "zb-2p", "-p", "8", "-m", "32", "--cost", "f=18522,b=18086,w=9337,comm=601"});
  EXPECT_EQ(r.out.find("e+"), std::string::npos) << r.out;
}

TEST(PlanCommandTest, AllComparesEverySchedule) {
  CliRun r = Plan({"--schedule", "all", "--pipeline", "4", "--microbatches", "8"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* name :
       {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-2p", "zb-v", "v-min", "dualpipe-v"}) {
    EXPECT_NE(r.out.find(std::string("\n") + name + " "), std::string::npos) << name << r.out;
  }
}

TEST(PlanCommandTest, GradSyncReportsReduceOverlap) {
  CliRun r = Plan({"--schedule", "gpipe", "--pipeline", "2", "--microbatches", "4", "--buckets",
                   "2", "--reduce-cost", "0.5"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("reduce        total 2, exposed"), std::string::npos) << r.out;
}

TEST(PlanCommandTest, BadArgumentsExitTwoWithOneLine) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {},
           {"--schedule", "nope", "--pipeline", "4", "--microbatches", "8"},
           {"--schedule", "1f1b", "--pipeline", "0", "--microbatches", "8"},
           {"--schedule", "1f1b", "--pipeline", "4", "--microbatches", "x"},
           {"--schedule", "1f1b", "--pipeline", "4", "--microbatches", "8", "--cost", "q=1"},
           {"--schedule", "1f1b", "--pipeline", "4", "--microbatches", "8", "--format", "pdf"},
           {"--schedule", "1f1b", "--pipeline", "4", "--microbatches", "8", "--bogus", "1"},
           {"--schedule", "1f1b", "--pipeline", "4", "--microbatches", "8", "--memory-limit", "1"},
           {"--schedule", "interleaved", "--pipeline", "4", "--microbatches", "6"},
           {"--schedule", "1f1b", "--pipeline"},
       }) {
    CliRun r = Plan(args);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_EQ(r.err.rfind("zpipe plan: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  CliRun r =
      Plan({"--schedule", "1f1b", "--pipeline", "4", "--microbatches", "8", "--memory-limit", "1"});
  EXPECT_NE(r.err.find("memory limit"), std::string::npos) << r.err;
}

// --recompute auto at a limit that holds two microbatches of activations: the summary says which
// stages recompute and what keeping every activation would give at the same limit.
TEST(PlanCommandTest, RecomputeShowsWhatItBuys) {
  const std::vector<std::string> args = {"--schedule", "zb-1p", "-p",       "4",
                                         "-m",         "8",     "--memory", "f=1,b=0,w=-1,keep=0.1",
                                         "--memory-limit", "2", "--recompute", "auto"};
  CliRun r = Plan(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("recompute     stages 0,1 of 4"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("without recomputation at this limit: span 41, bubble 0.4146; with it: "
                       "span 34, bubble 0.1765"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("span          34 "), std::string::npos) << r.out;
  std::vector<std::string> json = args;
  json.insert(json.end(), {"-o", "json"});
  r = Plan(json);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"recompute\":{\"stages\":[0,1],\"time\":16,\"span\":34,"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\"keep_span\":41,"), std::string::npos) << r.out;
  // The plan's text carries the R actions the workers run.
  std::vector<std::string> text = args;
  text.insert(text.end(), {"--format", "text", "--lower"});
  r = Plan(text);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\nR s0 mb0\n"), std::string::npos) << r.out;
  absl::StatusOr<core::Plan> parsed = core::ParsePlanText(r.out);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  // PyTorch's CSV has no recompute action: refused, naming why.
  std::vector<std::string> csv = args;
  csv.insert(csv.end(), {"--format", "torch-csv"});
  r = Plan(csv);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("no recompute action"), std::string::npos) << r.err;
}

// Without --recompute a limit nothing fits names the way out; with it, a plan exists.
TEST(PlanCommandTest, RecomputeMakesATightLimitFit) {
  std::vector<std::string> args = {"--schedule", "1f1b", "--pipeline", "4", "--microbatches",
                                   "8", "--memory-limit", "2"};
  CliRun r = Plan(args);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--recompute auto"), std::string::npos) << r.err;
  args.insert(args.end(), {"--recompute", "auto"});
  r = Plan(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("without recomputation no plan fits this limit"), std::string::npos)
      << r.out;
  args.insert(args.end(), {"--optimal"});
  r = Plan(args);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--optimal does not model recomputation"), std::string::npos) << r.err;
}

// Without --recompute, a memory limit where recomputing shortens the plan says so (text and
// JSON), while the plan printed stays the one that keeps every activation.
TEST(PlanCommandTest, MemoryLimitSaysWhereRecomputationWins) {
  const std::vector<std::string> args = {"--schedule", "zb-1p", "-p", "4", "-m", "8",
                                         "--memory-limit", "2"};
  CliRun r = Plan(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("recompute     --recompute auto recomputes stages 0,1: span 41 -> 33, "
                       "bubble 0.4146 -> 0.1515\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("span          41 "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("recompute     stages"), std::string::npos) << r.out;
  // --recompute auto gives what the line promised.
  std::vector<std::string> recompute = args;
  recompute.insert(recompute.end(), {"--recompute", "auto"});
  r = Plan(recompute);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("span          33 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("recompute     stages 0,1 of 4"), std::string::npos) << r.out;

  std::vector<std::string> json = args;
  json.insert(json.end(), {"-o", "json"});
  r = Plan(json);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"span\":41,"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"recompute_suggestion\":{\"recompute\":\"auto\",\"stages\":[0,1],"
                       "\"span\":33,\"bubble\":0.15151515151515"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("\"kind\":\"R\""), std::string::npos) << r.out;  // no R in the plan

  // --recompute off says no to the suggestion; the plan formats print the plan alone, byte for
  // byte what --recompute off prints.
  std::vector<std::string> off = args;
  off.insert(off.end(), {"--recompute", "off"});
  r = Plan(off);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.find("--recompute auto"), std::string::npos) << r.out;
  for (const char* format : {"ascii", "svg", "csv", "text", "torch-csv"}) {
    std::vector<std::string> plain = args, explicit_off = off;
    plain.insert(plain.end(), {"--format", format, "--budget", "0"});
    explicit_off.insert(explicit_off.end(), {"--format", format, "--budget", "0"});
    CliRun a = Plan(plain), b = Plan(explicit_off);
    ASSERT_EQ(a.code, 0) << format << ": " << a.err;
    EXPECT_EQ(a.out, b.out) << format;
  }
  // The comparison table has no room for it (--schedule all --recompute auto compares with it).
  r = Plan({"--schedule", "all", "-p", "4", "-m", "8", "--memory-limit", "2", "--budget", "0"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.find("recompute"), std::string::npos) << r.out;
}

// Where keeping every activation is as short, or no limit was given, nothing is said.
TEST(PlanCommandTest, NoRecomputeLineWhereItDoesNotWin) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--memory-limit", "8"}, std::vector<std::string>{}}) {
    std::vector<std::string> full = {"--schedule", "zb-1p", "-p", "4", "-m", "8", "--budget", "0"};
    full.insert(full.end(), args.begin(), args.end());
    CliRun r = Plan(full);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out.find("recompute"), std::string::npos) << r.out;
    full.insert(full.end(), {"-o", "json"});
    r = Plan(full);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out.find("recompute"), std::string::npos) << r.out;
  }
}

// Issue 11: these ran for minutes at up to 12.6 GB; each must exit 2 at once, naming the flag
// and the limit, before any planning.
TEST(PlanCommandTest, HugeShapesExitTwoNamingTheFlagAndTheLimit) {
  struct Case {
    std::vector<std::string> args;
    std::string expected;
  };
  const std::vector<std::string> base = {"--schedule", "zb-v"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> args = base;
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  const std::vector<Case> cases = {
      {with({"-p", "4", "-m", "2147483647"}),
       "-m: must be at most 4096 (the microbatch limit), got 2147483647"},
      {with({"-p", "4", "-m", "99999999999999999999"}), "-m: '99999999999999999999' is not"},
      {with({"-p", "100000", "-m", "8"}),
       "-p: must be at most 64 (the pipeline limit), got 100000"},
      {with({"-p", "4", "-m", "8", "--buckets", "100000000"}),
       "--buckets: must be at most 1024 (the per-stage bucket limit), got 100000000"},
      {with({"-p", "64", "-m", "1024", "--buckets", "1024"}),
       "--microbatches: zb-v has pipeline x chunks = 64 x 2, times 1024 microbatches = 131072 "
       "exceeds 65536 (the plan size limit)"},
      {with({"-p", "64", "-m", "8", "--buckets", "1000"}),
       "--buckets: zb-v has pipeline x chunks = 64 x 2, times 1000 buckets = 128000 exceeds "
       "65536 (the grad-sync bucket limit)"},
      {{"--schedule", "interleaved", "-p", "4", "-m", "8", "--chunks", "1000"},
       "--chunks: must be at most 16 (the chunk limit), got 1000"},
      {{"--schedule", "all", "-p", "64", "-m", "1024"},
       "--microbatches: interleaved has pipeline x chunks = 64 x 2"},
      {with({"-p", "4", "-m", "8", "--format", "ascii", "--width", "2147483647"}),
       "--width: must be at most 10000 (the width limit)"},
      {with({"-p", "4", "-m", "8", "--cost", "f=nan"}), "--cost f: 'nan' is not a number"},
      {with({"-p", "4", "-m", "8", "--memory-limit", "inf"}), "'inf' is not a number"},
      {with({"-p", "4", "-m", "8", "--cost", "w=-1"}), "--cost w: must be >= 0"},
      {with({"-p", "4", "-m", "8", "--cost", "comm=inf"}), "--cost comm: 'inf' is not a number"},
      {with({"-p", "4", "-m", "8", "--cost", "b=1e300"}),
       "--cost b: must be at most 1000000000000 in absolute value (the cost value limit)"},
      {with({"-p", "4", "-m", "8", "--memory", "f=nan"}), "--memory f: 'nan' is not a number"},
      {with({"-p", "4", "-m", "8", "--memory", "w=-1e20"}), "(the cost value limit)"},
      {with({"-p", "4", "-m", "8", "--memory-limit", "1e13"}), "(the cost value limit)"},
      {with({"-p", "4", "-m", "8", "--buckets", "2", "--reduce-cost", "-1"}),
       "--reduce-cost: must be >= 0"},
      {with({"-p", "4", "-m", "8", "--buckets", "2", "--reduce-cost", "nan"}),
       "--reduce-cost: 'nan' is not a number"},
      {with({"-p", "0", "-m", "8"}), "-p: '0' is not an integer >= 1"},
      {with({"-p", "4", "-m", "0"}), "-m: '0' is not an integer >= 1"},
  };
  for (const Case& c : cases) {
    const auto t0 = std::chrono::steady_clock::now();
    CliRun r = Plan(c.args);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(r.code, 2) << c.expected;
    EXPECT_EQ(r.err.rfind("zpipe plan: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(c.expected), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_LT(seconds, 1.0) << c.expected;
  }
}

TEST(PlanCommandTest, TheLargestAllowedShapesStillPlan) {
  // p x v x m exactly at the plan size limit, with buckets at theirs.
  CliRun r = Plan({"--schedule", "1f1b", "-p", "16", "-m", "4096"});
  EXPECT_EQ(r.code, 0) << r.err;
  r = Plan({"--schedule", "zb-v", "-p", "32", "-m", "8", "--buckets", "1024"});
  EXPECT_EQ(r.code, 0) << r.err;
}

TEST(PlanCommandTest, SearchBudgetAndLowerBound) {
  const std::vector<std::string> shape = {
      "--schedule", "zb-2p", "-p", "4", "-m", "8", "--cost", "f=900,b=1300,w=700,comm=200"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = shape;
    args.insert(args.end(), extra.begin(), extra.end());
    return Plan(args);
  };
  CliRun greedy = with({"--budget", "0"});
  ASSERT_EQ(greedy.code, 0) << greedy.err;
  EXPECT_NE(greedy.out.find("lower bound   span >= "), std::string::npos) << greedy.out;
  CliRun a = with({"--budget", "0.05", "--seed", "3"});
  CliRun b = with({"--budget", "0.05", "--seed", "3"});
  ASSERT_EQ(a.code, 0) << a.err;
  auto without_time = [](const std::string& s) { return s.substr(0, s.find("actions")); };
  EXPECT_EQ(without_time(a.out), without_time(b.out));
  for (const char* bad : {"-1", "nan", "601"}) {
    CliRun r = with({"--budget", bad});
    EXPECT_EQ(r.code, 2) << bad;
    EXPECT_NE(r.err.find("--budget"), std::string::npos) << r.err;
  }
  CliRun seed = with({"--seed", "x"});
  EXPECT_EQ(seed.code, 2);
  EXPECT_NE(seed.err.find("--seed"), std::string::npos) << seed.err;
  CliRun all = Plan({"--schedule", "all", "-p", "4", "-m", "8", "--budget", "0", "-o", "json"});
  ASSERT_EQ(all.code, 0) << all.err;
  EXPECT_NE(all.out.find("\"bubble_lower_bound\":"), std::string::npos) << all.out;
}

// Issue 34: --optimal runs the exact solver for --budget seconds and prints span, bound and gap.
TEST(PlanCommandTest, OptimalPrintsSpanBoundAndGap) {
  // A tiny shape: the tree is exhausted, the gap is 0.
  CliRun r = Plan({"--schedule", "zb-1p", "-p", "2", "-m", "2", "--cost", "f=1,b=1,w=1,comm=0.5",
                   "--optimal", "--budget", "5s"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("gap 0.00% (proven optimal"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\ngenerated     span "), std::string::npos) << r.out;
  r = Plan({"--schedule", "zb-1p", "-p", "2", "-m", "2", "--cost", "f=1,b=1,w=1,comm=0.5",
            "--optimal", "--budget", "5", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("{\"schedule\":\"zb-1p\"", 0), 0u) << r.out.substr(0, 100);
  EXPECT_NE(r.out.find("\"proven_optimal\":true"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"gap\":0,"), std::string::npos) << r.out;
  // A shape it cannot finish in 0.1 s: the best span, a bound below it and the gap.
  r = Plan({"--schedule", "zb-1p", "-p", "4", "-m", "12", "--cost", "f=1,b=1.5,w=0.7,comm=0.6",
            "--optimal", "--budget", "0.1", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"proven_optimal\":false"), std::string::npos) << r.out;
  const size_t at = r.out.find("\"optimal\":{\"span\":");
  ASSERT_NE(at, std::string::npos);
  const double span = std::stod(r.out.substr(at + 18));
  const double bound = std::stod(r.out.substr(r.out.find("\"bound\":", at) + 8));
  EXPECT_LT(bound, span);
  EXPECT_GT(bound, 0);
  // Refused: --optimal with every schedule, or without a budget.
  EXPECT_EQ(Plan({"--schedule", "all", "-p", "2", "-m", "2", "--optimal"}).code, 2);
  r = Plan({"--schedule", "zb-1p", "-p", "2", "-m", "2", "--optimal", "--budget", "0"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--optimal needs a --budget"), std::string::npos) << r.err;
}

// Issue 34: the plan JSON carries the lower bounds (it lacked them).
TEST(PlanCommandTest, PlanJsonCarriesTheBounds) {
  CliRun r = Plan({"--schedule", "1f1b", "-p", "4", "-m", "8", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  // 1F1B at its memory limit: the bound is its span, (m + p - 1) * (F + B + W) = 33.
  EXPECT_NE(r.out.find("\"span_lower_bound\":33,"), std::string::npos)
      << r.out.substr(r.out.size() - 80);
  EXPECT_NE(r.out.find("\"bubble_lower_bound\":"), std::string::npos);
  EXPECT_EQ(r.out.find("\"optimal\":"), std::string::npos);
}

}  // namespace
}  // namespace zpipe::cli
