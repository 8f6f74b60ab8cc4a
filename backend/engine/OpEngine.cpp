// Note [Op execution on openreg]
// Every aten op without an explicit PrivateUse1 kernel lands in openreg_fallback below; the hottest
// small ops have unboxed kernels (FastKernels.cpp, Note [Fast kernels for hot small ops]) that take
// their plainest arguments themselves and hand the rest to execute_op. Following one op from dispatch
// to the device thread (five files):
//
//   OpEngine.cpp    execute_op: the op's plan (OpPlan.h: what its schema says, built once per op),
//                   coverage check (OpCoverage.h), the op's device, and the choice of path;
//   OpPolicy.cpp    takes_sync_path: the ONE table of per-op special cases, and the per-call rules
//                   (Note [Op policy: every per-op special case in one table]);
//   ShapePass.cpp   output_geometry: the outputs' metadata from the Meta kernel, or CPU on scratch
//                   (Note [Meta kernels written in Python]), cached per argument signature
//                   (ShapePassCache.h);
//   AsyncPath.cpp   run_async: allocates fresh outputs, resizes out= arguments, builds view outputs as
//                   metadata, and enqueues ONE work item holding CPU aliases of everything it touches
//                   (Note [Work items hold CPU aliases, not tensors], aliases from Arguments.h);
//   Launch.h        launch_kernel: the item on the current stream (runtime/Stream.h), run on a device
//                   thread with its share of compute threads and the error policy
//                   (Note [Launching a kernel on a stream]).
//
// Async path (the common case): the caller returns once the item is enqueued; the device thread runs
// the CPU kernel on the aliases (the out= overload writing straight into the preallocated outputs when
// the op has one). Errors the kernel would raise about shapes and dtypes are raised by the shape pass
// first, on the caller's thread; errors that depend on the data (an index out of range) are raised at
// the next synchronization, like CUDA's.
//
// Sync path (SyncPath.cpp): ops whose output shape or result depends on the data (nonzero, item-like
// returns, asserts), ops with no Meta kernel or a shape pass that disagrees with CPU, calls whose
// written tensors overlap their inputs in ways CPU's kernels decide (CPU then accepts or rejects
// them), and calls whose shape pass failed (rerun so the caller gets exactly CPU's error). The host
// waits for the current stream, runs the CPU kernel on aliases on the calling thread, and copies fresh
// results into new device tensors.
//
// With OPENREG_SANITIZER, each op's accesses are checked here, when it is issued (Note [Sanitizer
// hooks] in ../../sanitizer/Sanitizer.h).
//
// Random ops take a seed from the openreg generator when they are *issued* (Note [Random ops take
// their seed at enqueue time] in runtime/Generator.h) and their kernel runs with a CPU generator seeded
// with it.

#include "backend/runtime/Device.h"
#include "backend/engine/OpCoverage.h"
#include "backend/engine/Arguments.h"
#include "backend/engine/ExecutionPaths.h"
#include "backend/engine/OpEngine.h"
#include "backend/engine/OpPlan.h"
#include "backend/engine/OpPolicy.h"
#include "backend/sanitizer/Sanitizer.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <string_view>

namespace at::openreg {
namespace {

using c10::IValue;
using torch::jit::Stack;

constexpr c10::DeviceType kOpenReg = c10::DeviceType::PrivateUse1;

// ---------------------------------------------------------------------------------------------------
// Device of an op: every openreg tensor on one device; CPU tensors only as 0-dim scalars or as index
// tensors (Tensor?[]) that are only read, like CUDA.

struct DeviceScan {
  std::optional<c10::Device> device;   // first openreg device seen
  std::optional<c10::Device> foreign;  // first tensor that may not be mixed in

  void visit(const at::Tensor& t, bool cpu_allowed, bool written) {
    if (!t.defined()) return;
    if (t.device().type() == kOpenReg) {
      if (!device) {
        device = t.device();
      } else if (*device != t.device()) {
        fail(*device, t.device());
      }
      return;
    }
    if (t.is_cpu() && !written && (cpu_allowed || t.dim() == 0)) return;
    if (!foreign) foreign = t.device();
  }

  [[noreturn]] static void fail(c10::Device a, c10::Device b) { raise_two_devices(a, b); }
};

// `inline`: one call per op, on every op's path, and GCC keeps it out of line without the hint.
inline c10::DeviceIndex device_of_op(const OpPlan& plan, c10::ArrayRef<c10::IValue> args) {
  DeviceScan scan;
  std::optional<c10::Device> device_arg;
  for (size_t i = 0; i < args.size(); ++i) {
    const auto& a = plan.args[i];
    const auto& v = args[i];
    if (a.kind == ArgKind::kDevice) {
      if (v.isDevice() && v.toDevice().type() == kOpenReg) device_arg = v.toDevice();
      continue;
    }
    const bool cpu_allowed = a.kind == ArgKind::kOptionalTensorList;  // index tensors
    for_each_tensor(v, a.kind, [&](const at::Tensor& t, TensorPosition) { scan.visit(t, cpu_allowed, a.written); });
  }
  auto device = scan.device ? scan.device : device_arg;
  if (!device) device = c10::Device(kOpenReg, c10::openreg::current_device());
  if (!device->has_index()) device = c10::Device(kOpenReg, c10::openreg::current_device());
  if (scan.foreign) DeviceScan::fail(*device, *scan.foreign);
  return device->index();
}

void openreg_fallback(const c10::OperatorHandle& op, Stack* stack) { execute_op(op, stack); }

}  // namespace

void raise_two_devices(c10::Device a, c10::Device b) {
  TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, ", a, " and ",
              b, "!");
}

// Note [A cached signature was covered]
// The shape-pass cache keys an outcome by a signature that holds everything the coverage check's key
// holds (the op, each tensor's dtype and device type, every int, string and scalar), and an outcome is
// stored only after this thread's coverage check decided that those types run. So a call whose
// signature hits the cache skips the check (its key, a string of the argument types, and a hash
// lookup: about 1,200 instructions of a 20,000-instruction general-path call), and a call whose check
// is not decided yet (probed again next time) does not store its outcome.
void execute_op(const c10::OperatorHandle& op, Stack* stack) {
  const OpPlan& plan = plan_for(op);
  auto args = torch::jit::last(*stack, plan.args.size());
  ShapeLookup shapes(plan, args);
  // The coverage check comes before anything is queued.
  const CoverageVerdict coverage =
      shapes.hit() == nullptr ? check_op_coverage(op, plan, args) : CoverageVerdict::kRuns;
  if (coverage != CoverageVerdict::kRuns) shapes.do_not_store();
  const c10::DeviceIndex device = device_of_op(plan, args);
  ::openreg::sanitizer::on_op(plan, args);  // raises a race before anything is queued
  if (coverage == CoverageVerdict::kRefusedByTypes) {
    try {
      run_sync(op, plan, stack, device);
    } catch (const c10::NotImplementedError& e) {
      raise_type_refusal(plan, e.what_without_backtrace());
    }
  } else if (takes_sync_path(plan, args) || !run_async(op, plan, stack, device, shapes)) {
    run_sync(op, plan, stack, device);
  }
  ::openreg::sanitizer::on_outputs(plan, torch::jit::last(*stack, plan.returns.size()));
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&openreg_fallback>());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (std::string_view name : ops_run_functionally()) {
    m.impl(std::string(name).c_str(), torch::CppFunction::makeFromBoxedFunction<&openreg_fallback>());
  }
}

}  // namespace at::openreg
