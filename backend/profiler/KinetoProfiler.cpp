// Note [Kineto plugin]
// torch.profiler(activities=[..., ProfilerActivity.PrivateUse1]) reaches device work through a
// libkineto::IActivityProfiler that the backend registers with PyTorch's PrivateUse1ProfilerRegistry.
// It is a consumer of the sim's trace recorder through the runtime's view of it
// (backend/runtime/Trace.h), the same recorder torch.openreg.trace reads: each profiler session
// opens its own TraceRecording, so the two may be active at once and neither sees the other's start
// or stop.
//
// Correlation: torch pushes the correlation id of every CPU op it records (on the thread running the
// op) and Kineto forwards it to pushCorrelationId of each open session. We store it in the sim's
// thread-local correlation tag (set_trace_correlation), which the sim copies into every work item at
// enqueue, so a device record names the CPU op that issued it. processTrace() turns each record into
// a GenericTraceActivity linked to that CPU op, which gives the Chrome trace its flow arrows and
// key_averages() its device time (torch maps CONCURRENT_KERNEL / GPU_MEMCPY activities to the PrivateUse1 device).
//
// User annotations: as CUPTI does for CUDA, a record_function range also appears on the device, as a
// GPU_USER_ANNOTATION activity on each stream lane that ran work issued inside it, spanning that work.
// torch announces a range with pushUserCorrelationId (not pushCorrelationId); each thread keeps its
// open ranges, and the session records, for every op and range, the innermost range around it, so
// processTrace() can walk from a device item's issuing op up through every enclosing range.
//
// Lanes: pid = device index, tid = the stream's sim id, named "stream <id>" as CUDA's are.
// Flow arrows: as CUDA's go from cudaLaunchKernel to the kernel, ours go from an "openregLaunch"
// runtime event (on the issuing thread, at the enqueue) to the device item.

#include "backend/runtime/Trace.h"

#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <libkineto.h>     // CpuTraceBuffer (complete, for the unique_ptr in getTraceBuffer)
#include <output_base.h>  // ActivityLogger

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <tuple>
#include <unordered_map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#ifndef USE_KINETO
#error "backend/profiler needs USE_KINETO (the torch wheel is built with Kineto; see backend/CMakeLists.txt)"
#endif

namespace c10::openreg {
namespace {

using libkineto::ActivityType;

// Per thread: the tags that pushCorrelationId replaced, so popCorrelationId restores the enclosing
// op's tag (ops nest: an op's CPU kernel may call other ops).
thread_local std::vector<std::uint64_t> tl_saved_tags;
// Per thread: the correlation ids of the record_function ranges open on it, innermost last.
thread_local std::vector<std::uint64_t> tl_user_ranges;

// The name of the host-side launch event of a device item (Note [Kineto plugin]).
const std::string kLaunchName = "openregLaunch";

ActivityType activity_type_of(const TraceItem& item) {
  // torch attributes CONCURRENT_KERNEL and GPU_MEMCPY to the PrivateUse1 device (device time in
  // key_averages); host callbacks and event records run on the stream too, so they are kernels here.
  return item.is_copy() ? ActivityType::GPU_MEMCPY : ActivityType::CONCURRENT_KERNEL;
}

// steady_clock (the sim's) to the system clock (Kineto's and torch's trace time), measured once per
// trace; both clocks tick at the same rate over a profile.
std::int64_t steady_to_system_offset_ns() {
  const auto sys = std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::system_clock::now().time_since_epoch()).count();
  return sys - trace_clock_ns();
}

class OpenRegProfilerSession final : public libkineto::IActivityProfilerSession {
 public:
  void start() override {
    std::lock_guard lock(mutex_);
    session_ = std::make_unique<TraceRecording>();
    {
      std::lock_guard parents_lock(parents_mutex_);
      parents_.clear();
    }
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    std::lock_guard lock(mutex_);
    if (session_) records_ = session_->stop();
    session_.reset();
    status_ = libkineto::TraceStatus::READY;
  }

  std::vector<std::string> errors() override { return {}; }

