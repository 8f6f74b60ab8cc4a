#pragma once
// The shape pass: the geometry of an op's outputs, computed on the calling thread before anything is
// enqueued, by rerunning the op on stand-ins of its arguments (its Meta kernel, or its CPU kernel on
// scratch: Note [Meta kernels written in Python] in ShapePass.cpp), or taken from ShapePassCache when
// the same op saw the same argument metadata before. Errors about shapes and dtypes surface here,
// on the caller's thread, as CPU would raise them.
//
// Thread-safety: callable from any host thread (the cache is per thread).

#include "backend/engine/OpPlan.h"
#include "backend/engine/ShapePassCache.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>

#include <memory>
#include <optional>

namespace at::openreg {

//! One call's signature and what the shape-pass cache holds for it, looked up once when the call
//! starts (the op engine also skips the coverage check on a hit: Note [A cached signature was
//! covered] in OpEngine.cpp). Uses the thread's reusable signature; a call nested inside another
//! call's lookup (a kernel that calls an op) gets its own.
class ShapeLookup {
 public:
  ShapeLookup(const OpPlan& plan, c10::ArrayRef<c10::IValue> args);
  ~ShapeLookup();
  ShapeLookup(const ShapeLookup&) = delete;
  ShapeLookup& operator=(const ShapeLookup&) = delete;

  //! The cached outcome of these arguments' signature, or nullptr. It points into the thread's cache,
  //! which only this thread changes, when it stores an outcome (no op runs between the lookup and
  //! the outcome's use in run_async).
  const MetaOutcome* hit() const noexcept { return hit_; }
  //! Forbids caching what the shape pass computes for this call.
  void do_not_store() noexcept { may_store_ = false; }

 private:
  friend const MetaOutcome* output_geometry(const c10::OperatorHandle&, const OpPlan&, c10::ArrayRef<c10::IValue>,
                                            ShapeLookup&, std::optional<MetaOutcome>&);
  std::unique_ptr<MetaSignature> owned_;  // set only when nested
  MetaSignature* signature_;
  const MetaOutcome* hit_ = nullptr;
  bool cacheable_ = false;
  bool may_store_ = true;
};

//! The outputs' geometry of `op` on `args` (whose signature `lookup` holds), or nullptr when the
//! shape pass failed (the sync path then reruns the op on CPU, so the caller gets exactly CPU's
//! result or error). out= arguments the pass resized are resized on the device. The result points
//! into the cache or into `computed`.
const MetaOutcome* output_geometry(const c10::OperatorHandle& op, const OpPlan& plan, c10::ArrayRef<c10::IValue> args,
                                   ShapeLookup& lookup, std::optional<MetaOutcome>& computed);

}  // namespace at::openreg
