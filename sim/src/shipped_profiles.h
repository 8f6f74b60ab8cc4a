#pragma once
// The device profiles shipped in sim/profiles/, built into the library (sim/cmake/embed_profiles.cmake).

#include <string_view>
#include <vector>

namespace openreg::sim::detail {

struct ShippedProfile {
  std::string_view name;  //!< the file's stem, e.g. "h100-sxm"
  std::string_view text;  //!< the file's contents
};

//! Sorted by name (the files' order in CMake's glob).
const std::vector<ShippedProfile>& shipped_profiles();

}  // namespace openreg::sim::detail
