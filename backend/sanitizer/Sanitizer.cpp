#include "backend/sanitizer/Sanitizer.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <thread>

#include <c10/util/Exception.h>
#include <c10/util/Type.h>
#include <torch/csrc/autograd/node.h>
#include <torch/csrc/profiler/combined_traceback.h>

#include "backend/memory/HostAllocator.h"
#include "backend/runtime/Capture.h"
#include "backend/runtime/Device.h"
#include "backend/runtime/Observer.h"
#include "backend/runtime/Stream.h"
#include "backend/sanitizer/RaceChecker.h"

namespace openreg::sanitizer {

std::atomic<bool> g_enabled{false};

namespace {

constexpr int kUndecided = -1;
std::atomic<int> g_mode{kUndecided};

RaceChecker& checker() {
  // Leaked: hooks may run during static destruction (tensors freed at exit). Built on the first hook,
  // after enable() fixed the mode.
  static RaceChecker* c = new RaceChecker(g_mode.load() == static_cast<int>(Mode::kReport)
                                              ? RaceChecker::Mode::Record
                                              : RaceChecker::Mode::Raise);
  return *c;
}

void summary_at_exit() {
  const auto messages = checker().reports();
  if (messages.empty()) return;
  std::fprintf(stderr, "openreg sanitizer: %zu stream race(s) found\n", messages.size());
  for (const auto& r : messages) std::fprintf(stderr, "%s\n\n", r.message.c_str());
  std::fflush(stderr);
  std::_Exit(kStreamRaceErrorCode);  // the program "succeeded" but raced: CI must fail
}

uint64_t host_id() {
  thread_local const uint64_t id = std::hash<std::thread::id>{}(std::this_thread::get_id());
  return id;
}

StreamId id_of(const c10::Stream& s) { return {s.device_index(), s.id()}; }

// Translates the checker's error once, at the backend boundary.
template <class F>
void checked(F&& f) {
  try {
    f();
  } catch (const StreamRaceError& e) {
    // torch.AcceleratorError in Python (a RuntimeError, as torch.cuda's device errors are), with
    // error_code kStreamRaceErrorCode, so a test or CI step can tell a race from other failures.
    throw c10::AcceleratorError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, kStreamRaceErrorCode,
                                std::string("openreg sanitizer: ") + e.what());
  }
}

// Note [Issue contexts]
// A report says where each access was issued. On a thread that runs Python (the program's own
// threads) that is the Python stack, gathered when the op is issued as code objects and instruction
// offsets (as the memory history's stacks are) and turned into text only if the op takes part in a
// race (outside the checker's lock: symbolizing takes the GIL). Gathering takes the GIL, which the
// op's Python binding released, so it is only tried where the thread has a Python frame to show: the
// probe reads that from the thread's own state without the GIL. The autograd engine's device threads
// run backward in C++ with no Python frame; gathering there cost a GIL hand-off per op and, through
// the traceback's anomaly-mode lookup, a Python dict on every autograd node, which made the checker
// cost 1.7x on the data-parallel training step. Their accesses name the autograd node instead (its
// type, demangled only for a report). Ops of a Python custom Function's backward run Python on that
// thread and get their stack.
std::atomic<PythonFramesProbe> g_python_frames{nullptr};  // set once at import; relaxed: a plain function

class PythonStack final : public IssueContext {
 public:
  explicit PythonStack(std::shared_ptr<torch::CapturedTraceback> tb) : tb_(std::move(tb)) {}
  std::string describe() const override {
    const torch::SymbolizedTracebacks s = torch::symbolize({tb_.get()});
    std::string text;
    if (s.tracebacks.empty()) return text;
    // Innermost frame first in the traceback: printed outermost first, as Python prints a traceback.
    const auto& frames = s.tracebacks[0];
    for (auto it = frames.rbegin(); it != frames.rend(); ++it) {
      const auto& f = s.all_frames[*it];
      text += "    File \"" + f.filename + "\", line " + std::to_string(f.lineno) + ", in " + f.funcname + "\n";
    }
    return text;
  }

 private:
  std::shared_ptr<torch::CapturedTraceback> tb_;
};

class AutogradNode final : public IssueContext {
 public:
  explicit AutogradNode(const std::type_info& node) : node_(node) {}
  std::string describe() const override {
    std::string name = c10::demangle(node_.name());
    if (const auto colon = name.rfind("::"); colon != std::string::npos) name.erase(0, colon + 2);
    return "    in the backward of " + name + " (the autograd engine's thread: no Python stack)\n";
  }

