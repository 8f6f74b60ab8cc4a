#pragma once
// The PrivateUse1 DeviceGuardImplInterface: devices, streams and events for c10's generic guards,
// torch.Stream, torch.Event and torch.accelerator. Registered with C10_REGISTER_GUARD_IMPL.
//
// Events are carried by torch as `void*`: each is a heap-allocated OpenRegEventHandle created by the
// first record() and deleted by destroyEvent(). Thread-safety: every method may be called from any
// thread; an event handle may be used concurrently (the OpenRegEvent it holds is thread-safe).

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "backend/runtime/Event.h"

namespace c10::openreg {

//! What the `void*` of a c10 event points to.
struct OpenRegEventHandle {
  OpenRegEvent event;  //!< the streams that recorded or wait on it hold it too
};

struct OpenRegGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType static_type = c10::DeviceType::PrivateUse1;

  OpenRegGuardImpl() = default;
  explicit OpenRegGuardImpl(c10::DeviceType t);

  c10::DeviceType type() const override;
  c10::Device exchangeDevice(c10::Device d) const override;
  c10::Device getDevice() const override;
  void setDevice(c10::Device d) const override;
  void uncheckedSetDevice(c10::Device d) const noexcept override;
  c10::DeviceIndex deviceCount() const noexcept override;
  c10::DeviceCapability getDeviceCapability(c10::Device d) const override;

  c10::Stream getStream(c10::Device d) const override;
  c10::Stream getDefaultStream(c10::Device d) const override;
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool isHighPriority = false) const override;
  c10::Stream getNewStream(c10::Device d, int priority = 0) const override;
  c10::Stream exchangeStream(c10::Stream s) const override;
  void* getStreamNativeHandle(const c10::Stream s) const override;
  bool queryStream(const c10::Stream& stream) const override;
  void synchronizeStream(const c10::Stream& stream) const override;
  bool isStreamCapturing(const c10::Stream& stream) const override;
  void synchronizeDevice(const c10::DeviceIndex device_index) const override;

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override;
  void block(void* event, const c10::Stream& stream) const override;
  bool queryEvent(void* event) const override;
  void synchronizeEvent(void* event) const override;
  double elapsedTime(void* event1, void* event2, const c10::DeviceIndex device_index) const override;
  void destroyEvent(void* event, const c10::DeviceIndex device_index) const noexcept override;

  void recordDataPtrOnStream(const c10::DataPtr& data_ptr, const c10::Stream& stream) const override;
};

}  // namespace c10::openreg
