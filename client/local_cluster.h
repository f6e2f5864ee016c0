// LocalCluster: the processes `zpipe run --local` starts — one zpipe-coordinator on a loopback port
// with a database in a temporary directory, and N zpipe-worker processes registered with it.
//
// Every child runs in one process group of its own (not the terminal's foreground group, so a
// Ctrl-C reaches only `zpipe run`, which then cancels the job and shuts the children down in
// order), and with PR_SET_PDEATHSIG = SIGKILL, so that even a `zpipe run` killed outright leaves
// no process behind. Shutdown() stops workers first (SIGTERM, then SIGKILL after a grace period),
// then the coordinator, then kills whatever is left in the group; the destructor calls it.
// Logs of every child go to files in the temporary directory (Tail() for error messages), which is
// removed at shutdown unless keep_dir is set.
//
// The coordinator requires tokens: each Start() makes a throwaway random client token and worker
// token, writes them to token files (mode 0600) in the temporary directory, starts the coordinator
// with --client-tokens / --worker-tokens and the workers with --token-file; client_token() is for
// the caller's zpipe::Client. Nothing else on the machine can use the cluster without reading
// those files.
#ifndef ZPIPE_CLIENT_LOCAL_CLUSTER_H_
#define ZPIPE_CLIENT_LOCAL_CLUSTER_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace zpipe::cli {

// Where the zpipe-coordinator / zpipe-worker binaries are: $ZPIPE_COORDINATOR_BIN /
// $ZPIPE_WORKER_BIN; else next to the running `zpipe` (the build tree: ../coordinator/ and
// ../worker/ from build/client/; an install: the same directory); else on $PATH. NOT_FOUND
// naming the places tried.
absl::StatusOr<std::string> FindBinary(const std::string& name, const char* env_var,
                                       const std::string& build_subdir);

struct LocalClusterOptions {
  std::string coordinator_bin;
  std::string worker_bin;
  int workers = 1;
  std::string device = "cpu";  // "cpu" or "cuda": worker i gets --device DEVICE:i
  int threads = 1;             // --threads for each worker
  std::string metrics_listen;  // coordinator --metrics-listen; empty = disabled
  bool keep_dir = false;       // keep the temporary directory (logs, database)
  // Each worker's --data-root, besides the working directory and the temporary directory (which
  // every worker gets); existing directories.
  std::vector<std::string> data_roots;
  // More flags for the coordinator and for each worker (e.g. {"--log-lines", "50"}).
  std::vector<std::string> coordinator_flags;
  std::vector<std::string> worker_flags;
};

class LocalCluster {
 public:
  // Starts the coordinator and waits (up to `timeout`) until it serves; then starts the workers
  // (without waiting for them: WaitForWorkers).
  static absl::StatusOr<std::unique_ptr<LocalCluster>> Start(const LocalClusterOptions& options,
                                                             absl::Duration timeout);
  ~LocalCluster();
  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;

  const std::string& address() const { return address_; }  // "127.0.0.1:PORT"
  const std::string& dir() const { return dir_; }
  // The client token the coordinator accepts (named "zpipe-run"; ClientOptions::token).
  const std::string& client_token() const { return client_token_; }
  pid_t process_group() const { return pgid_; }

  // OK once every started process is still alive; otherwise an error naming the first one that
  // exited, with the end of its log.
  absl::Status CheckAlive();
  // The last `lines` lines of the log of process `name` ("coordinator", "worker-0", ...).
  std::string Tail(const std::string& name, int lines = 15) const;

  // Stops every process (see above). Idempotent.
  void Shutdown();
  // Async-signal-safe: SIGKILL to the whole group (used on a second Ctrl-C).
  void KillAllNow() const;

 private:
  struct Child {
    std::string name;
    std::string log;
    pid_t pid = -1;
    bool reaped = false;
    int status = 0;
  };
  LocalCluster() = default;
  absl::Status Spawn(const std::string& name, const std::vector<std::string>& argv);
  bool Reap(Child& c);  // true once exited
  void StopChildren(size_t begin, size_t end, absl::Duration grace);

  LocalClusterOptions options_;
  std::string dir_;
  std::string address_;
  std::string client_token_;
  pid_t pgid_ = 0;
  std::vector<Child> children_;  // [0] = coordinator, then workers
  bool shut_down_ = false;
};

}  // namespace zpipe::cli

#endif  // ZPIPE_CLIENT_LOCAL_CLUSTER_H_
