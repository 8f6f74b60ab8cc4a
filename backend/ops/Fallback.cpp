// Note [Op execution on openreg]
// Every aten op without an explicit PrivateUse1 kernel lands in openreg_fallback below. The hottest
// small ops have unboxed kernels that handle their plainest arguments without it and forward the rest
// here through execute_op (Note [Fast kernels for hot small ops] in FastElementwise.cpp).
//
// Async path (the common case): the host computes the outputs' metadata by rerunning the op on Meta
// stand-ins of the arguments (or takes it from ExecuteMetaCache when the same op saw the same argument
// metadata before), allocates fresh outputs on the device (the stream-aware caching allocator),
// resizes out= arguments the meta kernel resized, builds view outputs as metadata over the input's
// storage, and enqueues ONE work item on the current stream of the op's device. The item owns CPU
// aliases of everything it touches (Note [Work items hold CPU aliases, not tensors]); on a device
// thread it runs the CPU kernel on the aliases (the out= overload writing straight into the
// preallocated outputs when the op has one) and then drops them. The caller returns at once. Errors
// the kernel would raise about shapes and dtypes are raised by the meta pass first, on the caller's
// thread; errors that depend on the data (an index out of range) are raised at the next
// synchronization, like CUDA's.
//
// Sync path: ops whose output shape or result depends on the data (nonzero, item-like returns,
// asserts), ops with no Meta kernel or a meta kernel that disagrees with CPU, calls whose written
// tensors overlap their inputs in ways CPU's kernels decide (CPU then accepts or rejects them), and
// ops whose meta pass failed (rerun so the caller gets exactly CPU's error). The host waits for the
// current stream, runs the CPU kernel on aliases on the calling thread, and copies fresh results into
// new device tensors.
//
// Random ops take a seed from the openreg generator when they are *issued* (Note [Random ops take
// their seed at enqueue time] in OpenRegGenerator.h) and their kernel runs with a CPU generator seeded
// with it.

#include "backend/sanitizer/Sanitizer.h"
#include "backend/OpenRegGenerator.h"
#include "backend/OpenRegRuntime.h"
#include "backend/OpenRegSyncDebug.h"
#include "backend/ops/ExecuteAliases.h"
#include "backend/ops/ExecuteMetaCache.h"
#include "backend/ops/ExecutePlan.h"
#include "backend/ops/ExecuteThreads.h"
#include "backend/ops/Fallback.h"
#include "backend/ops/OpCoverage.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/ops/empty_strided.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

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

  [[noreturn]] static void fail(c10::Device a, c10::Device b) {
    TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, ", a,
                " and ", b, "!");
  }
};

c10::DeviceIndex device_of_op(const ExecutePlan& plan, c10::ArrayRef<IValue> args) {
  DeviceScan scan;
  std::optional<c10::Device> device_arg;
  for (size_t i = 0; i < args.size(); ++i) {
    const auto& a = plan.args[i];
    const auto& v = args[i];
    switch (a.kind) {
      case ArgKind::kTensor:
        if (v.isTensor()) scan.visit(v.toTensor(), false, a.written);
        break;
      case ArgKind::kTensorList:
      case ArgKind::kOptionalTensorList:
        if (v.isList()) {
          for (const auto& e : v.toListRef()) {
            if (e.isTensor()) scan.visit(e.toTensor(), a.kind == ArgKind::kOptionalTensorList, a.written);
          }
        }
        break;
      case ArgKind::kDevice:
        if (v.isDevice() && v.toDevice().type() == kOpenReg) device_arg = v.toDevice();
        break;
      default:
        break;
    }
  }
  auto device = scan.device ? scan.device : device_arg;
  if (!device) device = c10::Device(kOpenReg, c10::openreg::current_device());
  if (!device->has_index()) device = c10::Device(kOpenReg, c10::openreg::current_device());
  if (scan.foreign) DeviceScan::fail(*device, *scan.foreign);
  return device->index();
}

