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
#include <mutex>
#include <nlohmann/json.hpp>
#include <ostream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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

constexpr char kUsage[] =
    "usage: zpipe run FILE.yaml|FILE.json --local [--workers N] [--out DIR] [--threads T] "
    "[--keep-logs]\n"
    "  --local        start a coordinator and the workers on this machine (the only mode so far)\n"
    "  --workers N    worker processes to start (default p * d of the job)\n"
    "  --out DIR      where the timeline files go (default: beside the job file)\n"
    "  --threads T    LibTorch intra-op threads per worker (default 1)\n"
    "  --keep-logs    keep the temporary directory with the coordinator's and workers' logs\n"
    "  --metrics-listen HOST:PORT  let the coordinator serve Prometheus /metrics there (default "
    "off)\n"
    "  -o json|yaml   print the final summary as JSON or YAML on stdout (the live view goes to\n"
    "                 stderr); the job file may also be given as -f FILE\n"
    "exit codes: 0 succeeded; 1 failed or cancelled (Ctrl-C); 2 usage; 3 the local cluster did not "
    "start\n";

// State shared with the signal thread.
struct Interrupt {
  std::atomic<bool> requested{false};
  std::atomic<bool> done{false};
  std::mutex mu;
  std::string job_id;  // once submitted
  Client* client = nullptr;
  LocalCluster* cluster = nullptr;
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
      std::lock_guard<std::mutex> lock(state.mu);
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
      std::lock_guard<std::mutex> lock(state.mu);
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
        std::lock_guard<std::mutex> lock(state.mu);
        if (state.done.load()) return;
        if (state.cluster != nullptr) state.cluster->KillAllNow();
        std::_Exit(kExitJobFailed);
      }
    }
  }
}

// Whether the job trains weights worth handing back (GPT and TorchScript models).
bool ExportsModel(const v1::JobSpec& spec) {
  return spec.model().has_torchscript() || spec.model().has_gpt();
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
       {&spec.model().torchscript().path(), &spec.data().path(), &spec.eval().path()}) {
    if (!file->empty()) add(fs::path(*file).parent_path());
  }
  if (spec.checkpoint().every() > 0 && !spec.checkpoint().dir().empty()) {
    std::error_code ec;
    fs::create_directories(spec.checkpoint().dir(), ec);
    add(spec.checkpoint().dir());
  }
  return roots;
}

}  // namespace

