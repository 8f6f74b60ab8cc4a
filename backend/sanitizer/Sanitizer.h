#pragma once
// OPENREG_SANITIZER: the backend's hooks into the stream race checker (Note [Stream race checker
// model] in RaceChecker.h). Each hook is one call; when the checker is off it costs one relaxed load
// and a branch (relaxed: enabling happens before first use, so no ordering with other data is needed).
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <ATen/core/ivalue.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Stream.h>

#include "backend/Export.h"

namespace c10 { class OperatorHandle; }

namespace openreg::sanitizer {

extern std::atomic<bool> g_enabled;
inline bool enabled() { return g_enabled.load(std::memory_order_relaxed); }

// Mode 1 raises at the racing op; mode 2 ("report") records, continues, prints a summary at exit
// and exits non-zero. Returns false if a mode was already fixed (env var or an earlier call).
OPENREG_BACKEND_API bool enable(int mode);
OPENREG_BACKEND_API int mode();

namespace detail {
void op(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args, const std::vector<bool>& written);
void outputs(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> outputs);
void tensor(const char* op, const at::Tensor& t, bool write);
void copy(const at::Tensor& src, const at::Tensor& dst, bool non_blocking);
void event_record(const void* event, const c10::Stream& s);
void event_wait(const void* event, const c10::Stream& s);
void event_sync(const void* event);
void stream_sync(const c10::Stream& s);
void device_sync(c10::DeviceIndex d);
void block_freed(int device, const void* ptr, std::size_t size, std::int64_t alloc_stream,
                 const std::vector<std::int64_t>& recorded_streams);
}  // namespace detail

// One-line hooks.
inline void on_op(const c10::OperatorHandle& o, c10::ArrayRef<c10::IValue> args, const std::vector<bool>& written) {
  if (enabled()) detail::op(o, args, written);
}
// `plan` is the fallback's ExecutePlan: its per-argument `written` flags come from the schema.
template <class Plan>
inline void on_op(const c10::OperatorHandle& o, c10::ArrayRef<c10::IValue> args, const Plan& plan) {
  if (!enabled()) return;
  std::vector<bool> written;
  written.reserve(plan.args.size());
  for (const auto& a : plan.args) written.push_back(a.written);
  detail::op(o, args, written);
}
inline void on_copy(const at::Tensor& src, const at::Tensor& dst, bool non_blocking) {
  if (enabled()) detail::copy(src, dst, non_blocking);
}
inline void on_outputs(const c10::OperatorHandle& o, c10::ArrayRef<c10::IValue> outs) {
  if (enabled()) detail::outputs(o, outs);
}
inline void on_tensor(const char* op, const at::Tensor& t, bool write) {
  if (enabled()) detail::tensor(op, t, write);
}
inline void on_event_record(const void* e, const c10::Stream& s) { if (enabled()) detail::event_record(e, s); }
inline void on_event_wait(const void* e, const c10::Stream& s) { if (enabled()) detail::event_wait(e, s); }
inline void on_event_sync(const void* e) { if (enabled()) detail::event_sync(e); }
inline void on_stream_sync(const c10::Stream& s) { if (enabled()) detail::stream_sync(s); }
inline void on_device_sync(c10::DeviceIndex d) { if (enabled()) detail::device_sync(d); }
// The caching allocator freed a block of `device` allocated on stream `alloc_stream` and used (by
// record_stream) on `recorded_streams`: its reuse is ordered after their work up to now.
inline void on_block_freed(int device, const void* ptr, std::size_t size, std::int64_t alloc_stream,
                           const std::vector<std::int64_t>& recorded_streams) {
  if (enabled()) detail::block_freed(device, ptr, size, alloc_stream, recorded_streams);
}

}  // namespace openreg::sanitizer
