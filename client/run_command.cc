// `zpipe run JOB.yaml --local [--workers N] [--out DIR] [--threads T] [--keep-logs]
//  [--metrics-listen HOST:PORT]`
//
// A whole ZeroPipe on this machine for one job: an embedded zpipe-coordinator (loopback, database
// in a temporary directory) and N zpipe-worker processes (client/local_cluster.h), the job
// submitted and followed live with the same view as `submit --follow`, then a summary (loss,
// tokens/s, bubble measured against predicted per rank, reduce overlap and exposed reduce time)
// and the executed timeline of the last complete iteration written as a Chrome trace and an SVG
// (run_timeline.h), beside the plan that ran.
// Everything is shut down before it returns.
//
// With -o json the live view goes to stderr and stdout carries one JSON object: the summary.
// Exit codes as `submit --wait`: 0 the job succeeded, 1 it failed or was cancelled, 2 usage
// (bad flags, job file or spec), 3 the local cluster did not come up.
//
// Ctrl-C / SIGTERM: the first cancels the job through the coordinator (the job ends CANCELLED,
// the view shows it, everything is shut down, exit 1); a second one, or a cancel that has not
// finished within 15 s, kills every process at once and exits 1. The children live in their own
// process group and die with this process even when it is killed outright (local_cluster.h).
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <ostream>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "client/cli.h"
#include "client/command_table.h"
#include "client/job_file.h"
#include "client/json_output.h"
#include "client/local_cluster.h"
#include "client/model_export.h"
#include "client/run_report.h"
#include "client/run_summary.h"
#include "client/run_timeline.h"

namespace zpipe::cli {
namespace {

// The cores this process may run on (its CPU affinity; a container's cpuset included).
int UsableCores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::thread::hardware_concurrency());
}
namespace fs = std::filesystem;

// State shared with the signal thread.
struct Interrupt {
  std::atomic<bool> requested{false};
  std::atomic<bool> done{false};
  absl::Mutex mu;
  std::string job_id ABSL_GUARDED_BY(mu);  // once submitted
  Client* client ABSL_GUARDED_BY(mu) = nullptr;
  LocalCluster* cluster ABSL_GUARDED_BY(mu) = nullptr;
};

// Takes SIGINT/SIGTERM/SIGHUP (blocked in every thread) synchronously until `stop`.
void SignalLoop(Interrupt& state, const sigset_t& signals, std::ostream& err) {
  std::chrono::steady_clock::time_point hard_deadline{};
  while (!state.done.load()) {
    timespec wait{0, 100 * 1000 * 1000};
    const int sig = sigtimedwait(&signals, nullptr, &wait);
    const bool hard_timeout =
        state.requested.load() && std::chrono::steady_clock::now() > hard_deadline;
    if (sig <= 0 && !hard_timeout) continue;
    if (state.requested.load() || hard_timeout) {
      // Second signal, or the cancel is taking too long: no more manners.
      absl::MutexLock lock(&state.mu);
      if (state.done.load()) return;
      err << "\nzpipe run: stopping every local process now\n" << std::flush;
      if (state.cluster != nullptr) state.cluster->KillAllNow();
      std::_Exit(kExitJobFailed);
    }
    state.requested = true;
    hard_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    std::string job_id;
    Client* client = nullptr;
    {
      absl::MutexLock lock(&state.mu);
      job_id = state.job_id;
      client = state.client;
    }
    err << "\nzpipe run: " << (sig == SIGINT ? "interrupted" : "terminated")
        << (job_id.empty() ? "; shutting down"
                           : absl::StrCat("; cancelling job ", job_id, " and shutting down"))
        << " (again to kill at once)\n"
        << std::flush;
    if (!job_id.empty() && client != nullptr) {
      absl::StatusOr<v1::Job> cancelled = client->Cancel(job_id, "interrupted (zpipe run)");
      if (!cancelled.ok() && cancelled.status().code() != absl::StatusCode::kFailedPrecondition) {
        err << "zpipe run: cancel failed (" << cancelled.status().message()
            << "); stopping everything\n";
        absl::MutexLock lock(&state.mu);
        if (state.done.load()) return;
        if (state.cluster != nullptr) state.cluster->KillAllNow();
        std::_Exit(kExitJobFailed);
      }
    }
  }
}

// Whether the job trains weights worth handing back (GPT, TorchScript and Python models).
bool ExportsModel(const v1::JobSpec& spec) {
  return spec.model().has_torchscript() || spec.model().has_python() || spec.model().has_gpt();
}

