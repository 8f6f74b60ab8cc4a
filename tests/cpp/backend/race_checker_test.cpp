// The stream race checker's model (Note [Stream race checker model]) on hand-built schedules.
#include "backend/sanitizer/RaceChecker.h"

#include <gtest/gtest.h>

#include <functional>

using namespace openreg::sanitizer;

namespace {

constexpr uint64_t kHost = 1;
const StreamId kDefault{0, 0};
const StreamId kSide{0, 1};
const StreamId kOtherDevice{1, 0};

AccessInfo info(const char* op) { return {op, "float32[4]", nullptr}; }

void read(RaceChecker& c, StreamId s, uint64_t b, uint64_t e, const char* op, int device = 0) {
  c.access(kHost, s, device, b, e, AccessKind::Read, info(op));
}
void write(RaceChecker& c, StreamId s, uint64_t b, uint64_t e, const char* op, int device = 0) {
  c.access(kHost, s, device, b, e, AccessKind::Write, info(op));
}

std::string race_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const StreamRaceError& e) {
    return e.what();
  }
  return "";
}

TEST(RaceChecker, SameStreamIsAlwaysOrdered) {
  RaceChecker c;
  write(c, kDefault, 0, 16, "fill_");
  read(c, kDefault, 0, 16, "add");
  write(c, kDefault, 0, 16, "mul_");
  EXPECT_EQ(c.report_count(), 0u);
}

