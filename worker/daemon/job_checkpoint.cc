#include "worker/daemon/job_checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "util/log.h"
#include "worker/daemon/permanent_error.h"
#include "worker/executor/checkpoint.h"

namespace zpipe::worker {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr char kFormat[] = "zpipe-checkpoint-v1";
constexpr char kManifest[] = "manifest.json";
constexpr char kResumeKey[] = "checkpoint/resume";

std::string IterDirName(int k) { return absl::StrCat("iter-", k); }
std::string MarkerName(int rank) { return absl::StrCat("rank-", rank, ".done"); }

std::string FsError(const std::error_code& ec) { return ec.message(); }

absl::StatusOr<std::string> ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read '", path.string(), "'"));
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// Every leaf where `a` and `b` differ, as "path is A in the checkpoint, B in this job".
void Diff(const std::string& path, const json* a, const json* b, std::vector<std::string>& out) {
  if (a != nullptr && b != nullptr && a->is_object() && b->is_object()) {
    std::set<std::string> keys;
    for (auto it = a->begin(); it != a->end(); ++it) keys.insert(it.key());
    for (auto it = b->begin(); it != b->end(); ++it) keys.insert(it.key());
    for (const std::string& k : keys) {
      const json* ak = a->contains(k) ? &(*a)[k] : nullptr;
      const json* bk = b->contains(k) ? &(*b)[k] : nullptr;
      Diff(absl::StrCat(path, ".", k), ak, bk, out);
    }
    return;
  }
  if (a != nullptr && b != nullptr && *a == *b) return;
  auto show = [](const json* j) { return j == nullptr ? std::string("unset") : j->dump(); };
  out.push_back(
      absl::StrCat(path, " is ", show(a), " in the checkpoint, ", show(b), " in this job"));
}

}  // namespace

std::string CheckpointManifest::ToJson() const {
  json j;
  j["format"] = kFormat;
  j["job_name"] = job_name;
  j["job_id"] = job_id;
  j["schedule"] = schedule;
  j["pipeline"] = pipeline;
  j["data"] = data;
  j["stages"] = stages;
  j["optimizer"] = optimizer;
  j["model"] = json::parse(model_json.empty() ? "{}" : model_json, nullptr, false);
  j["iteration"] = iteration;
  j["loss"] = loss ? json(*loss) : json(nullptr);
  return j.dump(2) + "\n";
}

absl::StatusOr<CheckpointManifest> CheckpointManifest::FromJson(absl::string_view text) {
  json j = json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("format", "") != kFormat) {
    return absl::InvalidArgumentError("not a ZeroPipe checkpoint manifest");
  }
  try {
    CheckpointManifest m;
    m.job_name = j.at("job_name").get<std::string>();
    m.job_id = j.value("job_id", "");
    m.schedule = j.value("schedule", "");
    m.pipeline = j.at("pipeline").get<int>();
    m.data = j.value("data", 1);
    m.stages = j.at("stages").get<int>();
    m.optimizer = j.at("optimizer").get<std::string>();
    m.model_json = j.at("model").dump();
    m.iteration = j.at("iteration").get<int>();
    if (j.contains("loss") && j["loss"].is_number()) m.loss = j["loss"].get<double>();
    return m;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("bad checkpoint manifest: ", e.what()));
  }
}

CheckpointManifest CheckpointManifest::ForJob(const JobConfig& job) {
  CheckpointManifest m;
  m.job_name = job.settings.name;
  m.job_id = job.job_id;
  m.schedule = job.settings.schedule;
  m.pipeline = job.plan.num_ranks();
  m.data = job.rank.data_size;
  m.stages = job.plan.num_stages();
  m.optimizer = std::string(OptimizerName(job.settings.train.optimizer));
  m.model_json = job.settings.model_json;
  return m;
}

