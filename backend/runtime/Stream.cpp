#include "backend/runtime/Stream.h"

#include "backend/runtime/Capture.h"
#include "backend/runtime/Device.h"
#include "backend/runtime/Fork.h"
#include "backend/runtime/SimErrors.h"

#include <c10/util/Exception.h>

#include <openreg/sim/device.h>
#include <openreg/sim/stream.h>

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <type_traits>

namespace c10::openreg {

namespace sim = ::openreg::sim;

static_assert(kLeastStreamPriority == sim::kLeastStreamPriority &&
                  kGreatestStreamPriority == sim::kGreatestStreamPriority,
              "torch's priority range is the sim's");

namespace {

constexpr int kStreamsPerPool = 32;
constexpr int kPriorityLevels = 2;  // index 0: normal, 1: high

// The current stream of one device on this thread (Note [OpenRegStream: a checked stream handle]).
// `sim` is null until the thread first resolves the slot (checking the device index then); the id is
// the current stream's even before that. Zero-initialised means "the default stream" on every device.
// Fixed-size per-device tables avoid any locking on the paths that read them.
struct CurrentStream {
  c10::StreamId id;
  sim::Stream* sim;
};
static_assert(sim::kDefaultStreamId == 0);
thread_local std::array<CurrentStream, kMaxDevices> tls_current_streams{};

// Streams handed out by stream_from_pool: created on first use of a slot, kept for the process
// lifetime (ids stay valid, as CUDA's pooled streams do).
struct StreamPool {
  std::mutex mutex;  // guards `streams`
  std::array<std::array<std::shared_ptr<sim::Stream>, kStreamsPerPool>, kPriorityLevels> streams;
  // Round-robin cursors; relaxed: they only spread streams, they publish no data.
  std::array<std::atomic<std::uint32_t>, kPriorityLevels> next{};
};
std::array<StreamPool, kMaxDevices>& stream_pools() {
  // Leaked on purpose: tensors freed during static destruction may still touch streams.
  static auto* pools = new std::array<StreamPool, kMaxDevices>();
  return *pools;
}

c10::Stream make_stream(c10::DeviceIndex index, c10::StreamId id) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, index), id);
}

//! The sim stream `id` of `device` (checked: an id the device never created is a ValueError).
sim::Stream* resolve_sim_stream(sim::Device& device, c10::StreamId id) {
  if (id == sim::kDefaultStreamId) return device.default_stream().get();
  // The device keeps every stream it created alive (we never destroy streams), so the pointer
  // outlives the shared_ptr returned by the lookup.
  return translate_sim_errors([&] { return device.stream(id); }).get();
}

}  // namespace

// The runtime's own tables hold streams known valid; they build handles without checking again.
struct OpenRegStreamAccess {
  static OpenRegStream make(c10::Stream stream, sim::Stream* s) noexcept { return OpenRegStream(stream, s); }
};

OpenRegStream::OpenRegStream(c10::Stream stream) : stream_(stream), sim_(nullptr) {
  TORCH_CHECK_VALUE(stream.device_type() == c10::DeviceType::PrivateUse1,
                    "openreg: expected an openreg stream, got a stream of device type ", stream.device_type());
  sim_ = resolve_sim_stream(sim_device(stream.device_index()), stream.id());
}

int OpenRegStream::priority() const noexcept {
  return sim::cuda_stream_priority(sim_->priority());
}

bool OpenRegStream::query() const {
  capture::check_stream_wait(*this, "querying the stream");
  return translate_sim_errors([&] { return sim_->query(); });
}

void OpenRegStream::synchronize() const {
  capture::check_stream_wait(*this, "synchronizing the stream");
  translate_sim_errors([&] { sim_->synchronize(); });
}

OpenRegStream current_openreg_stream(c10::DeviceIndex index) {
  // Hot path: one thread-local read. A slot is filled only after its index was checked, and the
  // bad-fork check (a relaxed atomic load) keeps a forked child from using its parent's streams.
  if (static_cast<std::make_unsigned_t<c10::DeviceIndex>>(index) < kMaxDevices) {
    const CurrentStream& slot = tls_current_streams[index];
    if (slot.sim != nullptr && !is_in_bad_fork()) {
      return OpenRegStreamAccess::make(make_stream(index, slot.id), slot.sim);
    }
  }
  sim::Device& device = sim_device(index);  // checks the index (and the fork)
  CurrentStream& slot = tls_current_streams[index];
  slot.sim = resolve_sim_stream(device, slot.id);
  return OpenRegStreamAccess::make(make_stream(index, slot.id), slot.sim);
}

OpenRegStream default_openreg_stream(c10::DeviceIndex index) {
  sim::Device& device = sim_device(index);
  return OpenRegStreamAccess::make(make_stream(index, sim::kDefaultStreamId), device.default_stream().get());
}

OpenRegStream exchange_openreg_stream(const OpenRegStream& stream) {
  OpenRegStream previous = current_openreg_stream(stream.device_index());
  tls_current_streams[stream.device_index()] = CurrentStream{stream.id(), &stream.sim()};
  return previous;
}

c10::Stream current_stream(c10::DeviceIndex index) {
  // Only the id: naming the current stream neither starts the device nor resolves its sim stream.
  check_device_index(index);
  return make_stream(index, tls_current_streams[index].id);
}

c10::Stream exchange_stream(c10::Stream stream) {
  return exchange_openreg_stream(OpenRegStream(stream)).unwrap();  // checked before it becomes current
}

c10::Stream default_stream(c10::DeviceIndex index) {
  check_device_index(index);  // like current_stream: the device need not start
  return make_stream(index, sim::kDefaultStreamId);
}

c10::Stream stream_from_pool(c10::DeviceIndex index, int priority) {
  sim::Device& device = sim_device(index);
  // CUDA's convention: lower is higher; anything below the greatest priority clamps to it, anything
  // above the least (positive) to normal.
  const sim::StreamPriority level_priority = sim::stream_priority_from_cuda(priority);
  const int level = level_priority == sim::StreamPriority::kHigh ? 1 : 0;
  StreamPool& pool = stream_pools()[index];
  const auto slot = pool.next[level].fetch_add(1, std::memory_order_relaxed) % kStreamsPerPool;
  std::lock_guard<std::mutex> lock(pool.mutex);
  auto& stream = pool.streams[level][slot];
  if (!stream) {
    stream = translate_sim_errors([&] {
      return device.create_stream(level_priority);
    });
  }
  return make_stream(index, stream->id());
}

sim::Stream& sim_stream(const c10::Stream& stream) {
  return OpenRegStream(stream).sim();
}

int stream_priority(const c10::Stream& stream) {
  return OpenRegStream(stream).priority();
}

sim::Stream& current_sim_stream(c10::DeviceIndex index) {
  return current_openreg_stream(index).sim();
}

}  // namespace c10::openreg