// ---------------------------------------------------------------------------------------------------
// Argument conversion.

//! The openreg generator an op draws from: the given one, or its device's default.
c10::openreg::OpenRegGeneratorImpl* openreg_generator(const IValue& v, c10::DeviceIndex device) {
  if (v.isNone()) {
    return at::check_generator<c10::openreg::OpenRegGeneratorImpl>(c10::openreg::default_generator(device));
  }
  return at::check_generator<c10::openreg::OpenRegGeneratorImpl>(v.toGenerator());
}

//! Replaces openreg tensors (also inside lists), generators and devices by their Meta or CPU
//! stand-ins. `cpu_generator` is what a Generator argument becomes (None for the meta pass).
IValue convert_arg(const IValue& v, const ArgPlan& a, AliasConverter& conv, const IValue& cpu_generator,
                   c10::DeviceType device_type) {
  switch (a.kind) {
    case ArgKind::kTensor:
      return v.isTensor() ? IValue(conv.convert(v.toTensor())) : v;
    case ArgKind::kTensorList: {
      if (!v.isTensorList()) return v;
      auto in = v.toTensorList();
      c10::List<at::Tensor> out;
      out.reserve(in.size());
      for (const at::Tensor& t : in) out.push_back(conv.convert(t));
      return out;
    }
    case ArgKind::kOptionalTensorList: {
      if (!v.isList()) return v;
      c10::List<std::optional<at::Tensor>> out;
      out.reserve(v.toListRef().size());
      for (const auto& e : v.toListRef()) {
        if (e.isTensor()) {
          out.push_back(conv.convert(e.toTensor()));
        } else {
          out.push_back(std::nullopt);
        }
      }
      return out;
    }
    case ArgKind::kGenerator:
      return cpu_generator;
    case ArgKind::kDevice:
      if (v.isDevice() && v.toDevice().type() == kOpenReg) return c10::Device(device_type);
      return v;
    default:
      return v;
  }
}

//! A CPU tensor argument captured by a work item: read when the item runs, like CUDA reads it when
//! the op is issued, so the item keeps its own copy (Python numbers wrapped as tensors need none).
at::Tensor snapshot_cpu(const at::Tensor& t) {
  if (!t.defined() || !t.is_cpu() || t.unsafeGetTensorImpl()->is_wrapped_number()) return t;
  return t.clone();
}

IValue snapshot_cpu_tensors(IValue v, const ArgPlan& a) {
  switch (a.kind) {
    case ArgKind::kTensor:
      return v.isTensor() && v.toTensor().is_cpu() ? IValue(snapshot_cpu(v.toTensor())) : v;
    case ArgKind::kOptionalTensorList: {
      if (!v.isList()) return v;
      bool any_cpu = false;
      for (const auto& e : v.toListRef()) any_cpu = any_cpu || (e.isTensor() && e.toTensor().is_cpu());
      if (!any_cpu) return v;
      c10::List<std::optional<at::Tensor>> out;
      for (const auto& e : v.toListRef()) {
        if (e.isTensor()) {
          out.push_back(snapshot_cpu(e.toTensor()));
        } else {
          out.push_back(std::nullopt);
        }
      }
      return out;
    }
    default:
      return v;
  }
}

// ---------------------------------------------------------------------------------------------------
// Outputs.

at::Tensor allocate_like(const TensorGeometry& g, c10::DeviceIndex device) {
  if (!g.defined) return at::Tensor();  // convolution_backward's masked gradients stay undefined
  return at::empty_strided(g.sizes, g.strides, at::TensorOptions().dtype(g.dtype).device(kOpenReg, device));
}

