#include "client/model_export.h"

#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace zpipe::cli {

namespace fs = std::filesystem;

absl::StatusOr<std::string> ExportModel(const std::string& worker_bin, const fs::path& root,
                                        const fs::path& out) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return absl::InternalError("export: pipe failed");
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("export: fork failed");
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    pthread_sigmask(SIG_SETMASK, &none, nullptr);
    dup2(pipe_fds[1], STDOUT_FILENO);
    dup2(pipe_fds[1], STDERR_FILENO);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    const std::string root_s = root.string(), out_s = out.string();
    execl(worker_bin.c_str(), worker_bin.c_str(), "export", "--checkpoint", root_s.c_str(), "-o",
          out_s.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(pipe_fds[1]);
  std::string output;
  char buf[4096];
  ssize_t n;
  while ((n = read(pipe_fds[0], buf, sizeof buf)) > 0) output.append(buf, static_cast<size_t>(n));
  close(pipe_fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  while (!output.empty() && output.back() == '\n') output.pop_back();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat("export failed: ", output));
  }
  return output;
}

}  // namespace zpipe::cli
