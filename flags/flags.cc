#include "flags/flags.h"

#include <algorithm>
#include <ostream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace zpipe::flags {
namespace {

constexpr size_t kHelpWidth = 100;     // --help lines are wrapped to this many columns
constexpr size_t kMaxNameColumn = 32;  // a longer flag name pushes its description aside

// "-f, --file FILE": every spelling of `opt`, then its value's name (or the label it was given:
// an option whose other spellings are options of their own names them all there).
std::string OptionLabel(const CLI::Option& opt) {
  if (!opt.get_option_text().empty()) return opt.get_option_text();
  std::vector<std::string> names;
  for (const std::string& s : opt.get_snames()) names.push_back("-" + s);
  for (const std::string& l : opt.get_lnames()) names.push_back("--" + l);
  std::string label = absl::StrJoin(names, ", ");
  if (opt.get_type_size() != 0 && !opt.get_type_name().empty()) {
    absl::StrAppend(&label, " ", opt.get_type_name());
  }
  return label;
}

// `text` as lines of at most `width` columns (the first `first_width`), keeping its own line
// breaks; a line that fits is kept as written (its alignment too), a word longer than a line gets
// a line of its own.
std::vector<std::string> Wrap(absl::string_view text, size_t first_width, size_t width) {
  std::vector<std::string> lines;
  for (absl::string_view paragraph : absl::StrSplit(text, '\n')) {
    if (paragraph.size() <= (lines.empty() ? first_width : width)) {
      lines.emplace_back(paragraph);
      continue;
    }
    std::string line;
    for (absl::string_view word : absl::StrSplit(paragraph, ' ', absl::SkipEmpty())) {
      const size_t limit = lines.empty() ? first_width : width;
      if (!line.empty() && line.size() + 1 + word.size() > limit) {
        lines.push_back(std::move(line));
        line.clear();
      }
      absl::StrAppend(&line, line.empty() ? "" : " ", word);
    }
    lines.push_back(std::move(line));
  }
  return lines;
}

// One flag's entry: its label, then its description beside it from `column` on.
std::string OptionEntry(const CLI::Option& opt, size_t column) {
  const std::string label = "  " + OptionLabel(opt);
  std::string out = label;
  const size_t start = std::max(column, label.size() + 2);
  out.append(start - label.size(), ' ');
  const std::vector<std::string> lines = Wrap(
      opt.get_description(), kHelpWidth - std::min(start, kHelpWidth - 20), kHelpWidth - column);
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out.append("\n").append(column, ' ');
    out += lines[i];
  }
  // No trailing blanks when the description is empty.
  out.erase(out.find_last_not_of(' ') + 1);
  return out + "\n";
}

// The shown options of `app` in `group`, in definition order.
std::vector<const CLI::Option*> GroupOptions(const CLI::App& app, const std::string& group) {
  return app.get_options([&group](const CLI::Option* opt) {
    return opt->get_group() == group && opt->nonpositional();
  });
}

// CLI11's ArgumentMismatch messages, said as the flag's problem: "--rank needs a value",
// "--wait takes no value".
std::string ExplainMismatch(const std::string& message) {
  if (const size_t at = message.find(" was given a disallowed flag override");
      at != std::string::npos) {
    std::string name = message.substr(0, at);
    if (!absl::StartsWith(name, "-")) name = (name.size() == 1 ? "-" : "--") + name;
    return name + " takes no value";
  }
  if (const size_t colon = message.find(": "); colon != std::string::npos &&
                                               absl::StrContains(message, " required") &&
                                               absl::StrContains(message, "missing")) {
    return message.substr(0, colon) + " needs a value";
  }
  return message;
}

// "unknown option '--folow'; did you mean '--follow'?" among `app`'s shown spellings.
std::string UnknownOption(const CLI::App& app, const std::string& arg) {
  const std::string name = arg.substr(0, arg.find('='));
  std::vector<std::string> known;
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->get_group().empty()) continue;  // hidden (deprecated spellings)
    for (const std::string& s : opt->get_snames()) known.push_back("-" + s);
    for (const std::string& l : opt->get_lnames()) known.push_back("--" + l);
  }
  const std::optional<std::string> near = Suggest(name, known);
  return absl::StrCat("unknown option '", name, "'",
                      near ? absl::StrCat("; did you mean '", *near, "'?") : "");
}

// `args` in the reversed order CLI11 consumes them, an empty "--name=" split into "--name" and
// "" (CLI11 would otherwise take the next argument as its value).
std::vector<std::string> ForCli11(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  bool only_positionals = false;
  for (const std::string& a : args) {
    if (a == "--") only_positionals = true;
    if (!only_positionals && a.size() > 3 && absl::StartsWith(a, "--") && a.back() == '=') {
      out.push_back(a.substr(0, a.size() - 1));
      out.emplace_back();
      continue;
    }
    out.push_back(a);
  }
  std::reverse(out.begin(), out.end());
  return out;
}

}  // namespace

std::string HelpFormatter::UsageLine() const { return absl::StrCat("usage: ", usage_, "\n"); }

std::string HelpFormatter::make_help(const CLI::App* app, std::string /*name*/,
                                     CLI::AppFormatMode /*mode*/) const {
  std::string out = UsageLine();
  if (!app->get_description().empty()) absl::StrAppend(&out, app->get_description(), "\n");
  out += OptionsHelp(*app);
  if (!app->get_footer().empty()) absl::StrAppend(&out, "\n", app->get_footer(), "\n");
  return out;
}

