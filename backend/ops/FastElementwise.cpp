// Note [Fast kernels for hot small ops]
// The general fallback (Note [Op execution on openreg] in Fallback.cpp) pays for generality on every
// call: boxing, a signature of the arguments, a meta-cache lookup, CPU aliases built on the caller's
// thread. For the ops that dominate small-tensor loops (add/sub/mul/div, relu, mm, addmm) on the plainest
// arguments, the output's shape, strides and dtype are obvious, so these unboxed kernels allocate the
// output directly and enqueue the CPU out= kernel. Anything unusual (type promotion, broadcasting,
// non-contiguous layouts, mixed devices, empty tensors, neg/conj bits) goes to the general path,
// which keeps its exact semantics and error messages.
//
// The work item captures the geometry at enqueue time (data pointers with their offsets applied, the
// shared sizes, the dtype) and builds its CPU aliases on the device thread: later host-side metadata
// changes of the caller's tensors cannot reach it, and it owns neither a caller TensorImpl nor the
// device memory (Note [Work items hold CPU aliases, not tensors] in Fallback.cpp).

#include "backend/sanitizer/Sanitizer.h"
#include "backend/OpenRegAllocator.h"
#include "backend/OpenRegRuntime.h"
#include "backend/ops/ExecuteThreads.h"
#include "backend/ops/Fallback.h"

#include <ATen/EmptyTensor.h>
#include <ATen/ScalarOps.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/add_cpu_dispatch.h>
#include <ATen/ops/addmm_cpu_dispatch.h>
#include <ATen/ops/clamp_min_cpu_dispatch.h>
#include <ATen/ops/div_cpu_dispatch.h>
#include <ATen/ops/mm_cpu_dispatch.h>
#include <ATen/ops/mul_cpu_dispatch.h>
#include <ATen/ops/sub_cpu_dispatch.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/SmallVector.h>
#include <torch/library.h>

#include <array>
#include <optional>
#include <stdexcept>
#include <utility>

namespace at::openreg {
namespace {

constexpr c10::DeviceType kOpenReg = c10::DeviceType::PrivateUse1;

//! Which CPU kernel a fast item runs.
enum class FastOp : std::uint8_t { kAdd, kSub, kMul, kDiv, kRelu, kMm, kAddmm };

//! One operand as the item sees it, captured at enqueue: the address of its first element, its sizes
//! and strides.
struct Operand {
  void* data = nullptr;
  c10::SmallVector<int64_t, 4> sizes;
  c10::SmallVector<int64_t, 4> strides;

  static Operand of(const at::Tensor& t) {
    auto* base = static_cast<char*>(t.storage().unsafeGetStorageImpl()->mutable_data_ptr().get());
    return {base + t.storage_offset() * static_cast<int64_t>(t.itemsize()),
            c10::SmallVector<int64_t, 4>(t.sizes().begin(), t.sizes().end()),
            c10::SmallVector<int64_t, 4>(t.strides().begin(), t.strides().end())};
  }

  //! A CPU tensor over the operand's memory (no ownership, not resizable): the device thread's alias.
  at::Tensor cpu_alias(c10::ScalarType dtype) const {
    int64_t span = 1;  // elements from the first to one past the last (every size is positive here)
    for (size_t d = 0; d < sizes.size(); ++d) span += (sizes[d] - 1) * strides[d];
    const auto nbytes = static_cast<std::size_t>(span) * c10::elementSize(dtype);
    c10::Storage st(c10::Storage::use_byte_size_t(), nbytes, c10::DataPtr(data, c10::Device(c10::kCPU)),
                    /*allocator=*/nullptr, /*resizable=*/false);
    auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(st), c10::DispatchKeySet(c10::DispatchKey::CPU),
                                                     c10::scalarTypeToTypeMeta(dtype));
    impl->set_sizes_and_strides(sizes, strides);
    return at::Tensor(std::move(impl));
  }
};

//! The work item. Operands: [0] the output, [1] self, [2] other/mat2/mat1, [3] mat2 of addmm; absent
//! ones have no data (relu's other, a Python-number `other`, which travels as `scalar`).
struct FastItem {
  FastItem(FastOp o, c10::ScalarType t) : op(o), dtype(t) {}

  FastOp op;
  c10::ScalarType dtype;
  int device = 0;
  int compute_threads = 0;
  std::array<Operand, 4> operands;
  std::optional<c10::Scalar> scalar;  // a Python number `other`, read at enqueue like CUDA does
  c10::Scalar alpha = 1;
  c10::Scalar beta = 1;
  bool in_place = false;  // the output is self (operands[1] unused)

