#include "worker/executor/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <type_traits>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace zpipe::worker {
namespace {

namespace fs = std::filesystem;

constexpr char kFormat[] = "zpipe-stage-checkpoint-v1";

absl::Status ErrnoError(int err, absl::string_view what, const fs::path& path) {
  const std::string msg = absl::StrCat(what, " '", path.string(), "': ", std::strerror(err));
  switch (err) {
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(msg);
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(msg);
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      return absl::ResourceExhaustedError(msg);
    default:
      return absl::InternalError(msg);
  }
}

absl::Status FsyncPath(const fs::path& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, "open", path);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some filesystems refuse fsync on a directory; the rename is still atomic there.
  if (rc != 0 && err != EINVAL && err != EBADF) return ErrnoError(err, "fsync", path);
  return absl::OkStatus();
}

// Where a file's bytes go: sink(data, n) always returns n.
using Sink = std::function<size_t(const void*, size_t)>;

// Writes what `produce` passes to its sink into a temporary file beside `path`, then renames it
// over `path`; the temporary file is removed on any error. The sink reports success to `produce`
// whatever happens: after the first failed write it records the error and drops the rest. So
// LibTorch's archive writer never sees a failed write (in LibTorch 1.13 it then throws again from
// its destructor, which ends the process) and streams straight to the file, with no copy of the
// archive in memory. An exception from `produce` is an Internal error naming `path`.
absl::Status WriteAtomicallyWith(const fs::path& path,
                                 const std::function<void(const Sink&)>& produce) {
  static std::atomic<uint64_t> counter{0};
  const fs::path tmp = fs::path(path).concat(absl::StrCat(".tmp.", ::getpid(), ".", counter++));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError(errno, "cannot write", path);
  int write_errno = 0;
  const Sink sink = [&](const void* data, size_t n) -> size_t {
    const char* p = static_cast<const char*>(data);
    size_t left = write_errno == 0 ? n : 0;
    while (left > 0) {
      const ssize_t w = ::write(fd, p, left);
      if (w < 0) {
        if (errno == EINTR) continue;
        write_errno = errno;
        break;
      }
      p += w;
      left -= static_cast<size_t>(w);
    }
    return n;
  };
  absl::Status st;
  try {
    produce(sink);
  } catch (const std::bad_alloc&) {
    st = absl::ResourceExhaustedError(absl::StrCat("out of memory writing '", path.string(), "'"));
  } catch (const std::exception& e) {
    st = absl::InternalError(absl::StrCat("writing '", path.string(), "': ", e.what()));
  }
  if (st.ok() && write_errno != 0) st = ErrnoError(write_errno, "cannot write", path);
  if (st.ok() && ::fsync(fd) != 0) st = ErrnoError(errno, "fsync", path);
  if (::close(fd) != 0 && st.ok()) st = ErrnoError(errno, "cannot write", path);
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    st = ErrnoError(errno, "cannot rename into", path);
  }
  if (!st.ok()) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    return st;
  }
  return FsyncPath(path.has_parent_path() ? path.parent_path() : fs::path("."), O_RDONLY);
}

std::string OptimizerKind(const torch::optim::Optimizer* opt) {
  if (opt == nullptr) return "none";
  if (dynamic_cast<const torch::optim::AdamW*>(opt) != nullptr) return "adamw";
  if (dynamic_cast<const torch::optim::Adam*>(opt) != nullptr) return "adam";
  if (dynamic_cast<const torch::optim::SGD*>(opt) != nullptr) return "sgd";
  return "unknown";
}

// The optimizer state of one parameter, whatever the kind (unused fields undefined).
using ParamState = StageSnapshot::State;

template <typename State>
void ReadAdamState(const State& s, ParamState& out) {
  out.step = s.step();
  out.exp_avg = s.exp_avg();
  out.exp_avg_sq = s.exp_avg_sq();
  out.max_exp_avg_sq = s.max_exp_avg_sq();
}

template <typename State>
std::unique_ptr<torch::optim::OptimizerParamState> MakeAdamState(const ParamState& in) {
  auto s = std::make_unique<State>();
  s->step(*in.step);
  s->exp_avg(in.exp_avg);
  s->exp_avg_sq(in.exp_avg_sq);
  if (in.max_exp_avg_sq.defined()) s->max_exp_avg_sq(in.max_exp_avg_sq);
  return s;
}

