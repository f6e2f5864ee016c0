// The built `zpipe` binary's local `zpipe plan`, run as a subprocess: what only the binary's
// argument handling decides (global options before the command). No coordinator needed.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/cli/subprocess.h"

namespace zpipe::testing {
namespace {

using json = nlohmann::json;

ProcessResult RunZpipe(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {ZPIPE_CLI_BIN};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunProcess(argv, {{"ZPIPE_COORDINATOR", ""}}, 30);
}

// Issue 15: `zpipe -o json plan ...` printed the table, `zpipe plan ... -o json` wrote a file
// named "json". Both now print JSON, the same JSON.
TEST(PlanCliTest, DashOJsonBeforeOrAfterTheCommandPrintsJson) {
  const ProcessResult before =
      RunZpipe({"-o", "json", "plan", "--schedule", "zb-v", "-p", "4", "-m", "8"});
  ASSERT_EQ(before.exit_code, 0) << before.err;
  const json j = json::parse(before.out);
  EXPECT_EQ(j["schedule"], "zb-v");
  EXPECT_EQ(j["span"], 48);
  EXPECT_EQ(j["makespan"], 51);
  EXPECT_EQ(j["actions"].size(), 4u);
  const ProcessResult after =
      RunZpipe({"plan", "--schedule", "zb-v", "-p", "4", "-m", "8", "-o", "json"});
  ASSERT_EQ(after.exit_code, 0) << after.err;
  EXPECT_EQ(after.out, before.out);
  const ProcessResult all =
      RunZpipe({"-o", "json", "plan", "--schedule", "all", "-p", "4", "-m", "8"});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  EXPECT_EQ(json::parse(all.out)["schedules"].size(), 12u);
}

TEST(PlanCliTest, FileWritesTheFileAndDashOTakesOnlyAFormat) {
  const std::string path = ::testing::TempDir() + "/zpipe-plan-cli-test.svg";
  std::remove(path.c_str());
  ProcessResult r = RunZpipe(
      {"plan", "--schedule", "zb-h1", "-p", "4", "-m", "8", "--format", "svg", "-f", path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_EQ(r.err, "");
  std::ifstream in(path);
  std::stringstream content;
  content << in.rdbuf();
  EXPECT_EQ(content.str().rfind("<svg", 0), 0u);
  std::remove(path.c_str());
  r = RunZpipe({"-o", "plan.svg", "plan", "--schedule", "zb-h1", "-p", "4", "-m", "8"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("use -f FILE"), std::string::npos) << r.err;
  // Issue 33: the old --output FILE still writes the file this release, with a warning.
  std::remove(path.c_str());
  r = RunZpipe({"plan", "--schedule", "zb-h1", "-p", "4", "-m", "8", "--output", path});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("--output FILE is deprecated"), std::string::npos) << r.err;
  EXPECT_TRUE(std::ifstream(path).good());
  std::remove(path.c_str());
}

}  // namespace
}  // namespace zpipe::testing
