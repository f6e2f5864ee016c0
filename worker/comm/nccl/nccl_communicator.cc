#include "worker/comm/nccl/nccl_communicator.h"

#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "worker/comm/completion.h"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 10, 0)
#error "NcclCommunicator needs NCCL >= 2.10 (ncclAvg)"
#endif

namespace zpipe::worker {
namespace {

using Clock = std::chrono::steady_clock;

// Makes `device` current for the scope and restores the caller's device after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) cudaSetDevice(device);
  }
  ~DeviceGuard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

bool IsAsyncFailure(ncclResult_t r) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
  if (r == ncclInProgress) return false;
#endif
  return r != ncclSuccess;
}

// One NCCL communicator and the stream its operations run on. Abort and Close are idempotent
// and exclude each other, so a handle polling an error and the communicator's destructor can
// race safely.
class NcclComm {
 public:
  NcclComm(std::string name, int device) : name_(std::move(name)), device_(device) {}
  ~NcclComm() {
    Close();
    if (stream_ != nullptr) {
      DeviceGuard guard(device_);
      cudaStreamDestroy(stream_);  // returns at once; freed when its work is done
    }
  }

  const std::string& name() const { return name_; }
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  ncclComm_t comm() const { return comm_; }  // valid while !IsGone()

  // Called once each while NewNcclCommunicator makes the communicator: CreateStream on its
  // thread, SetComm on the thread that creates the NCCL communicators, which that function waits
  // for before anything uses comm(). stream_ and comm_ are fixed after that.

  absl::Status CreateStream() {
    cudaError_t e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
      return absl::UnavailableError(
          absl::StrCat("nccl: creating a stream for ", name_, ": ", cudaGetErrorString(e)));
    }
    return absl::OkStatus();
  }
  void SetComm(ncclComm_t comm) { comm_ = comm; }

  bool IsGone() {
    absl::MutexLock lock(&mu_);
    return aborted_ || closed_;
  }

  // The communicator's asynchronous error (a peer failed), if any.
  std::optional<std::string> AsyncError() {
    absl::MutexLock lock(&mu_);
    if (aborted_ || closed_ || comm_ == nullptr) return std::nullopt;
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(comm_, &async) != ncclSuccess) return std::nullopt;
    if (!IsAsyncFailure(async)) return std::nullopt;
    return std::string(ncclGetErrorString(async));
  }

  // Kills outstanding operations (a peer is gone or too slow); later operations fail.
  void Abort() {
    absl::MutexLock lock(&mu_);
    if (aborted_ || closed_ || comm_ == nullptr) return;
    DeviceGuard guard(device_);
    ncclCommAbort(comm_);
    aborted_ = true;
  }

  // Frees the communicator: destroy when its stream is idle, abort otherwise (destroy would
  // wait for a peer that may never come).
  void Close() {
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
    if (aborted_ || comm_ == nullptr) return;
    DeviceGuard guard(device_);
    if (stream_ != nullptr && cudaStreamQuery(stream_) == cudaSuccess) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
      aborted_ = true;
    }
  }

 private:
  const std::string name_;
  const int device_;
  cudaStream_t stream_ = nullptr;
  ncclComm_t comm_ = nullptr;
  // Serialises Abort, Close and the error poll (NCCL's abort and destroy must not race).
  absl::Mutex mu_;
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

// Maps GPU event times to the host's steady clock: one reference event synchronised once.
struct TimeBase {
  cudaEvent_t ref = nullptr;
  Clock::time_point host;
  int device = 0;
  ~TimeBase() {
    if (ref != nullptr) {
      DeviceGuard guard(device);
      cudaEventDestroy(ref);
    }
  }
  Clock::time_point At(cudaEvent_t e) const {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, ref, e) != cudaSuccess) return host;
    return host + std::chrono::duration_cast<Clock::duration>(
                      std::chrono::duration<double, std::milli>(ms));
  }
};

