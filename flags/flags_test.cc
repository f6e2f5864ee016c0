// The rules every ZeroPipe binary's flags follow (flags.h) and the shared values (values.h).
#include "flags/flags.h"

#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace zpipe::flags {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ValuesTest, DurationsAreGoSyntaxOrBareSeconds) {
  EXPECT_EQ(*ParseDuration("10s"), absl::Seconds(10));
  EXPECT_EQ(*ParseDuration("500ms"), absl::Milliseconds(500));
  EXPECT_EQ(*ParseDuration("1m30s"), absl::Seconds(90));
  EXPECT_EQ(*ParseDuration("1.5"), absl::Milliseconds(1500));
  EXPECT_EQ(*ParseDuration("7d"), absl::Hours(7 * 24));
  EXPECT_EQ(*ParseDuration("1d12h"), absl::Hours(36));
  EXPECT_FALSE(ParseDuration("d").ok());
  EXPECT_FALSE(ParseDuration("7days").ok());
  EXPECT_EQ(ParseDuration("soon").status().message(),
            "want a duration (e.g. 10s, 500ms), got 'soon'");
  EXPECT_EQ(PositiveDuration()("2s"), "");
  EXPECT_EQ(PositiveDuration()("0"), "want a duration above 0, got '0'");
  EXPECT_EQ(DurationIn(absl::Milliseconds(10), absl::Minutes(10))("1h"),
            "must be 10ms..10m, got '1h'");
}

TEST(ValuesTest, SizesAreBytesOrBinaryUnits) {
  EXPECT_EQ(*ParseSize("1024"), 1024);
  EXPECT_EQ(*ParseSize("16MiB"), 16 << 20);
  EXPECT_EQ(*ParseSize("2GiB"), int64_t{2} << 30);
  EXPECT_FALSE(ParseSize("0").ok());
  EXPECT_FALSE(ParseSize("-1KiB").ok());
  EXPECT_FALSE(ParseSize("16MB").ok());
  EXPECT_EQ(SizeAtMost(int64_t{1} << 30)("2GiB"),
            "want a positive size of at most 1GiB, got '2GiB'");
  EXPECT_EQ(SizeAtMost(100)("x"), "want a positive size (e.g. 16MiB), got 'x'");
  EXPECT_EQ(FormatSize(16 << 20), "16MiB");
  EXPECT_EQ(FormatSize(1000), "1000 bytes");
}

TEST(ValuesTest, IntegersAndChoicesSayWhatTheyWant) {
  EXPECT_EQ(IntegerIn(0)("3"), "");
  EXPECT_EQ(IntegerIn(0)("-1"), "want an integer >= 0, got '-1'");
  EXPECT_EQ(IntegerIn(1, 10)("11"), "want an integer in [1, 10], got '11'");
  EXPECT_EQ(OneOf("chrome svg")("png"), "want chrome or svg, got 'png'");
  EXPECT_EQ(Suggest("--folow", {"--follow", "--tail"}), "--follow");
  EXPECT_EQ(Suggest("frobnicate", {"submit"}), std::nullopt);
}

TEST(ValuesTest, TokenFileIsTheFirstLineThatIsNoComment) {
  const std::string path = ::testing::TempDir() + "/flags_test.token";
  { std::ofstream(path) << "# a comment\n\n  secret \nother\n"; }
  EXPECT_EQ(*ReadTokenFile(path), "secret");
  { std::ofstream(path) << "# only a comment\n"; }
  EXPECT_EQ(*ReadTokenFile(path), "");
  EXPECT_EQ(ReadTokenFile(path + ".missing").status().code(), absl::StatusCode::kNotFound);
}

struct Program {
  std::unique_ptr<CLI::App> app = NewApp("prog", "prog [flags] FILE", "does things");
  std::string name;
  absl::Duration timeout = absl::Seconds(10);
  int64_t bytes = 0;
  int count = 0;
  bool quiet = false;
  std::vector<std::string> roots;
  std::vector<std::string> positionals;

  Program() {
    AddList(*app, "--root", &roots, "DIR", "repeatable");
    AddText(*app, "-n,--name", &name, "NAME", "who");
    AddDuration(*app, "--timeout", &timeout, "how long (default 10s)");
    AddSize(*app, "--max-bytes", &bytes, int64_t{1} << 30, "how much");
    AddInteger(*app, "--count", &count, 0, 100, "how many");
    AddSwitch(*app, "--quiet", &quiet, "say less");
  }
  absl::Status Parse(const std::vector<std::string>& args) {
    return flags::Parse(*app, args, &positionals);
  }
};

