// Note [Fast kernels for hot small ops]
// The general path (Note [Op execution on openreg] in OpEngine.cpp) pays for generality on every call:
// boxing, a signature of the arguments, a shape-pass cache lookup, CPU aliases built on the caller's
// thread. For the ops that dominate small-tensor loops (add/sub/mul/div, relu, mm, addmm) on the
// plainest arguments, the output's shape, strides and dtype are obvious, so these unboxed kernels
// allocate the output directly and enqueue the CPU out= kernel. Anything unusual (type promotion,
// broadcasting, non-contiguous layouts, mixed devices, empty tensors, neg/conj bits, numbers a double
// or float cannot hold exactly) goes to the general path, which keeps its exact semantics and errors.
//
// The fast ops are listed once, in OPENREG_FAST_OPS below: their kernel ids, item names, CPU calls,
// unboxed wrappers and registrations are all generated from it.
//
// The work items capture the geometry at enqueue time (data pointers with their offsets applied, the
// sizes, the dtype) and build their CPU aliases on the device thread: later host-side metadata changes
// of the caller's tensors cannot reach them, and they own neither a caller TensorImpl nor the device
// memory (Note [Work items hold CPU aliases, not tensors] in AsyncPath.cpp). They are sized to travel
// inline in the stream's task (Note [Launching a kernel on a stream]): no allocation per launch.

