// The built `zpipe` binary's local `zpipe plan`, run as a subprocess: what only the binary's
// argument handling decides (global options before the command). No coordinator needed.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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

// Issue 34: local commands are quick as a process because they start nothing: no thread, no
// socket (so no gRPC channel and no TLS). strace -f records every clone and socket call of the
// process and its children.
TEST(PlanCliTest, LocalCommandsStartNoThreadOrSocket) {
  std::string strace;
  for (const char* dir : {"/usr/bin", "/bin", "/usr/local/bin"}) {
    const std::string path = absl::StrCat(dir, "/strace");
    if (access(path.c_str(), X_OK) == 0) strace = path;
  }
  if (strace.empty()) GTEST_SKIP() << "no strace (scripts/setup installs it)";
  const std::string trace =
      absl::StrCat(::testing::TempDir(), "/zpipe-local-", getpid(), ".strace");
  const std::vector<std::vector<std::string>> commands = {
      {"plan", "--schedule", "zb-v", "-p", "32", "-m", "256", "--budget", "0"},
      {"plan", "--schedule", "all", "-p", "4", "-m", "8", "-o", "json"},
      {"completion", "bash"},
      {"version", "--client"},
      {"--help"}};
  for (const auto& command : commands) {
    std::vector<std::string> argv = {
        strace, "-f", "-qq", "-e", "trace=clone,clone3,fork,vfork,socket,connect", "-o", trace,
        ZPIPE_CLI_BIN};
    argv.insert(argv.end(), command.begin(), command.end());
    const ProcessResult r = RunProcess(argv, {{"ZPIPE_COORDINATOR", ""}}, 60);
    const std::string line = absl::StrJoin(command, " ");
    ASSERT_EQ(r.exit_code, 0) << "zpipe " << line << ": " << r.err;
    std::ifstream in(trace);
    std::stringstream calls;
    calls << in.rdbuf();
    EXPECT_EQ(calls.str(), "") << "zpipe " << line << " made these calls:\n" << calls.str();
  }
  std::filesystem::remove(trace);
}

// The shared libraries the dynamic loader loaded for `zpipe ARGS` (and for what it execs), from
// its LD_DEBUG=libs trace: the "calling init: PATH" lines.
std::string LoadedLibraries(const std::vector<std::string>& args, int* exit_code) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / absl::StrCat("zpipe-ld-", getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::vector<std::string> argv = {ZPIPE_CLI_BIN};
  argv.insert(argv.end(), args.begin(), args.end());
  const ProcessResult r = RunProcess(
      argv, {{"ZPIPE_COORDINATOR", ""}, {"LD_DEBUG", "libs"}, {"LD_DEBUG_OUTPUT", dir / "ld"}}, 60);
  *exit_code = r.exit_code;
  std::string loaded;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path());
    for (std::string line; std::getline(in, line);) {
      if (const size_t at = line.find("calling init: "); at != std::string::npos) {
        absl::StrAppend(&loaded, line.substr(at + 14), "\n");
      }
    }
  }
  std::filesystem::remove_all(dir);
  return loaded;
}

// Issue 34: the local commands run in the lean `zpipe`, which links no gRPC, protobuf, OpenSSL or
// yaml-cpp (their start-up was most of a small plan's time); the commands that talk to a
// coordinator run in zpipe-remote, which zpipe execs, and load them there.
TEST(PlanCliTest, LocalCommandsLoadNoGrpcProtobufOrOpenSsl) {
  const std::vector<std::vector<std::string>> local = {
      {"plan", "--schedule", "zb-2p", "-p", "8", "-m", "32"},
      {"-o", "json", "plan", "--schedule", "all", "-p", "4", "-m", "8"},
      {"completion", "zsh"},
      {"--version"},
      {"--help"},
      {"sumbit"}};  // a typo: the suggestion comes from the lean binary's command table
  for (const auto& command : local) {
    int exit_code = -1;
    const std::string loaded = LoadedLibraries(command, &exit_code);
    const std::string line = absl::StrJoin(command, " ");
    EXPECT_EQ(exit_code, command[0] == "sumbit" ? 2 : 0) << line;
    ASSERT_NE(loaded.find("libc.so"), std::string::npos) << "zpipe " << line << ": " << loaded;
    for (const char* heavy : {"libgrpc", "libprotobuf", "libssl", "libcrypto", "libyaml-cpp"}) {
      EXPECT_EQ(loaded.find(heavy), std::string::npos)
          << "zpipe " << line << " loaded " << heavy << ":\n" << loaded;
    }
  }
  // The same trace sees gRPC once zpipe hands a command to zpipe-remote.
  int exit_code = -1;
  const std::string loaded = LoadedLibraries({"version", "--client"}, &exit_code);
  EXPECT_EQ(exit_code, 0);
  EXPECT_NE(loaded.find("libgrpc"), std::string::npos) << loaded;
}

}  // namespace
}  // namespace zpipe::testing