TEST(ParseTest, TakesEverySpellingAndTheLastOfARepeatedFlag) {
  Program p;
  ASSERT_TRUE(p.Parse({"a", "--name=x", "--timeout", "500ms", "-ny", "--max-bytes", "16MiB",
                       "--count", "3", "--count=4", "--quiet", "b"})
                  .ok());
  EXPECT_EQ(p.name, "y");
  EXPECT_EQ(p.timeout, absl::Milliseconds(500));
  EXPECT_EQ(p.bytes, 16 << 20);
  EXPECT_EQ(p.count, 4);
  EXPECT_TRUE(p.quiet);
  EXPECT_THAT(p.positionals, ElementsAre("a", "b"));
}

TEST(ParseTest, ARepeatableFlagKeepsEveryValue) {
  Program p;
  ASSERT_TRUE(p.Parse({"--root", "/a", "x", "--root=/b"}).ok());
  EXPECT_THAT(p.roots, ElementsAre("/a", "/b"));
  EXPECT_THAT(p.positionals, ElementsAre("x"));
}

TEST(ParseTest, AnEmptyValueIsAValue) {
  Program p;
  p.name = "default";
  ASSERT_TRUE(p.Parse({"--name=", "--count", "2"}).ok());
  EXPECT_EQ(p.name, "");
  EXPECT_EQ(p.count, 2);
  Program q;
  q.name = "default";
  ASSERT_TRUE(q.Parse({"--name", ""}).ok());
  EXPECT_EQ(q.name, "");
}

TEST(ParseTest, AfterTwoDashesEverythingIsPositional) {
  Program p;
  ASSERT_TRUE(p.Parse({"--quiet", "--", "--name", "-x", "--name="}).ok());
  EXPECT_EQ(p.name, "");
  EXPECT_THAT(p.positionals, ElementsAre("--name", "-x", "--name="));
  EXPECT_FALSE(WantsHelp({"--", "--help"}));
  EXPECT_TRUE(WantsHelp({"x", "-h"}));
}

TEST(ParseTest, ErrorsNameTheFlagAndWhatItWants) {
  auto error = [](const std::vector<std::string>& args) {
    Program p;
    return std::string(p.Parse(args).message());
  };
  EXPECT_EQ(error({"--nmae", "x"}), "unknown option '--nmae'; did you mean '--name'?");
  EXPECT_EQ(error({"--bogus=1"}), "unknown option '--bogus'");
  EXPECT_EQ(error({"--count"}), "--count needs a value");
  EXPECT_EQ(error({"--quiet=yes"}), "--quiet takes no value");
  EXPECT_EQ(error({"--count", "-1"}), "--count: want an integer in [0, 100], got '-1'");
  EXPECT_EQ(error({"--timeout", "soon"}),
            "--timeout: want a duration (e.g. 10s, 500ms), got 'soon'");
  EXPECT_EQ(error({"--max-bytes", "2GiB"}),
            "--max-bytes: want a positive size of at most 1GiB, got '2GiB'");
  auto app = NewApp("prog", "prog");
  EXPECT_EQ(Parse(*app, {"extra"}).message(), "unexpected argument 'extra'");
}

TEST(ParseTest, MainPrintsHelpOrTheErrorWithTheUsage) {
  Program p;
  std::ostringstream out, err;
  EXPECT_EQ(ParseMain(*p.app, {"--help", "--bogus"}, out, err), 0);
  EXPECT_THAT(out.str(), ::testing::StartsWith("usage: prog [flags] FILE\ndoes things\n"));
  EXPECT_THAT(out.str(), HasSubstr("\n  -n, --name NAME     who\n"));
  EXPECT_THAT(out.str(), HasSubstr("\n  --timeout DURATION  how long (default 10s)\n"));
  EXPECT_EQ(err.str(), "");
  Program q;
  std::ostringstream out2, err2;
  EXPECT_EQ(ParseMain(*q.app, {"--timeout"}, out2, err2), 2);
  EXPECT_EQ(err2.str(),
            "prog: --timeout needs a value\nusage: prog [flags] FILE\n"
            "Run 'prog --help' for its flags.\n");
}

TEST(HelpTest, LongDescriptionsWrapBesideTheirFlag) {
  auto app = NewApp("prog", "prog");
  std::string x;
  AddText(*app, "--x", &x, "V", std::string(30, 'a') + " " + std::string(80, 'b') + "\nnext");
  app->add_option("--hidden", "not shown")->group("");
  const std::string help = Help(*app);
  EXPECT_THAT(help, HasSubstr("  --x V  " + std::string(30, 'a') + "\n         " +
                              std::string(80, 'b') + "\n         next\n"));
  EXPECT_THAT(help, ::testing::Not(HasSubstr("hidden")));
}

}  // namespace
}  // namespace zpipe::flags