 private:
  const std::type_info& node_;  // static storage
};

// Where the calling thread issues an op; null where nothing can be said (a C++ thread).
std::shared_ptr<const IssueContext> issue_context() {
  const PythonFramesProbe probe = g_python_frames.load(std::memory_order_relaxed);
  if (probe != nullptr && probe()) {
    auto tb = torch::CapturedTraceback::gather(/*python=*/true, /*script=*/false, /*cpp=*/false);
    if (tb) return std::make_shared<PythonStack>(std::move(tb));
    return nullptr;
  }
  if (const auto node = torch::autograd::get_current_node()) return std::make_shared<AutogradNode>(typeid(*node));
  return nullptr;
}

bool in_pinned_memory(const at::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.has_storage() && t.numel() > 0 &&
         c10::openreg::is_pinned_ptr(t.const_data_ptr());
}

TensorDesc describe(const at::Tensor& t) {
  TensorDesc d;
  d.dtype = c10::toString(t.scalar_type());
  d.dim = static_cast<int>(t.dim());
  for (int i = 0; i < d.dim && i < TensorDesc::kMaxDims; ++i) d.sizes[i] = t.size(i);
  return d;
}

bool on_device(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1 && t.has_storage() && t.numel() > 0 &&
         t.const_data_ptr() != nullptr;
}

// Note [Exact bytes of a strided view]
// A view's accesses are its exact bytes, as sorted disjoint runs, so that views that interleave (x[::2]
// written on one stream, x[1::2] on another) do not conflict and views that share a byte do. Dimensions
// are taken innermost (smallest stride) first: while a dimension's stride is at most the run built so
// far, its copies of that run touch or overlap and the run grows to cover them (a dense tensor, or a
// transposed one, is one run); the remaining dimensions repeat the run at their offsets. Torch strides
// are never negative; size-1 and stride-0 (expanded) dimensions add no bytes. A view of more than
// kMaxRuns separate runs is taken as its span (first to one past last byte), which can only over-report
// (a race between views that interleave that finely); kMaxRuns bounds the checker's work per access.
constexpr size_t kMaxRuns = 1 << 14;

void runs_of(const at::Tensor& t, std::vector<Range>& out) {
  out.clear();
  const auto base = reinterpret_cast<uint64_t>(t.const_data_ptr());
  const auto es = static_cast<uint64_t>(t.element_size());
  if (t.is_contiguous()) {
    out.push_back({base, base + static_cast<uint64_t>(t.numel()) * es});
    return;
  }
  c10::SmallVector<std::pair<uint64_t, uint64_t>, 8> dims;  // (stride in bytes, size)
  uint64_t last = 0;                                        // offset of the last element
  for (int64_t i = 0; i < t.dim(); ++i) {
    if (t.size(i) <= 1 || t.stride(i) == 0) continue;
    const uint64_t stride = static_cast<uint64_t>(std::abs(t.stride(i))) * es;
    dims.push_back({stride, static_cast<uint64_t>(t.size(i))});
    last += stride * (dims.back().second - 1);
  }
  std::sort(dims.begin(), dims.end());
  uint64_t run = es;
  size_t k = 0;
  for (; k < dims.size() && dims[k].first <= run; ++k) run += dims[k].first * (dims[k].second - 1);
  uint64_t count = 1;
  for (size_t j = k; j < dims.size() && count <= kMaxRuns; ++j) count *= dims[j].second;
  if (count > kMaxRuns) {
    out.push_back({base, base + last + es});
    return;
  }
  // The outer dimensions' offsets, odometer order.
  c10::SmallVector<uint64_t, 8> index(dims.size() - k, 0);
  uint64_t offset = 0;
  for (uint64_t n = 0; n < count; ++n) {
    out.push_back({base + offset, base + offset + run});
    for (size_t j = 0; j < index.size(); ++j) {
      const auto& [stride, size] = dims[k + j];
      if (++index[j] < size) {
        offset += stride;
        break;
      }
      offset -= stride * (size - 1);
      index[j] = 0;
    }
  }
  std::sort(out.begin(), out.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  size_t w = 0;  // merge runs that overlap or touch
  for (size_t r = 1; r < out.size(); ++r) {
    if (out[r].begin <= out[w].end) {
      out[w].end = std::max(out[w].end, out[r].end);
    } else {
      out[++w] = out[r];
    }
  }
  out.resize(w + 1);
}

}  // namespace

// One op's accesses, on one issue context (gathered once, only if the op touches device memory).
struct detail::OpAccesses {
  explicit OpAccesses(const char* op_name) : name(op_name) {}
  const char* name;
  std::shared_ptr<const IssueContext> context;
  bool gathered = false;