std::string DescribeMismatch(const CheckpointManifest& saved, const CheckpointManifest& job) {
  std::vector<std::string> diffs;
  json a = json::parse(saved.model_json.empty() ? "{}" : saved.model_json, nullptr, false);
  json b = json::parse(job.model_json.empty() ? "{}" : job.model_json, nullptr, false);
  // How a Python model's blocks run (model.python.compile) is not the model: its parameters are
  // the same either way, and checkpoints from before the field have none.
  for (json* m : {&a, &b}) {
    if (m->is_object() && m->contains("python") && (*m)["python"].is_object()) {
      (*m)["python"].erase("compile");
    }
  }
  Diff("model", &a, &b, diffs);
  if (saved.stages != job.stages) {
    diffs.push_back(absl::StrCat("the model is cut into ", saved.stages,
                                 " stages in the checkpoint, ", job.stages, " in this job"));
  }
  if (saved.optimizer != job.optimizer) {
    diffs.push_back(absl::StrCat("train.optimizer is \"", saved.optimizer,
                                 "\" in the checkpoint, \"", job.optimizer, "\" in this job"));
  }
  return absl::StrJoin(diffs, "; ");
}

absl::StatusOr<fs::path> CheckpointRoot(const std::string& dir, const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.name '", name, "' cannot name a checkpoint directory under spec.checkpoint.dir"));
  }
  return fs::path(dir) / name;
}

namespace {

// The iter-<K> directories under `root` with 1 <= K <= max_iteration, newest first; empty when
// `root` does not exist.
absl::StatusOr<std::vector<std::pair<int, fs::path>>> ListIterDirs(const fs::path& root,
                                                                   int max_iteration) {
  std::vector<std::pair<int, fs::path>> out;
  std::error_code ec;
  if (!fs::exists(root, ec)) return out;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    absl::string_view digits = name;
    int k = 0;
    if (!absl::ConsumePrefix(&digits, "iter-") || digits.empty() ||
        !std::all_of(digits.begin(), digits.end(), absl::ascii_isdigit) ||
        !absl::SimpleAtoi(digits, &k) || k < 1 || k > max_iteration) {
      continue;
    }
    out.emplace_back(k, it->path());
  }
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint: cannot list '", root.string(), "': ", FsError(ec)));
  }
  std::sort(out.rbegin(), out.rend());
  return out;
}

// The manifest of iter-<k> at `dir` when that checkpoint is complete; else nullopt and `why`
// says what is missing or wrong.
std::optional<CheckpointManifest> CompleteManifest(const fs::path& dir, int k, std::string& why) {
  absl::StatusOr<std::string> text = ReadFile(dir / kManifest);
  if (!text.ok()) {
    why = absl::StrCat("is incomplete (no ", kManifest, ")");
    return std::nullopt;
  }
  absl::StatusOr<CheckpointManifest> saved = CheckpointManifest::FromJson(*text);
  if (!saved.ok() || saved->iteration != k) {
    why = absl::StrCat("has a bad ", kManifest);
    return std::nullopt;
  }
  std::vector<std::string> missing;
  std::error_code ec;
  for (int r = 0; r < saved->pipeline; ++r) {
    if (!fs::exists(dir / MarkerName(r), ec)) missing.push_back(MarkerName(r));
  }
  if (!missing.empty()) {
    why = absl::StrCat("is incomplete (no ", absl::StrJoin(missing, ", "), ")");
    return std::nullopt;
  }
  return *std::move(saved);
}

// FindResumePoint; with `job` null, the latest complete checkpoint whatever it holds.
absl::StatusOr<std::optional<ResumePoint>> FindComplete(const fs::path& root,
                                                        const CheckpointManifest* job,
                                                        int max_iteration) {
  absl::StatusOr<std::vector<std::pair<int, fs::path>>> candidates =
      ListIterDirs(root, max_iteration);
  if (!candidates.ok()) return candidates.status();
  for (const auto& [k, dir] : *candidates) {
    std::string why;
    std::optional<CheckpointManifest> saved = CompleteManifest(dir, k, why);
    if (!saved) {
      Log(absl::StrCat("checkpoint ", dir.string(), " ", why, "; skipping it"));
      continue;
    }
    if (std::string diff = job == nullptr ? "" : DescribeMismatch(*saved, *job); !diff.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint '", dir.string(), "' does not match this job: ", diff,
                       ". Resume with the job it was written for, or use another spec.name or "
                       "spec.checkpoint.dir (or delete it) to start afresh"));
    }
    return std::optional<ResumePoint>(ResumePoint{dir, *std::move(saved)});
  }
  return std::optional<ResumePoint>();
}

}  // namespace

