// The command table (command_table.h) and what is made from it: the flag conventions every command
// follows, typo suggestions, and the -o formats (yaml, name) through the real commands over a
// FakeClient.
#include "client/command_table.h"

#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "client/cli.h"
#include "client/fake_client.h"
#include "client/json_output.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "yaml-cpp/yaml.h"

namespace zpipe::cli {
namespace {

using ::testing::HasSubstr;

// The table says what each command is; zpipe-remote runs it with CommandRunner (cli.h). Every
// command has a runner but completion, which the lean zpipe runs itself (dispatch.h), and the
// runners name no command the table lacks.
TEST(CommandTableTest, EveryCoordinatorCommandHasARunner) {
  for (const CommandSpec& c : Commands()) {
    if (c.name == "completion") {
      EXPECT_EQ(CommandRunner(c.name), nullptr);
    } else {
      EXPECT_NE(CommandRunner(c.name), nullptr) << c.name;
    }
  }
  EXPECT_EQ(CommandRunner("sumbit"), nullptr);
}

// Issue 33: -o is only ever the output format; a file is -f/--file; --follow is never -f.
TEST(CommandTableTest, EveryCommandFollowsTheFlagConventions) {
  for (const CommandSpec& c : Commands()) {
    std::set<std::string> spellings;
    for (const FlagSpec& f : c.flags) {
      EXPECT_NE(f.name, "--output") << c.name << ": -o/--output is the global format";
      EXPECT_NE(f.short_name, "-o") << c.name;
      EXPECT_TRUE(spellings.insert(std::string(f.name)).second) << c.name << " " << f.name;
      if (!f.short_name.empty()) {
        EXPECT_TRUE(spellings.insert(std::string(f.short_name)).second) << c.name;
      }
      if (f.short_name == "-f") { EXPECT_EQ(f.name, "--file") << c.name; }
      if (f.name == "--file") { EXPECT_EQ(f.short_name, "-f") << c.name; }
      if (f.name == "-f") { EXPECT_FALSE(f.deprecated_for.empty()) << c.name; }
    }
    // Every command's parser takes every flag the table (and so --help and completion) names.
    if (CommandRunner(c.name) == nullptr || c.name == "plan") continue;
    for (const FlagSpec& f : c.flags) {
      for (absl::string_view spelling : {f.name, f.short_name}) {
        if (spelling.empty()) continue;
        Args args = ArgsFor(c);
        std::vector<std::string> argv = {std::string(spelling)};
        if (f.value != ValueKind::kNone) argv.push_back("v");
        absl::Status s = args.Parse(argv);
        EXPECT_TRUE(s.ok()) << c.name << " " << spelling << ": " << s;
        if (f.deprecated_for.empty()) { EXPECT_TRUE(args.Has(std::string(f.name))) << spelling; }
      }
    }
  }
  // The files: the same two spellings on trace, export, submit, run.
  for (const char* command : {"trace", "export", "submit", "run"}) {
    Args a = ArgsFor(command);
    ASSERT_TRUE(a.Parse({"-f", "x"}).ok()) << command;
    EXPECT_EQ(a.Get("--file"), "x") << command;
    Args b = ArgsFor(command);
    ASSERT_TRUE(b.Parse({"--file=y"}).ok()) << command;
    EXPECT_EQ(b.Get("--file"), "y") << command;
  }
}

TEST(CommandTableTest, LogsDashFStillFollowsWithAWarning) {
  Args args = ArgsFor("logs");
  ASSERT_TRUE(args.Parse({"job", "-f"}).ok());
  EXPECT_TRUE(args.Has("--follow"));
  ASSERT_EQ(args.warnings().size(), 1u);
  EXPECT_THAT(args.warnings()[0], HasSubstr("use --follow"));
}

TEST(CommandTableTest, SuggestsTheClosestName) {
  const std::vector<std::string> commands = {"submit", "status", "list", "cancel", "logs"};
  EXPECT_EQ(Suggest("sumbit", commands), "submit");
  EXPECT_EQ(Suggest("stauts", commands), "status");
  EXPECT_EQ(Suggest("lst", commands), "list");
  EXPECT_EQ(Suggest("frobnicate", commands), std::nullopt);
  EXPECT_EQ(Suggest("x", commands), std::nullopt);
  Args args = ArgsFor("logs");
  absl::Status s = args.Parse({"--folow"});
  EXPECT_THAT(s.message(), HasSubstr("unknown option '--folow'; did you mean '--follow'?"));
}

TEST(CommandTableTest, UsageListsEveryCommandAndFormats) {
  const std::string usage = TopUsage();
  for (const CommandSpec& c : Commands()) {
    EXPECT_THAT(usage, HasSubstr("\n  " + std::string(c.name)));
  }
  EXPECT_THAT(usage, HasSubstr("text (default), wide, json, yaml or name"));
  EXPECT_EQ(ParseOutputFormat("table"), OutputFormat::kTable);
  EXPECT_EQ(ParseOutputFormat("yaml"), OutputFormat::kYaml);
  EXPECT_EQ(ParseOutputFormat("json.out"), std::nullopt);
  EXPECT_FALSE(CommandPrints(*FindCommand("trace"), OutputFormat::kJson));
  EXPECT_TRUE(CommandPrints(*FindCommand("list"), OutputFormat::kName));
}

class OutputFormatTest : public ::testing::Test {
 protected:
  std::string Run(int (*command)(CliContext&, const std::vector<std::string>&),
                  const std::vector<std::string>& args, OutputFormat format) {
    std::ostringstream out, err;
    CliContext ctx(std::make_unique<Forwarder>(fake_), "fake:1", format, out, err, false);
    EXPECT_EQ(command(ctx, args), kExitOk) << err.str();
    return out.str();
  }
  std::string Submit(const std::string& id) {
    v1::JobSpec spec;
    spec.set_name("t");
    spec.mutable_parallel()->set_pipeline(2);
    spec.mutable_schedule()->set_kind("1f1b");
    spec.mutable_batch()->set_microbatches(4);
    spec.mutable_train()->set_iterations(3);
    EXPECT_TRUE(fake_.Submit(spec, id, false).ok());
    return id;
  }
  // The context owns its client: forward to the shared fake.
  class Forwarder : public Client {
   public:
    explicit Forwarder(FakeClient& f) : f_(f) {}
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

