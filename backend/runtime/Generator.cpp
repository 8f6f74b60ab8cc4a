#include "backend/runtime/Generator.h"

#include "backend/runtime/Device.h"

#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/util/Exception.h>

#include <array>
#include <cstring>
#include <mutex>

namespace c10::openreg {

namespace {

// SplitMix64's finaliser: a bijection with good avalanche, so neighbouring (seed, offset) pairs give
// unrelated CPU seeds.
std::uint64_t mix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

c10::DeviceIndex resolve(c10::DeviceIndex index) {
  const c10::DeviceIndex resolved = index == -1 ? current_device() : index;
  check_device_index(resolved);
  return resolved;
}

}  // namespace

OpenRegGeneratorImpl::OpenRegGeneratorImpl(c10::DeviceIndex device_index, std::uint64_t seed)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device_index),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      seed_(seed) {}

std::uint64_t OpenRegGeneratorImpl::next_seed_for_op(std::uint64_t* offset_taken) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::uint64_t value = mix64(seed_ ^ mix64(offset_));
  if (offset_taken != nullptr) *offset_taken = offset_;
  offset_ += 1;
  return value;
}

std::uint64_t OpenRegGeneratorImpl::seed_at(std::uint64_t offset) {
  std::lock_guard<std::mutex> lock(mutex_);
  return mix64(seed_ ^ mix64(offset));
}

std::uint64_t OpenRegGeneratorImpl::advance(std::uint64_t n) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::uint64_t before = offset_;
  offset_ += n;
  return before;
}

void OpenRegGeneratorImpl::set_current_seed(std::uint64_t seed) {
  seed_ = seed;
  offset_ = 0;
}

void OpenRegGeneratorImpl::set_offset(std::uint64_t offset) {
  offset_ = offset;
}

std::uint64_t OpenRegGeneratorImpl::get_offset() const {
  return offset_;
}

std::uint64_t OpenRegGeneratorImpl::current_seed() const {
  return seed_;
}

std::uint64_t OpenRegGeneratorImpl::seed() {
  const std::uint64_t random = c10::detail::getNonDeterministicRandom();
  set_current_seed(random);
  return random;
}

void OpenRegGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  at::detail::check_rng_state(new_state);
  TORCH_CHECK_VALUE(new_state.numel() == kStateBytes, "RNG state is wrong size: expected ", kStateBytes,
                    " bytes, got ", new_state.numel());
  std::uint64_t words[2];
  std::memcpy(words, new_state.data(), sizeof(words));
  seed_ = words[0];
  offset_ = words[1];
}

c10::intrusive_ptr<c10::TensorImpl> OpenRegGeneratorImpl::get_state() const {
  at::Tensor state = at::detail::empty_cpu({kStateBytes}, c10::ScalarType::Byte, std::nullopt, std::nullopt,
                                           std::nullopt, std::nullopt);
  const std::uint64_t words[2] = {seed_, offset_};
  std::memcpy(state.data_ptr(), words, sizeof(words));
  return state.getIntrusivePtr();
}

OpenRegGeneratorImpl* OpenRegGeneratorImpl::clone_impl() const {
  auto* copy = new OpenRegGeneratorImpl(device().index(), seed_);
  copy->offset_ = offset_;
  return copy;
}

const at::Generator& default_generator(c10::DeviceIndex device_index) {
  const c10::DeviceIndex index = resolve(device_index);
  // Leaked, like every object device threads touch (Note [Teardown at exit] in sim/src/runtime.cpp):
  // generators are referenced from Python objects and work items that may outlive static destruction.
  struct DefaultGenerators {
    std::mutex mutex;  // guards creation of the entries
    std::array<at::Generator, kMaxDevices> generators;
  };
  static auto* defaults = new DefaultGenerators();
  std::lock_guard<std::mutex> lock(defaults->mutex);
  at::Generator& gen = defaults->generators[index];
  if (!gen.defined()) {
    gen = at::make_generator<OpenRegGeneratorImpl>(index);
  }
  return gen;
}

at::Generator new_generator(c10::DeviceIndex device_index) {
  return at::make_generator<OpenRegGeneratorImpl>(resolve(device_index));
}

}  // namespace c10::openreg
