// Device profiles (OPENREG_DEVICE_PROFILE) and the cost model (Note [Cost model] in cost_model.cpp):
// the shipped files parse with their sources, malformed files are errors naming the variable and the
// field, and each cost formula against a hand-computed value.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>

#include "openreg/sim/config.h"
#include "openreg/sim/cost.h"
#include "openreg/sim/error.h"
#include "openreg/sim/profile.h"

namespace openreg::sim {
namespace {

constexpr const char* kVar = "OPENREG_DEVICE_PROFILE";

std::string config_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a ConfigError";
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

double peak(const DeviceProfile& p, NumberFormat f) { return p.tensor_flops[static_cast<int>(f)]; }

TEST(DeviceProfile, TheShippedProfilesParseWithTheirFigures) {
  EXPECT_EQ(shipped_profile_names(), (std::vector<std::string>{"a100-sxm", "h100-sxm", "h100-sxm-500w", "mi300x"}));
  auto h100 = load_device_profile("h100-sxm", kVar);
  EXPECT_EQ(h100->name, "h100-sxm");
  EXPECT_EQ(h100->display_name, "H100 SXM");
  EXPECT_EQ(h100->sm_count, 132);
  EXPECT_EQ(h100->l2_bytes, 50ull << 20);
  EXPECT_EQ(h100->memory_bytes, 80ull << 30);
  EXPECT_DOUBLE_EQ(peak(*h100, NumberFormat::kBf16), 989.4e12);
  EXPECT_DOUBLE_EQ(peak(*h100, NumberFormat::kTf32), 494.7e12);
  EXPECT_DOUBLE_EQ(peak(*h100, NumberFormat::kFp32), 0);  // no fp32 format on the tensor units
  EXPECT_DOUBLE_EQ(h100->vector_flops[static_cast<int>(NumberFormat::kFp32)], 66.9e12);
  EXPECT_DOUBLE_EQ(h100->memory_bandwidth, 3350e9);
  EXPECT_DOUBLE_EQ(h100->launch_ns, 2600);
  auto a100 = load_device_profile("a100-sxm", kVar);
  EXPECT_EQ(a100->sm_count, 108);
  EXPECT_DOUBLE_EQ(peak(*a100, NumberFormat::kFp8), 0);  // A100 has no fp8
  auto mi300x = load_device_profile("mi300x", kVar);
  EXPECT_EQ(mi300x->sm_count, 304);
  EXPECT_EQ(mi300x->memory_bytes, 192ull << 30);
  EXPECT_DOUBLE_EQ(mi300x->attention_forward_efficiency, 0);  // not given: attention costed as a GEMM
  // The 500 W, 96 GB HBM2e part of torchtitan's H100 reports: the same chip at lower clocks.
  auto h100_500w = load_device_profile("h100-sxm-500w", kVar);
  EXPECT_EQ(h100_500w->memory_bytes, 96ull << 30);
  EXPECT_DOUBLE_EQ(h100_500w->memory_bandwidth, 2400e9);
  EXPECT_DOUBLE_EQ(peak(*h100_500w, NumberFormat::kBf16), 886.8e12);
  EXPECT_GT(peak(*h100_500w, NumberFormat::kBf16), 835.5e12);  // between H100 NVL's and SXM's datasheet peaks
  EXPECT_LT(peak(*h100_500w, NumberFormat::kBf16), peak(*h100, NumberFormat::kBf16));
  EXPECT_EQ(h100_500w->sm_count, h100->sm_count);
  EXPECT_DOUBLE_EQ(h100_500w->gemm_efficiency, h100->gemm_efficiency);
  EXPECT_DOUBLE_EQ(h100_500w->attention_backward_efficiency, h100->attention_backward_efficiency);
}

TEST(DeviceProfile, AnUnknownNameListsTheShippedOnes) {
  const std::string e = config_error([] { load_device_profile("h200", kVar); });
  EXPECT_TRUE(contains(e, "OPENREG_DEVICE_PROFILE='h200'")) << e;
  EXPECT_TRUE(contains(e, "a100-sxm, h100-sxm, h100-sxm-500w, mi300x")) << e;
  EXPECT_TRUE(contains(config_error([] { load_device_profile("/no/such/file.profile", kVar); }), "no profile file"));
}

// The H100 file with one line replaced (or removed, when `line` is empty).
std::string h100_with(const std::string& key, const std::string& line) {
  std::string text;
  std::ifstream in(std::string(OPENREG_SOURCE_DIR) + "/sim/profiles/h100-sxm.profile");
  for (std::string l; std::getline(in, l);) {
    if (l.rfind(key + " ", 0) == 0) {
      if (!line.empty()) text += line + "\n";
      continue;
    }
    text += l + "\n";
  }
  return text;
}

TEST(DeviceProfile, AMalformedFileNamesTheVariableTheLineAndTheField) {
  auto error_of = [](const std::string& text) {
    return config_error([&] { parse_device_profile(text, "test.profile", kVar); });
  };
  std::string e = error_of(h100_with("sm_count", ""));
  EXPECT_TRUE(contains(e, "OPENREG_DEVICE_PROFILE")) << e;
  EXPECT_TRUE(contains(e, "missing field 'sm_count'")) << e;
  e = error_of(h100_with("sm_count", "sm_count = many  # whitepaper"));
  EXPECT_TRUE(contains(e, "field 'sm_count' = 'many' is invalid")) << e;
  EXPECT_TRUE(contains(e, "test.profile, line ")) << e;
  e = error_of(h100_with("sm_count", "sm_count = 132.5  # whitepaper"));
  EXPECT_TRUE(contains(e, "a whole number")) << e;
  e = error_of(h100_with("gemm_efficiency", "gemm_efficiency = 1.3  # too good"));
  EXPECT_TRUE(contains(e, "field 'gemm_efficiency' = '1.3' is invalid")) << e;
  e = error_of(h100_with("memory_gbps", "memory_gbps = 3350"));
  EXPECT_TRUE(contains(e, "field 'memory_gbps' names no source")) << e;
  e = error_of(h100_with("memory_gbps", "memroy_gbps = 3350  # typo"));
  EXPECT_TRUE(contains(e, "unknown field 'memroy_gbps'")) << e;
  e = error_of(h100_with("launch_us", "launch_us = -1  # negative"));
  EXPECT_TRUE(contains(e, "field 'launch_us' = '-1' is invalid")) << e;
  e = error_of(h100_with("name", "name h100  # no equals sign"));
  EXPECT_TRUE(contains(e, "expected `key = value  # source`")) << e;
}

// Note [Physical ranges of profile values]: a value no chip has would overflow the virtual clock, so it is
// refused naming the field, the line and the range; the shipped figures all lie inside.
TEST(DeviceProfile, ValuesOutsidePhysicalRangesAreRefusedWithTheFieldTheLineAndTheRange) {
  auto error_of = [](const std::string& key, const std::string& value) {
    const std::string text = h100_with(key, key + " = " + value + "  # hostile");
    return config_error([&] { parse_device_profile(text, "test.profile", kVar); });
  };
  std::string e = error_of("memory_gbps", "1e-12");
  EXPECT_TRUE(contains(e, "test.profile, line ")) << e;
  EXPECT_TRUE(contains(e, "field 'memory_gbps' = '1e-12' is invalid: expected a bandwidth in GB/s from 0.001 to 1e+06"))
      << e;
  e = error_of("tensor_tflops.bf16", "1e-30");
  EXPECT_TRUE(contains(e, "field 'tensor_tflops.bf16' = '1e-30' is invalid: expected a peak in TFLOP/s")) << e;
  EXPECT_TRUE(contains(e, "or 0 (none)")) << e;
  e = error_of("launch_us", "1e30");
  EXPECT_TRUE(contains(e, "field 'launch_us' = '1e30' is invalid: expected a time in microseconds from 0.001 to 1e+06"))
      << e;
  EXPECT_TRUE(contains(error_of("network_setup_us", "1e-9"), "field 'network_setup_us' = '1e-9' is invalid")) << e;
  EXPECT_TRUE(contains(error_of("nvls_bus_gbps", "1e300"), "field 'nvls_bus_gbps' = '1e300' is invalid"));
  EXPECT_TRUE(contains(error_of("memory_gib", "1e9"), "expected a capacity in GiB from 0.001 to 16384"));
  EXPECT_TRUE(contains(error_of("l2_mib", "1e-30"), "field 'l2_mib' = '1e-30' is invalid"));
  EXPECT_TRUE(contains(error_of("sm_count", "1e9"), "field 'sm_count' = '1e9' is invalid"));
  EXPECT_TRUE(contains(error_of("copy_engines", "1000"), "expected a whole number of copy engines from 1 to 64"));
  EXPECT_TRUE(contains(error_of("gemm_efficiency", "0"), "field 'gemm_efficiency' = '0' is invalid"));
  EXPECT_TRUE(contains(error_of("comm_compute_slowdown", "1.5"), "field 'comm_compute_slowdown' = '1.5' is invalid"));
  EXPECT_TRUE(contains(error_of("vector_tflops.fp32", "1e-300"), "field 'vector_tflops.fp32'"));
  EXPECT_TRUE(contains(error_of("ring_bus_gbps", "inf"), "field 'ring_bus_gbps' = 'inf' is invalid"));
  EXPECT_TRUE(contains(error_of("peer_gbps", "1e-400"), "field 'peer_gbps' = '1e-400' is invalid"));  // underflows
  // 0 still means "the chip lacks it" where a field may be left out, and the ends of a range are accepted.
  auto parsed = [](const std::string& key, const std::string& value) {
    return parse_device_profile(h100_with(key, key + " = " + value + "  # edge"), "test.profile", kVar);
  };
  EXPECT_DOUBLE_EQ(parsed("tensor_tflops.fp8", "0")->tensor_flops[static_cast<int>(NumberFormat::kFp8)], 0);
  EXPECT_DOUBLE_EQ(parsed("nvls_bus_gbps", "0")->nvls_bus_bandwidth, 0);
  EXPECT_DOUBLE_EQ(parsed("comm_compute_slowdown", "0")->comm_compute_slowdown, 0);
  EXPECT_DOUBLE_EQ(parsed("launch_us", "1e6")->launch_ns, 1e9);
  EXPECT_DOUBLE_EQ(parsed("memory_gbps", "0.001")->memory_bandwidth, 1e6);
  for (const auto& name : shipped_profile_names()) EXPECT_NO_THROW(load_device_profile(name, kVar)) << name;
}

// Note [Reading a profile file]: the path comes from the environment and may name anything.
class ProfilePath : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "openreg_profile_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir = tmpl;
  }
  void TearDown() override {
    for (const char* name : {"/fifo", "/big.profile", "/latin1.profile", "/h100.profile"}) {
      ::unlink((dir + name).c_str());
    }
    ::rmdir(dir.c_str());
  }
  std::string error_of(const std::string& path) const {
    return config_error([&] { load_device_profile(path, kVar); });
  }
  void write(const std::string& path, const std::string& text) const {
    std::ofstream(path, std::ios::binary) << text;
  }
  std::string dir;
};

