#include "client/cli_config.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "yaml-cpp/yaml.h"

namespace zpipe::cli {
namespace {

namespace fs = std::filesystem;

// The keys of a context besides name, and where each goes.
struct Key {
  const char* name;
  std::string ConfigContext::* field;
};
constexpr Key kKeys[] = {{"coordinator", &ConfigContext::coordinator},
                         {"token-file", &ConfigContext::token_file},
                         {"tls-ca", &ConfigContext::tls_ca},
                         {"tls-cert", &ConfigContext::tls_cert},
                         {"tls-key", &ConfigContext::tls_key}};

std::string ExpandHome(const std::string& path, const GetEnv& env) {
  if (path.rfind("~/", 0) != 0) return path;
  const char* home = env("HOME");
  return home == nullptr ? path : absl::StrCat(home, path.substr(1));
}

absl::Status Invalid(const std::string& path, const YAML::Node& node, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ":", node.Mark().line + 1, ": ", what));
}

}  // namespace

const ConfigContext* CliConfig::Find(const std::string& name) const {
  for (const ConfigContext& c : contexts) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

GetEnv ProcessEnv() {
  return [](const char* name) { return std::getenv(name); };
}

std::string ConfigPath(const GetEnv& env) {
  const char* xdg = env("XDG_CONFIG_HOME");
  if (xdg != nullptr && *xdg != '\0') return absl::StrCat(xdg, "/zeropipe/config.yaml");
  const char* home = env("HOME");
  return absl::StrCat(home == nullptr ? "" : home, "/.config/zeropipe/config.yaml");
}

absl::StatusOr<CliConfig> LoadCliConfig(const std::string& path) {
  CliConfig config;
  std::error_code ec;
  if (!fs::exists(path, ec)) return config;
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ":", e.mark.line + 1, ": not YAML: ", e.msg));
  }
  if (root.IsNull()) return config;
  if (!root.IsMap()) return Invalid(path, root, "expected a map with current-context and contexts");
  try {
    for (const auto& entry : root) {
      const std::string key = entry.first.as<std::string>();
      if (key == "current-context") {
        if (!entry.second.IsNull()) config.current_context = entry.second.as<std::string>();
      } else if (key == "contexts") {
        if (entry.second.IsNull()) continue;
        if (!entry.second.IsSequence()) {
          return Invalid(path, entry.second, "contexts: expected a list of contexts");
        }
        for (const YAML::Node& node : entry.second) {
          if (!node.IsMap() || !node["name"] || node["name"].as<std::string>().empty()) {
            return Invalid(path, node, "a context needs a name");
          }
          ConfigContext c;
          for (const auto& field : node) {
            const std::string name = field.first.as<std::string>();
            if (name == "name") {
              c.name = field.second.as<std::string>();
              continue;
            }
            bool known = false;
            for (const Key& k : kKeys) {
              if (name != k.name) continue;
              known = true;
              if (!field.second.IsNull()) c.*k.field = field.second.as<std::string>();
            }
            if (!known) {
              return Invalid(path, field.first,
                             absl::StrCat("unknown key '", name,
                                          "' (a context has name, coordinator, token-file, "
                                          "tls-ca, tls-cert, tls-key)"));
            }
          }
          if (config.Find(c.name) != nullptr) {
            return Invalid(path, node, absl::StrCat("context '", c.name, "' is defined twice"));
          }
          config.contexts.push_back(std::move(c));
        }
      } else {
        return Invalid(
            path, entry.first,
            absl::StrCat("unknown key '", key, "' (expected current-context, contexts)"));
      }
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ":", e.mark.line + 1, ": ", e.msg));
  }
  return config;
}

absl::Status SaveCliConfig(const std::string& path, const CliConfig& config) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "current-context" << YAML::Value << config.current_context;
  out << YAML::Key << "contexts" << YAML::Value << YAML::BeginSeq;
  for (const ConfigContext& c : config.contexts) {
    out << YAML::BeginMap << YAML::Key << "name" << YAML::Value << c.name;
    for (const Key& k : kKeys) {
      if (!(c.*k.field).empty()) out << YAML::Key << k.name << YAML::Value << c.*k.field;
    }
    out << YAML::EndMap;
  }
  out << YAML::EndSeq << YAML::EndMap;
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  std::ofstream file(path, std::ios::trunc);
  file << "# zpipe contexts (zpipe config --help); rewritten whole by zpipe config.\n"
       << out.c_str() << "\n";
  file.close();
  if (!file) return absl::InvalidArgumentError(absl::StrCat("cannot write '", path, "'"));
  return absl::OkStatus();
}

absl::StatusOr<Connection> ResolveConnection(const ConnectionFlags& flags, const GetEnv& env,
                                             const CliConfig& config,
                                             const std::string& config_path) {
  auto from_env = [&](const char* name) -> std::optional<std::string> {
    const char* value = env(name);
    if (value == nullptr || *value == '\0') return std::nullopt;
    return std::string(value);
  };
  Connection c;
  std::string context_source;
  if (flags.context.has_value()) {
    c.context = *flags.context;
    context_source = "--context";
  } else if (std::optional<std::string> v = from_env(kContextEnv)) {
    c.context = *v;
    context_source = kContextEnv;
  } else {
    c.context = config.current_context;
    context_source = "current-context";
  }
  const ConfigContext* context = nullptr;
  if (!c.context.empty()) {
    context = config.Find(c.context);
    if (context == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(context_source, ": no context '", c.context, "' in ", config_path,
                       "; zpipe config get-contexts lists them, zpipe config set-context "
                       "makes one"));
    }
  }
  // flag > environment > context > default.
  auto resolve = [&](const std::optional<std::string>& flag, const char* flag_name,
                     const char* env_name, std::string ConfigContext::* field, const char* key,
                     bool is_file) -> Setting {
    if (flag.has_value()) return {*flag, flag_name};
    if (env_name != nullptr) {
      if (std::optional<std::string> v = from_env(env_name)) return {*v, env_name};
    }
    if (context != nullptr && !(context->*field).empty()) {
      const std::string value = context->*field;
      return {is_file ? ExpandHome(value, env) : value,
              absl::StrCat("context '", context->name, "' (", config_path, ") ", key)};
    }
    return {"", "default"};
  };
  c.coordinator = resolve(flags.coordinator, "--coordinator", "ZPIPE_COORDINATOR",
                          &ConfigContext::coordinator, "coordinator", false);
  if (c.coordinator.value.empty()) c.coordinator = {"localhost:50051", "default"};
  // The token: --token-file, else $ZPIPE_TOKEN (the token itself), else the context's file.
  if (flags.token_file.has_value()) {
    c.token_file = {*flags.token_file, "--token-file"};
  } else if (std::optional<std::string> v = from_env("ZPIPE_TOKEN")) {
    c.token = {*v, "ZPIPE_TOKEN"};
  } else {
    c.token_file =
        resolve(std::nullopt, "", nullptr, &ConfigContext::token_file, "token-file", true);
  }
  c.tls_ca = resolve(flags.tls_ca, "--tls-ca", "ZPIPE_TLS_CA", &ConfigContext::tls_ca, "tls-ca",
                     true);
  c.tls_cert = resolve(flags.tls_cert, "--tls-cert", "ZPIPE_TLS_CERT", &ConfigContext::tls_cert,
                       "tls-cert", true);
  c.tls_key = resolve(flags.tls_key, "--tls-key", "ZPIPE_TLS_KEY", &ConfigContext::tls_key,
                      "tls-key", true);
  return c;
}

}  // namespace zpipe::cli
