#include "backend/engine/KernelCost.h"
#include "backend/engine/FusedKernel.h"
#include "backend/engine/OptimizerStep.h"

#include <ATen/Context.h>
#include <ATen/core/Tensor.h>

#include <openreg/sim/profile.h>
#include <openreg/sim/runtime.h>

#include <algorithm>
#include <optional>
#include <string_view>

namespace at::openreg {
namespace sim = ::openreg::sim;

namespace {

double tensor_bytes(const at::Tensor& t) {
  return t.defined() ? static_cast<double>(t.numel()) * static_cast<double>(t.element_size()) : 0.0;
}

// Bytes of every tensor in `v` (a tensor, a list of tensors, or something else: 0).
double value_bytes(const c10::IValue& v) {
  if (v.isTensor()) return tensor_bytes(v.toTensor());
  double sum = 0;
  if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList().vec()) sum += tensor_bytes(t);
  } else if (v.isList()) {
    for (const c10::IValue& e : v.toListRef()) {
      if (e.isTensor()) sum += tensor_bytes(e.toTensor());
    }
  }
  return sum;
}

const at::Tensor* tensor_arg(c10::ArrayRef<c10::IValue> args, std::size_t i) {
  return i < args.size() && args[i].isTensor() && args[i].toTensor().defined() ? &args[i].toTensor() : nullptr;
}

// A matmul of a (.., m, k) by (.., k, n), batch folded into m.
void gemm(sim::KernelCost& cost, double batch, std::int64_t m, std::int64_t k, std::int64_t n) {
  cost.flops = 2.0 * batch * static_cast<double>(m) * static_cast<double>(k) * static_cast<double>(n);
  cost.rows = static_cast<std::int64_t>(batch) * m;
  cost.cols = n;
  cost.matrix = true;
  cost.kind = sim::KernelClass::kMatmul;
}

bool starts_with(std::string_view name, std::string_view prefix) { return name.rfind(prefix, 0) == 0; }

// Scaled dot product attention's kernels, forward and backward (the math variant is a composite: its
// matmuls and softmax arrive as their own ops).
bool attention_op(std::string_view name) {
  return starts_with(name, "aten::_scaled_dot_product_") || starts_with(name, "aten::_flash_attention") ||
         starts_with(name, "aten::_efficient_attention");
}

// Note [Optimizer steps on the virtual clock]
// PyTorch's foreach ops have no PrivateUse1 kernel: their CompositeExplicitAutograd loop issues one
// elementwise op per tensor, so torch.optim's default (foreach) step reaches openreg as ordinary add_,
// mul_, lerp_, addcdiv_ kernels, and so does a single-tensor step; by name they are memory-bound like any
// other. What knows they are the optimizer's is the optimizer: with a device profile, torch_openreg
// registers torch.optim's global step hooks (python/torch_openreg/openreg/timing.py), which set this
// thread's flag around every step, and a memory-bound kernel issued meanwhile counts as the
// optimizer's (a matmul inside a step, as in Shampoo or Muon, stays a matmul). Only the class changes,
// never the kernel's time. A step that raises skips the post hook: the flag stays set until the next
// step ends.
thread_local bool tl_in_optimizer_step = false;

// `kind`, or the optimizer's class for a memory-bound kernel issued inside an optimizer step.
sim::KernelClass optimizer_or(sim::KernelClass kind) noexcept {
  return tl_in_optimizer_step && kind == sim::KernelClass::kMemoryBound ? sim::KernelClass::kOptimizer : kind;
}

// Note [Kernels CUDA fuses]
// Some ops openreg builds from several ATen ops run on CUDA as one kernel: native_dropout is CUDA's
// fused dropout kernel (it reads the input once and writes the output and the mask), openreg's a
// bernoulli_, a mul, a mul_ and a cast (ops/Dropout.cpp), which would cost three times the memory
// traffic on the virtual clock. Inside a FusedKernelScope the first kernel the thread issues costs what
// CUDA's one kernel costs and the others nothing beyond the minimum kernel time, so a program's time is
// its CUDA kernels', not openreg's construction. Costs are made on the issuing thread, at issue.
thread_local const sim::KernelCost* tl_fused = nullptr;
thread_local bool tl_fused_spent = false;