TEST_F(ProfilePath, AProfileMustBeARegularFileAndNothingElseIsReadOrWaitedFor) {
  std::string e = error_of("/dev/zero");  // was read without end until std::bad_alloc
  EXPECT_TRUE(contains(e, "OPENREG_DEVICE_PROFILE='/dev/zero' is invalid")) << e;
  EXPECT_TRUE(contains(e, "is a character device")) << e;
  e = error_of("/dev/null");  // was read as empty text: "missing field"
  EXPECT_TRUE(contains(e, "is a character device")) << e;
  EXPECT_FALSE(contains(e, "missing field")) << e;
  e = error_of(dir);  // a directory, likewise
  EXPECT_TRUE(contains(e, "OPENREG_DEVICE_PROFILE='" + dir + "' is invalid")) << e;
  EXPECT_TRUE(contains(e, "is a directory")) << e;
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  e = error_of(fifo);  // opening it used to block until a writer came
  EXPECT_TRUE(contains(e, "is a fifo")) << e;
  EXPECT_TRUE(contains(error_of(dir + "/absent.profile"), "no profile file can be read at that path"));
}

TEST_F(ProfilePath, AProfileFileIsAtMostOneMebibyteOfUtf8Text) {
  const std::string h100 = h100_with("no such key", "");
  write(dir + "/h100.profile", h100);
  EXPECT_EQ(load_device_profile(dir + "/h100.profile", kVar)->name, "h100-sxm");
  write(dir + "/big.profile", h100 + std::string(std::size_t{1} << 20, '#'));  // comments only: valid but large
  std::string e = error_of(dir + "/big.profile");
  EXPECT_TRUE(contains(e, "at most 1 MiB")) << e;
  // A display name in Latin-1 reached Python as bytes that do not decode (UnicodeDecodeError).
  std::string latin1 = h100_with("display_name", "display_name = H100 \xe9t\xe9  # Latin-1");
  write(dir + "/latin1.profile", latin1);
  e = error_of(dir + "/latin1.profile");
  EXPECT_TRUE(contains(e, "OPENREG_DEVICE_PROFILE: profile " + dir + "/latin1.profile, line ")) << e;
  EXPECT_TRUE(contains(e, "byte 0xe9 at column 21 is not text")) << e;
  auto parse_error = [](const std::string& text) {
    return config_error([&] { parse_device_profile(text, "test.profile", kVar); });
  };
  EXPECT_TRUE(contains(parse_error(h100_with("name", std::string("name = h100\0x  # NUL", 20))), "byte 0x0"));
  EXPECT_TRUE(contains(parse_error(h100_with("name", "name = \xc0\xae  # overlong")), "byte 0xc0"));
  EXPECT_TRUE(contains(parse_error(h100_with("name", "name = \xed\xa0\x80  # surrogate")), "byte 0xed"));
  EXPECT_TRUE(contains(parse_error(h100_with("name", "name = \x1b[2J  # escape")), "byte 0x1b"));
  // Real UTF-8 stays accepted.
  EXPECT_EQ(parse_device_profile(h100_with("display_name", "display_name = H100 \xc2\xb5-\xe2\x9c\x93  # UTF-8"),
                                 "test.profile", kVar)
                ->display_name,
            "H100 \xc2\xb5-\xe2\x9c\x93");
}