absl::StatusOr<std::optional<ResumePoint>> FindResumePoint(const fs::path& root,
                                                           const CheckpointManifest& job,
                                                           int max_iteration) {
  return FindComplete(root, &job, max_iteration);
}

absl::StatusOr<std::optional<ResumePoint>> LatestCompleteCheckpoint(const fs::path& root) {
  return FindComplete(root, nullptr, std::numeric_limits<int>::max());
}

absl::StatusOr<std::vector<fs::path>> PruneCheckpoints(const fs::path& root, int keep) {
  std::vector<fs::path> removed;
  if (keep <= 0) return removed;
  absl::StatusOr<std::vector<std::pair<int, fs::path>>> dirs =
      ListIterDirs(root, std::numeric_limits<int>::max());
  if (!dirs.ok()) return dirs.status();
  int complete_seen = 0;
  for (const auto& [k, dir] : *dirs) {  // newest first
    std::string why;
    const bool complete = CompleteManifest(dir, k, why).has_value();
    // Incomplete and newer than every complete one: perhaps still being written.
    if (!complete && complete_seen == 0) continue;
    if (complete && ++complete_seen <= keep) continue;
    std::error_code ec;
    fs::remove_all(dir, ec);
    // Another rank pruning the same root may have got there first.
    if (ec && ec != std::errc::no_such_file_or_directory) {
      Log(absl::StrCat("checkpoint: cannot delete ", dir.string(), ": ", FsError(ec)));
      continue;
    }
    removed.push_back(dir);
  }
  return removed;
}

absl::StatusOr<std::unique_ptr<JobCheckpointer>> JobCheckpointer::Make(
    const JobConfig& job, JobCheckpointerOptions options) {
  if (!job.settings.checkpoint) return std::unique_ptr<JobCheckpointer>();
  const CheckpointConfig& config = *job.settings.checkpoint;
  absl::StatusOr<fs::path> root = CheckpointRoot(config.dir, job.settings.name);
  if (!root.ok()) return root.status();
  const core::Plan& plan = job.plan;
  std::unique_ptr<JobCheckpointer> c(new JobCheckpointer());
  c->job_id_ = job.job_id;
  c->rendezvous_prefix_ = job.rendezvous_prefix;
  c->rank_ = job.rank;
  c->job_ = CheckpointManifest::ForJob(job);
  c->root_ = *root;
  c->every_ = config.every;
  c->iterations_ = job.settings.train.iterations;
  c->keep_ = config.keep;
  c->skip_errors_ = config.skip_errors;
  c->background_ = options.background;
  c->writer_ = job.rank.data_rank == 0;
  c->writes_manifest_ =
      c->writer_ && plan.placement.RankOf(plan.num_stages() - 1) == job.rank.pipeline_rank;
  for (int ch = 0; ch < plan.placement.chunks_per_rank(); ++ch) {
    c->stages_.push_back(plan.placement.StageOf(job.rank.pipeline_rank, ch));
  }
  if (c->writer_) {
    if (absl::Status st = c->ProbeRoot(); !st.ok()) return st;
  }
  return c;
}

absl::Status JobCheckpointer::ProbeRoot() const {
  // Fail now, not after the first `every` iterations, when the directory is unusable.
  std::error_code ec;
  fs::create_directories(root_, ec);
  if (ec) {
    return absl::FailedPreconditionError(absl::StrCat("spec.checkpoint.dir: cannot create '",
                                                      root_.string(), "': ", FsError(ec),
                                                      " (it must be writable by every worker)"));
  }
  const fs::path probe = root_ / absl::StrCat(".write-test-rank-", rank_.pipeline_rank);
  if (absl::Status st = WriteFileAtomically(probe, ""); !st.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("spec.checkpoint.dir: cannot write in '",
                                                      root_.string(), "': ", st.message()));
  }
  fs::remove(probe, ec);
  return absl::OkStatus();
}

