// Note [Stream scheduling]
// A stream owns no thread. Its state machine is one atomic, `pending`: the number of items enqueued
// but not yet completed. It doubles as an ownership token:
//  - an enqueuer pushes its item on the lock-free queue, then increments `pending`; the one that moves
//    it from 0 to 1 becomes the owner and schedules the stream on its device (ready queue + arena task);
//  - exactly one thread owns the stream at a time: the arena task draining it, or, while the stream is
//    parked, the copy engine or event completer holding its current item;
//  - the owner completes items one by one; each completion decrements `pending`, and the completion
//    that brings it back to 0 releases ownership (the next enqueue schedules again).
// Since each unit of `pending` stands for an item already pushed, the owner always finds an item to
// pop. Items therefore run one at a time, in queue order, and a stream is never scheduled twice.
// While it owns the stream, the owner keeps it alive through `self` (a user may drop the last reference
// while work is pending).

// Note [Timing-only execution]
// With OPENREG_EXECUTE=timing (and a device profile) kernels and copies are placed on the virtual
// clock (Note [Virtual time]) and, unless they work on values (below), not executed; everything else is
// as in the normal mode: the op path with its shape checks and errors, the caching allocator with its
// real sizes, streams, events, the launch queue, traces and the race checker. Device memory is
// reserved address space without backing pages (DeviceMemory with backed = false), so a device holds
// the profile's full capacity and runs out of memory where the modelled GPU would. Host callbacks
// still run. The model's tensors hold no values; the times, the memory peak and out-of-memory errors
// are the model's.

// Note [Values in timing-only execution]
// A program reads some device values back to steer itself, not as results: DDP allgathers each rank's
// parameter count and shapes and broadcasts rank 0's bucket assignment; a pipeline schedule multiplies
// the stages' votes; recv_object_list sums the sizes it received; torchtitan's varlen attention finds
// each document's start in the position ids ((positions == 0).nonzero()) and checks that the sequence
// lengths it derives are non-decreasing. Read as zeros or as garbage, these failed in ways no GPU run
// would ("Rank 0 has 4 params, while rank 0 has inconsistent 0 params", "cumulative sequence lengths
// must be non-decreasing"). All such data starts on the host and stays small, so timing-only execution
// tracks which device bytes hold the values a GPU would hold (DeviceMemory::holds_values), and runs
// exactly the work that computes them:
//  - A copy from the host of at most kTimingOnlyMovedBytes (openreg/sim/timing_only.h) moves its data
//    and its destination holds values; a larger one moves nothing and its destination holds none.
//  - A kernel that says what it reads and writes (KernelAccess: the op engine's kernels, fills, copy
//    kernels) runs when everything it reads holds values and it touches at most
//    kTimingOnlyValuedKernelBytes, or, reading nothing (a fill, an arange), when it writes at most
//    kTimingOnlyMovedBytes. What it writes then holds values, and what it raises is a failure as on a
//    GPU (the values are the GPU's). Otherwise it only takes its time and what it writes holds none.
//  - A device-to-device or device-to-host copy moves its data when its source holds values (and is at
//    most kTimingOnlyValuedKernelBytes); otherwise its destination holds none, and a host destination
//    reads zeros: what the host reads of a value never computed is zero, never a stale block's bytes.
//  - Collectives that move their data (python/torch_openreg/_distributed/_group.py, small ones) make
//    their outputs hold values; the others make them hold none.
//  - A kernel that does not say what it reads (compiled kernels, graph replays) runs when its cost
//    counts at most kTimingOnlyRunKernelBytes, and what it raises is dropped: its inputs may hold no
//    values. What it writes keeps its state.
// The state is decided on the host, in issue order, when the work is enqueued: the order a program
// means its data to flow in (a race between streams is the program's, and reads garbage on a GPU too).
// A freed allocation forgets its values; a block the caching allocator hands out again keeps its
// previous owner's, as a GPU's memory does.

