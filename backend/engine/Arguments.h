#pragma once
// Argument conversion: stand-ins for openreg tensors that kernels of other dispatch keys can take: Meta
// tensors (metadata only, to compute output shapes on the host) and zero-copy CPU aliases (device memory
// is host memory, so a CPU tensor over the same bytes lets a CPU kernel run on the device's data); and
// what the other arguments (generators, devices, host tensors) become.
//
// A converter maps each distinct openreg storage to ONE stand-in storage, so tensors that share memory
// still share it after conversion: the CPU kernels' overlap checks ("unsupported operation: some
// elements of the input tensor and the written-to tensor refer to a single memory location") and
// in-place semantics then behave as on CPU.
//
// Note [Walking an argument's tensors]
// Which values of an argument are tensors follows from its kind (ArgKind, OpPlan.h) alone: a Tensor or
// Tensor? argument is one tensor (an absent Tensor? arrives as None), a Tensor[] list holds tensors, a
// Tensor?[] list tensors and None; other kinds hold none. for_each_tensor below is that rule, once:
// every engine step that looks at a call's tensors (its device, the overlap rules, out= resizing, the
// work item's recipes) walks them with it, and the steps that replace them (convert_arg, capture_arg,
// the coverage probe's stand-ins) rebuild their lists around it with substitute_tensors. A tensor's TensorPosition names the same tensor in another value of
// the argument's shape, such as its stand-in.
//
// Thread-safety: a converter is used by one thread at a time; the rest are pure functions.

#include "backend/engine/OpPlan.h"
#include "backend/runtime/Capture.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Storage.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace at::openreg {

//! Where a tensor sits in its argument: the argument itself, or one element of its list.
struct TensorPosition {
  static constexpr std::uint32_t kWhole = ~std::uint32_t{0};

  std::uint32_t element = kWhole;  //!< the list index, or kWhole for a Tensor argument

  bool in_list() const noexcept { return element != kWhole; }
  //! The tensor at this position in `v`, a value of the walked argument's shape (its stand-in).
  const at::Tensor& tensor_in(const c10::IValue& v) const {
    return in_list() ? v.toListRef()[element].toTensor() : v.toTensor();
  }
};

//! Calls `f(tensor, position)` for each tensor that `v`, an argument of kind `kind`, holds, in order
//! (Note [Walking an argument's tensors]). Undefined tensors are visited; None is not.
template <typename F>
void for_each_tensor(const c10::IValue& v, ArgKind kind, F&& f) {
  if (kind == ArgKind::kTensor) {
    if (v.isTensor()) f(v.toTensor(), TensorPosition{});
    return;
  }
  if ((kind != ArgKind::kTensorList && kind != ArgKind::kOptionalTensorList) || !v.isList()) return;
  const c10::ArrayRef<c10::IValue> elements = v.toListRef();
  for (std::uint32_t k = 0; k < elements.size(); ++k) {
    if (elements[k].isTensor()) f(elements[k].toTensor(), TensorPosition{k});
  }
}

//! `v`, an argument planned as `a`, with each tensor replaced by `tensor(t)` (a list argument becomes
//! a new list of its type, None elements kept), a Generator by `generator`, and an openreg Device by
//! `device_type`; every other value as it is.
template <typename F>
c10::IValue substitute_tensors(const c10::IValue& v, const ArgPlan& a, F&& tensor, const c10::IValue& generator,
                       c10::DeviceType device_type) {
  switch (a.kind) {
    case ArgKind::kGenerator:
      return generator;
    case ArgKind::kDevice:
      return v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1 ? c10::IValue(c10::Device(device_type)) : v;
    case ArgKind::kTensorList: {
      if (!v.isList()) return v;
      c10::List<at::Tensor> out;
      out.reserve(v.toListRef().size());
      for_each_tensor(v, a.kind, [&](const at::Tensor& t, TensorPosition) { out.push_back(tensor(t)); });
      return out;
    }
    case ArgKind::kOptionalTensorList: {
      if (!v.isList()) return v;
      c10::List<std::optional<at::Tensor>> out;
      out.resize(v.toListRef().size());  // None until the walk sets the tensors
      for_each_tensor(v, a.kind, [&](const at::Tensor& t, TensorPosition p) { out.set(p.element, tensor(t)); });
      return out;
    }
    default: {  // a Tensor argument, or one that holds no tensor
      c10::IValue out = v;
      for_each_tensor(v, a.kind, [&](const at::Tensor& t, TensorPosition) { out = tensor(t); });
      return out;
    }
  }
}

