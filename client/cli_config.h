// zpipe's config file of named contexts, and how a connection setting is resolved from flags,
// environment, context and defaults. The Python client (python/zeropipe/config.py) reads the same
// file with the same rules.
//
// The file is $XDG_CONFIG_HOME/zeropipe/config.yaml (~/.config/zeropipe/config.yaml without
// XDG_CONFIG_HOME):
//   current-context: prod
//   contexts:
//     - name: prod
//       coordinator: coord.example.com:50051
//       token-file: ~/.config/zeropipe/prod.token
//       tls-ca: /etc/zeropipe/ca.pem
//       tls-cert: ...            # with tls-key: a client certificate
//       tls-key: ...
// Every key but name is optional. File paths may start with ~/ (the home folder).
//
// Precedence, first match wins, for each setting on its own:
//   flag (--coordinator, --token-file, --tls-ca, --tls-cert, --tls-key)
//   > environment (ZPIPE_COORDINATOR, ZPIPE_TOKEN (the token itself), ZPIPE_TLS_CA, ...)
//   > the context (--context NAME, else $ZPIPE_CONTEXT, else current-context)
//   > the default (localhost:50051, no token, plaintext).
#ifndef ZPIPE_CLIENT_CLI_CONFIG_H_
#define ZPIPE_CLIENT_CLI_CONFIG_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace zpipe::cli {

inline constexpr char kContextEnv[] = "ZPIPE_CONTEXT";

struct ConfigContext {
  std::string name{};
  std::string coordinator{};  // "" = not set, as for every field below
  std::string token_file{};
  std::string tls_ca{};
  std::string tls_cert{};
  std::string tls_key{};
};

struct CliConfig {
  std::string current_context;  // "" = none
  std::vector<ConfigContext> contexts;

  const ConfigContext* Find(const std::string& name) const;
};

// Reads an environment variable; nullptr when unset. Injected so tests need not touch the
// process's environment.
using GetEnv = std::function<const char*(const char*)>;
GetEnv ProcessEnv();

// $XDG_CONFIG_HOME/zeropipe/config.yaml, else $HOME/.config/zeropipe/config.yaml.
std::string ConfigPath(const GetEnv& env);

// The file at `path`; an empty config when it does not exist. INVALID_ARGUMENT naming the file
// (and the line) when it is not YAML of the shape above.
absl::StatusOr<CliConfig> LoadCliConfig(const std::string& path);
// Writes `config` to `path` (creating its folder), replacing the file whole.
absl::Status SaveCliConfig(const std::string& path, const CliConfig& config);

// One resolved setting: its value ("" = not set) and where it came from ("--tls-ca",
// "ZPIPE_TLS_CA", "context 'prod' (FILE) tls-ca", "default"), for error messages.
struct Setting {
  std::string value;
  std::string source;
};

struct ConnectionFlags {
  std::optional<std::string> context;
  std::optional<std::string> coordinator;
  std::optional<std::string> token_file;
  std::optional<std::string> tls_ca;
  std::optional<std::string> tls_cert;
  std::optional<std::string> tls_key;
};

struct Connection {
  std::string context;  // the context used, "" for none
  Setting coordinator;
  Setting token;       // from ZPIPE_TOKEN: the token itself
  Setting token_file;  // set only when `token` is not
  Setting tls_ca;
  Setting tls_cert;
  Setting tls_key;
};

// Resolves every setting by the precedence above. `config_path` only names the file in sources.
// INVALID_ARGUMENT when a context is asked for by --context or ZPIPE_CONTEXT (or is the file's
// current-context) and the file has none of that name.
absl::StatusOr<Connection> ResolveConnection(const ConnectionFlags& flags, const GetEnv& env,
                                             const CliConfig& config,
                                             const std::string& config_path);

}  // namespace zpipe::cli

#endif  // ZPIPE_CLIENT_CLI_CONFIG_H_
