// What the machine was doing while a runtime benchmark ran, for the tables' headers: the load
// average, and how long a blocked thread takes to run once another wakes it.
//
// The load average misses what decides the runtime tables on small VMs: how fast a sleeping thread
// gets a CPU back. Every hand-over in a pipeline is a chain of such wake-ups; on the 2-vCPU CI
// machines one costs a few microseconds at p50 when nothing else runs, and milliseconds while some
// other process keeps a CPU busy (even at SCHED_IDLE on kernel 6.18). The probe times one thread
// waking another through a condition variable, back to back and after the waiter sat idle for 1 ms.
#ifndef ZPIPE_BENCH_MACHINE_STATE_H_
#define ZPIPE_BENCH_MACHINE_STATE_H_

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

namespace zpipe::bench {

// "1.02 0.88 0.61 (2 cores)": the 1, 5 and 15 minute load averages.
inline std::string LoadAverage() {
  double a = 0, b = 0, c = 0;
  std::FILE* f = std::fopen("/proc/loadavg", "r");
  const int n = f != nullptr ? std::fscanf(f, "%lf %lf %lf", &a, &b, &c) : 0;
  if (f != nullptr) std::fclose(f);
  if (n != 3) return "?";
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%.2f %.2f %.2f (%u cores)", a, b, c,
                std::thread::hardware_concurrency());
  return buf;
}

struct WakeLatency {
  double busy_p50_us = 0, busy_p99_us = 0;  // the waiter was woken right after it blocked
  double idle_p50_us = 0, idle_p99_us = 0;  // the waiter had been blocked for `idle`
};

// Times `rounds` wake-ups each way: the main thread stamps the clock and notifies; the waiter
// stamps when it runs again.
inline WakeLatency MeasureWakeLatency(
    int rounds = 200, std::chrono::microseconds idle = std::chrono::milliseconds(1)) {
  using Clock = std::chrono::steady_clock;
  auto probe = [&](bool after_idle) {
    std::mutex mu;
    std::condition_variable cv;
    int posted = 0, seen = 0;
    Clock::time_point stamp;
    std::vector<double> us;
    std::thread waiter([&] {
      std::unique_lock<std::mutex> lock(mu);
      for (int k = 1; k <= rounds; ++k) {
        cv.wait(lock, [&] { return posted >= k; });
        us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - stamp).count());
        seen = k;
        cv.notify_all();
      }
    });
    for (int k = 1; k <= rounds; ++k) {
      if (after_idle) std::this_thread::sleep_for(idle);
      {
        std::lock_guard<std::mutex> lock(mu);
        stamp = Clock::now();
        posted = k;
      }
      cv.notify_all();
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return seen >= k; });
    }
    waiter.join();
    std::sort(us.begin(), us.end());
    return std::pair{us[us.size() / 2], us[std::min(us.size() - 1, us.size() * 99 / 100)]};
  };
  WakeLatency w;
  std::tie(w.busy_p50_us, w.busy_p99_us) = probe(false);
  std::tie(w.idle_p50_us, w.idle_p99_us) = probe(true);
  return w;
}

// One line for a table header: load average and wake-up latencies.
inline std::string MachineState() {
  const WakeLatency w = MeasureWakeLatency();
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "load average %s; thread wake-up p50/p99 %.0f/%.0f us back to back, %.0f/%.0f us "
                "after 1 ms idle",
                LoadAverage().c_str(), w.busy_p50_us, w.busy_p99_us, w.idle_p50_us, w.idle_p99_us);
  return buf;
}

}  // namespace zpipe::bench

#endif  // ZPIPE_BENCH_MACHINE_STATE_H_
