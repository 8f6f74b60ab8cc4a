#include "backend/registration/Hooks.h"

#include "backend/runtime/Generator.h"
#include "backend/memory/HostAllocator.h"
#include "backend/runtime/Device.h"
#include "backend/ops/Resize.h"

namespace c10::openreg {

void OpenRegHooksInterface::init() const {
  c10::openreg::init();
}

bool OpenRegHooksInterface::hasPrimaryContext(c10::DeviceIndex device_index) const {
  return device_started(device_index);
}

bool OpenRegHooksInterface::isBuilt() const {
  return true;
}

bool OpenRegHooksInterface::isAvailable() const {
  return device_count() > 0;
}

c10::DeviceIndex OpenRegHooksInterface::deviceCount() const {
  return device_count();
}

void OpenRegHooksInterface::setCurrentDevice(c10::DeviceIndex device) const {
  set_device(device);
}

c10::DeviceIndex OpenRegHooksInterface::getCurrentDevice() const {
  return current_device();
}

c10::DeviceIndex OpenRegHooksInterface::exchangeDevice(c10::DeviceIndex device) const {
  return exchange_device(device);
}

c10::DeviceIndex OpenRegHooksInterface::maybeExchangeDevice(c10::DeviceIndex device) const {
  if (device < 0) {
    return current_device();
  }
  return exchange_device(device);
}

const at::Generator& OpenRegHooksInterface::getDefaultGenerator(c10::DeviceIndex device_index) const {
  return default_generator(device_index);
}

at::Generator OpenRegHooksInterface::getNewGenerator(c10::DeviceIndex device_index) const {
  return new_generator(device_index);
}

at::Device OpenRegHooksInterface::getDeviceFromPtr(void* data) const {
  const auto device = device_of_pointer(data);
  TORCH_CHECK_VALUE(device.has_value(), "openreg: pointer ", data, " is not in the memory of any openreg device");
  return at::Device(c10::DeviceType::PrivateUse1, *device);
}

bool OpenRegHooksInterface::isPinnedPtr(const void* data) const {
  return is_pinned_ptr(data);
}

c10::Allocator* OpenRegHooksInterface::getPinnedMemoryAllocator() const {
  return &host_allocator();
}

void OpenRegHooksInterface::resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const {
  at::openreg::resize_storage_bytes(storage.unsafeGetStorageImpl(), newsize);
}

namespace {
// Registered at load time so backward(), torch._C._get_accelerator() and generators work as soon as
// the library is loaded. Never unregistered: torch keeps the pointer for the process lifetime.
const bool g_hooks_registered = [] {
  at::RegisterPrivateUse1HooksInterface(new OpenRegHooksInterface());
  return true;
}();
}  // namespace

}  // namespace c10::openreg
