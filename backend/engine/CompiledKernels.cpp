#include "backend/engine/CompiledKernels.h"

#include "backend/engine/KernelCost.h"
#include "backend/engine/Launch.h"
#include "backend/runtime/Device.h"
#include "backend/runtime/Stream.h"

#include <openreg/sim/stream.h>

#include <utility>

namespace {

// The bytes of the calling thread's next compiled kernel, set by the generated wrapper just before
// the call (the same thread), taken by the launch; -1: not given (the kernel costs the minimum time).
thread_local double tl_next_bytes = -1;

// One compiled kernel call: the generated module's trampoline, its arguments (parsed on the calling
// thread, owned by `ctx`), and how to free them. Owns `ctx` whether or not the kernel ever runs.
// A copy borrows `ctx` (its `drop` is null): a graph keeps the captured call, which owns the arguments,
// and each replay runs a copy (Note [Stream capture] in runtime/Capture.cpp); the graph outlives its
// replays' work (it waits for the last one before it lets the captured call go).
struct CompiledKernelCall {
  void (*run)(void*);
  void* ctx;
  void (*drop)(void*);

  CompiledKernelCall(void (*r)(void*), void* c, void (*d)(void*)) noexcept : run(r), ctx(c), drop(d) {}
  CompiledKernelCall(CompiledKernelCall&& other) noexcept
      : run(other.run), ctx(std::exchange(other.ctx, nullptr)), drop(other.drop) {}
  CompiledKernelCall(const CompiledKernelCall& other) noexcept : run(other.run), ctx(other.ctx), drop(nullptr) {}
  CompiledKernelCall& operator=(const CompiledKernelCall&) = delete;
  CompiledKernelCall& operator=(CompiledKernelCall&&) = delete;
  ~CompiledKernelCall() {
    if (ctx != nullptr && drop != nullptr) drop(ctx);
  }

  void operator()() { run(ctx); }
};

static_assert(at::openreg::kTravelsInline<CompiledKernelCall>, "a compiled kernel call travels inline");

}  // namespace

//! Enqueues a compiled kernel on the current stream of the current openreg device. `name` must outlive
//! the process (a literal in the generated module, which is never unloaded). Errors of the enqueue
//! (a bad device, the launch queue) are thrown as C++ exceptions; the generated module turns them
//! into Python's RuntimeError. Failures of the kernel are the stream's, as for every kernel.
extern "C" void openreg_launch_compiled_kernel(void (*run)(void*), void* ctx, void (*drop)(void*),
                                               const char* name) {
  CompiledKernelCall call(run, ctx, drop);
  const auto stream = c10::openreg::current_openreg_stream(c10::openreg::current_device());
  const double bytes = std::exchange(tl_next_bytes, -1.0);
  if (bytes < 0) {
    at::openreg::launch_kernel(stream, name, std::move(call));
    return;
  }
  at::openreg::launch_kernel(stream, name, std::move(call), [bytes] { return at::openreg::bytes_kernel_cost(bytes); });
}

namespace at::openreg {

std::uintptr_t compiled_kernel_launcher_address() noexcept {
  return reinterpret_cast<std::uintptr_t>(&openreg_launch_compiled_kernel);
}

void set_next_compiled_kernel_bytes(double bytes) noexcept { tl_next_bytes = bytes; }

void launch_unbuilt_compiled_kernel(const std::string& name) {
  // The name is interned: it must outlive the item, and a process launches each kernel's name many times.
  openreg_launch_compiled_kernel([](void*) {}, nullptr, nullptr, ::openreg::sim::intern_name(name.c_str()));
}

}  // namespace at::openreg
