// Trace sessions: overlapping consumers of the one recorder each see exactly what ran while they were
// open, and every record carries the correlation tag its enqueuing thread had set.

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "openreg/sim/device.h"
#include "openreg/sim/event.h"
#include "openreg/sim/runtime.h"
#include "openreg/sim/trace.h"
#include "sim_test_util.h"

namespace openreg::sim {
namespace {

std::vector<std::string> names_of(const std::vector<TraceRecord>& records) {
  std::vector<std::string> names;
  for (const TraceRecord& r : records) names.push_back(r.name);
  return names;
}

TEST(TraceSession, OverlappingSessionsSeeTheirOwnWindow) {
  Runtime runtime(test::make_config(1, 2));
  auto s = runtime.device(0).create_stream();
  auto outer = std::make_unique<TraceSession>();
  s->launch("a", [] {});
  s->synchronize();
  auto inner = std::make_unique<TraceSession>();
  s->launch("b", [] {});
  s->synchronize();
  EXPECT_EQ(names_of(inner->stop()), (std::vector<std::string>{"b"}));
  EXPECT_TRUE(trace_enabled());  // the outer session is still open
  s->launch("c", [] {});
  s->synchronize();
  EXPECT_EQ(names_of(outer->stop()), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_FALSE(trace_enabled());
  EXPECT_TRUE(inner->stop().empty());  // a second stop returns nothing
}

TEST(TraceSession, DefaultSessionIsIndependentOfOthers) {
  Runtime runtime(test::make_config(1, 2));
  auto s = runtime.device(0).create_stream();
  TraceSession mine;
  trace_start();
  s->launch("x", [] {});
  s->synchronize();
  EXPECT_EQ(names_of(trace_stop()), (std::vector<std::string>{"x"}));
  trace_start();  // a restart drops nothing of the other session
  s->launch("y", [] {});
  s->synchronize();
  EXPECT_EQ(names_of(trace_stop()), (std::vector<std::string>{"y"}));
  EXPECT_EQ(names_of(mine.stop()), (std::vector<std::string>{"x", "y"}));
}

TEST(TraceSession, SessionOpenedLaterSkipsOlderRecords) {
  Runtime runtime(test::make_config(1, 2));
  auto s = runtime.device(0).create_stream();
  TraceSession first;
  s->launch("old", [] {});
  s->synchronize();
  TraceSession second;
  s->launch("new", [] {});
  s->synchronize();
  EXPECT_EQ(names_of(first.stop()), (std::vector<std::string>{"old", "new"}));
  EXPECT_EQ(names_of(second.stop()), (std::vector<std::string>{"new"}));
}

TEST(TraceSession, RecordsCarryTheEnqueuersCorrelationTag) {
  Runtime runtime(test::make_config(1, 2));
  Device& dev = runtime.device(0);
  auto s = dev.create_stream();
  std::vector<char> host(32);
  void* d = dev.memory().allocate(32);
  TraceSession session;
  set_trace_correlation(41);
  s->launch("k41", [] {});
  set_trace_correlation(42);
  s->copy(d, host.data(), 32, "copy42");
  s->host_callback("cb42", [] {});
  // Another thread's tag is its own: it does not see this thread's 42.
  std::thread other([&] {
    EXPECT_EQ(trace_correlation(), kNoCorrelation);
    set_trace_correlation(7);
    s->launch("k7", [] {});
  });
  other.join();
  set_trace_correlation(kNoCorrelation);
  s->launch("untagged", [] {});
  s->synchronize();
  std::vector<TraceRecord> records = session.stop();
  ASSERT_EQ(names_of(records), (std::vector<std::string>{"k41", "copy42", "cb42", "k7", "untagged"}));
  EXPECT_EQ(records[0].correlation, 41u);
  EXPECT_EQ(records[1].correlation, 42u);
  EXPECT_EQ(records[1].bytes, 32u);
  EXPECT_EQ(records[2].correlation, 42u);
  EXPECT_EQ(records[3].correlation, 7u);
  EXPECT_EQ(records[4].correlation, kNoCorrelation);
  for (const TraceRecord& r : records) {
    EXPECT_GT(r.enqueue_ns, 0);  // enqueued while the session was open
    EXPECT_LE(r.enqueue_ns, r.start_ns);
  }
  dev.memory().free(d);
}

TEST(TraceSession, EventWaitsAreRecordedParkedOrNot) {
  Runtime runtime(test::make_config(1, 2));
  Device& dev = runtime.device(0);
  auto producer = dev.create_stream();
  auto consumer = dev.create_stream();
  auto done = Event::create();
  std::atomic<bool> release{false};
  TraceSession session;
  set_trace_correlation(5);
  producer->launch("slow", [&] {
    while (!release.load(std::memory_order_acquire)) std::this_thread::yield();
  });
  producer->record(done);
  consumer->wait(done);  // parks: the producer is held until `release`
  consumer->launch("after", [] {});
  consumer->wait(done);  // already complete by the time the consumer reaches it
  set_trace_correlation(kNoCorrelation);
  release.store(true, std::memory_order_release);
  consumer->synchronize();
  producer->synchronize();
  std::vector<TraceRecord> waits;
  for (const TraceRecord& r : session.stop()) {
    if (r.kind == ItemKind::kEventWait) waits.push_back(r);
  }
  ASSERT_EQ(waits.size(), 2u);
  for (const TraceRecord& w : waits) {
    EXPECT_EQ(w.stream, consumer->id());
    EXPECT_EQ(w.correlation, 5u);
    EXPECT_LE(w.start_ns, w.end_ns);
  }
}

}  // namespace
}  // namespace openreg::sim