  void processTrace(libkineto::ActivityLogger& logger) override { processTrace(logger, nullptr, 0, 0); }

  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked_activity,
                    int64_t /*start_time*/, int64_t /*end_time*/) override {
    std::lock_guard lock(mutex_);
    const std::int64_t offset = steady_to_system_offset_ns();
    activities_.clear();
    activities_.reserve(2 * records_.size());  // an item and its launch: no reallocation, see below
    std::set<std::pair<int, std::int64_t>> lanes;
    // One flow (launch -> item) per launch, as CUPTI gives every cudaLaunchKernel a correlation id of its
    // own: one CPU op may enqueue several items (a composite op, a backward node), and flows named by the
    // op's correlation id started twice under one id, which torch reports as "duplicate flow start".
    std::uint32_t next_flow = 0;
    for (const TraceItem& r : records_) {
      auto& a = activities_.emplace_back(std::make_unique<libkineto::GenericTraceActivity>(
          span_, activity_type_of(r), r.name));
      a->startTime = r.start_ns + offset;
      a->endTime = r.end_ns + offset;
      a->device = r.device;
      a->resource = static_cast<int32_t>(r.stream);
      a->id = static_cast<int32_t>(r.correlation);
      a->addMetadata("device", r.device);
      a->addMetadata("stream", r.stream);
      a->addMetadataQuoted("kind", r.kind);
      a->addMetadata("correlation", r.correlation);
      if (r.is_copy()) a->addMetadata("bytes", r.bytes);
      if (r.correlation != kNoTraceCorrelation && linked_activity) {
        a->linked = linked_activity(static_cast<int32_t>(r.correlation));
      }
      lanes.emplace(r.device, r.stream);
      if (a->linked != nullptr && r.enqueue_ns != 0) {
        // The host side of the launch, as cudaLaunchKernel is for CUDA: a runtime event on the issuing
        // op's thread at the moment of the enqueue, where the flow arrow to the device item starts.
        auto& launch = activities_.emplace_back(std::make_unique<libkineto::GenericTraceActivity>(
            span_, ActivityType::PRIVATEUSE1_RUNTIME, kLaunchName));
        launch->startTime = r.enqueue_ns + offset;
        launch->endTime = launch->startTime + 1;
        launch->device = static_cast<int32_t>(a->linked->deviceId());
        launch->resource = static_cast<int32_t>(a->linked->resourceId());
        launch->threadId = a->linked->getThreadId();
        launch->id = a->id;
        launch->linked = a->linked;
        launch->flow.id = ++next_flow;
        launch->flow.type = libkineto::kLinkAsyncCpuGpu;
        launch->flow.start = true;
        a->flow.id = launch->flow.id;
        a->flow.type = libkineto::kLinkAsyncCpuGpu;
        a->flow.start = false;
        logger.handleGenericActivity(*launch);
      }
      logger.handleGenericActivity(*a);
    }
    if (linked_activity) log_user_annotations(logger, linked_activity, offset);
    resources_.clear();
    for (const auto& [device, stream] : lanes) {
      resources_.push_back(libkineto::ResourceInfo{static_cast<int64_t>(stream), static_cast<int64_t>(stream), device,
                                                   "stream " + std::to_string(stream)});
    }
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override { return nullptr; }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::lock_guard lock(mutex_);
    return resources_;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return nullptr; }

  // Called on the thread that runs the CPU op (see Note [Kineto plugin]).
  void pushCorrelationId(uint64_t id) override {
    tl_saved_tags.push_back(trace_correlation());
    set_trace_correlation(id);
    note_enclosing_range(id);
  }

  void popCorrelationId() override {
    if (tl_saved_tags.empty()) return;  // pushed before this session existed
    set_trace_correlation(tl_saved_tags.back());
    tl_saved_tags.pop_back();
  }

  void pushUserCorrelationId(uint64_t id) override {
    note_enclosing_range(id);
    tl_user_ranges.push_back(id);
  }

