// Host-completed event records (Event::record_on_host): streams wait on them without holding a worker,
// the host completes them from any thread, failures reach the event and every waiting stream, and a
// dropped record never leaves a stream waiting forever.

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "openreg/sim/device.h"
#include "openreg/sim/error.h"
#include "openreg/sim/event.h"
#include "openreg/sim/runtime.h"
#include "openreg/sim/stream.h"
#include "openreg/sim/trace.h"
#include "sim_test_util.h"

namespace openreg::sim {
namespace {

using test::eventually;
using test::contains;
using test::failure_of;
using test::make_config;

class HostRecordTest : public ::testing::TestWithParam<int> {
 protected:
  Runtime runtime{make_config(2, GetParam())};
  Device& dev0 = runtime.device(0);
  Device& dev1 = runtime.device(1);
};

INSTANTIATE_TEST_SUITE_P(ComputeThreads, HostRecordTest, ::testing::Values(1, 2, 4));

TEST_P(HostRecordTest, PendingUntilTheHostCompletesIt) {
  auto e = Event::create();
  auto rec = e->record_on_host(0);
  EXPECT_TRUE(e->recorded());
  EXPECT_EQ(e->device_index(), 0);
  EXPECT_FALSE(e->query());
  EXPECT_FALSE(rec->completed());
  EXPECT_TRUE(rec->complete());
  EXPECT_TRUE(rec->completed());
  EXPECT_TRUE(e->query());
  e->synchronize();
  EXPECT_FALSE(rec->complete());  // once only
  EXPECT_FALSE(rec->fail("late"));
  EXPECT_TRUE(e->query());  // a late fail() changes nothing
}

TEST_P(HostRecordTest, WaitingStreamParksWithoutHoldingAWorker) {
  auto waiting = dev0.create_stream();
  auto e = Event::create();
  auto rec = e->record_on_host(0);
  std::atomic<bool> after{false};
  waiting->wait(e);
  waiting->launch("after", [&] { after.store(true, std::memory_order_release); });
  // Every worker stays free: with one compute thread, another stream still runs.
  auto other = dev0.create_stream();
  std::atomic<int> ran{0};
  for (int i = 0; i < 8; ++i) other->launch("other", [&] { ran.fetch_add(1, std::memory_order_relaxed); });
  other->synchronize();
  EXPECT_EQ(ran.load(), 8);
  EXPECT_FALSE(waiting->query());
  EXPECT_FALSE(after.load(std::memory_order_acquire));
  std::thread host([&] { EXPECT_TRUE(rec->complete()); });
  waiting->synchronize();
  host.join();
  EXPECT_TRUE(after.load(std::memory_order_acquire));
}

TEST_P(HostRecordTest, WaitIssuedAfterCompletionDoesNotPark) {
  auto s = dev1.create_stream();
  auto e = Event::create();
  e->record_on_host(1)->complete();
  s->wait(e);
  s->synchronize();
  EXPECT_TRUE(s->query());
}

TEST_P(HostRecordTest, ALaterStreamRecordDoesNotReleaseAnEarlierWait) {
  // The wait is tied to the host record current when it was issued (Note [Event records]).
  auto waiting = dev0.create_stream();
  auto recorder = dev1.create_stream();
  auto e = Event::create();
  auto rec = e->record_on_host(0);
  waiting->wait(e);
  recorder->record(e);
  recorder->synchronize();
  EXPECT_TRUE(e->query());  // the most recent record completed
  EXPECT_FALSE(waiting->query());
  rec->complete();
  waiting->synchronize();
}

TEST_P(HostRecordTest, FailureReachesEventAndEveryWaitingStream) {
  auto a = dev0.create_stream();
  auto b = dev1.create_stream();
  auto e = Event::create();
  auto rec = e->record_on_host(0);
  a->wait(e);
  b->wait(e);
  std::atomic<int> after{0};
  a->launch("after", [&] { after.fetch_add(1, std::memory_order_relaxed); });
  EXPECT_TRUE(rec->fail("allreduce failed: peer gone"));
  EXPECT_TRUE(contains(failure_of([&] { a->synchronize(); }), "allreduce failed: peer gone"));
  EXPECT_TRUE(contains(failure_of([&] { b->synchronize(); }), "allreduce failed: peer gone"));
  EXPECT_EQ(after.load(), 1);  // later work still runs, as after a failed kernel
  EXPECT_TRUE(contains(failure_of([&] { e->synchronize(); }), "allreduce failed: peer gone"));
  EXPECT_TRUE(e->query());  // reported once
  a->synchronize();         // taken: the stream keeps working
}

TEST_P(HostRecordTest, DroppedRecordFailsInsteadOfHanging) {
  auto s = dev0.create_stream();
  auto e = Event::create();
  {
    auto rec = e->record_on_host(0);
    s->wait(e);
  }
  EXPECT_TRUE(contains(failure_of([&] { s->synchronize(); }), "abandoned"));
}

TEST_P(HostRecordTest, ConcurrentCompletersAndWaitersAllProceed) {
  // Many host threads complete records while streams on both devices park on them: each record is
  // completed exactly once and every wait is released (TSAN checks the hand-off).
  constexpr int kRecords = 64 / test::kSanitizerDivisor + 4;
  std::vector<std::shared_ptr<Event>> events;
  std::vector<std::shared_ptr<HostRecord>> recs;
  for (int i = 0; i < kRecords; ++i) {
    events.push_back(Event::create(i % 2 == 0));
    recs.push_back(events.back()->record_on_host(i % 2));
  }
  auto s0 = dev0.create_stream();
  auto s1 = dev1.create_stream();
  std::atomic<int> wins{0};
  std::vector<std::thread> hosts;
  for (int t = 0; t < 3; ++t) {
    hosts.emplace_back([&] {
      for (auto& r : recs) {
        if (r->complete()) wins.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  for (auto& e : events) {
    s0->wait(e);
    s1->wait(e);
  }
  s0->synchronize();
  s1->synchronize();
  for (auto& h : hosts) h.join();
  EXPECT_EQ(wins.load(), kRecords);
  for (auto& e : events) EXPECT_TRUE(e->query());
}

TEST_P(HostRecordTest, TimedHostRecordsGiveElapsedTime) {
  auto start = Event::create(true);
  auto end = Event::create(true);
  start->record_on_host(0)->complete();
  auto rec = end->record_on_host(0);
  EXPECT_EQ(test::code_of([&] { (void)start->elapsed_ms(*end); }), Errc::kNotReady);
  rec->complete();
  EXPECT_GE(start->elapsed_ms(*end), 0.0);
}

TEST_P(HostRecordTest, TracedSpanAppearsOnItsLane) {
  TraceSession session;
  auto e = Event::create();
  auto traced = e->record_on_host(1);
  traced->set_trace("allreduce", 7);
  traced->mark_started();
  traced->complete();
  e->record_on_host(1)->complete();  // untraced: nothing recorded
  auto records = session.stop();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_STREQ(records[0].name, "allreduce");
  EXPECT_EQ(records[0].device, 1);
  EXPECT_EQ(records[0].stream, 7);
  EXPECT_LE(records[0].start_ns, records[0].end_ns);
}

}  // namespace
}  // namespace openreg::sim