#include "backend/memory/DeviceAllocator.h"
#include "backend/runtime/Device.h"
#include "backend/runtime/Stream.h"
#include "backend/engine/KernelCost.h"
#include <ATen/Context.h>
#include "backend/engine/Arguments.h"
#include "backend/engine/KernelRanges.h"
#include "backend/engine/Launch.h"
#include "backend/engine/OpEngine.h"
#include "backend/sanitizer/Sanitizer.h"

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
#include <torch/library.h>

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace at::openreg {
namespace {

constexpr c10::DeviceType kOpenReg = c10::DeviceType::PrivateUse1;

//! The C++ signature a fast op has (and so its wrappers and registrations).
enum class Kind : std::uint8_t {
  kBinaryWithAlpha,  //!< (self, other, alpha), with an in-place form
  kBinary,           //!< (self, other), with an in-place form
  kUnary,            //!< (self)
  kMm,               //!< (self, mat2)
  kAddmm,            //!< (self, mat1, mat2, beta, alpha)
};

// THE table of fast ops: X(id, aten name, overload, kind, CPU call). The CPU call sees `out`, `self`,
// `other` (other / mat1 / mat2), `third` (addmm's mat2), `alpha`, `beta` as CPU tensors and Scalars.
#define OPENREG_FAST_OPS(X)                                                                          \
  X(Add, "add", "Tensor", kBinaryWithAlpha, at::cpu::add_out(out, self, other, alpha))               \
  X(Sub, "sub", "Tensor", kBinaryWithAlpha, at::cpu::sub_out(out, self, other, alpha))               \
  X(Mul, "mul", "Tensor", kBinary, at::cpu::mul_out(out, self, other))                               \
  X(Div, "div", "Tensor", kBinary, at::cpu::div_out(out, self, other))                               \
  X(Relu, "relu", "", kUnary, at::cpu::clamp_min_out(out, self, 0)) /* CPU's relu is clamp_min */    \
  X(Mm, "mm", "", kMm, at::cpu::mm_out(out, self, other))                                            \
  X(Addmm, "addmm", "", kAddmm, at::cpu::addmm_out(out, self, other, third, beta, alpha))

enum class FastOp : std::uint8_t {
#define OPENREG_FAST_ID(id, name, overload, kind, call) id,
  OPENREG_FAST_OPS(OPENREG_FAST_ID)
#undef OPENREG_FAST_ID
};

//! Runs the CPU out= kernel of `op`.
void run_cpu(FastOp op, at::Tensor& out, const at::Tensor& self, const at::Tensor& other, const at::Tensor& third,
             const c10::Scalar& alpha, const c10::Scalar& beta) {
  (void)third;
  (void)beta;
  switch (op) {
#define OPENREG_FAST_CALL(id, name, overload, kind, call) \
  case FastOp::id:                                        \
    call;                                                 \
    return;
    OPENREG_FAST_OPS(OPENREG_FAST_CALL)
#undef OPENREG_FAST_CALL
  }
}

// ---------------------------------------------------------------------------------------------------
// Work items.

//! A CPU tensor over `numel` contiguous elements at `data` (no ownership, not resizable), viewed with
//! `sizes`: the device thread's alias.
at::Tensor cpu_alias(const void* data, c10::IntArrayRef sizes, c10::ScalarType dtype) {
  int64_t numel = 1;
  for (int64_t s : sizes) numel *= s;
  const auto nbytes = static_cast<std::size_t>(numel) * c10::elementSize(dtype);
  auto impl = c10::make_intrusive<c10::TensorImpl>(cpu_storage_over(const_cast<void*>(data), nbytes),
                                                   c10::DispatchKeySet(c10::DispatchKey::CPU),
                                                   c10::scalarTypeToTypeMeta(dtype));
  impl->set_sizes_contiguous(sizes);
  return at::Tensor(std::move(impl));
}

//! add/sub/mul/div/relu on contiguous operands of one shape: elementwise, so the device thread runs
//! the kernel on flat aliases of `numel` elements.
struct ElementwiseKernel {
  void* out;
  const void* self;   // == out in place
  const void* other;  // nullptr: relu, or a Python number in `number`
  std::int64_t numel;
  double number;  // a Python-number `other`, read at enqueue like CUDA reads it (exact: see exact_double)
  double alpha;
  FastOp op;
  c10::ScalarType dtype;
  bool has_number;

  void operator()() const {
    const std::int64_t sizes[] = {numel};
    at::Tensor out_t = cpu_alias(out, sizes, dtype);
    // In place, self and the output are one alias, so the kernel sees the full overlap CPU allows.
    at::Tensor self_t = self == out ? out_t : cpu_alias(self, sizes, dtype);
    at::Tensor other_t;
    if (has_number) {
      other_t = at::native::wrapped_scalar_tensor(c10::Scalar(number));
    } else if (other != nullptr) {
      other_t = cpu_alias(other, sizes, dtype);
    }
    run_cpu(op, out_t, self_t, other_t, at::Tensor(), c10::Scalar(alpha), c10::Scalar(1));
  }
};

//! mm / addmm on row-major operands (mat2 possibly the transpose of a row-major matrix).
struct MatmulKernel {
  void* out;
  const void* mat1;
  const void* mat2;
  const void* bias;  // addmm's self; nullptr for mm
  std::int32_t n, k, m;
  float alpha;  // exact (see exact_float)
  float beta;
  c10::ScalarType dtype;
  bool mat2_transposed;  // mat2 is the transpose of a row-major (m, k) matrix
  bool bias_is_row;      // bias has shape (m), else (n, m)

  //! Multiply-adds (Note [The issuing host keeps a core]).
  std::int64_t work() const noexcept { return std::int64_t{n} * k * m; }

  void operator()() const {
    const std::int64_t n64 = n, k64 = k, m64 = m;
    at::Tensor out_t = cpu_alias(out, {n64, m64}, dtype);
    at::Tensor mat1_t = cpu_alias(mat1, {n64, k64}, dtype);
    at::Tensor mat2_t = mat2_transposed ? cpu_alias(mat2, {m64, k64}, dtype).t() : cpu_alias(mat2, {k64, m64}, dtype);
    if (bias == nullptr) {
      run_cpu(FastOp::Mm, out_t, mat1_t, mat2_t, at::Tensor(), c10::Scalar(1), c10::Scalar(1));
      return;
    }
    at::Tensor bias_t = bias_is_row ? cpu_alias(bias, {m64}, dtype) : cpu_alias(bias, {n64, m64}, dtype);
    run_cpu(FastOp::Addmm, out_t, bias_t, mat1_t, mat2_t, c10::Scalar(static_cast<double>(alpha)),
            c10::Scalar(static_cast<double>(beta)));
  }
};

static_assert(kTravelsInline<ElementwiseKernel>, "fast items travel inline");
static_assert(kTravelsInline<MatmulKernel>, "fast items travel inline");

// ---------------------------------------------------------------------------------------------------
// Eligibility.

//! An openreg tensor the fast path can alias as a plain contiguous CPU tensor.
bool plain(const at::Tensor& t) {
  return t.defined() && t.device().type() == kOpenReg && t.layout() == c10::kStrided && t.is_contiguous() &&
         !t.is_neg() && !t.is_conj() && t.numel() > 0 && t.has_storage();
}

// Floating dtypes only: then every fast op's result dtype is self's, with no promotion to decide.
bool fast_dtype(c10::ScalarType t) {
  return t == c10::kFloat || t == c10::kDouble || t == c10::kHalf || t == c10::kBFloat16;
}

//! A real Scalar as a double that holds it exactly (an int64 beyond 2^53 does not); for a floating
//! kernel the exact double converts to the kernel's type exactly as the original number does.
std::optional<double> exact_double(const c10::Scalar& s) {
  if (s.isFloatingPoint()) return s.toDouble();
  if (!s.isIntegral(/*includeBool=*/false)) return std::nullopt;  // bool/complex: the general path's rules
  const int64_t v = s.toLong();
  constexpr int64_t kExact = int64_t{1} << 53;
  if (v < -kExact || v > kExact) return std::nullopt;
  return static_cast<double>(v);
}

std::optional<float> exact_float(const c10::Scalar& s) {
  auto d = exact_double(s);
  if (!d) return std::nullopt;
  const auto f = static_cast<float>(*d);
  if (static_cast<double>(f) != *d) return std::nullopt;
  return f;
}

//! The Python number behind a wrapped-number `other`, when it cannot change a floating self's dtype.
std::optional<double> wrapped_number(const at::Tensor& other) {
  if (!other.defined() || !other.is_cpu() || !other.unsafeGetTensorImpl()->is_wrapped_number()) return std::nullopt;
  switch (other.scalar_type()) {
    case c10::kDouble:
      return *static_cast<const double*>(other.const_data_ptr());
    case c10::kLong:
      return exact_double(c10::Scalar(*static_cast<const int64_t*>(other.const_data_ptr())));
    default:
      return std::nullopt;  // bool/complex numbers: rare, and their rules are the general path's
  }
}

void* data_of(const at::Tensor& t) {
  auto* base = static_cast<char*>(t.storage().unsafeGetStorageImpl()->mutable_data_ptr().get());
  return base + t.storage_offset() * static_cast<int64_t>(t.itemsize());
}

//! A fresh contiguous output of `sizes` on `like`'s device.
at::Tensor fresh_output(const at::Tensor& like, c10::IntArrayRef sizes, c10::ScalarType dtype) {
  std::optional<c10::DeviceGuard> guard;  // the allocator allocates on the current device
  if (like.device().index() != c10::openreg::current_device()) guard.emplace(like.device());
  return at::detail::empty_generic(sizes, &c10::openreg::device_allocator(),
                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dtype, std::nullopt);
}

//! "add.Tensor" / "add_.Tensor" / "relu": the name m.impl takes.
std::string impl_name(const char* name, const char* overload, bool in_place) {
  std::string s = std::string(name) + (in_place ? "_" : "");
  if (overload[0] != '\0') s += std::string(".") + overload;
  return s;
}

//! Every fast op's qualified name ("aten::add.Tensor", or "aten::add_.Tensor" when `in_place`), indexed
//! by FastOp. Leaked: queued items hold the names and may outlive statics.
const std::vector<std::string>* qualified_names(bool in_place) {
  return new std::vector<std::string>{
#define OPENREG_FAST_NAME(id, name, overload, kind, call) "aten::" + impl_name(name, overload, in_place),
      OPENREG_FAST_OPS(OPENREG_FAST_NAME)
#undef OPENREG_FAST_NAME
  };
}

//! The work item's name ("aten::add.Tensor"), built once.
const char* item_name(FastOp op) {
  static const auto* names = qualified_names(/*in_place=*/false);
  return (*names)[static_cast<std::size_t>(op)].c_str();
}

//! The in-place op's name ("aten::add_.Tensor") for the sanitizer's reports, built once.
const char* in_place_name(FastOp op) {
  static const auto* names = qualified_names(/*in_place=*/true);
  return (*names)[static_cast<std::size_t>(op)].c_str();
}

// What a fast kernel costs on the device profile (engine/KernelCost.h): the bytes it reads and
// writes, and a matmul's FLOPs.
::openreg::sim::KernelCost fast_cost(const ElementwiseKernel& k) {
  const double tensor = static_cast<double>(k.numel) * static_cast<double>(c10::elementSize(k.dtype));
  const bool two_inputs = k.other != nullptr;  // else relu, or a Python number
  return bytes_kernel_cost(tensor * (two_inputs ? 3 : 2));
}
::openreg::sim::KernelCost fast_cost(const MatmulKernel& k) {
  const double n = k.n, kk = k.k, m = k.m;
  const double bias = k.bias == nullptr ? 0 : (k.bias_is_row ? m : n * m);
  ::openreg::sim::KernelCost cost;
  cost.flops = 2 * n * kk * m;
  cost.bytes = (n * kk + kk * m + n * m + bias) * static_cast<double>(c10::elementSize(k.dtype));
  cost.format = number_format(k.dtype, at::globalContext().allowTF32CuBLAS());
  cost.matrix = true;
  cost.rows = k.n;
  cost.cols = k.m;
  return cost;
}

//! Enqueues a fast kernel on `on`'s device; `reads` and `writes` are the tensors whose values it reads
//! and the ones it writes (timing-only execution's values: engine/KernelRanges.h).
template <typename Kernel>
void launch(FastOp op, const at::Tensor& on, Kernel kernel, std::initializer_list<const at::Tensor*> reads,
            std::initializer_list<const at::Tensor*> writes) {
  auto cost = [&kernel] { return fast_cost(kernel); };
  KernelRanges ranges;
  for (const at::Tensor* t : reads) ranges.read(*t);
  for (const at::Tensor* t : writes) ranges.write(*t);
  launch_kernel(c10::openreg::current_openreg_stream(on.device().index()), item_name(op), std::move(kernel), cost,
                nullptr, ranges.access());
}

// ---------------------------------------------------------------------------------------------------
// The general path for everything else.

//! The operator aten::`name`.`overload` (in place: aten::`name`_.`overload`), looked up once.
template <FastOp kOp, bool kInPlace>
const c10::OperatorHandle& general_op(const char* name, const char* overload) {
  static const c10::OperatorHandle handle =
      c10::Dispatcher::singleton().findSchemaOrThrow(("aten::" + std::string(name) + (kInPlace ? "_" : "")).c_str(),
                                                     overload);
  return handle;
}

template <typename... Args>
at::Tensor general(const c10::OperatorHandle& op, const Args&... args) {
  torch::jit::Stack stack;
  stack.reserve(sizeof...(Args));
  (stack.emplace_back(args), ...);
  execute_op(op, &stack);
  return std::move(stack.back()).toTensor();
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

// ---------------------------------------------------------------------------------------------------
// The unboxed kernels, one template per Kind.

//! The item of a binary elementwise op (output not yet set), or nullopt when the general path must
//! take it. In place, `other` may share self's memory only as the very same elements (a.add_(a));
//! partial overlaps are CPU's to accept or reject.
std::optional<ElementwiseKernel> binary_item(FastOp op, const at::Tensor& self, const at::Tensor& other,
                                             const c10::Scalar& alpha, bool in_place) {
  if (!plain(self) || !fast_dtype(self.scalar_type())) return std::nullopt;
  const auto alpha_value = exact_double(alpha);  // CPU rejects complex/bool alphas: its message
  if (!alpha_value) return std::nullopt;
  ElementwiseKernel item{nullptr, data_of(self), nullptr, self.numel(), 0.0, *alpha_value, op, self.scalar_type(),
                         false};
  if (auto number = wrapped_number(other)) {
    item.number = *number;
    item.has_number = true;
    return item;
  }
  if (!plain(other) || other.device() != self.device() || other.scalar_type() != self.scalar_type() ||
      other.sizes() != self.sizes()) {
    return std::nullopt;
  }
  if (in_place && other.storage().is_alias_of(self.storage()) && other.storage_offset() != self.storage_offset()) {
    return std::nullopt;  // both contiguous with one shape: the same offset means the same elements
  }
  item.other = data_of(other);
  return item;
}

template <FastOp kOp>
at::Tensor binary_impl(const char* name, const char* overload, const at::Tensor& self, const at::Tensor& other,
                       const c10::Scalar& alpha, bool with_alpha) {
  if (auto item = binary_item(kOp, self, other, alpha, /*in_place=*/false)) {
    at::Tensor out = fresh_output(self, self.sizes(), self.scalar_type());
    item->out = data_of(out);
    ::openreg::sanitizer::on_kernel(item_name(kOp), {&self, &other}, {&out});
    launch(kOp, self, *item, {&self, &other}, {&out});
    return out;
  }
  const auto& op = general_op<kOp, false>(name, overload);
  return with_alpha ? general(op, self, other, alpha) : general(op, self, other);
}

template <FastOp kOp>
at::Tensor& binary_impl_(const char* name, const char* overload, at::Tensor& self, const at::Tensor& other,
                         const c10::Scalar& alpha, bool with_alpha) {
  if (auto item = binary_item(kOp, self, other, alpha, /*in_place=*/true)) {
    item->out = const_cast<void*>(item->self);
    ::openreg::sanitizer::on_kernel(in_place_name(kOp), {&other}, {&self});
    launch(kOp, self, *item, {&self, &other}, {&self});
    return self;
  }
  const auto& op = general_op<kOp, true>(name, overload);
  return with_alpha ? general_(op, self, other, alpha) : general_(op, self, other);
}

template <FastOp kOp>
at::Tensor unary_impl(const char* name, const char* overload, const at::Tensor& self) {
  if (plain(self) && fast_dtype(self.scalar_type())) {
    at::Tensor out = fresh_output(self, self.sizes(), self.scalar_type());
    ::openreg::sanitizer::on_kernel(item_name(kOp), {&self}, {&out});
    launch(kOp, self,
           ElementwiseKernel{data_of(out), data_of(self), nullptr, self.numel(), 0.0, 1.0, kOp, self.scalar_type(),
                             false},
           {&self}, {&out});
    return out;
  }
  return general(general_op<kOp, false>(name, overload), self);
}

bool fits_int32(int64_t v) { return v <= std::numeric_limits<std::int32_t>::max(); }

template <FastOp kOp>
at::Tensor mm_impl(const char* name, const char* overload, const at::Tensor& self, const at::Tensor& mat2) {
  if (plain(self) && plain(mat2) && self.dim() == 2 && mat2.dim() == 2 && self.size(1) == mat2.size(0) &&
      self.device() == mat2.device() && (self.scalar_type() == c10::kFloat || self.scalar_type() == c10::kDouble) &&
      mat2.scalar_type() == self.scalar_type() && fits_int32(self.size(0)) && fits_int32(self.size(1)) &&
      fits_int32(mat2.size(1))) {
    at::Tensor out = fresh_output(self, {self.size(0), mat2.size(1)}, self.scalar_type());
    ::openreg::sanitizer::on_kernel(item_name(kOp), {&self, &mat2}, {&out});
    launch(kOp, self,
           MatmulKernel{data_of(out), data_of(self), data_of(mat2), nullptr, static_cast<std::int32_t>(self.size(0)),
                        static_cast<std::int32_t>(self.size(1)), static_cast<std::int32_t>(mat2.size(1)), 1.0f, 1.0f,
                        self.scalar_type(), false, false},
           {&self, &mat2}, {&out});
    return out;
  }
  return general(general_op<kOp, false>(name, overload), self, mat2);
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

template <FastOp kOp>
at::Tensor addmm_impl(const char* name, const char* overload, const at::Tensor& self, const at::Tensor& mat1,
                      const at::Tensor& mat2, const c10::Scalar& beta, const c10::Scalar& alpha) {
  const auto dtype = mat1.scalar_type();
  const auto alpha_value = exact_float(alpha);
  const auto beta_value = exact_float(beta);
  if (plain(self) && blas_layout(mat1) && blas_layout(mat2) && mat1.is_contiguous() &&
      mat1.size(1) == mat2.size(0) && (dtype == c10::kFloat || dtype == c10::kDouble) &&
      self.scalar_type() == dtype && mat2.scalar_type() == dtype && self.device() == mat1.device() &&
      mat2.device() == mat1.device() && alpha_value && beta_value && fits_int32(mat1.size(0)) &&
      fits_int32(mat1.size(1)) && fits_int32(mat2.size(1))) {
    const int64_t n = mat1.size(0);
    const int64_t m = mat2.size(1);
    // The bias as CPU broadcasts it into the (n, m) result: a row (m) or the full matrix.
    const bool row = self.dim() == 1 && self.size(0) == m;
    const bool full = self.dim() == 2 && self.size(0) == n && self.size(1) == m;
    if (row || full) {
      at::Tensor out = fresh_output(mat1, {n, m}, dtype);
      ::openreg::sanitizer::on_kernel(item_name(kOp), {&self, &mat1, &mat2}, {&out});
      launch(kOp, mat1,
             MatmulKernel{data_of(out), data_of(mat1), data_of(mat2), data_of(self), static_cast<std::int32_t>(n),
                          static_cast<std::int32_t>(mat1.size(1)), static_cast<std::int32_t>(m), *alpha_value,
                          *beta_value, dtype, !mat2.is_contiguous(), row},
             {&self, &mat1, &mat2}, {&out});
      return out;
    }
  }
  return general(general_op<kOp, false>(name, overload), self, mat1, mat2, beta, alpha);
}

// Wrappers with the exact signatures the dispatcher expects; `name` and `overload` come from the table.
#define OPENREG_FAST_WRAPPERS(id, name, overload, kind, call)                                                   \
  at::Tensor id##_with_alpha(const at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha) {     \
    return binary_impl<FastOp::id>(name, overload, self, other, alpha, true);                                  \
  }                                                                                                            \
  at::Tensor& id##_with_alpha_(at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha) {         \
    return binary_impl_<FastOp::id>(name, overload, self, other, alpha, true);                                 \
  }                                                                                                            \
  at::Tensor id##_binary(const at::Tensor& self, const at::Tensor& other) {                                   \
    return binary_impl<FastOp::id>(name, overload, self, other, 1, false);                                     \
  }                                                                                                            \
  at::Tensor& id##_binary_(at::Tensor& self, const at::Tensor& other) {                                       \
    return binary_impl_<FastOp::id>(name, overload, self, other, 1, false);                                    \
  }                                                                                                            \
  at::Tensor id##_unary(const at::Tensor& self) { return unary_impl<FastOp::id>(name, overload, self); }       \
  at::Tensor id##_mm(const at::Tensor& self, const at::Tensor& mat2) {                                        \
    return mm_impl<FastOp::id>(name, overload, self, mat2);                                                    \
  }                                                                                                            \
  at::Tensor id##_addmm(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2,               \
                        const c10::Scalar& beta, const c10::Scalar& alpha) {                                   \
    return addmm_impl<FastOp::id>(name, overload, self, mat1, mat2, beta, alpha);                              \
  }