//! An openreg tensor over `base`'s storage with the geometry `g`: what a view op returns. No work is
//! enqueued for it.
at::Tensor view_over(const at::Tensor& base, const TensorGeometry& g) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(c10::TensorImpl::VIEW, c10::Storage(base.storage()),
                                                   base.key_set(), c10::scalarTypeToTypeMeta(g.dtype));
  impl->set_sizes_and_strides(g.sizes, g.strides, g.storage_offset);
  impl->_set_conj(g.conj);
  impl->_set_neg(g.neg);
  return at::Tensor(std::move(impl));
}

bool same_geometry(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.strides() == b.strides() && a.storage_offset() == b.storage_offset();
}

//! Gives `real` the geometry (sizes, strides, offset), growing its storage when that needs more
//! memory: resize_ alone would size it for contiguous strides, and kernels may pick padded ones
//! (LAPACK's leading dimensions).
void restride(const at::Tensor& real, c10::IntArrayRef sizes, c10::IntArrayRef strides, int64_t offset) {
  real.resize_(sizes);
  if (real.strides() == strides && real.storage_offset() == offset) return;
  int64_t span = 1;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) span = 0;
    if (span != 0) span += (sizes[d] - 1) * strides[d];
  }
  const int64_t needed = (offset + span) * static_cast<int64_t>(real.element_size());
  if (needed > static_cast<int64_t>(real.storage().nbytes())) {
    real.resize_({offset + span});  // grows the storage (keeping its contents); the shape is reset below
  }
  real.as_strided_(sizes, strides, offset);
}

//! Gives the real out= tensor the geometry the kernel chose for its stand-in (out= resizing).
void adopt_geometry(const at::Tensor& real, const at::Tensor& like) {
  if (same_geometry(real, like)) return;
  restride(real, like.sizes(), like.strides(), like.storage_offset());
}

