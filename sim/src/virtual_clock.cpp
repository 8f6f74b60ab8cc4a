#include "virtual_clock.h"

#include <time.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <iterator>
#include <limits>
#include <vector>

#include "openreg/sim/trace.h"
#include "event_record.h"
#include "work_item.h"

namespace openreg::sim {

// Note [Virtual time]
// With a device profile (OPENREG_DEVICE_PROFILE) every time openreg reports (event elapsed times,
// traces, the profiler's device lanes, utilization, torch.openreg.timing) is the modelled GPU's, not
// this CPU's. The work itself still runs as before, on the device threads, in stream order: results,
// errors, the race checker and schedule fuzzing do not change. Only the clock does.
//
// Virtual times are decided when an item is issued, not when it runs. Everything that decides when
// an item would start on a GPU is known at its enqueue: its stream's previous item (placed before
// it), the event records it waits for (a wait captures a record already enqueued, which was placed
// when it was enqueued: Note [Bounded launch queue] in stream.cpp), the units it needs (placed in the
// order the program issued to them), its cost (Note [Cost model]) and the issuing thread's clock.
// So the timeline depends only on the sequence of calls the program makes: the same program gives
// the same timeline to the nanosecond on a loaded or idle machine, with any number of cores, under
// any schedule-fuzz seed, which a timeline read off the device threads' execution could never be.
//
// An item starts at the latest of: its stream's previous item's end; the virtual time of every
// record it waits for (across streams and devices); its issue time on the host clock; the moment its
// unit can take it. Units:
//  - compute: the device's SMs, shared by occupancy. A kernel occupies a fraction of the SMs (its
//    blocks' share of one wave, Note [Cost model]) for its duration, and starts at the earliest time
//    from its ready time at which that fraction is free for its whole duration (a calendar of the
//    SMs in use over time). So small kernels of two streams run side by side, and a kernel that fills
//    the device runs alone: another stream's kernel waits for it, as the block scheduler makes it wait
//    on a GPU when no SM is free. A kernel issued later but ready earlier still fills an earlier gap
//    (the calendar is searched from its ready time), so issue order only breaks ties. Not modelled: a
//    kernel slowing down beside another that shares SMs' bandwidth (both run at their own rates).
//  - copies: the profile's copy engines (three: host-to-device, device-to-host, peer/device-local),
//    each taking its copies one after another in issue order, beside the compute units (so copies
//    overlap kernels, and each other across engines).
//  - event records take event_record_ns on their stream; waits and host callbacks take none.
//  - communication: a collective is placed by its caller (Runtime::place_communication), which knows
//    when every rank reached it (Note [Collectives on the virtual clock] in
//    python/torch_openreg/_distributed/_clock.py), before anything can wait for its end. Kernels
//    placed over it afterwards take comm_compute_slowdown longer for the time they overlap it (NCCL's
//    kernels take SMs and memory bandwidth); kernels placed before it keep their times.
//
// The host's clock: each host thread has one. Each item it issues advances it by the profile's
// launch cost, plus, for kernels and copies, the framework's own work per op: the profile's host_op_ns
// (OPENREG_HOST_TIME=modelled, the default, exactly reproducible) or the thread's CPU time since its
// previous call (=measured). An item cannot start before it is issued, so a launch-bound program
// (thousands of tiny kernels) shows the device idle between kernels, as on a GPU. The clock jumps
// forward to the device's time wherever the host waits for it: a stream, device or event synchronize,
// a query that sees the work done (the host learns it is done only then), a pageable copy (synchronous
// on CUDA), and a full launch queue (the item launch_queue_depth places back on the stream must have
// ended: a ring of the stream's last ends). Items issued by a kernel or host callback are issued at
// the issuing item's end.
// The library's own bookkeeping never moves the clock and never reads this CPU's progress as the GPU's:
// the caching allocator asks whether a freed block's last use is over with Event::query_untimed, which
// is true only once the record's virtual time is at or before the asking thread's. With query() it
// asked whether the device threads had run it, and a record they had run early moved the host to its
// virtual time, so whether an allocation waited for the device depended on how far this CPU's threads
// had got (a torchtitan step of one symmetric stand-in read 21 us longer than its 8 processes', and
// varied between runs).
// The host threads share one timeline: a thread's clock never runs behind the latest time any host
// thread has reached. PyTorch's host threads mostly take turns: backward() blocks the calling thread
// while the autograd engine's device thread issues the backward ops, so the engine's issues continue
// from where the caller's clock stood, and the caller continues after backward() from where the
// engine's left off (with a clock per thread, the engine's lagged behind and backward looked free of
// host cost). Threads that really issue at the same time (several training threads) are serialized by
// this, their issue costs added up: an overestimate, which is the documented limit.
//
// Bookkeeping is per device, under the device timeline's mutex (the calendar, the engines, its
// streams' tails and rings, the busy unions); a thread's own clock is thread-local. Old calendar
// entries are dropped below the issuing thread's clock once the calendar is large: exact for one
// host thread, approximate for several host threads whose clocks differ.

// Note [Where time goes]
// timing.region() breaks each device's time into op classes, so a user sees why a step takes what it
// takes: matmul, attention, optimizer and memory-bound kernels (a kernel's class is decided with its
// cost by the op that launches it: KernelClass in openreg/sim/cost.h, set by
// backend/engine/KernelCost.cpp), copies, exposed communication and idle. Items of two streams,
// the copy engines and collectives overlap on a device's timeline, so each instant of it counts once,
// for the first of these that holds:
//  1. a kernel runs: the first of matmul, attention, optimizer, memory-bound among the classes of the
//     kernels running then. A memory-bound kernel beside a GEMM on another stream is hidden behind it:
//     the GEMM bounds that time. The order is the usual one of what bounds a step (the matrix units,
//     then the optimizer's memory traffic, which a user can change, before other memory-bound work);
//  2. else a copy runs: copies (a copy beside a kernel is hidden behind it);
//  3. else a collective runs: exposed communication (exposed_comm_ns, as before);
//  4. else nothing runs: idle, the region's wall time less its busy time (the device waited for its
//     host, or for another device: a host-bound or waiting step).
// So the four kernel classes sum to compute_busy_ns, the seven to the region's wall time, and no
// instant counts twice. The bookkeeping: besides the unions of all kernels (kernels_busy), of kernels
// and copies (work_busy) and of everything (all_busy), three nested unions of kernel intervals in that
// order (matmul; matmul or attention; those or optimizer); each class is the difference of two
// consecutive ones. They are flat arrays reserved once (FlatUnion), so a kernel's placement allocates
// nothing more than before, and a memory-bound kernel touches none of them.
// Since attribution follows what runs at each instant, a kernel placed into an earlier gap beside
// work already counted (a GEMM of one stream beside a memory-bound kernel of another placed before
// it) moves that time between classes. Across a region's start this can make a region's figure for
// one class smaller than the time that class's kernels issued in it ran alone; the sum is exact.

// Note [Graph launches on the virtual clock]
// A graph replay issues its nodes as ordinary items, but on a GPU the host pays one cudaGraphLaunch for
// all of them, not a launch and the framework's per-op work for each. So a replay runs inside a
// GraphLaunchScope: its start charges the host clock one launch (launch_ns; modelled as one launch
// call), and the items issued inside are placed at that time without host cost. Their device times are
// the kernels' own; they start back to back once the device reaches them, which is what graphs save
// (the eager launch gaps). In measured host time the replay's own CPU time is not counted either.

namespace {

thread_local bool t_graph_launch = false;

constexpr std::int64_t kForever = std::numeric_limits<std::int64_t>::max();
// Calendar entries kept before old ones are dropped, and busy intervals remembered.
constexpr std::size_t kCalendarKeep = 512;
constexpr std::size_t kSpansKeep = 4096;

std::atomic<std::uint64_t> g_generation{0};

std::int64_t thread_cpu_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

std::int64_t to_ns(double ns) noexcept { return std::llround(ns); }

// The measure of a union of intervals, kept as they are added in any order. Only recent intervals
// are remembered (kSpansKeep); an interval overlapping a forgotten one would be counted twice, which
// needs an item placed thousands of intervals into the past.
class IntervalUnion {
 public:
  void add(std::int64_t a, std::int64_t b) {
    if (b <= a) return;
    auto it = spans_.upper_bound(a);
    if (it != spans_.begin() && std::prev(it)->second >= a) --it;
    std::int64_t lo = a;
    std::int64_t hi = b;
    while (it != spans_.end() && it->first <= hi) {
      lo = std::min(lo, it->first);
      hi = std::max(hi, it->second);
      measure_ -= it->second - it->first;
      it = spans_.erase(it);
    }
    spans_.emplace(lo, hi);
    measure_ += hi - lo;
    if (spans_.size() > kSpansKeep) spans_.erase(spans_.begin());  // its measure stays counted
  }
  std::int64_t measure() const noexcept { return measure_; }
  //! The measure of [a, b) that the remembered intervals cover.
  std::int64_t overlap(std::int64_t a, std::int64_t b) const {
    std::int64_t covered = 0;
    auto it = spans_.upper_bound(a);
    if (it != spans_.begin()) --it;
    for (; it != spans_.end() && it->first < b; ++it) covered += std::max<std::int64_t>(0, std::min(b, it->second) - std::max(a, it->first));
    return covered;
  }
  bool empty() const noexcept { return spans_.empty(); }