TEST(DeviceProfile, TheEnvironmentVariableIsReadAtRuntimeStartAndABadValueIsAConfigError) {
  ::setenv(kVar, "h100-sxm", 1);
  Config c = Config::from_env();
  ASSERT_NE(c.device_profile, nullptr);
  EXPECT_EQ(c.device_profile->name, "h100-sxm");
  ::setenv(kVar, "tpu-v9", 1);
  EXPECT_TRUE(contains(config_error([] { Config::from_env(); }), "OPENREG_DEVICE_PROFILE='tpu-v9' is invalid"));
  ::unsetenv(kVar);
  EXPECT_EQ(Config::from_env().device_profile, nullptr);
  ::setenv("OPENREG_HOST_TIME", "measured", 1);
  EXPECT_EQ(Config::from_env().host_time, HostTimeMode::kMeasured);
  ::setenv("OPENREG_HOST_TIME", "sometimes", 1);
  EXPECT_TRUE(contains(config_error([] { Config::from_env(); }), "OPENREG_HOST_TIME='sometimes' is invalid"));
  ::unsetenv("OPENREG_HOST_TIME");
}

class CostModel : public ::testing::Test {
 protected:
  std::shared_ptr<const DeviceProfile> h100 = load_device_profile("h100-sxm", kVar);
};

