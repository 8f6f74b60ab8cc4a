#include "openreg/sim/device.h"

#include <oneapi/tbb/task_arena.h>
#include <oneapi/tbb/task_scheduler_observer.h>

#include <boost/lockfree/queue.hpp>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "copy_engine.h"
#include "cpu_relax.h"
#include "host_wait.h"
#include "internal_check.h"
#include "openreg/sim/runtime.h"
#include "openreg/sim/trace.h"
#include "arena_task_arg.h"
#include "tsan_annotations.h"
#include "virtual_clock.h"

namespace openreg::sim {
namespace {
// Relaxed loads/stores suffice: the hook is a plain function pointer with no data published with it.
std::atomic<void (*)()> g_idle_hook{nullptr};

// Calls the idle hook when a worker leaves its arena: oneTBB takes a worker out of an arena once the
// arena has no work left for it (after a short spin), so this runs between the device's busy spells,
// never inside a kernel.
class IdleObserver final : public tbb::task_scheduler_observer {
 public:
  explicit IdleObserver(tbb::task_arena& arena) : tbb::task_scheduler_observer(arena) { observe(true); }
  ~IdleObserver() override { observe(false); }  // before the arena goes; waits for running callbacks
  void on_scheduler_exit(bool /*is_worker*/) override {
    if (auto* hook = g_idle_hook.load(std::memory_order_relaxed)) hook();
  }
};
}  // namespace

void set_compute_thread_idle_hook(void (*hook)()) noexcept { g_idle_hook.store(hook, std::memory_order_relaxed); }

// Note [Elastic device concurrency]
// A device's compute units are Config::compute_threads lanes (the process's cores unless
// OPENREG_COMPUTE_THREADS caps it), each a oneTBB task_arena of concurrency 1; that total is a cap, not
// a reservation. All arenas draw from oneTBB's one worker pool, which has a worker for every lane
// (Note [TBB worker budget]): the market gives idle workers to arenas with queued tasks and takes them
// back when an arena runs dry, so every busy lane runs, and busy devices share the cores. Intra-op
// parallelism inside a kernel sizes itself from the kernels running at once (backend
// engine/ExecuteThreads.cpp), so one busy stream's kernels use every core through their OpenMP
// team, and two devices' kernels split them.
// Correctness does not depend on the market's timing: every task is enqueued (oneTBB guarantees
// enqueued tasks progress even when the market gives the arena no worker at first), and every lane can
// hold a worker of its own, so work waiting on another device cannot starve it.
//
// Note [Device lanes]
// Why lanes and not one arena of concurrency compute_threads: oneTBB asks the market for an arena's
// whole concurrency on every enqueue, not for one worker per task. With one arena of concurrency 2, a
// single busy stream (one drain task) still pulled the second worker into the arena at every enqueue
// (a stream waking, a slice ending), where it spun looking for work on the core the kernel's OpenMP
// team and the issuing host thread needed: a loop of 1M-float adds ran at 150 us per op in some
// batches and 250-400 us in others. A lane asks for one worker per queued drain task. Tasks go to the
// lane with the fewest queued or running drain tasks, so two ready streams run side by side. A kernel
// that runs oneTBB parallel algorithms of its own enters the device's whole concurrency through
// Device::parallel (the backend's kernels parallelize with OpenMP instead, sized by
// IntraOpThreadsScope).
// Measured on 2 cores: a loop of 100 adds of 1M floats, 9 alternating runs each, one arena 179 us
// median per op, lanes 154 us; default_config_bench's small op / 1M loop / CPU slowdown, three
// alternating runs each: one arena 0.97-1.70x / 1.25-1.91x / 1.15-1.57x, lanes 0.87-0.97x /
// 0.86-1.00x / 1.00-1.80x. Sending a stream back to the lane that drained it last (to keep one worker
// warm) measured worse: 1M loop 1.17-1.51x against 0.73-1.31x, two streams 1.42-1.62x against
// 1.59-1.64x.

// Note [A stream stays on its lane]
// A stream that ends a drain slice with no other stream of its device ready re-queues itself on the
// lane it is draining on, if that lane has no other task. Sent to the least loaded lane instead (the
// other one: its own lane still counted the finishing task), a lone busy stream moved to another
// worker every slice. Each worker that runs kernels owns an OpenMP team (backend engine/ExecuteThreads.cpp),
// so two teams were alive on a 2-core machine, which makes libgomp cut every team's spin-wait to a
// few iterations (it does once its threads outnumber the cores): the team's threads slept at each
// barrier and the kernels paid a futex wake per parallel region; and the worker that left its lane
// released its team, which the next kernel re-created (a thread per slice). A conv training step
// (bench/benchmarks/default_config_bench.py's) did ~95 voluntary context switches per step before, ~2
// after. The enqueue from inside the lane's arena wakes no other worker: the arena's one slot is
// taken by the caller, which picks the task up when its current one returns. This differs from
// sending every wake-up back to the last lane (measured worse above): a stream woken by its host, or
// by another stream's drainer (an event record it completes releases the stream's wait), still goes
// to the least loaded lane, so two ready streams still spread over the lanes; only the drained stream
// itself stays.

struct Device::State {
  Runtime* runtime = nullptr;
  int index = 0;
  int threads = 1;
  std::uint64_t bandwidth = kUnlimitedBandwidth;
  std::unique_ptr<DeviceMemory> memory;

