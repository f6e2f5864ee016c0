// `zpipe config get-contexts | current-context | use-context NAME | set-context NAME [...]`: the
// contexts of the config file (cli_config.h).
#include <filesystem>
#include <ostream>

#include "absl/strings/str_cat.h"
#include "client/cli.h"
#include "client/cli_config.h"
#include "client/command_table.h"
#include "client/json_output.h"

namespace zpipe::cli {
namespace {

constexpr char kUsage[] =
    "usage: zpipe config get-contexts          list the contexts (* = the current one)\n"
    "       zpipe config current-context       print the current context's name\n"
    "       zpipe config use-context NAME      make NAME the current context\n"
    "       zpipe config set-context NAME [--coordinator ADDR] [--token-file FILE]\n"
    "                                [--tls-ca FILE] [--tls-cert FILE --tls-key FILE]\n"
    "                                          make or change context NAME (\"\" clears a key)\n"
    "  The file is $XDG_CONFIG_HOME/zeropipe/config.yaml (default ~/.config/zeropipe/).\n"
    "  zpipe --context NAME uses NAME for one command ($ZPIPE_CONTEXT too). Flags beat the\n"
    "  ZPIPE_* environment, which beats the context, which beats the defaults.\n";

Json ContextJson(const ConfigContext& c, bool current) {
  return Json{{"name", c.name},
              {"current", current},
              {"coordinator", c.coordinator},
              {"token_file", c.token_file},
              {"tls_ca", c.tls_ca},
              {"tls_cert", c.tls_cert},
              {"tls_key", c.tls_key}};
}

}  // namespace

int RunConfigCommand(CliContext& ctx, const std::vector<std::string>& argv) {
  Args args = ArgsFor("config");
  if (std::optional<int> exit = ParseCommandArgs(ctx, "config", args, argv, kUsage)) return *exit;
  const std::vector<std::string>& pos = args.positionals();
  if (pos.empty()) return ctx.Usage("config", "expected a subcommand", kUsage);
  const std::string& sub = pos[0];
  const std::string path = ConfigPath(ProcessEnv());
  absl::StatusOr<CliConfig> config = LoadCliConfig(path);
  if (!config.ok()) return ctx.Fail("config", config.status());
  const bool wants_name = sub == "use-context" || sub == "set-context";
  if (pos.size() != (wants_name ? 2u : 1u)) {
    return ctx.Usage("config",
                     wants_name ? sub + " takes one context name" : sub + " takes no arguments",
                     kUsage);
  }
  if (sub != "set-context") {
    for (const char* flag :
         {"--coordinator", "--token-file", "--tls-ca", "--tls-cert", "--tls-key"}) {
      if (args.Has(flag)) {
        return ctx.Usage("config", absl::StrCat(flag, " is for set-context"), kUsage);
      }
    }
  }
  if (sub == "get-contexts") {
    if (ctx.json()) {
      Json list = Json::array();
      for (const ConfigContext& c : config->contexts)
        list.push_back(ContextJson(c, c.name == config->current_context));
      PrintDocument(ctx, Json{{"file", path},
                              {"current_context", config->current_context},
                              {"contexts", std::move(list)}});
    } else if (ctx.names()) {
      for (const ConfigContext& c : config->contexts) ctx.out() << c.name << "\n";
    } else {
      Table t({"CURRENT", "NAME", "COORDINATOR", "TOKEN-FILE", "TLS-CA"});
      auto or_dash = [](const std::string& s) { return s.empty() ? std::string("-") : s; };
      for (const ConfigContext& c : config->contexts) {
        t.Add({c.name == config->current_context ? "*" : "", c.name, or_dash(c.coordinator),
               or_dash(c.token_file), or_dash(c.tls_ca)});
      }
      t.Print(ctx.out());
    }
    return kExitOk;
  }
  if (sub == "current-context") {
    if (config->current_context.empty()) {
      return ctx.Fail("config", absl::NotFoundError(absl::StrCat(
                                    "no current context in ", path,
                                    "; zpipe config use-context NAME sets one")));
    }
    ctx.out() << config->current_context << "\n";
    return kExitOk;
  }
  if (sub == "use-context") {
    if (config->Find(pos[1]) == nullptr) {
      return ctx.Fail("config", absl::NotFoundError(absl::StrCat(
                                    "no context '", pos[1], "' in ", path,
                                    "; zpipe config set-context ", pos[1], " --coordinator ADDR "
                                    "makes it")));
    }
    config->current_context = pos[1];
    if (absl::Status s = SaveCliConfig(path, *config); !s.ok()) return ctx.Fail("config", s);
    ctx.err() << "switched to context \"" << pos[1] << "\"\n";
    return kExitOk;
  }
  if (sub == "set-context") {
    ConfigContext* c = nullptr;
    for (ConfigContext& existing : config->contexts) {
      if (existing.name == pos[1]) c = &existing;
    }
    const bool created = c == nullptr;
    if (created) {
      config->contexts.push_back({.name = pos[1]});
      c = &config->contexts.back();
    }
    auto set = [&](const char* flag, std::string& field, bool is_file) {
      if (!args.Has(flag)) return;
      field = args.Get(flag);
      // A relative file is made absolute: the context is used from any folder.
      if (is_file && !field.empty() && field[0] != '/' && field.rfind("~/", 0) != 0) {
        field = std::filesystem::absolute(field).lexically_normal().string();
      }
    };
    set("--coordinator", c->coordinator, false);
    set("--token-file", c->token_file, true);
    set("--tls-ca", c->tls_ca, true);
    set("--tls-cert", c->tls_cert, true);
    set("--tls-key", c->tls_key, true);
    if (config->current_context.empty()) config->current_context = c->name;
    if (absl::Status s = SaveCliConfig(path, *config); !s.ok()) return ctx.Fail("config", s);
    ctx.err() << "context \"" << pos[1] << "\" " << (created ? "created" : "modified") << " in "
              << path << "\n";
    return kExitOk;
  }
  return ctx.Usage("config", absl::StrCat("unknown subcommand '", sub, "'"), kUsage);
}

}  // namespace zpipe::cli
