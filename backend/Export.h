#pragma once

// OPENREG_BACKEND_API marks what libopenreg_backend exports. The library is built with hidden
// visibility (-fvisibility=hidden, inlines hidden too): the Python module and the backend tests reach
// it only through declarations that carry this macro; everything else (the op engine, the kernels,
// the registrations, which run as static initializers) stays internal.
#define OPENREG_BACKEND_API __attribute__((visibility("default")))