struct NcclOp {
  std::shared_ptr<NcclComm> comm;
  std::shared_ptr<TimeBase> base;
  torch::Tensor tensor;  // referenced until the GPU is done with it
  cudaEvent_t start = nullptr;
  cudaEvent_t end = nullptr;
  cudaStream_t compute = nullptr;
  Clock::time_point launched;
  std::string what;

  ~NcclOp() {
    DeviceGuard guard(comm->device());
    if (start != nullptr) cudaEventDestroy(start);
    if (end != nullptr) cudaEventDestroy(end);
  }
  bool Done() const { return cudaEventQuery(end) == cudaSuccess; }
};

class NcclHandle final : public CommHandle {
 public:
  NcclHandle(std::shared_ptr<NcclOp> op, Clock::duration op_timeout)
      : op_(std::move(op)), op_timeout_(op_timeout) {}

  absl::Status Wait(absl::Duration timeout) override {
    const auto deadline = timeout == absl::InfiniteDuration()
                              ? Clock::time_point::max()
                              : Clock::now() + absl::ToChronoNanoseconds(timeout);
    for (;;) {
      if (std::optional<absl::Status> s = Poll(); s.has_value()) return *s;
      if (Clock::now() >= deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat(op_->what, ": still pending after the wait"));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  bool Test() override { return Poll().has_value(); }

  CommTimes times() const override {
    absl::MutexLock lock(&mu_);
    return times_;
  }

 private:
  // The final status once the operation is over; nullopt while it runs.
  std::optional<absl::Status> Poll() {
    absl::MutexLock lock(&mu_);
    if (result_.has_value()) return result_;
    DeviceGuard guard(op_->comm->device());
    const cudaError_t q = cudaEventQuery(op_->end);
    if (q == cudaSuccess) {
      // Whatever the caller queues next on its compute stream runs after the operation.
      cudaStreamWaitEvent(op_->compute, op_->end, 0);
      times_.start = op_->base->At(op_->start);
      times_.end = op_->base->At(op_->end);
      return Finish(absl::OkStatus());
    }
    if (q != cudaErrorNotReady) {
      op_->comm->Abort();
      return Finish(
          absl::InternalError(absl::StrCat(op_->what, ": CUDA error ", cudaGetErrorString(q))));
    }
    if (op_->comm->IsGone()) {
      return Finish(absl::CancelledError(
          absl::StrCat(op_->what, ": its communicator was aborted or destroyed")));
    }
    if (std::optional<std::string> error = op_->comm->AsyncError(); error.has_value()) {
      op_->comm->Abort();
      return Finish(absl::UnavailableError(absl::StrCat(op_->what, ": ", *error)));
    }
    if (Clock::now() - op_->launched > op_timeout_) {
      op_->comm->Abort();
      return Finish(absl::DeadlineExceededError(absl::StrCat(
          op_->what, ": no progress within the communicator timeout (is the peer alive?)")));
    }
    return std::nullopt;
  }

  absl::Status Finish(absl::Status s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const auto now = Clock::now();
    if (times_.start == Clock::time_point{}) times_.start = op_->launched;
    if (times_.end == Clock::time_point{}) times_.end = now;
    result_ = std::move(s);
    return *result_;
  }

  std::shared_ptr<NcclOp> op_;
  const Clock::duration op_timeout_;
  mutable absl::Mutex mu_;  // one poll at a time (Wait, Test and times() may race)
  std::optional<absl::Status> result_ ABSL_GUARDED_BY(mu_);
  CommTimes times_ ABSL_GUARDED_BY(mu_);
};

// A communicator to create: which key carries its id, our rank in it, and its place in the
// global creation order.
struct CommSpec {
  std::tuple<int, int, int, int> order;
  std::string key;
  int nranks = 0;
  int rank = 0;
  bool creates_id = false;
  ncclUniqueId id;
  std::shared_ptr<NcclComm> comm;
};

// Shared by NewNcclCommunicator and the thread that creates the communicators (which may outlive
// it: see CreateComms). `specs` and `device` are written before the thread starts; the
// thread then owns `specs` until it sets `done`.
struct InitState {
  std::vector<CommSpec> specs;
  int device = 0;
  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  bool abandoned ABSL_GUARDED_BY(mu) = false;  // the caller gave up waiting
  absl::Status status ABSL_GUARDED_BY(mu);
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const CommunicatorOptions& options, KeyValueStore& store, NcclOptions nccl,
                   std::map<int, std::shared_ptr<NcclComm>> out,
                   std::map<int, std::shared_ptr<NcclComm>> in, std::shared_ptr<NcclComm> far,
                   std::shared_ptr<NcclComm> dp, std::shared_ptr<TimeBase> base)
      : options_(options),
        store_(store),
        nccl_(std::move(nccl)),
        out_(std::move(out)),
        in_(std::move(in)),
        far_(std::move(far)),
        dp_(std::move(dp)),
        base_(std::move(base)) {}

  ~NcclCommunicator() override {
    DeviceGuard guard(options_.device_index);
    for (auto& [peer, c] : out_) c->Close();
    for (auto& [peer, c] : in_) c->Close();
    if (far_ != nullptr) far_->Close();
    if (dp_ != nullptr) dp_->Close();
    absl::MutexLock lock(&mu_);
    inflight_.clear();
  }

  int pipeline_rank() const override { return options_.pipeline_rank; }
  int pipeline_size() const override { return options_.pipeline_size; }
  int data_rank() const override { return options_.data_rank; }
  int data_size() const override { return options_.data_size; }
  torch::Device device() const override {
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(options_.device_index));
  }

