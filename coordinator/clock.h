// Clock: the coordinator's only source of time, injected so liveness and timestamps are testable.
#ifndef ZPIPE_COORDINATOR_CLOCK_H_
#define ZPIPE_COORDINATOR_CLOCK_H_

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace zpipe::coordinator {

// Thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

class RealClock : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

// A clock that only moves when told to.
class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'700'000'000)) : now_(start) {}
  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_CLOCK_H_
