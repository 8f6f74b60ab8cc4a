#include "backend/runtime/Trace.h"

#include <openreg/sim/trace.h>

#include <cstring>

namespace c10::openreg {
namespace {

namespace sim = ::openreg::sim;

// The names torch.openreg.trace writes as each item's category. A switch without a default, so a new
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

std::vector<TraceItem> items_of(const std::vector<sim::TraceRecord>& records) {
  std::vector<TraceItem> out;
  out.reserve(records.size());
  for (const sim::TraceRecord& r : records) {
    out.push_back(TraceItem{r.name, r.device, static_cast<std::int64_t>(r.stream), kind_name(r.kind), r.start_ns,
                            r.end_ns, r.bytes, r.correlation, r.enqueue_ns});
  }
  return out;
}

}  // namespace

static_assert(kNoTraceCorrelation == sim::kNoCorrelation);

bool TraceItem::is_copy() const noexcept {
  return std::strcmp(kind, kind_name(sim::ItemKind::kCopy)) == 0;
}

void trace_start() {
  sim::trace_start();
}

std::vector<TraceItem> trace_stop() {
  return items_of(sim::trace_stop());
}

TraceRecording::TraceRecording() : session_(std::make_unique<sim::TraceSession>()) {}

TraceRecording::~TraceRecording() = default;

std::vector<TraceItem> TraceRecording::stop() {
  return items_of(session_->stop());
}

std::int64_t trace_clock_ns() noexcept {
  return sim::now_ns();
}

void set_trace_correlation(std::uint64_t tag) noexcept {
  sim::set_trace_correlation(tag);
}

std::uint64_t trace_correlation() noexcept {
  return sim::trace_correlation();
}

}  // namespace c10::openreg