  // One queue per StreamPriority; arena tasks take from the highest non-empty one.
  boost::lockfree::queue<Stream*> ready[2] = {boost::lockfree::queue<Stream*>(64), boost::lockfree::queue<Stream*>(64)};
  // One reference per arena task not finished plus one per submitter still inside
  // task_arena::enqueue (a task can finish before its submitter returns, e.g. a stream resumed from
  // another device's thread). The destructor waits for 0: dropping a reference is each one's last
  // touch of the device.
  std::atomic<std::int64_t> busy_refs{0};
  // Accumulated time compute threads spent running this device's kernels and host callbacks.
  std::atomic<std::uint64_t> busy_ns{0};
  // Note [Device lanes]. No slot reserved for host threads: they never run device work. Declared
  // after what tasks touch.
  struct Lane {
    tbb::task_arena arena{1, /*reserved_for_masters=*/0};
    std::unique_ptr<IdleObserver> idle_observer;  // created after the arena is initialized, destroyed first
    // Drain tasks enqueued here and not finished. Relaxed: it only steers the choice of lane; a stale
    // read sends a task to a busier lane, where it still runs (later).
    std::atomic<int> tasks{0};
    const State* owner = nullptr;
  };
  // The lane whose drain task this thread is running, and the stream it drains (null outside drain
  // tasks).
  static thread_local Lane* tl_draining_lane;
  static thread_local const Stream* tl_draining_stream;
  std::vector<std::unique_ptr<Lane>> lanes;  // compute_threads of them; fixed after construction
  // Device::parallel's arena: the device's whole concurrency for a kernel's own parallel algorithms.
  tbb::task_arena compute;

  std::unique_ptr<CopyEngine> inbound;   // host -> device
  std::unique_ptr<CopyEngine> outbound;  // device -> host, device -> device, peer

  mutable std::mutex streams_mutex;
  std::unordered_map<StreamId, std::shared_ptr<Stream>> streams;  // guarded by streams_mutex
  std::uint64_t retired_items = 0;  // items ever enqueued on destroyed streams; guarded by streams_mutex
  std::atomic<StreamId> next_id{kDefaultStreamId + 1};
  std::shared_ptr<Stream> default_stream;

