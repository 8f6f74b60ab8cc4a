#pragma once
// Internal invariants (our bugs, not the user's): abort with a message, in every build type.
// User errors are thrown as openreg::sim::Error (see throw_error below).

#include <cstdio>
#include <cstdlib>
#include <string>

#include "openreg/sim/error.h"

#define OPENREG_SIM_ASSERT(cond, msg)                                                             \
  do {                                                                                            \
    if (!(cond)) {                                                                                \
      std::fprintf(stderr, "openreg sim internal error at %s:%d: %s (%s)\n", __FILE__, __LINE__,  \
                   #cond, msg);                                                                   \
      std::abort();                                                                               \
    }                                                                                             \
  } while (false)

namespace openreg::sim {

[[noreturn]] inline void throw_error(Errc code, const std::string& message) { throw Error(code, message); }

}  // namespace openreg::sim