  std::unique_ptr<CommHandle> Send(const torch::Tensor& tensor, int peer, int tag) override {
    auto [comm, nccl_peer] = Route(peer, /*send=*/true);
    if (absl::Status s = Check(tensor, comm != nullptr, peer, tag, "send"); !s.ok()) {
      return internal::FinishedHandle(s);
    }
    return Launch(
        comm, tensor.contiguous(), absl::StrCat("send to pipeline rank ", peer, " (tag ", tag, ")"),
        [comm = comm, nccl_peer = nccl_peer](void* ptr, size_t nbytes) {
          return ncclSend(ptr, nbytes, ncclUint8, nccl_peer, comm->comm(), comm->stream());
        });
  }

  std::unique_ptr<CommHandle> Recv(torch::Tensor into, int peer, int tag) override {
    auto [comm, nccl_peer] = Route(peer, /*send=*/false);
    if (absl::Status s = Check(into, comm != nullptr, peer, tag, "recv"); !s.ok()) {
      return internal::FinishedHandle(s);
    }
    if (!into.is_contiguous()) {
      return internal::FinishedHandle(
          absl::InvalidArgumentError("recv: the destination tensor must be contiguous"));
    }
    return Launch(
        comm, std::move(into), absl::StrCat("recv from pipeline rank ", peer, " (tag ", tag, ")"),
        [comm = comm, nccl_peer = nccl_peer](void* ptr, size_t nbytes) {
          return ncclRecv(ptr, nbytes, ncclUint8, nccl_peer, comm->comm(), comm->stream());
        });
  }

  std::unique_ptr<CommHandle> AllReduceAverage(torch::Tensor buffer) override {
    if (!buffer.defined() || !buffer.is_cuda() ||
        buffer.device().index() != options_.device_index ||
        buffer.scalar_type() != torch::kFloat32 || !buffer.is_contiguous()) {
      return internal::FinishedHandle(absl::InvalidArgumentError(
          absl::StrCat("all-reduce: the buffer must be a contiguous float32 tensor on cuda:",
                       options_.device_index)));
    }
    if (dp_ == nullptr) return internal::FinishedHandle(absl::OkStatus());  // d = 1
    std::shared_ptr<NcclComm> comm = dp_;
    const size_t count = static_cast<size_t>(buffer.numel());
    return Launch(comm, std::move(buffer),
                  absl::StrCat("all-reduce of ", count,
                               " floats in the data-parallel group of pipeline rank ",
                               options_.pipeline_rank),
                  [comm, count](void* ptr, size_t) {
                    return ncclAllReduce(ptr, ptr, count, ncclFloat, ncclAvg, comm->comm(),
                                         comm->stream());
                  });
  }