TEST_F(CostModel, ALargeBf16GemmRunsAtTheMeasuredRateTimesItsWaveEfficiency) {
  const double n = 8192;
  KernelCost gemm{2 * n * n * n, 3 * n * n * 2, NumberFormat::kBf16, true, 8192, 8192};
  // 64 x 64 = 4096 tiles of 128 x 128 on 132 SMs: 32 waves, the last one 4096 - 31 * 132 = 4 tiles.
  const double wave_efficiency = 4096.0 / (32 * 132);
  const double expected = 2 * n * n * n / (989.4e12 * 0.740 * wave_efficiency) * 1e9;
  EXPECT_NEAR(kernel_time_ns(*h100, gemm), expected, 1e-6 * expected);
  const double tflops = 2 * n * n * n / kernel_time_ns(*h100, gemm) / 1e3;
  // PyTorch's 8192^3 measures 769-798 TFLOP/s in a short loop; the profile's rate is the sustained one
  // (0.921 of that burst under the power cap: sim/profiles/h100-sxm.profile).
  EXPECT_GT(tflops, 765 * 0.921 * 0.99);
  EXPECT_LT(tflops, 800 * 0.921);
  EXPECT_DOUBLE_EQ(kernel_occupancy(*h100, gemm), 1.0);
}

TEST_F(CostModel, ASmallGemmUsesFewSmsAndIsFarFromPeak) {
  // 256 x 256 output: 4 tiles, one wave using 4 of 132 SMs.
  KernelCost gemm{2.0 * 256 * 256 * 4096, 2.0 * (256 * 4096 * 2 + 256 * 256), NumberFormat::kBf16, true, 256, 256};
  const double expected = gemm.flops / (989.4e12 * 0.740 * (4.0 / 132)) * 1e9;
  EXPECT_NEAR(kernel_time_ns(*h100, gemm), expected, 1e-6 * expected);
  EXPECT_DOUBLE_EQ(kernel_occupancy(*h100, gemm), 4.0 / 132);
}

