// The async path (Note [Op execution on openreg] in OpEngine.cpp): outputs from the shape pass, one
// work item on the current stream of the op's device.

#include "backend/OpenRegStream.h"
#include "backend/ops/engine/Arguments.h"
#include "backend/ops/engine/ExecutionPaths.h"
#include "backend/ops/engine/Launch.h"
#include "backend/ops/engine/Outputs.h"
#include "backend/ops/engine/ShapePass.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace at::openreg {
namespace {

using c10::IValue;
using torch::jit::Stack;

// Warnings of kernels on device threads have no Python frame to attach to, and the shape pass already
// raised the shape/type warnings on the caller's thread. Leaked, like every object device threads
// touch (they may run during static destruction).
struct SilentWarnings final : c10::WarningHandler {
  void process(const c10::Warning&) override {}
};
SilentWarnings* silent_warnings() {
  static auto* handler = new SilentWarnings();
  return handler;
}

// Note [Work items hold CPU aliases, not tensors]
// A work item needs the addresses of the device memory it touches, not ownership of it: a block freed
// while the item is queued is reused only by later work on its own stream, or, when the program used
// it on other streams, after record_stream's events (Note [Stream-ordered device memory] in
// OpenRegAllocator.cpp). So the host builds CPU aliases when it enqueues (new TensorImpls over the raw
// device pointers, which nobody else sees) and the item owns only those, plus CPU tensors it reads
// (snapshots of host arguments). It must never own the caller's TensorImpls: a TensorImpl that Python
// also references would be released on a device thread, which takes the GIL there (slow, and fatal
// while the interpreter shuts down).
//
// A pointer, a vector and a seed: it travels inline in the stream's task (Note [Launching a kernel on a
// stream]).
struct OpWorkItem {
  const OpPlan* plan;
  //! CPU aliases of the arguments (CPU tensors snapshotted), then those of the fresh outputs,
  //! flattened in return order.
  std::vector<IValue> values;
  std::uint64_t seed;  // for random ops

  void operator()() {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    c10::WarningUtils::WarningHandlerGuard warnings(silent_warnings());
    const size_t n = plan->args.size();
    Stack stack(std::make_move_iterator(values.begin()), std::make_move_iterator(values.begin() + n));
    std::vector<at::Tensor> fresh;
    fresh.reserve(values.size() - n);
    for (size_t i = n; i < values.size(); ++i) fresh.push_back(std::move(values[i]).toTensor());
    values.clear();
    if (plan->generator_arg >= 0) stack[plan->generator_arg] = at::make_generator<at::CPUGeneratorImpl>(seed);
    bool all_defined = true;
    for (const auto& t : fresh) all_defined = all_defined && t.defined();
    bool done = false;
    if (plan->out_op && all_defined && !plan->out_op_unreliable.load(std::memory_order_relaxed)) {
      // Some out= kernels resize their output to an intermediate shape on the way (losses computing an
      // unreduced result first); our aliases cannot grow, which fails before anything is written. Such
      // an op then runs its functional kernel, now and from then on.
      // The out= kernel gets its own TensorImpls over the outputs' memory: a failed resize leaves its
      // tensors claiming the failed size, and the functional path below must not inherit that.
      Stack out_stack = stack;
      for (const auto& t : fresh) {
        out_stack.push_back(at::Tensor(t.unsafeGetTensorImpl()->shallow_copy_and_detach(
            c10::VariableVersion(/*version=*/0), /*allow_tensor_metadata_change=*/true)));
      }
      try {
        plan->out_op->redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &out_stack);
        done = true;
      } catch (const c10::Error&) {
        // Relaxed: a hint read by later items; a stale read only costs one more attempt.
        plan->out_op_unreliable.store(true, std::memory_order_relaxed);
      }
    }
    if (!done) {
      plan->op->redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &stack);
      size_t f = 0;
      for (size_t j = 0; j < plan->returns.size(); ++j) {
        const auto& r = plan->returns[j];
        if (r.kind != ReturnKind::kFresh) continue;
        if (r.is_list) {
          for (const at::Tensor& t : stack[j].toTensorList()) fresh[f++].copy_(t);
        } else if (stack[j].isTensor()) {
          const at::Tensor& out = fresh[f++];
          if (out.defined()) out.copy_(stack[j].toTensor());
        }
      }
    }
    // The aliases (and the host snapshots) die here, on the device thread, when the kernel is done;
    // the stream's finish then destroys the emptied item.
  }
};

}  // namespace

bool run_async(const c10::OperatorHandle& op, const OpPlan& plan, Stack* stack, c10::DeviceIndex device) {
  const size_t n = plan.args.size();
  auto args = torch::jit::last(*stack, n);

  std::optional<MetaOutcome> computed;
  const MetaOutcome* geometry = output_geometry(op, plan, args, computed);
  if (geometry == nullptr) return false;
  const MetaOutcome& outcome = *geometry;

  std::vector<IValue> outputs(plan.returns.size());
  std::vector<at::Tensor> fresh;
  for (size_t j = 0; j < plan.returns.size(); ++j) {
    const auto& r = plan.returns[j];
    const auto& geometries = outcome.returns[j];
    switch (r.kind) {
      case ReturnKind::kFresh:
        if (r.is_list) {
          c10::List<at::Tensor> list;
          for (const auto& g : geometries) {
            fresh.push_back(allocate_like(g, device));
            list.push_back(fresh.back());
          }
          outputs[j] = list;
        } else {
          TORCH_INTERNAL_ASSERT(geometries.size() == 1, plan.name, ": return ", j, " is not one tensor");
          fresh.push_back(allocate_like(geometries[0], device));
          outputs[j] = fresh.back();
        }
        break;
      case ReturnKind::kWrittenArg:
        outputs[j] = args[r.arg];
        break;
      case ReturnKind::kViewOfArg: {
        const at::Tensor& base = args[r.arg].toTensor();
        if (r.is_list) {
          c10::List<at::Tensor> list;
          for (const auto& g : geometries) list.push_back(view_over(base, g));
          outputs[j] = list;
        } else {
          outputs[j] = view_over(base, geometries.at(0));
        }
        break;
      }
      case ReturnKind::kNonTensor:
        TORCH_INTERNAL_ASSERT(false, plan.name, ": non-tensor return on the async path");
    }
  }

  if (plan.writes || !fresh.empty()) {
    OpWorkItem item{&plan, {}, take_seed(plan, args, device)};
    AliasConverter cpu(AliasTarget::kCpu);
    const IValue none;
    item.values.reserve(n + fresh.size());
    for (size_t i = 0; i < n; ++i) {
      item.values.push_back(
          convert_arg(snapshot_cpu_tensors(args[i], plan.args[i]), plan.args[i], cpu, none, c10::kCPU));
    }
    for (const auto& t : fresh) item.values.emplace_back(cpu.convert(t));
    static_assert(kTravelsInline<OpWorkItem>, "the work item should travel inline");
    launch_kernel(c10::openreg::current_openreg_stream(device), plan.name, std::move(item));
  }

  torch::jit::drop(*stack, n);
  for (auto& o : outputs) stack->push_back(std::move(o));
  return true;
}

}  // namespace at::openreg
