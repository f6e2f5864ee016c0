#include "worker/model/boundary.h"

#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace zpipe::worker::model {
namespace {

constexpr int64_t kAlign = 8;  // the widest element size: every view of the buffer is aligned

int64_t Numel(const TensorSpec& spec) {
  int64_t n = 1;
  for (int64_t d : spec.shape) n *= d;
  return n;
}

int64_t Bytes(const TensorSpec& spec) {
  return Numel(spec) * static_cast<int64_t>(c10::elementSize(spec.dtype));
}

int64_t Aligned(int64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

std::string SpecString(const TensorSpec& spec) {
  return absl::StrCat(c10::str(c10::IntArrayRef(spec.shape)), " ", c10::toString(spec.dtype));
}

std::string TensorString(const torch::Tensor& t) {
  if (!t.defined()) return "undefined";
  return absl::StrCat(c10::str(t.sizes()), " ", c10::toString(t.scalar_type()));
}

absl::Status WireMismatch(absl::string_view where, absl::string_view what,
                          const torch::Tensor& wire, const TensorSpec& want,
                          const BoundarySpec& spec) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": the ", what, " wire is ",
                                                 TensorString(wire), ", want ", SpecString(want),
                                                 " for the boundary ", spec.ToString()));
}

}  // namespace

int BoundarySpec::num_grads() const {
  int n = 0;
  for (const BoundaryTensor& t : tensors) n += t.needs_grad ? 1 : 0;
  return n;
}

TensorSpec BoundarySpec::ActivationWire() const {
  if (tensors.size() == 1) return tensors[0].spec;
  int64_t bytes = 0;
  for (const BoundaryTensor& t : tensors) bytes += Aligned(Bytes(t.spec));
  return TensorSpec{{bytes}, torch::kUInt8};
}

TensorSpec BoundarySpec::GradientWire() const {
  int64_t elements = 0;
  std::optional<torch::Dtype> dtype;
  for (const BoundaryTensor& t : tensors) {
    if (!t.needs_grad) continue;
    if (num_grads() == 1) return t.spec;
    elements += Numel(t.spec);
    dtype = dtype ? c10::promoteTypes(*dtype, t.spec.dtype) : t.spec.dtype;
  }
  return TensorSpec{{elements}, dtype.value_or(torch::kFloat32)};
}

std::string BoundarySpec::ToString() const {
  std::vector<std::string> parts;
  for (const BoundaryTensor& t : tensors) {
    parts.push_back(absl::StrCat(SpecString(t.spec), t.needs_grad ? "" : " (no grad)"));
  }
  return absl::StrCat("(", absl::StrJoin(parts, ", "), ")");
}

absl::StatusOr<torch::Tensor> PackActivations(const BoundarySpec& spec,
                                              const std::vector<torch::Tensor>& tensors,
                                              absl::string_view where) {
  if (tensors.size() != spec.tensors.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": ", tensors.size(), " tensor(s) where the dry forward at job start "
                     "found ", spec.tensors.size(), " ", spec.ToString(),
                     "; a block must return the same number of tensors for every input"));
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorSpec& want = spec.tensors[i].spec;
    if (!tensors[i].defined() || tensors[i].sizes() != c10::IntArrayRef(want.shape)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": tensor ", i, " of the boundary is ", TensorString(tensors[i]),
          " but the dry forward at job start found ", SpecString(want),
          "; every block's output shapes must depend only on its inputs' shapes, not on the "
          "data"));
    }
  }
  if (!spec.tuple()) {
    const torch::Tensor& t = tensors[0];
    return t.scalar_type() == spec.tensors[0].spec.dtype ? t : t.to(spec.tensors[0].spec.dtype);
  }
  const TensorSpec wire_spec = spec.ActivationWire();
  torch::Tensor wire = torch::empty(
      wire_spec.shape, torch::TensorOptions().dtype(torch::kUInt8).device(tensors[0].device()));
  torch::NoGradGuard no_grad;
  int64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorSpec& want = spec.tensors[i].spec;
    const int64_t bytes = Bytes(want);
    wire.narrow(0, offset, bytes).view(want.dtype).view(want.shape).copy_(tensors[i]);
    offset += Aligned(bytes);
  }
  return wire;
}

