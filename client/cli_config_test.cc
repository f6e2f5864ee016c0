// The config file of contexts and the precedence of connection settings (cli_config.h):
// flags > ZPIPE_* environment > context > defaults.
#include "client/cli_config.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace zpipe::cli {
namespace {

using ::testing::HasSubstr;

GetEnv Env(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

// A folder of the test's own: ctest runs this binary's tests as parallel processes.
std::string TestDir() {
  return ::testing::TempDir() + "cli_config_test_" + std::to_string(::getpid()) + "_" +
         ::testing::UnitTest::GetInstance()->current_test_info()->name();
}

std::string Write(const std::string& text) {
  const std::string path = TestDir() + "/config.yaml";
  std::system(("mkdir -p " + TestDir()).c_str());
  std::ofstream(path) << text;
  return path;
}

constexpr char kTwoContexts[] = R"(current-context: prod
contexts:
  - name: prod
    coordinator: prod.example:50051
    token-file: ~/prod.token
    tls-ca: /etc/prod-ca.pem
  - name: dev
    coordinator: dev.example:50051
)";

TEST(CliConfigTest, PathFollowsXdgConfigHome) {
  EXPECT_EQ(ConfigPath(Env({{"XDG_CONFIG_HOME", "/x"}, {"HOME", "/h"}})),
            "/x/zeropipe/config.yaml");
  EXPECT_EQ(ConfigPath(Env({{"HOME", "/h"}})), "/h/.config/zeropipe/config.yaml");
}

TEST(CliConfigTest, AMissingFileIsAnEmptyConfig) {
  absl::StatusOr<CliConfig> c = LoadCliConfig("/nonexistent/zeropipe/config.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->contexts.empty());
  absl::StatusOr<Connection> conn = ResolveConnection({}, Env({}), *c, "f");
  ASSERT_TRUE(conn.ok());
  EXPECT_EQ(conn->coordinator.value, "localhost:50051");
  EXPECT_EQ(conn->coordinator.source, "default");
  EXPECT_EQ(conn->tls_ca.value, "");
}

TEST(CliConfigTest, FlagsBeatEnvironmentBeatsContextBeatsDefault) {
  const std::string path = Write(kTwoContexts);
  absl::StatusOr<CliConfig> config = LoadCliConfig(path);
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->contexts.size(), 2u);
  const GetEnv no_env = Env({{"HOME", "/home/u"}});

  // The current context alone.
  absl::StatusOr<Connection> c = ResolveConnection({}, no_env, *config, path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->context, "prod");
  EXPECT_EQ(c->coordinator.value, "prod.example:50051");
  EXPECT_THAT(c->coordinator.source, HasSubstr("context 'prod'"));
  EXPECT_EQ(c->token_file.value, "/home/u/prod.token");  // ~/ expanded
  EXPECT_EQ(c->tls_ca.value, "/etc/prod-ca.pem");

  // The environment beats the context, setting by setting.
  const GetEnv env = Env({{"HOME", "/home/u"},
                          {"ZPIPE_COORDINATOR", "env:1"},
                          {"ZPIPE_TOKEN", "t0k"},
                          {"ZPIPE_TLS_CA", "/env-ca.pem"}});
  c = ResolveConnection({}, env, *config, path);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->coordinator.value, "env:1");
  EXPECT_EQ(c->coordinator.source, "ZPIPE_COORDINATOR");
  EXPECT_EQ(c->token.value, "t0k");
  EXPECT_EQ(c->token_file.value, "");  // the context's file is not read when the env has a token
  EXPECT_EQ(c->tls_ca.value, "/env-ca.pem");

  // Flags beat both.
  ConnectionFlags flags;
  flags.coordinator = "flag:2";
  flags.token_file = "/flag.token";
  flags.tls_ca = "/flag-ca.pem";
  c = ResolveConnection(flags, env, *config, path);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->coordinator.value, "flag:2");
  EXPECT_EQ(c->coordinator.source, "--coordinator");
  EXPECT_EQ(c->token_file.value, "/flag.token");
  EXPECT_EQ(c->token.value, "");
  EXPECT_EQ(c->tls_ca.value, "/flag-ca.pem");

  // --context beats ZPIPE_CONTEXT beats current-context; dev has no TLS: plaintext.
  c = ResolveConnection({}, Env({{"ZPIPE_CONTEXT", "dev"}}), *config, path);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->coordinator.value, "dev.example:50051");
  EXPECT_EQ(c->tls_ca.value, "");
  flags = {};
  flags.context = "prod";
  c = ResolveConnection(flags, Env({{"ZPIPE_CONTEXT", "dev"}}), *config, path);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->coordinator.value, "prod.example:50051");
}

TEST(CliConfigTest, AnUnknownContextIsAnErrorSayingWhatToDo) {
  const std::string path = Write(kTwoContexts);
  absl::StatusOr<CliConfig> config = LoadCliConfig(path);
  ASSERT_TRUE(config.ok());
  ConnectionFlags flags;
  flags.context = "staging";
  absl::StatusOr<Connection> c = ResolveConnection(flags, Env({}), *config, path);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("no context 'staging'"));
  EXPECT_THAT(c.status().message(), HasSubstr("zpipe config get-contexts"));
}

TEST(CliConfigTest, BadFilesNameTheLine) {
  absl::StatusOr<CliConfig> c = LoadCliConfig(Write("contexts:\n  - name: a\n    coordnator: x\n"));
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr(":3: unknown key 'coordnator'"));
  c = LoadCliConfig(Write("contexts:\n  - coordinator: x\n"));
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("a context needs a name"));
}

TEST(CliConfigTest, SaveThenLoadRoundTrips) {
  const std::string path = TestDir() + "/sub/dir/config.yaml";
  CliConfig config;
  config.current_context = "b";
  config.contexts.push_back({.name = "a", .coordinator = "a:1"});
  config.contexts.push_back({.name = "b", .coordinator = "b:2", .tls_ca = "/ca.pem"});
  ASSERT_TRUE(SaveCliConfig(path, config).ok());
  absl::StatusOr<CliConfig> back = LoadCliConfig(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->current_context, "b");
  ASSERT_EQ(back->contexts.size(), 2u);
  EXPECT_EQ(back->Find("b")->tls_ca, "/ca.pem");
  EXPECT_EQ(back->Find("a")->coordinator, "a:1");
}

}  // namespace
}  // namespace zpipe::cli
