#include "client/cli.h"

#include <ctime>
#include <ostream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/command_table.h"
#include "util/sanitize.h"

namespace zpipe::cli {

CliContext::CliContext(std::string coordinator, OutputFormat output, std::ostream& out,
                       std::ostream& err, bool out_is_terminal)
    : coordinator_(std::move(coordinator)),
      output_(output),
      out_(out),
      err_(err),
      out_is_terminal_(out_is_terminal) {}

CliContext::CliContext(std::unique_ptr<Client> client, std::string coordinator, OutputFormat output,
                       std::ostream& out, std::ostream& err, bool out_is_terminal)
    : CliContext(std::move(coordinator), output, out, err, out_is_terminal) {
  client_ = std::move(client);
}

void CliContext::SetToken(std::string token, std::string source) {
  token_ = std::move(token);
  token_source_ = std::move(source);
}

void CliContext::SetTls(std::optional<util::TlsClientPem> tls, std::string ca_source) {
  tls_ = std::move(tls);
  tls_ca_source_ = std::move(ca_source);
}

Client& CliContext::client() {
  if (client_ == nullptr) {
    ClientOptions options;
    options.token = token_;
    options.tls = tls_;
    client_ = Client::Create(coordinator_, options);
  }
  return *client_;
}

int ExitCodeFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kUnavailable:
      return kExitUnreachable;
    case absl::StatusCode::kInvalidArgument:
      return kExitUsage;
    case absl::StatusCode::kResourceExhausted:
      return kExitResourceExhausted;
    default:
      return kExitJobFailed;
  }
}

int CliContext::Fail(const std::string& command, const absl::Status& status) {
  err_ << "zpipe " << command << ": ";
  // The coordinator's message may quote a peer's string (a worker's failure, a job name).
  const std::string message = util::SanitizeForTerminal(status.message());
  if (status.code() == absl::StatusCode::kUnavailable &&
      util::LooksLikeTlsFailure(status.message())) {
    err_ << "TLS with the coordinator at " << coordinator_ << " failed (" << message << "); ";
    if (!tls_.has_value()) {
      err_
          << "this zpipe spoke plaintext: if the coordinator serves TLS, give --tls-ca FILE or set "
          << kTlsCaEnv << "\n";
    } else {
      err_ << "check that "
           << (tls_ca_source_.empty()
                   ? std::string("the system's CAs (no --tls-ca or ") + kTlsCaEnv + " given)"
                   : tls_ca_source_)
           << " signed its certificate, that the certificate names the host in --coordinator, and "
              "that a coordinator requiring client certificates gets one (--tls-cert, --tls-key)\n";
    }
    return kExitJobFailed;
  }
  if (status.code() == absl::StatusCode::kUnavailable) {
    err_ << "cannot reach the coordinator at " << coordinator_ << " (" << message
         << "); is zpipe-coordinator running? Set it with --coordinator ADDR or " << kCoordinatorEnv
         << ".\n";
  } else if (status.code() == absl::StatusCode::kUnauthenticated) {
    if (token_.empty()) {
      err_ << "the coordinator at " << coordinator_ << " requires a token: set " << kTokenEnv
           << " or --token-file FILE (" << message << ")\n";
    } else {
      err_ << "the coordinator at " << coordinator_ << " did not accept the token from "
           << token_source_ << ": " << message << "\n";
    }
  } else if (status.code() == absl::StatusCode::kResourceExhausted) {
    // Reached and answering, but out of room (a full job store, a limit): not "unreachable".
    err_ << "the coordinator at " << coordinator_ << " refused for lack of resources: " << message
         << "\n";
  } else if (status.code() == absl::StatusCode::kDeadlineExceeded) {
    err_ << "the coordinator at " << coordinator_ << " did not answer in time: " << message << "\n";
  } else if (status.message().empty()) {
    // gRPC sometimes fails without a message (e.g. a request it could not serialize).
    err_ << "the call failed with " << absl::StatusCodeToString(status.code())
         << " and no message from gRPC\n";
  } else {
    err_ << message << "\n";
  }
  return ExitCodeFor(status);
}

