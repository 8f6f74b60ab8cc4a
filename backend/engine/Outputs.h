#pragma once
// The openreg tensors an op returns and the geometry of the tensors it writes: fresh outputs allocated
// before the kernel runs, view outputs built as metadata over an argument's storage (never enqueued),
// and out= arguments given the geometry the kernel chose for them.
//
// Thread-safety: host-side only (the caller's thread); functions touch only the tensors given.

#include "backend/engine/OpPlan.h"
#include "backend/engine/ShapePassCache.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

namespace at::openreg {

//! A fresh openreg tensor of geometry `g` on `device` (undefined for an undefined geometry: masked
//! gradients of convolution_backward stay undefined).
at::Tensor allocate_like(const TensorGeometry& g, c10::DeviceIndex device);

//! An openreg tensor over `base`'s storage with the geometry `g`: what a view op returns.
at::Tensor view_over(const at::Tensor& base, const TensorGeometry& g);

//! Same sizes, strides and storage offset.
bool same_geometry(const at::Tensor& a, const at::Tensor& b);

//! Gives `real` the geometry (sizes, strides, offset), growing its storage when that needs more memory:
//! resize_ alone would size it for contiguous strides, and kernels may pick padded ones (LAPACK's
//! leading dimensions).
void restride(const at::Tensor& real, c10::IntArrayRef sizes, c10::IntArrayRef strides, int64_t offset);

//! Gives each written tensor of `real` the geometry of its stand-in in `standin` (out= resizing); true
//! when some tensor's geometry changed.
bool adopt_written_geometry(const OpPlan& plan, c10::ArrayRef<c10::IValue> real, c10::ArrayRef<c10::IValue> standin);

}  // namespace at::openreg
