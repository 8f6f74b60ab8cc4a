#pragma once
// Note [Sim errors cross into PyTorch once]
// The sim layer throws openreg::sim::Error subclasses carrying an Errc. Every backend entry point that
// calls into the sim wraps the call in translate_sim_errors, which rethrows them as the c10 error whose
// Python type a user of torch.cuda would expect. Nothing else in backend/ catches sim errors, and c10
// errors pass through untouched, so an error is translated exactly once.

#include <c10/util/Exception.h>

#include <openreg/sim/error.h>

#include <cstdint>
#include <string>
#include <utility>

#include "backend/Export.h"

namespace c10::openreg {

//! Runs `fn`, translating sim errors into PyTorch errors: OutOfMemoryError → c10::OutOfMemoryError,
//! kInvalidDevice → c10::AcceleratorError, kInvalidArgument/kInvalidStream/kInvalidEvent/kNotTimed →
//! c10::ValueError, kConfig → c10::Error naming the variable, kWorkFailed and the rest → c10::Error
//! with the sim's message (the failed item's name included).
template <typename Fn>
decltype(auto) translate_sim_errors(Fn&& fn);

namespace detail {
//! Rethrows the sim error `e` as the matching c10 error (never returns).
[[noreturn]] OPENREG_BACKEND_API void rethrow_sim_error(const ::openreg::sim::Error& e);
//! Throws the c10::AcceleratorError of a bad device index (CUDA's "invalid device ordinal", with its
//! error code), naming the valid range of `count` devices.
[[noreturn]] void throw_invalid_device(std::int64_t index, int count);
}  // namespace detail

template <typename Fn>
decltype(auto) translate_sim_errors(Fn&& fn) {
  try {
    return std::forward<Fn>(fn)();
  } catch (const ::openreg::sim::Error& e) {
    detail::rethrow_sim_error(e);
  }
}

}  // namespace c10::openreg