 private:
  std::map<std::int64_t, std::int64_t> spans_;  // start -> end, disjoint
  std::int64_t measure_ = 0;
};

constexpr std::size_t kFlatKeep = 1024;  // FlatUnion's spans, reserved once

// The measure of a union of intervals, as IntervalUnion, in a sorted array reserved once: adding an
// interval allocates nothing (Note [Where time goes]: the per-kernel path). When it is full the oldest
// half is forgotten (their measure stays counted), with IntervalUnion's limit: an interval overlapping
// a forgotten one would be counted twice, which needs an item placed hundreds of intervals into the past.
class FlatUnion {
 public:
  FlatUnion() { spans_.reserve(kFlatKeep); }
  void add(std::int64_t a, std::int64_t b) {
    if (b <= a) return;
    // Disjoint spans sorted by start are sorted by end too: those ending before `a` stay as they are.
    auto first = std::lower_bound(spans_.begin(), spans_.end(), a,
                                  [](const Span& s, std::int64_t t) { return s.end < t; });
    auto last = first;
    std::int64_t lo = a;
    std::int64_t hi = b;
    for (; last != spans_.end() && last->start <= hi; ++last) {
      lo = std::min(lo, last->start);
      hi = std::max(hi, last->end);
      measure_ -= last->end - last->start;
    }
    measure_ += hi - lo;
    if (first != last) {  // merged into the spans it touches: no new span
      *first = Span{lo, hi};
      spans_.erase(std::next(first), last);
      return;
    }
    if (spans_.size() == spans_.capacity()) {
      const std::ptrdiff_t at = first - spans_.begin();
      const auto drop = static_cast<std::ptrdiff_t>(spans_.size() / 2);
      spans_.erase(spans_.begin(), spans_.begin() + drop);
      first = spans_.begin() + std::max<std::ptrdiff_t>(0, at - drop);
    }
    spans_.insert(first, Span{lo, hi});  // within the reserved capacity: no allocation
  }
  std::int64_t measure() const noexcept { return measure_; }

