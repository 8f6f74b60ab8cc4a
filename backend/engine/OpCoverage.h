#pragma once
// Note [Op coverage is decided at the call]
// The op engine runs every op as its CPU kernel on a device thread, so an op CPU cannot run would only
// fail at a later synchronization, in unrelated code, after returning a tensor that looks valid. CUDA
// refuses such an op when it is called. check_op_coverage() makes that decision before anything is
// queued, and raises NotImplementedError naming the op and openreg for:
//  - an op with no CPU kernel (decided once per operator: OpPlan::coverage);
//  - an op whose CPU kernel refuses the argument types (no dtype branch: learned by running the kernel
//    once per op and argument types on host stand-ins, Note [Probing CPU kernels for the argument
//    types] in engine/OpCoverage.cpp);
//  - an op that makes quantized or sparse tensors (openreg has dense tensors only; listed in the
//    policy table, Note [Op policy: every per-op special case in one table] in engine/OpPolicy.h).
// Sparse and quantized tensors themselves are refused by fallbacks on their dispatch keys.

#include "backend/engine/OpPlan.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>

#include <cstdint>
#include <string>

namespace at::openreg {

//! What check_op_coverage found for a call's argument types.
enum class CoverageVerdict : std::uint8_t {
  kRuns,       //!< CPU's kernel takes these types: decided for them
  kUndecided,  //!< not decided yet (a later call with the same types probes again)
  //! CPU's kernel refused these types on another call. Its kernel may still take this one (a 0-d or
  //! empty tensor returns before the dtype dispatch), so the call runs on the sync path, where CPU's
  //! kernel decides at the call: its result, or its NotImplementedError, which the engine raises as
  //! openreg's (raise_type_refusal).
  kRefusedByTypes,
};

//! Raises NotImplementedError when the engine cannot run `op` at all (no CPU kernel, quantized or
//! sparse compressed results); otherwise says what is known of its argument types.
CoverageVerdict check_op_coverage(const c10::OperatorHandle& op, const OpPlan& plan,
                                  c10::ArrayRef<c10::IValue> args);

//! Raises the NotImplementedError of an op whose CPU kernel refused the call's types with `cpu_message`.
[[noreturn]] void raise_type_refusal(const OpPlan& plan, const std::string& cpu_message);

}  // namespace at::openreg