  void popUserCorrelationId() override {
    if (!tl_user_ranges.empty()) tl_user_ranges.pop_back();
  }

 private:
  // One GPU_USER_ANNOTATION per (record_function range, device, stream) that ran work issued inside the
  // range, spanning that work (Note [Kineto plugin]).
  void log_user_annotations(libkineto::ActivityLogger& logger, const libkineto::getLinkedActivityCallback& linked_activity,
                            std::int64_t offset) {
    std::unordered_map<std::uint64_t, std::uint64_t> parents;
    {
      std::lock_guard lock(parents_mutex_);
      parents = parents_;
    }
    using Lane = std::tuple<std::uint64_t, int, std::int64_t>;  // (range's correlation, device, stream)
    std::map<Lane, std::pair<std::int64_t, std::int64_t>> spans;
    for (const TraceItem& r : records_) {
      // Ranges nest a handful deep; the bound only guards against a cycle from a reused id.
      auto it = parents.find(r.correlation);
      for (int depth = 0; it != parents.end() && depth < 64; ++depth, it = parents.find(it->second)) {
        const libkineto::ITraceActivity* range = linked_activity(static_cast<int32_t>(it->second));
        if (range == nullptr || range->type() != ActivityType::USER_ANNOTATION) continue;
        auto [span, fresh] = spans.try_emplace(Lane{it->second, r.device, r.stream}, r.start_ns, r.end_ns);
        if (!fresh) span->second = {std::min(span->second.first, r.start_ns), std::max(span->second.second, r.end_ns)};
      }
    }
    for (const auto& [lane, span] : spans) {
      const auto& [correlation, device, stream] = lane;
      const libkineto::ITraceActivity* range = linked_activity(static_cast<int32_t>(correlation));
      auto& a = activities_.emplace_back(std::make_unique<libkineto::GenericTraceActivity>(
          span_, ActivityType::GPU_USER_ANNOTATION, range->name()));
      a->startTime = span.first + offset;
      a->endTime = span.second + offset;
      a->device = device;
      a->resource = static_cast<int32_t>(stream);
      a->id = static_cast<int32_t>(correlation);
      a->linked = range;
      logger.handleGenericActivity(*a);
    }
  }

  void note_enclosing_range(std::uint64_t id) {
    if (tl_user_ranges.empty()) return;
    std::lock_guard lock(parents_mutex_);
    parents_.emplace(id, tl_user_ranges.back());
  }

  std::mutex parents_mutex_;  // pushCorrelationId runs on every profiled op's thread
  std::unordered_map<std::uint64_t, std::uint64_t> parents_;  // op or range -> innermost range around it

  std::mutex mutex_;  // start/stop/processTrace come from the profiler's thread; guards everything below
  std::unique_ptr<TraceRecording> session_;
  std::vector<TraceItem> records_;
  libkineto::TraceSpan span_{0, 0, "openreg", ""};
  // Kept alive as long as the session: Kineto's loggers may hold pointers to logged activities.
  std::vector<std::unique_ptr<libkineto::GenericTraceActivity>> activities_;
  std::vector<libkineto::ResourceInfo> resources_;
};

class OpenRegActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }

  const std::set<ActivityType>& availableActivities() const override { return activities_; }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<ActivityType>& activity_types,
                                                                 const libkineto::Config& /*config*/) override {
    for (ActivityType t : activity_types) {
      if (activities_.count(t) != 0) return std::make_unique<OpenRegProfilerSession>();
    }
    return nullptr;  // no device activity asked for (a CPU-only profile)
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(int64_t /*ts_ms*/, int64_t /*duration_ms*/,
                                                                 const std::set<ActivityType>& activity_types,
                                                                 const libkineto::Config& config) override {
    return configure(activity_types, config);
  }

 private:
  std::string name_{"openreg"};
  std::set<ActivityType> activities_{ActivityType::CONCURRENT_KERNEL, ActivityType::GPU_MEMCPY};
};

}  // namespace

REGISTER_PRIVATEUSE1_PROFILER(OpenRegActivityProfiler);

}  // namespace c10::openreg