std::string OptionsHelp(const CLI::App& app) {
  size_t column = 0;
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->get_group().empty()) continue;
    column = std::max(column, OptionLabel(*opt).size() + 4);
  }
  column = std::min(column, kMaxNameColumn);
  std::string out;
  for (const std::string& group : app.get_groups()) {
    const std::vector<const CLI::Option*> options = GroupOptions(app, group);
    if (group.empty() || options.empty()) continue;
    absl::StrAppend(&out, "\n", group, ":\n");
    for (const CLI::Option* opt : options) out += OptionEntry(*opt, column);
  }
  return out;
}

std::unique_ptr<CLI::App> NewApp(const std::string& name, const std::string& usage,
                                 const std::string& description) {
  auto app = std::make_unique<CLI::App>(description, name);
  // --help is answered before the parse (WantsHelp), so that it wins over a bad flag after it.
  app->set_help_flag();
  app->formatter(std::make_shared<HelpFormatter>(usage));
  app->allow_extras();  // unknown options and positionals come back to Parse, in order
  app->option_defaults()
      ->group("flags")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
      ->disable_flag_override();
  return app;
}

std::string Help(const CLI::App& app) { return app.help(); }

std::string UsageLine(const CLI::App& app) {
  const auto* formatter = dynamic_cast<const HelpFormatter*>(app.get_formatter().get());
  return formatter != nullptr ? formatter->UsageLine() : absl::StrCat("usage: ", app.get_name());
}

absl::Status ParseKnown(CLI::App& app, const std::vector<std::string>& args, bool leading_only,
                        std::vector<std::string>* rest) {
  app.prefix_command(leading_only);
  std::vector<std::string> reversed = ForCli11(args);
  try {
    app.parse(reversed);
  } catch (const CLI::ArgumentMismatch& e) {
    return absl::InvalidArgumentError(ExplainMismatch(e.what()));
  } catch (const CLI::ParseError& e) {
    return absl::InvalidArgumentError(e.what());
  }
  *rest = app.remaining();
  return absl::OkStatus();
}

absl::Status Parse(CLI::App& app, const std::vector<std::string>& args,
                   std::vector<std::string>* positionals) {
  std::vector<std::string> rest;
  if (absl::Status s = ParseKnown(app, args, /*leading_only=*/false, &rest); !s.ok()) return s;
  // What CLI11 did not take, in order: positionals, unknown options, and "--" before the rest.
  bool only_positionals = false;
  for (const std::string& a : rest) {
    if (!only_positionals && a == "--") {
      only_positionals = true;
      continue;
    }
    if (!only_positionals && a.size() > 1 && a[0] == '-') {
      return absl::InvalidArgumentError(UnknownOption(app, a));
    }
    if (positionals == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", a, "'"));
    }
    positionals->push_back(a);
  }
  return absl::OkStatus();
}

std::optional<int> ParseMain(CLI::App& app, const std::vector<std::string>& args, std::ostream& out,
                             std::ostream& err, std::vector<std::string>* positionals) {
  if (WantsHelp(args)) {
    out << Help(app);
    return 0;
  }
  if (absl::Status s = Parse(app, args, positionals); !s.ok()) {
    err << app.get_name() << ": " << s.message() << "\n"
        << UsageLine(app) << "Run '" << app.get_name() << " --help' for its flags.\n";
    return 2;
  }
  return std::nullopt;
}

std::vector<std::string> Args(int argc, char** argv) {
  return argc > 1 ? std::vector<std::string>(argv + 1, argv + argc) : std::vector<std::string>();
}

CLI::Option* AddChecked(CLI::App& app, const std::string& name, const std::string& value_name,
                        const std::string& description, Check check,
                        std::function<void(const std::string&)> set) {
  return app.add_option(name, description)
      ->type_name(value_name)
      ->check(std::move(check))
      ->each([set = std::move(set)](const std::string& v) { set(v); });
}

CLI::Option* AddDuration(CLI::App& app, const std::string& name, absl::Duration* out,
                         const std::string& description, absl::Duration min, absl::Duration max) {
  Check check = min == absl::Nanoseconds(1) && max == absl::InfiniteDuration()
                    ? PositiveDuration()
                    : DurationIn(min, max);
  return AddChecked(app, name, "DURATION", description, std::move(check),
                    [out](const std::string& v) { *out = *ParseDuration(v); });
}

CLI::Option* AddNumber(CLI::App& app, const std::string& name, double* out,
                       const std::string& description) {
  return AddChecked(app, name, "X", description, Number(),
                    [out](const std::string& v) { *out = NumberValue(v); });
}

CLI::Option* AddValue(CLI::App& app, const std::string& name, const std::string& value_name,
                      const std::string& description, std::function<void(const std::string&)> set) {
  return app.add_option(name, description)
      ->type_name(value_name)
      ->each([set = std::move(set)](const std::string& v) { set(v); });
}

CLI::Option* AddText(CLI::App& app, const std::string& name, std::string* out,
                     const std::string& value_name, const std::string& description) {
  return AddValue(app, name, value_name, description, [out](const std::string& v) { *out = v; });
}

CLI::Option* AddList(CLI::App& app, const std::string& name, std::vector<std::string>* out,
                     const std::string& value_name, const std::string& description) {
  return AddValue(app, name, value_name, description,
                  [out](const std::string& v) { out->push_back(v); })
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

CLI::Option* AddSwitch(CLI::App& app, const std::string& name, bool* out,
                       const std::string& description) {
  return app.add_flag(name, *out, description);
}

}  // namespace zpipe::flags