std::optional<ParamState> GetState(const torch::optim::Optimizer& opt, const torch::Tensor& p) {
  const auto& states = opt.state();
  auto it = states.find(OptimizerStateKey(p));
  if (it == states.end() || it->second == nullptr) return std::nullopt;
  ParamState out;
  const torch::optim::OptimizerParamState* s = it->second.get();
  if (auto* a = dynamic_cast<const torch::optim::AdamWParamState*>(s)) {
    ReadAdamState(*a, out);
  } else if (auto* b = dynamic_cast<const torch::optim::AdamParamState*>(s)) {
    ReadAdamState(*b, out);
  } else if (auto* c = dynamic_cast<const torch::optim::SGDParamState*>(s)) {
    out.momentum_buffer = c->momentum_buffer();
  } else {
    return std::nullopt;
  }
  return out;
}

// One stage file, read and checked, ready to apply.
struct LoadedStage {
  model::Stage* stage = nullptr;
  std::vector<torch::Tensor> params;              // by params() index
  std::vector<std::optional<ParamState>> states;  // by params() index
};

std::string ShapeString(const torch::Tensor& t) {
  return absl::StrCat("[", absl::StrJoin(t.sizes(), ", "), "] ", std::string(t.dtype().name()));
}

// Loads `file` into `archive`; `where` names it in errors.
absl::Status LoadArchive(const fs::path& file, const std::string& where,
                         torch::serialize::InputArchive& archive) {
  std::error_code ec;
  if (!fs::exists(file, ec)) {
    return absl::NotFoundError(absl::StrCat("checkpoint file '", file.string(), "' is missing"));
  }
  try {
    archive.load_from(file.string());
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat(where, " is unreadable: ", e.what()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::pair<std::string, torch::Tensor>>> ReadStageParametersImpl(
    const fs::path& file) {
  const std::string where = absl::StrCat("checkpoint '", file.string(), "'");
  torch::serialize::InputArchive archive;
  if (absl::Status st = LoadArchive(file, where, archive); !st.ok()) return st;
  c10::IValue format, names_value;
  if (!archive.try_read("format", format) || !format.isString() ||
      format.toStringRef() != kFormat) {
    return absl::InvalidArgumentError(absl::StrCat(where, " is not a ZeroPipe stage checkpoint"));
  }
  std::vector<std::string> names;
  if (archive.try_read("names", names_value) && names_value.isString() &&
      !names_value.toStringRef().empty()) {
    names = absl::StrSplit(names_value.toStringRef(), '\n');
  }
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (size_t i = 0; i < names.size(); ++i) {
    torch::Tensor value;
    if (!archive.try_read("param_" + std::to_string(i), value)) {
      return absl::DataLossError(absl::StrCat(where, " lacks the tensor of '", names[i], "'"));
    }
    out.emplace_back(names[i], value);
  }
  return out;
}

std::optional<std::string> ReadString(torch::serialize::InputArchive& archive,
                                      const std::string& key) {
  c10::IValue v;
  if (!archive.try_read(key, v) || !v.isString()) return std::nullopt;
  return v.toStringRef();
}

// The archive is a checkpoint of `stage` with optimizer state of `optimizer_kind`.
absl::Status CheckStageHeader(torch::serialize::InputArchive& archive, const model::Stage& stage,
                              const std::string& optimizer_kind, const std::string& where) {
  if (ReadString(archive, "format") != std::string(kFormat)) {
    return absl::InvalidArgumentError(absl::StrCat(where, " is not a ZeroPipe stage checkpoint"));
  }
  c10::IValue stage_value;
  if (!archive.try_read("stage", stage_value) || !stage_value.isInt() ||
      stage_value.toInt() != stage.stage()) {
    return absl::InvalidArgumentError(absl::StrCat(where, " holds another stage"));
  }
  const std::string saved_optimizer = ReadString(archive, "optimizer").value_or("?");
  if (saved_optimizer != optimizer_kind) {
    return absl::InvalidArgumentError(absl::StrCat(where, " holds optimizer state of '",
                                                   saved_optimizer, "', this job uses '",
                                                   optimizer_kind, "'"));
  }
  return absl::OkStatus();
}

// The optimizer state saved for parameter `i` (named `name`), or nullopt when none was saved.
absl::StatusOr<std::optional<ParamState>> ReadParamState(torch::serialize::InputArchive& archive,
                                                         const std::string& i,
                                                         const std::string& optimizer_kind,
                                                         const std::string& name,
                                                         const std::string& where) {
  ParamState state;
  bool any = false;
  c10::IValue step;
  if (archive.try_read("step_" + i, step) && step.isInt()) {
    state.step = step.toInt();
    any = true;
  }
  any |= archive.try_read("exp_avg_" + i, state.exp_avg);
  any |= archive.try_read("exp_avg_sq_" + i, state.exp_avg_sq);
  archive.try_read("max_exp_avg_sq_" + i, state.max_exp_avg_sq);
  any |= archive.try_read("momentum_buffer_" + i, state.momentum_buffer);
  if (any && (optimizer_kind == "adam" || optimizer_kind == "adamw") &&
      (!state.step || !state.exp_avg.defined() || !state.exp_avg_sq.defined())) {
    return absl::DataLossError(
        absl::StrCat(where, ": incomplete optimizer state for '", name, "'"));
  }
  if (!any) return std::nullopt;
  return std::optional<ParamState>(std::move(state));
}

// Every saved parameter `names` is one of the stage's `infos`.
absl::Status CheckNoExtraParams(const std::vector<std::string>& names,
                                const std::vector<model::ParamInfo>& infos,
                                const std::string& where) {
  if (names.size() == infos.size()) return absl::OkStatus();
  std::set<std::string> here;
  for (const model::ParamInfo& info : infos) here.insert(info.name);
  for (const std::string& n : names) {
    if (!here.count(n)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, " holds parameter '", n, "', which this job's stage lacks (the model differs)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<LoadedStage> ReadStage(model::Stage& stage, const std::string& optimizer_kind,
                                      const fs::path& file) {
  const std::string where =
      absl::StrCat("checkpoint '", file.string(), "' (stage ", stage.stage(), ")");
  torch::serialize::InputArchive archive;
  if (absl::Status st = LoadArchive(file, where, archive); !st.ok()) return st;
  if (absl::Status st = CheckStageHeader(archive, stage, optimizer_kind, where); !st.ok()) {
    return st;
  }
  const std::string names_joined = ReadString(archive, "names").value_or("");
  std::vector<std::string> names;
  if (!names_joined.empty()) names = absl::StrSplit(names_joined, '\n');
  std::map<std::string, int> saved_index;
  for (int i = 0; i < static_cast<int>(names.size()); ++i) saved_index[names[i]] = i;

  const std::vector<model::ParamInfo>& infos = stage.params();
  LoadedStage out;
  out.stage = &stage;
  for (const model::ParamInfo& info : infos) {
    auto it = saved_index.find(info.name);
    if (it == saved_index.end()) {
      return absl::InvalidArgumentError(absl::StrCat(where, " has no parameter '", info.name,
                                                     "' (it holds ", names.size(),
                                                     " parameters; the model differs)"));
    }
    const std::string i = std::to_string(it->second);
    torch::Tensor value;
    if (!archive.try_read("param_" + i, value)) {
      return absl::DataLossError(absl::StrCat(where, " lacks the tensor of '", info.name, "'"));
    }
    if (value.sizes() != info.tensor.sizes() || value.dtype() != info.tensor.dtype()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": parameter '", info.name, "' is ",
                                                     ShapeString(value), " there, ",
                                                     ShapeString(info.tensor), " here"));
    }
    out.params.push_back(value);
    absl::StatusOr<std::optional<ParamState>> state =
        ReadParamState(archive, i, optimizer_kind, info.name, where);
    if (!state.ok()) return state.status();
    out.states.push_back(*std::move(state));
  }
  if (absl::Status st = CheckNoExtraParams(names, infos, where); !st.ok()) return st;
  return out;
}

void Apply(LoadedStage& loaded, torch::optim::Optimizer* opt, const std::string& kind) {
  torch::NoGradGuard no_grad;
  const std::vector<model::ParamInfo>& infos = loaded.stage->params();
  for (size_t k = 0; k < infos.size(); ++k) {
    const torch::Tensor& p = infos[k].tensor;
    p.copy_(loaded.params[k]);
    if (opt == nullptr) continue;
    auto& states = opt->state();
    const auto key = OptimizerStateKey(p);
    if (!loaded.states[k]) {
      states.erase(key);
      continue;
    }
    ParamState s = *loaded.states[k];
    auto to = [&](torch::Tensor& t) {
      if (t.defined()) t = t.to(p.device()).contiguous();
    };
    to(s.exp_avg);
    to(s.exp_avg_sq);
    to(s.max_exp_avg_sq);
    to(s.momentum_buffer);
    if (kind == "adamw") {
      states[key] = MakeAdamState<torch::optim::AdamWParamState>(s);
    } else if (kind == "adam") {
      states[key] = MakeAdamState<torch::optim::AdamParamState>(s);
    } else if (kind == "sgd") {
      auto sgd = std::make_unique<torch::optim::SGDParamState>();
      sgd->momentum_buffer(s.momentum_buffer);
      states[key] = std::move(sgd);
    }
  }
}

}  // namespace

std::string StageCheckpointFileName(int stage) { return absl::StrCat("stage-", stage, ".pt"); }

absl::StatusOr<std::vector<std::pair<std::string, torch::Tensor>>> ReadStageParameters(
    const std::filesystem::path& file) {
  return ReadStageParametersImpl(file);
}

absl::Status WriteFileAtomically(const fs::path& path, absl::string_view contents) {
  return WriteAtomicallyWith(path, [&](const Sink& sink) {
    if (!contents.empty()) sink(contents.data(), contents.size());
  });
}

int64_t StageSnapshot::bytes() const {
  int64_t n = 0;
  auto add = [&](const torch::Tensor& t) {
    if (t.defined()) n += static_cast<int64_t>(t.nbytes());
  };
  for (const torch::Tensor& t : params) add(t);
  for (const std::optional<State>& s : states) {
    if (!s) continue;
    add(s->exp_avg);
    add(s->exp_avg_sq);
    add(s->max_exp_avg_sq);
    add(s->momentum_buffer);
  }
  return n;
}

absl::StatusOr<std::vector<StageSnapshot>> SnapshotStages(const Executor& executor) {
  const torch::optim::Optimizer* opt = executor.optimizer();
  const std::string kind = OptimizerKind(opt);
  // A copy that shares nothing with `t`: .cpu() alone returns `t` itself for a CPU tensor.
  auto copy = [](const torch::Tensor& t) {
    return t.defined() ? t.detach().to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true)
                       : torch::Tensor();
  };
  std::vector<StageSnapshot> out;
  try {
    torch::NoGradGuard no_grad;
    for (const auto& stage : executor.stages()) {
      StageSnapshot snap;
      snap.stage = stage->stage();
      snap.optimizer = kind;
      for (const model::ParamInfo& info : stage->params()) {
        snap.names.push_back(info.name);
        snap.params.push_back(copy(info.tensor));
        std::optional<ParamState> s;
        if (opt != nullptr) s = GetState(*opt, info.tensor);
        if (s) {
          s->exp_avg = copy(s->exp_avg);
          s->exp_avg_sq = copy(s->exp_avg_sq);
          s->max_exp_avg_sq = copy(s->max_exp_avg_sq);
          s->momentum_buffer = copy(s->momentum_buffer);
        }
        snap.states.push_back(std::move(s));
      }
      out.push_back(std::move(snap));
    }
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        "checkpoint: out of host memory copying the training state for a checkpoint");
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("checkpoint: copying the training state to host memory: ", e.what()));
  }
  return out;
}