void adopt_written_geometry(const ExecutePlan& plan, c10::ArrayRef<IValue> real, c10::ArrayRef<IValue> standin) {
  for (size_t i = 0; i < plan.args.size(); ++i) {
    const auto& a = plan.args[i];
    if (!a.written) continue;
    if (a.kind == ArgKind::kTensor && real[i].isTensor()) {
      adopt_geometry(real[i].toTensor(), standin[i].toTensor());
    } else if (a.kind == ArgKind::kTensorList && real[i].isTensorList()) {
      auto r = real[i].toTensorList();
      auto s = standin[i].toTensorList();
      for (size_t k = 0; k < r.size(); ++k) adopt_geometry(r.get(k), s.get(k));
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// The work item.

// Warnings of kernels on device threads have no Python frame to attach to, and the meta pass already
// raised the shape/type warnings on the caller's thread.
struct SilentWarnings final : c10::WarningHandler {
  void process(const c10::Warning&) override {}
};

// Note [Work items hold CPU aliases, not tensors]
// A work item needs the addresses of the device memory it touches, not ownership of it: a block freed
// while the item is queued is reused only by later work on its own stream, or, when the program used
// it on other streams, after record_stream's events (Note [Stream-ordered device memory] in
// OpenRegAllocator.cpp). So the host builds CPU aliases when it enqueues (new TensorImpls over the raw
// device pointers, which nobody else sees) and the item owns only those, plus CPU tensors it reads
// (snapshots of host arguments). It must never own the caller's TensorImpls: a TensorImpl that Python
// also references would be released on a device thread, which takes the GIL there (slow, and fatal
// while the interpreter shuts down).
struct OpWorkItem {
  c10::OperatorHandle op;
  const ExecutePlan* plan;
  std::vector<IValue> args;            // CPU aliases of the arguments (CPU tensors snapshotted)
  std::vector<at::Tensor> fresh;       // CPU aliases of the fresh outputs, flattened in return order
  std::uint64_t seed;                  // for random ops
  int device;
  int compute_threads;

  void operator()() {
    try {
      run();
    } catch (const c10::Error& e) {
      // The stream reports what() with the item's name; c10's what() carries a C++ backtrace that
      // means nothing to the Python user who reads it at the next synchronize.
      throw std::runtime_error(e.what_without_backtrace());
    }
  }

  void run() {
    IntraOpThreadsScope threads(device, compute_threads);
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    static SilentWarnings silent;
    c10::WarningUtils::WarningHandlerGuard warnings(&silent);

    Stack stack = std::move(args);
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
      op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &stack);
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
    // Drop the aliases (and the host snapshots) here, on the device thread, rather than whenever the
    // queue recycles the item.
    stack.clear();
    fresh.clear();
  }
};

std::uint64_t take_seed(const ExecutePlan& plan, c10::ArrayRef<IValue> args, c10::DeviceIndex device) {
  if (!plan.random || plan.generator_arg < 0) return 0;
  return openreg_generator(args[plan.generator_arg], device)->next_seed_for_op();
}

// ---------------------------------------------------------------------------------------------------
// The two paths.

// Note [Meta kernels written in Python]
// The shape pass runs an op's Meta kernel, and for some ops that kernel is a Python function (PyTorch's
// references where a C++ meta kernel is missing or symbolic-shape unfriendly: normal_, mul_.Scalar,
// exponential_, ...). The first such call imports sympy and torch._dynamo (0.3 s, 1 s on a loaded
// machine), a cost a CUDA program never pays, and every such call takes the GIL from a C++ caller.
// For these ops the shape pass runs the CPU kernel instead, on zeroed host scratch of the arguments'
// geometry (AliasTarget::kCpuScratch): CPU's results have the geometry the device's CPU kernel will
// give, which is what the meta kernels imitate. Random ops draw from a private CPU generator, so no
// generator moves; random ops without a Generator argument would draw from CPU's global one and keep
// the Meta kernel. Scratch is bounded (kMaxShapeScratchBytes, beyond which touching the pages costs
// more than the Python kernel), and a CPU kernel that refuses zeros (a division by an integer zero, an
// index check) hands over to the Meta kernel: never another answer, at worst the old cost. The outcome
// is cached per signature either way.
constexpr size_t kMaxShapeScratchBytes = size_t{4} << 20;

size_t openreg_storage_bytes(const ExecutePlan& plan, c10::ArrayRef<IValue> args) {
  size_t bytes = 0;
  const auto add = [&](const IValue& v) {
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().is_privateuseone()) {
      bytes += v.toTensor().storage().nbytes();  // shared storages count twice: a bound, not a size
    }
  };
  for (size_t i = 0; i < plan.args.size(); ++i) {
    if (args[i].isTensorList()) {
      for (const at::Tensor& t : args[i].toTensorList()) add(IValue(t));
    } else if (args[i].isList()) {
      for (const auto& e : args[i].toListRef()) add(e);
    } else {
      add(args[i]);
    }
  }
  return bytes;
}

bool shape_pass_on_cpu(const ExecutePlan& plan, c10::ArrayRef<IValue> args) {
  if (!plan.meta_in_python || (plan.random && plan.generator_arg < 0)) return false;
  return openreg_storage_bytes(plan, args) <= kMaxShapeScratchBytes;
}

//! Runs `op` with dispatch key `key` on the stand-ins `conv` makes of `args`; they stay in `standins`,
//! the results in `results`. False when the kernel raised.
bool run_on_standins(const c10::OperatorHandle& op, const ExecutePlan& plan, c10::ArrayRef<IValue> args,
                     AliasConverter& conv, c10::DispatchKey key, std::vector<IValue>* standins, Stack* results) {
  const size_t n = plan.args.size();
  const c10::DeviceType type = key == c10::DispatchKey::Meta ? c10::kMeta : c10::kCPU;
  IValue generator;
  if (key == c10::DispatchKey::CPU && plan.generator_arg >= 0) {
    thread_local const at::Generator scratch_generator = at::make_generator<at::CPUGeneratorImpl>(0);
    generator = scratch_generator;
  }
  standins->clear();
  standins->reserve(n);
  for (size_t i = 0; i < n; ++i) standins->push_back(convert_arg(args[i], plan.args[i], conv, generator, type));
  *results = Stack(*standins);
  try {
    op.redispatchBoxed(c10::DispatchKeySet(key), results);
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

//! Runs the shape pass (Meta kernel, or CPU on scratch: Note [Meta kernels written in Python]) on
//! stand-ins of `args`; nullopt when it fails. Resizes out= arguments the way the pass resized their
//! stand-ins (`resized` tells whether any was).
std::optional<MetaOutcome> run_meta(const c10::OperatorHandle& op, const ExecutePlan& plan,
                                    c10::ArrayRef<IValue> args, bool* resized) {
  const size_t n = plan.args.size();
  std::vector<IValue> standins;
  Stack results;
  bool ran = false;
  if (shape_pass_on_cpu(plan, args)) {
    AliasConverter scratch(AliasTarget::kCpuScratch);
    ran = run_on_standins(op, plan, args, scratch, c10::DispatchKey::CPU, &standins, &results);
  }
  if (!ran) {
    AliasConverter meta(AliasTarget::kMeta);
    // Failing here, the sync path reruns it on CPU: the caller gets CPU's result or CPU's error.
    if (!run_on_standins(op, plan, args, meta, c10::DispatchKey::Meta, &standins, &results)) return std::nullopt;
  }
  TORCH_INTERNAL_ASSERT(results.size() == plan.returns.size(), plan.name, ": the shape pass returned ",
                        results.size(), " values for ", plan.returns.size(), " returns");
  *resized = false;
  for (size_t i = 0; i < n && !*resized; ++i) {
    if (!plan.args[i].written) continue;
    if (args[i].isTensor() && standins[i].isTensor()) {
      *resized = !same_geometry(args[i].toTensor(), standins[i].toTensor());
    } else if (args[i].isTensorList()) {
      auto r = args[i].toTensorList();
      auto m = standins[i].toTensorList();
      for (size_t k = 0; k < r.size() && !*resized; ++k) *resized = !same_geometry(r.get(k), m.get(k));
    }
  }
  if (*resized) adopt_written_geometry(plan, args, standins);

  MetaOutcome outcome;
  outcome.returns.resize(plan.returns.size());
  for (size_t j = 0; j < plan.returns.size(); ++j) {
    const IValue& m = results[j];
    if (m.isTensor()) {
      outcome.returns[j].push_back(TensorGeometry::of(m.toTensor()));
    } else if (m.isTensorList()) {
      for (const at::Tensor& t : m.toTensorList()) outcome.returns[j].push_back(TensorGeometry::of(t));
    }
  }
  return outcome;
}

bool run_async(const c10::OperatorHandle& op, const ExecutePlan& plan, Stack* stack, c10::DeviceIndex device) {
  const size_t n = plan.args.size();
  auto args = torch::jit::last(*stack, n);

  thread_local MetaSignature signature;  // reused: its buffers keep their capacity
  const bool cacheable = signature.build(plan, args);
  const MetaOutcome* cached = cacheable ? find_meta_outcome(signature) : nullptr;
  std::optional<MetaOutcome> computed;
  if (cached == nullptr) {
    bool resized = false;
    computed = run_meta(op, plan, args, &resized);
    if (!computed) return false;
    // A resizing call changes its own signature (the out= tensor's shape): nothing to reuse.
    if (cacheable && !resized) store_meta_outcome(signature, *computed);
  }
  const MetaOutcome& outcome = cached != nullptr ? *cached : *computed;

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
    OpWorkItem item{op, &plan, {}, {}, take_seed(plan, args, device), device, 0};
    AliasConverter cpu(AliasTarget::kCpu);
    const IValue none;
    item.args.reserve(n + fresh.size());
    for (size_t i = 0; i < n; ++i) {
      item.args.push_back(convert_arg(snapshot_cpu_tensors(args[i], plan.args[i]), plan.args[i], cpu, none, c10::kCPU));
    }
    item.fresh.reserve(fresh.size());
    for (const auto& t : fresh) item.fresh.push_back(cpu.convert(t));
    c10::openreg::translate_sim_errors([&] {
      auto& stream = c10::openreg::current_sim_stream(device);
      item.compute_threads = stream.device().compute_threads();
      stream.launch(plan.name, std::move(item));
    });
  }

  torch::jit::drop(*stack, n);
  for (auto& o : outputs) stack->push_back(std::move(o));
  return true;
}

//! A CPU result of the sync path as an openreg value: a view of an argument when it shares an
//! argument's memory, else a copy into a new device tensor.
at::Tensor to_device(const at::Tensor& t, const AliasConverter& cpu, c10::ArrayRef<IValue> args,
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
  at::Tensor out = at::empty_strided(src.sizes(), src.strides(), src.options().device(kOpenReg, device));
  // The host writes the fresh block directly: work that another thread queued on this stream before
  // freeing the block may still use it (Note [Stream-ordered device memory] in OpenRegAllocator.cpp).
  c10::openreg::translate_sim_errors([&] { c10::openreg::current_sim_stream(device).synchronize(); });
  cpu_alias_of(out).copy_(src);
  return out;
}

IValue to_device_value(const IValue& v, const AliasConverter& cpu, c10::ArrayRef<IValue> args,
                       c10::DeviceIndex device) {
  if (v.isTensor()) return to_device(v.toTensor(), cpu, args, device);
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList()) out.push_back(to_device(t, cpu, args, device));
    return out;
  }
  return v;
}

