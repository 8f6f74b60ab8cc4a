// Schedule fuzzing (Note [Schedule fuzzing]): OPENREG_SCHEDULE_FUZZ parsing, stream order and event
// order kept under every seed, synchronize waiting for delayed work, and a missing event wait
// turned into a visible reordering under most seeds.

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "openreg/sim/config.h"
#include "openreg/sim/device.h"
#include "openreg/sim/error.h"
#include "openreg/sim/event.h"
#include "openreg/sim/runtime.h"
#include "openreg/sim/stream.h"
#include "sim_test_util.h"

namespace openreg::sim {
namespace {

using test::make_config;

constexpr const char* kVar = "OPENREG_SCHEDULE_FUZZ";

class ScopedEnv {
 public:
  explicit ScopedEnv(const char* value) {
    if (const char* old = std::getenv(kVar)) saved_ = old;
    if (value) setenv(kVar, value, 1); else unsetenv(kVar);
  }
  ~ScopedEnv() {
    if (saved_) setenv(kVar, saved_->c_str(), 1); else unsetenv(kVar);
  }

 private:
  std::optional<std::string> saved_;
};

TEST(ScheduleFuzzConfig, UnsetOrEmptyIsOff) {
  {
    ScopedEnv env(nullptr);
    EXPECT_FALSE(Config::from_env().schedule_fuzz_seed.has_value());
  }
  ScopedEnv env("");
  EXPECT_FALSE(Config::from_env().schedule_fuzz_seed.has_value());
}

TEST(ScheduleFuzzConfig, ASeedTurnsItOn) {
  ScopedEnv env("42");
  EXPECT_EQ(Config::from_env().schedule_fuzz_seed, std::optional<std::uint64_t>(42));
  ScopedEnv zero("0");
  EXPECT_EQ(Config::from_env().schedule_fuzz_seed, std::optional<std::uint64_t>(0));
}

TEST(ScheduleFuzzConfig, BadValuesNameTheVariable) {
  for (const char* bad : {"yes", "-1", "1.5", "12345678901234567890"}) {
    ScopedEnv env(bad);
    try {
      Config::from_env();
      ADD_FAILURE() << kVar << "=" << bad << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.variable(), kVar);
      EXPECT_NE(std::string(e.what()).find(kVar), std::string::npos) << e.what();
    }
  }
}

Config fuzzed(std::uint64_t seed, int threads) {
  Config c = make_config(2, threads);
  c.schedule_fuzz_seed = seed;
  return c;
}

// Items of one stream still run one at a time and in order, whatever the delays; synchronize waits
// for all of them (kernels and copies alike).
TEST(ScheduleFuzz, StreamOrderAndSynchronizeAreKept) {
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    Runtime runtime(fuzzed(seed, 2));
    Device& dev = runtime.device(0);
    auto stream = dev.create_stream();
    std::vector<int> order;  // written by the stream's items only, one at a time
    constexpr int kItems = 40;
    std::vector<int> src(kItems), dst(kItems, -1);
    for (int i = 0; i < kItems; ++i) {
      src[i] = i;
      stream->launch("append", [&order, i] { order.push_back(i); });
      stream->copy(&dst[i], &src[i], sizeof(int), "copy");
    }
    stream->synchronize();
    ASSERT_EQ(order.size(), static_cast<size_t>(kItems)) << "seed " << seed;
    for (int i = 0; i < kItems; ++i) {
      EXPECT_EQ(order[i], i) << "seed " << seed;
      EXPECT_EQ(dst[i], i) << "seed " << seed;
    }
  }
}

// A consumer ordered by an event always sees the producer's value; without the wait, the fuzzer
// makes the consumer overtake the producer under most seeds.
int consumers_that_saw_the_value(bool with_wait, int seeds) {
  int saw = 0;
  for (int seed = 0; seed < seeds; ++seed) {
    Runtime runtime(fuzzed(static_cast<std::uint64_t>(seed), 2));
    Device& dev = runtime.device(0);
    auto producer = dev.create_stream();
    auto consumer = dev.create_stream();
    std::atomic<int> value{0};
    std::atomic<int> seen{-1};
    for (int i = 0; i < 4; ++i) {  // a few producer steps, as a forward pass has
      producer->launch("produce", [&value] { value.fetch_add(1, std::memory_order_relaxed); });
    }
    if (with_wait) {
      auto done = Event::create();
      producer->record(done);
      consumer->wait(done);
    }
    consumer->launch("consume", [&] { seen.store(value.load(std::memory_order_relaxed), std::memory_order_relaxed); });
    consumer->synchronize();
    producer->synchronize();
    if (seen.load() == 4) ++saw;
  }
  return saw;
}

TEST(ScheduleFuzz, EventWaitsAreKeptUnderEverySeed) {
  constexpr int kSeeds = 12;
  EXPECT_EQ(consumers_that_saw_the_value(/*with_wait=*/true, kSeeds), kSeeds);
}

TEST(ScheduleFuzz, MissingWaitIsExposedUnderMostSeeds) {
  constexpr int kSeeds = 12;
  const int correct = consumers_that_saw_the_value(/*with_wait=*/false, kSeeds);
  EXPECT_LT(correct, kSeeds / 2) << "the fuzzer hid the missing wait under " << correct << " of " << kSeeds
                                 << " seeds";
}

// Streams of different devices and the copy engines are fuzzed too; a cross-device chain ordered by
// events still produces the right bytes.
TEST(ScheduleFuzz, CrossDeviceCopiesOrderedByEventsStayCorrect) {
  for (std::uint64_t seed : {5u, 6u}) {
    Runtime runtime(fuzzed(seed, 1));
    auto s0 = runtime.device(0).create_stream();
    auto s1 = runtime.device(1).create_stream();
    void* a = runtime.device(0).memory().allocate(256);
    void* b = runtime.device(1).memory().allocate(256);
    std::vector<unsigned char> host(256, 7), back(256, 0);
    s0->copy(a, host.data(), 256, "h2d");
    auto ready = Event::create();
    s0->record(ready);
    s1->wait(ready);
    s1->copy(b, a, 256, "peer");
    s1->copy(back.data(), b, 256, "d2h");
    s1->synchronize();
    EXPECT_EQ(back, host) << "seed " << seed;
    runtime.device(0).memory().free(a);
    runtime.device(1).memory().free(b);
  }
}

}  // namespace
}  // namespace openreg::sim