absl::StatusOr<int> JobCheckpointer::Resume(Executor& executor, KeyValueStore& store,
                                            absl::Duration timeout) {
  const std::string key = absl::StrCat(rendezvous_prefix_, kResumeKey);
  std::string decision;  // "none", "resume <K>" or "error <message>"
  if (rank_.global_rank == 0) {
    absl::StatusOr<std::optional<ResumePoint>> point = FindResumePoint(root_, job_, iterations_);
    if (!point.ok()) {
      decision = absl::StrCat("error ", point.status().message().substr(0, 64 * 1024));
    } else if (!point->has_value()) {
      decision = "none";
    } else {
      decision = absl::StrCat("resume ", (*point)->manifest.iteration);
    }
    if (absl::Status st = store.Set(key, decision); !st.ok()) return st;
  } else {
    absl::StatusOr<std::vector<std::string>> values = store.Wait({key}, absl::Now() + timeout);
    if (!values.ok()) {
      return absl::Status(values.status().code(),
                          absl::StrCat("waiting for global rank 0's checkpoint decision: ",
                                       values.status().message()));
    }
    decision = (*values)[0];
  }
  absl::string_view rest = decision;
  if (absl::ConsumePrefix(&rest, "error ")) return absl::FailedPreconditionError(rest);
  int k = 0;
  if (!absl::ConsumePrefix(&rest, "resume ") || !absl::SimpleAtoi(rest, &k)) {
    Log(absl::StrCat("job ", job_id_, ": no checkpoint to resume under ", root_.string(),
                     "; starting at iteration 0"));
    return 0;
  }
  const fs::path dir = root_ / IterDirName(k);
  if (absl::Status st = LoadStageCheckpoints(executor, dir); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat("resuming from checkpoint: ", st.message()));
  }
  Log(absl::StrCat("job ", job_id_, ": rank ", rank_.pipeline_rank, "/", rank_.data_rank,
                   " resumed from ", dir.string(), "; starting at iteration ", k));
  return k;
}

JobCheckpointer::~JobCheckpointer() {
  if (absl::Status st = writer_thread_.Wait(); !st.ok()) {
    Log(absl::StrCat("job ", job_id_, ": ", st.message()));
  }
}

absl::Status JobCheckpointer::Write(const fs::path& dir, const std::vector<StageSnapshot>& stages,
                                    int completed, std::optional<double> loss) const {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return absl::Status(
        ec == std::errc::no_space_on_device ? absl::StatusCode::kResourceExhausted
                                            : absl::StatusCode::kFailedPrecondition,
        absl::StrCat("checkpoint: cannot create '", dir.string(), "': ", FsError(ec)));
  }
  // Incomplete until this rank's marker is back: a rewrite never looks complete half-way.
  const fs::path marker = dir / MarkerName(rank_.pipeline_rank);
  fs::remove(marker, ec);
  if (writes_manifest_) fs::remove(dir / kManifest, ec);
  if (absl::Status st = WriteStageSnapshots(stages, dir); !st.ok()) {
    // Give the space back: this checkpoint is incomplete whatever else is written into it. The
    // directory stays (other ranks may be writing into it); pruning removes it later.
    for (const StageSnapshot& s : stages) fs::remove(dir / StageCheckpointFileName(s.stage), ec);
    return absl::Status(st.code(), absl::StrCat("checkpoint: ", st.message()));
  }
  json m;
  m["job_id"] = job_id_;
  m["pipeline_rank"] = rank_.pipeline_rank;
  m["stages"] = stages_;
  m["iteration"] = completed;
  if (absl::Status st = WriteFileAtomically(marker, m.dump() + "\n"); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat("checkpoint: ", st.message()));
  }
  if (writes_manifest_) {
    CheckpointManifest manifest = job_;
    manifest.iteration = completed;
    manifest.loss = loss;
    if (absl::Status st = WriteFileAtomically(dir / kManifest, manifest.ToJson()); !st.ok()) {
      return absl::Status(st.code(), absl::StrCat("checkpoint: ", st.message()));
    }
    Log(absl::StrCat("job ", job_id_, ": checkpoint ", dir.string(), " written",
                     loss ? absl::StrCat(" (loss ", *loss, ")") : ""));
  }
  // Every writer prunes after its own write, so the last one to finish sees this checkpoint
  // complete. Pruning problems never fail the job.
  absl::StatusOr<std::vector<fs::path>> removed = PruneCheckpoints(root_, keep_);
  if (!removed.ok()) {
    Log(absl::StrCat("job ", job_id_, ": ", removed.status().message()));
  }
  return absl::OkStatus();
}

