#pragma once
// Byte counts for people: the sim's formatter, so messages and memory_summary read the same everywhere.

#include "backend/Export.h"

#include <cstdint>
#include <string>

namespace c10::openreg {

//! "512 B", "1.50 KiB", "2.00 GiB".
OPENREG_BACKEND_API std::string format_bytes(std::uint64_t bytes);

}  // namespace c10::openreg
