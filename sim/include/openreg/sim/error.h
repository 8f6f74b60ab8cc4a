#pragma once
// Typed errors of the simulated runtime. The backend translates these, once, at its boundary into
// PyTorch's exception types (Note [Sim errors cross into PyTorch once] in backend/runtime/SimErrors.h).

#include <cstdint>
#include <stdexcept>
#include <string>

#include "openreg/sim/export.h"

namespace openreg::sim {

//! What went wrong, so callers can map errors without parsing messages.
enum class Errc {
  kInvalidArgument,  //!< a malformed argument (zero-sized where not allowed, null pointer, bad flag)
  kInvalidDevice,    //!< device index out of range
  kInvalidStream,    //!< unknown or destroyed stream, or a stream of another device
  kInvalidEvent,     //!< event misuse (elapsed time across devices, ...)
  kInvalidPointer,   //!< pointer not owned by the allocator asked to free it, or freed twice
  kOutOfMemory,      //!< device capacity exhausted
  kWorkFailed,       //!< a work item threw; reported at the next query/synchronize
  kNotTimed,         //!< elapsed time asked of an event created without timing
  kNotRecorded,      //!< elapsed time asked of an event that was never recorded
  kNotReady,         //!< elapsed time asked of an event whose record has not completed yet
  kConfig,           //!< malformed configuration (environment variable)
};

//! Base of every error the sim layer throws. Thread-safe to copy; carries no references.
class OPENREG_SIM_API Error : public std::runtime_error {
 public:
  Error(Errc code, const std::string& message) : std::runtime_error(message), code_(code) {}
  //! The category of this error.
  Errc code() const noexcept { return code_; }

 private:
  Errc code_;
};

//! Device memory exhausted. The message says how much was asked, in use and available.
class OPENREG_SIM_API OutOfMemoryError : public Error {
 public:
  OutOfMemoryError(int device, std::uint64_t requested, std::uint64_t in_use, std::uint64_t capacity);
  int device() const noexcept { return device_; }                    //!< device that ran out
  std::uint64_t requested() const noexcept { return requested_; }    //!< bytes asked for
  std::uint64_t in_use() const noexcept { return in_use_; }          //!< bytes allocated at the time
  std::uint64_t capacity() const noexcept { return capacity_; }      //!< the device's capacity

 private:
  int device_;
  std::uint64_t requested_, in_use_, capacity_;
};

//! A malformed OPENREG_* environment variable (or Config field); names the variable.
class OPENREG_SIM_API ConfigError : public Error {
 public:
  ConfigError(std::string variable, const std::string& message)
      : Error(Errc::kConfig, message), variable_(std::move(variable)) {}
  const std::string& variable() const noexcept { return variable_; }  //!< e.g. "OPENREG_DEVICE_COUNT"

 private:
  std::string variable_;
};

//! "512 B", "1.50 KiB", "2.00 GiB" (binary units, two decimals from KiB up): the sizes in the sim's
//! messages, and the one byte formatter of the project (torch.openreg.memory_summary uses it too).
OPENREG_SIM_API std::string format_bytes(std::uint64_t bytes);

}  // namespace openreg::sim
