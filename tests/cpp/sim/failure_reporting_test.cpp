// Failures are never lost (issue 9 item 4): several failures on a stream, failures inherited through
// event waits, and device synchronize taking every stream's failures. See Note [Failure reporting].

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>

#include "openreg/sim/device.h"
#include "openreg/sim/error.h"
#include "openreg/sim/event.h"
#include "openreg/sim/runtime.h"
#include "openreg/sim/stream.h"
#include "sim_test_util.h"

namespace openreg::sim {
namespace {

using test::Gate;
using test::contains;
using test::failure_of;
using test::make_config;

class FailureTest : public ::testing::TestWithParam<int> {
 protected:
  Runtime runtime{make_config(2, GetParam())};
  Device& dev0 = runtime.device(0);
  Device& dev1 = runtime.device(1);
};

INSTANTIATE_TEST_SUITE_P(ComputeThreads, FailureTest, ::testing::Values(1, 2));

TEST_P(FailureTest, TwoFailuresOnOneStreamAreBothReported) {
  auto s = dev0.create_stream();
  s->launch("first_op", [] { throw std::runtime_error("first bad"); });
  s->launch("second_op", [] { throw std::runtime_error("second bad"); });
  const std::string msg = failure_of([&] { s->synchronize(); });
  EXPECT_TRUE(contains(msg, "'first_op'")) << msg;
  EXPECT_TRUE(contains(msg, "first bad")) << msg;
  EXPECT_TRUE(contains(msg, "(and 1 more failure on this stream)")) << msg;
  EXPECT_NO_THROW(s->synchronize());  // reported once
  // Three: counted as two more.
  for (int i = 0; i < 3; ++i) s->launch("op", [] { throw std::runtime_error("bad"); });
  EXPECT_TRUE(contains(failure_of([&] { s->synchronize(); }), "(and 2 more failures on this stream)"));
}

TEST_P(FailureTest, AFailureAfterAReportIsReportedAgain) {
  auto s = dev0.create_stream();
  s->launch("first_op", [] { throw std::runtime_error("x"); });
  EXPECT_TRUE(contains(failure_of([&] { s->synchronize(); }), "'first_op'"));
  s->launch("second_op", [] { throw std::runtime_error("y"); });
  const std::string msg = failure_of([&] { s->synchronize(); });
  EXPECT_TRUE(contains(msg, "'second_op'")) << msg;
  EXPECT_FALSE(contains(msg, "more failure")) << msg;
}

TEST_P(FailureTest, QueryReportsEveryFailureToo) {
  auto s = dev0.create_stream();
  s->launch("first_op", [] { throw std::runtime_error("x"); });
  s->launch("second_op", [] { throw std::runtime_error("y"); });
  ASSERT_TRUE(test::eventually([&] { return s->completed_count() == 2; }));
  const std::string msg = failure_of([&] { s->query(); });
  EXPECT_TRUE(contains(msg, "'first_op'")) << msg;
  EXPECT_TRUE(contains(msg, "(and 1 more failure on this stream)")) << msg;
  EXPECT_TRUE(s->query());
}

// Issue 9 item 4: a stream that waits on an event recorded after a failure used to report success.
TEST_P(FailureTest, WaitOnAnEventRecordedAfterAFailureInheritsIt) {
  auto producer = dev0.create_stream();
  auto consumer = dev1.create_stream();
  auto e = Event::create();
  Gate gate;
  producer->launch("broken_op", [&] {
    EXPECT_TRUE(gate.wait());
    throw std::runtime_error("garbage produced");
  });
  producer->record(e);
  consumer->wait(e);
  std::atomic<bool> consumer_ran{false};
  consumer->launch("consume", [&] { consumer_ran = true; });
  gate.open();  // the failure happens after the wait was issued: the consumer is parked on it
  const std::string msg = failure_of([&] { consumer->synchronize(); });
  EXPECT_TRUE(contains(msg, "'broken_op'")) << msg;
  EXPECT_TRUE(contains(msg, "garbage produced")) << msg;
  EXPECT_TRUE(contains(msg, "waited on an event")) << msg;
  EXPECT_NO_THROW(consumer->synchronize());  // once
  // The producer keeps its own report, and the event its own.
  EXPECT_TRUE(contains(failure_of([&] { producer->synchronize(); }), "'broken_op'"));
  EXPECT_TRUE(contains(failure_of([&] { e->synchronize(); }), "'broken_op'"));
  EXPECT_NO_THROW(producer->synchronize());
  EXPECT_NO_THROW(e->synchronize());
}

TEST_P(FailureTest, WaitIssuedAfterTheFailureCompletedInheritsItAndQuerySeesIt) {
  auto producer = dev0.create_stream();
  auto consumer = dev0.create_stream();
  auto e = Event::create();
  producer->launch("broken_op", [] { throw std::runtime_error("bad"); });
  producer->record(e);
  ASSERT_TRUE(test::eventually([&] { return producer->completed_count() == 2; }));  // record done
  consumer->wait(e);  // satisfied at once
  ASSERT_TRUE(test::eventually([&] { return consumer->completed_count() == 1; }));
  EXPECT_TRUE(contains(failure_of([&] { consumer->query(); }), "'broken_op'"));
  EXPECT_TRUE(consumer->query());
  EXPECT_TRUE(contains(failure_of([&] { producer->query(); }), "'broken_op'"));
}

// Inheritance chains: a -> b -> c through two events still names the original op.
TEST_P(FailureTest, InheritedFailuresPropagateThroughChainsOfWaits) {
  auto a = dev0.create_stream();
  auto b = dev1.create_stream();
  auto c = dev0.create_stream();
  auto e1 = Event::create();
  auto e2 = Event::create();
  a->launch("root_cause", [] { throw std::runtime_error("bad"); });
  a->record(e1);
  b->wait(e1);
  b->record(e2);
  c->wait(e2);
  const std::string msg = failure_of([&] { c->synchronize(); });
  EXPECT_TRUE(contains(msg, "'root_cause'")) << msg;
  EXPECT_TRUE(contains(failure_of([&] { b->synchronize(); }), "'root_cause'"));
  EXPECT_TRUE(contains(failure_of([&] { a->synchronize(); }), "'root_cause'"));
}

// A failure already reported before the record is not passed on: the program has seen it.
TEST_P(FailureTest, FailureReportedBeforeTheRecordIsNotInherited) {
  auto producer = dev0.create_stream();
  auto consumer = dev1.create_stream();
  auto e = Event::create();
  producer->launch("broken_op", [] { throw std::runtime_error("bad"); });
  EXPECT_THROW(producer->synchronize(), Error);
  producer->record(e);
  consumer->wait(e);
  EXPECT_NO_THROW(consumer->synchronize());
  EXPECT_NO_THROW(e->synchronize());
}

TEST_P(FailureTest, DeviceSynchronizeRaisesEveryUnreportedFailureOfTheDevice) {
  auto s = dev0.default_stream();  // listed first by the device, so named first
  auto t = dev0.create_stream();
  auto u = dev0.create_stream();
  auto other_device = dev1.create_stream();
  s->launch("first_op", [] { throw std::runtime_error("a"); });
  s->launch("second_op", [] { throw std::runtime_error("b"); });
  t->launch("third_op", [] { throw std::runtime_error("c"); });
  u->launch("fourth_op", [] { throw std::runtime_error("d"); });
  other_device->launch("elsewhere", [] { throw std::runtime_error("e"); });
  const std::string msg = failure_of([&] { dev0.synchronize(); });
  EXPECT_TRUE(contains(msg, "'first_op'")) << msg;
  EXPECT_TRUE(contains(msg, "(and 1 more failure on this stream)")) << msg;
  EXPECT_TRUE(contains(msg, "(and 2 more failures on other streams of openreg:0)")) << msg;
  // Taken: neither the device nor its streams report them again.
  EXPECT_NO_THROW(dev0.synchronize());
  EXPECT_NO_THROW(t->synchronize());
  EXPECT_NO_THROW(u->synchronize());
  // The other device's failure is untouched.
  EXPECT_TRUE(contains(failure_of([&] { dev1.synchronize(); }), "'elsewhere'"));
}

}  // namespace
}  // namespace openreg::sim
