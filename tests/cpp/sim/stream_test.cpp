// Stream semantics: ordering, concurrency between streams, synchronize/query, host callbacks,
// priorities, fairness, failures and destroyed streams. Swept over compute threads where it matters.

#include "openreg/sim/stream.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "openreg/sim/device.h"
#include "openreg/sim/error.h"
#include "openreg/sim/event.h"
#include "openreg/sim/runtime.h"
#include "sim_test_util.h"

namespace openreg::sim {
namespace {

using test::Gate;
using test::make_config;

using test::code_of;
class StreamTest : public ::testing::TestWithParam<int> {
 protected:
  Runtime runtime{make_config(2, GetParam())};
  Device& device = runtime.device(0);
};

INSTANTIATE_TEST_SUITE_P(ComputeThreads, StreamTest, ::testing::Values(1, 2, 4));

TEST_P(StreamTest, ItemsRunInEnqueueOrder) {
  const int n = 20000 / test::kSanitizerDivisor;
  std::vector<int> seen;
  seen.reserve(n);
  auto stream = device.create_stream();
  // Plain vector, no lock: items of one stream never overlap, which is part of what is tested
  // (TSAN would flag overlapping appends).
  for (int i = 0; i < n; ++i) stream->launch("append", [&seen, i] { seen.push_back(i); });
  stream->synchronize();
  ASSERT_EQ(seen.size(), static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) ASSERT_EQ(seen[i], i);
  EXPECT_EQ(stream->enqueued_count(), static_cast<std::uint64_t>(n));
  EXPECT_EQ(stream->completed_count(), static_cast<std::uint64_t>(n));
}

TEST_P(StreamTest, ConcurrentProducersKeepTheirOwnOrder) {
  constexpr int kThreads = 4;
  const int per_thread = 5000 / test::kSanitizerDivisor;
  auto stream = device.create_stream();
  std::vector<int> last(kThreads, -1);
  std::atomic<int> out_of_order{0};
  std::vector<std::thread> producers;
  for (int t = 0; t < kThreads; ++t) {
    producers.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        stream->launch("produce", [&, t, i] {
          if (last[t] != i - 1) out_of_order.fetch_add(1);
          last[t] = i;
        });
      }
    });
  }
  for (auto& p : producers) p.join();
  stream->synchronize();
  EXPECT_EQ(out_of_order.load(), 0);
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(last[t], per_thread - 1);
}

// Needs at least two compute threads, so it has its own sweep.
class StreamConcurrencyTest : public StreamTest {};
INSTANTIATE_TEST_SUITE_P(ComputeThreads, StreamConcurrencyTest, ::testing::Values(2, 4));

TEST_P(StreamConcurrencyTest, TwoStreamsRunAtTheSameTime) {
  // Each item arrives, then waits for the other: this completes only if both are in flight together.
  std::atomic<int> arrived{0};
  std::atomic<int> met{0};
  auto item = [&] {
    arrived.fetch_add(1);
    if (test::eventually([&] { return arrived.load() == 2; })) met.fetch_add(1);
  };
  auto a = device.create_stream();
  auto b = device.create_stream();
  a->launch("rendezvous a", item);
  b->launch("rendezvous b", item);
  a->synchronize();
  b->synchronize();
  EXPECT_EQ(met.load(), 2) << "the two streams' items never ran concurrently";
}

TEST_P(StreamTest, SynchronizeWaitsAndQueryReportsProgress) {
  auto stream = device.create_stream();
  EXPECT_TRUE(stream->query());
  Gate gate;
  std::atomic<bool> ran_after{false};
  stream->launch("blocked", [&] { EXPECT_TRUE(gate.wait()); });
  stream->launch("after", [&] { ran_after = true; });
  EXPECT_FALSE(stream->query());
  EXPECT_FALSE(ran_after.load());
  gate.open();
  stream->synchronize();
  EXPECT_TRUE(ran_after.load());
  EXPECT_TRUE(stream->query());
  stream->synchronize();  // idle: returns at once
}

TEST_P(StreamTest, HostCallbacksRunInStreamOrder) {
  auto stream = device.create_stream();
  std::vector<std::string> log;
  stream->launch("k1", [&] { log.push_back("k1"); });
  stream->host_callback("cb", [&] { log.push_back("cb"); });
  stream->launch("k2", [&] { log.push_back("k2"); });
  stream->synchronize();
  EXPECT_EQ(log, (std::vector<std::string>{"k1", "cb", "k2"}));
}

