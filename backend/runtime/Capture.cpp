#include "backend/runtime/Capture.h"

#include "backend/runtime/SimErrors.h"

#include <c10/util/Exception.h>

#include <openreg/sim/event.h>
#include <openreg/sim/runtime.h>
#include <openreg/sim/stream.h>

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <utility>

// Note [Stream capture]
// CUDA's stream capture, as the CUDA programming guide describes it, and openreg's version of it:
//  - A capture begins on one stream (the origin). From then on, work issued on a capturing stream is
//    recorded as graph nodes, not run: kernels (their closures are kept and copied at each replay),
//    byte copies, and the host memory a copy reads. Nothing reaches the sim stream.
//  - Other streams join through events: recording an event on a capturing stream makes it stand for
//    that point of the capture, and a stream that waits on such an event starts capturing into the
//    same graph (a fork), its work depending on what the event covered. A capturing stream's wait on a
//    captured event of another capturing stream is a dependency between the two lanes. Waiting on an
//    event recorded outside the capture is CUDA's isolation error: a graph cannot depend on work that
//    is not in it.
//  - Joins: the capture may end only when the origin stream has waited on every forked stream's last
//    work (each lane keeps a vector clock: how far it knows every lane to be done). Otherwise
//    capture_end fails with CUDA's "unjoined" error. After the end, forked streams are ordinary again.
//  - Operations that need the capture's work done cannot be recorded and raise at the call:
//    synchronizing or querying a capturing stream (which .item(), .cpu(), .tolist() and blocking copies
//    do), synchronizing or querying an event recorded in the capture (cudaErrorCapturedEvent), and
//    issuing a collective or a pageable copy on a capturing stream. Synchronizing a device is
//    "potentially unsafe" in CUDA's terms: refused while a global-mode capture runs on any thread, or a
//    thread_local- or global-mode capture runs on the calling thread; relaxed mode allows it (it waits
//    for the device's real work; the captured work is not queued anywhere).
//  - An error invalidates the capture: everything it records afterwards raises "operation failed due to
//    a previous error during capture", and capture_end raises it too (ending the capture).
// Errors are c10::AcceleratorError (torch.AcceleratorError in Python, as CUDA errors are), carrying
// CUDA's message and error name.