sim::KernelCost fused_or(const sim::KernelCost& cost) noexcept {
  if (tl_fused == nullptr) return cost;
  if (!tl_fused_spent) {
    tl_fused_spent = true;
    return *tl_fused;
  }
  sim::KernelCost rest;
  rest.kind = tl_fused->kind;
  return rest;
}

// The op class of an op that is not a matmul (Note [Where time goes] in sim/src/virtual_clock.cpp), from
// its name, the one thing known at issue. Optimizer: the fused optimizers (one kernel for the step),
// and a foreach op that arrives as one kernel; not _foreach_copy_ (FSDP2's all-gather copy-in) or
// _foreach_zero_ (zero_grad without set_to_none), which move or fill memory for other purposes. A
// foreach or single-tensor optimizer step's per-tensor kernels are found by the thread's optimizer-step
// flag instead (Note [Optimizer steps on the virtual clock]).
sim::KernelClass named_class(std::string_view name) {
  if (attention_op(name)) return sim::KernelClass::kAttention;
  if (starts_with(name, "aten::_foreach_")) {
    const bool other = starts_with(name, "aten::_foreach_copy") || starts_with(name, "aten::_foreach_zero");
    return other ? sim::KernelClass::kMemoryBound : sim::KernelClass::kOptimizer;
  }
  if (starts_with(name, "aten::_fused_adam") || starts_with(name, "aten::_fused_sgd") ||
      starts_with(name, "aten::_fused_adagrad")) {
    return sim::KernelClass::kOptimizer;  // _fused_adam(_), _fused_adamw(_), _fused_sgd(_), _fused_adagrad(_)
  }
  return sim::KernelClass::kMemoryBound;
}

// The fraction of an L x S score matrix that a causal mask leaves to compute: query i sees keys up to
// i (PyTorch's is_causal: the mask's upper-left alignment), min(i + 1, S) of them.
double causal_fraction(double l, double s) {
  if (l <= 0 || s <= 0) return 1.0;
  const double full_rows = std::max(0.0, l - s);  // queries past the last key see all S keys
  const double ramp = std::min(l, s);             // queries 0 .. ramp-1 see 1 .. ramp keys
  return (ramp * (ramp + 1) / 2 + full_rows * s) / (l * s);
}

// Whether an attention op's mask is causal: its `is_causal` argument, or the efficient kernels'
// `custom_mask_type` (1, 2: causal from the upper left or the lower right).
bool causal_attention(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args) {
  const c10::FunctionSchema& schema = op.schema();
  for (const char* name : {"is_causal", "custom_mask_type"}) {
    const std::optional<int> i = schema.argumentIndexWithName(name);
    if (!i || static_cast<std::size_t>(*i) >= args.size()) continue;
    const c10::IValue& v = args[*i];
    if (v.isBool()) return v.toBool();
    if (v.isInt()) return v.toInt() != 0;
  }
  return false;
}

// Note [Attention's cost]
// A fused attention kernel's work is what it executes (Note [Cost model] in sim/src/cost_model.cpp):
// the forward's two matmuls (q k^T and p v, 2 L S (E + Ev) per batch and head), over the blocks a causal
// mask leaves, and a backward of 2.5 times that (it recomputes q k^T beside its four gradient matmuls,
// the count the FlashAttention papers measure their efficiency by). torch.utils.flop_counter counts the
// whole L x S matrix and twice the forward for the backward; MFU formulas do too, so the region's
// hardware MFU of a causal model is lower than a formula's. The sdpa ops and the math path take
// (.., L, E) operands; _flash_attention_* and _efficient_attention_* take (B, L, H, E).

