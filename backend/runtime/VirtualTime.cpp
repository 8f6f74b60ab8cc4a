#include "backend/runtime/VirtualTime.h"

#include <c10/util/Exception.h>

#include <map>

#include <openreg/sim/config.h>
#include <openreg/sim/cost.h>
#include <openreg/sim/profile.h>
#include <openreg/sim/runtime.h>
#include <openreg/sim/timing_only.h>
#include <openreg/sim/virtual_time.h>

#include "backend/runtime/Device.h"
#include "backend/runtime/SimErrors.h"

namespace c10::openreg {

std::optional<ProfileSummary> device_profile() {
  const ::openreg::sim::DeviceProfile* p = detail::started_runtime().profile();
  if (p == nullptr) return std::nullopt;
  return ProfileSummary{p->name,
                        p->display_name,
                        p->sm_count,
                        p->l2_bytes,
                        p->memory_bytes,
                        p->tensor_flops[static_cast<int>(::openreg::sim::NumberFormat::kBf16)],
                        p->memory_bandwidth,
                        p->ranks_per_node,
                        p->launch_ns,
                        p->host_op_ns};
}

bool timing_only_execution() {
  return detail::started_runtime().config().execute == ::openreg::sim::ExecuteMode::kTiming;
}

std::size_t timing_only_moved_bytes() noexcept { return ::openreg::sim::kTimingOnlyMovedBytes; }
std::size_t timing_only_run_kernel_bytes() noexcept { return ::openreg::sim::kTimingOnlyRunKernelBytes; }

std::int64_t virtual_now_ns() { return detail::started_runtime().virtual_now_ns(); }

VirtualDeviceTime virtual_device_time(c10::DeviceIndex index) {
  ::openreg::sim::DeviceTimeStats s;
  translate_sim_errors([&] { s = detail::started_runtime().device_time_stats(index); });
  VirtualDeviceTime t;
  t.compute_busy_ns = s.compute_busy_ns;
  t.copy_busy_ns = s.copy_busy_ns;
  t.comm_busy_ns = s.comm_busy_ns;
  t.busy_ns = s.busy_ns;
  t.exposed_comm_ns = s.exposed_comm_ns;
  t.matmul_ns = s.matmul_ns;
  t.attention_ns = s.attention_ns;
  t.optimizer_ns = s.optimizer_ns;
  t.memory_bound_ns = s.memory_bound_ns;
  t.copy_alone_ns = s.copy_alone_ns;
  t.kernels = s.kernels;
  t.peak_ns = s.peak_ns;
  t.end_ns = s.end_ns;
  t.work_items = s.work_items;
  return t;
}

std::optional<CollectiveEstimate> modelled_collective(const std::string& kind, double bytes, int ranks, int nodes) {
  namespace sim = ::openreg::sim;
  static const std::map<std::string, sim::CollectiveKind> kinds = {
      {"all_reduce", sim::CollectiveKind::kAllReduce},         {"all_gather", sim::CollectiveKind::kAllGather},
      {"reduce_scatter", sim::CollectiveKind::kReduceScatter}, {"broadcast", sim::CollectiveKind::kBroadcast},
      {"reduce", sim::CollectiveKind::kReduce},                {"all_to_all", sim::CollectiveKind::kAllToAll},
      {"send_recv", sim::CollectiveKind::kSendRecv}};
  const auto it = kinds.find(kind);
  TORCH_CHECK_VALUE(it != kinds.end(), "openreg: unknown collective kind '", kind, "'");
  TORCH_CHECK_VALUE(ranks >= 1 && nodes >= 1 && nodes <= ranks && bytes >= 0, "openreg: a collective of ", bytes,
                    " bytes over ", ranks, " ranks on ", nodes, " nodes is not one");
  const sim::DeviceProfile* p = detail::started_runtime().profile();
  if (p == nullptr) return std::nullopt;
  const sim::CollectiveTime t = sim::collective_time(*p, {it->second, bytes, ranks, nodes});
  return CollectiveEstimate{t.ns, t.algorithm};
}

}  // namespace c10::openreg