TEST_F(CostModel, Fp32MatmulsUseTheVectorUnitsUnlessTf32IsAllowed) {
  KernelCost fp32{2.0 * 4096 * 4096 * 4096, 0, NumberFormat::kFp32, true, 4096, 4096};
  KernelCost tf32 = fp32;
  tf32.format = NumberFormat::kTf32;
  EXPECT_DOUBLE_EQ(peak_flops(*h100, fp32), 66.9e12);
  EXPECT_DOUBLE_EQ(peak_flops(*h100, tf32), 494.7e12);
  EXPECT_NEAR(kernel_time_ns(*h100, fp32), fp32.flops / 66.9e12 * 1e9, 1.0);  // vector: no GEMM efficiency
}

TEST_F(CostModel, MemoryBoundKernelsMoveTheirBytesAtTheMeasuredBandwidthAndTakeAtLeastTheMinimum) {
  KernelCost add{64.0 * 1024 * 1024, 3.0 * 256 * 1024 * 1024, NumberFormat::kFp32, false, 0, 0};
  EXPECT_NEAR(kernel_time_ns(*h100, add), add.bytes / (3350e9 * 0.896) * 1e9, 1.0);
  EXPECT_DOUBLE_EQ(kernel_occupancy(*h100, add), 1.0);
  KernelCost tiny{0, 64, NumberFormat::kFp32, false, 0, 0};
  EXPECT_DOUBLE_EQ(kernel_time_ns(*h100, tiny), 2000);  // min_kernel_us = 2.0
  EXPECT_DOUBLE_EQ(kernel_occupancy(*h100, tiny), 1.0 / 132);
}

// Attention's fused kernels against the measurements the h100-sxm profile cites (FlashAttention-2 on an
// H100 SXM5, head dim 128, in the FlashAttention papers' count: a causal forward's skipped half is not
// work, a backward is 2.5 forwards), within 4% at 2k and 8k keys.
TEST_F(CostModel, AttentionRunsAtItsMeasuredFractionOfThePeakByDirectionAndSequenceLength) {
  auto attention = [](double keys, bool backward) {
    const double batch_heads = 16384 / keys * 16;  // the papers' shapes: batch x keys = 16k, 16 heads
    KernelCost c;
    c.flops = 4.0 * batch_heads * keys * keys * 128 * (backward ? 2.5 : 0.5);  // causal forward, full backward
    c.format = NumberFormat::kBf16;
    c.matrix = true;
    c.rows = static_cast<std::int64_t>(batch_heads * keys);
    c.cols = 128;
    c.kind = KernelClass::kAttention;
    c.backward = backward;
    c.keys = static_cast<std::int64_t>(keys);
    return c;
  };
  auto tflops = [&](const KernelCost& c) { return c.flops / kernel_time_ns(*h100, c) / 1e3; };
  EXPECT_NEAR(tflops(attention(8192, false)), 333, 333 * 0.04);  // forward, causal
  EXPECT_NEAR(tflops(attention(2048, false)), 298, 298 * 0.04);
  EXPECT_NEAR(tflops(attention(8192, true)), 318, 318 * 0.04);  // backward
  EXPECT_NEAR(tflops(attention(2048, true)), 291, 291 * 0.04);
  // Far below a GEMM of the same work: the same cost as a matmul runs at 0.740 of the peak.
  KernelCost as_gemm = attention(8192, false);
  as_gemm.kind = KernelClass::kMatmul;
  EXPECT_GT(kernel_time_ns(*h100, attention(8192, false)), 2 * kernel_time_ns(*h100, as_gemm));
  // A profile without attention figures costs it as a GEMM, as before they existed.
  DeviceProfile without = *h100;
  without.attention_forward_efficiency = 0;
  EXPECT_DOUBLE_EQ(kernel_time_ns(without, attention(8192, false)), kernel_time_ns(without, as_gemm));
}

