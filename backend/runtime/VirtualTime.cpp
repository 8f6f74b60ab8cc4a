#include "backend/runtime/VirtualTime.h"

#include <openreg/sim/config.h>
#include <openreg/sim/profile.h>
#include <openreg/sim/runtime.h>
#include <openreg/sim/virtual_time.h>

#include "backend/runtime/Device.h"
#include "backend/runtime/SimErrors.h"

namespace c10::openreg {

std::optional<ProfileSummary> device_profile() {
  const ::openreg::sim::DeviceProfile* p = detail::started_runtime().profile();
  if (p == nullptr) return std::nullopt;
  return ProfileSummary{p->name,
                        p->display_name,
                        p->sm_count,
                        p->l2_bytes,
                        p->memory_bytes,
                        p->tensor_flops[static_cast<int>(::openreg::sim::NumberFormat::kBf16)],
                        p->memory_bandwidth};
}

bool timing_only_execution() {
  return detail::started_runtime().config().execute == ::openreg::sim::ExecuteMode::kTiming;
}

std::int64_t virtual_now_ns() { return detail::started_runtime().virtual_now_ns(); }

VirtualDeviceTime virtual_device_time(c10::DeviceIndex index) {
  ::openreg::sim::DeviceTimeStats s;
  translate_sim_errors([&] { s = detail::started_runtime().device_time_stats(index); });
  return VirtualDeviceTime{s.compute_busy_ns, s.copy_busy_ns, s.busy_ns, s.kernels, s.peak_ns, s.end_ns};
}

}  // namespace c10::openreg
