#include "openreg/sim/profile.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <system_error>

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

// Note [Physical ranges of profile values]
// A profile's numbers become divisors and multipliers of the virtual clock (integer nanoseconds), so a
// value far outside what any chip has is not a bold assumption but a broken clock: memory_gbps = 1e-12
// overflowed a 256 MiB copy's time into 0.009 ms, tensor_tflops.bf16 = 1e-30 gave an MFU of 4e31,
// and launch_us = 1e30 wrapped to 0 µs per op. Each kind of value therefore has a range, generous around
// today's hardware (1 MB/s to 1 PB/s, 1 GFLOP/s to 1 EFLOP/s) yet small enough that no product of a range's
// ends with a realistic op (1 TiB moved, 1e18 FLOPs) leaves the clock's 292 years. Values outside it are
// refused with the field, the line and the range, never clamped.
struct Range {
  double lo;
  double hi;
  const char* what;  // "a bandwidth in GB/s": completes "expected ..." in errors
  bool whole = false;
};
constexpr Range kBandwidthGbps{1e-3, 1e6, "a bandwidth in GB/s"};  // 1 MB/s .. 1 PB/s
constexpr Range kPeakTflops{1e-3, 1e6, "a peak in TFLOP/s"};       // 1 GFLOP/s .. 1 EFLOP/s
constexpr Range kTimeUs{1e-3, 1e6, "a time in microseconds"};                // 1 ns .. 1 s
constexpr Range kEfficiency{0.01, 1, "a fraction of the peak"};
constexpr Range kSlowdown{0, 1, "a fraction"};
constexpr Range kMemoryGib{1e-3, 16384, "a capacity in GiB"};  // 1 MiB .. 16 TiB
constexpr Range kCacheMib{1e-3, 65536, "a size in MiB"};
constexpr Range kUnits{1, 1e5, "a whole number of units", true};  // SMs (CUs)
constexpr Range kTile{1, 65536, "a whole tile edge", true};
constexpr Range kEngines{1, 64, "a whole number of copy engines", true};
constexpr Range kRanks{1, 65536, "a whole number of GPUs per node", true};
constexpr Range kKeys{1, 1e7, "a number of keys per query"};

// One profile field: its range and how its value becomes the struct's. Fields marked `required` must
// appear; the optional ones (the per-format peaks, NVLS) may be left out or be 0 (the chip lacks it), as
// may `comm_compute_slowdown` (no slowdown) and the attention fields (attention costed as a GEMM).
struct Field {
  bool required;
  const Range* range;  // nullptr: a text field
  std::function<void(DeviceProfile&, std::string_view text, double number)> set;
  bool may_be_zero = false;
};

// A number of `range`'s unit, scaled to the struct's unit.
template <typename T>
Field number_field(T DeviceProfile::*member, const Range& range, double scale, bool required = true) {
  return {required, &range, [member, scale](DeviceProfile& p, std::string_view, double v) {
            p.*member = static_cast<T>(v * scale);
          }, !required};
}
Field text_field(std::string DeviceProfile::*member) {
  return {true, nullptr,
          [member](DeviceProfile& p, std::string_view value, double) { p.*member = std::string(value); }};
}