void run_sync(const c10::OperatorHandle& op, const ExecutePlan& plan, Stack* stack, c10::DeviceIndex device) {
  const size_t n = plan.args.size();
  auto args = torch::jit::last(*stack, n);
  c10::openreg::warn_or_error_on_sync();  // the host now waits for the device
  c10::openreg::translate_sim_errors([&] { c10::openreg::current_sim_stream(device).synchronize(); });

  IValue generator;
  if (plan.generator_arg >= 0) {
    generator = plan.random ? at::make_generator<at::CPUGeneratorImpl>(take_seed(plan, args, device)) : IValue();
  }
  AliasConverter cpu(AliasTarget::kCpu);
  Stack cpu_stack;
  cpu_stack.reserve(n);
  // out= arguments get CPU temporaries: the kernel may resize them to a shape only it can know. An out=
  // tensor sharing memory with another argument keeps its alias, so CPU's overlap checks see it.
  std::vector<std::pair<size_t, at::Tensor>> out_temps;
  const auto& schema_args = op.schema().arguments();
  auto shares_memory_with_other_arg = [&](size_t i) {
    const auto& storage = args[i].toTensor().storage();
    for (size_t k = 0; k < n; ++k) {
      if (k == i) continue;
      std::vector<IValue> elems = args[k].isList() ? args[k].toListRef().vec() : std::vector<IValue>{args[k]};
      for (const auto& e : elems) {
        if (e.isTensor() && e.toTensor().defined() && e.toTensor().has_storage() &&
            e.toTensor().storage().is_alias_of(storage)) {
          return true;
        }
      }
    }
    return false;
  };
  for (size_t i = 0; i < n; ++i) {
    const auto& a = plan.args[i];
    if (a.written && a.kind == ArgKind::kTensor && schema_args[i].kwarg_only() && args[i].isTensor() &&
        args[i].toTensor().is_privateuseone() && !shares_memory_with_other_arg(i)) {
      const at::Tensor& real = args[i].toTensor();
      at::Tensor temp = at::empty_strided(real.sizes(), real.strides(), real.options().device(c10::kCPU));
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
      // A resize may have enqueued a copy of the old contents; ours must land after it.
      c10::openreg::translate_sim_errors([&] { c10::openreg::current_sim_stream(device).synchronize(); });
    }
    cpu_alias_of(real).copy_(temp);
  }

  std::vector<IValue> outputs;
  outputs.reserve(plan.returns.size());
  for (size_t j = 0; j < plan.returns.size(); ++j) {
    const auto& r = plan.returns[j];
    if (r.kind == ReturnKind::kWrittenArg) {
      outputs.push_back(args[r.arg]);
    } else {
      outputs.push_back(to_device_value(cpu_stack[j], cpu, args, device));
    }
  }
  torch::jit::drop(*stack, n);
  for (auto& o : outputs) stack->push_back(std::move(o));
}

