#include "backend/OpenRegRuntime.h"

#include "backend/OpenRegFork.h"
#include "backend/OpenRegStream.h"
#include "backend/sanitizer/Sanitizer.h"

#include <c10/util/Exception.h>

#include <openreg/sim/config.h>
#include <openreg/sim/error.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>

namespace c10::openreg {

namespace sim = ::openreg::sim;

namespace {

// The sim allows at most 64 devices (OPENREG_DEVICE_COUNT is 1..64); fixed-size per-device tables
// avoid any locking on the paths that read them.
constexpr int kStreamsPerPool = 32;
constexpr int kPriorityLevels = 2;  // index 0: normal, 1: high

// Like CUDA, the current device and the current stream of each device are per host thread.
thread_local c10::DeviceIndex tls_current_device = 0;

// The current stream of one device on this thread (Note [OpenRegStream: a checked stream handle]).
// `sim` is null until the thread first resolves the slot (checking the device index then); the id is
// the current stream's even before that. Zero-initialised means "the default stream" on every device.
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

sim::Runtime& runtime() {
  check_not_in_bad_fork();
  sim::Runtime& rt = translate_sim_errors([]() -> sim::Runtime& { return sim::Runtime::global(); });
  // Once, when the runtime first started (a bad environment threw above, and throws again on every call):
  // Note [OPENREG_SANITIZER is read when the runtime starts] in sanitizer/Sanitizer.cpp.
  static const bool race_checker_configured = [&] {
    using ::openreg::sanitizer::Mode;
    switch (rt.config().race_check) {
      case sim::RaceCheckMode::kOff: break;
      case sim::RaceCheckMode::kRaise: ::openreg::sanitizer::enable_from_environment(Mode::kRaise); break;
      case sim::RaceCheckMode::kReport: ::openreg::sanitizer::enable_from_environment(Mode::kReport); break;
    }
    return true;
  }();
  (void)race_checker_configured;
  return rt;
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
  return translate_sim_errors([&] { return sim_->query(); });
}

void OpenRegStream::synchronize() const {
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
  // Hot path (every factory, guard and stream lookup): the count is fixed once the runtime started,
  // so a cached copy answers; relaxed, because the value itself is all that is shared (a thread that
  // sees 0 takes the full path below).
  static std::atomic<int> started_count{0};
  const int known = started_count.load(std::memory_order_relaxed);
  if (index >= 0 && index < known && !is_in_bad_fork()) return static_cast<c10::DeviceIndex>(index);
  const int count = runtime().device_count();
  started_count.store(count, std::memory_order_relaxed);
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

void synchronize_device(c10::DeviceIndex index) {
  sim::Device& device = sim_device(index);
  translate_sim_errors([&] { device.synchronize(); });
  ::openreg::sanitizer::on_device_sync(index);  // every path to a device synchronize comes here
}

std::uint64_t device_busy_time_ns(c10::DeviceIndex index) {
  sim::Device& device = sim_device(index);
  // The sim sums busy time over the device's compute threads; per thread it is the share nvidia-smi
  // reports (exactly "at least one item ran" when the device has one thread, the default on a machine
  // with no more cores than devices).
  return device.busy_time_ns() / static_cast<std::uint64_t>(std::max(1, runtime().config().compute_threads));
}

void drain_at_exit() noexcept { sim::Runtime::drain_at_exit(); }

void* alloc_pinned(std::size_t bytes) {
  return translate_sim_errors([&] { return runtime().host_alloc_pinned(bytes); });
}

void free_pinned(void* ptr) {
  // Not runtime(): a pinned block outlives a fork, and the runtime it came from exists (it is leaked).
  translate_sim_errors([&] { sim::Runtime::global().host_free_pinned(ptr); });
}

bool is_pinned(const void* ptr) {
  return translate_sim_errors([&] { return sim::Runtime::global().is_pinned(ptr); });
}

std::string format_bytes(std::uint64_t bytes) { return sim::format_bytes(bytes); }

DeviceProperties device_properties(c10::DeviceIndex index) {
  check_device_index(index);
  const sim::Config& config = runtime().config();
  return DeviceProperties{"openreg", config.memory_capacity, config.compute_threads, config.copy_bandwidth};
}

}  // namespace c10::openreg
