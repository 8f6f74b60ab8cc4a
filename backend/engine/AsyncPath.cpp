// The async path (Note [Op execution on openreg] in OpEngine.cpp): outputs from the shape pass, one
// work item on the current stream of the op's device.

#include "backend/runtime/Stream.h"
#include "backend/engine/KernelCost.h"
#include "backend/engine/Arguments.h"
#include "backend/engine/ExecutionPaths.h"
#include "backend/engine/KernelRanges.h"
#include "backend/engine/Launch.h"
#include "backend/engine/Outputs.h"
#include "backend/engine/ShapePass.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

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
// whose recipes name their list and position. A call with a list that mixes openreg tensors with
// other tensors (CPU index tensors beside openreg ones in a Tensor?[]) has every argument converted on
// the host by one AliasConverter instead, so that one storage table still covers all its tensors.
//
// run_async reads in the order it works: one walk of the arguments' tensors (Note [Walking an
// argument's tensors] in Arguments.h) decides how each argument travels; then the outputs' geometry,
// the returns, the work item (seed, captured arguments, launch), and the returns onto the stack.

//! One distinct device storage an item's aliases share.
struct StorageRecipe {
  const c10::StorageImpl* source;  // identity only, on the host (never dereferenced on the device)
  void* data;
  std::size_t nbytes;
};

//! One tensor alias the item builds on the device thread, into values[value] (or, for a list element,
//! into that list at `position`).
struct AliasRecipe {
  std::uint32_t value;
  TensorPosition position;
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

  //! Records `t` (an openreg tensor) to become values[value], or the element at `position` of that list.
  void add(const at::Tensor& t, std::uint32_t value, TensorPosition position = {}) {
    const std::uint32_t slot = storage_slot(t);
    AliasRecipe& r = tensors.emplace_back();  // filled in place: no move of its sizes and strides
    r.value = value;
    r.position = position;
    r.storage = slot;
    r.conj = t.is_conj();
    r.neg = t.is_neg();
    r.dtype = t.dtype();
    r.offset = t.storage_offset();
    r.sizes.assign(t.sizes().begin(), t.sizes().end());
    r.strides.assign(t.strides().begin(), t.strides().end());
  }

  //! Records the list argument `v` of kind `kind` (openreg tensors, and None in a Tensor?[]) to become
  //! values[value].
  void add_list(const IValue& v, ArgKind kind, std::uint32_t value) {
    const auto size = static_cast<std::uint32_t>(v.toListRef().size());
    lists.push_back({value, size, kind == ArgKind::kOptionalTensorList});
    tensors.reserve(tensors.size() + size);  // one growth, not a move of every recipe per doubling
    for_each_tensor(v, kind, [&](const at::Tensor& t, TensorPosition p) { add(t, value, p); });
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
      if (!r.position.in_list()) {
        values[r.value] = std::move(alias);
      } else if (values[r.value].isTensorList()) {
        values[r.value].toTensorList().set(r.position.element, std::move(alias));
      } else {
        auto list = values[r.value].toOptionalTensorList();
        list.set(r.position.element, std::optional<at::Tensor>(std::move(alias)));
      }
    }
  }
};

// Note [Kernels that flip a conj bit]
// CPU's linalg_lu_solve with left=False solves the adjoint system in its output's memory and then flips
// the output tensor's conj bit rather than conjugating the data: memory and bit are right only
// together (CPU hands back a tensor with is_conj() set). The work item's kernel writes through CPU
// aliases, whose bits nobody reads afterwards, so openreg returned the conjugate, silently. A kernel
// that flips a written tensor's conj or neg bit therefore has the flip applied to the memory, where it
// stays with the tensor's value: the result reads as CPU's does (without the bit, as any copy of it).
class BitWatch {
 public:
  void watch(const at::Tensor& t) {
    if (t.defined() && (t.is_complex() || t.is_neg() || t.is_conj())) watched_.push_back({t, t.is_conj(), t.is_neg()});
  }
  void settle() const {
    for (const auto& w : watched_) {
      if (w.tensor.is_conj() != w.conj) {
        w.tensor._set_conj(w.conj);
        w.tensor.conj_physical_();  // the memory gets the conjugation the bit had claimed
      }
      if (w.tensor.is_neg() != w.neg) {
        w.tensor._set_neg(w.neg);
        w.tensor.neg_();
      }
    }
  }

 private:
  struct Watched {
    at::Tensor tensor;
    bool conj;
    bool neg;
  };
  c10::SmallVector<Watched, 2> watched_;
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

