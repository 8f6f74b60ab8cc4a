#pragma once
// Random number generators for openreg: one default generator per device, plus any number made by
// torch.Generator(device="openreg:N").
//
// Note [Random ops take their seed at enqueue time]
// The state is Philox-like: (seed, offset). A random op calls next_seed_for_op() on the thread that
// *enqueues* it, then its work item runs the CPU kernel with a CPU generator seeded with that value.
// The offset advances once per op in program order, so results depend only on the order of ops, never
// on when or on which worker thread the kernels run.
//
// Thread-safety: as for every c10 generator, callers of the GeneratorImpl virtuals hold mutex_ (see
// Note [Acquire lock when using random generators]); next_seed_for_op() takes it itself.

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

#include <cstdint>

#include "backend/Export.h"

namespace c10::openreg {

struct OPENREG_BACKEND_API OpenRegGeneratorImpl final : public c10::GeneratorImpl {
  //! Bytes of the state tensor returned by get_state(): seed then offset, native-endian uint64s.
  static constexpr std::int64_t kStateBytes = 2 * sizeof(std::uint64_t);

  explicit OpenRegGeneratorImpl(c10::DeviceIndex device_index, std::uint64_t seed = c10::default_rng_seed_val);

  //! Locks mutex_, returns a 64-bit seed mixed from (seed, offset) and advances offset by one;
  //! `offset_taken` (if given) gets the offset the seed was mixed from.
  std::uint64_t next_seed_for_op(std::uint64_t* offset_taken = nullptr);
  //! Locks mutex_ and returns the seed an op issued at `offset` takes under the current seed (a graph
  //! replay's random ops, Note [Graphs on openreg] in registration/Graph.cpp).
  std::uint64_t seed_at(std::uint64_t offset);
  //! Locks mutex_, advances the offset by `n` and returns the offset before (a replay's share).
  std::uint64_t advance(std::uint64_t n);

  void set_current_seed(std::uint64_t seed) override;  //!< resets the offset to 0
  void set_offset(std::uint64_t offset) override;
  std::uint64_t get_offset() const override;
  std::uint64_t current_seed() const override;
  //! Seeds from a non-deterministic source and returns the new seed.
  std::uint64_t seed() override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;

  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

 private:
  OpenRegGeneratorImpl* clone_impl() const override;

  std::uint64_t seed_;
  std::uint64_t offset_ = 0;
};

//! The default generator of a device (-1: the current device); created on first use, lives forever.
OPENREG_BACKEND_API const at::Generator& default_generator(c10::DeviceIndex device_index = -1);
//! A fresh generator for a device (-1: the current device), seeded with the default seed.
OPENREG_BACKEND_API at::Generator new_generator(c10::DeviceIndex device_index = -1);

}  // namespace c10::openreg