  void operator()() {
    try {
      run();
    } catch (const c10::Error& e) {
      // As in the general path: the stream reports what() at the next synchronize; no C++ backtrace.
      throw std::runtime_error(e.what_without_backtrace());
    }
  }

  void run() {
    IntraOpThreadsScope threads(device, compute_threads);
    at::Tensor out = operands[0].cpu_alias(dtype);
    // In place, self and the output are one alias, so the kernel sees the full overlap CPU allows.
    at::Tensor self = in_place ? out : operands[1].cpu_alias(dtype);
    at::Tensor other;
    if (scalar) {
      other = at::native::wrapped_scalar_tensor(*scalar);
    } else if (operands[2].data != nullptr) {
      other = operands[2].cpu_alias(dtype);
    }
    switch (op) {
      case FastOp::kAdd:
        at::cpu::add_out(out, self, other, alpha);
        break;
      case FastOp::kSub:
        at::cpu::sub_out(out, self, other, alpha);
        break;
      case FastOp::kMul:
        at::cpu::mul_out(out, self, other);
        break;
      case FastOp::kDiv:
        at::cpu::div_out(out, self, other);
        break;
      case FastOp::kRelu:
        at::cpu::clamp_min_out(out, self, 0);  // CPU's relu is clamp_min(self, 0)
        break;
      case FastOp::kMm:
        at::cpu::mm_out(out, self, other);
        break;
      case FastOp::kAddmm:
        at::cpu::addmm_out(out, self, other, operands[3].cpu_alias(dtype), beta, alpha);
        break;
    }
  }
};

const char* item_name(FastOp op) {
  switch (op) {
    case FastOp::kAdd:
      return "aten::add.Tensor";
    case FastOp::kSub:
      return "aten::sub.Tensor";
    case FastOp::kMul:
      return "aten::mul.Tensor";
    case FastOp::kDiv:
      return "aten::div.Tensor";
    case FastOp::kRelu:
      return "aten::relu";
    case FastOp::kMm:
      return "aten::mm";
    case FastOp::kAddmm:
      return "aten::addmm";
  }
  return "aten::unknown";
}

// ---------------------------------------------------------------------------------------------------
// Eligibility.

//! An openreg tensor the fast path can alias as a plain contiguous CPU tensor.
bool plain(const at::Tensor& t) {
  if (::openreg::sanitizer::enabled()) return false;  // the checker sees ops on the general path
  return t.defined() && t.device().type() == kOpenReg && t.layout() == c10::kStrided && t.is_contiguous() &&
         !t.is_neg() && !t.is_conj() && t.numel() > 0 && t.has_storage();
}

// Floating dtypes only: then every fast op's result dtype is self's, with no promotion to decide.
bool fast_dtype(c10::ScalarType t) {
  return t == c10::kFloat || t == c10::kDouble || t == c10::kHalf || t == c10::kBFloat16;
}

//! The Python number behind a wrapped-number `other` that cannot change a floating self's dtype.
std::optional<c10::Scalar> wrapped_number(const at::Tensor& other) {
  if (!other.defined() || !other.is_cpu() || !other.unsafeGetTensorImpl()->is_wrapped_number()) return std::nullopt;
  switch (other.scalar_type()) {
    case c10::kDouble:
      return c10::Scalar(*static_cast<const double*>(other.const_data_ptr()));
    case c10::kLong:
      return c10::Scalar(*static_cast<const int64_t*>(other.const_data_ptr()));
    default:
      return std::nullopt;  // bool/complex numbers: rare, and their rules are the general path's
  }
}

//! Enqueues `item` writing into `self` (in-place ops).
void enqueue_in_place(FastItem item, const at::Tensor& self) {
  const c10::DeviceIndex device = self.device().index();
  item.operands[0] = Operand::of(self);
  item.in_place = true;
  item.device = device;
  const char* name = item_name(item.op);
  c10::openreg::translate_sim_errors([&] {
    auto& stream = c10::openreg::current_sim_stream(device);
    item.compute_threads = stream.device().compute_threads();
    stream.launch(name, std::move(item));
  });
}

//! Enqueues `item` with a fresh contiguous output of `sizes` on self's device.
at::Tensor enqueue(FastItem item, const at::Tensor& self, c10::IntArrayRef sizes) {
  const c10::DeviceIndex device = self.device().index();
  std::optional<c10::DeviceGuard> guard;  // the allocator allocates on the current device
  if (device != c10::openreg::current_device()) guard.emplace(self.device());
  at::Tensor out = at::detail::empty_generic(sizes, &c10::openreg::device_allocator(),
                                             c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), item.dtype,
                                             std::nullopt);
  item.operands[0] = Operand::of(out);
  item.device = device;
  const char* name = item_name(item.op);
  c10::openreg::translate_sim_errors([&] {
    auto& stream = c10::openreg::current_sim_stream(device);
    item.compute_threads = stream.device().compute_threads();
    stream.launch(name, std::move(item));
  });
  return out;
}