 private:
  struct Span {
    std::int64_t start;
    std::int64_t end;
  };
  std::vector<Span> spans_;  // disjoint, not touching, sorted
  std::int64_t measure_ = 0;
};

// The nested kernel unions of Note [Where time goes], by class: a kernel joins those from its class's
// on (matmul: all three; attention: the last two; optimizer: the last; memory-bound: none).
constexpr int kNestedUnions = 3;
int first_union(KernelClass kind) noexcept {
  switch (kind) {
    case KernelClass::kMatmul: return 0;
    case KernelClass::kAttention: return 1;
    case KernelClass::kOptimizer: return 2;
    default: return kNestedUnions;
  }
}

// The SMs in use over time: the fraction in use from each key until the next; the last key's value
// holds forever (0 once everything placed has ended).
class Calendar {
 public:
  explicit Calendar(std::int64_t origin) { used_.emplace(origin, 0.0); }

  //! Reserves `share` of the SMs from the earliest time t >= ready at which they are free for
  //! duration_at(t); returns t and sets `duration` to duration_at(t).
  template <typename DurationAt>
  std::int64_t reserve(std::int64_t ready, const DurationAt& duration_at, double share, std::int64_t& duration) {
    ready = std::max(ready, used_.begin()->first);
    std::int64_t t = ready;
    for (;;) {
      duration = duration_at(t);
      std::int64_t past_conflict = -1;
      for (auto s = std::prev(used_.upper_bound(t)); s != used_.end() && s->first < t + duration; ++s) {
        if (s->second + share > 1.0 + 1e-9) {
          auto next = std::next(s);
          past_conflict = next == used_.end() ? kForever : next->first;
        }
      }
      if (past_conflict < 0) break;
      if (past_conflict == kForever) break;  // cannot happen: the last entry is 0; run it anyway
      t = past_conflict;
    }
    split(t);
    split(t + duration);
    for (auto s = used_.find(t); s != used_.end() && s->first < t + duration; ++s) s->second += share;
    return t;
  }
  //! Forgets entries that end before `floor` once the calendar is large.
  void prune(std::int64_t floor) {
    if (used_.size() <= kCalendarKeep) return;
    auto keep = std::prev(used_.upper_bound(floor));  // the entry in effect at `floor` stays
    used_.erase(used_.begin(), keep);
  }