TEST_P(StreamTest, DefaultStreamWorks) {
  std::atomic<int> n{0};
  for (int i = 0; i < 100; ++i) device.default_stream()->launch("inc", [&] { n.fetch_add(1); });
  device.default_stream()->synchronize();
  EXPECT_EQ(n.load(), 100);
  EXPECT_EQ(device.default_stream()->id(), kDefaultStreamId);
  EXPECT_EQ(device.default_stream()->device_index(), 0);
  EXPECT_EQ(&device.default_stream()->device(), &device);
}

TEST_P(StreamTest, FailingItemIsReportedOnceWithItsNameAndTheStreamKeepsWorking) {
  auto stream = device.create_stream();
  std::atomic<bool> later_ran{false};
  stream->launch("bad_kernel", [] { throw std::runtime_error("boom"); });
  stream->launch("good_kernel", [&] { later_ran = true; });
  EXPECT_EQ(test::failure_of([&] { stream->synchronize(); }),
            "work item 'bad_kernel' failed on openreg:0 stream " + std::to_string(stream->id()) + ": boom");
  EXPECT_TRUE(later_ran.load());
  EXPECT_NO_THROW(stream->synchronize());  // reported once
  EXPECT_TRUE(stream->query());
}

TEST_P(StreamTest, QueryReportsFailureOnce) {
  auto stream = device.create_stream();
  stream->launch("weird_kernel", [] { throw 42; });
  test::eventually([&] { return stream->completed_count() == 1; });
  const std::string message = test::failure_of([&] { stream->query(); });
  EXPECT_TRUE(test::contains(message, "'weird_kernel'")) << message;
  EXPECT_TRUE(test::contains(message, "unknown exception")) << message;
  EXPECT_TRUE(stream->query());
}

TEST_P(StreamTest, FailingHostCallbackIsReported) {
  auto stream = device.create_stream();
  stream->host_callback("bad_callback", [] { throw std::logic_error("nope"); });
  EXPECT_EQ(code_of([&] { stream->synchronize(); }), Errc::kWorkFailed);
}

TEST_P(StreamTest, SynchronizeFromItsOwnItemIsRejected) {
  auto stream = device.create_stream();
  stream->launch("self_sync", [&] { stream->synchronize(); });
  const std::string message = test::failure_of([&] { stream->synchronize(); });
  EXPECT_TRUE(test::contains(message, "would never return")) << message;
}

TEST_P(StreamTest, DestroyedStreamsAndUnknownIdsAreErrors) {
  auto stream = device.create_stream();
  const StreamId id = stream->id();
  std::atomic<int> ran{0};
  stream->launch("before destroy", [&] { ran.fetch_add(1); });
  device.destroy_stream(id);
  EXPECT_EQ(ran.load(), 1);  // destroy waits for the work
  EXPECT_EQ(code_of([&] { stream->launch("after destroy", [] {}); }), Errc::kInvalidStream);
  EXPECT_EQ(code_of([&] { stream->record(Event::create()); }), Errc::kInvalidStream);
  EXPECT_EQ(code_of([&] { device.stream(id); }), Errc::kInvalidStream);
  EXPECT_EQ(code_of([&] { device.destroy_stream(id); }), Errc::kInvalidStream);
  EXPECT_EQ(code_of([&] { device.stream(12345); }), Errc::kInvalidStream);
  EXPECT_EQ(code_of([&] { device.destroy_stream(kDefaultStreamId); }), Errc::kInvalidStream);
  // Ids are never reused.
  auto next = device.create_stream();
  EXPECT_GT(next->id(), id);
  EXPECT_EQ(device.stream(next->id()), next);
}

TEST_P(StreamTest, EmptyTasksAreInvalidArguments) {
  auto stream = device.create_stream();
  EXPECT_EQ(code_of([&] { stream->launch("empty", Task{}); }), Errc::kInvalidArgument);
  EXPECT_EQ(code_of([&] { stream->host_callback("empty", Task{}); }), Errc::kInvalidArgument);
  EXPECT_EQ(code_of([&] { stream->record(nullptr); }), Errc::kInvalidArgument);
  EXPECT_EQ(code_of([&] { stream->wait(nullptr); }), Errc::kInvalidArgument);
}

TEST_P(StreamTest, LargeCapturesAreBoxedAndReleasedAfterRunning) {
  auto stream = device.create_stream();
  auto token = std::make_shared<int>(7);
  std::array<char, 256> big{};
  big[0] = 'x';
  std::atomic<int> seen{0};
  stream->launch("big", [token, big, &seen] { seen = *token + (big[0] == 'x'); });
  stream->synchronize();
  EXPECT_EQ(seen.load(), 8);
  EXPECT_EQ(token.use_count(), 1) << "the item's captures must be released once it has run";
}

