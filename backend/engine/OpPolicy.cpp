#include "backend/engine/OpPolicy.h"

#include "backend/engine/Arguments.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/core/enum_tag.h>
#include <c10/util/SmallVector.h>

#include <string_view>
#include <vector>

namespace at::openreg {
namespace {

enum class Rule : std::uint8_t {
  kDataDependent,
  kShapePassDisagrees,
  kShapePassDisagreesUnlessArg,
  kMakesQuantized,
  kMakesSparse,
  kChecksOnCpu,
  kDataDependentWithMask,
  kFunctionalKernel,
  kOutKernelDiffers,
  kReadsDataOnHostWhen,
  kResizesSelfWhen,
};

struct PolicyEntry {
  // Operator name without overload (the rule covers every overload); for kMakesQuantized and
  // kMakesSparse a prefix of the name.
  std::string_view op;
  Rule rule;
  const char* arg = nullptr;  // for kShapePassDisagreesUnlessArg
  SyncWhen when = nullptr;  // for kReadsDataOnHostWhen and kResizesSelfWhen
};

// multinomial's host code (CPU's and CUDA's alike) reads the distribution with .item() to validate it
// ("invalid multinomial distribution") when it draws without replacement or a single sample, and
// rejects a non-float input or a sample count below 1 before anything runs. Drawing several samples
// with replacement validates on the device (CUDA's device-side assert): asynchronous.
// masked_fill_ with a 0-d device tensor as its value reads it with .item() on CUDA (so a value that
// does not fit self's dtype is an error at the call).
bool masked_fill_reads_value(c10::ArrayRef<c10::IValue> args) {
  return args[2].isTensor() && args[2].toTensor().is_privateuseone();
}

// addbmm_ (CPU's and CUDA's) broadcasts self to the product's shape and resizes self to it.
bool addbmm_resizes_self(c10::ArrayRef<c10::IValue> args) {
  const at::Tensor& self = args[0].toTensor();
  const at::Tensor& batch1 = args[1].toTensor();
  const at::Tensor& batch2 = args[2].toTensor();
  if (batch1.dim() != 3 || batch2.dim() != 3) return false;  // the op's own error, on the usual path
  return self.sizes() != c10::IntArrayRef({batch1.size(1), batch2.size(2)});
}

bool multinomial_reads_data(c10::ArrayRef<c10::IValue> args) {
  return !args[2].toBool() || args[1].toInt() <= 1 || !c10::isFloatingType(args[0].toTensor().scalar_type());
}

// _assert_async is a device-side assert on CUDA: the host checks only that the tensor has one element,
// then launches a kernel that traps on zero, reported at a later synchronize and never waited for. So
// here a one-element call runs asynchronously (its failure is the work item's, at the stream's next
// synchronize; in timing-only execution the kernel, and so the assert, does not run: the value was never
// computed), and any other call takes the sync path, where CPU's kernel raises CUDA's host error.
bool assert_async_checks_numel(c10::ArrayRef<c10::IValue> args) { return args[0].toTensor().numel() != 1; }

bool by_prefix(Rule rule) { return rule == Rule::kMakesQuantized || rule == Rule::kMakesSparse; }

// THE table (Note [Op policy: every per-op special case in one table]).
constexpr PolicyEntry kOpPolicies[] = {
    // Output shape or success depends on the data, beyond the schema tags.
    {"aten::nonzero", Rule::kDataDependent},
    {"aten::nonzero_numpy", Rule::kDataDependent},
    {"aten::masked_select", Rule::kDataDependent},
    {"aten::unique_consecutive", Rule::kDataDependent},
    {"aten::unique_dim_consecutive", Rule::kDataDependent},
    {"aten::_unique", Rule::kDataDependent},
    {"aten::_unique2", Rule::kDataDependent},
    {"aten::unique_dim", Rule::kDataDependent},
    {"aten::bincount", Rule::kDataDependent},
    {"aten::repeat_interleave", Rule::kDataDependent},
    {"aten::_linalg_check_errors", Rule::kDataDependent},
    {"aten::_local_scalar_dense", Rule::kDataDependent},
    {"aten::equal", Rule::kDataDependent},
    {"aten::is_nonzero", Rule::kDataDependent},
    {"aten::allclose", Rule::kDataDependent},
    {"aten::histogram", Rule::kDataDependent},
    {"aten::histogramdd", Rule::kDataDependent},
    {"aten::_histogramdd_bin_edges", Rule::kDataDependent},
    {"aten::_histogramdd_from_bin_cts", Rule::kDataDependent},
    {"aten::_histogramdd_from_bin_tensors", Rule::kDataDependent},
    {"aten::_assert_scalar", Rule::kDataDependent},
    {"aten::_functional_assert_async", Rule::kDataDependent},
    {"aten::_print", Rule::kDataDependent},
    {"aten::_ctc_loss", Rule::kDataDependent},
    {"aten::_ctc_loss_backward", Rule::kDataDependent},
    // Meta kernels whose output shapes differ from CPU's.
    {"aten::_embedding_bag", Rule::kShapePassDisagrees},
    {"aten::_embedding_bag_forward_only", Rule::kShapePassDisagrees},
    {"aten::native_batch_norm", Rule::kShapePassDisagreesUnlessArg, "training"},
    {"aten::_native_batch_norm_legit", Rule::kShapePassDisagreesUnlessArg, "training"},
    // Ops that make quantized tensors (their CPU kernels exist, but their results would come back as
    // dense tensors of the wrong type) or sparse ones: refused at the call. Name prefixes.
    {"aten::quantize_per_", Rule::kMakesQuantized},
    {"aten::_make_per_tensor_quantized_tensor", Rule::kMakesQuantized},
    {"aten::_make_per_channel_quantized_tensor", Rule::kMakesQuantized},
    {"aten::_empty_affine_quantized", Rule::kMakesQuantized},
    {"aten::_empty_per_channel_affine_quantized", Rule::kMakesQuantized},
    {"quantized::", Rule::kMakesQuantized},
    // Argument checks CUDA makes on the host and the Meta kernels do not.
    {"aten::_index_put_impl_", Rule::kChecksOnCpu},
    {"aten::masked_scatter_", Rule::kChecksOnCpu},
    {"aten::masked_scatter", Rule::kChecksOnCpu},
    {"aten::bucketize", Rule::kChecksOnCpu},     // boundaries must be 1-d
    {"aten::uniform_", Rule::kChecksOnCpu},      // from <= to
    {"aten::logit_", Rule::kChecksOnCpu},        // a float result cannot be written into an integer self
    {"aten::masked_fill_", Rule::kChecksOnCpu},  // the value must fit self's dtype
    {"aten::complex", Rule::kChecksOnCpu},       // real and imag of one dtype
    {"aten::angle", Rule::kChecksOnCpu},         // an integer out= cannot take angle's float result
    {"aten::isin", Rule::kChecksOnCpu},          // out= must be bool
    {"aten::all", Rule::kChecksOnCpu},           // out= must be bool (or uint8 for a uint8 input)
    {"aten::any", Rule::kChecksOnCpu},           // likewise
    {"aten::native_group_norm", Rule::kChecksOnCpu},  // input contiguous in its memory format
    {"aten::addr_", Rule::kChecksOnCpu},         // self must be 2-d
    {"aten::relu", Rule::kChecksOnCpu},          // no bool input
    {"aten::relu_", Rule::kChecksOnCpu},
    // Data-dependent only through mask indices.
    {"aten::index", Rule::kDataDependentWithMask},
    // Ops that make sparse compressed tensors from dense ones (sparse COO has kernels of its own, Note
    // [Sparse COO on openreg]: _to_sparse has a PrivateUse1 kernel, and COO factories dispatch to
    // SparsePrivateUse1).
    {"aten::_to_sparse_", Rule::kMakesSparse},
    {"aten::_sparse_compressed", Rule::kMakesSparse},
    {"aten::_sparse_csr", Rule::kMakesSparse},
    {"aten::_sparse_csc", Rule::kMakesSparse},
    {"aten::_sparse_bsr", Rule::kMakesSparse},
    {"aten::_sparse_bsc", Rule::kMakesSparse},
    {"aten::sparse_compressed", Rule::kMakesSparse},
    {"aten::sparse_csr", Rule::kMakesSparse},
    {"aten::sparse_csc", Rule::kMakesSparse},
    {"aten::sparse_bsr", Rule::kMakesSparse},
    {"aten::sparse_bsc", Rule::kMakesSparse},
    // Structured ops without a kernel of ours reach the device through PyTorch's
    // CompositeExplicitAutogradNonFunctional wrapper, which calls the out= kernel with an output of the
    // final (reduced) shape. These ops' out= kernels first resize it to the unreduced shape, which
    // warns that "an output with one or more elements was resized" on the first call of each shape,
    // a warning CPU and CUDA never give (they call their functional kernels). Registered with the
    // engine for their functional overload, so the engine runs them as CPU does.
    {"aten::mse_loss", Rule::kFunctionalKernel},
    {"aten::smooth_l1_loss", Rule::kFunctionalKernel},
    // The wrapper of index.Tensor runs its meta function (which warns about uint8 masks) and then the
    // out= kernel, which runs it again: the warning came twice more than on CPU. An overload name
    // (here and only here) names the overload to register.
    {"aten::index.Tensor", Rule::kFunctionalKernel},
    // Ops with a CompositeExplicitAutograd kernel, which PyTorch picks for PrivateUse1 over the engine's
    // fallback: a decomposition into other ops, where CPU and CUDA run a kernel of their own. Its values
    // differ from CPU's (float16/bfloat16 layer and group norms and addr round differently), and layer
    // norm's decomposition reached batch norm's out= kernel (below). The engine runs CPU's kernel.
    {"aten::native_layer_norm", Rule::kFunctionalKernel},
    {"aten::native_group_norm", Rule::kFunctionalKernel},
    {"aten::addr", Rule::kFunctionalKernel},
    {"aten::addr.out", Rule::kFunctionalKernel},
    {"aten::addr_", Rule::kFunctionalKernel},
    // all/any over a list of dims (dim=() included) and their out= overloads: the composite copies into
    // out= without CPU's check that out= is bool ("all only supports bool tensor for result"). _stack
    // and linalg__powsum have CPU kernels of their own beside their composites too.
    {"aten::all.dims", Rule::kFunctionalKernel},
    {"aten::all.dims_out", Rule::kFunctionalKernel},
    {"aten::any.dims", Rule::kFunctionalKernel},
    {"aten::any.dims_out", Rule::kFunctionalKernel},
    {"aten::_stack", Rule::kFunctionalKernel},
    {"aten::_stack.out", Rule::kFunctionalKernel},
    {"aten::linalg__powsum", Rule::kFunctionalKernel},
    // Composites that refuse an openreg tensor: conj_physical_'s calls the conj DispatchStub, which has
    // no PrivateUse1 kernel (an internal assert for complex self), and mode.values' accepts only CPU,
    // CUDA and XPU tensors. The engine runs them on CPU, where they work.
    {"aten::conj_physical_", Rule::kFunctionalKernel},
    {"aten::mode.values", Rule::kFunctionalKernel},
    // CPU's out= kernels of training-mode batch norm compute wrong values for an input that is neither
    // contiguous nor channels-last (save_mean left unwritten, the output normalized with it; their
    // functional kernels are right): the work item runs the functional kernel and copies its results.
    {"aten::native_batch_norm", Rule::kOutKernelDiffers},
    {"aten::_native_batch_norm_legit", Rule::kOutKernelDiffers},
    {"aten::_batch_norm_with_update", Rule::kOutKernelDiffers},
    // Host code that reads the data for some arguments: those calls take the sync path, where CPU's
    // kernel raises its errors at the call, as CUDA's host code does.
    {"aten::multinomial", Rule::kReadsDataOnHostWhen, nullptr, &multinomial_reads_data},
    {"aten::_assert_async", Rule::kReadsDataOnHostWhen, nullptr, &assert_async_checks_numel},
    {"aten::masked_fill_", Rule::kReadsDataOnHostWhen, nullptr, &masked_fill_reads_value},
    {"aten::addbmm_", Rule::kResizesSelfWhen, nullptr, &addbmm_resizes_self},
};

// CPU's kernels reject writes that partially overlap an input or that land twice on one element
// (TensorIterator's memory-overlap checks), and some ops accept them; Python meta kernels check
// neither. Such rare calls take the sync path, where the CPU kernel decides, on the caller's thread.
bool needs_cpu_overlap_rules(const OpPlan& plan, c10::ArrayRef<c10::IValue> args) {
  if (!plan.writes) return false;
  c10::SmallVector<const c10::TensorImpl*, 4> written, read;
  for (size_t i = 0; i < args.size(); ++i) {
    auto& into = plan.args[i].written ? written : read;
    for_each_tensor(args[i], plan.args[i].kind, [&](const at::Tensor& t, TensorPosition) {
      if (t.defined()) into.push_back(t.unsafeGetTensorImpl());
    });
  }
  for (const c10::TensorImpl* w : written) {
    if (at::has_internal_overlap(const_cast<c10::TensorImpl*>(w)) != at::MemOverlap::No) return true;
    for (const c10::TensorImpl* r : read) {
      if (!r->has_storage() || !w->has_storage() || !r->storage().is_alias_of(w->storage())) continue;
      auto status = at::get_overlap_status(w, r);
      if (status == at::MemOverlapStatus::Partial || status == at::MemOverlapStatus::TooHard) return true;
    }
  }
  return false;
}

}  // namespace

namespace {
// The flag of OpPolicy a rule sets, or null for the rules that carry more (an argument) or are not
// per-call rules.
bool OpPolicy::*flag_of(Rule rule) {
  switch (rule) {
    case Rule::kDataDependent: return &OpPolicy::data_dependent;
    case Rule::kShapePassDisagrees: return &OpPolicy::shape_pass_disagrees;
    case Rule::kMakesQuantized: return &OpPolicy::makes_quantized;
    case Rule::kMakesSparse: return &OpPolicy::makes_sparse;
    case Rule::kChecksOnCpu: return &OpPolicy::checks_on_cpu;
    case Rule::kDataDependentWithMask: return &OpPolicy::data_dependent_with_mask;
    case Rule::kOutKernelDiffers: return &OpPolicy::out_kernel_differs;
    case Rule::kShapePassDisagreesUnlessArg:
    case Rule::kReadsDataOnHostWhen:
    case Rule::kResizesSelfWhen:
    case Rule::kFunctionalKernel:
      break;
  }
  return nullptr;
}
}  // namespace

OpPolicy policy_of(const c10::OperatorHandle& op) {
  OpPolicy policy;
  policy.data_dependent = op.hasTag(at::Tag::dynamic_output_shape) || op.hasTag(at::Tag::data_dependent_output);
  const std::string_view name = op.operator_name().name;
  for (const auto& entry : kOpPolicies) {
    const bool matches = by_prefix(entry.rule) ? name.substr(0, entry.op.size()) == entry.op : name == entry.op;
    if (!matches) continue;
    if (entry.rule == Rule::kDataDependentWithMask) policy.data_dependent = false;  // only with a mask
    if (bool OpPolicy::*flag = flag_of(entry.rule)) {
      policy.*flag = true;
    } else if (entry.rule == Rule::kShapePassDisagreesUnlessArg) {
      policy.shape_pass_valid_if_arg = entry.arg;
    } else if (entry.rule == Rule::kReadsDataOnHostWhen) {
      policy.sync_when = entry.when;
    } else if (entry.rule == Rule::kResizesSelfWhen) {
      policy.sync_when = entry.when;
      policy.resizes_self = true;
    }  // kFunctionalKernel is a registration, not a per-call rule (ops_run_functionally)
  }
  return policy;
}

std::vector<std::string_view> ops_run_functionally() {
  std::vector<std::string_view> names;
  for (const auto& entry : kOpPolicies) {
    if (entry.rule == Rule::kFunctionalKernel) names.push_back(entry.op.substr(entry.op.find("::") + 2));
  }
  return names;
}

namespace {
// A boolean or uint8 index (a mask): its nonzero decides the shapes, which CUDA syncs for too.
bool has_mask_index(const OpPlan& plan, c10::ArrayRef<c10::IValue> args) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (plan.args[i].kind != ArgKind::kOptionalTensorList) continue;
    bool mask = false;
    for_each_tensor(args[i], plan.args[i].kind, [&](const at::Tensor& t, TensorPosition) {
      mask = mask || (t.defined() && (t.scalar_type() == at::kBool || t.scalar_type() == at::kByte));
    });
    if (mask) return true;
  }
  return false;
}
}  // namespace

bool takes_sync_path(const OpPlan& plan, c10::ArrayRef<c10::IValue> args) {
  if (plan.sync_only) return true;
  if ((plan.checks_on_cpu || plan.mask_dependent) && has_mask_index(plan, args)) return true;
  if (plan.shape_pass_valid_if_arg >= 0 && !args[plan.shape_pass_valid_if_arg].toBool()) return true;
  if (plan.sync_when != nullptr && plan.sync_when(args)) return true;
  return needs_cpu_overlap_rules(plan, args);
}

}  // namespace at::openreg