TEST(RaceChecker, ReadAfterWriteOnOtherStreamWithoutWaitIsARace) {
  RaceChecker c;
  write(c, kDefault, 0, 16, "fill_");
  std::string msg = race_message([&] { read(c, kSide, 0, 16, "sum"); });
  EXPECT_NE(msg.find("read by sum"), std::string::npos) << msg;
  EXPECT_NE(msg.find("write by fill_"), std::string::npos) << msg;
  EXPECT_NE(msg.find("stream 1 on openreg:0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("float32[4]"), std::string::npos) << msg;
}

TEST(RaceChecker, EventWaitOrdersTheRead) {
  RaceChecker c;
  write(c, kDefault, 0, 16, "fill_");
  c.record_event(7, kDefault);
  c.wait_event(7, kSide);
  read(c, kSide, 0, 16, "sum");
  EXPECT_EQ(c.report_count(), 0u);
}

TEST(RaceChecker, EventRecordedBeforeTheWriteDoesNotOrderIt) {
  // The "event recorded on the wrong stream / too early" bug.
  RaceChecker c;
  c.record_event(7, kDefault);
  write(c, kDefault, 0, 16, "fill_");
  c.wait_event(7, kSide);
  EXPECT_FALSE(race_message([&] { read(c, kSide, 0, 16, "sum"); }).empty());
}

TEST(RaceChecker, EventRecordedOnTheWrongStreamDoesNotOrder) {
  RaceChecker c;
  write(c, kDefault, 0, 16, "fill_");
  c.record_event(7, kSide);
  c.wait_event(7, kSide);
  EXPECT_FALSE(race_message([&] { read(c, kSide, 0, 16, "sum"); }).empty());
}

TEST(RaceChecker, WriteAfterReadAndWriteAfterWriteAreRaces) {
  RaceChecker c;
  read(c, kSide, 0, 16, "sum");
  std::string msg = race_message([&] { write(c, kDefault, 8, 24, "zero_"); });
  EXPECT_NE(msg.find("write by zero_"), std::string::npos) << msg;
  EXPECT_NE(msg.find("read by sum"), std::string::npos) << msg;

  RaceChecker d;
  write(d, kSide, 0, 16, "fill_");
  EXPECT_FALSE(race_message([&] { write(d, kDefault, 0, 4, "copy_"); }).empty());
}

TEST(RaceChecker, ReadsOnDifferentStreamsDoNotRace) {
  RaceChecker c;
  write(c, kDefault, 0, 16, "fill_");
  c.synchronize_device(kHost, 0);
  read(c, kDefault, 0, 16, "sum");
  read(c, kSide, 0, 16, "mean");
  EXPECT_EQ(c.report_count(), 0u);
}

TEST(RaceChecker, DisjointRangesDoNotRace) {
  RaceChecker c;
  write(c, kDefault, 0, 16, "fill_");
  write(c, kSide, 16, 32, "fill_");
  write(c, kSide, 0, 16, "fill_", /*device=*/1);  // same addresses, other device
  EXPECT_EQ(c.report_count(), 0u);
}

TEST(RaceChecker, WaitStreamOrdersTheSideResult) {
  RaceChecker c;
  write(c, kSide, 0, 16, "mm");
  c.wait_stream(kDefault, kSide);
  read(c, kDefault, 0, 16, "add");
  EXPECT_EQ(c.report_count(), 0u);

  RaceChecker bad;
  write(bad, kSide, 0, 16, "mm");
  std::string msg = race_message([&] { read(bad, kDefault, 0, 16, "add"); });
  EXPECT_NE(msg.find("read by add"), std::string::npos) << msg;
  EXPECT_NE(msg.find("write by mm"), std::string::npos) << msg;
}

TEST(RaceChecker, WaitStreamOnlyCoversWorkIssuedBeforeIt) {
  RaceChecker c;
  c.wait_stream(kDefault, kSide);
  write(c, kSide, 0, 16, "mm");
  EXPECT_FALSE(race_message([&] { read(c, kDefault, 0, 16, "add"); }).empty());
}

TEST(RaceChecker, HostSynchronizationsOrderLaterIssues) {
  for (int how = 0; how < 3; ++how) {
    RaceChecker c;
    write(c, kSide, 0, 16, "mm");
    c.record_event(3, kSide);
    if (how == 0) c.synchronize_stream(kHost, kSide);
    if (how == 1) c.synchronize_event(kHost, 3);
    if (how == 2) c.synchronize_device(kHost, 0);
    read(c, kDefault, 0, 16, "add");
    EXPECT_EQ(c.report_count(), 0u) << how;
  }
}

TEST(RaceChecker, SynchronizingAnotherThreadOrAnotherDeviceDoesNotOrder) {
  RaceChecker c;
  write(c, kSide, 0, 16, "mm");
  c.synchronize_stream(/*host=*/2, kSide);  // another host thread waited, not this one
  c.synchronize_device(kHost, 1);
  EXPECT_FALSE(race_message([&] { read(c, kDefault, 0, 16, "add"); }).empty());
}

TEST(RaceChecker, CrossDeviceCopyWithoutOrderingIsARace) {
  RaceChecker c;
  write(c, kDefault, 0, 16, "fill_");
  // A copy issued on device 1's stream reads device 0's bytes: no edge from device 0's stream.
  std::string msg = race_message([&] {
    c.access(kHost, kOtherDevice, 0, 0, 16, AccessKind::Read, info("copy_"));
  });
  EXPECT_NE(msg.find("stream 0 on openreg:1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("write by fill_"), std::string::npos) << msg;
}

TEST(RaceChecker, FreedBlockReusedWithoutRecordStreamIsARace) {
  RaceChecker c;
  write(c, kDefault, 0, 64, "empty+fill_");
  c.synchronize_device(kHost, 0);
  read(c, kSide, 0, 64, "sum");                 // side stream reads, no record_stream
  c.free_block(kHost, 0, 0, 64, kDefault, {});         // freed on the default stream
  std::string msg = race_message([&] { write(c, kDefault, 0, 32, "normal_"); });  // reused
  EXPECT_NE(msg.find("write by normal_"), std::string::npos) << msg;
  EXPECT_NE(msg.find("read by sum"), std::string::npos) << msg;
}

TEST(RaceChecker, RecordStreamMakesReuseSafe) {
  RaceChecker c;
  write(c, kDefault, 0, 64, "fill_");
  c.synchronize_device(kHost, 0);
  read(c, kSide, 0, 64, "sum");
  c.free_block(kHost, 0, 0, 64, kDefault, {kSide});
  write(c, kDefault, 0, 32, "normal_");
  write(c, kSide, 32, 64, "normal_");  // reused by another stream: the free ordered it
  EXPECT_EQ(c.report_count(), 0u);
}

TEST(RaceChecker, FreeAfterTheHostSawTheOtherStreamFinishIsSafe) {
  RaceChecker c;
  write(c, kDefault, 0, 64, "fill_");
  c.wait_stream(kSide, kDefault);
  read(c, kSide, 0, 64, "sum");       // no record_stream ...
  c.synchronize_stream(kHost, kSide);  // ... but the host saw the side stream finish (item, cpu, sync)
  c.free_block(kHost, 0, 0, 64, kDefault, {});
  write(c, kDefault, 0, 64, "normal_");
  EXPECT_EQ(c.report_count(), 0u);
}

TEST(RaceChecker, EventQueryThatReturnedTrueOrdersTheHost) {
  RaceChecker c;
  write(c, kSide, 0, 16, "mul_");
  c.record_event(9, kSide);
  c.synchronize_event(kHost, 9);  // query() == true is the same observation
  write(c, kDefault, 0, 16, "add_");
  EXPECT_EQ(c.report_count(), 0u);
}

TEST(RaceChecker, OneReportPerPairOfOpsAcrossSegments) {
  RaceChecker c(RaceChecker::Mode::Record);
  write(c, kDefault, 0, 16, "fill_");
  write(c, kDefault, 16, 32, "fill_");  // two segments written by two ops of one stream
  read(c, kSide, 0, 32, "sum");         // races with both fills: two reports, not more
  EXPECT_EQ(c.report_count(), 2u);
}

TEST(RaceChecker, RecordModeKeepsGoingAndCounts) {
  RaceChecker c(RaceChecker::Mode::Record);
  write(c, kDefault, 0, 16, "fill_");
  read(c, kSide, 0, 16, "sum");
  write(c, kSide, 0, 16, "mul_");  // races with fill_ again (side never waited)
  ASSERT_EQ(c.report_count(), 2u);
  EXPECT_NE(c.reports()[0].message.find("read by sum"), std::string::npos);
}

TEST(RaceChecker, RaisedRaceLeavesHistoryUnchanged) {
  RaceChecker c;
  write(c, kDefault, 0, 16, "fill_");
  EXPECT_THROW(read(c, kSide, 0, 16, "sum"), StreamRaceError);
  c.wait_stream(kDefault, kSide);
  // The failed read was not recorded, so the default stream may now write without a race.
  write(c, kDefault, 0, 16, "zero_");
  EXPECT_EQ(c.report_count(), 1u);
}

}  // namespace

// Note [Host access to pinned memory]: a non_blocking copy is its stream's access of pinned bytes; the
// host's own use of them must follow a synchronization that covers the copy.
void host_use(RaceChecker& c, AccessKind kind, uint64_t b, uint64_t e, const char* op, uint64_t host = kHost) {
  const Range run{b, e};
  c.host_access_runs(host, kPinnedHost, &run, 1, kind, info(op));
}

TEST(RaceChecker, HostReadOfACopysPinnedDestinationBeforeSynchronizingIsARace) {
  RaceChecker c;
  write(c, kDefault, 0, 16, "copy_", kPinnedHost);
  EXPECT_TRUE(c.has_unordered_for_host(kHost, kPinnedHost));
  std::string msg = race_message([&] { host_use(c, AccessKind::Read, 4, 8, "sum"); });
  EXPECT_NE(msg.find("read by sum on host thread 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("write by copy_ on stream 0 on openreg:0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("of pinned host memory"), std::string::npos) << msg;
  EXPECT_NE(msg.find("synchronize the stream"), std::string::npos) << msg;
}

TEST(RaceChecker, HostWriteOfACopysPinnedSourceBeforeSynchronizingIsARace) {
  RaceChecker c;
  read(c, kDefault, 0, 16, "copy_", kPinnedHost);
  host_use(c, AccessKind::Read, 0, 16, "sum");  // reading a source being read is fine
  EXPECT_EQ(c.report_count(), 0u);
  std::string msg = race_message([&] { host_use(c, AccessKind::Write, 0, 16, "fill_"); });
  EXPECT_NE(msg.find("write by fill_ on host thread 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("read by copy_ on stream 0"), std::string::npos) << msg;
}

TEST(RaceChecker, HostSynchronizationsOrderTheHostsUse) {
  for (int how = 0; how < 3; ++how) {
    RaceChecker c;
    write(c, kSide, 0, 16, "copy_", kPinnedHost);
    c.record_event(9, kSide);
    if (how == 0) c.synchronize_stream(kHost, kSide);
    if (how == 1) c.synchronize_event(kHost, 9);
    if (how == 2) c.synchronize_device(kHost, 0);
    EXPECT_FALSE(c.has_unordered_for_host(kHost, kPinnedHost)) << how;
    host_use(c, AccessKind::Write, 0, 16, "fill_");
    // The next copy is issued after the host's write: ordered by host program order.
    read(c, kDefault, 0, 16, "copy_", kPinnedHost);
    EXPECT_EQ(c.report_count(), 0u) << how;
  }
}

TEST(RaceChecker, SynchronizingAnotherStreamDoesNotOrderTheHostsUse) {
  RaceChecker c;
  write(c, kSide, 0, 16, "copy_", kPinnedHost);
  c.synchronize_stream(kHost, kDefault);
  EXPECT_TRUE(c.has_unordered_for_host(kHost, kPinnedHost));
  EXPECT_FALSE(race_message([&] { host_use(c, AccessKind::Read, 0, 16, "sum"); }).empty());
}

TEST(RaceChecker, AFreedPinnedBlockForgetsItsCopies) {
  RaceChecker c;
  write(c, kDefault, 0, 16, "copy_", kPinnedHost);
  c.forget(kPinnedHost, 0, 16);
  EXPECT_FALSE(c.has_unordered_for_host(kHost, kPinnedHost));
  host_use(c, AccessKind::Write, 0, 16, "fill_");
  EXPECT_EQ(c.report_count(), 0u);
}
