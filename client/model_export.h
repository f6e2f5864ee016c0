// Getting a job's trained model back: `zpipe export` and `zpipe run --out` hand the work to
// `zpipe-worker export` (the worker binary links LibTorch; the CLI does not), which reads the
// latest complete checkpoint under checkpoint.dir/NAME and writes a TorchScript module (user
// models) or a state dict (built-in GPT).
#ifndef ZPIPE_CLIENT_MODEL_EXPORT_H_
#define ZPIPE_CLIENT_MODEL_EXPORT_H_

#include <filesystem>
#include <string>

#include "absl/status/statusor.h"

namespace zpipe::cli {

// Runs `worker_bin export --checkpoint ROOT -o OUT`; returns its report line, or an error with
// what it printed.
absl::StatusOr<std::string> ExportModel(const std::string& worker_bin,
                                        const std::filesystem::path& checkpoint_root,
                                        const std::filesystem::path& out);

}  // namespace zpipe::cli

#endif  // ZPIPE_CLIENT_MODEL_EXPORT_H_
