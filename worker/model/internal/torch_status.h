// Converting LibTorch exceptions into absl statuses at the stage boundary, and the seeded
// parameter initialisation shared by the stage kinds.
#ifndef ZPIPE_WORKER_MODEL_INTERNAL_TORCH_STATUS_H_
#define ZPIPE_WORKER_MODEL_INTERNAL_TORCH_STATUS_H_

#include <torch/torch.h>

#include <cstdint>
#include <exception>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace zpipe::worker::model::internal {

// Runs `fn` (returning Status or StatusOr<T>); a c10::Error or std::exception becomes Internal,
// prefixed with "stage S <op> microbatch I".
template <typename Fn>
auto GuardTorch(int stage, absl::string_view op, int mb, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("stage ", stage, " ", op, " microbatch ", mb,
                                            ": libtorch: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("stage ", stage, " ", op, " microbatch ", mb, ": ", e.what()));
  }
}

inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// Seed of one parameter: depends only on the job seed and the parameter's global name (which
// carries the global layer index), never on creation order.
inline uint64_t ParamSeed(uint64_t seed, absl::string_view name) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return SplitMix64(SplitMix64(seed) ^ h);
}

// A leaf parameter N(0, std^2) (or filled with `fill` when std == 0), drawn in float32 on the CPU
// from its own generator so values do not depend on device or dtype.
inline torch::Tensor SeededParam(uint64_t seed, absl::string_view name, at::IntArrayRef shape,
                                 double std, double fill, torch::Device device,
                                 torch::Dtype dtype) {
  torch::NoGradGuard no_grad;
  torch::Tensor t;
  if (std > 0) {
    at::Generator gen = at::detail::createCPUGenerator(ParamSeed(seed, name));
    t = torch::randn(shape, gen, torch::TensorOptions().dtype(torch::kFloat32)).mul_(std);
  } else {
    t = torch::full(shape, fill, torch::TensorOptions().dtype(torch::kFloat32));
  }
  t = t.to(device, dtype).contiguous();
  t.set_requires_grad(true);
  return t;
}

}  // namespace zpipe::worker::model::internal

#endif  // ZPIPE_WORKER_MODEL_INTERNAL_TORCH_STATUS_H_