// Waits until `n` workers are idle; gives up when a process dies, on Ctrl-C, or after `timeout`.
absl::Status WaitForWorkers(Client& client, LocalCluster& cluster, int n, absl::Duration timeout,
                            const Interrupt& interrupt) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (interrupt.requested.load())
      return absl::CancelledError("interrupted while starting the workers");
    if (absl::Status alive = cluster.CheckAlive(); !alive.ok()) return alive;
    absl::StatusOr<std::vector<v1::Worker>> workers = client.Workers();
    if (workers.ok()) {
      int idle = 0;
      for (const v1::Worker& w : *workers) idle += w.state() == v1::WORKER_STATE_IDLE;
      if (idle >= n) return absl::OkStatus();
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "the local workers did not all register within ", absl::FormatDuration(timeout),
          "; worker-0's log ends:\n", cluster.Tail("worker-0")));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// The workers' --data-root for this job: the folders of the job file, of --out and of every file
// and checkpoint folder the job names (it is the user's own job on the user's own machine), so a
// local run needs no flag. A checkpoint folder is made here if missing: a root must exist.
std::vector<std::string> LocalDataRoots(const v1::JobSpec& spec, const std::string& job_file,
                                        const std::string& out_dir) {
  std::vector<std::string> roots;
  auto add = [&](const fs::path& dir) {
    std::error_code ec;
    if (dir.empty() || !fs::is_directory(dir, ec)) return;
    roots.push_back(fs::absolute(dir, ec).lexically_normal().string());
  };
  add(fs::path(job_file).parent_path());
  add(out_dir);
  for (const std::string* file :
       {&spec.model().torchscript().path(), &spec.model().python().file(), &spec.data().path(),
        &spec.eval().path()}) {
    if (!file->empty()) add(fs::path(*file).parent_path());
  }
  if (spec.checkpoint().every() > 0 && !spec.checkpoint().dir().empty()) {
    std::error_code ec;
    fs::create_directories(spec.checkpoint().dir(), ec);
    add(spec.checkpoint().dir());
  }
  return roots;
}

// What `zpipe run` was asked for: its flags and the job file.
struct RunRequest {
  std::string job_file;
  v1::JobSpec spec;
  std::string out_dir;  // where the timeline files and the trained model go
  std::string stem;     // the job file's name without its extension: the timeline files' names
  LocalClusterOptions cluster;
};

// The folder `file` is in ("." for a bare name): where the timeline files go by default.
std::string FolderOf(const std::string& file) {
  const std::string folder = fs::path(file).parent_path().string();
  return folder.empty() ? std::string(".") : folder;
}

// The binaries the cluster runs: beside zpipe, named by $ZPIPE_*_BIN, or on PATH.
absl::Status FindBinaries(LocalClusterOptions& options) {
  for (auto [bin, env, subdir, target] :
       {std::tuple{"zpipe-coordinator", "ZPIPE_COORDINATOR_BIN", "coordinator",
                   &options.coordinator_bin},
        std::tuple{"zpipe-worker", "ZPIPE_WORKER_BIN", "worker", &options.worker_bin}}) {
    absl::StatusOr<std::string> path = FindBinary(bin, env, subdir);
    if (!path.ok()) return path.status();
    *target = *path;
  }
  return absl::OkStatus();
}

// Reads the flags and the job file into `request`; the exit code when something is wrong.
std::optional<int> ReadRequest(CliContext& ctx, const std::vector<std::string>& argv,
                               RunRequest& request) {
  Args args = ArgsFor("run");
  if (std::optional<int> exit = ParseCommandArgs(ctx, "run", args, argv)) return *exit;
  if (args.positionals().size() + (args.Has("--file") ? 1 : 0) != 1)
    return ctx.Usage("run", "expected exactly one job file");
  if (!args.Has("--local")) {
    return ctx.Usage(
        "run", "only --local is supported (to use a running coordinator: zpipe submit --follow)");
  }
  request.job_file = args.Has("--file") ? args.Get("--file") : args.positionals()[0];
  absl::StatusOr<v1::JobSpec> spec = LoadJobFile(request.job_file);
  if (!spec.ok()) {
    ctx.err() << "zpipe run: " << spec.status().message() << "\n";
    return kExitUsage;
  }
  request.spec = *std::move(spec);
  const v1::ParallelSpec& parallel = request.spec.parallel();
  const int ranks = std::max(1, parallel.pipeline()) * std::max(1, parallel.data());
  LocalClusterOptions& options = request.cluster;
  options.workers = ranks;
  for (auto [flag, out] :
       {std::pair{"--workers", &options.workers}, std::pair{"--threads", &options.threads}}) {
    if (!args.Has(flag)) continue;
    absl::StatusOr<int64_t> n = args.Integer(flag, 1, std::numeric_limits<int>::max());
    if (!n.ok()) return ctx.Usage("run", n.status().message());
    *out = static_cast<int>(*n);
  }
  if (options.workers < ranks) {
    return ctx.Usage("run", absl::StrCat("the job needs p * d = ", ranks,
                                         " workers, --workers gives ", options.workers));
  }
  request.out_dir = args.Get("--out");
  if (request.out_dir.empty()) request.out_dir = FolderOf(request.job_file);
  request.stem = fs::path(request.job_file).stem().string();
  options.keep_dir = args.Has("--keep-logs");
  options.metrics_listen = args.Get("--metrics-listen");
  options.device = request.spec.device() == v1::DEVICE_KIND_CUDA ? "cuda" : "cpu";
  options.data_roots = LocalDataRoots(request.spec, request.job_file, request.out_dir);
  if (absl::Status s = FindBinaries(options); !s.ok()) {
    ctx.err() << "zpipe run: " << s.message() << "\n";
    return kExitUnreachable;
  }
  return std::nullopt;
}