namespace c10::openreg::capture {

namespace sim = ::openreg::sim;

namespace {

struct Lane {
  OpenRegStream stream;
  std::vector<std::size_t> clock;  // per lane: how many of its nodes this lane's next node follows
  std::size_t length = 0;          // nodes recorded on this lane
};

struct CapturedRecord {
  std::weak_ptr<Session> session;
  std::size_t node;
  std::vector<std::size_t> clock;  // the recording lane's clock at the record (itself included)
};

}  // namespace

class Session {
 public:
  Session(std::uint64_t id_, Mode mode_, c10::DeviceIndex device_)
      : id(id_), mode(mode_), thread(std::this_thread::get_id()), device(device_) {}
  const std::uint64_t id;
  const Mode mode;
  const std::thread::id thread;
  const c10::DeviceIndex device;
  std::vector<Lane> lanes;
  std::vector<Node> nodes;
  std::vector<Access> accesses;
  std::string invalid;  // the first error, once invalidated
  bool ended = false;
};

namespace {

struct Registry {
  std::mutex mutex;  // guards everything below and every Session's members
  std::unordered_map<const sim::Stream*, std::shared_ptr<Session>> streams;
  std::unordered_map<const sim::Event*, CapturedRecord> events;
  std::vector<std::weak_ptr<Session>> sessions;  // those not ended, for the device-sync check
};

Registry& registry() {
  static auto* r = new Registry();  // leaked: device threads may use it during static destruction
  return *r;
}

// A CUDA error a capture raises: its cudaError_t name and code (the AcceleratorError carries the code, as
// CUDA's errors do) and CUDA's message.
struct CudaError {
  const char* name;
  std::int32_t code;
  const char* message;
};
constexpr CudaError kIllegalState{"cudaErrorIllegalState", 401, "operation not permitted when stream is capturing"};
constexpr CudaError kUnsupported{"cudaErrorStreamCaptureUnsupported", 900,
                                 "operation not permitted when stream is capturing"};
constexpr CudaError kInvalidated{"cudaErrorStreamCaptureInvalidated", 901,
                                 "operation failed due to a previous error during capture"};
constexpr CudaError kMerge{"cudaErrorStreamCaptureMerge", 902,
                           "operation would result in a merge of two independent capture sequences"};
constexpr CudaError kUnjoined{"cudaErrorStreamCaptureUnjoined", 904,
                              "capture sequence contains a fork that was not joined to the primary stream"};
constexpr CudaError kIsolation{"cudaErrorStreamCaptureIsolation", 905,
                               "dependency created on uncaptured work in another stream"};
constexpr CudaError kCapturedEvent{"cudaErrorCapturedEvent", 907,
                                   "operation not permitted on an event last recorded in a capturing stream"};
constexpr CudaError kWrongThread{"cudaErrorStreamCaptureWrongThread", 908,
                                 "attempt to terminate a thread-local capture sequence from another thread"};

[[noreturn]] void fail(const CudaError& error, const std::string& what) {
  throw c10::AcceleratorError({__func__, __FILE__, static_cast<std::uint32_t>(__LINE__)}, error.code,
                              std::string("openreg error: ") + error.message + " (" + error.name + ": " + what + ")");
}

// With the registry's mutex held: marks `session` invalid with `what` (first error wins).
void invalidate(Session& session, const std::string& what) {
  if (session.invalid.empty()) session.invalid = what;
}

[[noreturn]] void fail_invalidated(const Session& session) {
  fail(kInvalidated, "the capture failed earlier: " + session.invalid);
}

int lane_of(const Session& session, const sim::Stream* stream) {
  for (std::size_t i = 0; i < session.lanes.size(); ++i) {
    if (&session.lanes[i].stream.sim() == stream) return static_cast<int>(i);
  }
  return -1;
}

// With the mutex held: the session `stream` records into, or null.
Session* capturing(Registry& r, const OpenRegStream& stream) {
  auto it = r.streams.find(&stream.sim());
  return it == r.streams.end() ? nullptr : it->second.get();
}

// With the mutex held: appends `node` to `stream`'s lane of `session`.
std::size_t append(Session& session, const OpenRegStream& stream, Node node) {
  if (!session.invalid.empty()) fail_invalidated(session);
  const int lane = lane_of(session, &stream.sim());
  TORCH_INTERNAL_ASSERT(lane >= 0);
  node.lane = lane;
  Lane& l = session.lanes[static_cast<std::size_t>(lane)];
  l.length += 1;
  l.clock[static_cast<std::size_t>(lane)] = l.length;
  session.nodes.push_back(std::move(node));
  return session.nodes.size() - 1;
}

Lane new_lane(const OpenRegStream& stream, std::size_t lanes) {
  return Lane{stream, std::vector<std::size_t>(lanes + 1, 0), 0};
}

}  // namespace

std::shared_ptr<Session> begin(const OpenRegStream& origin, Mode mode, std::uint64_t id) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.streams.count(&origin.sim()) != 0) {
    fail(kIllegalState, "capture_begin on a stream that is already capturing");
  }
  auto session = std::make_shared<Session>(id, mode, origin.device_index());
  session->lanes.push_back(new_lane(origin, 0));
  r.streams.emplace(&origin.sim(), session);
  r.sessions.push_back(session);
  active_captures().fetch_add(1, std::memory_order_release);
  return session;
}

