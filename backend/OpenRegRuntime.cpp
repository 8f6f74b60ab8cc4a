#include "backend/OpenRegRuntime.h"

#include "backend/OpenRegFork.h"

#include <c10/util/Exception.h>

#include <openreg/sim/config.h>
#include <openreg/sim/error.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <utility>

namespace c10::openreg {

namespace sim = ::openreg::sim;

namespace {

// The sim allows at most 64 devices (OPENREG_DEVICE_COUNT is 1..64); fixed-size per-device tables
// avoid any locking on the paths that read them.
constexpr int kMaxDevices = 64;
constexpr int kStreamsPerPool = 32;
constexpr int kPriorityLevels = 2;  // index 0: normal, 1: high

// Like CUDA, the current device and the current stream of each device are per host thread.
thread_local c10::DeviceIndex tls_current_device = 0;
// Zero-initialised means "the default stream" on every device.
static_assert(sim::kDefaultStreamId == 0);
thread_local std::array<c10::StreamId, kMaxDevices> tls_current_streams{};

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

sim::Runtime& runtime() {
  check_not_in_bad_fork();
  return translate_sim_errors([]() -> sim::Runtime& { return sim::Runtime::global(); });
}

// The error code of an invalid-device AcceleratorError: CUDA's cudaErrorInvalidDevice, so code that
// inspects `err.error_code` reads the same value as on CUDA.
constexpr std::int32_t kInvalidDeviceErrorCode = 101;

[[noreturn]] void throw_invalid_device(std::int64_t index, int count) {
  throw c10::AcceleratorError({__func__, __FILE__, static_cast<std::uint32_t>(__LINE__)}, kInvalidDeviceErrorCode,
                              c10::str("openreg error: invalid device ordinal ", index, ": valid device indices are ",
                                       count == 0 ? std::string("none (openreg has no devices)")
                                                  : c10::str("0..", count - 1, " (openreg has ", count,
                                                             count == 1 ? " device)" : " devices)")));
}

c10::Stream make_stream(c10::DeviceIndex index, c10::StreamId id) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, index), id);
}

}  // namespace

namespace detail {

[[noreturn]] void rethrow_sim_error(const sim::Error& e) {
  using sim::Errc;
  switch (e.code()) {
    case Errc::kOutOfMemory:
      TORCH_CHECK_WITH(OutOfMemoryError, false, "openreg out of memory. ", e.what());
    case Errc::kInvalidDevice:
      throw c10::AcceleratorError({__func__, __FILE__, static_cast<std::uint32_t>(__LINE__)},
                                  kInvalidDeviceErrorCode, e.what());
    case Errc::kInvalidArgument:
    case Errc::kInvalidStream:
    case Errc::kInvalidEvent:
    case Errc::kNotTimed:
      TORCH_CHECK_VALUE(false, e.what());
    case Errc::kConfig: {
      const auto* config = dynamic_cast<const sim::ConfigError*>(&e);
      TORCH_CHECK(false, "openreg: invalid configuration",
                  config != nullptr ? " (" + config->variable() + ")" : std::string(), ": ", e.what());
    }
    case Errc::kInvalidPointer:
    case Errc::kWorkFailed:
    case Errc::kNotRecorded:
    case Errc::kNotReady:
      break;
  }
  TORCH_CHECK(false, "openreg: ", e.what());
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
  runtime();  // reads the configuration; throws naming a malformed variable
  mark_runtime_initialized();
}

void check_device_index(c10::DeviceIndex index) {
  checked_device_index(index);
}

c10::DeviceIndex checked_device_index(std::int64_t index) {
  const int count = runtime().device_count();
  if (index < 0 || index >= count) {
    throw_invalid_device(index, count);
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
  return translate_sim_errors([&]() -> sim::Device& { return runtime().device(index); });
}

c10::Stream current_stream(c10::DeviceIndex index) {
  check_device_index(index);
  return make_stream(index, tls_current_streams[index]);
}

c10::Stream exchange_stream(c10::Stream stream) {
  sim_stream(stream);  // validates type, device and id before it becomes current
  const auto index = stream.device_index();
  return make_stream(index, std::exchange(tls_current_streams[index], stream.id()));
}

c10::Stream default_stream(c10::DeviceIndex index) {
  check_device_index(index);
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
  TORCH_CHECK_VALUE(stream.device_type() == c10::DeviceType::PrivateUse1,
                    "openreg: expected an openreg stream, got a stream of device type ",
                    stream.device_type());
  sim::Device& device = sim_device(stream.device_index());
  if (stream.id() == sim::kDefaultStreamId) {
    return *device.default_stream();
  }
  // The device keeps every stream it created alive (we never destroy streams), so the reference
  // outlives the shared_ptr returned by the lookup.
  return *translate_sim_errors([&] { return device.stream(stream.id()); });
}

int stream_priority(const c10::Stream& stream) {
  return sim::cuda_stream_priority(sim_stream(stream).priority());
}

sim::Stream& current_sim_stream(c10::DeviceIndex index) {
  return sim_stream(current_stream(index));
}

void synchronize_device(c10::DeviceIndex index) {
  sim::Device& device = sim_device(index);
  translate_sim_errors([&] { device.synchronize(); });
}

std::uint64_t device_busy_time_ns(c10::DeviceIndex index) {
  sim::Device& device = sim_device(index);
  // The sim sums busy time over the device's compute threads; per thread it is the share nvidia-smi
  // reports (exactly "at least one item ran" when the device has one thread, the default on a machine
  // with no more cores than devices).
  return device.busy_time_ns() / static_cast<std::uint64_t>(std::max(1, runtime().config().compute_threads));
}

DeviceProperties device_properties(c10::DeviceIndex index) {
  check_device_index(index);
  const sim::Config& config = runtime().config();
  return DeviceProperties{"openreg", config.memory_capacity, config.compute_threads, config.copy_bandwidth};
}

}  // namespace c10::openreg