absl::Status WriteStageSnapshots(const std::vector<StageSnapshot>& snapshots, const fs::path& dir) {
  for (const StageSnapshot& snap : snapshots) {
    const fs::path file = dir / StageCheckpointFileName(snap.stage);
    // The archive holds references to the snapshot's tensors; save_to streams it to the file.
    torch::serialize::OutputArchive archive;
    try {
      archive.write("format", c10::IValue(std::string(kFormat)));
      archive.write("stage", c10::IValue(static_cast<int64_t>(snap.stage)));
      archive.write("optimizer", c10::IValue(snap.optimizer));
      for (size_t k = 0; k < snap.params.size(); ++k) {
        const std::string i = std::to_string(k);
        archive.write("param_" + i, snap.params[k]);
        if (k >= snap.states.size() || !snap.states[k]) continue;
        const ParamState& s = *snap.states[k];
        if (s.step) archive.write("step_" + i, c10::IValue(*s.step));
        auto put = [&](const std::string& key, const torch::Tensor& t) {
          if (t.defined()) archive.write(key + i, t, /*is_buffer=*/true);
        };
        put("exp_avg_", s.exp_avg);
        put("exp_avg_sq_", s.exp_avg_sq);
        put("max_exp_avg_sq_", s.max_exp_avg_sq);
        put("momentum_buffer_", s.momentum_buffer);
      }
      archive.write("names", c10::IValue(absl::StrJoin(snap.names, "\n")));
    } catch (const std::exception& e) {
      return absl::InternalError(absl::StrCat("serializing '", file.string(), "': ", e.what()));
    }
    absl::Status st = WriteAtomicallyWith(file, [&](const Sink& sink) { archive.save_to(sink); });
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status SaveStageCheckpoints(const Executor& executor, const fs::path& dir) {
  absl::StatusOr<std::vector<StageSnapshot>> snapshots = SnapshotStages(executor);
  if (!snapshots.ok()) return snapshots.status();
  return WriteStageSnapshots(*snapshots, dir);
}

absl::Status LoadStageCheckpoints(Executor& executor, const fs::path& dir) {
  torch::optim::Optimizer* opt = executor.optimizer();
  const std::string kind = OptimizerKind(opt);
  std::vector<LoadedStage> loaded;
  for (const auto& stage : executor.stages()) {
    absl::StatusOr<LoadedStage> one =
        ReadStage(*stage, kind, dir / StageCheckpointFileName(stage->stage()));
    if (!one.ok()) return one.status();
    loaded.push_back(*std::move(one));
  }
  try {
    for (LoadedStage& one : loaded) Apply(one, opt, kind);
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("restoring checkpoint from '", dir.string(), "': ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace zpipe::worker
