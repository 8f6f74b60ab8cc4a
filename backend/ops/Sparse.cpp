// Note [Sparse COO on openreg]
// A sparse COO tensor on openreg is ATen's SparseTensorImpl (dispatch key SparsePrivateUse1) whose
// indices and values are dense openreg tensors. ATen registers its sparse kernels for SparseCPU and
// SparseCUDA only, so openreg provides three kinds of kernel for SparsePrivateUse1:
//
//  - Bookkeeping (construction from indices and values, _indices/_values/_nnz, sparse_resize_, the
//    sparse-to-sparse copy, empty, zero_): ATen's implementations are device-generic and registered
//    under SparseMeta as well as SparseCPU/SparseCUDA; openreg redispatches to that registration. No
//    device work, or only dense openreg ops (a copy of the indices), which run asynchronously.
//  - The ops sparse training and sparse matrix products live on, built from dense openreg ops on the
//    indices and values, so that they run asynchronously in stream order like any dense op:
//      to_dense                  zeros, then index_put_ with accumulate (duplicates add up, as on CPU)
//      dense + sparse (add_, sub_, add, sub)   index_put_ with accumulate into (a copy of) the dense side
//      sparse + sparse           the indices and values concatenated, uncoalesced: CUDA's choice, which
//                                needs no nnz on the host (CPU merges; the values are the same)
//      sparse * scalar, / scalar the values scaled
//      addmm/mm (sparse @ dense) index_add_ of the rows' values times the rows of the dense operand:
//                                per output row, the same products summed in the same (nnz) order as
//                                CPU's kernel
//      sparse_mask, clone, sum   the values gathered, copied or summed
//      sqrt, abs, sin, neg, ...  (kValueOps: f(0) = 0) the dense op on the values of a coalesced tensor
//    and the sparse gradients of nn.Embedding/nn.EmbeddingBag(sparse=True), which ATen builds from
//    dense ops and these constructors (_embedding_bag_backward needs a kernel of openreg's own, below).
//    A call these do not cover (another dtype combination, a sparse operand where a dense one is
//    expected, a bad shape) takes the host path below, where CPU's kernel gives its result or error.
//  - Everything else, and what needs the values to know its output's size (coalesce, to_sparse, sparse
//    @ sparse, sparse * sparse): CPU's kernel on a host copy (Note [Running an op on the host]),
//    synchronously. CUDA synchronizes for those as well, to read the new nnz.
//
// Sparse compressed layouts (CSR, CSC, BSR, BSC) stay refused at the call (OpCoverage.cpp).

#include "backend/ops/HostRoundTrip.h"
#include "backend/engine/OpEngine.h"

#include <ATen/ExpandUtils.h>
#include <ATen/SparseTensorImpl.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/SparseTensorUtils.h>
#include <ATen/ops/_embedding_bag_sparse_backward.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_and_tensors.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/copy_sparse_to_sparse.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/searchsorted.h>
#include <ATen/ops/zeros.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/ScalarType.h>
#include <torch/library.h>

#include <array>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace at::openreg {
namespace {

// --- bookkeeping: ATen's device-generic kernels --------------------------------------------------------

//! The openreg device a call's arguments name: its first openreg tensor's, or a Device argument's.
std::optional<c10::Device> device_of_call(c10::ArrayRef<c10::IValue> args) {
  for (const c10::IValue& a : args) {
    if (a.isTensor() && a.toTensor().defined() && a.toTensor().is_privateuseone()) return a.toTensor().device();
    if (a.isDevice() && a.toDevice().is_privateuseone() && a.toDevice().has_index()) return a.toDevice();
  }
  return std::nullopt;
}

void generic_sparse_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  // A new SparseTensorImpl starts with empty indices and values on the current device; ATen's registered
  // wrappers for SparseCUDA make the call's device current first (device_guard), SparseMeta's do not.
  c10::OptionalDeviceGuard guard(device_of_call(torch::jit::last(*stack, op.schema().arguments().size())));
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::SparseMeta), stack);
}