const std::map<std::string, Field, std::less<>>& fields() {
  static const auto* all = [] {
    auto* f = new std::map<std::string, Field, std::less<>>;  // leaked: read during exit too
    constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
    constexpr double kMiB = 1024.0 * 1024.0;
    (*f)["name"] = text_field(&DeviceProfile::name);
    (*f)["display_name"] = text_field(&DeviceProfile::display_name);
    (*f)["sm_count"] = number_field(&DeviceProfile::sm_count, kUnits, 1);
    (*f)["l2_mib"] = number_field(&DeviceProfile::l2_bytes, kCacheMib, kMiB);
    (*f)["memory_gib"] = number_field(&DeviceProfile::memory_bytes, kMemoryGib, kGiB);
    for (int i = 0; i < kNumberFormats; ++i) {
      const std::string format = number_format_name(static_cast<NumberFormat>(i));
      (*f)["tensor_tflops." + format] = {
          false, &kPeakTflops, [i](DeviceProfile& p, std::string_view, double v) { p.tensor_flops[i] = v * 1e12; },
          true};
      (*f)["vector_tflops." + format] = {
          false, &kPeakTflops, [i](DeviceProfile& p, std::string_view, double v) { p.vector_flops[i] = v * 1e12; },
          true};
    }
    (*f)["gemm_efficiency"] = number_field(&DeviceProfile::gemm_efficiency, kEfficiency, 1);
    (*f)["gemm_tile"] = number_field(&DeviceProfile::gemm_tile, kTile, 1);
    (*f)["attention_forward_efficiency"] =
        number_field(&DeviceProfile::attention_forward_efficiency, kEfficiency, 1, /*required=*/false);
    (*f)["attention_backward_efficiency"] =
        number_field(&DeviceProfile::attention_backward_efficiency, kEfficiency, 1, /*required=*/false);
    (*f)["attention_half_keys"] = number_field(&DeviceProfile::attention_half_keys, kKeys, 1, /*required=*/false);
    (*f)["memory_gbps"] = number_field(&DeviceProfile::memory_bandwidth, kBandwidthGbps, 1e9);
    (*f)["memory_efficiency"] = number_field(&DeviceProfile::memory_efficiency, kEfficiency, 1);
    (*f)["h2d_pinned_gbps"] = number_field(&DeviceProfile::h2d_pinned, kBandwidthGbps, 1e9);
    (*f)["d2h_pinned_gbps"] = number_field(&DeviceProfile::d2h_pinned, kBandwidthGbps, 1e9);
    (*f)["h2d_pageable_gbps"] = number_field(&DeviceProfile::h2d_pageable, kBandwidthGbps, 1e9);
    (*f)["d2h_pageable_gbps"] = number_field(&DeviceProfile::d2h_pageable, kBandwidthGbps, 1e9);
    (*f)["host_link_latency_us"] = number_field(&DeviceProfile::host_link_latency_ns, kTimeUs, 1e3);
    (*f)["peer_gbps"] = number_field(&DeviceProfile::peer_bandwidth, kBandwidthGbps, 1e9);
    (*f)["peer_latency_us"] = number_field(&DeviceProfile::peer_latency_ns, kTimeUs, 1e3);
    (*f)["copy_engines"] = number_field(&DeviceProfile::copy_engines, kEngines, 1);
    (*f)["launch_us"] = number_field(&DeviceProfile::launch_ns, kTimeUs, 1e3);
    (*f)["host_op_us"] = number_field(&DeviceProfile::host_op_ns, kTimeUs, 1e3);
    (*f)["min_kernel_us"] = number_field(&DeviceProfile::min_kernel_ns, kTimeUs, 1e3);
    (*f)["event_record_us"] = number_field(&DeviceProfile::event_record_ns, kTimeUs, 1e3);
    (*f)["ranks_per_node"] = number_field(&DeviceProfile::ranks_per_node, kRanks, 1);
    (*f)["ring_bus_gbps"] = number_field(&DeviceProfile::ring_bus_bandwidth, kBandwidthGbps, 1e9);
    (*f)["ll_bus_gbps"] = number_field(&DeviceProfile::ll_bus_bandwidth, kBandwidthGbps, 1e9);
    (*f)["nvls_bus_gbps"] = number_field(&DeviceProfile::nvls_bus_bandwidth, kBandwidthGbps, 1e9, /*required=*/false);
    (*f)["ll_latency_us"] = number_field(&DeviceProfile::ll_latency_ns, kTimeUs, 1e3);
    (*f)["simple_latency_us"] = number_field(&DeviceProfile::simple_latency_ns, kTimeUs, 1e3);
    (*f)["nvls_latency_us"] = number_field(&DeviceProfile::nvls_latency_ns, kTimeUs, 1e3, /*required=*/false);
    (*f)["hop_latency_us"] = number_field(&DeviceProfile::hop_latency_ns, kTimeUs, 1e3);
    (*f)["network_gbps"] = number_field(&DeviceProfile::network_bandwidth, kBandwidthGbps, 1e9);
    (*f)["network_ll_bus_gbps"] = number_field(&DeviceProfile::network_ll_bus_bandwidth, kBandwidthGbps, 1e9);
    (*f)["network_latency_us"] = number_field(&DeviceProfile::network_latency_ns, kTimeUs, 1e3);
    (*f)["network_setup_us"] = number_field(&DeviceProfile::network_setup_ns, kTimeUs, 1e3);
    Field slowdown = number_field(&DeviceProfile::comm_compute_slowdown, kSlowdown, 1);
    slowdown.may_be_zero = true;
    (*f)["comm_compute_slowdown"] = slowdown;
    return f;
  }();
  return *all;
}