//! What an openreg storage becomes: a Meta storage, a CPU alias of the device bytes, or CPU scratch
//! bytes of the same size (zeroed, lazily for large ones; for running a CPU kernel only to see the results' geometry,
//! Note [Meta kernels written in Python] in ShapePass.cpp).
enum class AliasTarget { kMeta, kCpu, kCpuScratch };

class AliasConverter {
 public:
  explicit AliasConverter(AliasTarget target) : target_(target) {}

  //! The stand-in for `t`: same sizes, strides, storage offset, dtype, conj/neg bits; tensors
  //! sharing a storage get stand-ins sharing one, and one tensor passed twice gets one stand-in, so a
  //! kernel's identity checks see what the caller passed (TensorIterator refuses to resize an output
  //! that is also an input, and tells that by identity). Undefined and non-openreg tensors are returned
  //! as-is.
  at::Tensor convert(const at::Tensor& t);

  //! The openreg storage behind a stand-in storage made by this converter, or nullptr.
  const c10::Storage* source_of(const c10::StorageImpl* standin) const;

 private:
  const c10::Storage& standin_storage(const c10::Storage& real);

  AliasTarget target_;
  // Few storages per op: a linear scan beats hashing.
  c10::SmallVector<std::pair<c10::Storage, c10::Storage>, 4> storages_;  // (openreg, stand-in)
  c10::SmallVector<std::pair<const c10::TensorImpl*, at::Tensor>, 4> tensors_;  // (openreg, stand-in)
};

//! A warning handler that drops every warning, for kernels run on stand-ins or aliases whose warnings
//! are noise or were already raised: the op coverage probe (stand-in data) and kernels on device
//! threads (no Python frame to attach to; the shape pass raised the shape/type warnings on the
//! caller's thread). Stateless and leaked, like every object device threads touch (they may run
//! during static destruction), so any thread may install it at any time.
c10::WarningHandler* silent_warning_handler();

//! A CPU storage over `nbytes` of device memory at `data`, for the CPU aliases kernels run on: no
//! deleter (the bytes belong to the device allocator, and the work item keeps them alive) and not
//! resizable (every output already has its final size, so a resize would be our bug and must fail).
c10::Storage cpu_storage_over(void* data, std::size_t nbytes);

//! A CPU tensor over `t`'s device memory (no ownership; `t` must outlive it). For single tensors
//! outside a converter, e.g. host-side copies into a freshly allocated output.
at::Tensor cpu_alias_of(const at::Tensor& t);

//! Replaces openreg tensors (also inside lists), generators and devices of one argument by their Meta
//! or CPU stand-ins. `cpu_generator` is what a Generator argument becomes (None for the shape pass);
//! `device_type` what an openreg Device argument becomes.
c10::IValue convert_arg(const c10::IValue& v, const ArgPlan& a, AliasConverter& conv,
                        const c10::IValue& cpu_generator, c10::DeviceType device_type);

//! The argument as a work item holds it when the host converts it: openreg tensors (also inside lists)
//! as CPU aliases from `cpu`; CPU tensors of Tensor and Tensor?[] arguments copied (the item reads
//! them when it runs, CUDA when the op is issued; Python numbers wrapped as tensors need no copy); an
//! openreg Device as CPU; a Generator as None (the item seeds its own CPU generator).
c10::IValue capture_arg(const c10::IValue& v, const ArgPlan& a, AliasConverter& cpu);

//! The seed a random op takes when it is issued (Note [Random ops take their seed at enqueue time] in
//! runtime/Generator.h), from its Generator argument or its device's default generator; 0 for other ops.
std::uint64_t take_seed(const OpPlan& plan, c10::ArrayRef<c10::IValue> args, c10::DeviceIndex device,
                        c10::openreg::capture::SeedSource* source = nullptr);

}  // namespace at::openreg