  // `stream`: the stream the access is ordered on (default: the current stream of t's device).
  void access(const at::Tensor& t, bool write, const StreamId* stream = nullptr) {
    if (!on_device(t)) return;
    if (!gathered) {
      gathered = true;
      context = issue_context();
    }
    thread_local std::vector<Range> runs;  // reused: no allocation per access
    runs_of(t, runs);
    const StreamId s = stream != nullptr ? *stream : id_of(c10::openreg::current_stream(t.device().index()));
    // Captured work runs only at its replays: the graph keeps its ranges (Note [Graphs in the race checker]).
    if (c10::openreg::capture::capture_underway() && note_captured(s, runs, write)) return;
    checked([&] {
      checker().access_runs(host_id(), s, t.device().index(), runs.data(), runs.size(),
                       write ? AccessKind::Write : AccessKind::Read, {name, describe(t), context});
    });
  }
  // Work issued on a capturing stream: the graph keeps its ranges for its replays (Note [Graphs in the
  // race checker]).
  static bool note_captured(const StreamId& s, const std::vector<Range>& runs, bool write) {
    if (s.id == kCollectiveLane) return false;
    const c10::Stream stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1,
                                                              static_cast<c10::DeviceIndex>(s.device)), s.id);
    for (const Range& r : runs) {
      if (!c10::openreg::capture::note_access(stream, s.device, r.begin, r.end, write)) return false;
    }
    return true;
  }
  // A CPU tensor's bytes in pinned host memory: by `stream` (a copy) or, when null, by the host itself.
  // False when t is not in pinned memory.
  bool access_pinned(const at::Tensor& t, bool write, const StreamId* stream) {
    if (!in_pinned_memory(t)) return false;
    if (!gathered) {
      gathered = true;
      context = issue_context();
    }
    thread_local std::vector<Range> runs;
    runs_of(t, runs);
    const AccessKind kind = write ? AccessKind::Write : AccessKind::Read;
    checked([&] {
      if (stream != nullptr) {
        checker().access_runs(host_id(), *stream, kPinnedHost, runs.data(), runs.size(), kind,
                              {name, describe(t), context});
      } else {
        checker().host_access_runs(host_id(), kPinnedHost, runs.data(), runs.size(), kind,
                                   {name, describe(t), context});
      }
    });
    return true;
  }
  void visit(const c10::IValue& v, bool write) {
    if (v.isTensor()) {
      access(v.toTensor(), write);
    } else if (v.isList()) {
      for (const auto& e : v.toListRef())
        if (e.isTensor()) access(e.toTensor(), write);
    }
  }
};

void set_python_frames_probe(PythonFramesProbe probe) { g_python_frames.store(probe, std::memory_order_relaxed); }

namespace {
// Names of kernels and collectives that reach the checker as Python strings: the checker keeps a
// `const char*` per access, so each distinct name is copied once and kept for the process (a program
// has a bounded set of kernel names: Inductor's generated kernels and c10d's collectives).
const char* intern(const std::string& name) {
  static std::mutex mu;
  static auto* names = new std::set<std::string, std::less<>>();  // leaked: read during exit
  std::lock_guard<std::mutex> lock(mu);
  return names->insert(name).first->c_str();
}
}  // namespace

