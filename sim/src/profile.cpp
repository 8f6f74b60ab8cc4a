#include "openreg/sim/profile.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "openreg/sim/error.h"
#include "shipped_profiles.h"

namespace openreg::sim {

const char* number_format_name(NumberFormat format) noexcept {
  switch (format) {
    case NumberFormat::kFp64: return "fp64";
    case NumberFormat::kFp32: return "fp32";
    case NumberFormat::kTf32: return "tf32";
    case NumberFormat::kBf16: return "bf16";
    case NumberFormat::kFp16: return "fp16";
    case NumberFormat::kFp8: return "fp8";
    case NumberFormat::kInt8: return "int8";
  }
  return "?";
}

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// One profile field: how its text becomes the struct's value. Fields marked `required` must appear;
// the per-format peaks may be left out (0: the unit lacks the format).
struct Field {
  bool required;
  // `number(lo, hi, whole)` parses the value as a number in [lo, hi] (a whole one if `whole`), or throws.
  std::function<void(DeviceProfile&, std::string_view value, const std::function<double(double, double, bool)>& number)>
      set;
  bool may_be_zero = false;  // a required number that may be 0 (required ones are positive otherwise)
};

// A positive number of `unit`s, scaled to the struct's unit.
Field number_field(double DeviceProfile::*member, double scale, bool required = true) {
  return {required, [member, scale](DeviceProfile& p, std::string_view, const auto& number) {
            p.*member = number(0, 1e30, false) * scale;
          }};
}
Field int_field(int DeviceProfile::*member) {
  return {true, [member](DeviceProfile& p, std::string_view, const auto& number) {
            p.*member = static_cast<int>(number(1, 1e6, true));
          }};
}
Field bytes_field(std::uint64_t DeviceProfile::*member, double scale) {
  return {true, [member, scale](DeviceProfile& p, std::string_view, const auto& number) {
            p.*member = static_cast<std::uint64_t>(number(0, 1e9, false) * scale);
          }};
}
Field text_field(std::string DeviceProfile::*member) {
  return {true, [member](DeviceProfile& p, std::string_view value, const auto&) { p.*member = std::string(value); }};
}

const std::map<std::string, Field, std::less<>>& fields() {
  static const auto* all = [] {
    auto* f = new std::map<std::string, Field, std::less<>>;  // leaked: read during exit too
    constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
    constexpr double kMiB = 1024.0 * 1024.0;
    (*f)["name"] = text_field(&DeviceProfile::name);
    (*f)["display_name"] = text_field(&DeviceProfile::display_name);
    (*f)["sm_count"] = int_field(&DeviceProfile::sm_count);
    (*f)["l2_mib"] = bytes_field(&DeviceProfile::l2_bytes, kMiB);
    (*f)["memory_gib"] = bytes_field(&DeviceProfile::memory_bytes, kGiB);
    for (int i = 0; i < kNumberFormats; ++i) {
      const std::string format = number_format_name(static_cast<NumberFormat>(i));
      (*f)["tensor_tflops." + format] = {false, [i](DeviceProfile& p, std::string_view, const auto& number) {
                                           p.tensor_flops[i] = number(0, 1e6, false) * 1e12;
                                         }};
      (*f)["vector_tflops." + format] = {false, [i](DeviceProfile& p, std::string_view, const auto& number) {
                                           p.vector_flops[i] = number(0, 1e6, false) * 1e12;
                                         }};
    }
    (*f)["gemm_efficiency"] = {true, [](DeviceProfile& p, std::string_view, const auto& number) {
                                 p.gemm_efficiency = number(0.01, 1, false);
                               }};
    (*f)["gemm_tile"] = int_field(&DeviceProfile::gemm_tile);
    (*f)["memory_gbps"] = number_field(&DeviceProfile::memory_bandwidth, 1e9);
    (*f)["memory_efficiency"] = {true, [](DeviceProfile& p, std::string_view, const auto& number) {
                                   p.memory_efficiency = number(0.01, 1, false);
                                 }};
    (*f)["h2d_pinned_gbps"] = number_field(&DeviceProfile::h2d_pinned, 1e9);
    (*f)["d2h_pinned_gbps"] = number_field(&DeviceProfile::d2h_pinned, 1e9);
    (*f)["h2d_pageable_gbps"] = number_field(&DeviceProfile::h2d_pageable, 1e9);
    (*f)["d2h_pageable_gbps"] = number_field(&DeviceProfile::d2h_pageable, 1e9);
    (*f)["host_link_latency_us"] = number_field(&DeviceProfile::host_link_latency_ns, 1e3);
    (*f)["peer_gbps"] = number_field(&DeviceProfile::peer_bandwidth, 1e9);
    (*f)["peer_latency_us"] = number_field(&DeviceProfile::peer_latency_ns, 1e3);
    (*f)["copy_engines"] = int_field(&DeviceProfile::copy_engines);
    (*f)["launch_us"] = number_field(&DeviceProfile::launch_ns, 1e3);
    (*f)["host_op_us"] = number_field(&DeviceProfile::host_op_ns, 1e3);
    (*f)["min_kernel_us"] = number_field(&DeviceProfile::min_kernel_ns, 1e3);
    (*f)["event_record_us"] = number_field(&DeviceProfile::event_record_ns, 1e3);
    (*f)["ranks_per_node"] = int_field(&DeviceProfile::ranks_per_node);
    (*f)["ring_bus_gbps"] = number_field(&DeviceProfile::ring_bus_bandwidth, 1e9);
    (*f)["ll_bus_gbps"] = number_field(&DeviceProfile::ll_bus_bandwidth, 1e9);
    (*f)["nvls_bus_gbps"] = number_field(&DeviceProfile::nvls_bus_bandwidth, 1e9, /*required=*/false);
    (*f)["ll_latency_us"] = number_field(&DeviceProfile::ll_latency_ns, 1e3);
    (*f)["simple_latency_us"] = number_field(&DeviceProfile::simple_latency_ns, 1e3);
    (*f)["nvls_latency_us"] = number_field(&DeviceProfile::nvls_latency_ns, 1e3, /*required=*/false);
    (*f)["hop_latency_us"] = number_field(&DeviceProfile::hop_latency_ns, 1e3);
    (*f)["network_gbps"] = number_field(&DeviceProfile::network_bandwidth, 1e9);
    (*f)["network_ll_bus_gbps"] = number_field(&DeviceProfile::network_ll_bus_bandwidth, 1e9);
    (*f)["network_latency_us"] = number_field(&DeviceProfile::network_latency_ns, 1e3);
    (*f)["network_setup_us"] = number_field(&DeviceProfile::network_setup_ns, 1e3);
    (*f)["comm_compute_slowdown"] = {true,
                                     [](DeviceProfile& p, std::string_view, const auto& number) {
                                       p.comm_compute_slowdown = number(0, 1, false);
                                     },
                                     /*may_be_zero=*/true};
    return f;
  }();
  return *all;
}

}  // namespace

