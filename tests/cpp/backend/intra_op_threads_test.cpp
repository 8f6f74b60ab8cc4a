// A kernel's intra-op team (backend/engine/ExecuteThreads.h) is decided at issue from the program's
// issue order, never from the machine's timing (Note [A kernel's team is decided at issue]): every core
// but the issuing host's for a short kernel, every core for a long one (Note [The issuing host keeps a
// core]), split between the device's recently used streams and the devices the process has used (Note
// [Devices that share the cores]). The tests run in this order: device 1 is first used by the last one.

#include "backend/engine/ExecuteThreads.h"
#include "backend/runtime/Device.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

const bool g_env = [] {
  setenv("OPENREG_DEVICE_COUNT", "2", 1);
  return true;
}();

using at::openreg::IntraOpThreadsScope;
using at::openreg::team_at_issue;

int cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return CPU_COUNT(&set);
}

constexpr int kCap = 64;  // a device cap above any machine's cores: the machine's split decides
constexpr bool kShort = false;
constexpr bool kLong = true;

// Every core but the one the issuing host thread runs on.
int kernel_cores() { return std::max(1, cores() - 1); }

TEST(IntraOpThreads, AShortKernelLeavesTheHostACoreAndALongOneTakesEveryCore) {
  ASSERT_EQ(c10::openreg::device_count(), 2);
  EXPECT_EQ(team_at_issue(0, 0, kCap, kShort), kernel_cores());
  EXPECT_EQ(team_at_issue(0, 0, kCap, kLong), cores());
  EXPECT_EQ(team_at_issue(0, 0, 1, kLong), 1);  // the device's cap bounds it
}

TEST(IntraOpThreads, TheScopeSetsTheCountThatATensParallelForReads) {
  IntraOpThreadsScope scope(team_at_issue(0, 0, kCap, kLong));
  EXPECT_EQ(scope.threads(), cores());
  EXPECT_EQ(at::get_num_threads(), cores());
  IntraOpThreadsScope one(1);
  EXPECT_EQ(at::get_num_threads(), 1);
}

TEST(IntraOpThreads, TheTeamDoesNotDependOnWhenTheKernelIsIssued) {
  // The same issue order, issued at once and with pauses, gives the same teams: a team once followed
  // the kernels running at that instant, and a reduction's last bits followed the team.
  auto teams = [](bool pause) {
    std::vector<int> out;
    for (int i = 0; i < 12; ++i) {
      if (pause) std::this_thread::sleep_for(std::chrono::milliseconds(3));
      out.push_back(team_at_issue(0, i % 3 == 0 ? 7 : 0, kCap, i % 2 == 0 ? kShort : kLong));
    }
    return out;
  };
  const std::vector<int> first = teams(false);  // from here on, each run starts from the same window
  EXPECT_EQ(teams(false), first);
  EXPECT_EQ(teams(true), first);
}

TEST(IntraOpThreads, StreamsUsedTogetherSplitTheDeviceAndOneUsedAloneGetsItBack) {
  if (cores() < 2) GTEST_SKIP() << "needs 2 cores to see a split";
  team_at_issue(0, 1, kCap, kLong);
  EXPECT_EQ(team_at_issue(0, 2, kCap, kLong), cores() / 2);  // streams 1 and 2 alternate
  EXPECT_EQ(team_at_issue(0, 1, kCap, kLong), cores() / 2);
  for (int i = 0; i < 8; ++i) team_at_issue(0, 1, kCap, kLong);  // stream 2 leaves the window
  EXPECT_EQ(team_at_issue(0, 1, kCap, kLong), cores());
}

TEST(IntraOpThreads, ASecondDeviceInUseSplitsTheMachine) {
  if (cores() < 2) GTEST_SKIP() << "needs 2 cores to see a split";
  EXPECT_EQ(team_at_issue(0, 0, kCap, kLong), cores());  // device 1 never used yet
  EXPECT_EQ(team_at_issue(1, 0, kCap, kLong), cores() / 2);
  EXPECT_EQ(team_at_issue(0, 0, kCap, kLong), cores() / 2);
}

}  // namespace
