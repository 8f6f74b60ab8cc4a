// overlap_demo: shows, with timing events, what the simulated device overlaps:
//   1. two streams each running a CPU-bound kernel, one after the other vs. at the same time;
//   2. a bandwidth-limited host-to-device copy and a kernel, on one stream vs. on two streams.
// Prints a table of measured times. Runs in about a second.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "openreg/sim/device.h"
#include "openreg/sim/event.h"
#include "openreg/sim/runtime.h"
#include "openreg/sim/stream.h"
#include "openreg/sim/support.h"
#include "openreg/sim/trace.h"

namespace {

using namespace openreg::sim;

using support::calibrate_spin;
using support::spin;

constexpr double kKernelMs = 40.0;
constexpr std::size_t kCopyBytes = 16 << 20;
// The copy takes as long as the kernel: the case where overlap matters most.
constexpr std::uint64_t kBandwidth = static_cast<std::uint64_t>(kCopyBytes / (kKernelMs / 1e3));

// Runs `enqueue` between two timing events recorded on `first`, after making `first` wait for every
// stream in `others`; returns the elapsed device time in ms.
template <typename F>
double timed(Device& dev, const std::shared_ptr<Stream>& first, const std::vector<std::shared_ptr<Stream>>& others,
             F enqueue) {
  auto start = Event::create(/*timing=*/true);
  auto end = Event::create(/*timing=*/true);
  first->record(start);
  for (auto& s : others) s->wait(start);
  enqueue();
  for (auto& s : others) {
    auto done = Event::create();
    s->record(done);
    first->wait(done);
  }
  first->record(end);
  end->synchronize();
  dev.synchronize();
  return start->elapsed_ms(*end);
}

}  // namespace

int main() {
  Runtime runtime(support::make_config(/*devices=*/1, /*threads=*/2, support::kDefaultCapacity, kBandwidth));
  Device& dev = runtime.device(0);
  auto a = dev.create_stream();
  auto b = dev.create_stream();
  const std::uint64_t iters = calibrate_spin(kKernelMs);
  auto kernel = [iters] {
    volatile std::uint64_t sink = spin(iters);
    (void)sink;
  };
  std::vector<char> host(kCopyBytes, 1);
  void* device_buffer = dev.memory().allocate(kCopyBytes);
  std::memset(device_buffer, 0, kCopyBytes);  // fault the pages in now, not during the timed copies
  timed(dev, a, {b}, [&] {                    // warm-up: start the device's threads
    a->launch("warm", kernel);
    b->launch("warm", kernel);
  });

  const double one_kernel = timed(dev, a, {}, [&] { a->launch("kernel", kernel); });
  const double kernels_serial = timed(dev, a, {}, [&] {
    a->launch("kernel 1", kernel);
    a->launch("kernel 2", kernel);
  });
  const double kernels_overlap = timed(dev, a, {b}, [&] {
    a->launch("kernel 1", kernel);
    b->launch("kernel 2", kernel);
  });
  const double one_copy = timed(dev, a, {}, [&] { a->copy(device_buffer, host.data(), kCopyBytes, "h2d"); });
  const double copy_serial = timed(dev, a, {}, [&] {
    a->copy(device_buffer, host.data(), kCopyBytes, "h2d");
    a->launch("kernel", kernel);
  });
  const double copy_overlap = timed(dev, a, {b}, [&] {
    a->copy(device_buffer, host.data(), kCopyBytes, "h2d");
    b->launch("kernel", kernel);
  });
  dev.memory().free(device_buffer);

  std::printf("openreg overlap demo: 1 device, %d compute threads, copy bandwidth %.0f MiB/s\n\n",
              dev.compute_threads(), static_cast<double>(kBandwidth) / (1 << 20));
  std::printf("%-44s %10s\n", "work (timed with timing events)", "device ms");
  std::printf("%-44s %10s\n", "--------------------------------------------", "----------");
  std::printf("%-44s %10.1f\n", "one kernel", one_kernel);
  std::printf("%-44s %10.1f\n", "two kernels, one stream (serial)", kernels_serial);
  std::printf("%-44s %10.1f\n", "two kernels, two streams (overlapped)", kernels_overlap);
  std::printf("%-44s %10.1f\n", "one 16 MiB host-to-device copy", one_copy);
  std::printf("%-44s %10.1f\n", "copy then kernel, one stream (serial)", copy_serial);
  std::printf("%-44s %10.1f\n", "copy and kernel, two streams (overlapped)", copy_overlap);
  auto fraction = [](double serial, double overlapped, double ideal) {
    // Clamped: on a busy machine the parts' noise can push the raw ratio past either end.
    return serial > ideal ? std::clamp((serial - overlapped) / (serial - ideal), 0.0, 1.0) : 0.0;
  };
  std::printf("\noverlap achieved (1 = perfect): kernels %.2f, copy/kernel %.2f\n",
              fraction(kernels_serial, kernels_overlap, kernels_serial / 2),
              fraction(copy_serial, copy_overlap, std::max(one_copy, one_kernel)));
  return 0;
}
