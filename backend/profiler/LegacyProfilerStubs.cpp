// Note [Legacy profiler stubs]
// torch.autograd.profiler.profile(use_device="openreg") measures device time by recording a device
// event before and after each op on the current stream and asking for the time between them, through
// the ProfilerStubs a PrivateUse1 backend registers (without them every op reports a callback error
// and the device times are garbage). Ours record timing events, which take their timestamp when
// the stream reaches them, so the difference is the op's time on the device timeline, as CUDA's are.

#include "backend/runtime/Device.h"
#include "backend/runtime/Stream.h"
#include "backend/runtime/Event.h"

#include <c10/core/DeviceGuard.h>
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <memory>

namespace c10::openreg {
namespace {

using torch::profiler::impl::ProfilerVoidEventStub;

OpenRegEvent& event_of(const ProfilerVoidEventStub* stub) {
  TORCH_INTERNAL_ASSERT(stub != nullptr && *stub != nullptr, "openreg profiler: event was never recorded");
  return *static_cast<OpenRegEvent*>(stub->get());
}

struct OpenRegProfilerStubs final : torch::profiler::impl::ProfilerStubs {
  void record(c10::DeviceIndex* device, ProfilerVoidEventStub* event, int64_t* cpu_ns) const override {
    const c10::DeviceIndex index = current_device();
    if (device != nullptr) *device = index;
    auto e = std::make_shared<OpenRegEvent>(/*timing=*/true);
    // The host time is taken before the record is enqueued, so the CPU and device timelines line up
    // as CUDA's stubs line them up.
    if (cpu_ns != nullptr) *cpu_ns = c10::getTime();
    e->record(current_openreg_stream(index));
    *event = std::static_pointer_cast<void>(std::move(e));
  }

  //! Microseconds between two records (waiting for both to complete), like CUDA's stubs.
  float elapsed(const ProfilerVoidEventStub* event1, const ProfilerVoidEventStub* event2) const override {
    OpenRegEvent& start = event_of(event1);
    OpenRegEvent& end = event_of(event2);
    start.synchronize();
    end.synchronize();
    return static_cast<float>(start.elapsed_ms(end) * 1000.0);
  }

  // openreg has no annotation tool to forward ranges to (CUDA forwards them to NVTX).
  void mark(const char*) const override {}
  void rangePush(const char*) const override {}
  void rangePop() const override {}

  bool enabled() const override { return true; }

  void onEachDevice(std::function<void(int)> op) const override {
    c10::OptionalDeviceGuard guard;
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
      guard.reset_device(c10::Device(c10::DeviceType::PrivateUse1, i));
      op(i);
    }
  }

  void synchronize() const override { synchronize_device(current_device()); }
};

// Registered at load, like CUDA's; the stubs live as long as the process (the profiler keeps a raw
// pointer).
struct RegisterStubs {
  RegisterStubs() {
    static OpenRegProfilerStubs stubs;
    torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  }
} register_stubs;

}  // namespace
}  // namespace c10::openreg