// Note [Host access to pinned memory]
// A non_blocking copy between a device and pinned host memory returns before it ran, so the host must
// not read the destination (device to host) or overwrite the source (host to device) until it
// synchronized with the copy's stream (CUDA's rule). The copy is recorded as its stream's access of the
// pinned bytes (RaceChecker's kPinnedHost); the host's own reads and writes are what the program does
// with the CPU tensor, which no openreg hook sees: CPU ops run CPU kernels. So while the issuing thread
// has a pinned access by a stream it did not synchronize with, a Python TorchDispatchMode sees that
// thread's CPU ops (torch.openreg.sanitizer's _HostAccessMode, pushed and popped through the watcher
// installed by python/csrc/SanitizerBindings.cpp) and reports each CPU tensor an op reads or writes
// (on_host_access); the checker keeps only those in pinned memory, as host accesses on the host's own
// clock. The mode is pushed at the copy's issue, on a thread that runs Python, and popped at the first
// host synchronization (stream, event or device) after which no stream access of pinned memory is left
// unordered for the thread, so the checker costs a Python call per CPU op only inside such windows.
// A freed pinned block's history is dropped (on_pinned_freed): the copies that used it keep its storage
// alive until they ran, so a later owner of the bytes is ordered after them, as CUDA's host allocator
// orders reuse with events. What it cannot see is listed in docs/sanitizer.md's limits.
namespace {
std::atomic<HostAccessWatcher> g_host_watcher{nullptr};  // set once at import; relaxed: a plain function
thread_local bool tls_watching = false;  // whether this thread's host-access mode is pushed

void watch_host_access() {
  if (tls_watching) return;
  const HostAccessWatcher watcher = g_host_watcher.load(std::memory_order_relaxed);
  const PythonFramesProbe probe = g_python_frames.load(std::memory_order_relaxed);
  if (watcher == nullptr || probe == nullptr || !probe()) return;  // no Python on this thread: nothing to watch
  tls_watching = watcher(true);
}

void maybe_unwatch_host_access() {
  if (!tls_watching || checker().has_unordered_for_host(host_id(), kPinnedHost)) return;
  const HostAccessWatcher watcher = g_host_watcher.load(std::memory_order_relaxed);
  tls_watching = watcher(false);
}
}  // namespace

void set_host_access_watcher(HostAccessWatcher watcher) { g_host_watcher.store(watcher, std::memory_order_relaxed); }

void on_host_access(const std::string& name, const std::vector<at::Tensor>& reads,
                    const std::vector<at::Tensor>& writes) {
  if (!enabled()) return;
  detail::OpAccesses op{intern(name)};
  // Reads first: an in-place op reads and writes its self, and the host is ordered with itself.
  for (const auto& t : reads) op.access_pinned(t, false, nullptr);
  for (const auto& t : writes) op.access_pinned(t, true, nullptr);
}

namespace {
// What the runtime and memory layers report (Note [The runtime reports to its observer]); installed only
// once the checker is on, so it forwards without testing enabled().
class RaceCheckerObserver final : public c10::openreg::RuntimeObserver {
 public:
  void on_device_sync(c10::DeviceIndex device) override { detail::device_sync(device); }
  void on_event_wait(const void* event, const c10::Stream& stream) override { detail::event_wait(event, stream); }
  void on_event_done(const void* event) override { detail::event_sync(event); }
  void on_block_freed(int device, const void* ptr, std::size_t size, std::int64_t alloc_stream,
                      const std::vector<std::int64_t>& recorded) override {
    detail::block_freed(device, ptr, size, alloc_stream, recorded);
  }
  void on_pinned_freed(const void* ptr, std::size_t size) override { detail::pinned_freed(ptr, size); }
};

bool decide(Mode m) {
  int expected = kUndecided;
  if (!g_mode.compare_exchange_strong(expected, static_cast<int>(m))) return expected == static_cast<int>(m);
  if (m == Mode::kReport) std::atexit(summary_at_exit);
  g_enabled.store(m != Mode::kOff, std::memory_order_relaxed);  // see Note [Sanitizer hooks]
  if (m != Mode::kOff) {
    static auto* observer = new RaceCheckerObserver();  // leaked: reports may come during static destruction
    c10::openreg::set_runtime_observer(observer);
  }
  return true;
}
}  // namespace