TEST_F(CostModel, CopiesTakeTheirLinksRateAndLatency) {
  const std::size_t gib = std::size_t{1} << 30;
  EXPECT_NEAR(copy_time_ns(*h100, CopyRoute::kHostToDevice, gib, true), 2000 + gib / 55.6e9 * 1e9, 1.0);
  EXPECT_NEAR(copy_time_ns(*h100, CopyRoute::kHostToDevice, gib, false), 2000 + gib / 27.8e9 * 1e9, 1.0);
  EXPECT_NEAR(copy_time_ns(*h100, CopyRoute::kDeviceToHost, gib, true), 2000 + gib / 55.6e9 * 1e9, 1.0);
  EXPECT_NEAR(copy_time_ns(*h100, CopyRoute::kPeer, gib, true), 2000 + gib / 378e9 * 1e9, 1.0);
  // Within a device a copy reads and writes: ~3.0 TB/s counting both, the published H100 figure.
  const double d2d = copy_time_ns(*h100, CopyRoute::kDeviceToDevice, gib, true);
  EXPECT_NEAR(d2d, 2.0 * gib / (3350e9 * 0.896) * 1e9, 1.0);
  EXPECT_NEAR(2.0 * gib / d2d, 3000, 30);  // bytes per ns = GB/s
}

// Note [Collective cost model]: each candidate algorithm's time by hand, and the fastest chosen.
TEST_F(CostModel, ASmallAllReduceOnOneNodeTakesTheLowLatencyRing) {
  const CollectiveTime t = collective_time(*h100, {CollectiveKind::kAllReduce, 8, 8, 1});
  EXPECT_STREQ(t.algorithm, "ring/LL");
  // ll_latency 5 us + 2(8-1) ring steps of 0.6 us + 8 B x 2(7)/8 at 141 GB/s.
  EXPECT_NEAR(t.ns, 5000 + 14 * 600 + 8 * 1.75 / 141e9 * 1e9, 1e-6);
  EXPECT_GT(t.ns, 6000);  // the published 6-25 us band of small 8-rank all_reduces
  EXPECT_LT(collective_time(*h100, {CollectiveKind::kAllReduce, 65536, 8, 1}).ns, 25000);
}

TEST_F(CostModel, ALargeAllReduceOnOneNodeTakesNvlsAndWithoutItTheRing) {
  const double gib = 1024.0 * 1024 * 1024;
  const CollectiveTime nvls = collective_time(*h100, {CollectiveKind::kAllReduce, gib, 8, 1});
  EXPECT_STREQ(nvls.algorithm, "nvls");
  EXPECT_NEAR(nvls.ns, 18000 + gib * 1.75 / 480e9 * 1e9, 1e-3);
  DeviceProfile no_nvls = *h100;
  no_nvls.nvls_bus_bandwidth = 0;
  const CollectiveTime ring = collective_time(no_nvls, {CollectiveKind::kAllReduce, gib, 8, 1});
  EXPECT_STREQ(ring.algorithm, "ring");
  EXPECT_NEAR(ring.ns, 8000 + 14 * 600 + gib * 1.75 / 370e9 * 1e9, 1e-3);
  // NCCL's switch points on 8 H100s: the ring below 1 MB, NVLS from 2 MB.
  EXPECT_STRNE(collective_time(*h100, {CollectiveKind::kAllReduce, 1 << 20, 8, 1}).algorithm, "nvls");
  EXPECT_STREQ(collective_time(*h100, {CollectiveKind::kAllReduce, 2 << 20, 8, 1}).algorithm, "nvls");
}