absl::StatusOr<std::vector<torch::Tensor>> UnpackActivations(const BoundarySpec& spec,
                                                             const torch::Tensor& wire,
                                                             absl::string_view where) {
  const TensorSpec want = spec.ActivationWire();
  if (!wire.defined() || wire.sizes() != c10::IntArrayRef(want.shape) ||
      (spec.tuple() && wire.scalar_type() != torch::kUInt8)) {
    return WireMismatch(where, "activation", wire, want, spec);
  }
  if (!spec.tuple()) return std::vector<torch::Tensor>{wire};
  const torch::Tensor bytes = wire.contiguous();
  std::vector<torch::Tensor> out;
  int64_t offset = 0;
  for (const BoundaryTensor& t : spec.tensors) {
    const int64_t n = Bytes(t.spec);
    out.push_back(bytes.narrow(0, offset, n).view(t.spec.dtype).view(t.spec.shape));
    offset += Aligned(n);
  }
  return out;
}

absl::StatusOr<std::vector<torch::Tensor>> GradientViews(const BoundarySpec& spec,
                                                         const torch::Tensor& wire,
                                                         absl::string_view where) {
  const TensorSpec want = spec.GradientWire();
  if (!wire.defined() || wire.sizes() != c10::IntArrayRef(want.shape)) {
    return WireMismatch(where, "gradient", wire, want, spec);
  }
  if (spec.num_grads() == 1) return std::vector<torch::Tensor>{wire};
  std::vector<torch::Tensor> out;
  int64_t offset = 0;
  for (const BoundaryTensor& t : spec.tensors) {
    if (!t.needs_grad) continue;
    const int64_t n = Numel(t.spec);
    out.push_back(wire.narrow(0, offset, n).view(t.spec.shape));
    offset += n;
  }
  return out;
}

absl::StatusOr<std::vector<torch::Tensor>> InputsFromActivations(
    const BoundarySpec& spec, const std::vector<torch::Tensor>& parts, torch::Device device,
    torch::Tensor* leaf, absl::string_view where) {
  if (parts.size() != spec.tensors.size()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", parts.size(),
                                                   " input tensor(s) for the boundary ",
                                                   spec.ToString()));
  }
  std::vector<torch::Tensor> args(parts.size());
  *leaf = torch::Tensor();
  if (spec.num_grads() > 0) {
    const TensorSpec wire = spec.GradientWire();
    torch::Tensor flat =
        torch::empty(wire.shape, torch::TensorOptions().dtype(wire.dtype).device(device));
    {
      torch::NoGradGuard no_grad;
      absl::StatusOr<std::vector<torch::Tensor>> views = GradientViews(spec, flat, where);
      if (!views.ok()) return views.status();
      size_t j = 0;
      for (size_t i = 0; i < parts.size(); ++i) {
        if (spec.tensors[i].needs_grad) (*views)[j++].copy_(parts[i]);
      }
    }
    flat.requires_grad_(true);
    absl::StatusOr<std::vector<torch::Tensor>> views = GradientViews(spec, flat, where);
    if (!views.ok()) return views.status();
    size_t j = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      if (!spec.tensors[i].needs_grad) continue;
      const torch::Tensor& v = (*views)[j++];
      const torch::Dtype dtype = spec.tensors[i].spec.dtype;
      args[i] = v.scalar_type() == dtype ? v : v.to(dtype);
    }
    *leaf = flat;
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    if (spec.tensors[i].needs_grad) continue;
    args[i] = parts[i].detach().to(device, spec.tensors[i].spec.dtype, /*non_blocking=*/false,
                                   /*copy=*/true);
  }
  return args;
}

absl::StatusOr<GradRoot> MakeGradRoot(const BoundarySpec& spec,
                                      const std::vector<torch::Tensor>& outputs,
                                      const torch::Tensor& grad_wire, absl::string_view where) {
  if (outputs.size() != spec.tensors.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": ", outputs.size(), " output tensor(s) for the boundary ", spec.ToString()));
  }
  absl::StatusOr<std::vector<torch::Tensor>> grads = GradientViews(spec, grad_wire, where);
  if (!grads.ok()) return grads.status();
  std::vector<torch::Tensor> roots;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (spec.tensors[i].needs_grad) roots.push_back(outputs[i]);
  }
  if (roots.size() == 1) {
    return GradRoot{roots[0], (*grads)[0].to(roots[0].options(), /*non_blocking=*/false,
                                             /*copy=*/true)};
  }
  torch::Tensor root;
  for (size_t j = 0; j < roots.size(); ++j) {
    if (!roots[j].requires_grad()) continue;  // nothing before it to reach
    const torch::Tensor g =
        (*grads)[j].to(roots[j].options(), /*non_blocking=*/false, /*copy=*/true);
    const torch::Tensor term = (roots[j] * g).sum();
    root = root.defined() ? root + term : term;
  }
  if (!root.defined()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": no output of the boundary ", spec.ToString(), " is part of the graph"));
  }
  return GradRoot{root, torch::Tensor()};
}

}  // namespace zpipe::worker::model
