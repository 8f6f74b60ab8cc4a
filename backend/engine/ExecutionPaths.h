#pragma once
// The two ways the engine runs a call (Note [Op execution on openreg] in OpEngine.cpp):
//  - run_async (AsyncPath.cpp): outputs allocated from the shape pass, one work item enqueued on the
//    current stream, the caller returns at once;
//  - run_sync (SyncPath.cpp): the host waits for the stream and runs the CPU kernel itself.
// Both take the op's arguments on top of `stack` and leave its returns there.
//
// Thread-safety: callable from any host thread.

#include "backend/engine/OpPlan.h"
#include "backend/engine/ShapePass.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace at::openreg {

//! Enqueues the call (`shapes`: its arguments' signature, looked up at the call's start); false (stack
//! untouched) when the shape pass failed and the sync path must run it.
bool run_async(const c10::OperatorHandle& op, const OpPlan& plan, torch::jit::Stack* stack, c10::DeviceIndex device,
               ShapeLookup& shapes);

//! Runs the call on the calling thread after the device's current stream drained.
void run_sync(const c10::OperatorHandle& op, const OpPlan& plan, torch::jit::Stack* stack, c10::DeviceIndex device);

}  // namespace at::openreg
