// The async path (Note [Op execution on openreg] in OpEngine.cpp): outputs from the shape pass, one
// work item on the current stream of the op's device.

#include "backend/runtime/Stream.h"
#include "backend/ops/engine/Arguments.h"
#include "backend/ops/engine/ExecutionPaths.h"
#include "backend/ops/engine/Launch.h"
#include "backend/ops/engine/Outputs.h"
#include "backend/ops/engine/ShapePass.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace at::openreg {
namespace {

using c10::IValue;
using torch::jit::Stack;

// Note [Work items hold CPU aliases, not tensors]
// A work item needs the addresses of the device memory it touches, not ownership of it: a block freed
// while the item is queued is reused only by later work on its own stream, or, when the program used
// it on other streams, after record_stream's events (Note [Stream-ordered device memory] in
// memory/DeviceAllocator.cpp). So the item runs its CPU kernel on CPU aliases (new TensorImpls over the raw
// device pointers, which nobody else sees), and owns only those, plus CPU tensors it reads (snapshots
// of host arguments). It must never own the caller's TensorImpls: a TensorImpl that Python also
// references would be released on a device thread, which takes the GIL there (slow, and fatal while
// the interpreter shuts down).
//
// The aliases are built on the device thread, from recipes the host takes when it enqueues (data
// pointer and size of each distinct storage; sizes, strides, offset, dtype, conj/neg bits of each
// tensor): the geometry is fixed at enqueue, so later metadata changes of the caller's tensors cannot
// reach the kernel, and the host pays for copying a few integers instead of two allocations and a
// TensorImpl per tensor. Tensors sharing a storage get aliases sharing one storage, as an
// AliasConverter gives them (Arguments.h), so the CPU kernel's overlap checks behave as on CPU: one
// storage table serves all of an op's tensors, single or in lists (cat, stack, index, index_put_),
// whose recipes name their list and position. A list holding anything but openreg
// tensors (and, for Tensor?[], None) converts on the host with an AliasConverter instead.

//! One distinct device storage an item's aliases share.
struct StorageRecipe {
  const c10::StorageImpl* source;  // identity only, on the host (never dereferenced on the device)
  void* data;
  std::size_t nbytes;
};

constexpr std::uint32_t kNotInList = ~std::uint32_t{0};

//! One tensor alias the item builds on the device thread, into values[value] (or, for a list element,
//! into that list at `element`).
struct AliasRecipe {
  std::uint32_t value;
  std::uint32_t element;  // kNotInList for a single tensor
  std::uint32_t storage;  // index into Recipes::storages
  bool conj;
  bool neg;
  caffe2::TypeMeta dtype;
  std::int64_t offset;
  c10::SmallVector<std::int64_t, 5> sizes;
  c10::SmallVector<std::int64_t, 5> strides;
};

//! A list argument the item builds on the device thread, into values[value]; its elements are
//! AliasRecipes (None elements of a Tensor?[] list stay None).
struct ListRecipe {
  std::uint32_t value;
  std::uint32_t size;
  bool optional;  // Tensor?[] rather than Tensor[]
};

struct Recipes {
  // Inline room for the usual op (addcmul_out: four tensors over up to four storages): a recipe that
  // outgrew it moved every recipe's sizes and strides to the heap on the calling thread.
  c10::SmallVector<StorageRecipe, 4> storages;
  c10::SmallVector<AliasRecipe, 6> tensors;
  c10::SmallVector<ListRecipe, 1> lists;

  //! The slot of `t`'s storage in `storages`, added if new. A scan: even a list of a hundred tensors
  //! costs less than one hash node allocation per storage would.
  std::uint32_t storage_slot(const at::Tensor& t) {
    const c10::StorageImpl* source = t.storage().unsafeGetStorageImpl();
    for (std::uint32_t slot = 0; slot < storages.size(); ++slot) {
      if (storages[slot].source == source) return slot;
    }
    storages.push_back({source, const_cast<void*>(t.storage().data_ptr().get()), t.storage().nbytes()});
    return static_cast<std::uint32_t>(storages.size() - 1);
  }

  //! Records `t` (an openreg tensor) to become values[value], or element `element` of that list.
  void add(const at::Tensor& t, std::uint32_t value, std::uint32_t element = kNotInList) {
    const std::uint32_t slot = storage_slot(t);
    AliasRecipe& r = tensors.emplace_back();  // filled in place: no move of its sizes and strides
    r.value = value;
    r.element = element;
    r.storage = slot;
    r.conj = t.is_conj();
    r.neg = t.is_neg();
    r.dtype = t.dtype();
    r.offset = t.storage_offset();
    r.sizes.assign(t.sizes().begin(), t.sizes().end());
    r.strides.assign(t.strides().begin(), t.strides().end());
  }

  //! Records the list argument `v` (openreg tensors, and None where `optional`) to become
  //! values[value].
  void add_list(const IValue& v, std::uint32_t value, bool optional) {
    const auto elements = v.toListRef();
    lists.push_back({value, static_cast<std::uint32_t>(elements.size()), optional});
    tensors.reserve(tensors.size() + elements.size());  // one growth, not a move of every recipe per doubling
    for (std::uint32_t k = 0; k < elements.size(); ++k) {
      if (elements[k].isTensor()) add(elements[k].toTensor(), value, k);
    }
  }