int RunRunCommand(CliContext& ctx, const std::vector<std::string>& argv) {
  Args args = ArgsFor("run");
  if (std::optional<int> exit = ParseCommandArgs(ctx, "run", args, argv, kUsage)) return *exit;
  if (args.positionals().size() + (args.Has("--file") ? 1 : 0) != 1)
    return ctx.Usage("run", "expected exactly one job file", kUsage);
  if (!args.Has("--local")) {
    return ctx.Usage(
        "run", "only --local is supported (to use a running coordinator: zpipe submit --follow)",
        kUsage);
  }
  const std::string job_file = args.Has("--file") ? args.Get("--file") : args.positionals()[0];
  absl::StatusOr<v1::JobSpec> spec = LoadJobFile(job_file);
  if (!spec.ok()) {
    ctx.err() << "zpipe run: " << spec.status().message() << "\n";
    return kExitUsage;
  }
  const int ranks = std::max(1, spec->parallel().pipeline()) * std::max(1, spec->parallel().data());
  int workers = ranks;
  if (args.Has("--workers") &&
      (!absl::SimpleAtoi(args.Get("--workers"), &workers) || workers < 1)) {
    return ctx.Usage("run", "--workers takes a number >= 1", kUsage);
  }
  if (workers < ranks) {
    return ctx.Usage(
        "run", absl::StrCat("the job needs p * d = ", ranks, " workers, --workers gives ", workers),
        kUsage);
  }
  int threads = 1;
  if (args.Has("--threads") &&
      (!absl::SimpleAtoi(args.Get("--threads"), &threads) || threads < 1)) {
    return ctx.Usage("run", "--threads takes a number >= 1", kUsage);
  }
  std::string out_dir = args.Get("--out");
  if (out_dir.empty()) {
    out_dir = fs::path(job_file).parent_path().string();
    if (out_dir.empty()) out_dir = ".";
  }
  const std::string stem = fs::path(job_file).stem().string();

  LocalClusterOptions options;
  options.workers = workers;
  options.threads = threads;
  options.keep_dir = args.Has("--keep-logs");
  options.metrics_listen = args.Get("--metrics-listen");
  options.device = spec->device() == v1::DEVICE_KIND_CUDA ? "cuda" : "cpu";
  options.data_roots = LocalDataRoots(*spec, job_file, out_dir);
  for (auto [bin, env, subdir, target] :
       {std::tuple{"zpipe-coordinator", "ZPIPE_COORDINATOR_BIN", "coordinator",
                   &options.coordinator_bin},
        std::tuple{"zpipe-worker", "ZPIPE_WORKER_BIN", "worker", &options.worker_bin}}) {
    absl::StatusOr<std::string> path = FindBinary(bin, env, subdir);
    if (!path.ok()) {
      ctx.err() << "zpipe run: " << path.status().message() << "\n";
      return kExitUnreachable;
    }
    *target = *path;
  }

  // Signals go to one thread, which cancels the job; block them before any thread exists so
  // that every thread (gRPC's too) inherits the mask. Children unblock them after fork.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  sigset_t old_mask;
  pthread_sigmask(SIG_BLOCK, &signals, &old_mask);
  Interrupt interrupt;
  std::thread signal_thread([&] { SignalLoop(interrupt, signals, ctx.err()); });
  struct Cleanup {
    Interrupt& interrupt;
    std::thread& thread;
    sigset_t mask;
    ~Cleanup() {
      interrupt.done = true;
      thread.join();
      pthread_sigmask(SIG_SETMASK, &mask, nullptr);
    }
  } cleanup{interrupt, signal_thread, old_mask};

  // The live view: stdout in table mode; with -o json, stderr (stdout is the summary's).
  std::ostream& view_out = ctx.json() ? ctx.err() : ctx.out();
  const bool view_terminal = ctx.json() ? isatty(STDERR_FILENO) != 0 : ctx.out_is_terminal();
  view_out << "zpipe run: starting a local coordinator and " << workers << " worker"
           << (workers == 1 ? "" : "s") << "\n"
           << std::flush;
  const auto started = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<LocalCluster>> cluster =
      LocalCluster::Start(options, absl::Seconds(30));
  if (!cluster.ok()) {
    ctx.err() << "zpipe run: " << cluster.status().message() << "\n";
    return kExitUnreachable;
  }
  {
    std::lock_guard<std::mutex> lock(interrupt.mu);
    interrupt.cluster = cluster->get();
  }
  // Detach the cluster pointer from the signal thread before the cluster goes away.
  struct Unpublish {
    Interrupt& interrupt;
    ~Unpublish() {
      std::lock_guard<std::mutex> lock(interrupt.mu);
      interrupt.cluster = nullptr;
      interrupt.client = nullptr;
    }
  };

  ClientOptions client_options;
  client_options.rpc_timeout = absl::Seconds(30);
  client_options.token = (*cluster)->client_token();
  std::unique_ptr<Client> client = Client::Create((*cluster)->address(), client_options);
  Unpublish unpublish{interrupt};
  {
    std::lock_guard<std::mutex> lock(interrupt.mu);
    interrupt.client = client.get();
  }
  if (absl::Status s = WaitForWorkers(*client, **cluster, workers, absl::Minutes(3), interrupt);
      !s.ok()) {
    if (absl::IsCancelled(s)) {
      ctx.err() << "zpipe run: " << s.message() << "\n";
      return kExitJobFailed;
    }
    ctx.err() << "zpipe run: " << s.message() << "\n";
    return kExitUnreachable;
  }
  const double startup_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  view_out << absl::StrFormat("zpipe run: coordinator at %s, %d workers ready (%.1f s)%s\n",
                              (*cluster)->address(), workers, startup_s,
                              options.keep_dir ? absl::StrCat("; logs in ", (*cluster)->dir()) : "")
           << std::flush;

  // The trained model comes back through the job's checkpoints: a job without a checkpoint
  // section saves once, after its last iteration, into the run's temporary directory.
  fs::path checkpoint_root;
  if (ExportsModel(*spec)) {
    if (spec->checkpoint().dir().empty()) {
      spec->mutable_checkpoint()->set_dir((fs::path((*cluster)->dir()) / "checkpoints").string());
      spec->mutable_checkpoint()->set_every(spec->train().iterations());
    }
    checkpoint_root = fs::path(spec->checkpoint().dir()) / spec->name();
  }

  absl::StatusOr<SubmitResult> submitted = client->Submit(*spec, "");
  if (!submitted.ok()) {
    CliContext local((*cluster)->address(), OutputFormat::kTable, ctx.err(), ctx.err(), false);
    local.SetToken((*cluster)->client_token(), "the local cluster");
    return local.Fail("run", LocateInJobFile(submitted.status(), job_file));
  }
  const std::string job_id = submitted->job.id();
  {
    std::lock_guard<std::mutex> lock(interrupt.mu);
    interrupt.job_id = job_id;
  }
  if (interrupt.requested.load()) (void)client->Cancel(job_id, "interrupted (zpipe run)");
  view_out << "submitted job " << job_id << " (" << spec->name() << ")\n" << std::flush;

  // Follow it with the `submit --follow` view, keeping every iteration summary.
  std::vector<v1::IterationSummary> iterations;
  CliContext follow((*cluster)->address(), OutputFormat::kTable, view_out, ctx.err(),
                    view_terminal);
  follow.SetToken((*cluster)->client_token(), "the local cluster");
  int code = FollowJob(follow, "run", job_id, /*live=*/view_terminal, /*quiet=*/false,
                       [&](const v1::JobEvent& e) {
                         if (e.has_iteration()) iterations.push_back(e.iteration());
                       });

  absl::StatusOr<v1::Job> job = client->Get(job_id);
  if (!job.ok()) {
    ctx.err() << "zpipe run: " << job.status().message() << "\n";
    return code == kExitOk ? kExitJobFailed : code;
  }
  TimelineFiles timeline;
  if (!iterations.empty()) timeline = WriteTimelineFiles(*client, job_id, out_dir, stem);
  RunSummary summary = Summarize(*job, iterations);
  summary.local_threads = workers * threads;
  summary.cores = UsableCores();
  if (!checkpoint_root.empty() && job->state() == v1::JOB_STATE_SUCCEEDED) {
    const fs::path model_out = fs::path(out_dir) / absl::StrCat(spec->name(), ".model.pt");
    absl::StatusOr<std::string> exported =
        ExportModel(options.worker_bin, checkpoint_root, model_out);
    if (exported.ok()) {
      summary.model_file = model_out.string();
    } else {
      summary.model_error = std::string(exported.status().message());
    }
  }
  if (ctx.json()) {
    PrintDocument(ctx, Json::parse(SummaryJson(summary, timeline).dump()));
    ctx.out() << std::flush;
  } else {
    PrintSummary(ctx.out(), summary, timeline);
    ctx.out() << std::flush;
  }
  (*cluster)->Shutdown();
  if (interrupt.requested.load() && code == kExitOk) code = kExitJobFailed;
  return code;
}

}  // namespace zpipe::cli