Captured end(const std::shared_ptr<Session>& session, const OpenRegStream& stream) {
  Registry& r = registry();
  std::unique_lock<std::mutex> lock(r.mutex);
  TORCH_CHECK(!session->ended, "openreg: this capture has already ended");
  TORCH_CHECK(&session->lanes[0].stream.sim() == &stream.sim(),
              "Capture must end on the same stream it began on.");
  if (session->mode == Mode::kThreadLocal && session->thread != std::this_thread::get_id()) {
    fail(kWrongThread, "capture_end on another thread than capture_begin");
  }
  // Which forked lane is not joined back into the origin (its last node not known done there).
  int unjoined = -1;
  const Lane& origin = session->lanes[0];
  for (std::size_t i = 1; i < session->lanes.size(); ++i) {
    const std::size_t known = i < origin.clock.size() ? origin.clock[i] : 0;
    if (known < session->lanes[i].length) unjoined = static_cast<int>(i);
  }
  // The capture ends whatever happens next: its streams stop capturing, its events stop standing for it.
  session->ended = true;
  for (const Lane& l : session->lanes) r.streams.erase(&l.stream.sim());
  for (auto it = r.events.begin(); it != r.events.end();) {
    auto owner = it->second.session.lock();
    it = (owner == nullptr || owner == session) ? r.events.erase(it) : std::next(it);
  }
  r.sessions.erase(std::remove_if(r.sessions.begin(), r.sessions.end(),
                                  [&](const std::weak_ptr<Session>& w) {
                                    auto s = w.lock();
                                    return s == nullptr || s == session;
                                  }),
                   r.sessions.end());
  active_captures().fetch_sub(1, std::memory_order_release);
  if (!session->invalid.empty()) fail_invalidated(*session);
  if (unjoined >= 0) {
    fail(kUnjoined, "the work of stream " + std::to_string(session->lanes[static_cast<std::size_t>(unjoined)].stream.id()) +
             " was not waited for by the capturing stream before capture_end");
  }
  Captured out;
  out.nodes = std::move(session->nodes);
  out.accesses = std::move(session->accesses);
  for (const Lane& l : session->lanes) out.lanes.push_back(l.stream);
  return out;
}

bool has_ended(const Session& session) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return session.ended;
}

std::uint64_t capture_id_of(const sim::Stream* stream) {
  if (!capture_underway()) return 0;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.streams.find(stream);
  return it == r.streams.end() ? 0 : it->second->id;
}

bool is_capturing(const OpenRegStream& stream) {
  return capture_id_of(&stream.sim()) != 0;
}

bool record_kernel(const OpenRegStream& stream, const char* name, KernelFactory make,
                   std::optional<sim::KernelCost> cost, std::optional<SeedSource> seed) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  Session* session = capturing(r, stream);
  if (session == nullptr) return false;
  Node node{NodeKind::kKernel};
  node.name = name;
  node.make = std::move(make);
  node.cost = cost;
  node.seed = std::move(seed);
  append(*session, stream, std::move(node));
  return true;
}

bool record_copy(const OpenRegStream& stream, void* dst, const void* src, std::size_t bytes, const char* name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  Session* session = capturing(r, stream);
  if (session == nullptr) return false;
  Node node{NodeKind::kCopy};
  node.name = name;
  node.dst = dst;
  node.src = src;
  node.bytes = bytes;
  append(*session, stream, std::move(node));
  return true;
}

bool record_keep(const OpenRegStream& stream, std::shared_ptr<void> keep) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  Session* session = capturing(r, stream);
  if (session == nullptr) return false;
  Node node{NodeKind::kKeep};
  node.name = "openreg::copy_release";
  node.keep = std::move(keep);
  // Not a lane step: keeping memory orders nothing, so it does not move the lane's clock.
  if (!session->invalid.empty()) fail_invalidated(*session);
  node.lane = lane_of(*session, &stream.sim());
  session->nodes.push_back(std::move(node));
  return true;
}

bool note_access(const c10::Stream& stream, int device, std::uint64_t begin, std::uint64_t end, bool write) {
  if (!capture_underway()) return false;
  const OpenRegStream handle(stream);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  Session* session = capturing(r, handle);
  if (session == nullptr) return false;
  session->accesses.push_back(Access{device, begin, end, write});
  return true;
}

bool record_event(const std::shared_ptr<sim::Event>& event, const OpenRegStream& stream) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  Session* session = capturing(r, stream);
  if (session == nullptr) {
    r.events.erase(event.get());  // a real record: the event no longer stands for a captured point
    return false;
  }
  Node node{NodeKind::kRecord};
  node.name = "openreg::event_record";
  const std::size_t index = append(*session, stream, std::move(node));
  const Lane& lane = session->lanes[static_cast<std::size_t>(session->nodes[index].lane)];
  r.events[event.get()] = CapturedRecord{r.streams.at(&stream.sim()), index, lane.clock};
  return true;
}