// Note [Failure reporting]
// Every failed work item is reported, never zero times, once per place the program looks:
//  - its stream: the stream keeps the first unreported failure's message and a count of those after
//    it; the next Stream::query/synchronize, or Device::synchronize of its device (whichever comes
//    first: they share the stream's slot), takes them all and throws one WorkFailed naming the first
//    and counting the rest ("... (and 1 more failure on this stream)"). A later failure starts afresh.
//    Items after a failure still run (their inputs may be garbage), but the stream cannot report
//    success until the failure has been taken, so no garbage reads back as success unnoticed.
//  - an event recorded on the stream after the failure (before it was taken): the record keeps a
//    copy, which the event's query/synchronize reports once (per record).
//  - a stream that waits on such a record: the satisfied wait adds a failure to the waiting stream
//    ("stream W of openreg:D waited on an event recorded after a failure: <original message>"), so
//    its next query/synchronize raises naming the original op, and records on it pass it on in turn
//    (chains of waits propagate it). The original stream and the event keep their own reports.
//  - Device::synchronize takes the failures of all of the device's streams (original and inherited)
//    and throws one error naming the first (default stream first) and counting the others.
// A failure taken before a record is not copied into it: the program has already seen it.
// CUDA's errors are sticky for the whole context instead; here a failure stays local to the streams
// that depend on it, so tests can check it and the process (and other devices) keep working.

#include "openreg/sim/stream.h"

#include <boost/lockfree/queue.hpp>
#include <boost/lockfree/stack.hpp>

#include <atomic>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "copy_engine.h"
#include "host_wait.h"
#include "internal_check.h"
#include "openreg/sim/device.h"
#include "openreg/sim/event.h"
#include "openreg/sim/runtime.h"
#include "openreg/sim/trace.h"
#include "progress_counter.h"
#include "schedule_fuzz.h"
#include "trace_recorder.h"
#include "virtual_clock.h"
#include "openreg/sim/timing_only.h"
#include "work_item.h"

namespace openreg::sim {
namespace {

// Items an owner runs before it re-queues the stream behind the other ready streams of its device.
constexpr int kBatch = 32;
// Longest run of one owner while no other stream of its device is ready (Note [Drain slices]).
constexpr std::int64_t kSliceNs = 1'000'000;
// Items (and queue nodes) preallocated per stream, so short bursts never allocate.
constexpr std::size_t kInitialItems = 64;

// The stream whose item the calling thread is running (to refuse a self-deadlocking synchronize, and
// to let enqueues from device threads bypass the launch queue bound).
thread_local const Stream* tl_running_stream = nullptr;

bool on_device_thread() noexcept { return tl_running_stream != nullptr; }

}  // namespace

namespace detail {
// For Note [Teardown at exit] (runtime.cpp): an exit() from a kernel or host callback must not wait for
// the device work it is part of.
bool running_device_work() noexcept { return on_device_thread(); }

namespace {
// Items enqueued from device threads (by kernels and host callbacks). Relaxed: the drain reads it after
// waiting for the items that enqueued, whose completion (seq_cst) orders the increment before its read.
std::atomic<std::uint64_t> g_device_thread_enqueues{0};
}  // namespace

std::uint64_t device_thread_enqueues() noexcept { return g_device_thread_enqueues.load(std::memory_order_relaxed); }
}  // namespace detail

struct Stream::State {
  Device* device;
  StreamId id;
  StreamPriority priority;

  boost::lockfree::queue<WorkItem*> queue{kInitialItems};  // enqueuers -> owner
  boost::lockfree::stack<WorkItem*> pool{kInitialItems};   // owner/engines -> enqueuers (recycling)
  std::mutex all_items_mutex;
  std::vector<WorkItem*> all_items;  // every item ever created, for the destructor; guarded by mutex

  std::atomic<std::uint64_t> pending{0};   // see Note [Stream scheduling]
  std::atomic<std::uint64_t> enqueued{0};  // items ever enqueued
  ProgressCounter completed;               // items ever completed; advanced only by the owner
  std::shared_ptr<Stream> self;            // set by the scheduling enqueuer; touched only by the owner
  WorkItem* head = nullptr;                // popped by dispatch(), to run on the device; owner only
  std::atomic<bool> destroyed{false};

  std::uint64_t queue_depth = 1;  // Config::launch_queue_depth; immutable
  VirtualClock* clock = nullptr;  // the runtime's, with a device profile (Note [Virtual time]); immutable
  bool run_kernels = true;        // false in timing-only execution (Note [Timing-only execution]); immutable
  StreamTimeline timeline;        // this stream's virtual timeline; guarded by the clock's device mutex
  std::optional<std::uint64_t> fuzz_seed;  // Config::schedule_fuzz_seed; immutable