// The ops whose SparseMeta kernel is the one SparseCPU and SparseCUDA register too.
constexpr std::string_view kGenericOps[] = {
    "_sparse_coo_tensor_with_dims", "_sparse_coo_tensor_with_dims_and_tensors",
    "_indices", "_values", "indices", "values", "_nnz", "sparse_dim", "dense_dim", "_dimV",
    "is_coalesced", "_coalesced_", "sparse_resize_", "sparse_resize_and_clear_", "copy_sparse_to_sparse_",
    "empty.memory_format", "zero_", "zeros.out",
};

// --- asynchronous kernels from dense openreg ops --------------------------------------------------------

bool is_openreg_sparse(const at::Tensor& t) { return t.defined() && t.is_sparse() && t.is_privateuseone(); }
bool is_openreg_dense(const at::Tensor& t) {
  return t.defined() && t.layout() == c10::kStrided && t.is_privateuseone();
}

//! The sparse dimensions' index rows of `s`, as index_put_ and index take them.
c10::List<std::optional<at::Tensor>> index_rows(const at::Tensor& s) {
  const at::Tensor indices = s._indices();
  c10::List<std::optional<at::Tensor>> rows;
  for (int64_t d = 0; d < indices.size(0); ++d) rows.push_back(indices.select(0, d));
  return rows;
}

at::Tensor make_sparse(const at::Tensor& like, const at::Tensor& indices, const at::Tensor& values, bool coalesced) {
  return at::_sparse_coo_tensor_with_dims_and_tensors(like.sparse_dim(), like.dense_dim(), like.sizes(), indices,
                                                      values, values.options().layout(c10::kSparse), coalesced);
}

//! Whether a dense-side kernel may take `s`: indices addressing at least one sparse dimension.
bool has_index_rows(const at::Tensor& s) { return s.sparse_dim() > 0; }

//! `alpha` suits `dtype` as CPU's alpha_check wants it (an integral alpha for integers, a real one for
//! real tensors; no bool math).
bool alpha_fits(c10::ScalarType dtype, const c10::Scalar& alpha) {
  if (dtype == c10::kBool || (alpha.isComplex() && !c10::isComplexType(dtype))) return false;
  return !c10::isIntegralType(dtype, /*includeBool=*/false) || alpha.isIntegral(/*includeBool=*/false);
}

at::Tensor scaled(const at::Tensor& values, const c10::Scalar& alpha) {
  return alpha.equal(1) ? values : values.mul(alpha);
}

std::optional<at::Tensor> to_dense(const at::Tensor& self, const std::optional<c10::ScalarType>& dtype) {
  if (dtype.has_value() || !has_index_rows(self)) return std::nullopt;
  at::Tensor dense = at::zeros(self.sizes(), self._values().options());
  if (self._nnz() > 0) dense.index_put_(index_rows(self), self._values(), /*accumulate=*/true);
  return dense;
}

//! self + alpha * other, for the operand pairs covered (Note); `inplace` writes self.
std::optional<at::Tensor> add(const at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha,
                              bool inplace) {
  if (self.sizes() != other.sizes() || self.device() != other.device() || !other.is_sparse()) return std::nullopt;
  const c10::ScalarType common = at::result_type(self, other);
  if (!alpha_fits(common, alpha) || (inplace && common != self.scalar_type())) return std::nullopt;
  if (is_openreg_dense(self) && is_openreg_sparse(other) && has_index_rows(other)) {
    at::Tensor target = inplace ? self : self.to(common, /*non_blocking=*/false, /*copy=*/true);
    if (other._nnz() > 0) {
      target.index_put_(index_rows(other), scaled(other._values(), alpha).to(common), /*accumulate=*/true);
    }
    return target;
  }
  if (!is_openreg_sparse(self) || !is_openreg_sparse(other) || self.sparse_dim() != other.sparse_dim() ||
      self.dense_dim() != other.dense_dim()) {
    return std::nullopt;
  }
  const at::Tensor indices = at::cat({self._indices(), other._indices()}, 1);
  const at::Tensor values = at::cat({self._values().to(common), scaled(other._values(), alpha).to(common)}, 0);
  const bool coalesced =
      (other._nnz() == 0 && self.is_coalesced()) || (self._nnz() == 0 && other.is_coalesced());
  if (!inplace) return make_sparse(self, indices, values, coalesced);
  at::sparse::get_sparse_impl(self)->set_indices_and_values_unsafe(indices, values);
  self._coalesced_(coalesced);
  return self;
}

