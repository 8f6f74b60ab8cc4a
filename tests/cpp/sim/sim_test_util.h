#pragma once
// Helpers shared by the sim tests: bounded waits that fail a test instead of hanging it, and (from
// openreg/sim/support.h, shared with the examples and benchmarks) runtimes with explicit configs.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "openreg/sim/config.h"
#include "openreg/sim/error.h"
#include "openreg/sim/runtime.h"
#include "openreg/sim/support.h"

namespace openreg::sim::test {

// Sanitizers slow everything down by 5-20x; stress sizes scale with this.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
inline constexpr int kSanitizerDivisor = 10;
#else
inline constexpr int kSanitizerDivisor = 1;
#endif

// Generous: these bound hangs, they do not measure anything.
inline constexpr auto kDeadline = std::chrono::seconds(20);

using support::make_config;  // shared with the examples and benchmarks

//! Spins (yielding) until pred() or the deadline; returns pred().
template <typename Pred>
bool eventually(Pred pred, std::chrono::steady_clock::duration deadline = kDeadline) {
  const auto end = std::chrono::steady_clock::now() + deadline;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
}

//! A gate that work items block on (with a deadline) until the test opens it.
class Gate {
 public:
  void open() { open_.store(true, std::memory_order_release); }
  //! Waits for open(); false if the deadline passed first.
  bool wait() const {
    return eventually([this] { return open_.load(std::memory_order_acquire); });
  }

 private:
  std::atomic<bool> open_{false};
};

//! The code of the openreg::sim::Error that fn() throws; a test failure if it throws none.
inline Errc code_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.code();
  }
  ADD_FAILURE() << "expected an openreg::sim::Error";
  return Errc::kConfig;
}

//! The message of the WorkFailed error that fn() throws; a test failure if it throws none or another.
inline std::string failure_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kWorkFailed);
    return e.what();
  }
  ADD_FAILURE() << "expected a WorkFailed error";
  return "";
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace openreg::sim::test
