// Stress: several host threads enqueue >= 100k items on many streams of every device, with random
// cross-stream and cross-device event waits, copies, host callbacks and stream churn. Checks that no
// item is lost or reordered (per producer and stream sequence numbers) and that everything finishes
// before a deadline (a deadlock fails the test with the stuck streams listed, instead of hanging).

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "openreg/sim/device.h"
#include "openreg/sim/event.h"
#include "openreg/sim/runtime.h"
#include "openreg/sim/stream.h"
#include "sim_test_util.h"

namespace openreg::sim {
namespace {

constexpr int kDevices = 3;
constexpr int kStreamsPerDevice = 4;
constexpr int kProducers = 4;
constexpr int kStreams = kDevices * kStreamsPerDevice;

class StressTest : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(ComputeThreads, StressTest, ::testing::Values(1, 2));

TEST_P(StressTest, NothingLostNothingReorderedNoDeadlock) {
  const int items_per_producer = 50000 / test::kSanitizerDivisor;
  // Leaked if the deadline passes: its destructor would wait for the stuck work forever.
  auto runtime = std::make_unique<Runtime>(test::make_config(kDevices, GetParam(), 64 << 20));
  std::vector<std::shared_ptr<Stream>> streams;
  for (int d = 0; d < kDevices; ++d) {
    for (int i = 0; i < kStreamsPerDevice; ++i) {
      streams.push_back(runtime->device(d).create_stream(i == 0 ? StreamPriority::kHigh : StreamPriority::kNormal));
    }
  }
  // last[p][s]: the last sequence number producer p's items saw run on stream s. Written only by
  // items of stream s, which never overlap, so plain ints suffice (TSAN checks that claim).
  std::vector<std::vector<long>> last(kProducers, std::vector<long>(kStreams, -1));
  std::vector<std::vector<long>> sent(kProducers, std::vector<long>(kStreams, 0));
  std::atomic<long> executed{0};
  std::atomic<long> reordered{0};
  std::atomic<long> enqueued{0};
  std::vector<void*> buffers;
  for (int d = 0; d < kDevices; ++d) buffers.push_back(runtime->device(d).memory().allocate(4096));

  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      std::mt19937 rng(1234 + p);
      std::vector<char> host(4096, static_cast<char>(p));
      for (int i = 0; i < items_per_producer; ++i) {
        const int s = static_cast<int>(rng() % kStreams);
        Stream& stream = *streams[s];
        const long seq = sent[p][s]++;
        auto check = [&, p, s, seq] {
          if (last[p][s] != seq - 1) reordered.fetch_add(1, std::memory_order_relaxed);
          last[p][s] = seq;
          executed.fetch_add(1, std::memory_order_relaxed);
        };
        switch (rng() % 16) {
          case 0: {  // cross-stream (often cross-device) dependency
            auto e = Event::create();
            streams[rng() % kStreams]->record(e);
            stream.wait(e);
            stream.launch("checked", check);
            break;
          }
          case 1:  // a copy in the stream, between checked items
            stream.copy(buffers[stream.device_index()], host.data(), 1024);
            stream.launch("checked", check);
            break;
          case 2:
            stream.host_callback("checked callback", check);
            break;
          case 3:
            if (i % 64 == 3) {  // stream churn on the side
              Device& dev = runtime->device(static_cast<int>(rng() % kDevices));
              auto tmp = dev.create_stream();
              tmp->launch("tmp", [] {});
              dev.destroy_stream(tmp->id());
            }
            stream.launch("checked", check);
            break;
          default:
            stream.launch("checked", check);
        }
        enqueued.fetch_add(1, std::memory_order_relaxed);
      }
      // The host buffer dies with this thread: its copies must be done first.
      for (auto& st : streams) st->synchronize();
    });
  }
  for (auto& t : producers) t.join();

  const bool finished = test::eventually([&] {
    for (auto& s : streams) {
      if (!s->query()) return false;
    }
    return true;
  });
  if (!finished) {
    std::ostringstream stuck;
    for (auto& s : streams) {
      if (s->completed_count() != s->enqueued_count()) {
        stuck << " openreg:" << s->device_index() << "/stream " << s->id() << " (" << s->completed_count() << " of "
              << s->enqueued_count() << " done)";
      }
    }
    runtime.release();  // see above
    FAIL() << "deadline passed with work pending (deadlock?):" << stuck.str();
  }
  EXPECT_EQ(executed.load(), enqueued.load());
  EXPECT_EQ(enqueued.load(), static_cast<long>(kProducers) * items_per_producer);
  EXPECT_EQ(reordered.load(), 0);
  for (int p = 0; p < kProducers; ++p) {
    for (int s = 0; s < kStreams; ++s) EXPECT_EQ(last[p][s], sent[p][s] - 1) << "producer " << p << " stream " << s;
  }
  for (int d = 0; d < kDevices; ++d) runtime->device(d).memory().free(buffers[d]);
}

}  // namespace
}  // namespace openreg::sim
