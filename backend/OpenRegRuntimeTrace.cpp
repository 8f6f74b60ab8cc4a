#include "backend/OpenRegRuntimeTrace.h"

#include <openreg/sim/trace.h>

namespace c10::openreg {
namespace {

namespace sim = ::openreg::sim;

// The names torch_openreg.trace writes as each item's category. A switch without a default, so a new
// ItemKind is a -Wswitch warning here rather than a number in the trace.
const char* kind_name(sim::ItemKind kind) {
  switch (kind) {
    case sim::ItemKind::kKernel:
      return "kernel";
    case sim::ItemKind::kCopy:
      return "copy";
    case sim::ItemKind::kHostCallback:
      return "host_callback";
    case sim::ItemKind::kEventRecord:
      return "event_record";
    case sim::ItemKind::kEventWait:
      return "event_wait";
  }
  return "unknown";
}

}  // namespace

void trace_start() {
  sim::trace_start();
}

std::vector<TraceItem> trace_stop() {
  const std::vector<sim::TraceRecord> records = sim::trace_stop();
  std::vector<TraceItem> out;
  out.reserve(records.size());
  for (const sim::TraceRecord& r : records) {
    out.push_back(TraceItem{r.name, r.device, static_cast<std::int64_t>(r.stream), kind_name(r.kind), r.start_ns,
                            r.end_ns, r.bytes});
  }
  return out;
}

}  // namespace c10::openreg
