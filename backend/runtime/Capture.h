#pragma once
// Stream capture: work issued on a capturing stream is recorded into a graph instead of being run, as
// cudaStreamBeginCapture makes a CUDA stream record. This header is the runtime's side of it: which
// streams capture, what they recorded, the dependencies between them (fork and join through events),
// and the checks that make operations CUDA forbids during capture raise at the call. The graph object
// that starts a capture, owns its memory pool and replays it is registration/Graph.cpp (Note [Graphs
// on openreg]); the rules are in Note [Stream capture] in runtime/Capture.cpp.
//
// Thread-safety: every function may be called from any thread; one mutex guards all capture state.
// capture_underway() is a lock-free check so that code paths pay one atomic load when no capture runs.

#include "backend/Export.h"
#include "backend/runtime/Stream.h"

#include <c10/core/GeneratorImpl.h>
#include <c10/util/intrusive_ptr.h>

#include <openreg/sim/cost.h>
#include <openreg/sim/task.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace openreg::sim {
class Event;
}  // namespace openreg::sim

namespace c10::openreg::capture {

//! torch.accelerator.Graph's capture_error_mode, with cudaStreamCaptureMode's meaning.
enum class Mode : std::uint8_t { kGlobal, kThreadLocal, kRelaxed };

//! Where a captured random op's seed comes from: the generator and the offset it took during capture.
//! A replay gives it the seed of the same offset relative to the generator's offset at the replay.
struct SeedSource {
  c10::intrusive_ptr<c10::GeneratorImpl> generator;
  std::uint64_t offset = 0;
};

//! Makes a fresh kernel for one replay, given the seed it runs with (ignored by non-random kernels).
using KernelFactory = std::function<::openreg::sim::Task(std::uint64_t seed)>;

enum class NodeKind : std::uint8_t {
  kKernel,  //!< a kernel (make, cost, seed)
  kCopy,    //!< a byte copy on the copy engine (dst, src, bytes)
  kRecord,  //!< an event record other lanes may wait for
  kWait,    //!< a wait for the record node `record`
  kKeep,    //!< host memory a captured copy uses, kept for the graph's life
};

//! One recorded operation, on lane `lane` (a stream that took part in the capture).
struct Node {
  NodeKind kind;
  int lane = 0;
  const char* name = "";
  KernelFactory make;
  std::optional<::openreg::sim::KernelCost> cost;
  std::optional<SeedSource> seed;
  void* dst = nullptr;
  const void* src = nullptr;
  std::size_t bytes = 0;
  std::size_t record = 0;
  std::shared_ptr<void> keep;
};

//! A byte range of device memory that captured work reads or writes, as the race checker saw it at the
//! capture (a replay reports them again, Note [Graphs in the race checker] in sanitizer/Sanitizer.cpp).
struct Access {
  int device;
  std::uint64_t begin;
  std::uint64_t end;
  bool write;
};

//! What a finished capture hands to its graph: the nodes in issue order, the lanes' streams (lane 0
//! is the stream the capture began on) and, with the race checker on, the memory the work accesses.
struct Captured {
  std::vector<Node> nodes;
  std::vector<OpenRegStream> lanes;
  std::vector<Access> accesses;
};

class Session;

//! Whether any capture is underway in the process (one atomic load).
inline std::atomic<int>& active_captures() {
  static std::atomic<int> count{0};
  return count;
}
inline bool capture_underway() {
  // Acquire: pairs with the release increment in begin(), so a thread that sees the count sees the
  // capture's registration.
  return active_captures().load(std::memory_order_acquire) > 0;
}

//! Starts capturing on `origin` (the stream current when the graph's capture began). Throws if the
//! stream already captures. `id` names the capture (allocations routed to its pool use it).
OPENREG_BACKEND_API std::shared_ptr<Session> begin(const OpenRegStream& origin, Mode mode, std::uint64_t id);
//! Ends the capture on `stream`, which must be the one it began on: checks that every forked stream was
//! joined back and returns what was recorded. Throws AcceleratorError (the capture ended) if it was
//! invalidated or a fork is unjoined.
OPENREG_BACKEND_API Captured end(const std::shared_ptr<Session>& session, const OpenRegStream& stream);
//! Whether the capture has ended (end() ends it unless it refused to: wrong stream or thread).
OPENREG_BACKEND_API bool has_ended(const Session& session);
//! The capture id `stream` records into, or 0.
OPENREG_BACKEND_API std::uint64_t capture_id_of(const ::openreg::sim::Stream* stream);
//! Whether `stream` captures (torch.openreg.is_current_stream_capturing for the current stream).
OPENREG_BACKEND_API bool is_capturing(const OpenRegStream& stream);

// Recording: each returns false when `stream` does not capture (the caller runs the work as usual), and
// throws AcceleratorError when its capture was invalidated.
OPENREG_BACKEND_API bool record_kernel(const OpenRegStream& stream, const char* name, KernelFactory make,
                                       std::optional<::openreg::sim::KernelCost> cost,
                                       std::optional<SeedSource> seed);
OPENREG_BACKEND_API bool record_copy(const OpenRegStream& stream, void* dst, const void* src, std::size_t bytes,
                                     const char* name);
OPENREG_BACKEND_API bool record_keep(const OpenRegStream& stream, std::shared_ptr<void> keep);
//! The race checker saw work issued on `stream` access [begin, end) of `device`'s memory: kept with the
//! capture if the stream captures (false otherwise).
OPENREG_BACKEND_API bool note_access(const c10::Stream& stream, int device, std::uint64_t begin, std::uint64_t end,
                                     bool write);
//! An event record on a capturing stream: the event now stands for the captured point.
OPENREG_BACKEND_API bool record_event(const std::shared_ptr<::openreg::sim::Event>& event, const OpenRegStream& stream);
//! A wait on an event recorded in a capture (a fork when `stream` was not capturing, a dependency when
//! it was), or a capturing stream's wait on any event (CUDA's isolation error if it is not captured).
OPENREG_BACKEND_API bool wait_event(const std::shared_ptr<::openreg::sim::Event>& event, const OpenRegStream& stream);

// Checks, called before the operation; each throws AcceleratorError with CUDA's error and invalidates
// the capture concerned.
//! Synchronizing or querying `stream` (Stream.synchronize/query, .item(), .cpu(), blocking copies).
OPENREG_BACKEND_API void check_stream_wait(const OpenRegStream& stream, const char* what);
//! Synchronizing or querying an event.
OPENREG_BACKEND_API void check_event_wait(const ::openreg::sim::Event* event, const char* what);
//! Synchronizing a device: refused while a capture in global mode runs anywhere, or one in
//! thread-local or global mode runs on the calling thread (relaxed mode allows it).
OPENREG_BACKEND_API void check_device_sync(const char* what);
//! An operation capture cannot record (a collective, a host callback) issued on `stream`.
OPENREG_BACKEND_API void check_not_capturing(const OpenRegStream& stream, const char* what);

//! A captured graph made ready to replay (cudaGraphInstantiate's product): the forked lanes get streams
//! of their own from the device's pool, the records other lanes wait for get events, and kernel names
//! carry the graph's number (so errors and traces name the graph).
class OPENREG_BACKEND_API Executable {
 public:
  Executable(const Captured& captured, std::uint64_t graph_id);
  ~Executable();
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;

  //! Enqueues every captured node on `stream` (lane 0) and the lanes' streams, with the captured
  //! dependencies, after the previous launch; `seed_of(node)` gives a random kernel's seed. Returns
  //! without waiting. Not concurrently with itself (the graph serializes its replays).
  void launch(const OpenRegStream& stream, const std::function<std::uint64_t(const Node&)>& seed_of);
  //! Waits (untimed) until the last launch has run, ignoring its failures (they are reported where
  //! the program synchronizes). For the graph's reset, before its memory pool goes.
  void wait_idle() noexcept;
  //! The nodes and their dependencies in Graphviz's dot language (debug_dump).
  std::string dot() const;

 private:
  const Captured& captured_;
  std::vector<const char*> names_;  // per node: interned "<op> [graph N]"
  std::vector<OpenRegStream> lanes_;  // lane i >= 1 runs on lanes_[i - 1]
  std::vector<std::shared_ptr<::openreg::sim::Event>> records_;  // per node, for waited-on records
  std::shared_ptr<::openreg::sim::Event> last_launch_;
};

}  // namespace c10::openreg::capture