// Note [OPENREG_SANITIZER is read when the runtime starts]
// The variable used to be parsed by a static initializer of this library, so a malformed value threw
// during dlopen, which aborted every process that loaded the backend (`import torch` autoloads it, so
// CPU-only programs died too). It is parsed with the other OPENREG_* variables (sim/src/config.cpp) when
// the runtime starts, and a bad value is the same configuration error, raised at the first use of openreg
// and at every use after. No openreg work can be issued before the runtime started, so the mode is in
// force before the first hook that matters; enable() starts the runtime first, so the environment keeps
// deciding the mode over a later enable() call in another mode, as it did at load. "0" and unset leave
// the mode undecided, so enable() can still turn the checker on. The runtime hands the parsed mode to
// the start hook this file sets (runtime/Observer.h), since the runtime sits below the checker.
namespace {
void enable_from_environment(c10::openreg::RaceCheck mode) {
  // An enable() that ran first started the runtime, so it cannot have decided before this.
  switch (mode) {
    case c10::openreg::RaceCheck::kOff: break;
    case c10::openreg::RaceCheck::kRaise: (void)decide(Mode::kRaise); break;
    case c10::openreg::RaceCheck::kReport: (void)decide(Mode::kReport); break;
  }
}
// Set before anything can start the runtime (a static initializer of this library).
const bool g_environment_hook_set = (c10::openreg::set_runtime_start_hook(&enable_from_environment), true);
}  // namespace

bool enable(Mode m) {
  c10::openreg::init();  // applies OPENREG_SANITIZER (or throws its configuration error)
  return decide(m);
}

Mode mode() {
  const int m = g_mode.load();
  return m == kUndecided ? Mode::kOff : static_cast<Mode>(m);
}

std::size_t race_count() { return enabled() ? checker().report_count() : 0; }

std::vector<std::string> race_messages() {
  std::vector<std::string> out;
  if (!enabled()) return out;
  for (auto& r : checker().reports()) out.push_back(std::move(r.message));
  return out;
}

namespace detail {

void op(const char* name, c10::ArrayRef<c10::IValue> args, c10::ArrayRef<char> written) {
  OpAccesses op{name};
  // Reads first: an in-place op reads and writes its self, and a stream is ordered with itself.
  for (size_t i = 0; i < args.size(); ++i)
    if (i >= written.size() || !written[i]) op.visit(args[i], false);
  for (size_t i = 0; i < args.size() && i < written.size(); ++i)
    if (written[i]) op.visit(args[i], true);
}

void outputs(const char* name, c10::ArrayRef<c10::IValue> outs, c10::ArrayRef<char> fresh) {
  OpAccesses op{name};
  for (size_t i = 0; i < outs.size() && i < fresh.size(); ++i)
    if (fresh[i]) op.visit(outs[i], true);
}

void kernel(const char* name, std::initializer_list<const at::Tensor*> reads,
            std::initializer_list<const at::Tensor*> writes) {
  OpAccesses op{name};
  for (const at::Tensor* t : reads) op.access(*t, false);
  for (const at::Tensor* t : writes) op.access(*t, true);
}

void copy(const at::Tensor& src, const at::Tensor& dst) {
  OpAccesses op{"aten::copy_"};
  const bool src_dev = on_device(src);
  const bool dst_dev = on_device(dst);
  if (src_dev != dst_dev && (src_dev || dst_dev)) {
    // Between a device and the host: the copy runs on the device's current stream (ops/Copy.cpp), and a
    // host side in pinned memory is accessed by that stream, not by the host (Note [Host access to pinned
    // memory]). A blocking copy then waits for the stream (on_host_wait), which orders the host after it.
    const at::Tensor& device_side = src_dev ? src : dst;
    const StreamId on = id_of(c10::openreg::current_stream(device_side.device().index()));
    op.access(src, false);
    op.access(dst, true);
    if (op.access_pinned(src_dev ? dst : src, /*write=*/src_dev, &on)) watch_host_access();
    return;
  }
  if (src_dev && dst_dev && src.device() != dst.device()) {
    // As ops/Copy.cpp orders a peer copy: it runs on the source's current stream after the
    // destination's current stream reached this point, and the destination's stream waits for it.
    // Both devices' bytes are accessed on the source's stream.
    const c10::Stream from = c10::openreg::current_stream(src.device().index());
    const c10::Stream to = c10::openreg::current_stream(dst.device().index());
    const StreamId on = id_of(from);
    checker().wait_stream(on, id_of(to));
    op.access(src, false, &on);
    op.access(dst, true, &on);
    checker().wait_stream(id_of(to), on);
    return;
  }
  op.access(src, false);
  op.access(dst, true);
}

void event_record(const void* e, const c10::Stream& s) {
  checker().record_event(reinterpret_cast<uint64_t>(e), id_of(s));
}
void event_wait(const void* e, const c10::Stream& s) {
  checker().wait_event(reinterpret_cast<uint64_t>(e), id_of(s));
}
void event_sync(const void* e) {
  checker().synchronize_event(host_id(), reinterpret_cast<uint64_t>(e));
  maybe_unwatch_host_access();
}
void host_wait(const c10::Stream& s) {
  checker().synchronize_stream(host_id(), id_of(s));
  maybe_unwatch_host_access();
}
void device_sync(c10::DeviceIndex d) {
  checker().synchronize_device(host_id(), d);
  maybe_unwatch_host_access();
}

void pinned_freed(const void* ptr, std::size_t size) {
  const auto begin = reinterpret_cast<uint64_t>(ptr);
  checker().forget(kPinnedHost, begin, begin + size);
}

void block_freed(int device, const void* ptr, std::size_t size, std::int64_t alloc_stream,
                 const std::vector<std::int64_t>& recorded_streams) {
  std::vector<StreamId> recorded;
  recorded.reserve(recorded_streams.size());
  for (std::int64_t id : recorded_streams) recorded.push_back({device, id});
  const auto begin = reinterpret_cast<uint64_t>(ptr);
  checker().free_block(host_id(), device, begin, begin + size, {device, alloc_stream}, recorded);
}

}  // namespace detail

