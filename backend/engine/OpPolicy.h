#pragma once
// Note [Op policy: every per-op special case in one table]
// The engine treats ops by what their schemas say (OpPlan.h). The few ops whose schema does not tell
// the whole story are listed in ONE table, kOpPolicies in OpPolicy.cpp, and nowhere else:
//  - kDataDependent: the output shape or success depends on the data (nonzero, asserts, item-like
//    reads) beyond what the dynamic_output_shape / data_dependent_output tags say: the sync path.
//  - kShapePassDisagrees: the (Python) Meta kernel gives some outputs other shapes than CPU's kernel
//    (_embedding_bag's offset2bag / bag_size / max_indices): outputs must come from CPU, the sync path.
//  - kShapePassDisagreesUnlessArg: the same, but only when the named bool argument is false (batch
//    norm outside training returns empty saved statistics on CPU, its Meta kernel sizes them).
//  - kMakesQuantized / kMakesSparse (matched by name prefix): the op turns dense tensors into quantized
//    or sparse compressed ones, which openreg does not have: refused at the call (engine/OpCoverage.h).
//  - kChecksOnCpu: CUDA checks the arguments on the host (index_put's index broadcast and value shape,
//    masked_scatter's broadcast), the op's Meta kernel does not: the shape pass runs CPU's kernel on
//    zeroed scratch and its error is the call's (Note [Host-side checks at the call] in ShapePass.cpp).
//    Boolean (mask) indices take the sync path, as CUDA syncs for their nonzero.
//  - kDataDependentWithMask: the output shape depends on the data only through boolean (mask)
//    indices (index.Tensor: its tag says dynamic shape for every call): only calls with a mask take
//    the sync path, as CUDA syncs only for them.
//  - kFunctionalKernel: the engine registers the op's functional overload itself, so the op does not
//    reach the device through a PyTorch composite that differs from CPU: of its out= kernel (a
//    spurious resize warning), or a decomposition into other ops (values rounded differently); see the
//    table.
//  - kOutKernelDiffers: CPU's out= kernel computes other values than its functional kernel for some
//    inputs (a PyTorch bug): work items run the functional kernel and copy its results.
//  - kReadsDataOnHostWhen: for the arguments its predicate names, the op's host code (CUDA's too)
//    reads the data to validate it (multinomial without replacement): those calls take the sync path.
//  - kResizesSelfWhen: an in-place op whose CPU and CUDA kernels resize self for the arguments its
//    predicate names (addbmm_ of a self that broadcasts to the product's shape): those calls take the
//    sync path, where the kernel gets a host copy of self to resize, and self takes its shape and values.
// This header also decides, per call, which path a call takes (takes_sync_path).
//
// Thread-safety: all functions are pure; callable from any thread.

#include "backend/engine/OpPlan.h"

#include <string_view>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>

namespace at::openreg {

//! What the policy table says about one operator.
struct OpPolicy {
  bool data_dependent = false;       //!< listed as kDataDependent (or tagged so by its schema)
  bool shape_pass_disagrees = false;  //!< listed as kShapePassDisagrees
  //! For kShapePassDisagreesUnlessArg: the bool argument's name, else nullptr.
  const char* shape_pass_valid_if_arg = nullptr;
  bool makes_quantized = false;  //!< listed as kMakesQuantized
  bool makes_sparse = false;     //!< listed as kMakesSparse
  bool checks_on_cpu = false;    //!< listed as kChecksOnCpu
  bool data_dependent_with_mask = false;  //!< listed as kDataDependentWithMask
  bool out_kernel_differs = false;        //!< listed as kOutKernelDiffers
  SyncWhen sync_when = nullptr;  //!< listed as kReadsDataOnHostWhen or kResizesSelfWhen: its predicate
  bool resizes_self = false;     //!< listed as kResizesSelfWhen
};

//! The policy of `op` (its schema tags and the table).
OpPolicy policy_of(const c10::OperatorHandle& op);

//! aten operators (names without "aten::") whose functional overload the engine registers for itself
//! instead of reaching it through PyTorch's composite of the out= kernel (Rule::kFunctionalKernel).
std::vector<std::string_view> ops_run_functionally();

//! Whether this call must take the sync path: the plan says so, the shape pass disagrees with CPU for
//! these arguments, or the call's written tensors overlap inputs in ways CPU's kernels decide.
bool takes_sync_path(const OpPlan& plan, c10::ArrayRef<c10::IValue> args);

}  // namespace at::openreg