  //! Builds the aliases into `values` (on the device thread).
  void build(std::vector<IValue>& values) const {
    for (const ListRecipe& l : lists) {
      if (l.optional) {
        c10::List<std::optional<at::Tensor>> list;
        list.resize(l.size);  // None until the element recipes below fill them
        values[l.value] = std::move(list);
      } else {
        c10::List<at::Tensor> list;
        list.resize(l.size);
        values[l.value] = std::move(list);
      }
    }
    c10::SmallVector<c10::Storage, 3> built(storages.size());
    for (const AliasRecipe& r : tensors) {
      c10::Storage& st = built[r.storage];
      if (!st) st = cpu_storage_over(storages[r.storage].data, storages[r.storage].nbytes);
      auto impl = c10::make_intrusive<c10::TensorImpl>(c10::Storage(st), c10::DispatchKeySet(c10::DispatchKey::CPU),
                                                       r.dtype);
      impl->set_sizes_and_strides(r.sizes, r.strides, r.offset);
      if (r.conj) impl->_set_conj(true);
      if (r.neg) impl->_set_neg(true);
      at::Tensor alias(std::move(impl));
      if (r.element == kNotInList) {
        values[r.value] = std::move(alias);
      } else if (values[r.value].isTensorList()) {
        values[r.value].toTensorList().set(r.element, std::move(alias));
      } else {
        auto list = values[r.value].toOptionalTensorList();
        list.set(r.element, std::optional<at::Tensor>(std::move(alias)));
      }
    }
  }
};

// A pointer, a vector, a pointer and a seed: it travels inline in the stream's task (Note [Launching a
// kernel on a stream]).
struct OpWorkItem {
  const OpPlan* plan;
  //! The arguments (CPU tensors snapshotted; openreg tensors as CPU aliases, or None slots that
  //! `recipes` fills), then the fresh outputs' slots, flattened in return order.
  std::vector<IValue> values;
  std::unique_ptr<Recipes> recipes;  // null when the host built the aliases
  std::uint64_t seed;  // for random ops

  void operator()() {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    c10::WarningUtils::WarningHandlerGuard warnings(silent_warning_handler());
    if (recipes) recipes->build(values);
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

//! Whether a list argument is one the recipes can carry: a list of openreg tensors (None elements too
//! for Tensor?[]). An empty list carries no device tensor and travels as it is.
bool list_takes_recipes(const IValue& v, ArgKind kind) {
  const auto elements = v.toListRef();
  if (elements.empty()) return false;
  for (const IValue& e : elements) {
    if (e.isTensor() ? !e.toTensor().is_privateuseone() : !(kind == ArgKind::kOptionalTensorList && e.isNone())) {
      return false;
    }
  }
  return true;
}

bool is_list_kind(ArgKind kind) { return kind == ArgKind::kTensorList || kind == ArgKind::kOptionalTensorList; }

//! Whether a list argument mixes openreg tensors with other values (then the host converts: see the
//! Note).
bool lists_need_host_conversion(const OpPlan& plan, c10::ArrayRef<IValue> args) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (!is_list_kind(plan.args[i].kind) || !args[i].isList() || list_takes_recipes(args[i], plan.args[i].kind)) {
      continue;
    }
    for (const IValue& e : args[i].toListRef()) {
      if (e.isTensor() && e.toTensor().is_privateuseone()) return true;
    }
  }
  return false;
}

}  // namespace

bool run_async(const c10::OperatorHandle& op, const OpPlan& plan, Stack* stack, c10::DeviceIndex device,
               ShapeLookup& shapes) {
  const size_t n = plan.args.size();
  auto args = torch::jit::last(*stack, n);

  std::optional<MetaOutcome> computed;
  const MetaOutcome* geometry = output_geometry(op, plan, args, shapes, computed);
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
    OpWorkItem item{&plan, {}, nullptr, take_seed(plan, args, device)};
    item.values.reserve(n + fresh.size());
    if (lists_need_host_conversion(plan, args)) {
      AliasConverter cpu(AliasTarget::kCpu);
      const IValue none;
      for (size_t i = 0; i < n; ++i) {
        item.values.push_back(
            convert_arg(snapshot_cpu_tensors(args[i], plan.args[i]), plan.args[i], cpu, none, c10::kCPU));
      }
      for (const auto& t : fresh) item.values.emplace_back(cpu.convert(t));
    } else {
      item.recipes = std::make_unique<Recipes>();
      AliasConverter unused(AliasTarget::kCpu);  // no openreg tensors are left for it to convert
      const IValue none;
      for (size_t i = 0; i < n; ++i) {
        const ArgPlan& a = plan.args[i];
        if (a.kind == ArgKind::kTensor && args[i].isTensor() && args[i].toTensor().is_privateuseone()) {
          item.recipes->add(args[i].toTensor(), static_cast<std::uint32_t>(item.values.size()));
          item.values.emplace_back();
        } else if (is_list_kind(a.kind) && args[i].isList() && list_takes_recipes(args[i], a.kind)) {
          item.recipes->add_list(args[i], static_cast<std::uint32_t>(item.values.size()),
                                 a.kind == ArgKind::kOptionalTensorList);
          item.values.emplace_back();
        } else {
          item.values.push_back(convert_arg(snapshot_cpu_tensors(args[i], a), a, unused, none, c10::kCPU));
        }
      }
      for (const auto& t : fresh) {
        if (t.defined()) item.recipes->add(t, static_cast<std::uint32_t>(item.values.size()));
        item.values.emplace_back(t.defined() ? IValue() : IValue(t));
      }
    }
    static_assert(kTravelsInline<OpWorkItem>, "the work item should travel inline");
    launch_kernel(c10::openreg::current_openreg_stream(device), plan.name, std::move(item));
  }

  torch::jit::drop(*stack, n);
  for (auto& o : outputs) stack->push_back(std::move(o));
  return true;
}

}  // namespace at::openreg