  // Failures not yet reported through the stream (see Note [Failure reporting]): the first one's
  // message, and how many more came after it. has_error lets the hot paths skip the lock.
  mutable std::mutex error_mutex;
  std::string error;                // guarded by error_mutex
  std::uint64_t more_errors = 0;    // guarded by error_mutex
  std::atomic<bool> has_error{false};

  void add_failure(std::string message) {
    std::lock_guard lock(error_mutex);
    if (!error.empty()) {
      ++more_errors;  // reported as a count in the first one's message, never dropped
      return;
    }
    error = std::move(message);
    has_error.store(true, std::memory_order_release);
  }
  void record_failure(const char* name, const char* what) {
    add_failure(std::string("work item '") + name + "' failed on openreg:" + std::to_string(device->index()) +
                " stream " + std::to_string(id) + ": " + what);
  }
  // The pending failures as one message; error_mutex held.
  std::string message_locked() const {
    if (more_errors == 0) return error;
    return error + " (and " + std::to_string(more_errors) + " more failure" + (more_errors == 1 ? "" : "s") +
           " on this stream)";
  }
};

Stream::Stream(Device& device, StreamId id, StreamPriority priority) : s_(std::make_unique<State>()) {
  s_->device = &device;
  s_->id = id;
  s_->priority = priority;
  s_->queue_depth = device.runtime().config().launch_queue_depth;
  s_->fuzz_seed = device.runtime().config().schedule_fuzz_seed;
  s_->clock = device.runtime().virtual_clock();
  s_->run_kernels = device.runtime().config().execute == ExecuteMode::kCompute;
  s_->all_items.reserve(kInitialItems);
  for (std::size_t i = 0; i < kInitialItems; ++i) {
    s_->all_items.push_back(new WorkItem);
    s_->pool.push(s_->all_items.back());
  }
}

Stream::~Stream() {
  // The last reference is dropped only when no owner exists (the owner holds `self`), so no item is
  // in flight; any still queued belongs to a device torn down with work pending and is discarded.
  for (WorkItem* item : s_->all_items) delete item;
}

StreamId Stream::id() const noexcept { return s_->id; }
int Stream::device_index() const noexcept { return s_->device->index(); }
Device& Stream::device() const noexcept { return *s_->device; }
StreamPriority Stream::priority() const noexcept { return s_->priority; }
std::uint64_t Stream::enqueued_count() const noexcept { return s_->enqueued.load(std::memory_order_acquire); }
std::uint64_t Stream::completed_count() const noexcept { return s_->completed.load(); }

WorkItem* Stream::acquire_item() {
  // acquire: pairs with mark_destroyed's release so a destroyed stream is seen as such.
  if (s_->destroyed.load(std::memory_order_acquire)) {
    throw_error(Errc::kInvalidStream, "stream " + std::to_string(s_->id) + " of openreg:" +
                                          std::to_string(device_index()) + " was destroyed");
  }
  WorkItem* item = nullptr;
  if (s_->pool.pop(item)) return item;
  item = new WorkItem;
  std::lock_guard lock(s_->all_items_mutex);
  s_->all_items.push_back(item);
  return item;
}

// Note [Bounded launch queue]
// A stream holds at most Config::launch_queue_depth (N, OPENREG_LAUNCH_QUEUE_DEPTH) items enqueued
// but not completed, like CUDA's launch queue: kernels, copies and host callbacks issued from host
// threads wait for room; event records and waits take room but never wait (see below). Each enqueue
// takes a ticket t (its 1-based position in `enqueued`) before anything else. A host thread that finds
// the queue full at its ticket (t - completed > N) waits, before pushing, until the stream has drained
// to half: completed >= t - R, R = ceil(N / 2) (ProgressCounter: a short spin, then a futex sleep).
// When it pushes, at most t - completed <= N tickets are uncompleted, its own included (R <= N), and a
// higher ticket needs strictly more completions, so concurrent producers cannot overshoot the bound
// together (only markers and device-thread enqueues, which do not wait, can).
// The wait is interruptible (Note [Interruptible host waits] in host_wait.cpp) and gives up the GIL
// (Note [Host waits hold no GIL]): Ctrl-C raises within kHostWaitCheckInterval, the interrupted launch
// pushes a no-op in its item's place, and the op that issued it raises KeyboardInterrupt.
// Why half, not the first free slot: a producer that waited for one free slot was woken, pushed one
// item and slept again at every completion, two context switches per item from the moment the queue
// filled. Woken at half, it refills N/2 items without waiting while the device still has N/2 queued.
// Measured with one CPU-bound process per core beside the sim stress test (3 devices, 1 lane each):
// 118k voluntary context switches per run before, 21k after; 4.1 s before, 3.2 s after.
// Who wakes it: the stream's owner, whose completion of each item advances `completed` and notifies
// sleeping waiters once the lowest waiter's target is reached (ProgressCounter::advance_to).
// Why it cannot deadlock:
//  - the producer waits inside enqueue, holding no sim lock (only its own unpushed item); nothing the
//    device runs needs anything the producer holds, as long as the caller (the backend) does not
//    enqueue while holding a lock that work items take;
//  - event records and waits never wait: they are markers that hold no memory (the bound exists to
//    stop queued work pinning memory), and callers such as a caching allocator record events while
//    holding a lock that work on the device (a host callback freeing a block) also takes;
//  - enqueues from a device thread (a kernel or a host callback, which may enqueue onto their own or
//    any other stream) never wait: such a wait would hold one of the threads (or the
//    very stream position) the drain needs, so they bypass the bound (a callback is rarely a flood);
//  - the items ahead of a waiting producer only need the device to progress: it waits for items of
//    lower tickets only (t - R < t), every lower ticket is pushed (or about to be: a lower-ticket
//    producer waits for fewer completions than we do, so the lowest waiter is always the next released), and an event wait only ever captures a record that
//    was already enqueued when the wait was issued (Stream::record publishes the record after its
//    enqueue), so waits point strictly backwards in issue order and cannot form a cycle with a full
//    queue or with each other.
void Stream::enqueue(WorkItem* item, const KernelCost* cost) {
  // Read here, on the issuing thread: the tag names the host op that issued the item (trace.h).
  item->correlation = trace_correlation();
  item->enqueue_ns = trace_enabled() ? now_ns() : 0;
  // Counted before it is pushed, so completed <= enqueued always holds and a synchronize() that reads
  // `enqueued` after its own enqueue covers every item queued ahead of it (it then also waits for a
  // producer still held by the bound, which the same completions release).
  const std::uint64_t ticket = s_->enqueued.fetch_add(1, std::memory_order_acq_rel) + 1;
  const bool marker = is_marker(item->kind);
  auto push = [this](WorkItem* ticketed, const KernelCost* its_cost) {
    if (s_->clock != nullptr) s_->clock->place(device_index(), s_->timeline, *ticketed, its_cost, on_device_thread());
    const bool pushed = s_->queue.push(ticketed);
    OPENREG_SIM_ASSERT(pushed, "lock-free queue push failed");
    // acq_rel: release publishes the push to the owner; acquire (on 0 -> 1) makes the previous owner's
    // writes (recycled items, `self` reset) visible to us, the new owner.
    if (s_->pending.fetch_add(1, std::memory_order_acq_rel) == 0) {
      s_->self = shared_from_this();
      dispatch();
    }
  };
  if (on_device_thread()) {
    detail::g_device_thread_enqueues.fetch_add(1, std::memory_order_relaxed);
  } else if (!marker && s_->completed.load() + s_->queue_depth < ticket) {
    // Full at our ticket: wait until the stream has drained to half (Note [Bounded launch queue]).
    try {
      InterruptibleHostWait interruptible;  // Note [Interruptible host waits]
      s_->completed.wait_at_least(ticket - (s_->queue_depth - s_->queue_depth / 2));
    } catch (...) {
      // Interrupted: the ticket is ours, so a no-op takes the item's place (the stream's counts stay
      // whole: a later synchronize still finds every ticket completed) and the launch raises.
      item->clear();
      item->kind = ItemKind::kHostCallback;
      item->name = "interrupted launch";
      item->fn = [] {};
      push(item, nullptr);
      throw;
    }
  }
  push(item, cost);
}

namespace {
// A kernel or a host callback: an item that runs `fn`, named `name` (or `unnamed`).
WorkItem* fill_task_item(WorkItem* item, ItemKind kind, const char* name, const char* unnamed, Task fn) {
  item->kind = kind;
  item->name = name != nullptr ? name : unnamed;
  item->fn = std::move(fn);
  return item;
}
}  // namespace

void Stream::launch(const char* name, Task fn) {
  if (!fn) throw_error(Errc::kInvalidArgument, "launch of an empty task");
  enqueue(fill_task_item(acquire_item(), ItemKind::kKernel, name, "kernel", std::move(fn)));
}

void Stream::launch(const char* name, Task fn, const KernelCost& cost) {
  if (!fn) throw_error(Errc::kInvalidArgument, "launch of an empty task");
  WorkItem* item = fill_task_item(acquire_item(), ItemKind::kKernel, name, "kernel", std::move(fn));
  // Note [Values in timing-only execution]: a kernel known to touch only a few bytes runs (an uncosted
  // one, bytes 0, is not known to). Only timing-only execution reads the decision.
  if (!s_->run_kernels && cost.bytes > 0 && cost.bytes <= static_cast<double>(kTimingOnlyRunKernelBytes)) {
    item->timing_only = TimingOnly::kControl;
  }
  enqueue(item, &cost);
}

namespace {
// Note [Values in timing-only execution]: whether a kernel of `access` runs, noting what its writes
// then hold.
TimingOnly timing_only_kernel(Runtime& runtime, const KernelAccess& access) {
  std::size_t touched = 0;
  bool valued = true;
  for (const ByteRange& r : access.reads) {
    touched += r.bytes;
    valued = valued && runtime.holds_values(r.data, r.bytes);
  }
  for (const ByteRange& w : access.writes) touched += w.bytes;
  const std::size_t bound = access.reads.empty() ? kTimingOnlyMovedBytes : kTimingOnlyValuedKernelBytes;
  const bool runs = valued && touched <= bound;
  for (const ByteRange& w : access.writes) runtime.set_holds_values(w.data, w.bytes, runs);
  return runs ? TimingOnly::kValues : TimingOnly::kSkip;
}

// Note [Values in timing-only execution]: whether a copy moves its data, noting what its destination
// then holds.
TimingOnly timing_only_copy(Runtime& runtime, const WorkItem& item) {
  const bool moves = item.route == CopyRoute::kHostToDevice
                         ? item.bytes <= kTimingOnlyMovedBytes
                         : item.bytes <= kTimingOnlyValuedKernelBytes && runtime.holds_values(item.src, item.bytes);
  if (!item.host_dst) runtime.set_holds_values(item.dst, item.bytes, moves);
  return moves ? TimingOnly::kValues : TimingOnly::kSkip;
}
}  // namespace

void Stream::launch(const char* name, Task fn, const KernelCost& cost, const KernelAccess& access) {
  if (!fn) throw_error(Errc::kInvalidArgument, "launch of an empty task");
  WorkItem* item = fill_task_item(acquire_item(), ItemKind::kKernel, name, "kernel", std::move(fn));
  if (!s_->run_kernels) item->timing_only = timing_only_kernel(device().runtime(), access);
  enqueue(item, &cost);
}

void Stream::host_callback(const char* name, Task fn) {
  if (!fn) throw_error(Errc::kInvalidArgument, "host callback with an empty task");
  enqueue(fill_task_item(acquire_item(), ItemKind::kHostCallback, name, "host callback", std::move(fn)));
}

void Stream::copy(void* dst, const void* src, std::size_t bytes, const char* name) {
  if (bytes == 0) {
    s_->pool.push(acquire_item());  // nothing to move; acquire only for the destroyed-stream check
    return;
  }
  if (dst == nullptr || src == nullptr) throw_error(Errc::kInvalidArgument, "copy with a null pointer");
  Runtime& runtime = device().runtime();
  // A device range must lie inside one live allocation: an overrun is an error, not a corruption.
  auto device_side = [&](const void* p, const char* what) {
    std::optional<int> d = runtime.device_of(p);
    if (!d) return false;
    std::uintptr_t begin = 0, end = 0;
    runtime.device(*d).memory().find(p, &begin, &end);
    if (bytes > end - reinterpret_cast<std::uintptr_t>(p)) {
      throw_error(Errc::kInvalidArgument, std::string("copy of ") + std::to_string(bytes) + " bytes overruns the " +
                                              what + " allocation on openreg:" + std::to_string(*d));
    }
    return true;
  };
  const bool dst_on_device = device_side(dst, "destination");
  const bool src_on_device = device_side(src, "source");
  WorkItem* item = acquire_item();
  item->kind = ItemKind::kCopy;
  item->name = name != nullptr ? name : "copy";
  item->dst = dst;
  item->src = src;
  item->bytes = bytes;
  item->engine = &s_->device->copy_engine(/*inbound=*/dst_on_device && !src_on_device);
  item->host_dst = !dst_on_device;
  if (dst_on_device && src_on_device) {
    item->route = runtime.device_of(dst) == runtime.device_of(src) ? CopyRoute::kDeviceToDevice : CopyRoute::kPeer;
  } else {
    item->route = dst_on_device ? CopyRoute::kHostToDevice : CopyRoute::kDeviceToHost;
    item->pinned = runtime.is_pinned(dst_on_device ? src : dst);
  }
  if (!s_->run_kernels) item->timing_only = timing_only_copy(runtime, *item);
  enqueue(item);
}

void Stream::record(const std::shared_ptr<Event>& event) {
  if (!event) throw_error(Errc::kInvalidArgument, "record of a null event");
  auto record = std::make_shared<EventRecord>(device_index(), event->timing());
  WorkItem* item = acquire_item();
  item->kind = ItemKind::kEventRecord;
  item->name = "event record";
  item->record = record;
  enqueue(item);
  // Published only once enqueued, so a wait can only ever capture a record already in its stream's
  // queue (see Note [Bounded launch queue]: waits point backwards in issue order).
  event->set_latest(std::move(record));
}

void Stream::wait(const std::shared_ptr<Event>& event) {
  if (!event) throw_error(Errc::kInvalidArgument, "wait on a null event");
  std::shared_ptr<EventRecord> record = event->latest();  // captured now; later records do not matter
  WorkItem* item = acquire_item();
  if (!record) {  // never recorded: nothing to wait for (CUDA semantics)
    s_->pool.push(item);
    return;
  }
  item->kind = ItemKind::kEventWait;
  item->name = "event wait";
  item->record = std::move(record);
  enqueue(item);
}

// The record protocol is EventRecord's (Note [Event record completion] in event_record.cpp); what is
// the stream's own is which failure the record carries (Note [Failure reporting]). Owner only: the
// record item is the stream's current item.
void Stream::complete_record(EventRecord& record) {
  std::string failure;
  if (peek_error(&failure)) {
    failure = "stream " + std::to_string(s_->id) + " of openreg:" + std::to_string(device_index()) +
              " had failed before an event was recorded on it: " + failure;
  }
  record.complete(std::move(failure));
}

bool Stream::wait_or_park(EventRecord& record, WorkItem* item) {
  // Parked: the record owns the stream until its completer calls resume (Note [Event record completion]).
  if (!record.wait_or_park({this, item, &Stream::resume})) return false;
  inherit_failure(record);
  return true;
}

void Stream::inherit_failure(const EventRecord& record) {
  if (record.failure().empty()) return;  // immutable once completed
  s_->add_failure("stream " + std::to_string(s_->id) + " of openreg:" + std::to_string(device_index()) +
                  " waited on an event recorded after a failure: " + record.failure());
}

bool Stream::query() {
  // `enqueued` first: "completed >= a snapshot taken earlier" proves that snapshot's work is done.
  const std::uint64_t enqueued = s_->enqueued.load(std::memory_order_acquire);
  const bool done = s_->completed.load() >= enqueued;
  if (done && s_->clock != nullptr) s_->clock->host_waited(device_index(), s_->timeline);
  std::string message;
  if (take_error(&message)) throw Error(Errc::kWorkFailed, message);
  return done;
}

void Stream::synchronize() {
  if (tl_running_stream == this) {
    throw_error(Errc::kInvalidArgument, "synchronize of openreg:" + std::to_string(device_index()) + " stream " +
                                            std::to_string(s_->id) + " from one of its own work items would never return");
  }
  {
    InterruptibleHostWait interruptible;  // Note [Interruptible host waits]
    wait_idle();
  }
  if (s_->clock != nullptr) s_->clock->host_waited(device_index(), s_->timeline);
  std::string message;
  if (take_error(&message)) throw Error(Errc::kWorkFailed, message);
}

void Stream::wait_idle() { s_->completed.wait_at_least(s_->enqueued.load(std::memory_order_acquire)); }

bool Stream::take_error(std::string* message, std::uint64_t* count) {
  if (!s_->has_error.load(std::memory_order_acquire)) return false;
  std::lock_guard lock(s_->error_mutex);
  if (s_->error.empty()) return false;
  *message = s_->message_locked();
  if (count != nullptr) *count = 1 + s_->more_errors;
  s_->error.clear();
  s_->more_errors = 0;
  s_->has_error.store(false, std::memory_order_relaxed);  // relaxed: the mutex orders it with the next failure
  return true;
}

bool Stream::peek_error(std::string* message) const {
  if (!s_->has_error.load(std::memory_order_acquire)) return false;
  std::lock_guard lock(s_->error_mutex);
  if (s_->error.empty()) return false;
  *message = s_->message_locked();
  return true;
}

void Stream::mark_destroyed() noexcept { s_->destroyed.store(true, std::memory_order_release); }

namespace {
// An event wait spans from the stream reaching it to the event completing (parked or not).
void trace_wait(const WorkItem& item, int device, StreamId stream) {
  if (item.wait_start_ns != 0 && trace_enabled()) {
    const bool virtual_time = item.vend >= 0;
    trace_record({item.name, device, stream, item.kind, virtual_time ? item.vstart : item.wait_start_ns,
                  virtual_time ? item.vend : now_ns(), 0, item.correlation, item.enqueue_ns});
  }
}
}  // namespace

void Stream::run_task(WorkItem* item) {
  const bool tracing = trace_enabled();
  const std::int64_t start = now_ns();
  const Stream* outer = tl_running_stream;
  tl_running_stream = this;
  std::int64_t& virtual_end = running_item_virtual_end();
  const std::int64_t outer_virtual_end = virtual_end;
  virtual_end = item->vend;  // items this one enqueues are issued at its virtual end
  try {
    // Note [Timing-only execution]: a kernel is only timed; host callbacks still run (they release
    // what the host lent the stream, and complete the program's own callbacks).
    // Note [Values in timing-only execution]: a kernel on values runs, and its failure is real.
    if (s_->run_kernels || item->kind != ItemKind::kKernel || item->timing_only == TimingOnly::kValues) {
      item->fn();
    } else if (item->timing_only == TimingOnly::kControl) {
      // Note [Values in timing-only execution]: a small kernel's inputs may come from kernels that never
      // ran; what it would raise on such values (a device-side assert, an index out of range) a GPU,
      // which computed them, would not, so it is dropped.
      try {
        item->fn();
      } catch (...) {
      }
    }
  } catch (const std::exception& e) {
    s_->record_failure(item->name, e.what());
  } catch (...) {
    s_->record_failure(item->name, "unknown exception");
  }
  tl_running_stream = outer;
  virtual_end = outer_virtual_end;
  const std::int64_t end = now_ns();
  // Counted before the item completes (finish() releases it), so a host that saw the item complete
  // also sees its busy time (utilization() right after synchronize()).
  s_->device->add_busy_time(static_cast<std::uint64_t>(end - start));
  if (tracing) {
    const bool virtual_time = item->vend >= 0;
    trace_record({item->name, device_index(), s_->id, item->kind, virtual_time ? item->vstart : start,
                  virtual_time ? item->vend : end, 0, item->correlation, item->enqueue_ns});
  }
}

WorkItem* Stream::take_next() {
  State& s = *s_;
  if (s.head != nullptr) return std::exchange(s.head, nullptr);
  WorkItem* item = nullptr;
  const bool popped = s.queue.pop(item);
  OPENREG_SIM_ASSERT(popped, "an owned stream has no item (see Note [Stream scheduling])");
  return item;
}

bool Stream::step(WorkItem* item) {
  if (s_->fuzz_seed && !item->fuzzed) {
    item->fuzzed = true;  // decided once: when it comes back, it runs
    // completed_count() is this item's position: the owner completes items in order.
    const auto delay = detail::fuzz_delay(*s_->fuzz_seed, device_index(), static_cast<std::uint64_t>(s_->id),
                                          s_->completed.load());
    if (delay.count() > 0) {
      // Parked on the fuzzer's timer, which owns the stream meanwhile (Note [Schedule fuzzing]); it
      // hands the item back as the next to run and dispatches from its thread, as a copy engine does.
      detail::run_after(delay, [this, item] {
        s_->head = item;
        dispatch();
      });
      return false;
    }
  }
  switch (item->kind) {
    case ItemKind::kKernel:
    case ItemKind::kHostCallback:
      run_task(item);
      break;
    case ItemKind::kEventRecord: {
      const bool tracing = trace_enabled();
      const std::int64_t start = tracing ? now_ns() : 0;
      complete_record(*item->record);
      if (tracing) {
        const bool virtual_time = item->vend >= 0;
        trace_record({item->name, device_index(), s_->id, item->kind, virtual_time ? item->vstart : start,
                      virtual_time ? item->vend : now_ns(), 0, item->correlation, item->enqueue_ns});
      }
      break;
    }
    case ItemKind::kEventWait: {
      // Set before a possible park: resume() records the wait from it (the item is ours until then).
      item->wait_start_ns = trace_enabled() ? now_ns() : 0;
      // Parked: ownership (and the item) passed to the event, which resumes us; `this` must not be
      // touched any more here.
      if (!wait_or_park(*item->record, item)) return false;
      trace_wait(*item, device_index(), s_->id);
      break;
    }
    case ItemKind::kCopy:
      item->engine->submit(*this, item);  // parked likewise; the engine resumes us
      return false;
  }
  return finish(item);  // false: ownership released, `this` may already be gone
}

// Note [Drain slices]
// An owner yields its worker (re-queues the stream behind the device's other ready streams) after a
// batch of kBatch items when another stream of the device is waiting for a worker, and otherwise
// after a slice of kSliceNs. Re-queuing is an arena enqueue, which wakes an idle worker to look for
// work: done every kBatch items, a lone stream of small kernels woke the arena's other worker every
// ~50 us, and on a 2-core machine its spinning took the core the host thread issues from. The slice
// still hands the worker back to oneTBB's market regularly, so devices that want workers get them
// (Note [Elastic device concurrency] in device.cpp), and a stream that becomes ready waits at most a
// batch for a single-worker device.
void Stream::drain() {
  const std::int64_t start = now_ns();
  for (;;) {
    for (int n = 0; n < kBatch; ++n) {
      if (!step(take_next())) return;
    }
    if (s_->device->has_ready_streams() || now_ns() - start >= kSliceNs) break;
  }
  s_->device->schedule(*this);  // still the owner: go to the back of the device's ready queue
}

// Note [Dispatching off the device]
// A new owner outside the arena (the enqueuer that woke the stream, a copy engine that finished its
// copy) first runs the items that need no compute thread itself: copies go straight to their
// engine, event records complete, event waits check or park. Only a kernel or host callback makes it
// schedule the stream on the device (the item stays in `head` for the drainer). So a copy is never
// stuck behind other streams' kernels waiting for a compute thread just to be handed over, which is
// what lets copies overlap kernels even on a single-threaded device.
void Stream::dispatch() {
  for (int n = 0; n < kBatch; ++n) {
    WorkItem* item = take_next();
    if (item->kind == ItemKind::kKernel || item->kind == ItemKind::kHostCallback) {
      s_->head = item;
      s_->device->schedule(*this);
      return;
    }
    if (!step(item)) return;
  }
  s_->device->schedule(*this);  // a long run of events/copies: let the device take over
}

bool Stream::finish(WorkItem* item) {
  State& s = *s_;
  item->clear();  // captured state dies before the item counts as complete
  s.pool.push(item);
  s.completed.increment();
  // Moved out before giving up the token: once `pending` reaches 0 a new owner may set `self`.
  std::shared_ptr<Stream> keep = std::move(s.self);
  // acq_rel: release hands our writes to the next owner; acquire pairs with enqueuers' increments.
  if (s.pending.fetch_sub(1, std::memory_order_acq_rel) == 1) return false;  // `keep` may free *this
  s.self = std::move(keep);
  return true;
}

void Stream::resume(WorkItem* item) {
  if (item->kind == ItemKind::kEventWait) {
    inherit_failure(*item->record);  // still the owner here
    trace_wait(*item, device_index(), s_->id);
  }
  // On the device, not here: an event completion resumes streams from inside another stream's
  // item, and dispatching there could recurse through chains of waiting streams.
  if (finish(item)) s_->device->schedule(*this);
}

void Stream::resume_here(WorkItem* item) {
  if (finish(item)) dispatch();
}

const char* intern_name(const char* name) {
  if (name == nullptr) return "";
  // Leaked on purpose: names must outlive every item and trace record, including during exit.
  static std::mutex* mutex = new std::mutex;
  static auto* names = new std::unordered_set<std::string>;
  std::lock_guard lock(*mutex);
  return names->emplace(name).first->c_str();
}

}  // namespace openreg::sim
