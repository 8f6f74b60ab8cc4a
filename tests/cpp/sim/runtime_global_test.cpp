// Runtime::global() with a malformed environment: the error is thrown on the first call and again on
// every later one (its own executable, since global() is built once per process).

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "openreg/sim/error.h"
#include "openreg/sim/runtime.h"

namespace openreg::sim {
namespace {

TEST(RuntimeGlobal, BadEnvironmentThrowsOnEveryCall) {
  setenv("OPENREG_DEVICE_COUNT", "lots", 1);
  for (int attempt = 0; attempt < 3; ++attempt) {
    try {
      Runtime::global();
      FAIL() << "global() started with a bad configuration";
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.variable(), "OPENREG_DEVICE_COUNT");
      EXPECT_NE(std::string(e.what()).find("'lots'"), std::string::npos);
    }
  }
  // Fixing the environment later does not matter: the configuration is read once.
  setenv("OPENREG_DEVICE_COUNT", "2", 1);
  EXPECT_THROW(Runtime::global(), ConfigError);
}

}  // namespace
}  // namespace openreg::sim