TEST_F(CostModel, AcrossNodesAllReduceIsATreeAndTheOthersRingOverEveryNic) {
  const double gib = 1024.0 * 1024 * 1024;
  const double nics = 8 * 47e9;  // a node's eight 47 GB/s NICs
  // 2 nodes x 8: within a node at NVLS's rate, across the bytes once over the node's NICs (each node the
  // other's only peer); the slower sets it: here the node, so two nodes read above the NICs' rate.
  const CollectiveTime ar = collective_time(*h100, {CollectiveKind::kAllReduce, gib, 16, 2});
  EXPECT_STREQ(ar.algorithm, "tree");
  const double within = 2.0 * 7 / 8 * gib / 480e9;
  EXPECT_GT(within, gib / nics);
  EXPECT_NEAR(ar.ns, 440000 + 14 * 600 + within * 1e9, 1e-3);
  // From 3 nodes on, an inner node of the double binary tree carries twice the bytes over its NICs,
  // which then set its rate; the ring over every rank moves 2(n-1)/n of them at the slower of the node's
  // ring and its NICs. Both read just under the NICs' 376 GB/s (nccl-tests: at most ~400 from 4 nodes
  // on): the ring wins by 1.5% at 4 nodes (32 ranks), the tree from 64 ranks.
  const double fixed = 440000 + 14 * 600;
  const CollectiveTime ar4 = collective_time(*h100, {CollectiveKind::kAllReduce, 8 * gib, 32, 4});
  EXPECT_STREQ(ar4.algorithm, "ring");
  EXPECT_NEAR(ar4.ns, fixed + 8 * gib * 2 * 31 / 32 / 370e9 * 1e9, 1e-3);
  EXPECT_LT(ar4.ns, fixed + 2 * 8 * gib / nics * 1e9);
  const CollectiveTime ar8 = collective_time(*h100, {CollectiveKind::kAllReduce, 8 * gib, 64, 8});
  EXPECT_STREQ(ar8.algorithm, "tree");
  EXPECT_NEAR(ar8.ns, fixed + 2 * 8 * gib / nics * 1e9, 1e-3);
  // Where the NICs are slower than the node's ring, the ring over every rank moves 2(n-1)/n of the bytes
  // over them where the tree moves 2: it wins by a little.
  DeviceProfile slow = *h100;
  slow.network_bandwidth = 40e9;
  const CollectiveTime ring = collective_time(slow, {CollectiveKind::kAllReduce, 8 * gib, 32, 4});
  EXPECT_STREQ(ring.algorithm, "ring");
  EXPECT_NEAR(ring.ns, 440000 + 14 * 600 + 8 * gib * 2 * 31 / 32 / (8 * 40e9) * 1e9, 1e-3);
  const CollectiveTime ag = collective_time(*h100, {CollectiveKind::kAllGather, gib, 16, 2});
  EXPECT_STREQ(ag.algorithm, "ring");
  EXPECT_NEAR(ag.ns, 440000 + 7 * 600 + gib * 15 / 16 / std::min(370e9, nics) * 1e9, 1e-3);
  // Tiny messages take the low-latency tree: about the published 65-75 us over EFA.
  const CollectiveTime tiny = collective_time(*h100, {CollectiveKind::kAllReduce, 8, 16, 2});
  EXPECT_STREQ(tiny.algorithm, "tree/LL");
  EXPECT_NEAR(tiny.ns, 5000 + 2 * 28000 + 14 * 600 + 8 * 2.0 * 15 / 16 / 45e9 * 1e9, 1e-3);
  // Send/recv: the peer link within a node, the NIC across.
  EXPECT_NEAR(collective_time(*h100, {CollectiveKind::kSendRecv, gib, 2, 1}).ns, 2000 + gib / 378e9 * 1e9, 1e-3);
  EXPECT_NEAR(collective_time(*h100, {CollectiveKind::kSendRecv, gib, 2, 2}).ns, 28000 + gib / 47e9 * 1e9, 1e-3);
  EXPECT_STREQ(collective_time(*h100, {CollectiveKind::kAllReduce, gib, 1, 1}).algorithm, "local");
}

}  // namespace
}  // namespace openreg::sim
