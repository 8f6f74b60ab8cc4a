#pragma once
// Stream race checker: vector clocks over streams and host threads, accesses tracked by device
// byte ranges. Torch-free so it is unit-testable on its own; the backend hooks feed it.
//
// Note [Stream race checker model]
// Every actor (a stream (device, id) or a host thread) owns a vector clock. An op issued by host
// thread H on stream S first joins H's clock into S (host program order: whatever H observed before
// issuing is ordered before the op), then ticks S; the access is stamped (S, S[S]). Event record
// snapshots S's clock, event wait joins the snapshot into the waiting stream, and host
// synchronizations (stream/event/device synchronize, blocking copies) join the stream's clock into
// the host thread. A prior access (A, e) happens-before the current one on S iff S.clock[A] >= e.
// Accesses are checked when the op is ISSUED, so a report never depends on timing.
// Accesses are keyed by (device, byte address), not by tensor: a block reused by the caching
// allocator carries the history of its previous owner, minus what the allocator's own ordering
// covers (free_block), so a missing record_stream shows up as a race on the reused bytes.
// Pinned host memory is one more "device" (kPinnedHost): copies that move its bytes access it on their
// stream, and the host thread accesses it itself (host_access_runs: reads and writes of a CPU tensor in
// pinned memory, ordered by the host thread's own clock only). Note [Host access to pinned memory] in
// Sanitizer.cpp says where the host's accesses come from.
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <utility>
#include <string>
#include <vector>

#include "backend/Export.h"

namespace openreg::sanitizer {

// Where an access was issued (e.g. a captured Python stack); symbolized only when a race is reported.
struct IssueContext {
  virtual ~IssueContext() = default;
  virtual std::string describe() const = 0;
};

struct StreamId {
  int device = 0;
  int64_t id = 0;
  auto operator<=>(const StreamId&) const = default;
};
// StreamId::id of a device's collective lane: the actor that runs its collectives (as a communicator's
// stream runs NCCL's), in issue order.
inline constexpr int64_t kCollectiveLane = INT64_MIN;

// RaceChecker's `device` of pinned host memory (addresses are host addresses).
inline constexpr int kPinnedHost = -1;

enum class AccessKind { Read, Write };

// The tensor an access is of, as a report names it ("Float[4, 4]"); kept as a few numbers and formatted
// only when a race is reported. Built from text (tests, callers without a tensor) or dtype and sizes.
struct TensorDesc {
  static constexpr int kMaxDims = 6;  // more are shown as "..."
  TensorDesc() = default;
  TensorDesc(const char* text) : text(text) {}  // NOLINT(google-explicit-constructor): a literal reads best
  TensorDesc(std::string text) : text(std::move(text)) {}  // NOLINT(google-explicit-constructor)
  std::string text;              // used when set
  const char* dtype = nullptr;   // a static name (c10::toString(ScalarType))
  int dim = 0;
  int64_t sizes[kMaxDims] = {};
  std::string str() const;
};

// What the caller knows about one access of an op. Cheap to build on every op: the tensor's
// description and the issue context are only turned into text when a race is reported.
struct AccessInfo {
  const char* op = "";  // interned or a literal: it outlives the checker (e.g. "aten::add.out")
  TensorDesc tensor;
  std::shared_ptr<const IssueContext> context;  // may be null
};

// Bytes [begin, end) of one device.
struct Range {
  uint64_t begin = 0, end = 0;
};

struct RaceReport {
  std::string message;
};

// Thrown (in Raise mode) by the access that completes a race; message names both accesses.
class StreamRaceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class OPENREG_BACKEND_API RaceChecker {
 public:
  enum class Mode { Raise, Record };
  explicit RaceChecker(Mode mode = Mode::Raise) : mode_(mode) {}

  // One op's access of bytes [begin, end) on `device`, issued by host thread `host` on `stream`.
  // Accesses of one op need no grouping: a stream is always ordered with itself. In Raise mode a race
  // throws StreamRaceError and leaves the history as it was; the message is built (and the contexts
  // described) after the checker's lock is released, so describe() may take other locks (the GIL).
  void access(uint64_t host, StreamId stream, int device, uint64_t begin, uint64_t end,
              AccessKind kind, const AccessInfo& info);
  // The same access of exactly the bytes in `runs` (sorted, disjoint, non-empty): a strided view's,
  // so that views that interleave (x[::2] and x[1::2]) do not conflict. The report names the span.
  void access_runs(uint64_t host, StreamId stream, int device, const Range* runs, size_t n_runs, AccessKind kind,
              const AccessInfo& info);
  // Host thread `host` itself accesses the bytes in `runs` of `device` (kPinnedHost: a CPU op on a tensor
  // in pinned memory). Ordered after a stream's access only through the host's synchronizations.
  void host_access_runs(uint64_t host, int device, const Range* runs, size_t n_runs, AccessKind kind,
                        const AccessInfo& info);
  // Whether some stream's access of `device`'s memory is not yet ordered before host thread `host`
  // (a walk over the device's history: meant for the small pinned-memory history).
  bool has_unordered_for_host(uint64_t host, int device) const;
  // [begin, end) of `device` was freed by an owner that guarantees all work on it completed (the pinned
  // host allocator frees a block only after the copies that use it ran): its history is dropped.
  void forget(int device, uint64_t begin, uint64_t end);