void on_launch(const std::string& name, const std::vector<at::Tensor>& reads, const std::vector<at::Tensor>& writes) {
  if (!enabled()) return;
  detail::OpAccesses op{intern(name)};
  // The kernel is enqueued on the current stream of the current device (openreg_launch_compiled_kernel).
  const StreamId on = id_of(c10::openreg::current_stream(c10::openreg::current_device()));
  for (const auto& t : reads) op.access(t, false, &on);
  for (const auto& t : writes) op.access(t, true, &on);
}

// Note [Graphs in the race checker]
// Work issued on a capturing stream does not run then, so the checker does not take its accesses as
// accesses of that stream (a replay on another stream would seem to race with them); each is kept with
// the capture instead (runtime/Capture.h). Races between the capture's own streams (a missing join
// inside the graph) are therefore not checked: capture_end's join check and the replay's dependencies
// cover only the end of the graph. A replay runs on one
// stream: its lanes fork from it and join back into it, so to everything outside the graph the replay
// is one kernel on that stream reading and writing every range the capture touched (registration/
// Graph.cpp calls on_replay before enqueuing it). Work on another stream that touches the graph's
// memory without waiting for the replay (or that the replay does not wait for) is a race.
void on_replay(const char* name, const c10::Stream& stream, const std::vector<c10::openreg::capture::Access>& accesses) {
  if (!enabled()) return;
  detail::OpAccesses op{name};
  op.gathered = true;
  op.context = issue_context();
  const StreamId on = id_of(stream);
  for (const auto& a : accesses) {
    const Range run{a.begin, a.end};
    checked([&] {
      checker().access_runs(host_id(), on, a.device, &run, 1, a.write ? AccessKind::Write : AccessKind::Read,
                            {name, TensorDesc("memory the graph captured"), op.context});
    });
  }
}

// Note [Collectives in the race checker]
// torch.distributed on openreg (Note [Stream-ordered collectives] in
// python/torch_openreg/_distributed/_comm_queue.py)
// runs a collective after an event recorded on the current stream of its device, on a communication
// thread, and ends it at a CollectiveEvent that Work.wait(), the Work's future and synchronizations wait
// for. The checker models that as NCCL's communicator stream: the device's collective lane (an actor of
// its own, kCollectiveLane) waits for the current stream, reads the collective's inputs and writes its
// outputs, and its clock at that point is the end event's; a stream that waits on the end (block) or a
// host that synchronizes it joins that clock. So a collective whose input was written on a stream the
// current one did not wait for is a race, and so is using its output before waiting for it. Collectives
// of one device are in issue order on the lane, as NCCL's are on one communicator.
void on_collective(const std::string& name, int device, const void* end, const std::vector<at::Tensor>& reads,
                   const std::vector<at::Tensor>& writes) {
  if (!enabled()) return;
  detail::OpAccesses op{intern(name)};
  const StreamId lane{device, kCollectiveLane};
  checker().wait_stream(lane, id_of(c10::openreg::current_stream(static_cast<c10::DeviceIndex>(device))));
  for (const auto& t : reads) op.access(t, false, &lane);
  for (const auto& t : writes) op.access(t, true, &lane);
  checker().record_event(reinterpret_cast<uint64_t>(end), lane);
}

}  // namespace openreg::sanitizer
