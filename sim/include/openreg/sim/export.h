#pragma once

// OPENREG_SIM_API marks what libopenreg_sim exports. The library is built with hidden visibility
// (-fvisibility=hidden, inlines hidden too), so only the declarations in sim/include that carry this
// macro are part of its ABI; the private classes in sim/src stay internal and calls between them
// bind directly. The library is shared so that the process holds exactly one simulated runtime, however
// many of the backend, the Python module and a test binary link it.
#if defined(OPENREG_SIM_STATIC)
#define OPENREG_SIM_API
#else
#define OPENREG_SIM_API __attribute__((visibility("default")))
#endif
