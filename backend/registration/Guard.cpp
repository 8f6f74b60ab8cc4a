#include "backend/registration/Guard.h"

#include "backend/memory/DeviceAllocator.h"
#include "backend/runtime/Device.h"
#include "backend/runtime/Stream.h"
#include "backend/runtime/SyncDebug.h"
#include "backend/sanitizer/Sanitizer.h"

#include <c10/util/Exception.h>

namespace c10::openreg {

namespace {

constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

c10::DeviceIndex resolve(c10::DeviceIndex index) {
  return index == -1 ? current_device() : index;
}

OpenRegEvent& event_of(void* event) {
  auto* handle = static_cast<OpenRegEventHandle*>(event);
  TORCH_INTERNAL_ASSERT(handle != nullptr);
  return handle->event;
}

}  // namespace

OpenRegGuardImpl::OpenRegGuardImpl(c10::DeviceType t) {
  TORCH_INTERNAL_ASSERT(t == kType, "OpenRegGuardImpl built for device type ", t);
}

c10::DeviceType OpenRegGuardImpl::type() const {
  return kType;
}

c10::Device OpenRegGuardImpl::exchangeDevice(c10::Device d) const {
  TORCH_INTERNAL_ASSERT(d.type() == kType, "expected an openreg device, got ", d);
  return c10::Device(kType, exchange_device(resolve(d.index())));
}

c10::Device OpenRegGuardImpl::getDevice() const {
  return c10::Device(kType, current_device());
}

void OpenRegGuardImpl::setDevice(c10::Device d) const {
  TORCH_INTERNAL_ASSERT(d.type() == kType, "expected an openreg device, got ", d);
  set_device(resolve(d.index()));
}

void OpenRegGuardImpl::uncheckedSetDevice(c10::Device d) const noexcept {
  // Called by guard destructors to restore a device that was valid when saved.
  try {
    set_device(resolve(d.index()));
  } catch (...) {
  }
}

c10::DeviceIndex OpenRegGuardImpl::deviceCount() const noexcept {
  return device_count();
}

c10::DeviceCapability OpenRegGuardImpl::getDeviceCapability(c10::Device d) const {
  check_device_index(resolve(d.index()));
  return c10::DeviceCapability();  // kernels run on the CPU: every dtype the CPU has
}

c10::Stream OpenRegGuardImpl::getStream(c10::Device d) const {
  return current_stream(resolve(d.index()));  // names the stream without starting the device
}

c10::Stream OpenRegGuardImpl::getDefaultStream(c10::Device d) const {
  return default_stream(resolve(d.index()));
}

c10::Stream OpenRegGuardImpl::getStreamFromGlobalPool(c10::Device d, bool isHighPriority) const {
  return stream_from_pool(resolve(d.index()), isHighPriority ? -1 : 0);
}

c10::Stream OpenRegGuardImpl::getNewStream(c10::Device d, int priority) const {
  // A pooled stream, never the default one (torch.Stream() must not alias the default stream).
  return stream_from_pool(resolve(d.index()), priority);
}

c10::Stream OpenRegGuardImpl::exchangeStream(c10::Stream s) const {
  return exchange_openreg_stream(OpenRegStream(s));  // checked before it becomes current
}

void* OpenRegGuardImpl::getStreamNativeHandle(const c10::Stream s) const {
  return OpenRegStream(s).native_handle();
}

bool OpenRegGuardImpl::queryStream(const c10::Stream& stream) const {
  const bool done = OpenRegStream(stream).query();
  if (done) ::openreg::sanitizer::on_host_wait(stream);  // the host saw the stream's work complete
  return done;
}

void OpenRegGuardImpl::synchronizeStream(const c10::Stream& stream) const {
  const OpenRegStream s(stream);
  warn_or_error_on_sync();  // torch.cuda flags Stream.synchronize (Note [Sync debug mode])
  s.synchronize();
  ::openreg::sanitizer::on_host_wait(stream);
}

bool OpenRegGuardImpl::isStreamCapturing(const c10::Stream& /*stream*/) const {
  return false;  // no graph capture
}

void OpenRegGuardImpl::synchronizeDevice(const c10::DeviceIndex device_index) const {
  synchronize_device(resolve(device_index));
}

void OpenRegGuardImpl::record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
                              const c10::EventFlag flag) const {
  TORCH_CHECK(device_index == -1 || device_index == stream.device_index(), "Event device index ",
              static_cast<int>(device_index), " does not match recording stream's device index ",
              static_cast<int>(stream.device_index()), ".");
  TORCH_CHECK_VALUE(flag == c10::EventFlag::PYTORCH_DEFAULT || flag == c10::EventFlag::BACKEND_DEFAULT,
                    "openreg: received an invalid EventFlag");
  const OpenRegStream s(stream);
  if (*event == nullptr) {
    // BACKEND_DEFAULT is what torch passes for enable_timing=True.
    const bool timing = flag == c10::EventFlag::BACKEND_DEFAULT;
    *event = new OpenRegEventHandle{OpenRegEvent(timing)};  // owned by the caller until destroyEvent
  }
  event_of(*event).record(s);
  ::openreg::sanitizer::on_event_record(*event, stream);
}

void OpenRegGuardImpl::block(void* event, const c10::Stream& stream) const {
  if (event == nullptr) {
    return;  // never recorded: nothing to wait for
  }
  const OpenRegStream s(stream);
  event_of(event).block(s);
  ::openreg::sanitizer::on_event_wait(event, stream);
}

bool OpenRegGuardImpl::queryEvent(void* event) const {
  if (event == nullptr) {
    return true;
  }
  const bool done = event_of(event).query();
  if (done) ::openreg::sanitizer::on_event_done(event);  // the host saw the event complete
  return done;
}

void OpenRegGuardImpl::synchronizeEvent(void* event) const {
  if (event == nullptr) {
    return;
  }
  event_of(event).synchronize();
  ::openreg::sanitizer::on_event_done(event);
}

double OpenRegGuardImpl::elapsedTime(void* event1, void* event2, const c10::DeviceIndex /*device_index*/) const {
  TORCH_CHECK(event1 != nullptr && event2 != nullptr,
              "Both events must be recorded before calculating elapsed time.");
  return event_of(event1).elapsed_ms(event_of(event2));
}

void OpenRegGuardImpl::destroyEvent(void* event, const c10::DeviceIndex /*device_index*/) const noexcept {
  // Streams that recorded or wait on the event hold their own reference, so this is safe at any time.
  delete static_cast<OpenRegEventHandle*>(event);
}

void OpenRegGuardImpl::recordDataPtrOnStream(const c10::DataPtr& data_ptr, const c10::Stream& stream) const {
  device_allocator().recordStream(data_ptr, stream);
}

C10_REGISTER_GUARD_IMPL(PrivateUse1, OpenRegGuardImpl);

}  // namespace c10::openreg
