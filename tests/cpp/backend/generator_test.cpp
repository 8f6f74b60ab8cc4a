// openreg generators: per-op seeds that depend only on (seed, offset), state round trips, clones,
// and one default generator per device.

#include "backend/runtime/Generator.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <vector>

namespace {

using c10::openreg::OpenRegGeneratorImpl;

const bool g_env = [] {
  setenv("OPENREG_DEVICE_COUNT", "2", 1);
  return true;
}();

std::vector<std::uint64_t> draw(OpenRegGeneratorImpl& gen, int n) {
  std::vector<std::uint64_t> out;
  for (int i = 0; i < n; ++i) out.push_back(gen.next_seed_for_op());
  return out;
}

TEST(GeneratorTest, SameSeedGivesTheSameOpSeeds) {
  OpenRegGeneratorImpl a(0, 42);
  OpenRegGeneratorImpl b(1, 42);
  EXPECT_EQ(draw(a, 5), draw(b, 5));
  EXPECT_EQ(a.get_offset(), 5u);
}

TEST(GeneratorTest, OpSeedsDifferAcrossOffsetsAndSeeds) {
  OpenRegGeneratorImpl a(0, 42);
  const auto seeds = draw(a, 100);
  EXPECT_EQ(std::set<std::uint64_t>(seeds.begin(), seeds.end()).size(), seeds.size());
  OpenRegGeneratorImpl b(0, 43);
  EXPECT_NE(draw(b, 1)[0], seeds[0]);
}

TEST(GeneratorTest, SetCurrentSeedRestartsTheSequence) {
  OpenRegGeneratorImpl a(0, 7);
  const auto first = draw(a, 3);
  a.set_current_seed(7);
  EXPECT_EQ(a.get_offset(), 0u);
  EXPECT_EQ(draw(a, 3), first);
}

TEST(GeneratorTest, StateRoundTripsAndIsChecked) {
  OpenRegGeneratorImpl a(0, 99);
  draw(a, 4);
  auto state = a.get_state();
  EXPECT_EQ(state->numel(), OpenRegGeneratorImpl::kStateBytes);
  const auto next = a.next_seed_for_op();
  OpenRegGeneratorImpl b(0, 1);
  b.set_state(*state);
  EXPECT_EQ(b.current_seed(), 99u);
  EXPECT_EQ(b.get_offset(), 4u);
  EXPECT_EQ(b.next_seed_for_op(), next);

  at::Tensor wrong = at::zeros({3}, at::kByte);
  EXPECT_THROW(b.set_state(*wrong.unsafeGetTensorImpl()), c10::ValueError);
  at::Tensor wrong_type = at::zeros({2}, at::kLong);
  EXPECT_THROW(b.set_state(*wrong_type.unsafeGetTensorImpl()), c10::TypeError);
}

TEST(GeneratorTest, CloneIsIndependent) {
  auto a = at::make_generator<OpenRegGeneratorImpl>(1, 5);
  a.get<OpenRegGeneratorImpl>()->next_seed_for_op();
  auto b = a.clone();
  EXPECT_EQ(b.device(), a.device());
  const auto from_b = b.get<OpenRegGeneratorImpl>()->next_seed_for_op();
  EXPECT_EQ(a.get<OpenRegGeneratorImpl>()->next_seed_for_op(), from_b);
}

TEST(GeneratorTest, OneDefaultGeneratorPerDevice) {
  const at::Generator& g0 = c10::openreg::default_generator(0);
  const at::Generator& g1 = c10::openreg::default_generator(1);
  EXPECT_EQ(&g0, &c10::openreg::default_generator(0));
  EXPECT_NE(g0.unsafeGetGeneratorImpl(), g1.unsafeGetGeneratorImpl());
  EXPECT_EQ(g1.device(), c10::Device(c10::DeviceType::PrivateUse1, 1));
  EXPECT_EQ(g0.current_seed(), c10::default_rng_seed_val);
  EXPECT_EQ(c10::openreg::new_generator(1).device().index(), 1);
  EXPECT_THROW(c10::openreg::default_generator(2), c10::AcceleratorError);
}

}  // namespace
