#include "worker/model/torchscript.h"

#include <torch/csrc/jit/runtime/graph_executor.h>

#include <exception>
#include <filesystem>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/model/torchscript_archive.h"

namespace zpipe::worker::model {
namespace {

std::string Shape(const torch::Tensor& t) { return c10::str(t.sizes()); }

absl::Status BadFile(const std::string& path, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("model ", path, ": ", why));
}

// torch.jit.load failed. A file whose format version is above what this LibTorch reads was
// saved by a newer torch: LibTorch's own message then says to upgrade PyTorch, which is not what
// the user of a worker can do, so the error says which versions meet and what to do instead.
absl::Status UnreadableModel(const std::string& path, absl::string_view what) {
  absl::StatusOr<int64_t> version = TorchScriptFileFormatVersion(path);
  if (version.ok() && *version > MaxReadableFileFormatVersion()) {
    return BadFile(
        path, absl::StrCat("written by a newer torch than this worker's (file format version ",
                           *version, "; this worker's LibTorch is ", LibTorchVersion(),
                           " and reads versions up to ", MaxReadableFileFormatVersion(),
                           "): script and save the model with torch ", LibTorchVersion(),
                           " (the project's venv, scripts/find-python) or older, or run workers "
                           "built with a LibTorch as new as the torch that saved it"));
  }
  return BadFile(path,
                  absl::StrCat("not a TorchScript file torch.jit.load can read (", what, ")"));
}

std::string Count(size_t n) {
  return n == 1 ? "one tensor" : absl::StrCat("a Tuple of ", n, " tensors");
}

}  // namespace

TorchScriptModel::TorchScriptModel(std::string path, torch::jit::Module module,
                                   std::vector<std::string> names,
                                   std::vector<torch::jit::Module> blocks)
    : BlockModel(std::move(path), std::move(names)),
      module_(std::move(module)),
      blocks_(std::move(blocks)) {}

std::vector<std::pair<std::string, torch::Tensor>> TorchScriptModel::BlockParameters(int k) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& p : blocks_[k].named_parameters(/*recurse=*/true)) {
    out.emplace_back(absl::StrCat(block_name(k), ".", p.name), p.value);
  }
  return out;
}

std::vector<torch::Tensor> TorchScriptModel::BlockBuffers(int k) {
  std::vector<torch::Tensor> out;
  for (const torch::Tensor& b : blocks_[k].buffers(/*recurse=*/true)) out.push_back(b);
  return out;
}

absl::StatusOr<std::vector<torch::Tensor>> TorchScriptModel::RunBlock(
    int k, const std::vector<torch::Tensor>& args) {
  torch::jit::IValue out =
      blocks_[k].forward(std::vector<torch::jit::IValue>(args.begin(), args.end()));
  std::vector<torch::Tensor> ys;
  if (out.isTensor()) {
    ys.push_back(out.toTensor());
    return ys;
  }
  if (out.isTuple()) {
    for (const torch::jit::IValue& e : out.toTupleRef().elements()) {
      if (!e.isTensor()) {
        return absl::InvalidArgumentError(absl::StrCat(
            BlockLabel(k, block_name(k)), " returned a Tuple holding a ", e.tagKind(),
            "; every block must return one tensor or a tuple of tensors"));
      }
      ys.push_back(e.toTensor());
    }
    if (!ys.empty()) return ys;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      BlockLabel(k, block_name(k)), " returned a ", out.tagKind(),
      "; every block must return one tensor or a tuple of tensors"));
}

// Whether block k's forward takes `n` positional tensors (the previous block's output).
absl::Status TorchScriptModel::CheckArity(int k, size_t n) {
  const c10::FunctionSchema& schema = blocks_[k].get_method("forward").function().getSchema();
  size_t total = schema.arguments().size() - 1, required = 0;  // minus self
  for (size_t i = 1; i < schema.arguments().size(); ++i) {
    if (!schema.arguments()[i].default_value()) ++required;
  }
  if (n >= required && n <= total) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      BlockLabel(k, block_name(k)), " takes ", required == total ? "" : "at least ",
      required == 1 && total == 1 ? "one tensor" : absl::StrCat(required, " tensor(s)"),
      " but block ", k - 1, " returns ", Count(n),
      "; a block takes the previous block's tensors as its positional arguments (its schema is ",
      c10::str(schema), ")"));
}

absl::StatusOr<std::shared_ptr<TorchScriptModel>> TorchScriptModel::Load(const std::string& path,
                                                                         int seq_len,
                                                                         int microbatch_size) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return absl::NotFoundError(absl::StrCat("model ", path, ": no such file"));
  }
  if (seq_len < 0 || microbatch_size < 1) {
    return absl::InvalidArgumentError("model: seq_len must be >= 0, microbatch_size >= 1");
  }
  torch::jit::setGraphExecutorOptimize(false);
  torch::jit::Module module;
  try {
    module = torch::jit::load(path, torch::kCPU);
  } catch (const c10::Error& e) {
    return UnreadableModel(path, e.what_without_backtrace());
  } catch (const std::exception& e) {
    return UnreadableModel(path, e.what());
  }
  std::vector<std::string> names;
  std::vector<torch::jit::Module> blocks;
  for (const auto& child : module.named_children()) {
    names.push_back(child.name);
    blocks.push_back(child.value);
  }
  if (blocks.empty()) {
    return BadFile(path,
                    "has no blocks; save a torch.nn.Sequential whose children are the blocks");
  }
  module.train();
  auto m = std::shared_ptr<TorchScriptModel>(
      new TorchScriptModel(path, module, std::move(names), std::move(blocks)));
  if (absl::Status st = m->CheckNoSharedParameters(); !st.ok()) return st;
  for (int k = 0; k < m->num_blocks(); ++k) {
    const std::string label = BlockLabel(k, m->block_name(k));
    auto method = m->block(k).find_method("forward");
    if (!method) return BadFile(path, absl::StrCat(label, " has no forward"));
    const c10::FunctionSchema& schema = method->function().getSchema();
    if (schema.arguments().size() < 2 || schema.returns().size() != 1) {
      return BadFile(path, absl::StrCat(label,
                                         ": forward must take tensors and return one tensor or "
                                         "a tuple of tensors (its schema is ",
                                         c10::str(schema), ")"));
    }
  }
  if (absl::Status st = m->Probe(seq_len, microbatch_size); !st.ok()) return st;
  return m;
}

absl::Status ExportTorchScript(TorchScriptModel& model,
                               const std::vector<std::pair<std::string, torch::Tensor>>& values,
                               const std::string& out) {
  std::map<std::string, torch::Tensor> by_name(values.begin(), values.end());
  try {
    torch::NoGradGuard no_grad;
    for (const auto& p : model.module().named_parameters(/*recurse=*/true)) {
      auto it = by_name.find(p.name);
      if (it == by_name.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("export: no trained value for parameter '", p.name, "'"));
      }
      if (it->second.sizes() != p.value.sizes()) {
        return absl::InvalidArgumentError(absl::StrCat("export: parameter '", p.name, "' is ",
                                                       Shape(p.value), " in the model, ",
                                                       Shape(it->second), " trained"));
      }
      p.value.copy_(it->second);
    }
    model.module().save(out);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("export to ", out, ": ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

}  // namespace zpipe::worker::model
