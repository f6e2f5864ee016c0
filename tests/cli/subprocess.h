// Running a built binary as a child process in tests: capture stdout/stderr, get the exit code,
// optionally in the background; and picking a free loopback port.
#ifndef ZPIPE_TESTS_CLI_SUBPROCESS_H_
#define ZPIPE_TESTS_CLI_SUBPROCESS_H_

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace zpipe::testing {

struct ProcessResult {
  int exit_code = -1;  // the exit status, or 128 + signal when killed
  std::string out;
  std::string err;
};

// A child process whose stdout and stderr go to temporary files.
class Subprocess {
 public:
  // Starts `argv[0]` with `argv` and the current environment plus `env` (overrides; an empty
  // value unsets the variable). Aborts the test binary if fork/exec fails.
  Subprocess(const std::vector<std::string>& argv,
             const std::map<std::string, std::string>& env = {});
  ~Subprocess();  // kills the child if it still runs
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  // Waits for the child to exit (SIGKILL after `timeout_s`) and returns what it did.
  ProcessResult Wait(double timeout_s = 60);
  void Signal(int sig);  // sends `sig` if the child is still running
  bool Running();
  pid_t pid() const { return pid_; }
  std::string ReadOut() const;  // what it has written to stdout so far
  std::string ReadErr() const;

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;
  std::string out_path_;
  std::string err_path_;
};

// Runs to completion.
ProcessResult RunProcess(const std::vector<std::string>& argv,
                         const std::map<std::string, std::string>& env = {}, double timeout_s = 60);

// Runs with stdout and stderr on a pseudo-terminal (what a user at a shell sees); `out` gets
// everything written, `err` stays empty.
ProcessResult RunInTerminal(const std::vector<std::string>& argv, double timeout_s = 60);

// A TCP port on 127.0.0.1 that was free a moment ago.
int FreePort();

}  // namespace zpipe::testing

#endif  // ZPIPE_TESTS_CLI_SUBPROCESS_H_
