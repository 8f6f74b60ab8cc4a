#include "backend/ops/HostRoundTrip.h"
#include "backend/engine/OpEngine.h"

#include <ATen/NestedTensorImpl.h>
#include <ATen/SparseCsrTensorUtils.h>
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace at::openreg {
namespace {

bool is_openreg(const at::Tensor& t) { return t.defined() && t.is_privateuseone(); }

//! `t` on `device`: a nested tensor as a copy of its whole buffer with the same layout metadata, a
//! sparse or dense one as ATen's own copy (a sparse one's indices and values move).
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
    original.copy_(host);  // a sparse original takes the host's indices, values and coalesced flag
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

//! Every tensor of a call on one device, as the engine requires of dense ops (Note in OpEngine.cpp):
//! CPU tensors only as 0-d values or as index lists. copy_ and ops naming a device move between them.
void check_one_device(const c10::FunctionSchema& schema, c10::ArrayRef<c10::IValue> args) {
  if (schema.name() == "aten::copy_") return;
  std::optional<c10::Device> openreg;
  std::optional<c10::Device> foreign;
  for (const c10::IValue& a : args) {
    if (a.isDevice()) return;
    const bool index_list = a.isOptionalTensorList();
    map_tensors(a, [&](const at::Tensor& t) {
      if (!t.defined()) return t;
      if (is_openreg(t)) {
        if (openreg && *openreg != t.device()) foreign = t.device();
        if (!openreg) openreg = t.device();
      } else if (!index_list && t.dim() > 0 && !foreign) {
        foreign = t.device();
      }
      return t;
    });
  }
  if (openreg && foreign) raise_two_devices(*openreg, *foreign);
}

}  // namespace

void run_on_host(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const size_t n = schema.arguments().size();
  auto args = torch::jit::last(*stack, n);
  check_one_device(schema, args);

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
                        ": reached openreg's host kernel with no openreg tensor or device");
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
    if (!results_to_device) {
      stack->push_back(host[j]);
      continue;
    }
    stack->push_back(map_tensors(host[j], [&](const at::Tensor& t) {
      TORCH_CHECK_NOT_IMPLEMENTED(!t.defined() || !at::sparse_csr::is_sparse_compressed(t), schema.name(),
                                  " is not supported on openreg for this layout: openreg has dense (strided) and ",
                                  "sparse COO tensors, no sparse compressed ones (CSR, CSC, BSR, BSC)");
      return moved(t, *device);
    }));
  }
}

void register_host_kernels_like(torch::Library& lib, c10::DispatchKey cpu_key,
                                c10::ArrayRef<std::string_view> except) {
  constexpr std::string_view kPrefix = "aten::";
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    if (name.name.compare(0, kPrefix.size(), kPrefix) != 0) continue;
    const auto op = c10::Dispatcher::singleton().findOp(name);
    if (!op || !op->hasKernelForDispatchKey(cpu_key)) continue;
    std::string impl_name = name.name.substr(kPrefix.size());
    if (!name.overload_name.empty()) impl_name += "." + name.overload_name;
    if (std::find(except.begin(), except.end(), impl_name) != except.end()) continue;
    lib.impl(impl_name.c_str(), torch::CppFunction::makeFromBoxedFunction<&run_on_host>());
  }
}

}  // namespace at::openreg
