// Configuration: byte-size parsing, each OPENREG_* variable's good and bad values, defaults.

#include "openreg/sim/config.h"

#include <gtest/gtest.h>

#include <sched.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "openreg/sim/error.h"

namespace openreg::sim {
namespace {

// Sets/unsets the OPENREG_* variables for one test and restores them after.
class EnvTest : public ::testing::Test {
 protected:
  static constexpr const char* kVars[] = {"OPENREG_DEVICE_COUNT", "OPENREG_COMPUTE_THREADS",
                                          "OPENREG_MEMORY_CAPACITY", "OPENREG_COPY_BANDWIDTH",
                                          "OPENREG_LAUNCH_QUEUE_DEPTH", "OPENREG_SANITIZER"};
  void SetUp() override {
    for (const char* v : kVars) {
      const char* old = std::getenv(v);
      saved_[v] = old ? std::optional<std::string>(old) : std::nullopt;
      unsetenv(v);
    }
  }
  void TearDown() override {
    for (auto& [k, v] : saved_) {
      if (v) setenv(k.c_str(), v->c_str(), 1);
      else unsetenv(k.c_str());
    }
  }
  // The ConfigError from_env throws with `var=value`; fails the test if none.
  static ConfigError error_for(const char* var, const char* value) {
    setenv(var, value, 1);
    try {
      Config::from_env();
    } catch (const ConfigError& e) {
      unsetenv(var);
      return e;
    }
    unsetenv(var);
    ADD_FAILURE() << var << "=" << value << " was accepted";
    return ConfigError("", "");
  }
  std::map<std::string, std::optional<std::string>> saved_;
};

TEST(ParseByteSize, AcceptsPlainAndSuffixedSizes) {
  EXPECT_EQ(parse_byte_size("1048576", "V"), 1048576u);
  EXPECT_EQ(parse_byte_size("0", "V"), 0u);
  EXPECT_EQ(parse_byte_size("512K", "V"), 512u << 10);
  EXPECT_EQ(parse_byte_size("512k", "V"), 512u << 10);
  EXPECT_EQ(parse_byte_size("64MiB", "V"), 64u << 20);
  EXPECT_EQ(parse_byte_size("64MB", "V"), 64u << 20);
  EXPECT_EQ(parse_byte_size("1.5G", "V"), 3ull << 29);
  EXPECT_EQ(parse_byte_size("2GB", "V"), 2ull << 30);
  EXPECT_EQ(parse_byte_size("1T", "V"), 1ull << 40);
  EXPECT_EQ(parse_byte_size("100B", "V"), 100u);
  EXPECT_EQ(parse_byte_size(" 8 G ", "V"), 8ull << 30);
}

TEST(ParseByteSize, RejectsMalformedSizesNamingTheVariable) {
  for (const char* bad : {"", "abc", "-1", "1.2.3", "12X", "1GiBs", ".5G", "5.G", "1e9", "1iB", "99999999999T"}) {
    try {
      parse_byte_size(bad, "OPENREG_MEMORY_CAPACITY");
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.code(), Errc::kConfig);
      EXPECT_EQ(e.variable(), "OPENREG_MEMORY_CAPACITY");
      const std::string msg = e.what();
      EXPECT_NE(msg.find("OPENREG_MEMORY_CAPACITY"), std::string::npos) << msg;
      EXPECT_NE(msg.find(std::string("'") + bad + "'"), std::string::npos) << msg;
    }
  }
}

TEST_F(EnvTest, DefaultsWhenNothingIsSet) {
  Config c = Config::from_env();
  EXPECT_EQ(c.device_count, 2);
  EXPECT_GE(c.compute_threads, 1);
  EXPECT_GT(c.memory_capacity, 0u);
  EXPECT_EQ(c.copy_bandwidth, kUnlimitedBandwidth);
}

TEST_F(EnvTest, ReadsEveryVariable) {
  setenv("OPENREG_DEVICE_COUNT", "5", 1);
  setenv("OPENREG_COMPUTE_THREADS", "3", 1);
  setenv("OPENREG_MEMORY_CAPACITY", "256M", 1);
  setenv("OPENREG_COPY_BANDWIDTH", "2GB/s", 1);
  Config c = Config::from_env();
  EXPECT_EQ(c.device_count, 5);
  EXPECT_EQ(c.compute_threads, 3);
  EXPECT_EQ(c.memory_capacity, 256u << 20);
  EXPECT_EQ(c.copy_bandwidth, 2ull << 30);
  setenv("OPENREG_COPY_BANDWIDTH", "unlimited", 1);
  EXPECT_EQ(Config::from_env().copy_bandwidth, kUnlimitedBandwidth);
  setenv("OPENREG_COPY_BANDWIDTH", "0", 1);
  EXPECT_EQ(Config::from_env().copy_bandwidth, kUnlimitedBandwidth);
  setenv("OPENREG_DEVICE_COUNT", "64", 1);
  EXPECT_EQ(Config::from_env().device_count, 64);
  setenv("OPENREG_DEVICE_COUNT", "1", 1);
  EXPECT_EQ(Config::from_env().device_count, 1);
}

TEST_F(EnvTest, LaunchQueueDepthDefaultsToAboutCudasAndAcceptsItsRange) {
  EXPECT_EQ(Config::from_env().launch_queue_depth, 1024u);
  EXPECT_EQ(kDefaultLaunchQueueDepth, 1024u);
  setenv("OPENREG_LAUNCH_QUEUE_DEPTH", "1", 1);
  EXPECT_EQ(Config::from_env().launch_queue_depth, 1u);
  setenv("OPENREG_LAUNCH_QUEUE_DEPTH", " 64 ", 1);
  EXPECT_EQ(Config::from_env().launch_queue_depth, 64u);
  setenv("OPENREG_LAUNCH_QUEUE_DEPTH", "1048576", 1);
  EXPECT_EQ(Config::from_env().launch_queue_depth, kMaxLaunchQueueDepth);
}

TEST_F(EnvTest, BadLaunchQueueDepthNamesTheVariableAndTheRange) {
  for (const char* bad : {"0", "-1", "1048577", "many", "1.5", "16K", "99999999999999999999"}) {
    ConfigError e = error_for("OPENREG_LAUNCH_QUEUE_DEPTH", bad);
    const std::string msg = e.what();
    EXPECT_EQ(e.variable(), "OPENREG_LAUNCH_QUEUE_DEPTH");
    EXPECT_NE(msg.find("OPENREG_LAUNCH_QUEUE_DEPTH"), std::string::npos) << msg;
    EXPECT_NE(msg.find("1 to 1048576"), std::string::npos) << msg;
  }
  Config c;
  c.launch_queue_depth = 0;
  EXPECT_THROW(c.resolved(), ConfigError);
}

// Used to mean "unlimited" (0.4 rounded to 0): a rate the engines cannot honour is refused instead.
TEST_F(EnvTest, CopyBandwidthRejectsRatesItCannotHonour) {
  for (const char* bad : {"0.4", "0.5", "1.5", "0.4G/s", "1.0000000001K", "16777216T", "99999999999999999999", "-1"}) {
    ConfigError e = error_for("OPENREG_COPY_BANDWIDTH", bad);
    const std::string msg = e.what();
    EXPECT_EQ(e.variable(), "OPENREG_COPY_BANDWIDTH");
    EXPECT_NE(msg.find("OPENREG_COPY_BANDWIDTH"), std::string::npos) << msg;
    EXPECT_NE(msg.find("whole number of bytes"), std::string::npos) << msg;
  }
  // Documented values keep working: 0 and unlimited mean no limit; fractions of a suffix that come to
  // whole bytes are fine.
  for (auto [text, value] : {std::pair<const char*, std::uint64_t>{"0", kUnlimitedBandwidth},
                             {"0.0", kUnlimitedBandwidth},
                             {"unlimited", kUnlimitedBandwidth},
                             {"1", 1},
                             {"1G", 1ull << 30},
                             {"1.5G", 3ull << 29},
                             {"0.5K", 512},
                             {"500M/s", 500ull << 20}}) {
    setenv("OPENREG_COPY_BANDWIDTH", text, 1);
    EXPECT_EQ(Config::from_env().copy_bandwidth, value) << text;
  }
}

TEST_F(EnvTest, DerivedThreadsLetEveryDeviceUseEveryCore) {
  // Note [Elastic device concurrency]: a cap per arena, not a split of the cores between devices.
  setenv("OPENREG_DEVICE_COUNT", "1", 1);
  const int one = Config::from_env().compute_threads;
  setenv("OPENREG_DEVICE_COUNT", "64", 1);
  EXPECT_EQ(Config::from_env().compute_threads, one);
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  EXPECT_EQ(one, CPU_COUNT(&set));  // the cores this process may run on
}

TEST_F(EnvTest, BadValuesNameTheVariableTheValueAndWhatIsAccepted) {
  struct Case {
    const char* var;
    const char* value;
    const char* accepted;
  };
  for (const Case& c : {Case{"OPENREG_DEVICE_COUNT", "0", "1 to 64"}, Case{"OPENREG_DEVICE_COUNT", "65", "1 to 64"},
                        Case{"OPENREG_DEVICE_COUNT", "two", "1 to 64"}, Case{"OPENREG_DEVICE_COUNT", "-1", "1 to 64"},
                        Case{"OPENREG_DEVICE_COUNT", "2.5", "1 to 64"},
                        Case{"OPENREG_COMPUTE_THREADS", "0", "integer"}, Case{"OPENREG_COMPUTE_THREADS", "x", "integer"},
                        Case{"OPENREG_MEMORY_CAPACITY", "lots", "byte size"},
                        Case{"OPENREG_MEMORY_CAPACITY", "0", "greater than 0"},
                        Case{"OPENREG_COPY_BANDWIDTH", "fast", "byte size"},
                        Case{"OPENREG_COPY_BANDWIDTH", "-5G", "byte size"}}) {
    ConfigError e = error_for(c.var, c.value);
    const std::string msg = e.what();
    EXPECT_EQ(e.variable(), c.var);
    EXPECT_EQ(e.code(), Errc::kConfig);
    EXPECT_NE(msg.find(c.var), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::string("'") + c.value + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.accepted), std::string::npos) << msg;
  }
}

