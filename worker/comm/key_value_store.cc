#include "worker/comm/key_value_store.h"

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"

namespace zpipe::worker {
namespace {

absl::Status CheckKey(absl::string_view key) {
  if (key.empty()) return absl::InvalidArgumentError("rendezvous: empty key");
  if (key.size() > kMaxRendezvousKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rendezvous: key of ", key.size(), " bytes is over the limit of ", kMaxRendezvousKeyBytes));
  }
  return absl::OkStatus();
}

class InMemoryStore final : public KeyValueStore {
 public:
  absl::Status Set(absl::string_view key, absl::string_view value) override {
    if (absl::Status s = CheckKey(key); !s.ok()) return s;
    if (value.size() > kMaxRendezvousValueBytes) {
      return absl::InvalidArgumentError(absl::StrCat("rendezvous: value for '", key, "' is ",
                                                     value.size(), " bytes, over 1 MiB"));
    }
    absl::MutexLock lock(&mu_);
    values_[key] = std::string(value);
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> Get(absl::string_view key) override {
    if (absl::Status s = CheckKey(key); !s.ok()) return s;
    absl::MutexLock lock(&mu_);
    auto it = values_.find(key);
    if (it == values_.end()) {
      return absl::NotFoundError(absl::StrCat("rendezvous: no key '", key, "'"));
    }
    return it->second;
  }

  absl::StatusOr<std::vector<std::string>> Wait(const std::vector<std::string>& keys,
                                                absl::Time deadline) override {
    for (const std::string& key : keys) {
      if (absl::Status s = CheckKey(key); !s.ok()) return s;
    }
    auto all_present = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      for (const std::string& key : keys) {
        if (!values_.contains(key)) return false;
      }
      return true;
    };
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithDeadline(absl::Condition(&all_present), deadline);
    std::vector<std::string> out;
    std::vector<std::string> missing;
    for (const std::string& key : keys) {
      auto it = values_.find(key);
      if (it == values_.end()) {
        missing.push_back(key);
      } else {
        out.push_back(it->second);
      }
    }
    if (!missing.empty()) {
      return absl::DeadlineExceededError(
          absl::StrCat("rendezvous: timed out waiting for key(s) ", absl::StrJoin(missing, ", ")));
    }
    return out;
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
};

class PrefixStore final : public KeyValueStore {
 public:
  PrefixStore(KeyValueStore& base, std::string prefix) : base_(base), prefix_(std::move(prefix)) {}

  absl::Status Set(absl::string_view key, absl::string_view value) override {
    return base_.Set(absl::StrCat(prefix_, key), value);
  }
  absl::StatusOr<std::string> Get(absl::string_view key) override {
    return base_.Get(absl::StrCat(prefix_, key));
  }
  absl::StatusOr<std::vector<std::string>> Wait(const std::vector<std::string>& keys,
                                                absl::Time deadline) override {
    std::vector<std::string> full;
    full.reserve(keys.size());
    for (const std::string& key : keys) full.push_back(absl::StrCat(prefix_, key));
    return base_.Wait(full, deadline);
  }

 private:
  KeyValueStore& base_;
  const std::string prefix_;
};

}  // namespace

std::vector<int> UnsetKeys(KeyValueStore& store, const std::vector<std::string>& keys) {
  std::vector<int> unset;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!store.Get(keys[i]).ok()) unset.push_back(static_cast<int>(i));
  }
  return unset;
}

std::unique_ptr<KeyValueStore> NewInMemoryStore() { return std::make_unique<InMemoryStore>(); }

std::unique_ptr<KeyValueStore> NewPrefixStore(KeyValueStore& base, std::string prefix) {
  return std::make_unique<PrefixStore>(base, std::move(prefix));
}

}  // namespace zpipe::worker
