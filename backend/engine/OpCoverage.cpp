// See Note [Op coverage is decided at the call] in engine/OpCoverage.h.

#include "backend/engine/OpCoverage.h"
#include "backend/engine/Launch.h"
#include "backend/engine/ExecuteThreads.h"

#include "backend/engine/Arguments.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <string>
#include <unordered_map>

namespace at::openreg {
namespace {

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
  TORCH_CHECK_NOT_IMPLEMENTED(false, what, " is not supported on openreg for this layout: openreg has dense "
                              "(strided) and sparse COO tensors, no sparse compressed ones (CSR, CSC, BSR, BSC)");
}

[[noreturn]] void refuse_quantized(const char* what) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, what, " is not supported on openreg: openreg has no quantized tensors ",
                              "(quantize on CPU, or use fake quantization on openreg)");
}

// ---------------------------------------------------------------------------------------------------
// Kernels for the argument types (Note [Probing CPU kernels for the argument types]).

// Note [Probing CPU kernels for the argument types]
// A CPU kernel may exist and still not handle the arguments' dtypes ("not implemented for 'Half'"):
// meta kernels do not know, so the async path would return a well-formed tensor and the kernel would
// fail on the device thread. CUDA raises such errors at the call. So the first time a thread sees an
// async op with a given combination of argument types, it runs the CPU kernel once on the host on
// stand-ins of the same types and sizes (zero scalars expanded to the sizes: no memory per element;
// integer ones, mostly indices, dense)
// and remembers whether it raised NotImplementedError, the error type of aten's dtype dispatch. Other
// errors of the probe are ignored: zeros may be invalid data (a singular matrix), which the real call
// reports as CPU does. Written arguments get real stand-ins (in-place self: zeros of its size, once per
// combination of types; out=: an empty tensor the kernel resizes). Random ops without a Generator
// argument are not probed: they would draw from CPU's default generator.

void append_type(std::string& key, const at::Tensor& t) {
  key.push_back(t.defined() ? static_cast<char>(t.scalar_type()) : '\x7f');
  key.push_back(t.defined() && t.is_cpu() ? 'c' : 'd');
}

//! The argument types that decide which CPU kernel (and dtype branch) runs.
bool type_key(const c10::OperatorHandle& op, const OpPlan& plan, c10::ArrayRef<c10::IValue> args,
              std::string& key) {
  key.clear();
  const OpPlan* plan_ptr = &plan;
  key.append(reinterpret_cast<const char*>(&plan_ptr), sizeof(plan_ptr));
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& v = args[i];
    key.push_back('|');
    if (v.isTensor()) {
      append_type(key, v.toTensor());
    } else if (v.isList()) {
      for (const auto& e : v.toListRef()) {
        if (e.isTensor()) append_type(key, e.toTensor());
        else key.push_back('n');
      }
    } else if (v.isDouble()) {
      key.push_back('f');
    } else if (v.isComplexDouble()) {
      key.push_back('z');
    } else if (v.isBool()) {
      key.push_back('b');
    } else if (v.isInt()) {
      // ScalarType arguments are ints whose value matters (sum(dtype=...)); other ints are sizes.
      key.push_back('i');
      if (plan.args[i].scalar_type) key.push_back(static_cast<char>(v.toInt()));
    } else if (v.isNone()) {
      key.push_back('n');
    } else if (v.isString()) {
      key.append(v.toStringRef());  // modes that pick a kernel: reduce="mean"
    }
  }
  return true;
}

//! What the probe passes for `t`: read arguments become expanded zero scalars; written ones real
//! zero tensors (in-place self), or empty ones that the kernel resizes (out=).
at::Tensor probe_standin(const at::Tensor& t, bool written, bool out_arg) {
  if (!t.defined()) return t;
  if (!written && t.is_cpu()) return t;  // CPU arguments that are only read: use them as they are
  const auto options = t.options().device(c10::kCPU);
  // Integer arguments are mostly indices, which some CPU kernels read through a raw pointer as if
  // dense (adaptive_max_pool3d_backward crashed on expanded indices): they get dense zeros.
  if (!written && c10::isIntegralType(t.scalar_type(), /*includeBool=*/true)) return at::zeros(t.sizes(), options);
  if (!written) return at::zeros({}, options).expand(t.sizes());
  if (out_arg) return at::empty({0}, options);
  return at::zeros(t.sizes(), options);
}

c10::IValue probe_arg(const c10::IValue& v, const ArgPlan& a, bool out_arg) {
  return substitute_tensors(
      v, a, [&](const at::Tensor& t) { return probe_standin(t, a.written, out_arg); },
      c10::IValue(at::make_generator<at::CPUGeneratorImpl>(0)), c10::kCPU);
}

enum class ProbeResult { kRuns, kRefused, kInconclusive };

//! Runs CPU's kernel on stand-ins; kRefused (with CPU's message in `refusal`) when it raises
//! NotImplementedError.
ProbeResult probe(const c10::OperatorHandle& op, const OpPlan& plan, c10::ArrayRef<c10::IValue> args,
                  std::string* refusal) {
  c10::WarningUtils::WarningHandlerGuard warnings(silent_warning_handler());  // stand-in data: noise
  SerialHostKernelScope serial;
  const auto& schema_args = op.schema().arguments();
  // Expanded stand-ins first (no memory); some kernels reject zero strides before they look at the
  // dtype, so a failure other than NotImplementedError is retried once on dense zeros.
  for (bool dense : {false, true}) {
    try {
      torch::jit::Stack stack;
      stack.reserve(args.size());
      for (size_t i = 0; i < args.size(); ++i) {
        c10::IValue v = probe_arg(args[i], plan.args[i], schema_args[i].kwarg_only());
        if (dense && v.isTensor() && v.toTensor().defined() && !plan.args[i].written) v = v.toTensor().contiguous();
        stack.push_back(std::move(v));
      }
      op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &stack);
      return ProbeResult::kRuns;
    } catch (const c10::NotImplementedError& e) {
      *refusal = e.what_without_backtrace();
      return ProbeResult::kRefused;
    } catch (const std::exception&) {
      // Not a question of types, or not known yet (the data or these sizes failed first).
    }
  }
  return ProbeResult::kInconclusive;
}