OPENREG_FAST_OPS(OPENREG_FAST_WRAPPERS)
#undef OPENREG_FAST_WRAPPERS

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  // Each op registers the wrappers of its kind (the others are generated but unused).
#define OPENREG_FAST_REGISTER(id, name, overload, kind, call)                                \
  switch (Kind::kind) {                                                                      \
    case Kind::kBinaryWithAlpha:                                                             \
      m.impl(impl_name(name, overload, false).c_str(), TORCH_FN(id##_with_alpha));           \
      m.impl(impl_name(name, overload, true).c_str(), TORCH_FN(id##_with_alpha_));           \
      break;                                                                                 \
    case Kind::kBinary:                                                                      \
      m.impl(impl_name(name, overload, false).c_str(), TORCH_FN(id##_binary));               \
      m.impl(impl_name(name, overload, true).c_str(), TORCH_FN(id##_binary_));               \
      break;                                                                                 \
    case Kind::kUnary:                                                                       \
      m.impl(impl_name(name, overload, false).c_str(), TORCH_FN(id##_unary));                \
      break;                                                                                 \
    case Kind::kMm:                                                                          \
      m.impl(impl_name(name, overload, false).c_str(), TORCH_FN(id##_mm));                   \
      break;                                                                                 \
    case Kind::kAddmm:                                                                       \
      m.impl(impl_name(name, overload, false).c_str(), TORCH_FN(id##_addmm));                \
      break;                                                                                 \
  }
  OPENREG_FAST_OPS(OPENREG_FAST_REGISTER)
#undef OPENREG_FAST_REGISTER
}

}  // namespace at::openreg