  void record_event(uint64_t event, StreamId stream);
  void wait_event(uint64_t event, StreamId stream);   // no-op for a never-recorded event (as CUDA)
  void wait_stream(StreamId waiter, StreamId waited);  // record + wait on a fresh event
  void synchronize_stream(uint64_t host, StreamId stream);
  void synchronize_event(uint64_t host, uint64_t event);  // also a query that returned true
  void synchronize_device(uint64_t host, int device);  // every stream of `device` seen so far
  // Host thread `host` freed [begin, end): it was allocated on `alloc_stream` and record_stream'd on
  // `recorded`. The allocator hands it out again only on `alloc_stream` (stream order) or after events
  // recorded now on `recorded` completed, and everything the freeing host thread had observed is done
  // too; history covered by that is dropped, the rest (a read on a stream that was not recorded) stays,
  // so the next owner's access of those bytes is reported.
  void free_block(uint64_t host, int device, uint64_t begin, uint64_t end, StreamId alloc_stream,
                  const std::vector<StreamId>& recorded);

  std::vector<StreamId> streams() const;  // every stream seen so far
  std::vector<RaceReport> reports() const;
  size_t report_count() const;

 private:
  using Clock = std::vector<uint64_t>;  // indexed by actor index
  // What a report says about an access: built once per access, shared by every segment it covers.
  struct Record {
    AccessInfo info;
    uint64_t begin = 0, end = 0;  // the access's whole span, for the report
  };
  struct Stamp {
    size_t actor = 0;
    uint64_t epoch = 0;
    std::shared_ptr<const Record> record;
  };
  struct Segment {
    uint64_t end = 0;
    bool has_write = false;
    Stamp write;
    std::vector<Stamp> reads;  // at most one per actor (a later read covers an earlier one)
  };
  struct Actor {
    std::string name;
    Clock clock;
    bool host = false;
  };

  size_t stream_actor(StreamId s);
  size_t host_actor(uint64_t host);
  static void join(Clock& into, const Clock& from);
  // Joins actor `from`'s clock into actor `into`'s. Both are indices resolved by the caller first:
  // resolving an actor may grow actors_ and move every clock.
  void join_actor(size_t into, size_t from);
  // Joins the clock `event`'s last record captured into actor `into`'s (nothing if never recorded).
  void join_event(size_t into, uint64_t event);
  static bool ordered(const Clock& c, const Stamp& prior) {
    return prior.actor < c.size() && c[prior.actor] >= prior.epoch;
  }
  // Ordered for an op issued by a host thread (clock `h`) on a stream (clock `s`): the op's clock is
  // their join, read here without building it.
  static bool ordered(const Clock& s, const Clock& h, const Stamp& prior) {
    return ordered(s, prior) || ordered(h, prior);
  }
  static void split_at(std::map<uint64_t, Segment>& segs, uint64_t at);
  static void stamp(std::map<uint64_t, Segment>& segs, Range run, AccessKind kind, const Stamp& now);
  // access_runs and host_access_runs: `stream` null means the host thread accesses memory itself.
  void access_impl(uint64_t host, const StreamId* stream, int device, const Range* runs, size_t n_runs,
                   AccessKind kind, const AccessInfo& info);
  struct Race {
    Stamp prior, now;
    AccessKind prior_kind, now_kind;
    std::string prior_actor, now_actor;
    int device;
    bool host;  // one side is a host thread's own access
  };
  static std::string describe(const Stamp& s, const std::string& actor, AccessKind kind, int device);
  static std::string message(const Race& r);

  Mode mode_;
  // One lock over the whole state: a hook's critical section is a few map operations (the tensor
  // description, the issue context and the access's record are built before it is taken, and race
  // messages after it is released), and vector clocks need a consistent view of every actor.
  mutable std::mutex mu_;
  std::vector<Actor> actors_;
  std::map<StreamId, size_t> streams_;
  std::map<uint64_t, size_t> hosts_;
  std::map<uint64_t, Clock> events_;
  std::map<int, std::map<uint64_t, Segment>> memory_;  // device -> start -> non-overlapping segment
  std::vector<RaceReport> reports_;  // guarded by mu_; messages are built outside it
};

}  // namespace openreg::sanitizer