std::string format_number(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

// Where `line` stops being text a profile may hold: invalid UTF-8 (the display name reaches Python as a
// str, which must decode) or a control character other than a tab (a NUL would cut a name short in C,
// an escape sequence would rewrite the terminal that prints it). Returns the offending byte's offset.
std::optional<std::size_t> first_non_text_byte(std::string_view line) {
  std::size_t i = 0;
  while (i < line.size()) {
    const auto c = static_cast<unsigned char>(line[i]);
    if (c < 0x80) {
      if ((c < 0x20 && c != '\t' && c != '\r') || c == 0x7f) return i;
      ++i;
      continue;
    }
    // The lead byte gives the sequence's length and the smallest code point it may encode (shorter
    // encodings of one code point, "overlong" ones, are invalid UTF-8, as are surrogates and > U+10FFFF).
    std::size_t length = 0;
    std::uint32_t code = 0;
    std::uint32_t min = 0;
    if (c >= 0xc2 && c <= 0xdf) {
      length = 2, code = c & 0x1fU, min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
      length = 3, code = c & 0x0fU, min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
      length = 4, code = c & 0x07U, min = 0x10000;
    } else {
      return i;
    }
    if (i + length > line.size()) return i;
    for (std::size_t k = 1; k < length; ++k) {
      const auto next = static_cast<unsigned char>(line[i + k]);
      if ((next & 0xc0U) != 0x80) return i;
      code = (code << 6U) | (next & 0x3fU);
    }
    if (code < min || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return i;
    i += length;
  }
  return std::nullopt;
}

// Note [Reading a profile file]
// A profile path comes from the environment, so it may name anything: /dev/zero (read without end until
// the process ran out of memory), a fifo (blocking the first use of openreg forever), a directory or
// /dev/null (both read as empty text, then reported as a "missing field"). The file is opened without
// blocking (O_NONBLOCK: opening a fifo with no writer returns at once), fstat'ed on that descriptor (so
// what is checked is what is read), and must be a regular file of at most kMaxProfileBytes; the read
// stops one byte past the bound in case the file grew since fstat.
constexpr std::size_t kMaxProfileBytes = 1 << 20;

std::string read_profile_file(const std::string& path, const std::string& var) {
  auto refuse = [&](const std::string& why) -> void {
    throw ConfigError(var, var + "='" + path + "' is invalid: " + why);
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    refuse("no profile file can be read at that path (" + std::error_code(errno, std::generic_category()).message() +
           ")");
  }
  struct Closer {
    explicit Closer(int f) : fd(f) {}
    Closer(const Closer&) = delete;
    Closer& operator=(const Closer&) = delete;
    ~Closer() { ::close(fd); }
    int fd;
  } closer(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    refuse("its status cannot be read (" + std::error_code(errno, std::generic_category()).message() + ")");
  }
  if (!S_ISREG(st.st_mode)) {
    const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISFIFO(st.st_mode) ? "a fifo"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a regular file";
    refuse(std::string("expected a profile file (a regular file), but that path is ") + kind);
  }
  auto too_large = [&] { refuse("a profile file holds at most 1 MiB, and this one is larger"); };
  if (static_cast<std::uint64_t>(st.st_size) > kMaxProfileBytes) too_large();
  std::string text(kMaxProfileBytes + 1, '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      refuse("reading it failed (" + std::error_code(errno, std::generic_category()).message() + ")");
    }
    got += static_cast<std::size_t>(n);
  }
  if (got > kMaxProfileBytes) too_large();
  text.resize(got);
  return text;
}

}  // namespace

std::vector<std::string> shipped_profile_names() {
  std::vector<std::string> names;
  for (const auto& p : detail::shipped_profiles()) names.emplace_back(p.name);
  std::sort(names.begin(), names.end());  // by name: "h100-sxm" before "h100-sxm-500w" (files sort the other way)
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
    if (const auto bad = first_non_text_byte(line)) {
      std::ostringstream what;
      what << "byte 0x" << std::hex << static_cast<unsigned>(static_cast<unsigned char>(line[*bad])) << std::dec
           << " at column " << *bad + 1 << " is not text (a profile is UTF-8 text without control characters)";
      fail(line_no, what.str());
    }
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
    const Field& field = it->second;
    double number = 0;
    if (field.range != nullptr) {
      const Range& range = *field.range;
      const std::string v(value);
      char* stop = nullptr;
      errno = 0;
      number = std::strtod(v.c_str(), &stop);
      const bool in_range = number >= range.lo && number <= range.hi;
      if (stop != v.c_str() + v.size() || errno == ERANGE || !std::isfinite(number) ||
          !(in_range || (field.may_be_zero && number == 0)) || (range.whole && number != std::floor(number))) {
        std::ostringstream what;
        what << "field '" << key << "' = '" << v << "' is invalid: expected " << range.what << " from "
             << format_number(range.lo) << " to " << format_number(range.hi);
        if (field.may_be_zero && range.lo > 0) what << ", or 0 (none)";
        fail(line_no, what.str());
      }
    }
    field.set(*profile, value, number);
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
  return parse_device_profile(read_profile_file(path, std::string(variable)), path, variable);
}

}  // namespace openreg::sim
