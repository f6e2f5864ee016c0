#include "client/local_cluster.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace zpipe::cli {
namespace fs = std::filesystem;

namespace {

bool IsExecutable(const std::string& path) {
  struct stat st;
  return !path.empty() && stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
         access(path.c_str(), X_OK) == 0;
}

std::string SelfDir() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  return self.parent_path().string();
}

// 128 random bits from the kernel's CSPRNG, as hex.
absl::StatusOr<std::string> RandomToken() {
  unsigned char bytes[16];
  std::ifstream urandom("/dev/urandom", std::ios::binary);
  if (!urandom.read(reinterpret_cast<char*>(bytes), sizeof(bytes))) {
    return absl::InternalError("cannot read /dev/urandom for a token");
  }
  std::string out;
  for (unsigned char b : bytes) absl::StrAppend(&out, absl::Hex(b, absl::kZeroPad2));
  return out;
}

// Writes `text` to a new file only its owner may read.
absl::Status WritePrivateFile(const std::string& path, const std::string& text) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return absl::InternalError(absl::StrCat("create ", path, ": ", std::strerror(errno)));
  const bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  if (!ok) return absl::InternalError(absl::StrCat("write ", path, ": ", std::strerror(errno)));
  return absl::OkStatus();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A new directory, only its owner may enter, for this run's files under $TMPDIR (or /tmp).
absl::StatusOr<std::string> MakeRunDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = absl::StrCat(tmp != nullptr && *tmp ? tmp : "/tmp", "/zpipe-run-XXXXXX");
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", pattern, ": ", std::strerror(errno)));
  }
  return std::string(buf.data());
}

// The run's client token and the files in the run directory that hand the tokens out.
struct RunTokens {
  std::string client_token;
  std::string client_tokens;      // the coordinator's --client-tokens
  std::string worker_tokens;      // the coordinator's --worker-tokens
  std::string worker_token_file;  // each worker's --token-file
};

// Throwaway tokens for this run only: another user's process on this machine cannot use the
// cluster (or pose as one of its workers) without reading them from our private directory.
absl::StatusOr<RunTokens> WriteRunTokens(const std::string& dir) {
  absl::StatusOr<std::string> client_token = RandomToken();
  if (!client_token.ok()) return client_token.status();
  absl::StatusOr<std::string> worker_token = RandomToken();
  if (!worker_token.ok()) return worker_token.status();
  RunTokens tokens{.client_token = *client_token,
                   .client_tokens = dir + "/client.tokens",
                   .worker_tokens = dir + "/worker.tokens",
                   .worker_token_file = dir + "/worker.token"};
  for (const auto& [path, text] :
       {std::pair{tokens.client_tokens, absl::StrCat("zpipe-run:", *client_token, "\n")},
        std::pair{tokens.worker_tokens, absl::StrCat("local-workers:", *worker_token, "\n")},
        std::pair{tokens.worker_token_file, absl::StrCat(*worker_token, "\n")}}) {
    if (absl::Status st = WritePrivateFile(path, text); !st.ok()) return st;
  }
  return tokens;
}

void AddFlag(std::vector<std::string>& argv, const char* flag, std::string value) {
  argv.push_back(flag);
  argv.push_back(std::move(value));
}

// Port 0: the coordinator binds a free port and logs it ("serving on port N").
std::vector<std::string> CoordinatorArgv(const LocalClusterOptions& options, const std::string& dir,
                                         const RunTokens& tokens) {
  std::vector<std::string> argv = {options.coordinator_bin};
  AddFlag(argv, "--listen", "127.0.0.1:0");
  AddFlag(argv, "--metrics-listen", options.metrics_listen);
  AddFlag(argv, "--db", dir + "/coordinator.db");
  AddFlag(argv, "--client-tokens", tokens.client_tokens);
  AddFlag(argv, "--worker-tokens", tokens.worker_tokens);
  argv.insert(argv.end(), options.coordinator_flags.begin(), options.coordinator_flags.end());
  return argv;
}

// Worker i, on device i, allowed to read data under `roots`.
std::vector<std::string> WorkerArgv(const LocalClusterOptions& options, int i,
                                    const std::string& address,
                                    const std::vector<std::string>& roots,
                                    const RunTokens& tokens) {
  std::vector<std::string> argv = {options.worker_bin};
  AddFlag(argv, "--coordinator", address);
  AddFlag(argv, "--name", absl::StrCat("local-", i));
  AddFlag(argv, "--device", absl::StrCat(options.device, ":", i));
  AddFlag(argv, "--threads", absl::StrCat(options.threads));
  AddFlag(argv, "--comm-timeout", "30");
  AddFlag(argv, "--token-file", tokens.worker_token_file);
  for (const std::string& root : roots) {
    if (!root.empty()) AddFlag(argv, "--data-root", root);
  }
  argv.insert(argv.end(), options.worker_flags.begin(), options.worker_flags.end());
  return argv;
}

}  // namespace