// Fills `cost` with an attention op's work (Note [Attention's cost]); leaves it unset when the
// operands are not what it expects.
void attention_work(std::string_view name, c10::ArrayRef<c10::IValue> args, sim::KernelCost& cost,
                    bool causal) {
  const bool backward = name.find("backward") != std::string_view::npos;  // grad_out comes first
  const std::size_t first = backward ? 1 : 0;
  const at::Tensor* q = tensor_arg(args, first);
  const at::Tensor* k = tensor_arg(args, first + 1);
  const at::Tensor* v = tensor_arg(args, first + 2);
  if (q == nullptr || k == nullptr || v == nullptr || q->dim() < 3 || k->dim() < 3 || v->dim() < 3) return;
  const bool heads_second_last = !starts_with(name, "aten::_scaled_dot_product_");
  const std::int64_t seq_dim = heads_second_last && q->dim() == 4 ? 1 : q->dim() - 2;
  double batch = 1;  // every dimension but the sequence and the head size
  for (std::int64_t d = 0; d < q->dim() - 1; ++d) batch *= d == seq_dim ? 1.0 : static_cast<double>(q->size(d));
  const double l = static_cast<double>(q->size(seq_dim));
  const double s = static_cast<double>(k->size(seq_dim));
  const double e = static_cast<double>(q->size(-1));
  const double ev = static_cast<double>(v->size(-1));
  cost.flops = 2.0 * batch * l * s * (e + ev) * (causal ? causal_fraction(l, s) : 1.0) * (backward ? 2.5 : 1.0);
  cost.rows = static_cast<std::int64_t>(batch * l);
  cost.cols = v->size(-1);
  cost.matrix = true;
  cost.backward = backward;
  cost.keys = k->size(seq_dim);
}

// The matrix work of GEMMs and convolutions, as torch.utils.flop_counter counts it; false for other ops.
bool matrix_work(std::string_view name, c10::ArrayRef<c10::IValue> args, c10::ArrayRef<at::Tensor> fresh,
                 sim::KernelCost& cost) {
  auto at = [&](std::size_t i) { return tensor_arg(args, i); };
  if (name == "aten::mm" || name == "aten::addmm" || name == "aten::_addmm_activation") {
    const std::size_t a = name == "aten::mm" ? 0 : 1;
    const at::Tensor* x = at(a);
    const at::Tensor* y = at(a + 1);
    if (x == nullptr || y == nullptr || x->dim() != 2 || y->dim() != 2) return false;
    gemm(cost, 1, x->size(0), x->size(1), y->size(1));
    return true;
  }
  if (name == "aten::bmm" || name == "aten::baddbmm") {
    const std::size_t a = name == "aten::bmm" ? 0 : 1;
    const at::Tensor* x = at(a);
    const at::Tensor* y = at(a + 1);
    if (x == nullptr || y == nullptr || x->dim() != 3 || y->dim() != 3) return false;
    gemm(cost, static_cast<double>(x->size(0)), x->size(1), x->size(2), y->size(2));
    return true;
  }
  if (name == "aten::convolution" || name == "aten::_convolution" || name == "aten::convolution_overrideable" ||
      name == "aten::convolution_backward" || name == "aten::convolution_backward_overrideable") {
    const bool backward = name.find("backward") != std::string_view::npos;
    // forward: (input, weight, ...); backward: (grad_output, input, weight, ...).
    const at::Tensor* weight = at(backward ? 2 : 1);
    const at::Tensor* out = backward ? at(0) : (fresh.empty() ? nullptr : &fresh[0]);
    if (weight == nullptr || out == nullptr || !out->defined() || weight->dim() < 3) return false;
    // 2 x output elements x (input channels per group x kernel elements), per pass.
    double per_output = 1;
    for (std::int64_t d = 1; d < weight->dim(); ++d) per_output *= static_cast<double>(weight->size(d));
    int passes = 1;
    if (backward) {
      passes = 0;
      for (const at::Tensor& t : fresh) passes += t.defined() && t.dim() == weight->dim() ? 1 : 0;  // grad input, grad weight
      passes = std::max(passes, 1);
    }
    cost.flops = 2.0 * static_cast<double>(out->numel()) * per_output * passes;
    // As a GEMM: output pixels (batch x spatial) by output channels.
    cost.cols = out->size(1);
    cost.rows = out->size(1) > 0 ? out->numel() / out->size(1) : 0;
    cost.matrix = true;
    cost.kind = sim::KernelClass::kMatmul;
    return true;
  }
  return false;
}

// Whether the op reads only the rows of its first argument that its indices select (a gather), so
// that it reads at most as many bytes of it as it writes: an embedding lookup of one token reads one
// row of the table, not the table (a decode step's lookup was charged a read of the whole 1 GB table,
// 0.58 ms on an A100, where the GPU's kernel takes microseconds).
bool gathers_rows(std::string_view name) {
  return name == "aten::embedding" || name == "aten::index_select" || name == "aten::gather" ||
         name == "aten::index" || name == "aten::take";
}