// CPU's kernels reject writes that partially overlap an input or that land twice on one element
// (TensorIterator's memory-overlap checks), and some ops accept them; Python meta kernels check
// neither. Such rare calls take the sync path, where the CPU kernel decides, on the caller's thread.
bool needs_cpu_overlap_rules(const ExecutePlan& plan, c10::ArrayRef<IValue> args) {
  if (!plan.writes) return false;
  std::vector<const c10::TensorImpl*> written, read;
  auto collect = [](const IValue& v, std::vector<const c10::TensorImpl*>& into) {
    if (v.isTensor()) {
      if (v.toTensor().defined()) into.push_back(v.toTensor().unsafeGetTensorImpl());
    } else if (v.isList()) {
      for (const auto& e : v.toListRef()) {
        if (e.isTensor() && e.toTensor().defined()) into.push_back(e.toTensor().unsafeGetTensorImpl());
      }
    }
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const auto kind = plan.args[i].kind;
    if (kind != ArgKind::kTensor && kind != ArgKind::kTensorList && kind != ArgKind::kOptionalTensorList) continue;
    collect(args[i], plan.args[i].written ? written : read);
  }
  for (const c10::TensorImpl* w : written) {
    if (at::has_internal_overlap(const_cast<c10::TensorImpl*>(w)) != at::MemOverlap::No) return true;
    for (const c10::TensorImpl* r : read) {
      if (!r->has_storage() || !w->has_storage() || !r->storage().is_alias_of(w->storage())) continue;
      auto status = at::get_overlap_status(w, r);
      if (status == at::MemOverlapStatus::Partial || status == at::MemOverlapStatus::TooHard) return true;
    }
  }
  return false;
}

