// Bounded launch queue (issue 8): a full stream makes the issuing host thread wait until the device
// catches up, without losing or reordering items, and never deadlocks work issued from the device.
// See Note [Bounded launch queue].

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "openreg/sim/device.h"
#include "openreg/sim/event.h"
#include "openreg/sim/runtime.h"
#include "openreg/sim/stream.h"
#include "sim_test_util.h"

namespace openreg::sim {
namespace {

using test::Gate;
using test::make_config;

Config with_depth(int devices, int threads, std::uint64_t depth) {
  Config c = make_config(devices, threads);
  c.launch_queue_depth = depth;
  return c;
}

TEST(LaunchQueue, ProducerWaitsWhenFullAndResumesWhenTheDeviceDrains) {
  constexpr int kDepth = 4;
  Runtime runtime(with_depth(1, 1, kDepth));
  auto s = runtime.device(0).create_stream();
  Gate gate;
  s->launch("gate", [&] { EXPECT_TRUE(gate.wait()); });  // item 1, held
  std::atomic<int> issued{0};
  std::vector<int> ran;  // written by the stream's items only, which run one at a time
  std::thread producer([&] {
    for (int i = 0; i < 10; ++i) {
      s->launch("item", [&ran, i] { ran.push_back(i); });
      issued.fetch_add(1);
    }
  });
  // Items 2..4 fit; the 5th launch waits for the gate item to complete.
  ASSERT_TRUE(test::eventually([&] { return issued.load() == kDepth - 1; }));
  // It stays blocked while the device makes no progress (a bounded look, not a timing assertion).
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(issued.load(), kDepth - 1);
  EXPECT_EQ(s->completed_count(), 0u);
  gate.open();
  producer.join();
  s->synchronize();
  EXPECT_EQ(issued.load(), 10);
  ASSERT_EQ(ran.size(), 10u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(ran[i], i);
}

// A producer that finds the queue full sleeps until the stream has drained to half, then refills it
// without waiting: one wake-up per half queue, not one per completed item (Note [Bounded launch queue]).
TEST(LaunchQueue, AProducerHeldByAFullQueueRefillsOnceItHasDrainedToHalf) {
  constexpr int kDepth = 8;
  constexpr int kRefilled = kDepth / 2 + 1;  // completions that bring ticket 9's queue to half
  Runtime runtime(with_depth(1, 1, kDepth));
  auto s = runtime.device(0).create_stream();
  // Item i completes once `released` exceeds i: the test completes items one at a time.
  std::atomic<int> released{0};
  auto item = [&released](int i) {
    return [&released, i] { EXPECT_TRUE(test::eventually([&] { return released.load() > i; })); };
  };
  for (int i = 0; i < kDepth; ++i) s->launch("held", item(i));  // full, nobody waited
  std::atomic<int> issued{0};
  std::thread producer([&] {
    for (int i = kDepth; i < 3 * kDepth; ++i) {
      s->launch("refill", item(i));
      issued.fetch_add(1);
    }
  });
  // Bounded looks, not timing assertions: a producer released early would have issued by then.
  auto stays = [&](int expected) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return issued.load() == expected;
  };
  EXPECT_TRUE(stays(0));
  for (int done = 1; done < kRefilled; ++done) {
    released.store(done);
    ASSERT_TRUE(test::eventually([&] { return s->completed_count() == static_cast<std::uint64_t>(done); }));
    EXPECT_TRUE(stays(0)) << "the producer went on after " << done << " of " << kDepth << " items completed";
  }
  released.store(kRefilled);
  // Half drained: it refills the queue to the bound in one go (tickets 9..13 against 5 completed).
  ASSERT_TRUE(test::eventually([&] { return issued.load() == kDepth / 2 + 1; }));
  EXPECT_TRUE(stays(kDepth / 2 + 1)) << "the producer overfilled the queue";
  released.store(3 * kDepth);
  producer.join();
  s->synchronize();
  EXPECT_EQ(issued.load(), 2 * kDepth);
}

TEST(LaunchQueue, ManyProducersLoseAndReorderNothing) {
  const int kProducers = 8;
  const int kPerProducer = 2000 / test::kSanitizerDivisor;
  Runtime runtime(with_depth(1, 2, 8));
  auto s = runtime.device(0).create_stream();
  std::vector<std::vector<int>> seen(kProducers);  // by the stream's items only, one at a time
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      for (int i = 0; i < kPerProducer; ++i) {
        if (i % 3 == 0) {
          s->host_callback("callback", [&seen, p, i] { seen[p].push_back(i); });
        } else {
          s->launch("kernel", [&seen, p, i] { seen[p].push_back(i); });
        }
      }
    });
  }
  for (auto& t : producers) t.join();
  s->synchronize();
  EXPECT_EQ(s->completed_count(), static_cast<std::uint64_t>(kProducers) * kPerProducer);
  for (int p = 0; p < kProducers; ++p) {
    ASSERT_EQ(seen[p].size(), static_cast<std::size_t>(kPerProducer)) << "producer " << p;
    for (int i = 0; i < kPerProducer; ++i) ASSERT_EQ(seen[p][i], i) << "producer " << p;
  }
}

