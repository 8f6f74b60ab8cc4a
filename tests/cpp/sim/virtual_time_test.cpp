// Virtual time (Note [Virtual time] in virtual_clock.cpp): with a device profile, work gets the times
// it would take on that GPU, from the program's dependencies, independent of when the CPU ran it.
// Every check reads virtual times (trace spans, event elapsed times, the host clock); gates hold the
// real execution back to show that it does not matter.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "openreg/sim/cost.h"
#include "openreg/sim/device.h"
#include "openreg/sim/error.h"
#include "openreg/sim/event.h"
#include "openreg/sim/profile.h"
#include "openreg/sim/runtime.h"
#include "openreg/sim/stream.h"
#include "openreg/sim/trace.h"
#include "sim_test_util.h"

namespace openreg::sim {
namespace {

Config profiled(int devices, std::uint64_t depth = kDefaultLaunchQueueDepth) {
  Config c = test::make_config(devices, 2);
  c.device_profile = load_device_profile("h100-sxm", "test");
  c.launch_queue_depth = depth;
  return c;
}

// A kernel of `flops` bf16 GEMM work filling the device (fixed time, occupancy 1), or of `bytes` of
// memory traffic only.
KernelCost gemm(double ms, const DeviceProfile& p) {
  // 132 tiles of 128x128: one full wave, so the rate is peak x gemm_efficiency exactly.
  KernelCost c{ms * 1e-3 * p.tensor_flops[static_cast<int>(NumberFormat::kBf16)] * p.gemm_efficiency, 0,
               NumberFormat::kBf16, true, 128 * 12, 128 * 11};
  return c;
}
KernelCost small_kernel(double bytes) { return KernelCost{0, bytes, NumberFormat::kFp32, false, 0, 0}; }

// Trace spans by item name (the first item of each name).
struct Span {
  std::int64_t start, end;
};
std::map<std::string, Span> spans(const std::vector<TraceRecord>& records) {
  std::map<std::string, Span> by_name;
  for (const auto& r : records) by_name.emplace(r.name, Span{r.start_ns, r.end_ns});
  return by_name;
}

class VirtualTime : public ::testing::Test {
 protected:
  void SetUp() override { session = std::make_unique<TraceSession>(); }
  std::map<std::string, Span> stop() { return spans(session->stop()); }
  std::unique_ptr<TraceSession> session;
};

TEST_F(VirtualTime, ItemsOfAStreamFollowEachOtherAndTheHostIssuesEach) {
  Runtime runtime(profiled(1));
  const DeviceProfile& p = *runtime.profile();
  auto s = runtime.device(0).create_stream();
  test::Gate gate;  // the real work waits; the virtual times are fixed at issue
  auto begin = Event::create(true);
  auto end = Event::create(true);
  s->record(begin);
  s->launch("gated", [&] { EXPECT_TRUE(gate.wait()); }, gemm(1.0, p));
  s->launch("second", [] {}, gemm(2.0, p));
  s->record(end);
  gate.open();
  s->synchronize();
  const auto t = stop();
  // The first kernel waits for the host to issue it (launch + the op's host work after the record's
  // launch), the second for the first.
  EXPECT_EQ(t.at("gated").start, t.at("event record").start + static_cast<std::int64_t>(p.launch_ns + p.host_op_ns));
  EXPECT_EQ(t.at("gated").end - t.at("gated").start, 1'000'000);
  EXPECT_EQ(t.at("second").start, t.at("gated").end);
  EXPECT_EQ(t.at("second").end - t.at("second").start, 2'000'000);
  const double expected_ms = (p.launch_ns + p.host_op_ns + 3e6) / 1e6;  // record end to record end
  EXPECT_NEAR(begin->elapsed_ms(*end), expected_ms, 1e-6);
}

TEST_F(VirtualTime, AWaitStartsAfterTheRecordItWaitsForOnAnotherDevice) {
  Runtime runtime(profiled(2));
  const DeviceProfile& p = *runtime.profile();
  auto a = runtime.device(0).create_stream();
  auto b = runtime.device(1).create_stream();
  auto e = Event::create();
  a->launch("producer", [] {}, gemm(5.0, p));
  a->record(e);
  b->wait(e);
  b->launch("consumer", [] {}, small_kernel(1024));
  b->synchronize();
  a->synchronize();
  const auto t = stop();
  EXPECT_EQ(t.at("consumer").start, t.at("producer").end + static_cast<std::int64_t>(p.event_record_ns));
}

// A collective placed on the clock (Runtime::place_communication): its end is where a stream that
// waits for it continues, kernels over it run comm_compute_slowdown slower, and the device's
// statistics count its time, the part of it with nothing else running being exposed.
TEST_F(VirtualTime, ACollectiveEndsWhereItWasPlacedAndSlowsTheKernelsBesideIt) {
  Runtime runtime(profiled(1));
  const DeviceProfile& p = *runtime.profile();
  auto compute = runtime.device(0).create_stream();
  auto end = Event::create();
  auto collective = end->record_on_host(0);
  collective->set_trace("collective:allreduce", 99);
  collective->mark_started();
  const std::int64_t start = runtime.virtual_now_ns() + 1'000'000;
  runtime.place_communication(0, start, start + 4'000'000, collective.get());
  // Issued now: a 0.5 ms kernel that ends before the collective starts, then a 2 ms one that the
  // collective's start overtakes, then one that waits for the collective's end.
  compute->launch("before", [] {}, gemm(0.5, p));
  compute->launch("beside", [] {}, gemm(2.0, p));
  compute->wait(end);
  compute->launch("after", [] {}, small_kernel(1024));
  collective->complete();
  compute->synchronize();
  const auto t = stop();
  const Span c = t.at("collective:allreduce");  // trace times are absolute; compare differences
  EXPECT_EQ(c.end - c.start, 4'000'000);
  const Span before = t.at("before");
  const Span beside = t.at("beside");
  EXPECT_EQ(before.end - before.start, 500'000);
  EXPECT_LT(before.end, c.start);
  EXPECT_EQ(beside.start, before.end);
  const std::int64_t covered = std::min(beside.start + 2'000'000, c.end) - std::max(beside.start, c.start);
  ASSERT_GT(covered, 1'000'000);
  EXPECT_EQ(beside.end - beside.start, 2'000'000 + std::llround(p.comm_compute_slowdown * static_cast<double>(covered)));
  EXPECT_EQ(t.at("after").start, std::max(c.end, beside.end));
  const DeviceTimeStats stats = runtime.device_time_stats(0);
  EXPECT_EQ(stats.comm_busy_ns, 4'000'000);
  // Exposed: the collective's time with no kernel beside it, from the slowed kernel's end to its end.
  ASSERT_LT(beside.end, c.end);
  EXPECT_EQ(stats.exposed_comm_ns, c.end - beside.end);
  // A span that is not one is refused.
  EXPECT_THROW(runtime.place_communication(0, 10, 5, nullptr), Error);
}

// A wait the program did not make (the library's communication thread) leaves the host clock alone.
// An event recorded after a 5 ms kernel on a new stream of device 0.
std::shared_ptr<Event> record_after_a_long_kernel(Runtime& runtime) {
  auto s = runtime.device(0).create_stream();
  auto e = Event::create();
  s->launch("long", [] {}, gemm(5.0, *runtime.profile()));
  s->record(e);
  return e;
}

TEST_F(VirtualTime, AnUntimedSynchronizeLeavesTheHostClockWhereItWas) {
  Runtime runtime(profiled(1));
  auto e = record_after_a_long_kernel(runtime);
  const std::int64_t before = runtime.virtual_now_ns();
  e->synchronize_untimed();
  EXPECT_EQ(runtime.virtual_now_ns(), before);
  e->synchronize();
  EXPECT_GT(runtime.virtual_now_ns(), 5'000'000);  // the record's end, after the 5 ms kernel
}

// The caching allocator's question (Event::query_untimed): a record this CPU has run but the modelled
// GPU has not reached by the host's virtual time is not done, and asking moves no clock.
TEST_F(VirtualTime, AnUntimedQueryIsDoneOnlyWhenTheModelledGpuIsThere) {
  Runtime runtime(profiled(1));
  auto e = record_after_a_long_kernel(runtime);
  e->synchronize_untimed();  // the device thread has run it
  const std::int64_t before = runtime.virtual_now_ns();
  EXPECT_FALSE(e->query_untimed());
  EXPECT_EQ(runtime.virtual_now_ns(), before);
  EXPECT_TRUE(e->query());  // the program's query sees it done: the host learns it only now
  EXPECT_GT(runtime.virtual_now_ns(), 5'000'000);
  EXPECT_TRUE(e->query_untimed());
}

TEST(UntimedQuery, WithoutAProfileIsQuery) {
  Runtime runtime(test::make_config(1, 2));
  auto s = runtime.device(0).create_stream();
  auto e = Event::create();
  EXPECT_TRUE(e->query_untimed());  // never recorded
  test::Gate gate;
  s->launch("gated", [&] { EXPECT_TRUE(gate.wait()); });
  s->record(e);
  EXPECT_FALSE(e->query_untimed());
  gate.open();
  e->synchronize();
  EXPECT_TRUE(e->query_untimed());
}

TEST_F(VirtualTime, CopiesRunOnTheirEngineBesideKernels) {
  Runtime runtime(profiled(1));
  const DeviceProfile& p = *runtime.profile();
  Device& dev = runtime.device(0);
  auto compute = dev.create_stream();
  auto copies = dev.create_stream();
  const std::size_t bytes = 64 << 20;
  void* host = runtime.host_alloc_pinned(bytes);
  void* device = dev.memory().allocate(bytes);
  compute->launch("matmul", [] {}, gemm(10.0, p));
  copies->copy(device, host, bytes, "upload");
  copies->synchronize();
  compute->synchronize();
  const auto t = stop();
  EXPECT_LT(t.at("upload").start, t.at("matmul").end);  // overlaps the kernel
  EXPECT_EQ(t.at("upload").end - t.at("upload").start,
            static_cast<std::int64_t>(copy_time_ns(p, CopyRoute::kHostToDevice, bytes, true) + 0.5));
  dev.memory().free(device);
  runtime.host_free_pinned(host);
}

TEST_F(VirtualTime, EachCopyEngineTakesItsCopiesInTurnAndEnginesOverlap) {
  Runtime runtime(profiled(2));
  Device& d0 = runtime.device(0);
  const std::size_t bytes = 16 << 20;
  // Separate buffers for every copy: the four streams are not ordered with each other.
  char* host = static_cast<char*>(runtime.host_alloc_pinned(3 * bytes));
  std::vector<void*> on0;
  for (int i = 0; i < 4; ++i) on0.push_back(d0.memory().allocate(bytes));
  void* on1 = runtime.device(1).memory().allocate(bytes);
  std::vector<std::shared_ptr<Stream>> s;
  for (int i = 0; i < 4; ++i) s.push_back(d0.create_stream());
  s[0]->copy(on0[0], host, bytes, "upload 1");
  s[1]->copy(on0[1], host + bytes, bytes, "upload 2");
  s[2]->copy(host + 2 * bytes, on0[2], bytes, "download");
  s[3]->copy(on1, on0[3], bytes, "peer");
  for (auto& stream : s) stream->synchronize();
  const auto t = stop();
  EXPECT_GE(t.at("upload 2").start, t.at("upload 1").end);  // one host-to-device engine
  EXPECT_LT(t.at("download").start, t.at("upload 1").end);  // the device-to-host engine runs beside it
  EXPECT_LT(t.at("peer").start, t.at("download").end);      // and the peer engine beside both
  for (void* p : on0) d0.memory().free(p);
  runtime.device(1).memory().free(on1);
  runtime.host_free_pinned(host);
}

TEST_F(VirtualTime, SmallKernelsOfTwoStreamsShareTheDeviceAndFullOnesTakeTurns) {
  Runtime runtime(profiled(1));
  const DeviceProfile& p = *runtime.profile();
  Device& dev = runtime.device(0);
  auto s1 = dev.create_stream();
  auto s2 = dev.create_stream();
  // A quarter of the SMs each, 1 ms each (memory time of their bytes): side by side.
  KernelCost quarter{1e-3 * p.vector_flops[static_cast<int>(NumberFormat::kFp32)], 0, NumberFormat::kFp32, true,
                     128 * 33, 128};
  s1->launch("small 1", [] {}, quarter);
  s2->launch("small 2", [] {}, quarter);
  s1->launch("full 1", [] {}, gemm(1.0, p));
  s2->launch("full 2", [] {}, gemm(1.0, p));
  s1->synchronize();
  s2->synchronize();
  const auto t = stop();
  EXPECT_LT(t.at("small 2").start, t.at("small 1").end) << "small kernels of two streams ran one after the other";
  const Span f1 = t.at("full 1");
  const Span f2 = t.at("full 2");
  EXPECT_TRUE(f2.start >= f1.end || f1.start >= f2.end) << "two device-filling kernels overlapped";
}

TEST_F(VirtualTime, TheHostJumpsToTheDeviceAtASynchronize) {
  Runtime runtime(profiled(1));
  const DeviceProfile& p = *runtime.profile();
  auto s = runtime.device(0).create_stream();
  const std::int64_t before = runtime.virtual_now_ns();
  s->launch("long", [] {}, gemm(7.0, p));
  EXPECT_EQ(runtime.virtual_now_ns(), before + static_cast<std::int64_t>(p.launch_ns + p.host_op_ns));
  s->synchronize();
  EXPECT_EQ(runtime.virtual_now_ns(), before + static_cast<std::int64_t>(p.launch_ns + p.host_op_ns) + 7'000'000);
  const DeviceTimeStats stats = runtime.device_time_stats(0);
  EXPECT_EQ(stats.compute_busy_ns, 7'000'000);
  EXPECT_EQ(stats.kernels, 1);
  EXPECT_NEAR(stats.peak_ns, 7e6 * p.gemm_efficiency, 1.0);  // its flops at the datasheet peak
}

TEST_F(VirtualTime, ALaunchBoundLoopLeavesTheDeviceIdleBetweenKernels) {
  Runtime runtime(profiled(1));
  const DeviceProfile& p = *runtime.profile();
  auto s = runtime.device(0).create_stream();
  const std::int64_t before = runtime.virtual_now_ns();
  for (int i = 0; i < 100; ++i) s->launch("tiny", [] {}, small_kernel(256));
  s->synchronize();
  const std::int64_t per_op = static_cast<std::int64_t>(p.launch_ns + p.host_op_ns);
  // Each kernel starts when it is issued: the last one at 100 ops, then runs the minimum time.
  EXPECT_EQ(runtime.virtual_now_ns() - before, 100 * per_op + static_cast<std::int64_t>(p.min_kernel_ns));
  const DeviceTimeStats stats = runtime.device_time_stats(0);
  EXPECT_EQ(stats.compute_busy_ns, 100 * static_cast<std::int64_t>(p.min_kernel_ns));  // idle in between
}

TEST_F(VirtualTime, AFullLaunchQueueHoldsTheHostUntilTheDeviceHasRoom) {
  Runtime runtime(profiled(1, /*depth=*/4));
  const DeviceProfile& p = *runtime.profile();
  auto s = runtime.device(0).create_stream();
  const std::int64_t before = runtime.virtual_now_ns();
  for (int i = 0; i < 10; ++i) s->launch("1 ms", [] {}, gemm(1.0, p));
  // The 10th launch waits for the 6th kernel's end (4 places back): the first starts one op after
  // `before`, and each takes 1 ms; then the host issues the 10th.
  const std::int64_t op = static_cast<std::int64_t>(p.launch_ns + p.host_op_ns);
  EXPECT_EQ(runtime.virtual_now_ns() - before, op + 6 * 1'000'000);
  s->synchronize();
  (void)stop();
}

TEST_F(VirtualTime, APageableCopyHoldsTheHostAndAPinnedOneDoesNot) {
  Runtime runtime(profiled(1));
  const DeviceProfile& p = *runtime.profile();
  Device& dev = runtime.device(0);
  auto s = dev.create_stream();
  const std::size_t bytes = 8 << 20;
  std::vector<char> pageable(bytes);
  void* pinned = runtime.host_alloc_pinned(bytes);
  void* device = dev.memory().allocate(bytes);
  std::int64_t before = runtime.virtual_now_ns();
  s->copy(device, pinned, bytes, "pinned");
  EXPECT_EQ(runtime.virtual_now_ns() - before, static_cast<std::int64_t>(p.launch_ns + p.host_op_ns));
  s->synchronize();
  before = runtime.virtual_now_ns();
  s->copy(device, pageable.data(), bytes, "pageable");
  EXPECT_EQ(runtime.virtual_now_ns() - before,
            static_cast<std::int64_t>(p.launch_ns + p.host_op_ns) +
                static_cast<std::int64_t>(copy_time_ns(p, CopyRoute::kHostToDevice, bytes, false) + 0.5));
  s->synchronize();
  (void)stop();
  dev.memory().free(device);
  runtime.host_free_pinned(pinned);
}

// The same program gives the same timeline, whatever the real execution did: here once freely, once
// with its first kernel held back by a gate while the host issues everything, and once under
// schedule fuzzing.
TEST(VirtualTimeReproducible, TheSameProgramGivesTheSameTimelineToTheNanosecond) {
  auto run = [](bool gated, bool fuzzed) {
    Config c = profiled(2);
    if (fuzzed) c.schedule_fuzz_seed = 42;
    Runtime runtime(c);
    const DeviceProfile& p = *runtime.profile();
    auto a = runtime.device(0).create_stream();
    auto b = runtime.device(1).create_stream();
    auto e = Event::create();
    test::Gate gate;
    if (!gated) gate.open();
    TraceSession session;
    a->launch("first", [&] { EXPECT_TRUE(gate.wait()); }, gemm(0.5, p));
    for (int i = 0; i < 20; ++i) {
      a->launch("a", [] {}, small_kernel(1 << 20));
      b->launch("b", [] {}, small_kernel(4 << 20));
      if (i % 5 == 0) {
        a->record(e);
        b->wait(e);
      }
    }
    gate.open();
    a->synchronize();
    b->synchronize();
    std::vector<std::pair<std::int64_t, std::int64_t>> timeline;
    std::int64_t origin = -1;
    for (const auto& r : session.stop()) {
      if (origin < 0) origin = r.start_ns;
      timeline.emplace_back(r.start_ns - origin, r.end_ns - origin);
    }
    std::sort(timeline.begin(), timeline.end());
    return std::make_pair(timeline, runtime.virtual_now_ns());
  };
  const auto free_run = run(false, false);
  EXPECT_EQ(free_run.first.size(), 1u + 40u + 4u + 4u);
  EXPECT_EQ(run(true, false), free_run);
  EXPECT_EQ(run(false, true), free_run);
}

// work_items tells which devices a program used (torch.openreg.timing.region): it counts kernels, copies
// and collectives, even a copy that adds no busy time (it runs beside a kernel), and never event records
// or waits.
TEST_F(VirtualTime, WorkItemsCountKernelsCopiesAndCollectivesNotMarkers) {
  Runtime runtime(profiled(2));
  const DeviceProfile& p = *runtime.profile();
  Device& dev = runtime.device(0);
  auto s = dev.create_stream();
  auto side = dev.create_stream();
  auto other = runtime.device(1).create_stream();
  const std::size_t bytes = 1024;
  void* host = runtime.host_alloc_pinned(bytes);
  void* device = dev.memory().allocate(bytes);
  auto e = Event::create();
  other->record(e);
  other->wait(e);
  s->launch("k", [] {}, gemm(1.0, p));
  const DeviceTimeStats before = runtime.device_time_stats(0);
  side->copy(device, host, bytes, "beside");  // microseconds, inside the 1 ms kernel
  const DeviceTimeStats after = runtime.device_time_stats(0);
  EXPECT_EQ(after.busy_ns, before.busy_ns);
  EXPECT_EQ(after.work_items, before.work_items + 1);
  const std::int64_t start = runtime.virtual_now_ns();
  runtime.place_communication(0, start, start + 1000, nullptr);
  s->synchronize();
  side->synchronize();
  other->synchronize();
  EXPECT_EQ(runtime.device_time_stats(0).work_items, 3);
  EXPECT_EQ(runtime.device_time_stats(1).work_items, 0);
  dev.memory().free(device);
  runtime.host_free_pinned(host);
}

// Note [Where time goes]: each instant of a device's timeline counts once, for the first of matmul,
// attention, optimizer and memory-bound among the kernels running then, else copies, else a
// collective (exposed); whatever order the overlapping items were placed in. The oracle sweeps the
// trace's spans instant by instant.
TEST_F(VirtualTime, EachInstantCountsOnceForTheFirstClassRunningThen) {
  Runtime runtime(profiled(1));
  const DeviceProfile& p = *runtime.profile();
  Device& dev = runtime.device(0);
  auto s1 = dev.create_stream();
  auto s2 = dev.create_stream();
  auto s3 = dev.create_stream();
  // On the vector units, one SM's share, for `ms`.
  auto narrow = [&](double ms, KernelClass kind) {
    KernelCost c;
    c.flops = ms * 1e-3 * p.vector_flops[static_cast<int>(NumberFormat::kFp32)];
    c.kind = kind;
    return c;
  };
  // Half the SMs (66 tiles of 128: wave efficiency 1/2) for `ms`.
  auto half = [&](double ms, KernelClass kind) {
    KernelCost c{ms * 1e-3 * p.tensor_flops[static_cast<int>(NumberFormat::kBf16)] * p.gemm_efficiency * 0.5, 0,
                 NumberFormat::kBf16, true, 128 * 66, 128};
    c.kind = kind;
    return c;
  };
  const std::size_t bytes = 64 << 20;
  void* host = runtime.host_alloc_pinned(bytes);
  void* device = dev.memory().allocate(bytes);
  // The memory-bound kernel is placed first; the kernels of the other stream placed after it run beside
  // it and take its time, the optimizer's past its end; the upload outlasts every kernel.
  s1->launch("memory", [] {}, narrow(1.0, KernelClass::kMemoryBound));
  s2->launch("matmul", [] {}, half(0.3, KernelClass::kByUnits));  // a matrix op that did not say: matmul
  s2->launch("attention", [] {}, half(0.3, KernelClass::kAttention));
  s2->launch("optimizer", [] {}, narrow(0.4, KernelClass::kOptimizer));
  s3->copy(device, host, bytes, "upload");
  for (auto* s : {&s1, &s2, &s3}) (*s)->synchronize();
  const std::int64_t after = runtime.virtual_now_ns();
  runtime.place_communication(0, after + 1000, after + 101'000, nullptr);  // alone: all exposed
  const DeviceTimeStats stats = runtime.device_time_stats(0);
  const auto t = stop();

  // The oracle: between consecutive span ends, the first class running, by the Note's order.
  const std::vector<std::string> order = {"matmul", "attention", "optimizer", "memory", "upload"};
  std::vector<std::int64_t> cuts;
  for (const auto& name : order) {
    cuts.push_back(t.at(name).start);
    cuts.push_back(t.at(name).end);
  }
  std::sort(cuts.begin(), cuts.end());
  std::map<std::string, std::int64_t> expected;
  for (std::size_t i = 0; i + 1 < cuts.size(); ++i) {
    for (const auto& name : order) {
      if (t.at(name).start <= cuts[i] && cuts[i + 1] <= t.at(name).end) {
        expected[name] += cuts[i + 1] - cuts[i];
        break;
      }
    }
  }
  ASSERT_LT(t.at("matmul").start, t.at("memory").end);  // the setup overlaps as intended
  ASSERT_GT(t.at("optimizer").end, t.at("memory").end);
  ASSERT_GT(t.at("upload").end, t.at("optimizer").end);
  EXPECT_EQ(stats.matmul_ns, 300'000);  // all of it, though placed over the memory-bound kernel
  EXPECT_EQ(stats.matmul_ns, expected["matmul"]);
  EXPECT_EQ(stats.attention_ns, expected["attention"]);
  EXPECT_EQ(stats.optimizer_ns, expected["optimizer"]);
  EXPECT_EQ(stats.memory_bound_ns, expected["memory"]);
  EXPECT_LT(stats.memory_bound_ns, 1'000'000 - 600'000);  // matmul and attention hid 0.6 ms of it
  EXPECT_EQ(stats.copy_alone_ns, expected["upload"]);
  EXPECT_EQ(stats.exposed_comm_ns, 100'000);
  // Every instant once: the classes make up the busy time.
  EXPECT_EQ(stats.matmul_ns + stats.attention_ns + stats.optimizer_ns + stats.memory_bound_ns, stats.compute_busy_ns);
  EXPECT_EQ(stats.compute_busy_ns + stats.copy_alone_ns + stats.exposed_comm_ns, stats.busy_ns);
  dev.memory().free(device);
  runtime.host_free_pinned(host);
}

TEST(VirtualTimeOff, WithoutAProfileNothingIsVirtual) {
  Runtime runtime(test::make_config(1, 1));
  EXPECT_EQ(runtime.profile(), nullptr);
  auto s = runtime.device(0).create_stream();
  s->launch("k", [] {}, small_kernel(1 << 20));
  s->synchronize();
  EXPECT_EQ(runtime.virtual_now_ns(), 0);
  EXPECT_EQ(runtime.device_time_stats(0).kernels, 0);
}

}  // namespace
}  // namespace openreg::sim