// ---------------------------------------------------------------------------------------------------
// The general path for everything else.

//! The operator `name.overload`, looked up once per call site.
#define OPENREG_OP(name, overload)                                                                  \
  ([]() -> const c10::OperatorHandle& {                                                             \
    static const c10::OperatorHandle handle = c10::Dispatcher::singleton().findSchemaOrThrow(name, overload); \
    return handle;                                                                                  \
  }())

template <typename... Args>
at::Tensor general(const c10::OperatorHandle& op, const Args&... args) {
  torch::jit::Stack stack;
  stack.reserve(sizeof...(Args));
  (stack.emplace_back(args), ...);
  execute_op(op, &stack);
  return std::move(stack.back()).toTensor();
}

//! The item of a binary elementwise op, or nullopt when the general path must take it. In place,
//! `other` may share self's memory only as the very same elements (a.add_(a)); partial overlaps are
//! CPU's to accept or reject.
std::optional<FastItem> binary_item(FastOp op, const at::Tensor& self, const at::Tensor& other,
                                    const c10::Scalar& alpha, bool in_place) {
  if (!plain(self) || !fast_dtype(self.scalar_type())) return std::nullopt;
  if (alpha.isComplex() || alpha.isBoolean()) return std::nullopt;  // CPU rejects these: its message
  FastItem item(op, self.scalar_type());
  item.alpha = alpha;
  if (!in_place) item.operands[1] = Operand::of(self);
  if (auto number = wrapped_number(other)) {
    item.scalar = *number;
  } else {
    if (!plain(other) || other.device() != self.device() || other.scalar_type() != self.scalar_type() ||
        other.sizes() != self.sizes()) {
      return std::nullopt;
    }
    if (in_place && other.storage().is_alias_of(self.storage()) && other.storage_offset() != self.storage_offset()) {
      return std::nullopt;  // both contiguous with one shape: the same offset means the same elements
    }
    item.operands[2] = Operand::of(other);
  }
  return item;
}

std::optional<at::Tensor> try_binary(FastOp op, const at::Tensor& self, const at::Tensor& other,
                                     const c10::Scalar& alpha) {
  auto item = binary_item(op, self, other, alpha, /*in_place=*/false);
  if (!item) return std::nullopt;
  return enqueue(*std::move(item), self, self.sizes());
}

//! The in-place variant on the fast path; false when the general path must take it.
bool try_binary_(FastOp op, const at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha) {
  auto item = binary_item(op, self, other, alpha, /*in_place=*/true);
  if (!item) return false;
  enqueue_in_place(*std::move(item), self);
  return true;
}

template <typename... Args>
at::Tensor& general_(const c10::OperatorHandle& op, at::Tensor& self, const Args&... args) {
  torch::jit::Stack stack;
  stack.reserve(1 + sizeof...(Args));
  stack.emplace_back(self);
  (stack.emplace_back(args), ...);
  execute_op(op, &stack);
  return self;
}

at::Tensor& add__tensor(at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha) {
  if (try_binary_(FastOp::kAdd, self, other, alpha)) return self;
  return general_(OPENREG_OP("aten::add_", "Tensor"), self, other, alpha);
}

at::Tensor& sub__tensor(at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha) {
  if (try_binary_(FastOp::kSub, self, other, alpha)) return self;
  return general_(OPENREG_OP("aten::sub_", "Tensor"), self, other, alpha);
}

at::Tensor& mul__tensor(at::Tensor& self, const at::Tensor& other) {
  if (try_binary_(FastOp::kMul, self, other, 1)) return self;
  return general_(OPENREG_OP("aten::mul_", "Tensor"), self, other);
}

at::Tensor& div__tensor(at::Tensor& self, const at::Tensor& other) {
  if (try_binary_(FastOp::kDiv, self, other, 1)) return self;
  return general_(OPENREG_OP("aten::div_", "Tensor"), self, other);
}

at::Tensor add_tensor(const at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha) {
  if (auto out = try_binary(FastOp::kAdd, self, other, alpha)) return *std::move(out);
  return general(OPENREG_OP("aten::add", "Tensor"), self, other, alpha);
}

