#pragma once
// Note [Op coverage is decided at the call]
// The op engine runs every op as its CPU kernel on a device thread, so an op CPU cannot run would only
// fail at a later synchronization, in unrelated code, after returning a tensor that looks valid. CUDA
// refuses such an op when it is called. check_op_coverage() makes that decision before anything is
// queued, and raises NotImplementedError naming the op and openreg for:
//  - an op with no CPU kernel (decided once per operator: OpPlan::coverage);
//  - an op whose CPU kernel refuses the argument types (no dtype branch: learned by running the kernel
//    once per op and argument types on host stand-ins, Note [Probing CPU kernels for the argument
//    types] in ops/engine/OpCoverage.cpp);
//  - an op that makes quantized or sparse tensors (openreg has dense tensors only; listed in the
//    policy table, Note [Op policy: every per-op special case in one table] in engine/OpPolicy.h).
// Sparse and quantized tensors themselves are refused by fallbacks on their dispatch keys.

#include "backend/ops/engine/OpPlan.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>

namespace at::openreg {

//! Raises NotImplementedError when the engine cannot run `op` on these arguments. Otherwise returns
//! whether that is decided for their types (false: a later call with the same types probes again).
bool check_op_coverage(const c10::OperatorHandle& op, const OpPlan& plan, c10::ArrayRef<c10::IValue> args);

}  // namespace at::openreg
