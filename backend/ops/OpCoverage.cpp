// See Note [Op coverage is decided at the call] in OpCoverage.h.

#include "backend/ops/OpCoverage.h"

#include <c10/util/Exception.h>
#include <torch/library.h>

#include <string_view>
#include <unordered_map>

namespace at::openreg {
namespace {

enum class Verdict { kRuns, kNoCpuKernel, kQuantized, kSparse };

// aten ops that turn dense tensors into quantized ones (their CPU kernels exist, but openreg has no
// quantized tensors: their results would come back as dense tensors of the wrong type).
bool makes_quantized_tensors(std::string_view name) {
  constexpr std::string_view prefixes[] = {
      "aten::quantize_per_",        "aten::_make_per_tensor_quantized_tensor",
      "aten::_make_per_channel_quantized_tensor", "aten::_empty_affine_quantized",
      "aten::_empty_per_channel_affine_quantized", "quantized::",
  };
  for (auto p : prefixes) {
    if (name.substr(0, p.size()) == p) return true;
  }
  return false;
}

// aten ops that turn dense tensors into sparse ones.
bool makes_sparse_tensors(std::string_view name) {
  constexpr std::string_view prefixes[] = {"aten::to_sparse", "aten::_to_sparse", "aten::_sparse_", "aten::sparse_"};
  for (auto p : prefixes) {
    if (name.substr(0, p.size()) == p) return true;
  }
  return false;
}

Verdict verdict_for(const c10::OperatorHandle& op, const ExecutePlan& plan) {
  if (makes_quantized_tensors(plan.name)) return Verdict::kQuantized;
  if (makes_sparse_tensors(plan.name)) return Verdict::kSparse;
  // The computed CPU entry covers CPU kernels and the composite kernels CPU inherits: exactly what the
  // fallback's redispatch to CPU would find.
  if (!op.hasComputedKernelForDispatchKey(c10::DispatchKey::CPU)) return Verdict::kNoCpuKernel;
  return Verdict::kRuns;
}

bool is_quantized_dtype(const c10::IValue& v) {
  // A ScalarType argument arrives as an int.
  if (!v.isInt()) return false;
  const auto t = v.toInt();
  if (t < 0 || t >= static_cast<int64_t>(c10::ScalarType::NumOptions)) return false;
  return c10::isQIntType(static_cast<c10::ScalarType>(t));
}

bool is_sparse_layout(const c10::IValue& v) {
  // A Layout argument arrives as an int.
  return v.isInt() && v.toInt() != static_cast<int64_t>(c10::kStrided);
}

[[noreturn]] void refuse_sparse_op(const char* what) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, what, " is not supported on openreg: openreg has no sparse tensors, only dense ",
                              "(strided) ones");
}

[[noreturn]] void refuse_quantized(const char* what) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, what, " is not supported on openreg: openreg has no quantized tensors ",
                              "(quantize on CPU, or use fake quantization on openreg)");
}

}  // namespace

void check_op_coverage(const c10::OperatorHandle& op, const ExecutePlan& plan, c10::ArrayRef<c10::IValue> args) {
  // Plans live for the process and are one per operator, so a per-thread map needs no lock.
  thread_local std::unordered_map<const ExecutePlan*, Verdict> verdicts;
  auto it = verdicts.find(&plan);
  if (it == verdicts.end()) it = verdicts.emplace(&plan, verdict_for(op, plan)).first;
  switch (it->second) {
    case Verdict::kRuns:
      break;
    case Verdict::kNoCpuKernel:
      TORCH_CHECK_NOT_IMPLEMENTED(false, "Could not run '", plan.name,
                                  "' on openreg: the op has no kernel openreg can run (openreg executes ops ",
                                  "through their CPU kernels, and this op has none)");
    case Verdict::kQuantized:
      refuse_quantized(plan.name);
    case Verdict::kSparse:
      refuse_sparse_op(plan.name);
  }
  const auto& schema_args = op.schema().arguments();
  for (size_t i = 0; i < args.size() && i < schema_args.size(); ++i) {
    const auto& type = schema_args[i].real_type();
    const bool scalar_type_arg = type->kind() == c10::TypeKind::ScalarTypeType ||
                                 (type->kind() == c10::TypeKind::OptionalType &&
                                  type->containedType(0)->kind() == c10::TypeKind::ScalarTypeType);
    if (scalar_type_arg && is_quantized_dtype(args[i])) refuse_quantized(plan.name);
    const bool layout_arg = type->kind() == c10::TypeKind::LayoutType ||
                            (type->kind() == c10::TypeKind::OptionalType &&
                             type->containedType(0)->kind() == c10::TypeKind::LayoutType);
    if (layout_arg && is_sparse_layout(args[i])) refuse_sparse_op(plan.name);
  }
}

namespace {

// Tensors with these layouts/types carry the SparsePrivateUse1 / QuantizedPrivateUse1 keys, so every
// op on them (and every factory making them on openreg) lands here instead of the dense fallback.
void refuse_sparse(const c10::OperatorHandle& op, torch::jit::Stack*) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "Could not run '", op.schema().operator_name(),
                              "' with sparse tensors on openreg: openreg supports only dense (strided) tensors");
}

void refuse_sparse_csr(const c10::OperatorHandle& op, torch::jit::Stack*) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "Could not run '", op.schema().operator_name(),
                              "' with sparse compressed tensors on openreg: openreg supports only dense (strided) "
                              "tensors");
}

void refuse_quantized_tensor(const c10::OperatorHandle& op, torch::jit::Stack*) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "Could not run '", op.schema().operator_name(),
                              "' with quantized tensors on openreg: openreg has no quantized tensors");
}

}  // namespace

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse_sparse>());
}

TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse_sparse_csr>());
}

TORCH_LIBRARY_IMPL(_, QuantizedPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse_quantized_tensor>());
}

}  // namespace at::openreg