std::vector<std::string> shipped_profile_names() {
  std::vector<std::string> names;
  for (const auto& p : detail::shipped_profiles()) names.emplace_back(p.name);
  return names;
}

std::shared_ptr<const DeviceProfile> parse_device_profile(std::string_view text, std::string_view origin,
                                                          std::string_view variable) {
  const std::string var(variable);
  auto fail = [&](int line, const std::string& what) -> void {
    throw ConfigError(var, var + ": profile " + std::string(origin) +
                               (line > 0 ? ", line " + std::to_string(line) : std::string()) + ": " + what);
  };
  auto profile = std::make_shared<DeviceProfile>();
  std::set<std::string, std::less<>> seen;
  int line_no = 0;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t end = std::min(text.find('\n', pos), text.size());
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    const std::size_t hash = line.find('#');
    const std::string_view source = hash == std::string_view::npos ? std::string_view() : trim(line.substr(hash + 1));
    line = trim(line.substr(0, hash));
    if (line.empty()) continue;
    const std::size_t eq = line.find('=');
    if (eq == std::string_view::npos) fail(line_no, "expected `key = value  # source`, got '" + std::string(line) + "'");
    const std::string_view key = trim(line.substr(0, eq));
    const std::string_view value = trim(line.substr(eq + 1));
    auto it = fields().find(key);
    if (it == fields().end()) fail(line_no, "unknown field '" + std::string(key) + "'");
    if (!seen.insert(std::string(key)).second) fail(line_no, "field '" + std::string(key) + "' given twice");
    if (value.empty()) fail(line_no, "field '" + std::string(key) + "' has no value");
    if (source.empty()) fail(line_no, "field '" + std::string(key) + "' names no source (a `# ...` comment after the value)");
    // Required numbers must be positive; optional ones (the per-format peaks) may be 0.
    const bool positive = it->second.required && !it->second.may_be_zero;
    auto number = [&](double lo, double hi, bool whole = false) {
      const std::string v(value);
      char* stop = nullptr;
      errno = 0;
      const double d = std::strtod(v.c_str(), &stop);
      if (stop != v.c_str() + v.size() || errno != 0 || !std::isfinite(d) || d < lo || d > hi ||
          (positive && d <= 0) || (whole && d != std::floor(d))) {
        std::ostringstream accepted;
        accepted << (whole ? "a whole number" : positive ? "a positive number" : "a number") << " from " << lo << " to "
                 << hi;
        fail(line_no, "field '" + std::string(key) + "' = '" + v + "' is invalid: expected " + accepted.str());
      }
      return d;
    };
    it->second.set(*profile, value, number);
  }
  for (const auto& [key, field] : fields()) {
    if (field.required && seen.find(key) == seen.end()) fail(0, "missing field '" + key + "'");
  }
  const auto bf16 = static_cast<int>(NumberFormat::kBf16);
  const auto fp32 = static_cast<int>(NumberFormat::kFp32);
  if (profile->tensor_flops[bf16] <= 0) fail(0, "missing field 'tensor_tflops.bf16' (every profile needs its matrix peak)");
  if (profile->vector_flops[fp32] <= 0) fail(0, "missing field 'vector_tflops.fp32' (every profile needs its vector peak)");
  return profile;
}

std::shared_ptr<const DeviceProfile> load_device_profile(std::string_view name_or_path, std::string_view variable) {
  for (const auto& shipped : detail::shipped_profiles()) {
    if (shipped.name == name_or_path) return parse_device_profile(shipped.text, shipped.name, variable);
  }
  const std::string path(name_or_path);
  if (path.find('/') == std::string::npos && path.find('.') == std::string::npos) {
    std::string names;
    for (const auto& n : shipped_profile_names()) names += (names.empty() ? "" : ", ") + n;
    const std::string var(variable);
    throw ConfigError(var, var + "='" + path + "' is invalid: expected a shipped profile (" + names +
                               ") or the path of a profile file");
  }
  std::ifstream in(path);
  if (!in) {
    const std::string var(variable);
    throw ConfigError(var, var + "='" + path + "' is invalid: no profile file can be read at that path");
  }
  std::stringstream text;
  text << in.rdbuf();
  return parse_device_profile(text.str(), path, variable);
}

}  // namespace openreg::sim