// SIGINT, SIGTERM and SIGHUP go to one thread (SignalLoop) while this lives. They are blocked
// before any other thread exists, so that every thread (gRPC's too) inherits the mask; children
// unblock them after fork. The old mask is back when this is gone.
class SignalThread {
 public:
  SignalThread(Interrupt& interrupt, std::ostream& err) : interrupt_(interrupt) {
    sigemptyset(&signals_);
    sigaddset(&signals_, SIGINT);
    sigaddset(&signals_, SIGTERM);
    sigaddset(&signals_, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &signals_, &old_mask_);
    thread_ = std::thread([this, &err] { SignalLoop(interrupt_, signals_, err); });
  }
  ~SignalThread() {
    interrupt_.done = true;
    thread_.join();
    pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
  }
  SignalThread(const SignalThread&) = delete;
  SignalThread& operator=(const SignalThread&) = delete;

 private:
  Interrupt& interrupt_;
  sigset_t signals_;
  sigset_t old_mask_;
  std::thread thread_;
};

// One `zpipe run` once its request is read: the local cluster, a client of it and the job, in
// named steps. What the signal thread may touch is published in `interrupt_` and withdrawn before
// the client and the cluster go away (members are destroyed in reverse order).
class LocalRun {
 public:
  LocalRun(CliContext& ctx, RunRequest request)
      : ctx_(ctx),
        request_(std::move(request)),
        signals_(interrupt_, ctx.err()),
        view_(ctx.json() ? ctx.err() : ctx.out()),
        view_terminal_(ctx.json() ? isatty(STDERR_FILENO) != 0 : ctx.out_is_terminal()) {}
  ~LocalRun() {
    absl::MutexLock lock(&interrupt_.mu);
    interrupt_.cluster = nullptr;
    interrupt_.client = nullptr;
  }

  int Run() {
    if (std::optional<int> exit = Start()) return *exit;
    if (std::optional<int> exit = Submit()) return *exit;
    return Report(Follow());
  }

 private:
  // The cluster, until every worker is idle; the exit code when it did not come up.
  std::optional<int> Start() {
    const int workers = request_.cluster.workers;
    view_ << "zpipe run: starting a local coordinator and " << workers << " worker"
          << (workers == 1 ? "" : "s") << "\n"
          << std::flush;
    const auto started = std::chrono::steady_clock::now();
    absl::StatusOr<std::unique_ptr<LocalCluster>> cluster =
        LocalCluster::Start(request_.cluster, absl::Seconds(30));
    if (!cluster.ok()) {
      ctx_.err() << "zpipe run: " << cluster.status().message() << "\n";
      return kExitUnreachable;
    }
    cluster_ = *std::move(cluster);
    {
      absl::MutexLock lock(&interrupt_.mu);  // published to the signal thread
      interrupt_.cluster = cluster_.get();
    }
    ClientOptions client_options;
    client_options.rpc_timeout = absl::Seconds(30);
    client_options.token = cluster_->client_token();
    client_ = Client::Create(cluster_->address(), client_options);
    {
      absl::MutexLock lock(&interrupt_.mu);  // published to the signal thread
      interrupt_.client = client_.get();
    }
    if (absl::Status s = WaitForWorkers(*client_, *cluster_, workers, absl::Minutes(3), interrupt_);
        !s.ok()) {
      ctx_.err() << "zpipe run: " << s.message() << "\n";
      return absl::IsCancelled(s) ? kExitJobFailed : kExitUnreachable;
    }
    const double startup_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    view_ << absl::StrFormat(
                 "zpipe run: coordinator at %s, %d workers ready (%.1f s)%s\n", cluster_->address(),
                 workers, startup_s,
                 request_.cluster.keep_dir ? absl::StrCat("; logs in ", cluster_->dir()) : "")
          << std::flush;
    return std::nullopt;
  }