  absl::Status Barrier() override {
    const int generation = barrier_generation_++;
    const int world = options_.pipeline_size * options_.data_size;
    const std::string base = absl::StrCat(options_.key_prefix, "nccl/barrier/", generation, "/");
    const int me = options_.data_rank * options_.pipeline_size + options_.pipeline_rank;
    if (absl::Status s = store_.Set(absl::StrCat(base, me), "1"); !s.ok()) return s;
    std::vector<std::string> keys;
    for (int r = 0; r < world; ++r) keys.push_back(absl::StrCat(base, r));
    return store_.Wait(keys, absl::Now() + options_.timeout).status();
  }

 private:
  // The communicator for traffic with pipeline rank `peer` and the peer's rank in it: the
  // directed pair communicator for a neighbour (sender = rank 0, receiver = rank 1), else the
  // whole-pipeline one.
  std::pair<std::shared_ptr<NcclComm>, int> Route(int peer, bool send) const {
    const auto& pairs = send ? out_ : in_;
    if (auto it = pairs.find(peer); it != pairs.end()) return {it->second, send ? 1 : 0};
    if (far_ != nullptr && peer >= 0 && peer < options_.pipeline_size &&
        peer != options_.pipeline_rank) {
      return {far_, peer};
    }
    return {nullptr, -1};
  }

  absl::Status Check(const torch::Tensor& t, bool known_peer, int peer, int tag,
                     absl::string_view what) const {
    if (!known_peer) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": peer ", peer, " is not another rank of a pipeline of ", options_.pipeline_size));
    }
    if (tag < 0) return absl::InvalidArgumentError(absl::StrCat(what, ": negative tag"));
    if (!t.defined() || !t.is_cuda() || t.device().index() != options_.device_index) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": needs a tensor on cuda:", options_.device_index));
    }
    return absl::OkStatus();
  }

  cudaStream_t ComputeStream() const {
    return nccl_.compute_stream ? nccl_.compute_stream() : cudaStreamLegacy;
  }

  template <typename Fn>
  std::unique_ptr<CommHandle> Launch(const std::shared_ptr<NcclComm>& comm, torch::Tensor tensor,
                                     std::string what, Fn enqueue) {
    if (tensor.nbytes() == 0) return internal::FinishedHandle(absl::OkStatus());
    if (comm->IsGone()) {
      return internal::FinishedHandle(absl::UnavailableError(
          absl::StrCat(what, ": the communicator ", comm->name(), " was aborted earlier")));
    }
    absl::MutexLock lock(&mu_);  // NCCL calls on one communicator are serialised
    DeviceGuard guard(options_.device_index);
    auto op = std::make_shared<NcclOp>();
    op->comm = comm;
    op->base = base_;
    op->tensor = std::move(tensor);
    op->compute = ComputeStream();
    op->launched = Clock::now();
    op->what = std::move(what);
    cudaEvent_t ready = nullptr;
    cudaError_t e = cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventCreate(&op->start);
    if (e == cudaSuccess) e = cudaEventCreate(&op->end);
    // The producer of the tensor (queued on the compute stream) finishes first.
    if (e == cudaSuccess) e = cudaEventRecord(ready, op->compute);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(comm->stream(), ready, 0);
    if (ready != nullptr) cudaEventDestroy(ready);
    if (e == cudaSuccess) e = cudaEventRecord(op->start, comm->stream());
    if (e != cudaSuccess) {
      return internal::FinishedHandle(
          absl::UnavailableError(absl::StrCat(op->what, ": CUDA error ", cudaGetErrorString(e))));
    }
    const ncclResult_t r = enqueue(op->tensor.data_ptr(), op->tensor.nbytes());
    if (r != ncclSuccess) {
      comm->Abort();
      return internal::FinishedHandle(
          absl::UnavailableError(absl::StrCat(op->what, ": ", ncclGetErrorString(r))));
    }
    e = cudaEventRecord(op->end, comm->stream());
    if (e != cudaSuccess) {
      comm->Abort();
      return internal::FinishedHandle(
          absl::UnavailableError(absl::StrCat(op->what, ": CUDA error ", cudaGetErrorString(e))));
    }
    // Keep the tensor until the GPU is done with it, even if the caller drops the handle.
    std::erase_if(inflight_, [](const std::shared_ptr<NcclOp>& o) { return o->Done(); });
    inflight_.push_back(op);
    return std::make_unique<NcclHandle>(std::move(op), absl::ToChronoNanoseconds(options_.timeout));
  }

  const CommunicatorOptions options_;
  KeyValueStore& store_;
  const NcclOptions nccl_;
  std::map<int, std::shared_ptr<NcclComm>> out_;  // peer -> directed comm this -> peer
  std::map<int, std::shared_ptr<NcclComm>> in_;   // peer -> directed comm peer -> this
  std::shared_ptr<NcclComm> far_;                 // whole pipeline group; null when p <= 3
  std::shared_ptr<NcclComm> dp_;                  // null when d = 1
  std::shared_ptr<TimeBase> base_;
  absl::Mutex mu_;  // held while launching, so NCCL calls on one communicator are serialised
  std::vector<std::shared_ptr<NcclOp>> inflight_ ABSL_GUARDED_BY(mu_);
  // Barriers so far; Barrier() is called from one thread at a time (communicator.h).
  int barrier_generation_ = 0;
};