absl::Status PermanentIfDiskError(absl::Status status) {
  switch (status.code()) {
    case absl::StatusCode::kResourceExhausted:   // ENOSPC, EDQUOT, EFBIG
    case absl::StatusCode::kPermissionDenied:    // EACCES, EPERM, EROFS
    case absl::StatusCode::kNotFound:            // ENOENT, ENOTDIR
    case absl::StatusCode::kFailedPrecondition:  // the folder cannot be created
      return MarkPermanent(std::move(status));
    default:
      return status;
  }
}

absl::Status JobCheckpointer::Collect(absl::Status result, Step& step) const {
  if (result.ok()) return result;
  if (!skip_errors_) return result;
  Log(absl::StrCat(
      "job ", job_id_, ": rank ", rank_.pipeline_rank,
      ": checkpoint skipped (checkpoint.on_error: skip), training goes on: ", result.message()));
  absl::StrAppend(&step.skipped, step.skipped.empty() ? "" : "; ", result.message());
  return absl::OkStatus();
}

absl::StatusOr<JobCheckpointer::Step> JobCheckpointer::AfterIteration(const Executor& executor,
                                                                      int completed,
                                                                      std::optional<double> loss) {
  Step step;
  if (!writer_ || completed <= 0) return step;
  if (completed % every_ != 0 && completed != iterations_) {
    if (std::optional<absl::Status> done = writer_thread_.Poll(); done.has_value()) {
      if (absl::Status st = Collect(*std::move(done), step); !st.ok()) return st;
    }
    return step;
  }
  // Wait for the previous write first: never two copies of the state in memory.
  const absl::Time t0 = absl::Now();
  absl::Status previous = writer_thread_.Wait();
  const absl::Time t1 = absl::Now();
  step.waited = t1 - t0;
  if (absl::Status st = Collect(std::move(previous), step); !st.ok()) return st;
  absl::StatusOr<std::vector<StageSnapshot>> snapshot = SnapshotStages(executor);
  step.snapshot = absl::Now() - t1;
  if (!snapshot.ok()) {
    if (absl::Status st = Collect(snapshot.status(), step); !st.ok()) return st;
    step.stall = absl::Now() - t0;
    return step;
  }
  const fs::path dir = root_ / IterDirName(completed);
  auto task = [this, dir, stages = *std::move(snapshot), completed, loss] {
    absl::Status st = Write(dir, stages, completed, loss);
    if (!st.ok() && skip_errors_) {
      // A skipped checkpoint leaves no trace: it can never be complete (this rank's part is
      // missing), so its folder goes, other ranks' parts included (a rank still writing into it
      // then fails and skips too).
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
    return PermanentIfDiskError(std::move(st));
  };
  step.started = true;
  if (background_) {
    writer_thread_.Start(std::move(task));
  } else if (absl::Status st = Collect(task(), step); !st.ok()) {
    return st;
  }
  step.stall = absl::Now() - t0;
  return step;
}

absl::StatusOr<JobCheckpointer::Step> JobCheckpointer::Finish() {
  Step step;
  const absl::Time t0 = absl::Now();
  absl::Status result = writer_thread_.Wait();
  step.waited = absl::Now() - t0;
  step.stall = step.waited;
  if (absl::Status st = Collect(std::move(result), step); !st.ok()) return st;
  return step;
}

}  // namespace zpipe::worker