//! sparse self times or divided by a 0-d dense `other` (a Python number arrives as one).
std::optional<at::Tensor> scale(const at::Tensor& self, const at::Tensor& other, bool divide, bool inplace) {
  if (!is_openreg_sparse(self) || other.is_sparse() || other.dim() != 0) return std::nullopt;
  if (inplace) {
    at::Tensor values = self._values();
    if (divide) {
      values.div_(other);
    } else {
      values.mul_(other);
    }
    return self;
  }
  at::Tensor values = divide ? self._values().div(other) : self._values().mul(other);
  return make_sparse(self, self._indices().clone(), values, self.is_coalesced());
}

//! beta * self + alpha * (mat1 @ mat2) for a 2-d sparse mat1 and a dense mat2.
std::optional<at::Tensor> sparse_dense_addmm(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2,
                                const c10::Scalar& beta, const c10::Scalar& alpha) {
  if (!is_openreg_sparse(mat1) || !is_openreg_dense(mat2) || !is_openreg_dense(self) || mat1.sparse_dim() != 2 ||
      mat1.dense_dim() != 0 || mat2.dim() != 2 || mat1.size(1) != mat2.size(0) ||
      mat1.device() != mat2.device() || self.device() != mat2.device() ||
      mat1.scalar_type() != mat2.scalar_type() || self.scalar_type() != mat2.scalar_type() ||
      mat2.scalar_type() == c10::kBool) {
    return std::nullopt;
  }
  const std::array<int64_t, 2> shape{mat1.size(0), mat2.size(1)};
  if (!at::is_expandable_to(self.sizes(), shape)) return std::nullopt;
  at::Tensor result;
  if (beta.toComplexDouble() == 0.0) {
    result = at::zeros(shape, mat2.options());  // beta 0 ignores self, NaN included
  } else if (beta.equal(1)) {
    result = self.expand(shape).clone(at::MemoryFormat::Contiguous);
  } else {
    result = self.expand(shape).mul(beta).contiguous();
  }
  if (mat1._nnz() > 0) {
    const at::Tensor indices = mat1._indices();
    const at::Tensor rows = mat2.index_select(0, indices.select(0, 1)).mul(mat1._values().unsqueeze(1));
    result.index_add_(0, indices.select(0, 0), rows, alpha);
  }
  return result;
}

std::optional<at::Tensor> sparse_mask(const at::Tensor& self, const at::Tensor& mask) {
  if (!is_openreg_dense(self) || !is_openreg_sparse(mask) || self.sizes() != mask.sizes() ||
      self.device() != mask.device() || !has_index_rows(mask)) {
    return std::nullopt;
  }
  const at::Tensor values = self.index(index_rows(mask));
  return make_sparse(mask, mask._indices().clone(), values, mask.is_coalesced());
}

// Elementwise ops with f(0) = 0 act on the values alone. CPU's kernels coalesce first (the op of a sum of
// duplicates is not the sum of the ops), except neg, which is linear: a coalesced tensor (its flag is
// host metadata) or neg runs the dense op on its values, asynchronously; an uncoalesced one takes the
// host path, since coalescing must read the indices.
constexpr std::string_view kValueOps[] = {
    "abs",   "asin",  "asinh", "atan",  "atanh",      "ceil",   "deg2rad",  "erf",      "erfinv", "expm1",
    "floor", "frac",  "log1p", "rad2deg", "round",    "sgn",    "sign",     "sin",      "sinh",   "sqrt",
    "tan",   "tanh",  "trunc", "relu",  "nan_to_num", "neg",    "isnan",    "isinf",    "isposinf",
    "isneginf", "signbit",
};

//! The op of kValueOps (functional, or in-place with a trailing '_') on a sparse self's values.
void values_op(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t n = op.schema().arguments().size();
  auto args = torch::jit::last(*stack, n);
  const at::Tensor self = args[0].toTensor();
  const std::string& name = op.schema().name();
  const bool linear = name == "aten::neg" || name == "aten::neg_";
  if (!is_openreg_sparse(self) || (!linear && !self.is_coalesced())) return run_on_host(op, stack);
  const bool inplace = !name.empty() && name.back() == '_';
  c10::OptionalDeviceGuard guard(self.device());
  torch::jit::Stack on_values(args.begin(), args.end());
  on_values[0] = self._values();
  op.callBoxed(&on_values);  // the dense op on the values (in place for an in-place op)
  torch::jit::drop(*stack, n);
  if (inplace) {
    stack->emplace_back(self);
  } else {
    stack->emplace_back(make_sparse(self, self._indices().clone(), on_values[0].toTensor(), self.is_coalesced()));
  }
}

