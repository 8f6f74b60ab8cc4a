#pragma once
// The op engine's entry (Note [Op execution on openreg] in OpEngine.cpp, which maps the engine), callable
// by explicit kernels that forward an op to another one (convolution_overrideable → convolution).

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace at::openreg {

//! Runs `op` on the openreg tensors of `stack` (its arguments) and leaves its returns there, exactly
//! as the boxed PrivateUse1 fallback does. Thread-safety: callable from any host thread.
void execute_op(const c10::OperatorHandle& op, torch::jit::Stack* stack);

//! Raises the error of a call with tensors on devices `a` and `b` (as CPU and CUDA word it).
[[noreturn]] void raise_two_devices(c10::Device a, c10::Device b);

}  // namespace at::openreg
