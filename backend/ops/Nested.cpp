// Note [Nested tensors on openreg]
// PyTorch takes nested-tensor paths on PrivateUse1 devices as on CUDA: nn.TransformerEncoder in
// inference with a padding mask packs its input with _nested_tensor_from_mask, runs every layer's fast
// path (_transformer_encoder_layer_fwd) on the nested tensor and unpacks it with to_padded_tensor.
// ATen's nested kernels are registered for CPU and CUDA only, so the engine ran _nested_tensor_from_mask
// on CPU and then could not move its nested result to the device ("NestedTensorImpl doesn't support
// strides"), and an openreg nested tensor had no kernel for anything.
//
// openreg's nested tensors are ATen's NestedTensorImpl over an openreg buffer (the dispatch key
// NestedTensorPrivateUse1). Their ops, and the ops that make them from dense openreg tensors, run on
// CPU through one boxed kernel: the openreg arguments move to the host (a nested tensor as its buffer
// with the same sizes, strides and offsets), the op runs there, written arguments are copied back, and
// the results move to the device. Unlike the engine's ops this is synchronous on the calling thread,
// since every .cpu() waits for the stream, the way PyTorch's own CPU fallback for a backend works.
// Nested tensors are an inference fast path in these uses, so correctness first.

#include <ATen/NestedTensorImpl.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace at::openreg {
namespace {

bool is_openreg(const at::Tensor& t) { return t.defined() && t.is_privateuseone(); }

//! `t` on `device`: a nested tensor as a copy of its whole buffer with the same layout metadata, a
//! dense one as a plain copy.
at::Tensor moved(const at::Tensor& t, c10::Device device) {
  if (!t.defined() || t.device() == device) return t;
  if (!t.is_nested()) return t.to(device);
  const auto* impl = at::native::get_nested_tensor_impl(t);
  at::Tensor buffer = impl->get_unsafe_storage_as_tensor().to(device);
  return at::detail::make_tensor<at::native::NestedTensorImpl>(
      buffer, impl->get_nested_sizes(), impl->get_nested_strides(), impl->get_storage_offsets());
}

//! Writes `host` (the op's result on CPU) back into `original` (an openreg argument it wrote).
void copy_back(const at::Tensor& original, const at::Tensor& host) {
  if (!original.is_nested()) {
    original.copy_(host);
    return;
  }
  at::native::get_nested_tensor_impl(original)->get_unsafe_storage_as_tensor().copy_(
      at::native::get_nested_tensor_impl(host)->get_unsafe_storage_as_tensor());
}

c10::IValue map_tensors(const c10::IValue& v, const std::function<at::Tensor(const at::Tensor&)>& f) {
  if (v.isTensor()) return f(v.toTensor());
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList()) out.push_back(f(t));
    return out;
  }
  if (v.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> out;
    for (const std::optional<at::Tensor>& t : v.toOptionalTensorList()) {
      out.push_back(t.has_value() ? std::optional<at::Tensor>(f(*t)) : std::nullopt);
    }
    return out;
  }
  return v;
}

void run_nested_on_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const size_t n = schema.arguments().size();
  auto args = torch::jit::last(*stack, n);

  std::optional<c10::Device> device;  // the openreg device of the arguments, or the one an argument names
  // Where the results go: the openreg device, unless the op names another device (a .to("cpu")).
  bool results_to_device = true;
  std::vector<c10::IValue> originals(args.begin(), args.end());
  torch::jit::Stack host;
  host.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const c10::IValue& a = args[i];
    if (a.isDevice()) {
      if (a.toDevice().is_privateuseone()) {
        if (!device) device = a.toDevice();  // a CPU nested tensor .to("openreg")
        host.emplace_back(c10::Device(c10::kCPU));
      } else {
        results_to_device = false;
        host.push_back(a);
      }
      continue;
    }
    host.push_back(map_tensors(a, [&](const at::Tensor& t) {
      if (!is_openreg(t)) return t;
      if (!device || !device->has_index()) device = t.device();
      return moved(t, c10::Device(c10::kCPU));
    }));
  }
  TORCH_INTERNAL_ASSERT(device.has_value(), schema.name(),
                        ": reached openreg's nested kernel with no openreg tensor or device");
  const std::vector<c10::IValue> host_args(host.begin(), host.end());  // share the tensors the op writes
  op.callBoxed(&host);

  // Arguments the op wrote (in-place and out=) get the host's values; returns that alias them are them.
  for (size_t i = 0; i < n; ++i) {
    const auto* alias = schema.arguments()[i].alias_info();
    if (alias != nullptr && alias->isWrite() && originals[i].isTensor() && is_openreg(originals[i].toTensor())) {
      copy_back(originals[i].toTensor(), host_args[i].toTensor());
    }
  }
  torch::jit::drop(*stack, n);
  for (size_t j = 0; j < host.size(); ++j) {
    const auto* alias = schema.returns()[j].alias_info();
    if (alias != nullptr && alias->isWrite()) {
      // The written argument with the same alias set.
      for (size_t i = 0; i < n; ++i) {
        const auto* arg_alias = schema.arguments()[i].alias_info();
        if (arg_alias != nullptr && arg_alias->beforeSets() == alias->beforeSets()) {
          stack->push_back(originals[i]);
          break;
        }
      }
      continue;
    }
    stack->push_back(results_to_device ? map_tensors(host[j], [&](const at::Tensor& t) { return moved(t, *device); })
                                       : host[j]);
  }
}

}  // namespace

TORCH_LIBRARY_IMPL(_, NestedTensorPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&run_nested_on_cpu>());
}

namespace {
// A fallback ranks below an op's CompositeImplicitAutograd kernel, and ops such as linear and matmul
// have one besides their nested kernels for CPU and CUDA: on openreg they decomposed into dense ops
// that cannot take a nested tensor. So every aten op with a kernel of its own for NestedTensorCPU gets
// this kernel for NestedTensorPrivateUse1 too, as CUDA's nested tensors have theirs. ATen's
// registrations are complete when this library loads (it links against libtorch_cpu).
const bool g_nested_kernels_registered = [] {
  static torch::Library lib(torch::Library::IMPL, "aten", c10::DispatchKey::NestedTensorPrivateUse1, __FILE__,
                            __LINE__);
  constexpr std::string_view kPrefix = "aten::";
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    if (name.name.compare(0, kPrefix.size(), kPrefix) != 0) continue;
    const auto op = c10::Dispatcher::singleton().findOp(name);
    if (!op || !op->hasKernelForDispatchKey(c10::DispatchKey::NestedTensorCPU)) continue;
    std::string impl_name = name.name.substr(kPrefix.size());
    if (!name.overload_name.empty()) impl_name += "." + name.overload_name;
    lib.impl(impl_name.c_str(), torch::CppFunction::makeFromBoxedFunction<&run_nested_on_cpu>());
  }
  return true;
}();
}  // namespace

// The ops that make nested tensors from dense ones (their kernels are CPU's and CUDA's).
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* name : {"_nested_tensor_from_mask", "_nested_from_padded", "_nested_tensor_from_tensor_list",
                           "_nested_from_padded_and_nested_example"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&run_nested_on_cpu>());
  }
}

}  // namespace at::openreg