int CliContext::Usage(const std::string& command, absl::string_view message) {
  const CommandSpec* spec = FindCommand(command);
  err_ << "zpipe " << command << ": " << message << "\n"
       << "usage: zpipe " << (spec != nullptr ? spec->synopsis : command) << "\n"
       << "Run 'zpipe " << command << " --help' for its flags.\n";
  return kExitUsage;
}

std::optional<int> ParseCommandArgs(CliContext& ctx, const std::string& command, Args& args,
                                    const std::vector<std::string>& argv) {
  absl::Status s = args.Parse(argv);
  if (!s.ok()) return ctx.Usage(command, s.message());
  if (args.help()) {
    ctx.out() << args.Help();
    return kExitOk;
  }
  for (const std::string& warning : args.warnings()) {
    ctx.err() << "zpipe " << command << ": warning: " << warning << "\n";
  }
  return std::nullopt;
}

void Table::Print(std::ostream& out) const {
  // Cells carry peer strings (worker names, hosts, reasons): shown escaped, measured as shown.
  std::vector<std::vector<std::string>> rows;
  rows.reserve(rows_.size());
  for (const auto& row : rows_) {
    std::vector<std::string>& shown = rows.emplace_back();
    shown.reserve(row.size());
    for (const std::string& cell : row) shown.push_back(util::SanitizeForTerminal(cell));
  }
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(widths[c] - row[c].size() + 2, ' ');
    }
    out << line << "\n";
  }
}

std::string FormatDuration(double seconds) {
  if (seconds < 0) return "-";
  if (seconds < 1) return absl::StrFormat("%.0fms", seconds * 1000);
  if (seconds < 60) return absl::StrFormat("%.1fs", seconds);
  const int64_t s = static_cast<int64_t>(seconds);
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
}

std::string FormatTime(int64_t seconds_since_epoch) {
  if (seconds_since_epoch <= 0) return "-";
  std::time_t t = static_cast<std::time_t>(seconds_since_epoch);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

absl::StatusOr<std::map<std::string, std::string>> ParseLabelArgs(const Args& args,
                                                                  const std::string& flag) {
  std::map<std::string, std::string> labels;
  for (const std::string& value : args.GetAll(flag)) {
    const size_t eq = value.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, " '", value, "': want KEY=VALUE (e.g. ", flag, " team=nlp)"));
    }
    labels[value.substr(0, eq)] = value.substr(eq + 1);
  }
  return labels;
}

std::string FormatLabels(const v1::JobSpec& spec) {
  if (spec.labels().empty()) return "-";
  std::map<std::string, std::string> sorted;
  for (const auto& label : spec.labels()) sorted[label.first] = label.second;
  std::string out;
  for (const auto& [key, value] : sorted) {
    absl::StrAppend(&out, out.empty() ? "" : ",", key, "=", value);
  }
  return out;
}

absl::StatusOr<PageArgs> ParsePageArgs(const Args& args) {
  PageArgs page;
  if (args.Has("--limit")) {
    absl::StatusOr<int64_t> limit = args.Integer("--limit", 1, 1000);
    if (!limit.ok()) return limit.status();
    page.limit = static_cast<int>(*limit);
  }
  page.token = args.Get("--continue");
  if (!page.token.empty() && !page.limit) {
    return absl::InvalidArgumentError("--continue TOKEN goes with --limit N");
  }
  return page;
}

void PrintNextPageHint(CliContext& ctx, const std::string& command_line, const PageArgs& page,
                       const std::string& next_token) {
  if (next_token.empty() || !page.limit) return;
  ctx.err() << "more: zpipe " << command_line << " --limit " << *page.limit << " --continue "
            << util::SanitizeForTerminal(next_token) << "\n";
}

std::string JobLine(const v1::Job& job) {
  std::string line = absl::StrCat(job.id(), " ", JobStateName(job.state()));
  const v1::JobProgress& p = job.progress();
  if (p.iterations_total() > 0)
    absl::StrAppend(&line, " ", p.iterations_done(), "/", p.iterations_total(), " iterations");
  if (!job.reason().empty()) {
    absl::StrAppend(&line, ": ", util::SanitizeForTerminal(job.reason()));
  }
  return line;
}

}  // namespace zpipe::cli
