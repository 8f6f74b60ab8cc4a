#pragma once
// Note [Sim errors cross into PyTorch once]
// The sim layer throws openreg::sim::Error subclasses carrying an Errc. Every backend entry point that
// calls into the sim wraps the call in translate_sim_errors, which rethrows them as the c10 error whose
// Python type a user of torch.cuda would expect. Nothing else in backend/ catches sim errors, and c10
// errors pass through untouched, so an error is translated exactly once.

#include <c10/util/Exception.h>

#include <openreg/sim/error.h>

#include <string>
#include <utility>

#include "backend/Export.h"

namespace c10::openreg {

namespace detail {
//! Rethrows the sim error `e` as the matching c10 error (never returns).
[[noreturn]] OPENREG_BACKEND_API void rethrow_sim_error(const ::openreg::sim::Error& e);
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
