#include "worker/comm/gloo_store.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace zpipe::worker {
namespace {

[[noreturn]] void Throw(const absl::Status& status) {
  if (absl::IsDeadlineExceeded(status)) throw GlooStoreTimeout(std::string(status.message()));
  throw gloo::IoException(status.ToString());
}

class GlooStoreAdapter final : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(KeyValueStore& store, std::string prefix, absl::Duration timeout)
      : store_(store), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    absl::Status s = store_.Set(Full(key), absl::string_view(data.data(), data.size()));
    if (!s.ok()) Throw(s);
  }

  std::vector<char> get(const std::string& key) override {
    auto values = store_.Wait({Full(key)}, absl::Now() + timeout_);
    if (!values.ok()) Throw(values.status());
    const std::string& v = values->front();
    return std::vector<char>(v.begin(), v.end());
  }

  void wait(const std::vector<std::string>& keys) override { WaitFor(keys, timeout_); }

  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    // Gloo passes kNoTimeout (zero) for "no limit"; ours is always bounded.
    WaitFor(keys, timeout.count() > 0 ? absl::FromChrono(timeout) : timeout_);
  }

 private:
  std::string Full(const std::string& key) const { return absl::StrCat(prefix_, key); }

  void WaitFor(const std::vector<std::string>& keys, absl::Duration timeout) {
    std::vector<std::string> full;
    full.reserve(keys.size());
    for (const std::string& key : keys) full.push_back(Full(key));
    auto values = store_.Wait(full, absl::Now() + timeout);
    if (!values.ok()) Throw(values.status());
  }

  KeyValueStore& store_;
  const std::string prefix_;
  const absl::Duration timeout_;
};

}  // namespace

std::unique_ptr<gloo::rendezvous::Store> NewGlooStore(KeyValueStore& store, std::string prefix,
                                                      absl::Duration default_timeout) {
  return std::make_unique<GlooStoreAdapter>(store, std::move(prefix), default_timeout);
}

}  // namespace zpipe::worker