// --- the boxed wrappers: a kernel above, or the host -------------------------------------------------

using Args = c10::ArrayRef<c10::IValue>;
using Attempt = std::optional<at::Tensor> (*)(Args);

template <Attempt attempt>
void try_on_device(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t n = op.schema().arguments().size();
  c10::OptionalDeviceGuard guard(device_of_call(torch::jit::last(*stack, n)));
  std::optional<at::Tensor> result = attempt(torch::jit::last(*stack, n));
  if (!result) return run_on_host(op, stack);
  torch::jit::drop(*stack, n);
  stack->emplace_back(*std::move(result));
}

const at::Tensor& arg(Args a, size_t i) { return a[i].toTensor(); }

template <bool kSubtract, bool kInplace>
std::optional<at::Tensor> add_kernel(Args a) {
  c10::Scalar alpha = a[2].toScalar();
  if (kSubtract) alpha = -alpha;
  return add(arg(a, 0), arg(a, 1), alpha, kInplace);
}

template <bool kDivide, bool kInplace>
std::optional<at::Tensor> scale_kernel(Args a) {
  return scale(arg(a, 0), arg(a, 1), kDivide, kInplace);
}

std::optional<at::Tensor> to_dense_kernel(Args a) { return to_dense(arg(a, 0), a[1].toOptional<c10::ScalarType>()); }

std::optional<at::Tensor> addmm_kernel(Args a) {
  return sparse_dense_addmm(arg(a, 0), arg(a, 1), arg(a, 2), a[3].toScalar(), a[4].toScalar());
}

std::optional<at::Tensor> mm_kernel(Args a) {
  const at::Tensor& mat1 = arg(a, 0);
  const at::Tensor& mat2 = arg(a, 1);
  if (mat2.dim() != 2 || !mat2.defined()) return std::nullopt;
  return sparse_dense_addmm(at::zeros({1}, mat2.options()), mat1, mat2, /*beta=*/0, /*alpha=*/1);
}

std::optional<at::Tensor> sparse_mask_kernel(Args a) { return sparse_mask(arg(a, 0), arg(a, 1)); }

std::optional<at::Tensor> clone_kernel(Args a) {
  const at::Tensor& self = arg(a, 0);
  const auto format = a[1].toOptional<c10::MemoryFormat>();
  if (!is_openreg_sparse(self) || format.has_value()) return std::nullopt;  // CPU refuses any format
  return make_sparse(self, self._indices().clone(), self._values().clone(), self.is_coalesced());
}

std::optional<at::Tensor> sum_kernel(Args a) {
  const at::Tensor& self = arg(a, 0);
  if (!is_openreg_sparse(self)) return std::nullopt;
  return self._values().sum(a[1].toOptional<c10::ScalarType>());
}

//! copy_ between two sparse tensors is ATen's sparse copy; anything else is CPU's error or result.
std::optional<at::Tensor> copy_kernel(Args a) {
  at::Tensor self = arg(a, 0);
  const at::Tensor& src = arg(a, 1);
  if (!self.is_sparse() || !src.is_sparse()) return std::nullopt;
  return at::copy_sparse_to_sparse_(self, src, a[2].toBool());
}

//! Registers `attempt`'s op in `lib` and records its name in `names`.
template <Attempt attempt>
void device_kernel(torch::Library& lib, const char* name, std::vector<std::string_view>& names) {
  lib.impl(name, torch::CppFunction::makeFromBoxedFunction<&try_on_device<attempt>>());
  names.emplace_back(name);
}

}  // namespace

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&run_on_host>());
}

