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

Json ContextJson(const ConfigContext& c, bool current) {
  return Json{{"name", c.name},
              {"current", current},
              {"coordinator", c.coordinator},
              {"token_file", c.token_file},
              {"tls_ca", c.tls_ca},
              {"tls_cert", c.tls_cert},
              {"tls_key", c.tls_key}};
}

int GetContexts(CliContext& ctx, const CliConfig& config, const std::string& path) {
  if (ctx.json()) {
    Json list = Json::array();
    for (const ConfigContext& c : config.contexts)
      list.push_back(ContextJson(c, c.name == config.current_context));
    PrintDocument(ctx, Json{{"file", path},
                            {"current_context", config.current_context},
                            {"contexts", std::move(list)}});
  } else if (ctx.names()) {
    for (const ConfigContext& c : config.contexts) ctx.out() << c.name << "\n";
  } else {
    Table t({"CURRENT", "NAME", "COORDINATOR", "TOKEN-FILE", "TLS-CA"});
    auto or_dash = [](const std::string& s) { return s.empty() ? std::string("-") : s; };
    for (const ConfigContext& c : config.contexts) {
      t.Add({c.name == config.current_context ? "*" : "", c.name, or_dash(c.coordinator),
             or_dash(c.token_file), or_dash(c.tls_ca)});
    }
    t.Print(ctx.out());
  }
  return kExitOk;
}

int CurrentContext(CliContext& ctx, const CliConfig& config, const std::string& path) {
  if (config.current_context.empty()) {
    return ctx.Fail("config",
                    absl::NotFoundError(absl::StrCat("no current context in ", path,
                                                     "; zpipe config use-context NAME sets one")));
  }
  ctx.out() << config.current_context << "\n";
  return kExitOk;
}

int UseContext(CliContext& ctx, CliConfig& config, const std::string& path,
               const std::string& name) {
  if (config.Find(name) == nullptr) {
    return ctx.Fail("config", absl::NotFoundError(absl::StrCat("no context '", name, "' in ", path,
                                                               "; zpipe config set-context ", name,
                                                               " --coordinator ADDR "
                                                               "makes it")));
  }
  config.current_context = name;
  if (absl::Status s = SaveCliConfig(path, config); !s.ok()) return ctx.Fail("config", s);
  ctx.err() << "switched to context \"" << name << "\"\n";
  return kExitOk;
}

int SetContext(CliContext& ctx, const Args& args, CliConfig& config, const std::string& path,
               const std::string& name) {
  ConfigContext* c = nullptr;
  for (ConfigContext& existing : config.contexts) {
    if (existing.name == name) c = &existing;
  }
  const bool created = c == nullptr;
  if (created) {
    config.contexts.push_back({.name = name});
    c = &config.contexts.back();
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
  if (config.current_context.empty()) config.current_context = c->name;
  if (absl::Status s = SaveCliConfig(path, config); !s.ok()) return ctx.Fail("config", s);
  ctx.err() << "context \"" << name << "\" " << (created ? "created" : "modified") << " in " << path
            << "\n";
  return kExitOk;
}

}  // namespace

int RunConfigCommand(CliContext& ctx, const std::vector<std::string>& argv) {
  Args args = ArgsFor("config");
  if (std::optional<int> exit = ParseCommandArgs(ctx, "config", args, argv)) return *exit;
  const std::vector<std::string>& pos = args.positionals();
  if (pos.empty()) return ctx.Usage("config", "expected a subcommand");
  const std::string& sub = pos[0];
  const std::string path = ConfigPath(ProcessEnv());
  absl::StatusOr<CliConfig> config = LoadCliConfig(path);
  if (!config.ok()) return ctx.Fail("config", config.status());
  const bool wants_name = sub == "use-context" || sub == "set-context";
  if (pos.size() != (wants_name ? 2u : 1u)) {
    return ctx.Usage("config",
                     wants_name ? sub + " takes one context name" : sub + " takes no arguments");
  }
  if (sub != "set-context") {
    // Every flag of `config` is set-context's.
    for (const FlagSpec& flag : FindCommand("config")->flags) {
      if (args.Has(std::string(flag.name))) {
        return ctx.Usage("config", absl::StrCat(flag.name, " is for set-context"));
      }
    }
  }
  if (sub == "get-contexts") return GetContexts(ctx, *config, path);
  if (sub == "current-context") return CurrentContext(ctx, *config, path);
  if (sub == "use-context") return UseContext(ctx, *config, path, pos[1]);
  if (sub == "set-context") return SetContext(ctx, args, *config, path, pos[1]);
  return ctx.Usage("config", absl::StrCat("unknown subcommand '", sub, "'"));
}

}  // namespace zpipe::cli
