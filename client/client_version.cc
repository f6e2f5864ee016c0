#include "absl/strings/str_cat.h"
#include "client/cli_common.h"
#include "zpipe/build_info.h"

namespace zpipe::cli {

std::string VersionLine(const std::string& who, const std::string& version,
                        const std::string& commit, const std::string& torch,
                        const std::string& cuda) {
  return absl::StrCat(who, ": zpipe ", version, " (commit ", commit, ", torch ",
                      torch.empty() ? "unknown" : torch, ", cuda ", cuda.empty() ? "none" : cuda,
                      ")");
}

std::string ClientVersionLine() {
  return VersionLine("client", build_info::kVersion, build_info::kCommit, build_info::kTorch,
                     build_info::kCuda);
}

}  // namespace zpipe::cli
