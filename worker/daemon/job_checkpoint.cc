#include "worker/daemon/job_checkpoint.h"

#include <google/protobuf/util/json_util.h>

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
#include "worker/executor/checkpoint.h"

namespace zpipe::worker {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr char kFormat[] = "zpipe-checkpoint-v1";
constexpr char kManifest[] = "manifest.json";
constexpr char kResumeKey[] = "checkpoint/resume";

void Log(const std::string& line) { std::fprintf(stderr, "zpipe-worker: %s\n", line.c_str()); }

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

CheckpointManifest CheckpointManifest::ForJob(const zpipe::v1::Assignment& a,
                                              const core::Plan& plan) {
  CheckpointManifest m;
  m.job_name = a.spec().name();
  m.job_id = a.job_id();
  m.schedule = a.spec().schedule().kind();
  m.pipeline = plan.num_ranks();
  m.data = std::max(1, a.data_size());
  m.stages = plan.num_stages();
  m.optimizer = a.spec().train().optimizer().empty() ? "adamw" : a.spec().train().optimizer();
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  if (!google::protobuf::util::MessageToJsonString(a.spec().model(), &m.model_json, options).ok()) {
    m.model_json = "{}";
  }
  return m;
}

std::string DescribeMismatch(const CheckpointManifest& saved, const CheckpointManifest& job) {
  std::vector<std::string> diffs;
  const json a = json::parse(saved.model_json.empty() ? "{}" : saved.model_json, nullptr, false);
  const json b = json::parse(job.model_json.empty() ? "{}" : job.model_json, nullptr, false);
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

absl::StatusOr<fs::path> CheckpointRoot(const zpipe::v1::JobSpec& spec) {
  const std::string& name = spec.name();
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.name '", name, "' cannot name a checkpoint directory under spec.checkpoint.dir"));
  }
  return fs::path(spec.checkpoint().dir()) / name;
}

namespace {

// FindResumePoint; with `job` null, the latest complete checkpoint whatever it holds.
absl::StatusOr<std::optional<ResumePoint>> FindComplete(const fs::path& root,
                                                        const CheckpointManifest* job,
                                                        int max_iteration) {
  std::error_code ec;
  if (!fs::exists(root, ec)) return std::optional<ResumePoint>();
  std::vector<std::pair<int, fs::path>> candidates;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    absl::string_view digits = name;
    int k = 0;
    if (!absl::ConsumePrefix(&digits, "iter-") || digits.empty() ||
        !std::all_of(digits.begin(), digits.end(), absl::ascii_isdigit) ||
        !absl::SimpleAtoi(digits, &k) || k < 1 || k > max_iteration) {
      continue;
    }
    candidates.emplace_back(k, it->path());
  }
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint: cannot list '", root.string(), "': ", FsError(ec)));
  }
  std::sort(candidates.rbegin(), candidates.rend());
  for (const auto& [k, dir] : candidates) {
    absl::StatusOr<std::string> text = ReadFile(dir / kManifest);
    if (!text.ok()) {
      Log(absl::StrCat("checkpoint ", dir.string(), " is incomplete (no ", kManifest,
                       "); skipping it"));
      continue;
    }
    absl::StatusOr<CheckpointManifest> saved = CheckpointManifest::FromJson(*text);
    if (!saved.ok() || saved->iteration != k) {
      Log(absl::StrCat("checkpoint ", dir.string(), " has a bad ", kManifest, "; skipping it"));
      continue;
    }
    std::vector<std::string> missing;
    for (int r = 0; r < saved->pipeline; ++r) {
      if (!fs::exists(dir / MarkerName(r), ec)) missing.push_back(MarkerName(r));
    }
    if (!missing.empty()) {
      Log(absl::StrCat("checkpoint ", dir.string(), " is incomplete (no ",
                       absl::StrJoin(missing, ", "), "); skipping it"));
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

absl::StatusOr<std::unique_ptr<JobCheckpointer>> JobCheckpointer::Make(
    const zpipe::v1::Assignment& a, const core::Plan& plan) {
  if (a.spec().checkpoint().every() <= 0) return std::unique_ptr<JobCheckpointer>();
  absl::StatusOr<fs::path> root = CheckpointRoot(a.spec());
  if (!root.ok()) return root.status();
  std::unique_ptr<JobCheckpointer> c(new JobCheckpointer());
  c->assignment_ = a;
  c->job_ = CheckpointManifest::ForJob(a, plan);
  c->root_ = *root;
  c->every_ = a.spec().checkpoint().every();
  c->iterations_ = a.spec().train().iterations();
  c->writer_ = a.data_rank() == 0;
  c->writes_manifest_ =
      c->writer_ && plan.placement.RankOf(plan.num_stages() - 1) == a.pipeline_rank();
  for (int ch = 0; ch < plan.placement.chunks_per_rank(); ++ch) {
    c->stages_.push_back(plan.placement.StageOf(a.pipeline_rank(), ch));
  }
  if (c->writer_) {
    // Fail now, not after the first `every` iterations, when the directory is unusable.
    std::error_code ec;
    fs::create_directories(c->root_, ec);
    if (ec) {
      return absl::FailedPreconditionError(absl::StrCat("spec.checkpoint.dir: cannot create '",
                                                        c->root_.string(), "': ", FsError(ec),
                                                        " (it must be writable by every worker)"));
    }
    const fs::path probe = c->root_ / absl::StrCat(".write-test-rank-", a.pipeline_rank());
    if (absl::Status st = WriteFileAtomically(probe, ""); !st.ok()) {
      return absl::FailedPreconditionError(absl::StrCat("spec.checkpoint.dir: cannot write in '",
                                                        c->root_.string(), "': ", st.message()));
    }
    fs::remove(probe, ec);
  }
  return c;
}

absl::StatusOr<int> JobCheckpointer::Resume(Executor& executor, KeyValueStore& store,
                                            absl::Duration timeout) {
  const std::string key = absl::StrCat(assignment_.rendezvous_prefix(), kResumeKey);
  std::string decision;  // "none", "resume <K>" or "error <message>"
  if (assignment_.global_rank() == 0) {
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
    Log(absl::StrCat("job ", assignment_.job_id(), ": no checkpoint to resume under ",
                     root_.string(), "; starting at iteration 0"));
    return 0;
  }
  const fs::path dir = root_ / IterDirName(k);
  if (absl::Status st = LoadStageCheckpoints(executor, dir); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat("resuming from checkpoint: ", st.message()));
  }
  Log(absl::StrCat("job ", assignment_.job_id(), ": rank ", assignment_.pipeline_rank(), "/",
                   assignment_.data_rank(), " resumed from ", dir.string(),
                   "; starting at iteration ", k));
  return k;
}

absl::Status JobCheckpointer::AfterIteration(const Executor& executor, int completed,
                                             std::optional<double> loss) {
  if (!writer_ || completed <= 0) return absl::OkStatus();
  if (completed % every_ != 0 && completed != iterations_) return absl::OkStatus();
  const fs::path dir = root_ / IterDirName(completed);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint: cannot create '", dir.string(), "': ", FsError(ec)));
  }
  // Incomplete until this rank's marker is back: a rewrite never looks complete half-way.
  const fs::path marker = dir / MarkerName(assignment_.pipeline_rank());
  fs::remove(marker, ec);
  if (writes_manifest_) fs::remove(dir / kManifest, ec);
  if (absl::Status st = SaveStageCheckpoints(executor, dir); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat("checkpoint: ", st.message()));
  }
  json m;
  m["job_id"] = assignment_.job_id();
  m["pipeline_rank"] = assignment_.pipeline_rank();
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
    Log(absl::StrCat("job ", assignment_.job_id(), ": checkpoint ", dir.string(), " written",
                     loss ? absl::StrCat(" (loss ", *loss, ")") : ""));
  }
  return absl::OkStatus();
}

}  // namespace zpipe::worker