bool wait_event(const std::shared_ptr<sim::Event>& event, const OpenRegStream& stream) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  Session* waiter = capturing(r, stream);
  auto it = r.events.find(event.get());
  std::shared_ptr<Session> owner = it == r.events.end() ? nullptr : it->second.session.lock();
  if (owner == nullptr) {
    if (waiter == nullptr) return false;  // neither side captures: an ordinary wait
    if (!event->recorded()) return true;  // waiting on a never-recorded event is a no-op, as on CUDA
    invalidate(*waiter, "a capturing stream waited on an event recorded outside the capture");
    fail(kIsolation, "a capturing stream waited on an event recorded outside the capture");
  }
  if (waiter != nullptr && waiter != owner.get()) {
    invalidate(*waiter, "a stream of one capture waited on an event of another capture");
    invalidate(*owner, "a stream of another capture waited on one of its events");
    fail(kMerge, "a stream of one capture waited on an event recorded in another capture");
  }
  if (!owner->invalid.empty()) fail_invalidated(*owner);
  if (stream.device_index() != owner->device) {
    invalidate(*owner, "a stream of another device joined the capture");
    fail(kUnsupported,
         "an openreg graph captures the streams of one device; a stream of another device waited on a captured "
         "event");
  }
  const CapturedRecord& rec = it->second;
  if (waiter == nullptr) {  // a fork: the stream joins the capture
    owner->lanes.push_back(new_lane(stream, owner->lanes.size()));
    for (Lane& l : owner->lanes) l.clock.resize(owner->lanes.size(), 0);
    r.streams.emplace(&stream.sim(), owner);
  }
  Node node{NodeKind::kWait};
  node.name = "openreg::event_wait";
  node.record = rec.node;
  const std::size_t index = append(*owner, stream, std::move(node));
  Lane& lane = owner->lanes[static_cast<std::size_t>(owner->nodes[index].lane)];
  for (std::size_t i = 0; i < rec.clock.size(); ++i) lane.clock[i] = std::max(lane.clock[i], rec.clock[i]);
  return true;
}

namespace {

// The operation `what` on `stream` cannot be part of a capture: if the stream captures, its capture is
// invalidated (`what` + `reason`) and CUDA's unsupported-operation error raised (`what` + `detail`).
// Called on every stream synchronize and query: nothing is built unless a capture is underway.
void refuse_if_capturing(const OpenRegStream& stream, const char* what, const char* reason, const char* detail) {
  if (!capture_underway()) return;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  Session* session = capturing(r, stream);
  if (session == nullptr) return;
  invalidate(*session, std::string(what) + reason);
  fail(kUnsupported, std::string(what) + detail);
}

}  // namespace

void check_stream_wait(const OpenRegStream& stream, const char* what) {
  refuse_if_capturing(stream, what, " during the capture", " (the stream is capturing a graph)");
}

void check_event_wait(const sim::Event* event, const char* what) {
  if (!capture_underway()) return;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.events.find(event);
  if (it == r.events.end()) return;
  auto owner = it->second.session.lock();
  if (owner == nullptr) return;
  invalidate(*owner, std::string(what) + " of an event recorded in the capture");
  fail(kCapturedEvent, std::string(what) + " of an event recorded in a graph capture");
}

void check_device_sync(const char* what) {
  if (!capture_underway()) return;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto me = std::this_thread::get_id();
  for (const auto& weak : r.sessions) {
    auto session = weak.lock();
    if (session == nullptr || session->ended) continue;
    const bool refused = session->mode == Mode::kGlobal ||
                         (session->mode == Mode::kThreadLocal && session->thread == me);
    if (!refused) continue;
    invalidate(*session, std::string(what) + " during the capture");
    fail(kUnsupported,
         std::string(what) + " while a graph capture is underway (capture_error_mode \"" +
             (session->mode == Mode::kGlobal ? "global" : "thread_local") + "\")");
  }
}

void check_not_capturing(const OpenRegStream& stream, const char* what) {
  refuse_if_capturing(stream, what, " on a capturing stream", " cannot be captured by an openreg graph");
}

