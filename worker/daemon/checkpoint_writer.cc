#include "worker/daemon/checkpoint_writer.h"

#include <chrono>
#include <exception>
#include <memory>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"

namespace zpipe::worker {
namespace {

// `task` with any exception turned into a status: nothing a write does may end the process.
absl::Status RunGuarded(const CheckpointWriter::Task& task) {
  try {
    return task();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("checkpoint write: ", e.what()));
  } catch (...) {
    return absl::InternalError("checkpoint write: unknown exception");
  }
}

}  // namespace

CheckpointWriter::~CheckpointWriter() {
  if (inflight_.valid()) inflight_.wait();
}

CheckpointWriter::Started CheckpointWriter::Start(Task task) {
  Started out;
  const absl::Time t0 = absl::Now();
  out.previous = Wait();
  out.waited = absl::Now() - t0;
  auto shared = std::make_shared<const Task>(std::move(task));
  try {
    inflight_ = std::async(std::launch::async, [shared] { return RunGuarded(*shared); });
  } catch (const std::system_error&) {
    // No thread to be had: write now, deliver the result later as for a background write.
    std::promise<absl::Status> done;
    done.set_value(RunGuarded(*shared));
    inflight_ = done.get_future();
  }
  return out;
}

std::optional<absl::Status> CheckpointWriter::Poll() {
  if (!inflight_.valid() ||
      inflight_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    return std::nullopt;
  }
  return inflight_.get();
}

absl::Status CheckpointWriter::Wait() {
  if (!inflight_.valid()) return absl::OkStatus();
  return inflight_.get();
}

}  // namespace zpipe::worker