// INVALID_ARGUMENT unless the ranks fit the group sizes and options.device_index is a CUDA device
// here; UNAVAILABLE when there is no CUDA device at all.
absl::Status CheckRanksAndDevice(const CommunicatorOptions& o) {
  if (o.pipeline_size < 1 || o.data_size < 1 || o.pipeline_rank < 0 ||
      o.pipeline_rank >= o.pipeline_size || o.data_rank < 0 || o.data_rank >= o.data_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("nccl: rank (", o.pipeline_rank, ", ", o.data_rank,
                     ") does not fit p = ", o.pipeline_size, ", d = ", o.data_size));
  }
  int devices = 0;
  if (cudaError_t e = cudaGetDeviceCount(&devices); e != cudaSuccess) {
    return absl::UnavailableError(absl::StrCat("nccl: no CUDA device: ", cudaGetErrorString(e)));
  }
  if (o.device_index < 0 || o.device_index >= devices) {
    return absl::InvalidArgumentError(
        absl::StrCat("nccl: cuda:", o.device_index, " does not exist (", devices, " devices)"));
  }
  return absl::OkStatus();
}

// The communicators of one rank, by what they carry (as NcclCommunicator takes them).
struct RankComms {
  std::map<int, std::shared_ptr<NcclComm>> out;  // peer -> directed comm this -> peer
  std::map<int, std::shared_ptr<NcclComm>> in;   // peer -> directed comm peer -> this
  std::shared_ptr<NcclComm> far;                 // whole pipeline group; null when p <= 3
  std::shared_ptr<NcclComm> dp;                  // null when d = 1
};

// Appends the spec of a communicator called `name` on `device` to `specs`; returns the
// communicator (not created yet).
std::shared_ptr<NcclComm> AddSpec(std::vector<CommSpec>& specs, int device,
                                  std::tuple<int, int, int, int> order, std::string key, int nranks,
                                  int rank, bool creates_id, std::string name) {
  CommSpec spec;
  spec.order = order;
  spec.key = std::move(key);
  spec.nranks = nranks;
  spec.rank = rank;
  spec.creates_id = creates_id;
  spec.comm = std::make_shared<NcclComm>(std::move(name), device);
  specs.push_back(std::move(spec));
  return specs.back().comm;
}