   private:
    FakeClient& f_;
  };
  FakeClient fake_;
};

// -o yaml is the -o json document, as YAML: the same keys and values, ids that look like numbers
// still strings.
TEST_F(OutputFormatTest, YamlIsTheJsonDocument) {
  Submit("123");
  const nlohmann::json json =
      nlohmann::json::parse(Run(RunStatusCommand, {"123"}, OutputFormat::kJson));
  const YAML::Node yaml = YAML::Load(Run(RunStatusCommand, {"123"}, OutputFormat::kYaml));
  ASSERT_TRUE(yaml.IsMap());
  EXPECT_EQ(yaml["id"].as<std::string>(), "123");
  EXPECT_EQ(yaml["id"].Tag(), "!");  // quoted: a string, not the number 123
  EXPECT_EQ(yaml["state"].as<std::string>(), json["state"]);
  EXPECT_EQ(yaml["spec"]["parallel"]["pipeline"].as<int>(), json["spec"]["parallel"]["pipeline"]);
  for (const auto& [key, value] : json.items()) EXPECT_TRUE(yaml[key]) << key;
  const YAML::Node list = YAML::Load(Run(RunListCommand, {}, OutputFormat::kYaml));
  ASSERT_EQ(list["jobs"].size(), 1u);
}

TEST_F(OutputFormatTest, NamePrintsOnlyIds) {
  Submit("a1");
  Submit("b2");
  EXPECT_EQ(Run(RunListCommand, {}, OutputFormat::kName), "a1\nb2\n");
  EXPECT_EQ(Run(RunStatusCommand, {"b2"}, OutputFormat::kName), "b2\n");
  EXPECT_EQ(Run(RunCancelCommand, {"a1"}, OutputFormat::kName), "a1\n");
  const std::string wide = Run(RunListCommand, {}, OutputFormat::kWide);
  EXPECT_THAT(wide, HasSubstr("REASON"));
  EXPECT_THAT(Run(RunListCommand, {}, OutputFormat::kTable), ::testing::Not(HasSubstr("REASON")));
}

}  // namespace
}  // namespace zpipe::cli