bool has_empty_tensor(c10::ArrayRef<c10::IValue> args) {
  for (const auto& v : args) {
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().numel() == 0) return true;
    if (v.isList()) {
      for (const auto& e : v.toListRef()) {
        if (e.isTensor() && e.toTensor().defined() && e.toTensor().numel() == 0) return true;
      }
    }
  }
  return false;
}

bool probe_eligible(const OpPlan& plan) {
  if (plan.sync_only) return false;  // the sync path runs CPU's kernel at the call already
  // Timing-only execution runs no kernel, so what CPU's kernels lack does not matter; and the probe
  // would run the CPU kernel at the call's sizes (a full-size matmul) on the host.
  if (timing_only_on()) return false;
  if (plan.random && plan.generator_arg < 0) return false;
  return true;
}

//! What is known of CPU's kernel for the call's argument types (see check_op_coverage).
CoverageVerdict check_kernel_for_types(const c10::OperatorHandle& op, const OpPlan& plan,
                                       c10::ArrayRef<c10::IValue> args) {
  if (!probe_eligible(plan)) return CoverageVerdict::kRuns;
  // An inconclusive probe (the stand-ins' zeros or these sizes failed first) is retried on later calls,
  // a few times: an op whose probe can never conclude must not pay for one on every call.
  constexpr int kMaxInconclusive = 3;
  struct Known {
    bool decided = false;
    int inconclusive = 0;
    std::string refusal;  // CPU's NotImplementedError message, empty when the kernel runs
  };
  // Per thread, so no lock; an entry per (op, argument types) seen, a few thousand at most.
  thread_local std::unordered_map<std::string, Known> known;
  thread_local std::string key;
  if (!type_key(op, plan, args, key)) return CoverageVerdict::kRuns;  // types it cannot name are never probed
  Known& k = known[key];
  if (!k.decided) {
    switch (probe(op, plan, args, &k.refusal)) {
      case ProbeResult::kRuns:
        // Kernels return early on empty tensors, before their dtype dispatch: that proves nothing.
        k.decided = !has_empty_tensor(args);
        break;
      case ProbeResult::kRefused:
        k.decided = true;
        break;
      case ProbeResult::kInconclusive:
        k.decided = ++k.inconclusive >= kMaxInconclusive;
        break;
    }
  }
  if (!k.refusal.empty()) return CoverageVerdict::kRefusedByTypes;
  return k.decided ? CoverageVerdict::kRuns : CoverageVerdict::kUndecided;
}

}  // namespace

void raise_type_refusal(const OpPlan& plan, const std::string& cpu_message) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "Could not run '", plan.name, "' on openreg with these argument ",
                              "types: its CPU kernel, which openreg runs, says: ", cpu_message);
}

CoverageVerdict check_op_coverage(const c10::OperatorHandle& op, const OpPlan& plan,
                                  c10::ArrayRef<c10::IValue> args) {
  switch (plan.coverage) {
    case Coverage::kRuns:
      break;
    case Coverage::kNoCpuKernel:
      TORCH_CHECK_NOT_IMPLEMENTED(false, "Could not run '", plan.name,
                                  "' on openreg: the op has no kernel openreg can run (openreg executes ops ",
                                  "through their CPU kernels, and this op has none)");
    case Coverage::kMakesQuantized:
      refuse_quantized(plan.name);
    case Coverage::kMakesSparse:
      refuse_sparse_op(plan.name);
  }
  for (size_t i = 0; i < args.size() && i < plan.args.size(); ++i) {
    if (plan.args[i].scalar_type && is_quantized_dtype(args[i])) refuse_quantized(plan.name);
    if (plan.args[i].layout && is_sparse_layout(args[i])) refuse_sparse_op(plan.name);
  }
  return check_kernel_for_types(op, plan, args);
}

namespace {

// Tensors with these layouts/types carry the SparseCsrPrivateUse1 / QuantizedPrivateUse1 keys, so every
// op on them (and every factory making them on openreg) lands here instead of the dense fallback.
// (Sparse COO tensors have kernels of their own: Note [Sparse COO on openreg] in ops/Sparse.cpp.)
void refuse_sparse_csr(const c10::OperatorHandle& op, torch::jit::Stack*) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "Could not run '", op.schema().operator_name(),
                              "' with sparse compressed tensors on openreg: openreg has dense (strided) and sparse "
                              "COO tensors, no sparse compressed ones (CSR, CSC, BSR, BSC)");
}

void refuse_quantized_tensor(const c10::OperatorHandle& op, torch::jit::Stack*) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "Could not run '", op.schema().operator_name(),
                              "' with quantized tensors on openreg: openreg has no quantized tensors");
}

}  // namespace

TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse_sparse_csr>());
}

TORCH_LIBRARY_IMPL(_, QuantizedPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse_quantized_tensor>());
}

}  // namespace at::openreg
