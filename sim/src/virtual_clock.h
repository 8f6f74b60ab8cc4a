#pragma once
// VirtualClock: the runtime's virtual time when a device profile is set (Note [Virtual time] in
// virtual_clock.cpp). Owned by the Runtime; absent (null) without a profile, so the host-time paths
// pay one pointer test.

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "openreg/sim/cost.h"
#include "openreg/sim/profile.h"
#include "openreg/sim/virtual_time.h"

namespace openreg::sim {

class EventRecord;
struct WorkItem;

//! A stream's place on its device's virtual timeline; guarded by its device timeline's mutex.
struct StreamTimeline {
  std::int64_t tail = 0;            //!< virtual end of the last item issued on it (absolute ns)
  std::vector<std::int64_t> ends;   //!< ring of the last launch_queue_depth items' ends (Note [Virtual time])
  std::uint64_t issued = 0;         //!< items placed on the timeline
};

class VirtualClock : public std::enable_shared_from_this<VirtualClock> {
 public:
  VirtualClock(std::shared_ptr<const DeviceProfile> profile, HostTimeMode host_time, int devices,
               std::uint64_t launch_queue_depth);
  ~VirtualClock();

  const DeviceProfile& profile() const noexcept { return *profile_; }
  //! Absolute steady-clock ns that virtual time 0 maps to (traces show origin + virtual time).
  std::int64_t origin_ns() const noexcept { return origin_; }

  //! Places `item` (filled, not yet pushed) on `device`'s timeline after `stream`'s previous item, at
  //! the issuing thread's virtual time, and advances that thread's clock: sets item.vstart/vend, and
  //! a record item's record virtual time. `cost`: a kernel's, or null. `from_device`: issued by a
  //! kernel or host callback (its clock is the issuing item's end, not a host thread's).
  void place(int device, StreamTimeline& stream, WorkItem& item, const KernelCost* cost, bool from_device);

  //! A collective runs on `device` over [start, end) (absolute virtual ns; Note [Collective cost model]
  //! in cost_model.cpp): its communication time, and the kernels placed over it from now on run the
  //! profile's comm_compute_slowdown slower.
  void place_communication(int device, std::int64_t start, std::int64_t end);

  //! The calling host thread waited for `stream` (synchronize, a query that saw it done).
  void host_waited(int device, const StreamTimeline& stream);
  //! ... for everything issued on `device`.
  void host_waited_device(int device);
  //! ... for a record (Event::synchronize, a query that saw it done).
  void host_waited_record(const EventRecord& record);

  //! The calling thread's virtual time (ns since the runtime started).
  std::int64_t host_now();
  //! A graph launch begins / ends on the calling thread (GraphLaunchScope).
  void begin_graph_launch();
  void end_graph_launch();
  DeviceTimeStats stats(int device);

 private:
  struct DeviceTimeline;
  struct HostClock;
  HostClock& host();
  void jump_to(std::int64_t t);       // the calling thread waited until virtual time t
  void reached(std::int64_t t) noexcept;  // some thread's clock reached t (new threads start there)

  std::shared_ptr<const DeviceProfile> profile_;
  HostTimeMode host_time_;
  std::uint64_t depth_;
  std::int64_t origin_;
  std::uint64_t generation_;  // tells a thread's clock of this runtime from one of an earlier runtime
  // Relaxed: only where a new thread's clock starts, which orders nothing.
  std::atomic<std::int64_t> latest_;
  std::vector<std::unique_ptr<DeviceTimeline>> devices_;
};

//! The end of the item the calling device thread is running, or -1 (for device-issued items).
std::int64_t& running_item_virtual_end() noexcept;

}  // namespace openreg::sim
