// The few LibTorch API differences between Debian's LibTorch 1.13 (CPU) and the CUDA LibTorch 2.x
// of GPU images, in one place. Everything else in the worker builds unchanged against both.
#ifndef ZPIPE_WORKER_MODEL_TORCH_COMPAT_H_
#define ZPIPE_WORKER_MODEL_TORCH_COMPAT_H_

#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/function.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <string>

#define ZPIPE_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||        \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace zpipe::worker::model {

// "1.13.0", "2.11.0".
inline std::string TorchVersion() { return TORCH_VERSION; }

// Whether tensor hooks (Tensor::register_hook, retain_grad) sit on autograd node `node`. LibTorch
// 2.x keeps them apart from Node::pre_hooks() (tensor_pre_hooks(), retains_grad_hooks(); the
// engine runs them before the pre-hooks); 1.x keeps them among the pre-hooks.
inline bool HasTensorHooks(torch::autograd::Node& node) {
#if ZPIPE_TORCH_AT_LEAST(2, 0)
  return !node.tensor_pre_hooks().empty() || !node.retains_grad_hooks().empty();
#else
  (void)node;
  return false;
#endif
}

// Mixed precision for the forward passes inside its scope: ops on `device`'s type that autocast
// lists run in `dtype` (matrix products, linear, attention), the rest in fp32; parameters stay
// fp32 (the master weights). Leaving the outermost scope drops autocast's cache of cast weights,
// so a later optimizer step is never hidden behind a stale cast. Disabled scopes do nothing.
class AutocastScope {
 public:
  AutocastScope(torch::Device device, torch::Dtype dtype, bool enabled)
      : type_(device.type()), enabled_(enabled) {
    if (!enabled_) return;
    was_enabled_ = IsEnabled(type_);
    was_dtype_ = Dtype(type_);
    Set(type_, true, dtype);
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (!enabled_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    Set(type_, was_enabled_, was_dtype_);
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
#if ZPIPE_TORCH_AT_LEAST(2, 4)
  static bool IsEnabled(c10::DeviceType t) { return at::autocast::is_autocast_enabled(t); }
  static at::ScalarType Dtype(c10::DeviceType t) { return at::autocast::get_autocast_dtype(t); }
  static void Set(c10::DeviceType t, bool on, at::ScalarType dtype) {
    at::autocast::set_autocast_dtype(t, dtype);
    at::autocast::set_autocast_enabled(t, on);
  }
#else
  static bool IsEnabled(c10::DeviceType t) {
    return t == c10::DeviceType::CUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
  }
  static at::ScalarType Dtype(c10::DeviceType t) {
    return t == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype()
                                      : at::autocast::get_autocast_cpu_dtype();
  }
  static void Set(c10::DeviceType t, bool on, at::ScalarType dtype) {
    if (t == c10::DeviceType::CUDA) {
      at::autocast::set_autocast_gpu_dtype(dtype);
      at::autocast::set_enabled(on);
    } else {
      at::autocast::set_autocast_cpu_dtype(dtype);
      at::autocast::set_cpu_enabled(on);
    }
  }
#endif

  c10::DeviceType type_;
  bool enabled_;
  bool was_enabled_ = false;
  at::ScalarType was_dtype_ = at::kBFloat16;
};

}  // namespace zpipe::worker::model

#endif  // ZPIPE_WORKER_MODEL_TORCH_COMPAT_H_