absl::StatusOr<std::string> FindBinary(const std::string& name, const char* env_var,
                                       const std::string& build_subdir) {
  if (const char* env = std::getenv(env_var); env != nullptr && *env != '\0') {
    if (IsExecutable(env)) return std::string(env);
    return absl::NotFoundError(absl::StrCat("$", env_var, "=", env, " is not an executable file"));
  }
  std::vector<std::string> tried;
  if (std::string self = SelfDir(); !self.empty()) {
    for (const fs::path& candidate :
         {fs::path(self) / ".." / build_subdir / name, fs::path(self) / name}) {
      const std::string path = candidate.lexically_normal().string();
      if (IsExecutable(path)) return path;
      tried.push_back(path);
    }
  }
  if (const char* path_env = std::getenv("PATH"); path_env != nullptr) {
    for (absl::string_view dir : absl::StrSplit(path_env, ':', absl::SkipEmpty())) {
      const std::string path = absl::StrCat(dir, "/", name);
      if (IsExecutable(path)) return path;
    }
    tried.push_back("$PATH");
  }
  return absl::NotFoundError(absl::StrCat("cannot find ", name, " (tried ",
                                          absl::StrJoin(tried, ", "), "); build it (",
                                          "ninja -C build ", name, ") or set ", env_var));
}

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Start(
    const LocalClusterOptions& options, absl::Duration timeout) {
  std::unique_ptr<LocalCluster> c(new LocalCluster());
  c->options_ = options;
  absl::StatusOr<std::string> dir = MakeRunDir();
  if (!dir.ok()) return dir.status();
  c->dir_ = *dir;
  absl::StatusOr<RunTokens> tokens = WriteRunTokens(c->dir_);
  if (!tokens.ok()) return tokens.status();
  c->client_token_ = tokens->client_token;

  absl::Status s = c->Spawn("coordinator", CoordinatorArgv(options, c->dir_, *tokens));
  if (!s.ok()) return s;
  const std::regex serving("serving on port ([0-9]+)");
  const absl::Time deadline = absl::Now() + timeout;
  while (c->address_.empty()) {
    std::smatch m;
    const std::string log = ReadFile(c->children_[0].log);
    if (std::regex_search(log, m, serving)) {
      c->address_ = absl::StrCat("127.0.0.1:", m[1].str());
      break;
    }
    if (absl::Status alive = c->CheckAlive(); !alive.ok()) return alive;
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("the coordinator did not start serving within ",
                       absl::FormatDuration(timeout), ":\n", c->Tail("coordinator")));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }

  std::error_code ec;
  std::vector<std::string> roots = {std::filesystem::current_path(ec).string(), c->dir_};
  roots.insert(roots.end(), options.data_roots.begin(), options.data_roots.end());
  for (int i = 0; i < options.workers; ++i) {
    s = c->Spawn(absl::StrCat("worker-", i), WorkerArgv(options, i, c->address_, roots, *tokens));
    if (!s.ok()) return s;
  }
  return c;
}

LocalCluster::~LocalCluster() { Shutdown(); }

absl::Status LocalCluster::Spawn(const std::string& name, const std::vector<std::string>& argv) {
  Child child;
  child.name = name;
  child.log = absl::StrCat(dir_, "/", name, ".log");
  const pid_t parent = getpid();
  const pid_t group = pgid_;
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    // Child: own process group (the first child founds it), die with the parent, default signal
    // handling (the mask and ignored dispositions survive exec), output to the log.
    setpgid(0, group);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    const int in = open("/dev/null", O_RDONLY);
    const int log = open(child.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || log < 0) _exit(127);
    dup2(in, 0);
    dup2(log, 1);
    dup2(log, 2);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  setpgid(pid, group);  // also here, so the group exists before the next fork whoever runs first
  if (pgid_ == 0) pgid_ = pid;
  child.pid = pid;
  children_.push_back(std::move(child));
  return absl::OkStatus();
}

bool LocalCluster::Reap(Child& c) {
  if (c.reaped) return true;
  if (waitpid(c.pid, &c.status, WNOHANG) == c.pid) c.reaped = true;
  return c.reaped;
}

absl::Status LocalCluster::CheckAlive() {
  for (Child& c : children_) {
    if (!Reap(c)) continue;
    const std::string how = WIFEXITED(c.status)
                                ? absl::StrCat("exited with code ", WEXITSTATUS(c.status))
                                : absl::StrCat("was killed by signal ", WTERMSIG(c.status));
    return absl::UnavailableError(absl::StrCat("local ", c.name, " (pid ", c.pid, ") ", how,
                                               "; its log ends:\n", Tail(c.name)));
  }
  return absl::OkStatus();
}

std::string LocalCluster::Tail(const std::string& name, int lines) const {
  for (const Child& c : children_) {
    if (c.name != name) continue;
    std::deque<std::string> last;
    std::ifstream in(c.log);
    for (std::string line; std::getline(in, line);) {
      last.push_back("  " + line);
      if (static_cast<int>(last.size()) > lines) last.pop_front();
    }
    return absl::StrJoin(last, "\n");
  }
  return "";
}

void LocalCluster::StopChildren(size_t begin, size_t end, absl::Duration grace) {
  for (size_t i = begin; i < end; ++i) {
    if (!Reap(children_[i])) kill(children_[i].pid, SIGTERM);
  }
  const absl::Time deadline = absl::Now() + grace;
  while (absl::Now() < deadline) {
    bool all = true;
    for (size_t i = begin; i < end; ++i) all = Reap(children_[i]) && all;
    if (all) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (size_t i = begin; i < end; ++i) {
    if (!Reap(children_[i])) {
      kill(children_[i].pid, SIGKILL);
      waitpid(children_[i].pid, &children_[i].status, 0);
      children_[i].reaped = true;
    }
  }
}

void LocalCluster::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  // Workers first (they would otherwise keep reconnecting to a vanished coordinator), then the
  // coordinator. (No group-wide kill here: once every child is reaped, the group id may name
  // someone else's group.)
  if (children_.size() > 1) StopChildren(1, children_.size(), absl::Seconds(5));
  if (!children_.empty()) StopChildren(0, 1, absl::Seconds(5));
  if (!options_.keep_dir && !dir_.empty()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

void LocalCluster::KillAllNow() const {
  if (pgid_ > 0) kill(-pgid_, SIGKILL);
}

}  // namespace zpipe::cli
