// The sync path (Note [Op execution on openreg] in OpEngine.cpp): the host waits for the device's
// current stream and runs the CPU kernel on aliases itself.

#include "backend/runtime/Stream.h"
#include "backend/runtime/SyncDebug.h"
#include "backend/engine/Arguments.h"
#include "backend/engine/ExecutionPaths.h"
#include "backend/engine/KernelRanges.h"
#include "backend/engine/Outputs.h"
#include "backend/sanitizer/Sanitizer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/empty_strided.h>

#include <utility>
#include <vector>

namespace at::openreg {
namespace {

//! A CPU result of the sync path as an openreg value: a view of an argument when it shares an
//! argument's memory, else a copy into a new device tensor.
at::Tensor to_device(const at::Tensor& t, const AliasConverter& cpu, c10::ArrayRef<c10::IValue> args,
                     c10::DeviceIndex device) {
  if (!t.defined()) return t;
  if (t.is_cpu() && t.has_storage()) {
    if (const c10::Storage* real = cpu.source_of(t.storage().unsafeGetStorageImpl())) {
      // Find an argument on that storage to borrow its key set (autograd keys, device).
      for (const auto& a : args) {
        if (a.isTensor() && a.toTensor().defined() && a.toTensor().is_privateuseone() &&
            a.toTensor().storage().is_alias_of(*real)) {
          return view_over(a.toTensor(), TensorGeometry::of(t));
        }
      }
    }
  }
  at::Tensor src = t.is_non_overlapping_and_dense() ? t : t.contiguous();
  at::Tensor out =
      at::empty_strided(src.sizes(), src.strides(), src.options().device(c10::DeviceType::PrivateUse1, device));
  // The host writes the fresh block directly: work that another thread queued on this stream before
  // freeing the block may still use it (Note [Stream-ordered device memory] in memory/DeviceAllocator.cpp).
  c10::openreg::current_openreg_stream(device).synchronize();
  cpu_alias_of(out).copy_(src);
  return out;
}

c10::IValue to_device_value(const c10::IValue& v, const AliasConverter& cpu, c10::ArrayRef<c10::IValue> args,
                       c10::DeviceIndex device) {
  if (v.isTensor()) return to_device(v.toTensor(), cpu, args, device);
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList()) out.push_back(to_device(t, cpu, args, device));
    return out;
  }
  return v;
}

}  // namespace

void run_sync(const c10::OperatorHandle& op, const OpPlan& plan, torch::jit::Stack* stack, c10::DeviceIndex device) {
  const size_t n = plan.args.size();
  auto args = torch::jit::last(*stack, n);
  c10::openreg::warn_or_error_on_sync();  // the host now waits for the device
  const c10::openreg::OpenRegStream stream = c10::openreg::current_openreg_stream(device);
  stream.synchronize();
  // Only a wait CUDA makes too orders the host for the race checker: an op that runs here merely
  // because openreg runs it on the host (no Meta kernel, CPU overlap rules) is asynchronous on CUDA,
  // and counting its wait would hide the program's missing synchronization.
  if (plan.host_waits) ::openreg::sanitizer::on_host_wait(stream);

  c10::IValue generator;
  if (plan.generator_arg >= 0) {
    generator = plan.random ? at::make_generator<at::CPUGeneratorImpl>(take_seed(plan, args, device)) : c10::IValue();
  }
  AliasConverter cpu(AliasTarget::kCpu);
  torch::jit::Stack cpu_stack;
  cpu_stack.reserve(n);
  // out= arguments get CPU temporaries: the kernel may resize them to a shape only it can know. An out=
  // tensor sharing memory with another argument keeps its alias, so CPU's overlap checks see it.
  std::vector<std::pair<size_t, at::Tensor>> out_temps;
  const auto& schema_args = op.schema().arguments();
  auto shares_memory_with_other_arg = [&](size_t i) {
    const auto& storage = args[i].toTensor().storage();
    bool shares = false;
    for (size_t k = 0; k < n; ++k) {
      if (k == i) continue;
      for_each_tensor(args[k], plan.args[k].kind, [&](const at::Tensor& t, TensorPosition) {
        shares = shares || (t.defined() && t.has_storage() && t.storage().is_alias_of(storage));
      });
    }
    return shares;
  };
  for (size_t i = 0; i < n; ++i) {
    const auto& a = plan.args[i];
    // An in-place op that may resize self (OpPolicy.h, kResizesSelfWhen) reads self too: its temporary
    // starts as a copy.
    const bool resizable_self = i == 0 && plan.inplace && plan.resizes_self;
    if (a.written && a.kind == ArgKind::kTensor && (schema_args[i].kwarg_only() || resizable_self) &&
        args[i].isTensor() && args[i].toTensor().is_privateuseone() && !shares_memory_with_other_arg(i)) {
      const at::Tensor& real = args[i].toTensor();
      at::Tensor temp = at::empty_strided(real.sizes(), real.strides(), real.options().device(c10::kCPU));
      if (resizable_self) temp.copy_(cpu_alias_of(real));
      out_temps.emplace_back(i, temp);
      cpu_stack.push_back(temp);
    } else {
      cpu_stack.push_back(convert_arg(args[i], a, cpu, generator, c10::kCPU));
    }
  }
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &cpu_stack);

  for (auto& [i, temp] : out_temps) {
    const at::Tensor& real = args[i].toTensor();
    if (real.sizes() != temp.sizes() || real.strides() != temp.strides()) {
      restride(real, temp.sizes(), temp.strides(), real.storage_offset());
      // The resize may have moved the tensor to a fresh block, which work queued on the stream by its
      // previous owner may still use; the host writes it below without going through the stream
      // (Note [Stream-ordered device memory] in memory/DeviceAllocator.cpp).
      c10::openreg::current_openreg_stream(device).synchronize();
    }
    cpu_alias_of(real).copy_(temp);
  }

  std::vector<c10::IValue> outputs;
  outputs.reserve(plan.returns.size());
  for (size_t j = 0; j < plan.returns.size(); ++j) {
    const auto& r = plan.returns[j];
    if (r.kind == ReturnKind::kWrittenArg) {
      outputs.push_back(args[r.arg]);
    } else {
      outputs.push_back(to_device_value(cpu_stack[j], cpu, args, device));
    }
  }
  if (timing_only_on()) {
    // Note [Values in timing-only execution]: the host computed the results from what the arguments
    // hold; they hold values when everything the op read did.
    bool valued = true;
    for (size_t i = 0; i < n; ++i) {
      if (!plan.args[i].read) continue;
      for_each_tensor(args[i], plan.args[i].kind,
                      [&](const at::Tensor& t, TensorPosition) { valued = valued && holds_values(t); });
    }
    for (size_t i = 0; i < n; ++i) {
      if (!plan.args[i].written) continue;
      for_each_tensor(args[i], plan.args[i].kind, [&](const at::Tensor& t, TensorPosition) { set_holds_values(t, valued); });
    }
    for (const c10::IValue& o : outputs) {
      if (o.isTensor()) set_holds_values(o.toTensor(), valued);
      if (o.isTensorList()) {
        for (const at::Tensor& t : o.toTensorList()) set_holds_values(t, valued);
      }
    }
  }
  torch::jit::drop(*stack, n);
  for (auto& o : outputs) stack->push_back(std::move(o));
}

}  // namespace at::openreg
