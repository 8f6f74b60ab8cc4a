#pragma once
// OpPlan: what the op engine needs to know about an operator, derived once from its schema (and the
// policy table, OpPolicy.h) and cached per operator (Note [Op execution on openreg] in OpEngine.cpp).
//
// Thread-safety: plan_for() may be called from any thread; a returned plan is immutable and lives as
// long as the process.

#include <ATen/core/dispatch/Dispatcher.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <vector>

namespace at::openreg {

//! How the fallback treats one argument of the schema.
enum class ArgKind : std::uint8_t {
  kOther,               //!< not a tensor: passed through unchanged
  kTensor,              //!< Tensor or Tensor?
  kTensorList,          //!< Tensor[]
  kOptionalTensorList,  //!< Tensor?[] (index lists: CPU tensors allowed here, like CUDA)
  kGenerator,           //!< Generator?: replaced by a seeded CPU generator
  kDevice,              //!< Device?: openreg devices become Meta / CPU for the kernels
};

//! One argument of the schema.
struct ArgPlan {
  ArgKind kind = ArgKind::kOther;
  bool written = false;   //!< alias annotation with '!': in-place self or out=
  //! The kernel reads its values: every argument but an out= one and the self of an in-place op that
  //! only overwrites it (fill_, zero_, the random fills). For timing-only execution's values.
  bool read = true;
  bool optional = false;  //!< the type accepts None
  bool scalar_type = false;  //!< ScalarType or ScalarType? (arrives as an int): coverage checks it
  bool layout = false;       //!< Layout or Layout? (arrives as an int): coverage checks it
};

//! Whether openreg can run the op at all (Note [Op coverage is decided at the call] in engine/OpCoverage.h).
enum class Coverage : std::uint8_t {
  kRuns,
  kNoCpuKernel,     //!< no CPU kernel (nor a composite one CPU inherits) to run
  kMakesQuantized,  //!< makes quantized tensors (OpPolicy.h): openreg has none
  kMakesSparse,     //!< makes sparse compressed tensors (OpPolicy.h): openreg has none
};

//! How one return value relates to the arguments.
//! A predicate on a call's arguments (OpPolicy.h, kReadsDataOnHostWhen and kResizesSelfWhen).
using SyncWhen = bool (*)(c10::ArrayRef<c10::IValue> args);

enum class ReturnKind : std::uint8_t {
  kFresh,       //!< a new tensor (or Tensor[]): allocated on the device before the kernel runs
  kWrittenArg,  //!< the written argument `arg` itself (in-place / out=)
  kViewOfArg,   //!< a view of argument `arg`: metadata only, never enqueued
  kNonTensor,   //!< a bool/int/float/list...: the op must run synchronously
};

//! One return of the schema.
struct ReturnPlan {
  ReturnKind kind = ReturnKind::kFresh;
  int arg = -1;          //!< argument index for kWrittenArg / kViewOfArg
  bool is_list = false;  //!< Tensor[] rather than Tensor
};

//! Everything the fallback derives from a schema.
struct OpPlan {
  std::optional<c10::OperatorHandle> op;  //!< the operator (always set)
  const char* name = nullptr;  //!< interned "aten::add.Tensor", the work item's name
  std::vector<ArgPlan> args;
  std::vector<ReturnPlan> returns;
  //! Run on the calling thread after synchronizing: non-tensor returns, data-dependent output shapes,
  //! ops that read their data to decide (asserts), or no Meta kernel to compute output metadata.
  bool sync_only = false;
  //! The host waits for the device on CUDA too (non-tensor returns, data-dependent output shapes), so
  //! the race checker orders the host after the stream. The other sync-path ops wait only because
  //! openreg runs them on the host; on CUDA they are asynchronous and order nothing.
  bool host_waits = false;
  bool random = false;        //!< takes a Generator or is tagged nondeterministic_seeded
  int generator_arg = -1;     //!< index of the Generator? argument, or -1
  bool writes = false;        //!< some argument is written
  //! An in-place variant (`add_`): its first argument, `self`, is written and may not change shape
  //! (PyTorch's rule; Note [In-place ops keep self's shape] in ShapePass.cpp).
  bool inplace = false;
  //! The op's Meta kernel is a Python function (torch/_meta_registrations.py and friends): see
  //! Note [Meta kernels written in Python] in ShapePass.cpp.
  bool meta_in_python = false;
  //! CUDA checks this op's arguments on the host and its Meta kernel does not (OpPolicy.h,
  //! kChecksOnCpu): the shape pass runs CPU's kernel on scratch, and its error is the call's.
  bool checks_on_cpu = false;
  //! Its output shape depends on the data only through mask indices (OpPolicy.h,
  //! kDataDependentWithMask): calls with one take the sync path.
  bool mask_dependent = false;
  //! For functional ops (every return kFresh and a plain Tensor): the out= overload whose arguments
  //! are this op's arguments followed by one out tensor per return, so the kernel writes straight into
  //! the preallocated outputs.
  std::optional<c10::OperatorHandle> out_op;
  //! Set once the out= overload failed where the functional op works (see OpWorkItem in AsyncPath.cpp).
  mutable std::atomic<bool> out_op_unreliable{false};
  //! Index of a bool argument without which the shape pass disagrees with CPU (batch norm's
  //! `training`: OpPolicy.h), or -1.
  int shape_pass_valid_if_arg = -1;
  //! Calls for which this says true take the sync path (OpPolicy.h, kReadsDataOnHostWhen).
  SyncWhen sync_when = nullptr;
  //! An in-place op whose CPU kernel may resize self (OpPolicy.h, kResizesSelfWhen): on the sync path
  //! self's kernel gets a host copy it can resize.
  bool resizes_self = false;
  //! Whether the op can run on openreg at all (checked at every call, before anything is queued).
  Coverage coverage = Coverage::kRuns;
};

//! The plan of `op` (built on first use, then cached).
const OpPlan& plan_for(const c10::OperatorHandle& op);

}  // namespace at::openreg
