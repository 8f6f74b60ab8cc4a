#include "backend/runtime/FormatBytes.h"

#include <openreg/sim/error.h>  // sim::format_bytes

namespace c10::openreg {

std::string format_bytes(std::uint64_t bytes) { return ::openreg::sim::format_bytes(bytes); }

}  // namespace c10::openreg