  OpWorkItem(const OpPlan* plan_, std::vector<IValue> values_, std::unique_ptr<Recipes> recipes_, std::uint64_t seed_)
      : plan(plan_), values(std::move(values_)), recipes(std::move(recipes_)), seed(seed_) {}
  OpWorkItem(OpWorkItem&&) noexcept = default;
  OpWorkItem& operator=(OpWorkItem&&) noexcept = default;
  //! A graph's replay runs a copy of the captured item (Note [Stream capture] in runtime/Capture.cpp):
  //! the copy shares the snapshotted CPU values, which kernels only read, and has its own recipes.
  OpWorkItem(const OpWorkItem& other)
      : plan(other.plan),
        values(other.values),
        recipes(other.recipes ? std::make_unique<Recipes>(*other.recipes) : nullptr),
        seed(other.seed) {}
  OpWorkItem& operator=(const OpWorkItem&) = delete;
  ~OpWorkItem() = default;

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
      BitWatch bits;
      for (const auto& t : fresh) {
        out_stack.push_back(at::Tensor(t.unsafeGetTensorImpl()->shallow_copy_and_detach(
            c10::VariableVersion(/*version=*/0), /*allow_tensor_metadata_change=*/true)));
        bits.watch(out_stack.back().toTensor());
      }
      try {
        plan->out_op->redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &out_stack);
        bits.settle();
        done = true;
      } catch (const c10::Error&) {
        // Relaxed: a hint read by later items; a stale read only costs one more attempt.
        plan->out_op_unreliable.store(true, std::memory_order_relaxed);
      }
    }
    if (!done) {
      BitWatch bits;
      for (size_t i = 0; i < n; ++i) {
        if (plan->args[i].written && stack[i].isTensor()) bits.watch(stack[i].toTensor());
      }
      plan->op->redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &stack);
      bits.settle();
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

//! How one argument travels in the work item (Note [Work items hold CPU aliases, not tensors]).
enum class Carry : std::uint8_t {
  kValue,      //!< holds no openreg tensor (or mixes them into a list: host_converts): capture_arg
  kAlias,      //!< an openreg tensor: an AliasRecipe
  kAliasList,  //!< a list of openreg tensors, and None in a Tensor?[]: a ListRecipe and its AliasRecipes
};

//! What the work item needs from the arguments, found in one walk of their tensors.
struct ArgumentsSeen {
  c10::SmallVector<Carry, 8> carry;  //!< per argument
  //! A list mixes openreg tensors with other tensors: the host converts every argument (see the Note).
  bool host_converts = false;
};

//! How the arguments of a call travel: the one walk of their tensors (Note [Walking an argument's
//! tensors] in Arguments.h). It reads device types only, which the shape pass's resizing keeps.
ArgumentsSeen see_arguments(const OpPlan& plan, c10::ArrayRef<IValue> args) {
  ArgumentsSeen seen;
  seen.carry.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const ArgKind kind = plan.args[i].kind;
    std::uint32_t openreg = 0;
    std::uint32_t others = 0;  // CPU tensors (scalars, indices) and undefined ones
    for_each_tensor(args[i], kind, [&](const at::Tensor& t, TensorPosition) {
      if (t.is_privateuseone()) {
        ++openreg;
      } else {
        ++others;
      }
    });
    Carry carry = Carry::kValue;
    if (openreg > 0 && kind == ArgKind::kTensor) {
      carry = Carry::kAlias;
    } else if (openreg > 0 && others == 0) {
      carry = Carry::kAliasList;
    } else if (openreg > 0) {
      seen.host_converts = true;
    }
    seen.carry.push_back(carry);
  }
  return seen;
}

//! What the call returns, in return order, and the fresh outputs among them (which the item writes).
struct Returns {
  std::vector<IValue> values;
  std::vector<at::Tensor> fresh;
};

//! The returns of the call: fresh outputs allocated on `device` with the geometry `outcome` gives,
//! written arguments as they are, views built as metadata over their argument.
Returns make_returns(const OpPlan& plan, c10::ArrayRef<IValue> args, const MetaOutcome& outcome,
                     c10::DeviceIndex device) {
  Returns returns{std::vector<IValue>(plan.returns.size()), {}};
  for (size_t j = 0; j < plan.returns.size(); ++j) {
    const auto& r = plan.returns[j];
    const auto& geometries = outcome.returns[j];
    switch (r.kind) {
      case ReturnKind::kFresh:
        if (r.is_list) {
          c10::List<at::Tensor> list;
          for (const auto& g : geometries) {
            returns.fresh.push_back(allocate_like(g, device));
            list.push_back(returns.fresh.back());
          }
          returns.values[j] = list;
        } else {
          TORCH_INTERNAL_ASSERT(geometries.size() == 1, plan.name, ": return ", j, " is not one tensor");
          returns.fresh.push_back(allocate_like(geometries[0], device));
          returns.values[j] = returns.fresh.back();
        }
        break;
      case ReturnKind::kWrittenArg:
        returns.values[j] = args[r.arg];
        break;
      case ReturnKind::kViewOfArg: {
        const at::Tensor& base = args[r.arg].toTensor();
        if (r.is_list) {
          c10::List<at::Tensor> list;
          for (const auto& g : geometries) list.push_back(view_over(base, g));
          returns.values[j] = list;
        } else {
          returns.values[j] = view_over(base, geometries.at(0));
        }
        break;
      }
      case ReturnKind::kNonTensor:
        TORCH_INTERNAL_ASSERT(false, plan.name, ": non-tensor return on the async path");
    }
  }
  return returns;
}