// Lists in `specs` the communicators of rank (o.pipeline_rank, o.data_rank): directed pair
// communicators with the pipeline neighbours, then the DP communicator, in the global creation
// order (pairs before DP, then by ranks), so blocking inits cannot deadlock.
RankComms PlanComms(const CommunicatorOptions& o, std::vector<CommSpec>& specs) {
  const int r = o.pipeline_rank, p = o.pipeline_size, device = o.device_index;
  RankComms comms;
  std::set<int> neighbours;
  if (p > 1) {
    neighbours.insert((r + 1) % p);
    neighbours.insert((r + p - 1) % p);
  }
  for (int n : neighbours) {
    comms.out[n] = AddSpec(specs, device, {0, o.data_rank, r, n},
                           absl::StrCat(o.key_prefix, "nccl/pp/", o.data_rank, "/", r, "-", n), 2,
                           0, true, absl::StrCat("p2p ", r, "->", n));
    comms.in[n] = AddSpec(specs, device, {0, o.data_rank, n, r},
                          absl::StrCat(o.key_prefix, "nccl/pp/", o.data_rank, "/", n, "-", r), 2, 1,
                          false, absl::StrCat("p2p ", n, "->", r));
  }
  // Non-neighbours (e.g. the executor's gradient-norm gather on rank 0) share one communicator of
  // the whole pipeline group; it sorts before the pairs.
  if (p > 3) {
    comms.far = AddSpec(specs, device, {0, o.data_rank, -1, -1},
                        absl::StrCat(o.key_prefix, "nccl/pp/", o.data_rank, "/all"), p, r, r == 0,
                        absl::StrCat("pipeline group ", o.data_rank));
  }
  if (o.data_size > 1) {
    comms.dp = AddSpec(specs, device, {1, r, 0, 0}, absl::StrCat(o.key_prefix, "nccl/dp/", r),
                       o.data_size, o.data_rank, o.data_rank == 0,
                       absl::StrCat("data-parallel group of pipeline rank ", r));
  }
  std::sort(specs.begin(), specs.end(),
            [](const CommSpec& a, const CommSpec& b) { return a.order < b.order; });
  return comms;
}