 private:
  void split(std::int64_t at) {
    auto s = std::prev(used_.upper_bound(at));
    if (s->first != at) used_.emplace_hint(std::next(s), at, s->second);
  }
  std::map<std::int64_t, double> used_;
};

thread_local std::int64_t tl_running_item_end = -1;

// The copy engine a copy takes on the modelled GPU (the profile's copy_engines, up to 3): one per
// direction over the host link and one for peer and device-local copies, so a peer transfer does not
// queue behind a download; with 2 engines peer copies share the device-to-host one, with 1 all share.
int engine_of(CopyRoute route, int engines) noexcept {
  if (engines <= 1) return 0;
  if (route == CopyRoute::kHostToDevice) return 0;
  if (engines == 2 || route == CopyRoute::kDeviceToHost) return 1;
  return 2;
}

}  // namespace

std::int64_t& running_item_virtual_end() noexcept { return tl_running_item_end; }

struct VirtualClock::DeviceTimeline {
  explicit DeviceTimeline(std::int64_t origin) : compute(origin), end(origin) {
    engine_free[0] = engine_free[1] = engine_free[2] = origin;
  }
  std::mutex mutex;
  Calendar compute;
  // When each copy engine can take its next copy: host-to-device, device-to-host, and peer/device-local.
  std::int64_t engine_free[3];
  // all_busy: anything; work_busy: kernels or copies (all_busy less work_busy is exposed communication).
  IntervalUnion kernels_busy, copies_busy, comm_busy, work_busy, all_busy;
  // Kernels that ran by class, nested (Note [Where time goes]): matmul; or attention; or optimizer.
  FlatUnion by_class[kNestedUnions];
  std::int64_t kernels = 0;
  std::int64_t work_items = 0;  // kernels, copies and collectives
  double peak_ns = 0;
  std::int64_t end;  // latest end of anything placed
};

struct VirtualClock::HostClock {
  std::uint64_t generation = 0;
  std::int64_t now = 0;
  std::int64_t cpu_ref = 0;
};

VirtualClock::VirtualClock(std::shared_ptr<const DeviceProfile> profile, HostTimeMode host_time, int devices,
                           std::uint64_t launch_queue_depth)
    : profile_(std::move(profile)),
      host_time_(host_time),
      depth_(launch_queue_depth),
      origin_(now_ns()),
      generation_(g_generation.fetch_add(1, std::memory_order_relaxed) + 1),
      latest_(origin_) {
  for (int i = 0; i < devices; ++i) devices_.push_back(std::make_unique<DeviceTimeline>(origin_));
}

VirtualClock::~VirtualClock() = default;

void VirtualClock::begin_graph_launch() {
  HostClock& h = host();
  if (host_time_ == HostTimeMode::kMeasured) {
    const std::int64_t cpu = thread_cpu_ns();
    h.now += cpu - h.cpu_ref;
    h.cpu_ref = cpu;
  }
  h.now += to_ns(profile_->launch_ns);
  reached(h.now);
  t_graph_launch = true;
}

void VirtualClock::end_graph_launch() {
  t_graph_launch = false;
  if (host_time_ == HostTimeMode::kMeasured) host().cpu_ref = thread_cpu_ns();  // the replay's CPU time is ours, not the GPU's
}

VirtualClock::HostClock& VirtualClock::host() {
  thread_local HostClock clock;
  if (clock.generation != generation_) {
    clock.generation = generation_;
    clock.now = origin_;
    clock.cpu_ref = thread_cpu_ns();
  }
  // One host timeline (Note [Virtual time]): never behind the latest time any thread has reached.
  clock.now = std::max(clock.now, latest_.load(std::memory_order_relaxed));
  return clock;
}

void VirtualClock::reached(std::int64_t t) noexcept {
  std::int64_t seen = latest_.load(std::memory_order_relaxed);
  while (seen < t && !latest_.compare_exchange_weak(seen, t, std::memory_order_relaxed)) {
  }
}

void VirtualClock::place(int device, StreamTimeline& stream, WorkItem& item, const KernelCost* cost, bool from_device) {
  const DeviceProfile& p = *profile_;
  HostClock* h = nullptr;
  std::int64_t issue = origin_;
  if (from_device) {
    issue = std::max(origin_, running_item_virtual_end());
  } else {
    h = &host();
    const bool op = item.kind == ItemKind::kKernel || item.kind == ItemKind::kCopy;
    if (t_graph_launch) {
      // A graph's node: the launch was charged once (Note [Graph launches on the virtual clock]).
    } else if (host_time_ == HostTimeMode::kMeasured) {
      const std::int64_t cpu = thread_cpu_ns();
      h->now += cpu - h->cpu_ref + to_ns(p.launch_ns);
      h->cpu_ref = cpu;
    } else {
      h->now += to_ns(p.launch_ns + (op ? p.host_op_ns : 0.0));
    }
    issue = h->now;
  }
  DeviceTimeline& d = *devices_[static_cast<std::size_t>(device)];
  std::lock_guard lock(d.mutex);
  if (stream.ends.empty()) stream.ends.assign(static_cast<std::size_t>(depth_), origin_);
  const bool marker = is_marker(item.kind);
  std::int64_t& ring = stream.ends[stream.issued % depth_];
  if (h != nullptr && !marker && stream.issued >= depth_ && ring > issue) {
    issue = ring;  // the launch queue is full in virtual time: the host waits for room
    h->now = issue;
  }
  const std::int64_t ready = std::max(stream.tail, issue);
  std::int64_t start = ready;
  std::int64_t end = ready;
  switch (item.kind) {
    case ItemKind::kKernel: {
      const std::int64_t alone = to_ns(cost != nullptr ? kernel_time_ns(p, *cost) : p.min_kernel_ns);
      const double share = cost != nullptr ? kernel_occupancy(p, *cost) : 1.0 / p.sm_count;
      // A kernel beside a collective runs comm_compute_slowdown slower for the time they overlap.
      auto duration_at = [&](std::int64_t t) {
        if (d.comm_busy.empty() || p.comm_compute_slowdown <= 0) return alone;
        return alone + to_ns(p.comm_compute_slowdown * static_cast<double>(d.comm_busy.overlap(t, t + alone)));
      };
      std::int64_t duration = alone;
      start = d.compute.reserve(ready, duration_at, share, duration);
      end = start + duration;
      d.kernels_busy.add(start, end);
      const KernelClass kind = cost != nullptr ? kernel_class(*cost) : KernelClass::kMemoryBound;
      for (int u = first_union(kind); u < kNestedUnions; ++u) d.by_class[u].add(start, end);
      d.work_busy.add(start, end);
      d.all_busy.add(start, end);
      ++d.kernels;
      ++d.work_items;
      if (cost != nullptr && cost->flops > 0) d.peak_ns += cost->flops / peak_flops(p, *cost) * 1e9;
      break;
    }
    case ItemKind::kCopy: {
      std::int64_t& engine = d.engine_free[engine_of(item.route, p.copy_engines)];
      start = std::max(ready, engine);
      end = start + to_ns(copy_time_ns(p, item.route, item.bytes, item.pinned));
      engine = end;
      d.copies_busy.add(start, end);
      d.work_busy.add(start, end);
      d.all_busy.add(start, end);
      ++d.work_items;
      const bool pageable = !item.pinned && (item.route == CopyRoute::kHostToDevice || item.route == CopyRoute::kDeviceToHost);
      if (h != nullptr && pageable) h->now = std::max(h->now, end);  // synchronous, as on CUDA
      break;
    }
    case ItemKind::kEventRecord:
      end = start + to_ns(p.event_record_ns);
      item.record->set_virtual(end, weak_from_this());
      break;
    case ItemKind::kEventWait: {
      const std::int64_t at = item.record->virtual_ns();
      start = end = std::max(ready, at);
      break;
    }
    case ItemKind::kHostCallback:
      break;
  }
  item.vstart = start;
  item.vend = end;
  stream.tail = end;
  ring = end;
  ++stream.issued;
  d.end = std::max(d.end, end);
  if (h != nullptr) {
    d.compute.prune(h->now);
    reached(h->now);
  }
}

void VirtualClock::place_communication(int device, std::int64_t start, std::int64_t end) {
  DeviceTimeline& d = *devices_[static_cast<std::size_t>(device)];
  std::lock_guard lock(d.mutex);
  d.comm_busy.add(start, end);
  d.all_busy.add(start, end);
  ++d.work_items;
  d.end = std::max(d.end, end);
}

void VirtualClock::host_waited(int device, const StreamTimeline& stream) {
  DeviceTimeline& d = *devices_[static_cast<std::size_t>(device)];
  std::int64_t tail = 0;
  {
    std::lock_guard lock(d.mutex);
    tail = stream.tail;
  }
  jump_to(tail);
}

void VirtualClock::host_waited_device(int device) {
  DeviceTimeline& d = *devices_[static_cast<std::size_t>(device)];
  std::int64_t end = 0;
  {
    std::lock_guard lock(d.mutex);
    end = d.end;
  }
  jump_to(end);
}

void VirtualClock::host_waited_record(const EventRecord& record) { jump_to(record.virtual_ns()); }

void VirtualClock::jump_to(std::int64_t t) {
  HostClock& h = host();
  if (t > h.now) h.now = t;
  if (host_time_ == HostTimeMode::kMeasured) h.cpu_ref = thread_cpu_ns();  // waiting is not host work
  reached(h.now);
}

std::int64_t VirtualClock::host_now() { return host().now - origin_; }

DeviceTimeStats VirtualClock::stats(int device) {
  DeviceTimeline& d = *devices_[static_cast<std::size_t>(device)];
  std::lock_guard lock(d.mutex);
  DeviceTimeStats s;
  s.compute_busy_ns = d.kernels_busy.measure();
  s.copy_busy_ns = d.copies_busy.measure();
  s.comm_busy_ns = d.comm_busy.measure();
  s.busy_ns = d.all_busy.measure();
  s.exposed_comm_ns = s.busy_ns - d.work_busy.measure();
  s.matmul_ns = d.by_class[0].measure();
  s.attention_ns = d.by_class[1].measure() - d.by_class[0].measure();
  s.optimizer_ns = d.by_class[2].measure() - d.by_class[1].measure();
  s.memory_bound_ns = s.compute_busy_ns - d.by_class[2].measure();
  s.copy_alone_ns = d.work_busy.measure() - s.compute_busy_ns;
  s.kernels = d.kernels;
  s.peak_ns = d.peak_ns;
  s.end_ns = d.end - origin_;
  s.work_items = d.work_items;
  return s;
}

}  // namespace openreg::sim