// OPENREG_SANITIZER used to be parsed by a static initializer of the backend, where a bad value aborted
// every process that loaded it (`import torch` included); it is parsed with the others now.
TEST_F(EnvTest, SanitizerModeIsParsedWithTheOtherVariables) {
  EXPECT_EQ(Config::from_env().race_check, RaceCheckMode::kOff);
  for (const auto& [value, mode] :
       {std::pair{"0", RaceCheckMode::kOff}, std::pair{"1", RaceCheckMode::kRaise},
        std::pair{"report", RaceCheckMode::kReport}, std::pair{" 1 ", RaceCheckMode::kRaise},
        std::pair{"REPORT", RaceCheckMode::kReport}, std::pair{"", RaceCheckMode::kOff}}) {
    setenv("OPENREG_SANITIZER", value, 1);
    EXPECT_EQ(Config::from_env().race_check, mode) << "'" << value << "'";
  }
  unsetenv("OPENREG_SANITIZER");
  for (const char* bad : {"raise", "yes", "off", "2", "true", "report!"}) {
    ConfigError e = error_for("OPENREG_SANITIZER", bad);
    const std::string msg = e.what();
    EXPECT_EQ(e.variable(), "OPENREG_SANITIZER");
    EXPECT_NE(msg.find(std::string("'") + bad + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("0 (off), 1 (raise"), std::string::npos) << msg;
    EXPECT_NE(msg.find("or report"), std::string::npos) << msg;
  }
}

TEST(ConfigResolved, ValidatesExplicitConfigs) {
  Config c;
  c.device_count = 0;
  EXPECT_THROW(c.resolved(), ConfigError);
  c.device_count = 3;
  c.compute_threads = 2;
  c.memory_capacity = 1000;
  Config r = c.resolved();
  EXPECT_EQ(r.device_count, 3);
  EXPECT_EQ(r.compute_threads, 2);
  EXPECT_EQ(r.memory_capacity, 1000u);
}

}  // namespace
}  // namespace openreg::sim