namespace {
const bool g_sparse_kernels_registered = [] {
  static torch::Library lib(torch::Library::IMPL, "aten", c10::DispatchKey::SparsePrivateUse1, __FILE__, __LINE__);
  std::vector<std::string_view> names(std::begin(kGenericOps), std::end(kGenericOps));
  for (std::string_view name : kGenericOps) {
    lib.impl(std::string(name).c_str(), torch::CppFunction::makeFromBoxedFunction<&generic_sparse_kernel>());
  }
  device_kernel<&to_dense_kernel>(lib, "_to_dense", names);
  device_kernel<&add_kernel<false, false>>(lib, "add.Tensor", names);
  device_kernel<&add_kernel<false, true>>(lib, "add_.Tensor", names);
  device_kernel<&add_kernel<true, false>>(lib, "sub.Tensor", names);
  device_kernel<&add_kernel<true, true>>(lib, "sub_.Tensor", names);
  device_kernel<&scale_kernel<false, false>>(lib, "mul.Tensor", names);
  device_kernel<&scale_kernel<false, true>>(lib, "mul_.Tensor", names);
  device_kernel<&scale_kernel<true, false>>(lib, "div.Tensor", names);
  device_kernel<&scale_kernel<true, true>>(lib, "div_.Tensor", names);
  device_kernel<&addmm_kernel>(lib, "addmm", names);
  device_kernel<&mm_kernel>(lib, "mm", names);
  device_kernel<&sparse_mask_kernel>(lib, "sparse_mask", names);
  device_kernel<&clone_kernel>(lib, "clone", names);
  device_kernel<&sum_kernel>(lib, "sum", names);
  device_kernel<&copy_kernel>(lib, "copy_", names);
  std::vector<std::string> value_op_names;  // the functional ops and their in-place forms CPU has
  for (std::string_view base : kValueOps) {
    for (std::string name : {std::string(base), std::string(base) + "_"}) {
      const auto handle = c10::Dispatcher::singleton().findOp({"aten::" + name, ""});
      if (!handle || !handle->hasKernelForDispatchKey(c10::DispatchKey::SparseCPU)) continue;
      lib.impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&values_op>());
      value_op_names.push_back(std::move(name));
    }
  }
  for (const std::string& name : value_op_names) names.emplace_back(name);
  register_host_kernels_like(lib, c10::DispatchKey::SparseCPU, names);
  return true;
}();
}  // namespace

namespace {
// _embedding_bag_backward has CPU and CUDA kernels that return a sparse gradient when asked
// (nn.EmbeddingBag(sparse=True)). The engine makes dense results only, so such calls run ATen's
// device-generic sparse backward here (index_add_ and a COO tensor over openreg memory, queued like
// any dense op); dense ones run as every op does.
void embedding_bag_backward(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto a = torch::jit::last(*stack, op.schema().arguments().size());
  if (!a[9].toBool()) return execute_op(op, stack);
  const at::Tensor& indices = a[1].toTensor();
  const at::Tensor& offsets = a[2].toTensor();
  at::Tensor offset2bag = a[3].toTensor();
  if (indices.numel() != 0 && offset2bag.numel() == 0) {
    // CPU's forward leaves offset2bag empty on its fast path (sum, no per-sample weights): each index's
    // bag is the last offset at or before it.
    offset2bag = at::searchsorted(offsets, at::arange(indices.numel(), offsets.options()), /*out_int32=*/false,
                                  /*right=*/true)
                     .sub_(1);
  }
  at::Tensor grad = at::_embedding_bag_sparse_backward_symint(
      a[0].toTensor(), indices, offsets, offset2bag, a[4].toTensor(), a[6].toSymInt(),
      a[7].toBool(), a[8].toInt(), a[10].toOptional<at::Tensor>(), a[11].toInt());
  torch::jit::drop(*stack, a.size());
  stack->emplace_back(std::move(grad));
}
}  // namespace

// Dense to sparse COO on the device, on the host: which elements are nonzero decides the output's size
// (CUDA synchronizes too). to_sparse(layout=...) reaches _to_sparse as well; a compressed result is
// refused where run_on_host would move it to the device.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_to_sparse", torch::CppFunction::makeFromBoxedFunction<&run_on_host>());
  m.impl("_to_sparse.sparse_dim", torch::CppFunction::makeFromBoxedFunction<&run_on_host>());
  m.impl("_embedding_bag_backward", torch::CppFunction::makeFromBoxedFunction<&embedding_bag_backward>());
}

}  // namespace at::openreg