//! The call's work item: each argument as `seen` says it travels, then a slot per fresh output.
OpWorkItem make_work_item(const OpPlan& plan, c10::ArrayRef<IValue> args, const ArgumentsSeen& seen,
                          const std::vector<at::Tensor>& fresh, std::uint64_t seed) {
  OpWorkItem item{&plan, {}, nullptr, seed};
  item.values.reserve(args.size() + fresh.size());
  AliasConverter cpu(AliasTarget::kCpu);  // with recipes, the kValue arguments leave it nothing to convert
  if (seen.host_converts) {
    for (size_t i = 0; i < args.size(); ++i) item.values.push_back(capture_arg(args[i], plan.args[i], cpu));
    for (const auto& t : fresh) item.values.emplace_back(cpu.convert(t));
    return item;
  }
  item.recipes = std::make_unique<Recipes>();
  Recipes& recipes = *item.recipes;
  for (size_t i = 0; i < args.size(); ++i) {
    const auto slot = static_cast<std::uint32_t>(item.values.size());
    switch (seen.carry[i]) {
      case Carry::kAlias:
        recipes.add(args[i].toTensor(), slot);
        item.values.emplace_back();
        break;
      case Carry::kAliasList:
        recipes.add_list(args[i], plan.args[i].kind, slot);
        item.values.emplace_back();
        break;
      case Carry::kValue:
        item.values.push_back(capture_arg(args[i], plan.args[i], cpu));
        break;
    }
  }
  for (const auto& t : fresh) {
    if (t.defined()) recipes.add(t, static_cast<std::uint32_t>(item.values.size()));
    item.values.emplace_back(t.defined() ? IValue() : IValue(t));
  }
  return item;
}

}  // namespace

bool run_async(const c10::OperatorHandle& op, const OpPlan& plan, Stack* stack, c10::DeviceIndex device,
               ShapeLookup& shapes) {
  const size_t n = plan.args.size();
  auto args = torch::jit::last(*stack, n);
  // How each argument travels in the work item: the one walk of the arguments' tensors.
  const ArgumentsSeen seen = see_arguments(plan, args);

  // The outputs' geometry, from the shape pass or its cache (out= arguments it resized are resized
  // here); without it the sync path runs the call.
  std::optional<MetaOutcome> computed;
  const MetaOutcome* geometry = output_geometry(op, plan, args, shapes, computed);
  if (geometry == nullptr) return false;

  // The returns: fresh outputs allocated, written arguments, views.
  Returns returns = make_returns(plan, args, *geometry, device);

  // The work item, unless the call only makes views. An op that neither writes nor returns anything
  // runs for its effect (a device-side assert, _assert_async). A random op takes its seed now, when it
  // is issued.
  if (plan.writes || !returns.fresh.empty() || plan.returns.empty()) {
    // Under a graph capture a random op also notes where its seed came from, for the replays.
    c10::openreg::capture::SeedSource source;
    const bool capturing = c10::openreg::capture::capture_underway() && plan.random;
    OpWorkItem item = make_work_item(plan, args, seen, returns.fresh,
                                     take_seed(plan, args, device, capturing ? &source : nullptr));
    static_assert(kTravelsInline<OpWorkItem>, "the work item should travel inline");
    KernelRanges ranges;  // timing-only execution's values (Note [Values in timing-only execution])
    if (ranges.on()) {
      for (size_t i = 0; i < n; ++i) {
        const ArgPlan& a = plan.args[i];
        for_each_tensor(args[i], a.kind, [&](const at::Tensor& t, TensorPosition) {
          if (a.read) ranges.read(t);
          if (a.written) ranges.write(t);
        });
      }
      for (const at::Tensor& t : returns.fresh) ranges.write(t);
    }
    launch_kernel(c10::openreg::current_openreg_stream(device), plan.name, std::move(item),
                  [&] { return op_kernel_cost(op, args, returns.fresh); },
                  source.generator ? &source : nullptr, ranges.access());
  }

  // The returns replace the arguments on the stack.
  torch::jit::drop(*stack, n);
  for (auto& o : returns.values) stack->push_back(std::move(o));
  return true;
}

}  // namespace at::openreg
