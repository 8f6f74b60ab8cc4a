// Tracing: off by default, records every kind of item with its stream and device when on.

#include "openreg/sim/trace.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "openreg/sim/device.h"
#include "openreg/sim/event.h"
#include "openreg/sim/runtime.h"
#include "sim_test_util.h"

namespace openreg::sim {
namespace {

TEST(Trace, RecordsItemsOnlyWhileEnabled) {
  Runtime runtime(test::make_config(2, 2));
  Device& dev = runtime.device(1);
  auto s = dev.create_stream();
  EXPECT_FALSE(trace_enabled());
  s->launch("before", [] {});
  s->synchronize();
  trace_start();
  EXPECT_TRUE(trace_enabled());
  std::vector<char> host(64), back(64);
  void* d = dev.memory().allocate(64);
  auto e = Event::create();
  s->launch("kernel_a", [] {});
  s->copy(d, host.data(), 64, "upload");
  s->host_callback("callback", [] {});
  s->record(e);
  s->launch(intern_name(std::string("kernel_b").c_str()), [] {});
  s->synchronize();
  std::vector<TraceRecord> records = trace_stop();
  EXPECT_FALSE(trace_enabled());
  std::vector<std::string> names;
  for (const TraceRecord& r : records) {
    names.push_back(r.name);
    EXPECT_EQ(r.device, 1);
    EXPECT_EQ(r.stream, s->id());
    EXPECT_LE(r.start_ns, r.end_ns);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"kernel_a", "upload", "callback", "event record", "kernel_b"}));
  EXPECT_EQ(records[1].kind, ItemKind::kCopy);
  EXPECT_EQ(records[1].bytes, 64u);
  EXPECT_EQ(records[2].kind, ItemKind::kHostCallback);
  EXPECT_EQ(records[3].kind, ItemKind::kEventRecord);
  s->launch("after", [] {});
  s->synchronize();
  trace_start();
  EXPECT_TRUE(trace_stop().empty());
  dev.memory().free(d);
}

TEST(Trace, NowIsMonotonic) {
  std::int64_t a = now_ns();
  std::int64_t b = now_ns();
  EXPECT_LE(a, b);
}

}  // namespace
}  // namespace openreg::sim
