#include "backend/runtime/Device.h"

#include "backend/runtime/Capture.h"
#include "backend/runtime/Fork.h"
#include "backend/runtime/Observer.h"
#include "backend/runtime/SimErrors.h"

#include <c10/util/Exception.h>

#include <openreg/sim/config.h>
#include <openreg/sim/device.h>
#include <openreg/sim/profile.h>
#include <openreg/sim/runtime.h>

#include <algorithm>
#include <atomic>
#include <utility>

namespace c10::openreg {

namespace sim = ::openreg::sim;

static_assert(kMaxDevices == sim::kMaxDevices, "the backend's per-device tables are sized by the sim's limit");

namespace {

// Like CUDA, the current device is per host thread.
thread_local c10::DeviceIndex tls_current_device = 0;

RaceCheck race_check_of(sim::RaceCheckMode mode) {
  switch (mode) {
    case sim::RaceCheckMode::kRaise: return RaceCheck::kRaise;
    case sim::RaceCheckMode::kReport: return RaceCheck::kReport;
    case sim::RaceCheckMode::kOff: break;
  }
  return RaceCheck::kOff;
}

}  // namespace

namespace detail {

sim::Runtime& started_runtime() {
  check_not_in_bad_fork();
  sim::Runtime& rt = translate_sim_errors([]() -> sim::Runtime& { return sim::Runtime::global(); });
  // Once, when the runtime first started (a bad environment threw above, and throws again on every call):
  // Note [OPENREG_SANITIZER is read when the runtime starts] in sanitizer/Sanitizer.cpp.
  static const bool started_hook_ran = [&] {
    run_runtime_start_hook(race_check_of(rt.config().race_check));
    return true;
  }();
  (void)started_hook_ran;
  return rt;
}

}  // namespace detail

c10::DeviceIndex device_count() noexcept {
  try {
    return static_cast<c10::DeviceIndex>(sim::Runtime::global().device_count());
  } catch (...) {
    return 0;  // torch requires deviceCount() never to throw; init() reports the cause
  }
}

void init() {
  detail::started_runtime();  // reads the configuration; throws naming a malformed variable
  mark_runtime_initialized();
}

void check_device_index(c10::DeviceIndex index) {
  checked_device_index(index);
}

c10::DeviceIndex checked_device_index(std::int64_t index) {
  // Hot path (every factory, guard and stream lookup): the count is fixed once the runtime started,
  // so a cached copy answers; relaxed, because the value itself is all that is shared (a thread that
  // sees 0 takes the full path below).
  static std::atomic<int> started_count{0};
  const int known = started_count.load(std::memory_order_relaxed);
  if (index >= 0 && index < known && !is_in_bad_fork()) return static_cast<c10::DeviceIndex>(index);
  const int count = detail::started_runtime().device_count();
  started_count.store(count, std::memory_order_relaxed);
  if (index < 0 || index >= count) {
    detail::throw_invalid_device(index, count);
  }
  return static_cast<c10::DeviceIndex>(index);  // < count <= 64: fits
}

c10::DeviceIndex current_device() {
  return tls_current_device;
}

void set_device(c10::DeviceIndex index) {
  check_device_index(index);
  tls_current_device = index;
}

c10::DeviceIndex exchange_device(c10::DeviceIndex index) {
  check_device_index(index);
  return std::exchange(tls_current_device, index);
}

sim::Device& sim_device(c10::DeviceIndex index) {
  check_device_index(index);
  if (!is_runtime_initialized()) {
    mark_runtime_initialized();
  }
  return translate_sim_errors([&]() -> sim::Device& { return detail::started_runtime().device(index); });
}

bool device_started(c10::DeviceIndex index) {
  check_device_index(index);
  return translate_sim_errors([&] { return sim::Runtime::global().device_started(index); });
}

std::optional<c10::DeviceIndex> device_of_pointer(const void* ptr) {
  const auto device = translate_sim_errors([&] { return sim::Runtime::global().device_of(ptr); });
  if (!device.has_value()) return std::nullopt;
  return static_cast<c10::DeviceIndex>(*device);
}

void synchronize_device(c10::DeviceIndex index) {
  capture::check_device_sync("synchronizing the device");
  sim::Device& device = sim_device(index);
  translate_sim_errors([&] { device.synchronize(); });
  // Every path to a device synchronize comes here (Note [The runtime reports to its observer]).
  if (RuntimeObserver* observer = runtime_observer()) observer->on_device_sync(index);
}

std::uint64_t device_busy_time_ns(c10::DeviceIndex index) {
  sim::Device& device = sim_device(index);
  // The sim sums busy time over the device's compute threads; per thread it is the share nvidia-smi
  // reports (exactly "at least one item ran" when the device has one thread, the default on a machine
  // with no more cores than devices).
  return device.busy_time_ns() /
         static_cast<std::uint64_t>(std::max(1, detail::started_runtime().config().compute_threads));
}

DeviceProperties device_properties(c10::DeviceIndex index) {
  check_device_index(index);
  const sim::Config& config = detail::started_runtime().config();
  if (const sim::DeviceProfile* profile = config.device_profile.get()) {
    // A model of that GPU (Note [Virtual time]): its SM count, never a name that reads as CUDA's. The
    // capacity stays what this machine backs while kernels really run.
    return DeviceProperties{"openreg (model of " + profile->display_name + ")", config.memory_capacity,
                            profile->sm_count, config.copy_bandwidth};
  }
  return DeviceProperties{"openreg", config.memory_capacity, config.compute_threads, config.copy_bandwidth};
}

}  // namespace c10::openreg
