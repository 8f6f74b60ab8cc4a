#pragma once
// PrivateUse1HooksInterface for openreg: what ATen's Context asks of an accelerator (lazy init, default
// and new generators, pointer queries, pinned memory, device selection). Registered once at static
// initialisation. Thread-safety: every hook may be called from any thread.

#include <ATen/detail/PrivateUse1HooksInterface.h>

namespace c10::openreg {

struct OpenRegHooksInterface final : public at::PrivateUse1HooksInterface {
  void init() const override;
  bool hasPrimaryContext(c10::DeviceIndex device_index) const override;
  bool isBuilt() const override;      //!< always true (never throws)
  bool isAvailable() const override;  //!< device_count() > 0 (never throws)
  c10::DeviceIndex deviceCount() const override;
  void setCurrentDevice(c10::DeviceIndex device) const override;
  c10::DeviceIndex getCurrentDevice() const override;
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override;
  //! Like exchangeDevice, but a negative index only reports the current device.
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override;

  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index) const override;
  at::Generator getNewGenerator(c10::DeviceIndex device_index = -1) const override;

  at::Device getDeviceFromPtr(void* data) const override;
  bool isPinnedPtr(const void* data) const override;
  c10::Allocator* getPinnedMemoryAllocator() const override;
  //! Grows or shrinks an openreg storage, keeping its bytes (stream-ordered).
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override;
};

}  // namespace c10::openreg