  // The job. The trained model comes back through its checkpoints: a job without a checkpoint
  // section saves once, after its last iteration, into the run's temporary directory.
  std::optional<int> Submit() {
    v1::JobSpec& spec = request_.spec;
    if (ExportsModel(spec)) {
      if (spec.checkpoint().dir().empty()) {
        spec.mutable_checkpoint()->set_dir((fs::path(cluster_->dir()) / "checkpoints").string());
        spec.mutable_checkpoint()->set_every(spec.train().iterations());
      }
      checkpoint_root_ = fs::path(spec.checkpoint().dir()) / spec.name();
    }
    absl::StatusOr<SubmitResult> submitted = client_->Submit(spec, "");
    if (!submitted.ok()) {
      CliContext local(cluster_->address(), OutputFormat::kTable, ctx_.err(), ctx_.err(), false);
      local.SetToken(cluster_->client_token(), "the local cluster");
      return local.Fail("run", LocateInJobFile(submitted.status(), request_.job_file));
    }
    job_id_ = submitted->job.id();
    {
      absl::MutexLock lock(&interrupt_.mu);  // published to the signal thread
      interrupt_.job_id = job_id_;
    }
    if (interrupt_.requested.load()) (void)client_->Cancel(job_id_, "interrupted (zpipe run)");
    view_ << "submitted job " << job_id_ << " (" << spec.name() << ")\n" << std::flush;
    return std::nullopt;
  }

  // Follows the job with the `submit --follow` view, keeping every iteration summary; how the
  // job ended, as an exit code.
  int Follow() {
    CliContext follow(cluster_->address(), OutputFormat::kTable, view_, ctx_.err(), view_terminal_);
    follow.SetToken(cluster_->client_token(), "the local cluster");
    return FollowJob(follow, "run", job_id_, /*live=*/view_terminal_, /*quiet=*/false,
                     [&](const v1::JobEvent& e) {
                       if (e.has_iteration()) iterations_.push_back(e.iteration());
                     });
  }

  // The summary (with the timeline files and the trained model) on stdout; `code` is how the
  // job ended.
  int Report(int code) {
    absl::StatusOr<v1::Job> job = client_->Get(job_id_);
    if (!job.ok()) {
      ctx_.err() << "zpipe run: " << job.status().message() << "\n";
      return code == kExitOk ? kExitJobFailed : code;
    }
    TimelineFiles timeline;
    if (!iterations_.empty()) {
      timeline = WriteTimelineFiles(*client_, job_id_, request_.out_dir, request_.stem);
    }
    RunSummary summary = Summarize(*job, iterations_);
    summary.local_threads = request_.cluster.workers * request_.cluster.threads;
    summary.cores = UsableCores();
    if (!checkpoint_root_.empty() && job->state() == v1::JOB_STATE_SUCCEEDED) {
      ExportTrainedModel(summary);
    }
    if (ctx_.json()) {
      PrintDocument(ctx_, Json::parse(SummaryJson(summary, timeline).dump()));
    } else {
      PrintSummary(ctx_.out(), summary, timeline);
    }
    ctx_.out() << std::flush;
    cluster_->Shutdown();
    if (interrupt_.requested.load() && code == kExitOk) code = kExitJobFailed;
    return code;
  }

  // OUT/NAME.model.pt from the job's latest checkpoint, or why not, into `summary`.
  void ExportTrainedModel(RunSummary& summary) {
    const fs::path model_out =
        fs::path(request_.out_dir) / absl::StrCat(request_.spec.name(), ".model.pt");
    absl::StatusOr<std::string> exported =
        ExportModel(request_.cluster.worker_bin, checkpoint_root_, model_out);
    if (exported.ok()) {
      summary.model_file = model_out.string();
    } else {
      summary.model_error = std::string(exported.status().message());
    }
  }

  CliContext& ctx_;
  RunRequest request_;
  Interrupt interrupt_;
  SignalThread signals_;
  // The live view: stdout in text mode; with -o json, stderr (stdout is the summary's).
  std::ostream& view_;
  const bool view_terminal_;
  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<Client> client_;
  std::string job_id_;
  fs::path checkpoint_root_;  // empty: the model trains no weights worth handing back
  std::vector<v1::IterationSummary> iterations_;
};

}  // namespace

int RunRunCommand(CliContext& ctx, const std::vector<std::string>& argv) {
  RunRequest request;
  if (std::optional<int> exit = ReadRequest(ctx, argv, request)) return *exit;
  LocalRun run(ctx, std::move(request));
  return run.Run();
}

}  // namespace zpipe::cli