// The dtype of the op's first floating tensor argument (the math's), or of its first tensor.
at::ScalarType math_dtype(c10::ArrayRef<c10::IValue> args, c10::ArrayRef<at::Tensor> fresh) {
  std::optional<at::ScalarType> first;
  for (const c10::IValue& v : args) {
    if (!v.isTensor() || !v.toTensor().defined()) continue;
    const at::ScalarType t = v.toTensor().scalar_type();
    if (at::isFloatingType(t)) return t;
    if (!first) first = t;
  }
  for (const at::Tensor& t : fresh) {
    if (t.defined()) return first.value_or(t.scalar_type());
  }
  return first.value_or(at::kFloat);
}

}  // namespace

sim::NumberFormat number_format(at::ScalarType dtype, bool tf32_allowed) {
  switch (dtype) {
    case at::kDouble: return sim::NumberFormat::kFp64;
    case at::kFloat: return tf32_allowed ? sim::NumberFormat::kTf32 : sim::NumberFormat::kFp32;
    case at::kBFloat16: return sim::NumberFormat::kBf16;
    case at::kHalf: return sim::NumberFormat::kFp16;
    case at::kFloat8_e4m3fn:
    case at::kFloat8_e5m2:
    case at::kFloat8_e4m3fnuz:
    case at::kFloat8_e5m2fnuz: return sim::NumberFormat::kFp8;
    case at::kChar:
    case at::kByte: return sim::NumberFormat::kInt8;
    default: return sim::NumberFormat::kFp32;
  }
}

sim::KernelCost op_kernel_cost(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                               c10::ArrayRef<at::Tensor> fresh) {
  sim::KernelCost cost;
  const auto& schema = op.schema();
  const std::string& name = schema.name();
  double written = 0;
  for (const at::Tensor& t : fresh) written += tensor_bytes(t);
  const bool gather = !fresh.empty() && gathers_rows(name);
  double bytes = written;
  for (std::size_t i = 0; i < args.size(); ++i) {
    double b = value_bytes(args[i]);
    if (i == 0 && gather) b = std::min(b, written);  // the selected rows only
    bytes += b;
    const auto* alias = i < schema.arguments().size() ? schema.arguments()[i].alias_info() : nullptr;
    if (alias != nullptr && alias->isWrite()) bytes += b;  // read and written (in-place, out=)
  }
  cost.bytes = bytes;
  const at::ScalarType dtype = math_dtype(args, fresh);
  cost.kind = optimizer_or(named_class(name));  // a matmul's is set by matrix_work
  if (cost.kind == sim::KernelClass::kAttention) attention_work(name, args, cost, causal_attention(op, args));
  if (cost.matrix || matrix_work(name, args, fresh, cost)) {
    const bool conv = name.find("convolution") != std::string::npos;
    const bool tf32 = conv ? at::globalContext().allowTF32CuDNN() : at::globalContext().allowTF32CuBLAS();
    cost.format = number_format(dtype, tf32);
  } else {
    cost.format = number_format(dtype, false);
  }
  return fused_or(cost);
}

std::optional<double> modelled_kernel_ns(double flops, double bytes, at::ScalarType dtype, bool matrix) {
  const sim::DeviceProfile* profile = sim::Runtime::global().profile();
  if (profile == nullptr) return std::nullopt;
  sim::KernelCost cost;
  cost.flops = flops;
  cost.bytes = bytes;
  cost.matrix = matrix;
  cost.format = number_format(dtype, matrix && at::globalContext().allowTF32CuBLAS());
  return sim::kernel_time_ns(*profile, cost);
}

sim::KernelCost bytes_kernel_cost(double bytes) {
  sim::KernelCost cost;
  cost.bytes = bytes;
  cost.kind = optimizer_or(sim::KernelClass::kMemoryBound);
  return fused_or(cost);
}

FusedKernelScope::FusedKernelScope(const sim::KernelCost& fused) noexcept
    : outer_(tl_fused), outer_spent_(tl_fused_spent) {
  tl_fused = &fused;
  tl_fused_spent = false;
}

FusedKernelScope::~FusedKernelScope() {
  tl_fused = outer_;
  tl_fused_spent = outer_spent_;
}

void set_in_optimizer_step(bool inside) noexcept { tl_in_optimizer_step = inside; }

bool in_optimizer_step() noexcept { return tl_in_optimizer_step; }

}  // namespace at::openreg