void openreg_fallback(const c10::OperatorHandle& op, Stack* stack) { execute_op(op, stack); }

}  // namespace

// Python meta kernels whose output shapes differ from CPU's in some modes: batch norm outside training
// returns empty saved statistics on CPU, while its meta kernel sizes them per channel.
bool meta_disagrees_with_cpu(const ExecutePlan& plan, c10::ArrayRef<IValue> args) {
  return plan.batch_norm_training_arg >= 0 && !args[plan.batch_norm_training_arg].toBool();
}

void execute_op(const c10::OperatorHandle& op, Stack* stack) {
  const ExecutePlan& plan = plan_for(op);
  auto args = torch::jit::last(*stack, plan.args.size());
  check_op_coverage(op, plan, args);  // before anything is queued
  ::openreg::sanitizer::on_op(op, args, plan);
  const c10::DeviceIndex device = device_of_op(plan, args);
  if (!plan.sync_only && !needs_cpu_overlap_rules(plan, args) && !meta_disagrees_with_cpu(plan, args) &&
      run_async(op, plan, stack, device)) {
    ::openreg::sanitizer::on_outputs(op, torch::jit::last(*stack, op.schema().returns().size()));
    return;
  }
  run_sync(op, plan, stack, device);
  ::openreg::sanitizer::on_outputs(op, torch::jit::last(*stack, op.schema().returns().size()));
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&openreg_fallback>());
}

}  // namespace at::openreg
