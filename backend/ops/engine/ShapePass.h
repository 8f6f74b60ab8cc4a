#pragma once
// The shape pass: the geometry of an op's outputs, computed on the calling thread before anything is
// enqueued, by rerunning the op on stand-ins of its arguments (its Meta kernel, or its CPU kernel on
// scratch: Note [Meta kernels written in Python] in ShapePass.cpp), or taken from ShapePassCache when
// the same op saw the same argument metadata before. Errors about shapes and dtypes surface here,
// on the caller's thread, as CPU would raise them.
//
// Thread-safety: callable from any host thread (the cache is per thread).

#include "backend/ops/engine/OpPlan.h"
#include "backend/ops/engine/ShapePassCache.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>

#include <optional>

namespace at::openreg {

//! The outputs' geometry of `op` on `args`, or nullptr when the shape pass failed (the sync path then
//! reruns the op on CPU, so the caller gets exactly CPU's result or error). out= arguments the pass
//! resized are resized on the device. The result points into the cache or into `computed`.
const MetaOutcome* output_geometry(const c10::OperatorHandle& op, const OpPlan& plan, c10::ArrayRef<c10::IValue> args,
                                   std::optional<MetaOutcome>& computed);

}  // namespace at::openreg
