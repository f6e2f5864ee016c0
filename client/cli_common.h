// What every part of the `zpipe` command line shares, with no protobuf and no gRPC: the exit
// codes, the -o formats, and the commands that run without a coordinator (completion, the
// version line). The lean `zpipe` executable (zpipe_main.cc) is built from this, the command
// table and the local `zpipe plan`; cli.h adds what the commands that talk to a coordinator need.
//
// Exit codes (documented in `zpipe --help`):
//   0  success
//   1  the job failed or was cancelled (submit --wait/--follow, watch), or the coordinator
//      refused the operation (unknown job, cancelling a finished job, another spec under an
//      existing id, ...)
//   2  usage: bad arguments, an invalid job file, or a spec the coordinator rejected
//   3  the coordinator could not be reached
//   4  the coordinator refused for lack of resources
#ifndef ZPIPE_CLIENT_CLI_COMMON_H_
#define ZPIPE_CLIENT_CLI_COMMON_H_

#include <iosfwd>
#include <string>
#include <vector>

namespace zpipe::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitJobFailed = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitUnreachable = 3;
// The coordinator refused for lack of room (RESOURCE_EXHAUSTED): its job store is full, or a
// limit such as --max-pending-jobs is reached. Retrying later may succeed.
inline constexpr int kExitResourceExhausted = 4;

// -o FORMAT. kTable is "text" (its old name "table" is still accepted); kWide is text with more
// columns where a command has them; kJson and kYaml print the same documents (json_output.h);
// kName prints only the ids of what the command names, one per line.
enum class OutputFormat { kTable, kWide, kJson, kYaml, kName };

// A build in one line: "WHO: zpipe VERSION (commit C, torch T, cuda X)", torch "unknown" and
// cuda "none" when empty. ClientVersionLine() is this zpipe's (zpipe --version; the first line
// of zpipe version).
std::string VersionLine(const std::string& who, const std::string& version,
                        const std::string& commit, const std::string& torch,
                        const std::string& cuda);
std::string ClientVersionLine();

// `zpipe completion bash|zsh|fish`: needs no coordinator, so it takes its streams directly.
int RunCompletionCommand(const std::vector<std::string>& args, std::ostream& out,
                         std::ostream& err);

}  // namespace zpipe::cli

#endif  // ZPIPE_CLIENT_CLI_COMMON_H_
