#include "backend/runtime/SimErrors.h"

#include <c10/util/Exception.h>

#include <openreg/sim/config.h>

namespace c10::openreg::detail {

namespace sim = ::openreg::sim;

namespace {
// The error code of an invalid-device AcceleratorError: CUDA's cudaErrorInvalidDevice, so code that
// inspects `err.error_code` reads the same value as on CUDA.
constexpr std::int32_t kInvalidDeviceErrorCode = 101;
}  // namespace

[[noreturn]] void throw_invalid_device(std::int64_t index, int count) {
  throw c10::AcceleratorError({__func__, __FILE__, static_cast<std::uint32_t>(__LINE__)}, kInvalidDeviceErrorCode,
                              c10::str("openreg error: invalid device ordinal ", index, ": valid device indices are ",
                                       count == 0 ? std::string("none (openreg has no devices)")
                                                  : c10::str("0..", count - 1, " (openreg has ", count,
                                                             count == 1 ? " device)" : " devices)")));
}

[[noreturn]] void rethrow_sim_error(const sim::Error& e) {
  using sim::Errc;
  switch (e.code()) {
    case Errc::kOutOfMemory:
      TORCH_CHECK_WITH(OutOfMemoryError, false, "openreg out of memory. ", e.what());
    case Errc::kInvalidDevice:
      throw c10::AcceleratorError({__func__, __FILE__, static_cast<std::uint32_t>(__LINE__)},
                                  kInvalidDeviceErrorCode, e.what());
    case Errc::kInvalidArgument:
    case Errc::kInvalidStream:
    case Errc::kInvalidEvent:
    case Errc::kNotTimed:
      TORCH_CHECK_VALUE(false, e.what());
    case Errc::kConfig: {
      const auto* config = dynamic_cast<const sim::ConfigError*>(&e);
      TORCH_CHECK(false, "openreg: invalid configuration",
                  config != nullptr ? " (" + config->variable() + ")" : std::string(), ": ", e.what());
    }
    case Errc::kInvalidPointer:
    case Errc::kWorkFailed:
    case Errc::kNotRecorded:
    case Errc::kNotReady:
      break;
  }
  TORCH_CHECK(false, "openreg: ", e.what());
}

}  // namespace c10::openreg::detail