// Creates every communicator's stream; for those whose id this rank creates, makes the id and
// publishes it in `store` under the spec's key.
absl::Status PublishIds(std::vector<CommSpec>& specs, KeyValueStore& store) {
  for (CommSpec& spec : specs) {
    if (absl::Status s = spec.comm->CreateStream(); !s.ok()) return s;
    if (!spec.creates_id) continue;
    if (ncclResult_t res = ncclGetUniqueId(&spec.id); res != ncclSuccess) {
      return absl::UnavailableError(
          absl::StrCat("nccl: ncclGetUniqueId: ", ncclGetErrorString(res)));
    }
    absl::Status s = store.Set(
        spec.key, absl::string_view(reinterpret_cast<const char*>(&spec.id), sizeof(spec.id)));
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// Reads from `store` the unique ids the other ranks published, waiting for them until `deadline`.
absl::Status FetchIds(std::vector<CommSpec>& specs, KeyValueStore& store, absl::Time deadline) {
  for (CommSpec& spec : specs) {
    if (spec.creates_id) continue;
    auto values = store.Wait({spec.key}, deadline);
    if (!values.ok()) {
      return absl::Status(values.status().code(),
                          absl::StrCat("nccl: waiting for the ", spec.comm->name(),
                                       " to assemble: ", values.status().message(),
                                       "; is every rank of the job running?"));
    }
    if (values->front().size() != sizeof(ncclUniqueId)) {
      return absl::InternalError(absl::StrCat("nccl: malformed unique id under ", spec.key));
    }
    std::memcpy(&spec.id, values->front().data(), sizeof(ncclUniqueId));
  }
  return absl::OkStatus();
}

// The body of the thread that creates the NCCL communicators, in `state.specs` order: each
// ncclCommInitRank blocks until every member joins. Closes them itself when the caller has given
// up waiting.
void InitRanks(InitState& state) {
  cudaSetDevice(state.device);
  absl::Status status;
  for (CommSpec& spec : state.specs) {
    ncclComm_t comm = nullptr;
    ncclResult_t res = ncclCommInitRank(&comm, spec.nranks, spec.id, spec.rank);
    if (res != ncclSuccess) {
      status = absl::UnavailableError(
          absl::StrCat("nccl: creating the ", spec.comm->name(), ": ", ncclGetErrorString(res)));
      break;
    }
    spec.comm->SetComm(comm);
  }
  absl::MutexLock lock(&state.mu);
  state.done = true;  // wakes the caller's Await
  state.status = status;
  if (state.abandoned) {
    for (CommSpec& spec : state.specs) spec.comm->Close();
  }
}

// Creates the communicators of `state` (ids in place) on a thread of their own, and waits for it
// until `deadline`: a watchdog, since ncclCommInitRank waits for peers that may have died. On a
// timeout the thread is left to finish and close them.
absl::Status CreateComms(std::shared_ptr<InitState> state, const CommunicatorOptions& o,
                         absl::Time deadline) {
  std::thread([state] { InitRanks(*state); }).detach();
  absl::MutexLock lock(&state->mu);
  const bool done =
      state->mu.AwaitWithTimeout(absl::Condition(&state->done), deadline - absl::Now());
  if (!done) {
    state->abandoned = true;
    return absl::DeadlineExceededError(absl::StrCat(
        "nccl: communicators of rank (", o.pipeline_rank, ", ", o.data_rank,
        ") not created within ", absl::FormatDuration(o.timeout), "; a peer died or never joined"));
  }
  if (!state->status.ok()) {
    for (CommSpec& spec : state->specs) spec.comm->Close();
    return state->status;
  }
  return absl::OkStatus();
}

// The time base of `device`'s events, taken now that the device is idle.
absl::StatusOr<std::shared_ptr<TimeBase>> NewTimeBase(int device) {
  auto base = std::make_shared<TimeBase>();
  base->device = device;
  if (cudaError_t e = cudaEventCreate(&base->ref); e != cudaSuccess) {
    return absl::UnavailableError(absl::StrCat("nccl: ", cudaGetErrorString(e)));
  }
  cudaEventRecord(base->ref, cudaStreamLegacy);
  cudaEventSynchronize(base->ref);
  base->host = Clock::now();
  return base;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> NewNcclCommunicator(
    const CommunicatorOptions& options, KeyValueStore& store, NcclOptions nccl) {
  if (absl::Status s = CheckRanksAndDevice(options); !s.ok()) return s;
  DeviceGuard guard(options.device_index);
  const absl::Time deadline = absl::Now() + options.timeout;
  auto state = std::make_shared<InitState>();
  state->device = options.device_index;
  RankComms comms = PlanComms(options, state->specs);
  if (absl::Status s = PublishIds(state->specs, store); !s.ok()) return s;
  if (absl::Status s = FetchIds(state->specs, store, deadline); !s.ok()) return s;
  if (absl::Status s = CreateComms(state, options, deadline); !s.ok()) return s;
  absl::StatusOr<std::shared_ptr<TimeBase>> base = NewTimeBase(options.device_index);
  if (!base.ok()) return base.status();
  return std::unique_ptr<Communicator>(new NcclCommunicator(
      options, store, std::move(nccl), std::move(comms.out), std::move(comms.in),
      std::move(comms.far), std::move(comms.dp), *std::move(base)));
}

}  // namespace zpipe::worker