// A callback that fills its own full stream would wait for itself; one that fills another gated
// stream would hold the only compute thread. Both bypass the bound.
TEST(LaunchQueue, EnqueueFromAHostCallbackOnAFullStreamDoesNotDeadlock) {
  constexpr int kDepth = 2;
  Runtime runtime(with_depth(1, 1, kDepth));
  Device& device = runtime.device(0);
  auto s = device.create_stream();
  auto t = device.create_stream();
  std::atomic<bool> holding{false};
  // The callback is s's only queued item and holds the device's only thread: waiting for room on s
  // would wait for itself, waiting for room on t would wait for a thread it holds.
  std::atomic<int> ran{0};
  s->host_callback("fills both", [&] {
    for (int i = 0; i < 10; ++i) s->launch("own", [&] { ran.fetch_add(1); });
    for (int i = 0; i < 10; ++i) t->launch("other", [&] { ran.fetch_add(1); });
    holding = true;
  });
  s->synchronize();
  EXPECT_TRUE(holding.load());
  t->synchronize();
  EXPECT_EQ(ran.load(), 20);
}

TEST(LaunchQueue, ItemEnqueuingOntoAFullGatedStreamOfAnotherDeviceDoesNotWait) {
  Runtime runtime(with_depth(2, 1, 2));
  auto full = runtime.device(1).create_stream();
  auto s = runtime.device(0).create_stream();
  Gate gate;
  full->launch("gate", [&] { EXPECT_TRUE(gate.wait()); });
  full->launch("filler", [] {});  // now at the bound
  std::atomic<int> ran{0};
  s->launch("enqueues", [&] {
    for (int i = 0; i < 10; ++i) full->launch("from a kernel", [&] { ran.fetch_add(1); });
  });
  s->synchronize();  // the kernel returned although `full` cannot drain until the gate opens
  EXPECT_EQ(ran.load(), 0);
  gate.open();
  full->synchronize();
  EXPECT_EQ(ran.load(), 10);
}

// An event wait on a full stream: the producer blocked on stream C is released by the record on A
// completing, and the wait only captures records already enqueued.
TEST(LaunchQueue, FullStreamParkedOnAnEventIsReleasedByTheRecord) {
  Runtime runtime(with_depth(1, 1, 3));
  Device& device = runtime.device(0);
  auto a = device.create_stream();
  auto c = device.create_stream();
  auto e = Event::create();
  Gate gate;
  a->host_callback("held", [&] { EXPECT_TRUE(gate.wait()); });
  a->record(e);
  c->wait(e);
  std::atomic<int> issued{0};
  std::thread producer([&] {
    for (int i = 0; i < 6; ++i) {
      c->launch("after wait", [] {});
      issued.fetch_add(1);
    }
  });
  ASSERT_TRUE(test::eventually([&] { return issued.load() == 2; }));  // wait + 2 = the bound
  gate.open();
  producer.join();
  c->synchronize();
  EXPECT_EQ(issued.load(), 6);
}

// Records and waits are markers: they never wait for room (an allocator records events under a lock
// that a host callback freeing memory may need).
TEST(LaunchQueue, RecordsAndWaitsOnAFullStreamDoNotWait) {
  Runtime runtime(with_depth(1, 1, 2));
  auto s = runtime.device(0).create_stream();
  auto e = Event::create();
  auto other = Event::create();
  auto t = runtime.device(0).create_stream();
  t->record(other);  // a completed record: waits on it are real items, satisfied at once
  other->synchronize();
  Gate gate;
  s->launch("gate", [&] { EXPECT_TRUE(gate.wait()); });
  s->launch("filler", [] {});  // at the bound
  for (int i = 0; i < 8; ++i) {
    s->record(e);  // would block here if bounded: the gate opens only below
    s->wait(other);
  }
  EXPECT_FALSE(e->query());
  EXPECT_EQ(s->enqueued_count(), 2u + 16u);
  gate.open();
  e->synchronize();
  s->synchronize();
}

}  // namespace
}  // namespace openreg::sim
