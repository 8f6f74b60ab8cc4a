// Note [Autograd device threads at exit]
// A backward pass on openreg runs its nodes on the autograd engine's device thread for the device
// ("pt_autograd_<index>"). The engine holds the pass's GraphTask there in a local variable of its loop,
// and releases it only at the end of the iteration that completed the pass, after it has woken the
// thread that called backward(). The GraphTask carries a copy of the caller's thread-local state,
// which holds Python objects: torch.autograd stashes the caller's contextvars context there for every
// backward (`_stash_obj_in_tls("context", ...)` in torch/autograd/graph.py), and the dispatch and
// torch-function mode stacks hold modes (the race checker's). So the program can return from
// backward(), run to its end and start finalizing the interpreter while the device thread is still
// about to drop the last reference: the drop decrefs the context, which takes the GIL, and a thread
// that takes the GIL once finalization has begun is ended by PyThread_exit_thread, a forced unwind that
// reaches the engine's noexcept destructor and calls std::terminate ("terminate called without an
// active exception", exit status 134, in about half the runs of a three-line training script on two
// cores).
// The Python package's exit hook therefore lets those threads settle before the interpreter
// finalizes: for each started openreg device it runs one more backward whose node runs on that
// device's autograd thread, from a fresh C++ thread (its thread-local state holds no Python object, so
// dropping this pass's own GraphTask never needs the GIL), with the GIL released (a device thread
// still dropping the user's pass may need it). Each device thread runs its items in order, so when the
// probe's pass completes the thread has finished the iteration before it, and with it every user pass
// it held. Only the probe's GraphTask can still be in flight when the interpreter finalizes, and
// dropping it touches no Python. CUDA programs run the same engine code and share the window; how much
// wider it is on openreg (the pass's end records and waits on openreg events from that thread) was not
// measured.

#include "backend/runtime/Exit.h"

#include <ATen/ATen.h>
#include <c10/core/Device.h>
#include <torch/csrc/autograd/autograd.h>

#include <dirent.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <thread>

#include "backend/runtime/Device.h"

#include <openreg/sim/runtime.h>

namespace c10::openreg {
namespace {

// The engine starts its device threads all at once (one per device index, shared by every device
// type), naming them "pt_autograd_<index>"; how many there are tells whether any was started.
int autograd_device_thread_count() {
  int count = 0;
  DIR* tasks = opendir("/proc/self/task");
  if (tasks == nullptr) return 0;
  while (const dirent* entry = readdir(tasks)) {
    if (entry->d_name[0] == '.') continue;
    std::ifstream comm(std::string("/proc/self/task/") + entry->d_name + "/comm");
    std::string name;
    if (std::getline(comm, name) && name.rfind("pt_autograd_", 0) == 0) ++count;
  }
  closedir(tasks);
  return count;
}

void run_probe_passes(int threads) {
  const int devices = std::min<int>(threads, device_count());
  for (int d = 0; d < devices; ++d) {
    const auto index = static_cast<c10::DeviceIndex>(d);
    if (!device_started(index)) continue;  // never used: nothing ran there
    at::Tensor leaf = at::ones({1}, at::TensorOptions().device(c10::DeviceType::PrivateUse1, index)).requires_grad_();
    torch::autograd::backward({leaf.mul(2).sum()});
  }
}

}  // namespace

void settle_autograd_device_threads() noexcept {
  try {
    const int threads = autograd_device_thread_count();
    if (threads == 0) return;
    std::thread probe([threads] {
      try {
        run_probe_passes(threads);
      } catch (...) {
        // A device in a bad state (a failed stream) fails the probe: exit goes on, as without it.
      }
    });
    probe.join();
  } catch (...) {
    // No thread could be started: exit goes on without settling.
  }
}

void drain_at_exit() noexcept { ::openreg::sim::Runtime::drain_at_exit(); }

}  // namespace c10::openreg