Executable::Executable(const Captured& captured, std::uint64_t graph_id) : captured_(captured) {
  const std::string suffix = " [graph " + std::to_string(graph_id) + "]";
  names_.reserve(captured.nodes.size());
  records_.resize(captured.nodes.size());
  for (const Node& node : captured.nodes) {
    names_.push_back(sim::intern_name((std::string(node.name) + suffix).c_str()));
    if (node.kind == NodeKind::kWait && !records_[node.record]) records_[node.record] = sim::Event::create();
  }
  // The forked lanes replay on streams of the device's pool, as a CUDA graph's branches run on streams
  // of the driver's: never on the streams they were captured from, which the program goes on using.
  for (std::size_t i = 1; i < captured.lanes.size(); ++i) {
    const OpenRegStream& captured_on = captured.lanes[i];
    lanes_.emplace_back(stream_from_pool(captured_on.device_index(), captured_on.priority()));
  }
}

Executable::~Executable() = default;

void Executable::launch(const OpenRegStream& stream, const std::function<std::uint64_t(const Node&)>& seed_of) {
  translate_sim_errors([&] {
    // One graph launch for the host's virtual clock, however many nodes (Note [Graph launches on the
    // virtual clock] in sim/src/virtual_clock.cpp).
    sim::GraphLaunchScope launch_scope;
    sim::Stream& main = stream.sim();
    // Launches of one graph are ordered, as cudaGraphLaunch orders launches of one executable graph.
    if (last_launch_) main.wait(last_launch_);
    if (!lanes_.empty()) {
      auto fork = sim::Event::create();
      main.record(fork);
      for (const OpenRegStream& lane : lanes_) lane.sim().wait(fork);
    }
    // The launch is done when every lane is: the lanes join back into `stream`. Also when a launch
    // held by a full launch queue was interrupted (Ctrl-C, Note [Interruptible host waits]): the nodes
    // issued so far still run, and `stream` and the next replay wait for them. Records and waits never
    // wait for room, so the join cannot be interrupted itself.
    auto join_lanes = [&] {
      for (const OpenRegStream& lane : lanes_) {
        auto join = sim::Event::create();
        lane.sim().record(join);
        main.wait(join);
      }
      auto done = sim::Event::create();
      main.record(done);
      last_launch_ = std::move(done);
    };
    try {
      for (std::size_t i = 0; i < captured_.nodes.size(); ++i) {
        const Node& node = captured_.nodes[i];
        sim::Stream& on = node.lane == 0 ? main : lanes_[static_cast<std::size_t>(node.lane) - 1].sim();
        switch (node.kind) {
          case NodeKind::kKernel: {
            sim::Task task = node.make(node.seed ? seed_of(node) : 0);
            if (node.cost) {
              on.launch(names_[i], std::move(task), *node.cost);
            } else {
              on.launch(names_[i], std::move(task));
            }
            break;
          }
          case NodeKind::kCopy:
            on.copy(node.dst, node.src, node.bytes, names_[i]);
            break;
          case NodeKind::kRecord:
            if (records_[i]) on.record(records_[i]);
            break;
          case NodeKind::kWait:
            on.wait(records_[node.record]);
            break;
          case NodeKind::kKeep:
            break;
        }
      }
    } catch (...) {
      join_lanes();
      throw;
    }
    join_lanes();
  });
}

void Executable::wait_idle() noexcept {
  if (!last_launch_) return;
  try {
    last_launch_->synchronize_untimed();
  } catch (...) {  // NOLINT(bugprone-empty-catch): a failure is reported where the program synchronizes
  }
}

std::string Executable::dot() const {
  std::string out = "digraph openreg_graph {\n  node [shape=box];\n";
  std::vector<long> previous(captured_.lanes.size(), -1);  // per lane, its last node
  for (std::size_t i = 0; i < captured_.nodes.size(); ++i) {
    const Node& node = captured_.nodes[i];
    if (node.kind == NodeKind::kKeep) continue;
    out += "  n" + std::to_string(i) + " [label=\"" + node.name + "\\nlane " + std::to_string(node.lane) + "\"];\n";
    long& prev = previous[static_cast<std::size_t>(node.lane)];
    if (prev >= 0) out += "  n" + std::to_string(prev) + " -> n" + std::to_string(i) + ";\n";
    if (node.kind == NodeKind::kWait) {
      out += "  n" + std::to_string(node.record) + " -> n" + std::to_string(i) + " [style=dashed];\n";
    }
    prev = static_cast<long>(i);
  }
  return out + "}\n";
}

}  // namespace c10::openreg::capture