TEST(StreamPriority, HighPriorityStreamIsServedFirst) {
  Runtime runtime(make_config(1, 1));
  Device& device = runtime.device(0);
  auto blocker = device.create_stream();
  auto normal = device.create_stream(StreamPriority::kNormal);
  auto high = device.create_stream(StreamPriority::kHigh);
  EXPECT_EQ(high->priority(), StreamPriority::kHigh);
  Gate gate;
  std::atomic<bool> blocking{false};
  blocker->launch("hold the only thread", [&] {
    blocking = true;
    EXPECT_TRUE(gate.wait());
  });
  ASSERT_TRUE(test::eventually([&] { return blocking.load(); }));
  // Both become ready while the only compute thread is busy; normal first, to make it harder.
  std::vector<std::string> order;
  std::mutex mutex;
  normal->launch("normal", [&] { std::lock_guard l(mutex); order.push_back("normal"); });
  high->launch("high", [&] { std::lock_guard l(mutex); order.push_back("high"); });
  gate.open();
  device.synchronize();
  EXPECT_EQ(order, (std::vector<std::string>{"high", "normal"}));
}

// Several ready items on each side: every ready high-priority item runs before any normal one.
TEST(StreamPriority, AllReadyHighPriorityItemsRunBeforeNormalOnes) {
  Runtime runtime(make_config(1, 1));
  Device& device = runtime.device(0);
  auto blocker = device.create_stream();
  std::vector<std::shared_ptr<Stream>> normal, high;
  for (int i = 0; i < 3; ++i) {
    normal.push_back(device.create_stream(stream_priority_from_cuda(kLeastStreamPriority)));
    high.push_back(device.create_stream(stream_priority_from_cuda(kGreatestStreamPriority)));
  }
  Gate gate;
  std::atomic<bool> blocking{false};
  blocker->launch("hold the only thread", [&] {
    blocking = true;
    EXPECT_TRUE(gate.wait());
  });
  ASSERT_TRUE(test::eventually([&] { return blocking.load(); }));
  std::vector<char> order;  // written by items, which run one at a time on the only thread
  for (int round = 0; round < 4; ++round) {
    for (auto& s : normal) s->launch("normal", [&] { order.push_back('n'); });
    for (auto& s : high) s->launch("high", [&] { order.push_back('h'); });
  }
  gate.open();
  device.synchronize();
  ASSERT_EQ(order.size(), 24u);
  EXPECT_EQ(std::string(order.begin(), order.end()), std::string(12, 'h') + std::string(12, 'n'));
}

TEST(StreamPriority, CudaConventionMapping) {
  static_assert(kGreatestStreamPriority < kLeastStreamPriority, "lower number = higher priority");
  EXPECT_EQ(stream_priority_from_cuda(0), StreamPriority::kNormal);
  EXPECT_EQ(stream_priority_from_cuda(-1), StreamPriority::kHigh);
  EXPECT_EQ(stream_priority_from_cuda(-5), StreamPriority::kHigh);   // clamped, as CUDA does
  EXPECT_EQ(stream_priority_from_cuda(3), StreamPriority::kNormal);  // clamped
  EXPECT_EQ(cuda_stream_priority(StreamPriority::kHigh), -1);
  EXPECT_EQ(cuda_stream_priority(StreamPriority::kNormal), 0);
}

TEST(StreamFairness, ALongStreamDoesNotStarveAnother) {
  const int n = 10000 / test::kSanitizerDivisor;
  Config config = make_config(1, 1);
  config.launch_queue_depth = n + 1;  // the whole backlog is queued behind a gate this thread opens
  Runtime runtime(config);
  Device& device = runtime.device(0);
  auto busy = device.create_stream();
  auto other = device.create_stream();
  Gate gate;
  std::atomic<int> busy_done{0};
  busy->launch("gate", [&] { EXPECT_TRUE(gate.wait()); });
  for (int i = 0; i < n; ++i) busy->launch("busy", [&] { busy_done.fetch_add(1, std::memory_order_relaxed); });
  int busy_done_when_other_ran = -1;
  other->launch("other", [&] { busy_done_when_other_ran = busy_done.load(); });
  gate.open();
  device.synchronize();
  EXPECT_EQ(busy_done.load(), n);
  EXPECT_GE(busy_done_when_other_ran, 0);
  EXPECT_LT(busy_done_when_other_ran, n) << "the other stream waited for the whole backlog";
}

TEST(InternName, EqualStringsShareOnePointer) {
  std::string a = "aten::add";
  std::string b = "aten::add";
  const char* pa = intern_name(a.c_str());
  const char* pb = intern_name(b.c_str());
  EXPECT_EQ(pa, pb);
  EXPECT_STREQ(pa, "aten::add");
  EXPECT_NE(intern_name("aten::mul"), pa);
}

}  // namespace
}  // namespace openreg::sim
