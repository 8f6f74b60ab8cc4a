#pragma once

// Note [Running an op on the host]
// Some tensor types have ATen kernels for CPU and CUDA only: nested tensors (Note [Nested tensors on
// openreg]) and sparse COO tensors (Note [Sparse COO on openreg]). Those openreg has no kernel of its
// own for run through run_on_host: the openreg arguments move to the host (a nested tensor as its buffer
// with the same sizes, strides and offsets, a sparse one as its indices and values), the op runs there
// with CPU's kernel, the arguments it wrote get the host's values back, and its results move to the
// device. Unlike the engine's ops this is synchronous on the calling thread: every move to the host
// waits for the stream, the way PyTorch's own CPU fallback for a backend works.

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <string_view>

namespace at::openreg {

//! The boxed kernel of the Note: runs `op` with CPU's kernels on host copies of its openreg arguments.
void run_on_host(const c10::OperatorHandle& op, torch::jit::Stack* stack);

//! Registers run_on_host in `lib` (an IMPL library for one of openreg's dispatch keys) for every aten op
//! that has a kernel for `cpu_key` (NestedTensorCPU, SparseCPU), except the ops named in `except`.
//! A fallback ranks below an op's composite kernels, which decompose into ops that cannot take these
//! tensors; a kernel per op ranks above them, as CUDA's do. ATen's registrations are complete when
//! openreg loads (it links against libtorch_cpu).
void register_host_kernels_like(torch::Library& lib, c10::DispatchKey cpu_key,
                                c10::ArrayRef<std::string_view> except = {});

}  // namespace at::openreg