at::Tensor sub_tensor(const at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha) {
  if (auto out = try_binary(FastOp::kSub, self, other, alpha)) return *std::move(out);
  return general(OPENREG_OP("aten::sub", "Tensor"), self, other, alpha);
}

at::Tensor mul_tensor(const at::Tensor& self, const at::Tensor& other) {
  if (auto out = try_binary(FastOp::kMul, self, other, 1)) return *std::move(out);
  return general(OPENREG_OP("aten::mul", "Tensor"), self, other);
}

at::Tensor div_tensor(const at::Tensor& self, const at::Tensor& other) {
  if (auto out = try_binary(FastOp::kDiv, self, other, 1)) return *std::move(out);
  return general(OPENREG_OP("aten::div", "Tensor"), self, other);
}

at::Tensor relu(const at::Tensor& self) {
  if (plain(self) && fast_dtype(self.scalar_type())) {
    FastItem item(FastOp::kRelu, self.scalar_type());
    item.operands[1] = Operand::of(self);
    return enqueue(std::move(item), self, self.sizes());
  }
  return general(OPENREG_OP("aten::relu", ""), self);
}

at::Tensor mm(const at::Tensor& self, const at::Tensor& mat2) {
  if (plain(self) && plain(mat2) && self.dim() == 2 && mat2.dim() == 2 && self.size(1) == mat2.size(0) &&
      self.device() == mat2.device() && (self.scalar_type() == c10::kFloat || self.scalar_type() == c10::kDouble) &&
      mat2.scalar_type() == self.scalar_type()) {
    FastItem item(FastOp::kMm, self.scalar_type());
    item.operands[1] = Operand::of(self);
    item.operands[2] = Operand::of(mat2);
    return enqueue(std::move(item), self, {self.size(0), mat2.size(1)});
  }
  return general(OPENREG_OP("aten::mm", ""), self, mat2);
}

//! A matrix whose layout is row-major or the transpose of one (a linear layer's weight.t()): BLAS
//! takes either without a copy, so CPU's kernel treats the alias exactly as it treats the CPU tensor.
bool blas_layout(const at::Tensor& t) {
  if (t.dim() != 2 || t.device().type() != kOpenReg || t.layout() != c10::kStrided || t.is_neg() ||
      t.is_conj() || t.numel() == 0 || !t.has_storage()) {
    return false;
  }
  return t.is_contiguous() || (t.stride(0) == 1 && t.stride(1) == t.size(0));
}

at::Tensor addmm(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2, const c10::Scalar& beta,
                 const c10::Scalar& alpha) {
  const auto dtype = mat1.scalar_type();
  if (plain(self) && blas_layout(mat1) && blas_layout(mat2) && mat1.is_contiguous() &&
      mat1.size(1) == mat2.size(0) && (dtype == c10::kFloat || dtype == c10::kDouble) &&
      self.scalar_type() == dtype && mat2.scalar_type() == dtype && self.device() == mat1.device() &&
      mat2.device() == mat1.device() && !beta.isComplex() && !beta.isBoolean() && !alpha.isComplex() &&
      !alpha.isBoolean()) {
    const int64_t n = mat1.size(0);
    const int64_t m = mat2.size(1);
    // The bias as CPU broadcasts it into the (n, m) result: a row (m) or the full matrix.
    const bool bias_ok = (self.dim() == 1 && self.size(0) == m) || (self.dim() == 2 && self.size(0) == n &&
                                                                      self.size(1) == m);
    if (bias_ok) {
      FastItem item(FastOp::kAddmm, dtype);
      item.alpha = alpha;
      item.beta = beta;
      item.operands[1] = Operand::of(self);
      item.operands[2] = Operand::of(mat1);
      item.operands[3] = Operand::of(mat2);
      return enqueue(std::move(item), mat1, {n, m});
    }
  }
  return general(OPENREG_OP("aten::addmm", ""), self, mat1, mat2, beta, alpha);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("add.Tensor", TORCH_FN(add_tensor));
  m.impl("sub.Tensor", TORCH_FN(sub_tensor));
  m.impl("mul.Tensor", TORCH_FN(mul_tensor));
  m.impl("div.Tensor", TORCH_FN(div_tensor));
  m.impl("add_.Tensor", TORCH_FN(add__tensor));
  m.impl("sub_.Tensor", TORCH_FN(sub__tensor));
  m.impl("mul_.Tensor", TORCH_FN(mul__tensor));
  m.impl("div_.Tensor", TORCH_FN(div__tensor));
  m.impl("relu", TORCH_FN(relu));
  m.impl("mm", TORCH_FN(mm));
  m.impl("addmm", TORCH_FN(addmm));
}

}  // namespace at::openreg
