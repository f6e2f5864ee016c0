#include "client/command_spec.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "flags/flags.h"

namespace zpipe::cli {

namespace {

// A flag's --help text: its one-line help, then the rest ("; default ..." joins without a blank).
std::string Description(const FlagSpec& flag) {
  if (flag.more.empty()) return std::string(flag.help);
  const bool joins = absl::string_view(";,.:").find(flag.more.front()) != absl::string_view::npos;
  return absl::StrCat(flag.help, joins ? "" : " ", flag.more);
}

// `text` with every line that is not empty indented by two blanks.
std::string Indented(absl::string_view text) {
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    lines.push_back(line.empty() ? "" : absl::StrCat("  ", line));
  }
  return absl::StrJoin(lines, "\n");
}

}  // namespace

struct Args::State {
  std::unique_ptr<CLI::App> app;
  // Long name -> the CLI11 option of each of its spellings (the long one first). Every spelling
  // is an option of its own, so that a message can name the one the user typed.
  std::map<std::string, std::vector<const CLI::Option*>> spellings;
  struct Deprecated {
    const CLI::Option* option;
    std::string spelling;     // "-f"
    std::string replacement;  // "--follow (-f means --file on every command)"
  };
  std::vector<Deprecated> deprecated;
  std::vector<std::string> positionals;
  std::vector<std::string> warnings;
  bool help = false;

  std::string group;  // of the shown spellings

  CLI::Option* Add(const std::string& spelling, const FlagSpec& flag,
                   const std::string& description) {
    CLI::Option* option = flag.value == ValueKind::kNone
                              ? app->add_flag(spelling, description)
                              : app->add_option(spelling, description)->type_name(ValueName(flag));
    return option->group(group);
  }

  void AddFlag(const FlagSpec& flag) {
    const std::string name(flag.name);
    if (!flag.deprecated_for.empty()) {
      // Answers under the first word of its replacement; hidden from --help.
      const std::string replacement(flag.deprecated_for);
      const std::string target = replacement.substr(0, replacement.find(' '));
      const CLI::Option* option = Add(name, flag, "")->group("");
      spellings[target].push_back(option);
      deprecated.push_back({option, name, replacement});
      return;
    }
    CLI::Option* option = Add(name, flag, Description(flag));
    spellings[name].insert(spellings[name].begin(), option);
    if (flag.short_name.empty()) return;
    // The short spelling is listed with the long one: "-f, --file FILE".
    option->option_text(absl::StrCat(flag.short_name, ", ", name,
                                     flag.value == ValueKind::kNone ? "" : " ", ValueName(flag)));
    spellings[name].push_back(Add(std::string(flag.short_name), flag, "")->group(""));
  }

  // The option of `name`'s spellings given last; nullptr when none was given.
  const CLI::Option* Last(const std::string& name) const {
    auto it = spellings.find(name);
    if (it == spellings.end()) return nullptr;
    const std::vector<CLI::Option*>& order = app->parse_order();
    for (auto o = order.rbegin(); o != order.rend(); ++o) {
      for (const CLI::Option* spelling : it->second) {
        if (*o == spelling) return spelling;
      }
    }
    return nullptr;
  }
};

Args::Args() : Args(CommandSpec{}) {}

Args::Args(const CommandSpec& command, absl::string_view group)
    : state_(std::make_unique<State>()) {
  const std::string name = command.name.empty() ? "zpipe" : absl::StrCat("zpipe ", command.name);
  const std::string usage =
      absl::StrCat("zpipe ", command.synopsis.empty() ? command.name : command.synopsis);
  state_->app = flags::NewApp(name, usage, Indented(command.description));
  state_->app->footer(Indented(command.notes));
  state_->group = std::string(group);
  for (const FlagSpec& flag : command.flags) state_->AddFlag(flag);
}

Args::Args(Args&&) noexcept = default;
Args& Args::operator=(Args&&) noexcept = default;
Args::~Args() = default;

absl::Status Args::Parse(const std::vector<std::string>& args) {
  if (flags::WantsHelp(args)) {
    state_->help = true;
    return absl::OkStatus();
  }
  if (absl::Status s = flags::Parse(*state_->app, args, &state_->positionals); !s.ok()) return s;
  for (const State::Deprecated& d : state_->deprecated) {
    if (d.option->count() == 0) continue;
    state_->warnings.push_back(absl::StrCat(
        d.spelling, " is deprecated and goes away in the next release: use ", d.replacement));
  }
  return absl::OkStatus();
}

absl::Status Args::Extract(const std::vector<std::string>& args, bool leading_only,
                           std::vector<std::string>* rest) {
  return flags::ParseKnown(*state_->app, args, leading_only, rest);
}

const std::vector<std::string>& Args::warnings() const { return state_->warnings; }
bool Args::help() const { return state_->help; }
bool Args::Has(const std::string& name) const { return state_->Last(name) != nullptr; }

std::string Args::Get(const std::string& name, const std::string& fallback) const {
  const CLI::Option* option = state_->Last(name);
  if (option == nullptr) return fallback;
  if (option->get_type_size() == 0) return "true";  // a switch
  return option->results().empty() ? fallback : option->results().back();
}

std::vector<std::string> Args::GetAll(const std::string& name) const {
  std::vector<std::string> out;
  auto it = state_->spellings.find(name);
  if (it == state_->spellings.end()) return out;
  for (const CLI::Option* option : it->second) {
    if (option->get_type_size() == 0) continue;  // a switch
    out.insert(out.end(), option->results().begin(), option->results().end());
  }
  return out;
}

std::string Args::Spelling(const std::string& name) const {
  const CLI::Option* option = state_->Last(name);
  if (option == nullptr) return name;
  return option->get_lnames().empty() ? "-" + option->get_snames().front()
                                      : "--" + option->get_lnames().front();
}

absl::StatusOr<int64_t> Args::Integer(const std::string& name, int64_t min, int64_t max) const {
  const std::string value = Get(name);
  if (std::string problem = flags::IntegerIn(min, max)(value); !problem.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(Spelling(name), ": ", problem));
  }
  return flags::IntegerValue(value);
}

const std::vector<std::string>& Args::positionals() const { return state_->positionals; }
std::string Args::Help() const { return flags::Help(*state_->app); }
std::string Args::UsageLine() const { return flags::UsageLine(*state_->app); }
std::string Args::OptionsHelp() const { return flags::OptionsHelp(*state_->app); }

std::string FlagsHelp(const std::vector<FlagSpec>& flags, absl::string_view group) {
  return Args(CommandSpec{.flags = flags}, group).OptionsHelp();
}

std::string ValueName(const FlagSpec& flag) {
  if (!flag.value_name.empty()) return std::string(flag.value_name);
  switch (flag.value) {
    case ValueKind::kFile:
    case ValueKind::kJobFile:
      return "FILE";
    case ValueKind::kDir:
      return "DIR";
    case ValueKind::kJobId:
      return "ID";
    case ValueKind::kContext:
      return "NAME";
    case ValueKind::kChoice:
      return absl::StrReplaceAll(flag.choices, {{" ", "|"}});
    case ValueKind::kText:
      return "VALUE";
    case ValueKind::kNone:
      break;
  }
  return "";
}

}  // namespace zpipe::cli
