#pragma once
// ShapePassCache: remembers what the meta pass of an op computed for a given argument signature.
//
// The meta pass only reads metadata (sizes, strides, offsets, dtypes, which arguments share memory) and
// non-tensor arguments, so its outcome is a pure function of them. Many meta kernels are Python
// (torch._meta_registrations / refs) and cost 20-500 us per call, while training loops repeat the same
// ops on the same shapes: a hit replaces the pass by a signature hash and a lookup.
//
// Thread-safety: the cache is per host thread (no locks); entries are immutable once stored.

#include "backend/engine/OpPlan.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
#include <vector>

namespace at::openreg {

//! The metadata of one output as the meta pass produced it.
struct TensorGeometry {
  bool defined = false;
  c10::SmallVector<int64_t, 6> sizes;
  c10::SmallVector<int64_t, 6> strides;
  int64_t storage_offset = 0;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  bool conj = false;
  bool neg = false;

  static TensorGeometry of(const at::Tensor& t);
};

//! Outputs of one meta pass: per return, one geometry (Tensor) or several (Tensor[]).
struct MetaOutcome {
  std::vector<std::vector<TensorGeometry>> returns;
};

//! A signature of an op's arguments, as the meta pass sees them.
class MetaSignature {
 public:
  //! Builds the signature of `args`; false when they cannot be cached (a CPU tensor with more than
  //! one element, whose data a meta kernel may read, or an argument type without a stable encoding).
  bool build(const OpPlan& plan, c10::ArrayRef<c10::IValue> args);

  std::uint64_t hash() const noexcept { return hash_; }
  const std::vector<int64_t>& words() const noexcept { return words_; }

 private:
  bool add_value(const c10::IValue& v);
  // A list value: its tag, its length, then each element as a word.
  template <typename List, typename ToWord>
  void add_list(int64_t tag, const List& list, ToWord to_word) {
    words_.push_back(tag);
    words_.push_back(static_cast<int64_t>(list.size()));
    for (const auto x : list) words_.push_back(to_word(x));
  }
  bool add_tensor(const at::Tensor& t);

  std::vector<int64_t> words_;
  std::vector<const void*> storages_;  // distinct storages, in order of first use
  std::uint64_t hash_ = 0;
};

//! The outcome cached for `sig` on this thread, or nullptr.
const MetaOutcome* find_meta_outcome(const MetaSignature& sig);
//! Caches `outcome` for `sig` on this thread.
void store_meta_outcome(const MetaSignature& sig, MetaOutcome outcome);

}  // namespace at::openreg
