// The file format version of a TorchScript file, read without LibTorch's loader.
//
// torch.jit.save writes a zip archive whose `<root>/version` record (`<root>/.data/version` in
// some releases) holds the file format version as ASCII digits; LibTorch's reader refuses a file
// whose version is above caffe2::serialize::kMaxSupportedFileFormatVersion before it reads
// anything else, and says only that "your PyTorch installation may be too old". TorchScriptModel::
// Load reads the record here, after such a failure, to tell the user which version the file has,
// which this worker reads, and what to do. The archive does not record the producing torch's
// release, so the version number is all there is to name.
//
// Only what torch writes is handled: records stored uncompressed (torch never compresses), zip64
// central directories and offsets (archives over 4 GiB) included.
#ifndef ZPIPE_WORKER_MODEL_TORCHSCRIPT_ARCHIVE_H_
#define ZPIPE_WORKER_MODEL_TORCHSCRIPT_ARCHIVE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace zpipe::worker::model {

// The version record of the TorchScript archive at `path`. NotFound when the file cannot be
// opened; InvalidArgument (saying why) when it is not a zip archive, has no version record, or
// the record is compressed or not a decimal number.
absl::StatusOr<int64_t> TorchScriptFileFormatVersion(const std::string& path);

// The highest file format version this build's LibTorch reads, and its release ("2.13.0").
int64_t MaxReadableFileFormatVersion();
const char* LibTorchVersion();

}  // namespace zpipe::worker::model

#endif  // ZPIPE_WORKER_MODEL_TORCHSCRIPT_ARCHIVE_H_