  // An arena task that takes the most urgent ready stream and drains it. One task per ready-queue
  // push, so every pushed stream is taken by exactly one task; it need not be the one pushed with
  // it (that is what priorities mean).
  // `requeued`: the stream this task is for, when the stream schedules itself.
  void submit_drain(const Stream* requeued = nullptr) {
    Lane* lane = continuing_lane(requeued);
    if (lane == nullptr) lane = least_loaded_lane();
    lane->tasks.fetch_add(1, std::memory_order_relaxed);
    busy_refs.fetch_add(2, std::memory_order_relaxed);  // relaxed: only its final 0 matters
    tsan_task_submit();  // see Note [TSAN and oneTBB]
    lane->arena.enqueue([arg = ArenaTaskArg<State>(this), lane_arg = ArenaTaskArg<Lane>(lane)] {
      tsan_task_start();
      arg.get()->drain_one(*lane_arg.get());
    });
    busy_refs.fetch_sub(1, std::memory_order_release);  // pairs with the destructor's acquire
  }
  // The lane draining `stream` on this thread, when its task is the lane's only one: a stream that
  // re-queues itself at the end of a slice (Note [Drain slices] in stream.cpp) while nothing else of
  // the device waits stays on its lane (Note [A stream stays on its lane]). Any other stream this
  // drainer schedules (one it resumed from an event record) goes to the least loaded lane.
  Lane* continuing_lane(const Stream* stream) const {
    Lane* lane = tl_draining_lane;
    if (stream == nullptr || stream != tl_draining_stream || lane == nullptr || lane->owner != this ||
        lane->tasks.load(std::memory_order_relaxed) != 1) {
      return nullptr;
    }
    return lane;
  }
  Lane* least_loaded_lane() const {
    Lane* best = lanes.front().get();
    int least = best->tasks.load(std::memory_order_relaxed);
    for (std::size_t i = 1; i < lanes.size() && least > 0; ++i) {
      const int load = lanes[i]->tasks.load(std::memory_order_relaxed);
      if (load < least) {
        best = lanes[i].get();
        least = load;
      }
    }
    return best;
  }
  void drain_one(Lane& lane);
  std::vector<std::shared_ptr<Stream>> all_streams() const;  // the default stream first
};

Device::Device(Runtime& runtime, int index) : s_(std::make_unique<State>()) {
  const Config& config = runtime.config();
  s_->runtime = &runtime;
  s_->index = index;
  s_->threads = config.compute_threads;
  s_->bandwidth = config.copy_bandwidth;
  s_->memory = std::make_unique<DeviceMemory>(index, config.memory_capacity, config.execute == ExecuteMode::kCompute);
  s_->compute.initialize(config.compute_threads, /*reserved_for_masters=*/0);
  for (int i = 0; i < std::max(1, config.compute_threads); ++i) {
    auto lane = std::make_unique<State::Lane>();
    lane->owner = s_.get();
    lane->arena.initialize();
    lane->idle_observer = std::make_unique<IdleObserver>(lane->arena);
    s_->lanes.push_back(std::move(lane));
  }
  const std::string name = "openreg:" + std::to_string(index);
  const bool execute = config.execute == ExecuteMode::kCompute;
  s_->inbound = std::make_unique<CopyEngine>(index, name + " h2d", config.copy_bandwidth, execute);
  s_->outbound = std::make_unique<CopyEngine>(index, name + " d2h/d2d", config.copy_bandwidth, execute);
  s_->default_stream = std::shared_ptr<Stream>(new Stream(*this, kDefaultStreamId, StreamPriority::kNormal));
}

Device::~Device() {
  wait_idle();
  // All work is done; what may remain are tails: copy engines returning from resume() (joined
  // here), arena tasks returning from drain() and submitters returning from enqueue (busy_refs).
  s_->inbound.reset();
  s_->outbound.reset();
  for (auto& lane : s_->lanes) lane->idle_observer.reset();
  // acquire: pairs with the releases in busy_refs' decrements, so their last touches of the state
  // happen before we free it.
  while (s_->busy_refs.load(std::memory_order_acquire) != 0) std::this_thread::yield();
}

int Device::index() const noexcept { return s_->index; }
int Device::compute_threads() const noexcept { return s_->threads; }
std::uint64_t Device::copy_bandwidth() const noexcept { return s_->bandwidth; }
std::uint64_t Device::busy_time_ns() const noexcept { return s_->busy_ns.load(std::memory_order_relaxed); }
Runtime& Device::runtime() const noexcept { return *s_->runtime; }
DeviceMemory& Device::memory() noexcept { return *s_->memory; }
const std::shared_ptr<Stream>& Device::default_stream() const noexcept { return s_->default_stream; }

CopyEngine& Device::copy_engine(bool inbound) { return inbound ? *s_->inbound : *s_->outbound; }

std::shared_ptr<Stream> Device::create_stream(StreamPriority priority) {
  if (priority != StreamPriority::kNormal && priority != StreamPriority::kHigh) {
    throw_error(Errc::kInvalidArgument, "unknown stream priority " + std::to_string(static_cast<int>(priority)));
  }
  // relaxed: ids need only be unique, which the atomic increment guarantees.
  const StreamId id = s_->next_id.fetch_add(1, std::memory_order_relaxed);
  auto stream = std::shared_ptr<Stream>(new Stream(*this, id, priority));
  std::lock_guard lock(s_->streams_mutex);
  s_->streams.emplace(id, stream);
  return stream;
}

std::shared_ptr<Stream> Device::stream(StreamId id) const {
  if (id == kDefaultStreamId) return s_->default_stream;
  std::lock_guard lock(s_->streams_mutex);
  auto it = s_->streams.find(id);
  if (it == s_->streams.end()) {
    throw_error(Errc::kInvalidStream, "openreg:" + std::to_string(s_->index) + " has no stream " + std::to_string(id) +
                                          " (never created, or destroyed)");
  }
  return it->second;
}

void Device::destroy_stream(StreamId id) {
  if (id == kDefaultStreamId) {
    throw_error(Errc::kInvalidStream, "the default stream of openreg:" + std::to_string(s_->index) + " cannot be destroyed");
  }
  std::shared_ptr<Stream> st = stream(id);  // throws for unknown ids
  st->mark_destroyed();                     // new enqueues fail from here on
  st->wait_idle();
  std::lock_guard lock(s_->streams_mutex);
  if (s_->streams.erase(id) != 0) s_->retired_items += st->enqueued_count();
}

std::vector<std::shared_ptr<Stream>> Device::State::all_streams() const {
  std::lock_guard lock(streams_mutex);
  std::vector<std::shared_ptr<Stream>> all{default_stream};
  for (auto& [id, st] : streams) all.push_back(st);
  return all;
}

std::uint64_t Device::wait_idle() {
  std::vector<std::shared_ptr<Stream>> all;
  std::uint64_t enqueued = 0;
  {
    std::lock_guard lock(s_->streams_mutex);
    all.push_back(s_->default_stream);
    for (auto& [id, st] : s_->streams) all.push_back(st);
    enqueued = s_->retired_items;
  }
  // A stream destroyed meanwhile may be counted twice: one more drain pass, never one too few.
  for (auto& st : all) enqueued += st->enqueued_count();
  for (auto& st : all) st->wait_idle();
  return enqueued;
}

void Device::synchronize() {
  const std::vector<std::shared_ptr<Stream>> all = s_->all_streams();
  {
    InterruptibleHostWait interruptible;  // Note [Interruptible host waits]
    for (auto& st : all) st->wait_idle();
  }
  if (VirtualClock* clock = s_->runtime->virtual_clock()) clock->host_waited_device(s_->index);
  // Every stream's unreported failures are taken (so reported here, once), not just the first one's.
  std::string first;
  std::uint64_t others = 0;
  for (auto& st : all) {
    std::string message;
    std::uint64_t count = 0;
    if (!st->take_error(&message, &count)) continue;
    if (first.empty()) {
      first = std::move(message);
    } else {
      others += count;
    }
  }
  if (first.empty()) return;
  if (others != 0) {
    first += " (and " + std::to_string(others) + " more failure" + (others == 1 ? "" : "s") +
             " on other streams of openreg:" + std::to_string(s_->index) + ")";
  }
  throw Error(Errc::kWorkFailed, first);
}

thread_local Device::State::Lane* Device::State::tl_draining_lane = nullptr;
thread_local const Stream* Device::State::tl_draining_stream = nullptr;

void Device::schedule(Stream& stream) {
  const bool pushed = s_->ready[static_cast<int>(stream.priority())].push(&stream);
  OPENREG_SIM_ASSERT(pushed, "ready queue push failed");
  s_->submit_drain(&stream);
}

void Device::parallel(const std::function<void()>& body) { s_->compute.execute(body); }

void Device::add_busy_time(std::uint64_t ns) noexcept {
  // relaxed: a statistic; the item's completion (a release) publishes it to hosts that saw it complete.
  s_->busy_ns.fetch_add(ns, std::memory_order_relaxed);
}

bool Device::has_ready_streams() const noexcept {
  // empty() is a snapshot: a stream pushed just after it only waits for the drainer's next check.
  return !s_->ready[static_cast<int>(StreamPriority::kHigh)].empty() ||
         !s_->ready[static_cast<int>(StreamPriority::kNormal)].empty();
}

void Device::State::drain_one(Lane& lane) {
  Stream* next = nullptr;
  // The pushes precede their tasks, so some stream is there; the loop only covers another task
  // having taken "ours" while a stream pushed later is still being linked in.
  while (!ready[static_cast<int>(StreamPriority::kHigh)].pop(next) &&
         !ready[static_cast<int>(StreamPriority::kNormal)].pop(next)) {
    cpu_relax();
  }
  Lane* const outer_lane = tl_draining_lane;  // a drain never nests, but restore rather than assume
  const Stream* const outer_stream = tl_draining_stream;
  tl_draining_lane = &lane;
  tl_draining_stream = next;
  next->drain();
  tl_draining_lane = outer_lane;
  tl_draining_stream = outer_stream;
  lane.tasks.fetch_sub(1, std::memory_order_relaxed);
  busy_refs.fetch_sub(1, std::memory_order_release);  // last touch of the device
}

}  // namespace openreg::sim
