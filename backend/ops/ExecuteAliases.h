#pragma once
// Stand-ins for openreg tensors that kernels of other dispatch keys can take: Meta tensors (metadata
// only, to compute output shapes on the host) and zero-copy CPU aliases (device memory is host memory,
// so a CPU tensor over the same bytes lets a CPU kernel run on the device's data).
//
// A converter maps each distinct openreg storage to ONE stand-in storage, so tensors that share memory
// still share it after conversion: the CPU kernels' overlap checks ("unsupported operation: some
// elements of the input tensor and the written-to tensor refer to a single memory location") and
// in-place semantics then behave as on CPU.
//
// Thread-safety: a converter is used by one thread at a time.

#include <ATen/core/Tensor.h>
#include <c10/core/Storage.h>

#include <utility>
#include <vector>

namespace at::openreg {

//! What an openreg storage becomes: a Meta storage, a CPU alias of the device bytes, or CPU scratch
//! bytes of the same size (uninitialised; for running a CPU kernel only to see the results' geometry,
//! Note [Meta kernels written in Python] in Fallback.cpp).
enum class AliasTarget { kMeta, kCpu, kCpuScratch };

class AliasConverter {
 public:
  explicit AliasConverter(AliasTarget target) : target_(target) {}

  //! The stand-in for `t`: same sizes, strides, storage offset, dtype, conj/neg bits; tensors
  //! sharing a storage get stand-ins sharing one. Undefined and non-openreg tensors are returned as-is.
  at::Tensor convert(const at::Tensor& t);

  //! The openreg storage behind a stand-in storage made by this converter, or nullptr.
  const c10::Storage* source_of(const c10::StorageImpl* standin) const;

 private:
  const c10::Storage& standin_storage(const c10::Storage& real);

  AliasTarget target_;
  // Few storages per op: a linear scan beats hashing.
  std::vector<std::pair<c10::Storage, c10::Storage>> storages_;  // (openreg, stand-in)
};

//! A CPU tensor over `t`'s device memory (no ownership; `t` must outlive it). For single tensors
//! outside a converter, e.g. host-side copies into a freshly allocated output.
at::Tensor cpu_alias_of(const at::Tensor& t);

}  // namespace at::openreg
