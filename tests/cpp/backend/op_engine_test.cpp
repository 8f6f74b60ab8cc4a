// The op engine seen from ATen: fast kernels (Note [Fast kernels for hot small ops]) and the policy
// table's special cases (Note [Op policy: every per-op special case in one table]) give exactly CPU's
// results, and a failed kernel is reported at the next synchronization with its message alone. The
// walk of an argument's tensors (Note [Walking an argument's tensors]) visits what each kind holds, and
// the calls whose arguments take its less common branches give CPU's results.

#include "backend/runtime/Device.h"
#include "backend/runtime/Stream.h"
#include "backend/engine/Arguments.h"

#include <openreg/sim/stream.h>

#include <ATen/ATen.h>
#include <ATen/ScalarOps.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace {

const bool g_env = [] {
  setenv("OPENREG_DEVICE_COUNT", "2", 1);
  return true;
}();

at::TensorOptions on(int device) {
  return at::TensorOptions().device(c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device)));
}

at::Tensor dev(const at::Tensor& t, int device = 0) { return t.to(on(device)); }

void expect_same(const at::Tensor& openreg, const at::Tensor& cpu) {
  ASSERT_EQ(openreg.device().type(), c10::DeviceType::PrivateUse1);
  const at::Tensor back = openreg.cpu();
  EXPECT_EQ(back.sizes(), cpu.sizes());
  EXPECT_EQ(back.scalar_type(), cpu.scalar_type());
  EXPECT_TRUE(at::equal(back, cpu));  // bitwise: the same CPU kernel ran
}

TEST(OpEngineTest, FastElementwiseKernelsMatchCpu) {
  at::manual_seed(0);
  for (auto dtype : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16}) {
    const at::Tensor a = at::randn({7, 33}).to(dtype);
    const at::Tensor b = at::randn({7, 33}).to(dtype);
    expect_same(at::add(dev(a), dev(b), 0.5), at::add(a, b, 0.5));
    expect_same(at::sub(dev(a), dev(b), 3), at::sub(a, b, 3));
    expect_same(at::mul(dev(a), dev(b)), at::mul(a, b));
    expect_same(at::div(dev(a), dev(b)), at::div(a, b));
    expect_same(at::relu(dev(a)), at::relu(a));
    at::Tensor x = dev(a);
    x.add_(dev(b), 2).mul_(x).div_(dev(b)).sub_(x, 0.25);
    at::Tensor y = a.clone();
    y.add_(b, 2).mul_(y).div_(b).sub_(y, 0.25);
    expect_same(x, y);
  }
}

TEST(OpEngineTest, FastKernelsKeepPythonNumbersAndAlphasExact) {
  const at::Tensor a = at::randn({64}, at::kDouble);
  // A Python number arrives as a wrapped 0-dim tensor; integers beyond 2^53 have no exact double and
  // must keep their own conversion.
  for (int64_t number : {int64_t{3}, (int64_t{1} << 53) + 1, std::numeric_limits<int64_t>::max()}) {
    const at::Tensor wrapped = at::native::wrapped_scalar_tensor(c10::Scalar(number));
    expect_same(at::mul(dev(a), wrapped), at::mul(a, wrapped));
    expect_same(at::add(dev(a), dev(a), number), at::add(a, a, number));
  }
  expect_same(at::div(dev(a), at::native::wrapped_scalar_tensor(c10::Scalar(0.1))),
              at::div(a, at::native::wrapped_scalar_tensor(c10::Scalar(0.1))));
}

TEST(OpEngineTest, FastMatmulKernelsMatchCpu) {
  const at::Tensor x = at::randn({5, 8});
  const at::Tensor w = at::randn({3, 8});  // a linear layer's weight, used transposed
  const at::Tensor bias = at::randn({3});
  const at::Tensor full = at::randn({5, 3});
  expect_same(at::mm(dev(x), dev(w).t().contiguous()), at::mm(x, w.t().contiguous()));
  expect_same(at::addmm(dev(bias), dev(x), dev(w).t()), at::addmm(bias, x, w.t()));
  expect_same(at::addmm(dev(full), dev(x), dev(w).t(), 0.5, 2), at::addmm(full, x, w.t(), 0.5, 2));
  // 0.1 has no exact float: the general path takes it, with CPU's result.
  expect_same(at::addmm(dev(bias), dev(x), dev(w).t(), 0.1, 0.3), at::addmm(bias, x, w.t(), 0.1, 0.3));
}

TEST(OpEngineTest, PolicyTableCasesMatchCpu) {
  // kDataDependent: nonzero's shape depends on the data.
  const at::Tensor mask = at::tensor({0.0f, 1.0f, 0.0f, 2.0f});
  expect_same(at::nonzero(dev(mask)), at::nonzero(mask));
  // kShapePassDisagreesUnlessArg: batch norm outside training returns CPU's (empty) saved statistics.
  const at::Tensor input = at::randn({4, 3, 5});
  const at::Tensor mean = at::zeros({3});
  const at::Tensor var = at::ones({3});
  for (bool training : {false, true}) {
    auto cpu = at::native_batch_norm(input, {}, {}, mean.clone(), var.clone(), training, 0.1, 1e-5);
    auto ore = at::native_batch_norm(dev(input), {}, {}, dev(mean), dev(var), training, 0.1, 1e-5);
    expect_same(std::get<0>(ore), std::get<0>(cpu));
    EXPECT_EQ(std::get<1>(ore).sizes(), std::get<1>(cpu).sizes());
    EXPECT_EQ(std::get<2>(ore).sizes(), std::get<2>(cpu).sizes());
  }
  // kShapePassDisagrees: _embedding_bag's auxiliary outputs come from CPU's kernel.
  const at::Tensor weight = at::randn({10, 4});
  const at::Tensor indices = at::tensor({1, 2, 4, 5, 4, 3}, at::kLong);
  const at::Tensor offsets = at::tensor({0, 3}, at::kLong);
  auto cpu = at::_embedding_bag(weight, indices, offsets);
  auto ore = at::_embedding_bag(dev(weight), dev(indices), dev(offsets));
  expect_same(std::get<0>(ore), std::get<0>(cpu));
  EXPECT_EQ(std::get<1>(ore).sizes(), std::get<1>(cpu).sizes());
  EXPECT_EQ(std::get<2>(ore).sizes(), std::get<2>(cpu).sizes());
  EXPECT_EQ(std::get<3>(ore).sizes(), std::get<3>(cpu).sizes());
}

//! (tensor's first value, position) of each tensor the walk visits.
std::vector<std::pair<float, std::uint32_t>> walked(const c10::IValue& v, at::openreg::ArgKind kind) {
  std::vector<std::pair<float, std::uint32_t>> seen;
  at::openreg::for_each_tensor(v, kind, [&](const at::Tensor& t, at::openreg::TensorPosition p) {
    seen.emplace_back(t.defined() ? t.item<float>() : -1.0f, p.element);
  });
  return seen;
}

TEST(OpEngineTest, ArgumentWalkVisitsTheTensorsEachKindHolds) {
  using at::openreg::ArgKind;
  using at::openreg::TensorPosition;
  using Seen = std::vector<std::pair<float, std::uint32_t>>;
  const at::Tensor one = at::ones({1});
  const at::Tensor two = at::full({1}, 2.0f);
  const c10::IValue tensor(one);
  EXPECT_EQ(walked(tensor, ArgKind::kTensor), (Seen{{1.0f, TensorPosition::kWhole}}));
  EXPECT_EQ(walked(c10::IValue(), ArgKind::kTensor), Seen{});  // an absent Tensor?
  EXPECT_EQ(walked(c10::IValue(at::Tensor()), ArgKind::kTensor), (Seen{{-1.0f, TensorPosition::kWhole}}));
  const c10::IValue list(c10::List<at::Tensor>({one, two}));
  EXPECT_EQ(walked(list, ArgKind::kTensorList), (Seen{{1.0f, 0}, {2.0f, 1}}));
  const c10::IValue indices(c10::List<std::optional<at::Tensor>>({std::nullopt, two, std::nullopt, one}));
  EXPECT_EQ(walked(indices, ArgKind::kOptionalTensorList), (Seen{{2.0f, 1}, {1.0f, 3}}));
  // The kind decides: a value of another kind holds no tensor for the engine.
  EXPECT_EQ(walked(tensor, ArgKind::kOther), Seen{});
  EXPECT_EQ(walked(list, ArgKind::kTensor), Seen{});
  EXPECT_EQ(walked(c10::IValue(), ArgKind::kTensorList), Seen{});  // an absent Tensor[]?
  // A position names the same tensor in a value of the argument's shape.
  const c10::IValue doubled(c10::List<std::optional<at::Tensor>>({std::nullopt, two * 2, std::nullopt, one * 2}));
  at::openreg::for_each_tensor(indices, ArgKind::kOptionalTensorList, [&](const at::Tensor& t, TensorPosition p) {
    EXPECT_TRUE(at::equal(p.tensor_in(doubled), t * 2));
  });
  EXPECT_TRUE(TensorPosition{}.tensor_in(tensor).is_same(one));
}

TEST(OpEngineTest, ArgumentsOnEveryWalkBranchMatchCpu) {
  const at::Tensor c = at::randn({5, 5});
  const at::Tensor d = dev(c);
  const at::Tensor rows = at::tensor({4, 0, 2}, at::kLong);
  const at::Tensor cols = at::tensor({1, 1, 3}, at::kLong);
  // Index lists: all openreg (recipes), all CPU (captured on the host, the CPU indices copied), and
  // mixed (every argument converted on the host).
  expect_same(at::index(d, {dev(rows), dev(cols)}), at::index(c, {rows, cols}));
  expect_same(at::index(d, {rows, cols}), at::index(c, {rows, cols}));
  expect_same(at::index(d, {rows, dev(cols)}), at::index(c, {rows, cols}));
  expect_same(at::index(d, {std::nullopt, dev(cols)}), at::index(c, {std::nullopt, cols}));
  at::Tensor put_cpu = c.clone();
  at::Tensor put_dev = d.clone();
  put_cpu.index_put_({rows, cols}, at::ones({3}), /*accumulate=*/true);
  put_dev.index_put_({dev(rows), cols}, dev(at::ones({3})), /*accumulate=*/true);
  expect_same(put_dev, put_cpu);
  // A CPU index the caller changes after the call: the queued item holds its own copy.
  at::Tensor late = rows.clone();
  const at::Tensor picked = at::index(d, {late});
  late.fill_(1);
  expect_same(picked, at::index(c, {rows}));
  // out= of the wrong size: resized to the kernel's shape (its geometry adopted from the shape pass).
  at::Tensor out = dev(at::empty({2}));
  at::sigmoid_out(out, d);
  expect_same(out, at::sigmoid(c));
  // A write that partially overlaps its input: CPU's kernel decides (the sync path), here as on CPU.
  const at::Tensor flat = at::randn({8});
  bool cpu_raised = false;
  bool dev_raised = false;
  at::Tensor flat_cpu = flat.clone();
  at::Tensor flat_dev = dev(flat);
  try {
    at::Tensor written = flat_cpu.narrow(0, 1, 7);
    at::sigmoid_out(written, flat_cpu.narrow(0, 0, 7));
  } catch (const c10::Error&) {
    cpu_raised = true;
  }
  try {
    at::Tensor written = flat_dev.narrow(0, 1, 7);
    at::sigmoid_out(written, flat_dev.narrow(0, 0, 7));
  } catch (const c10::Error&) {
    dev_raised = true;
  }
  EXPECT_EQ(dev_raised, cpu_raised);
  expect_same(flat_dev, flat_cpu);
}

TEST(OpEngineTest, FastKernelsRunOnTheCurrentStreamOfTheirDevice) {
  const at::Tensor a = at::randn({256});
  const at::Tensor on1 = dev(a, 1);
  const c10::Stream side = c10::openreg::stream_from_pool(1, 0);
  const c10::Stream previous = c10::openreg::exchange_stream(side);
  const auto before = c10::openreg::sim_stream(side).enqueued_count();
  const at::Tensor r = at::relu(on1);
  EXPECT_EQ(c10::openreg::sim_stream(side).enqueued_count(), before + 1);
  c10::openreg::exchange_stream(previous);
  c10::openreg::sim_stream(side).synchronize();  // the default stream is not ordered after `side`
  EXPECT_EQ(r.device(), on1.device());
  expect_same(r, at::relu(a));
}

TEST(OpEngineTest, FailedEngineKernelReportsItsMessageWithoutBacktrace) {
  // index_select checks its indices on the device (data-dependent): the error comes at the sync.
  const at::Tensor src = dev(at::randn({4, 3}));
  const at::Tensor bad = dev(at::tensor({0, 9}, at::kLong));
  try {
    at::Tensor r = at::index_select(src, 0, bad);
    c10::openreg::synchronize_device(0);
    ADD_FAILURE() << "out-of-range index not reported";
  } catch (const c10::Error& e) {
    const std::string msg = e.what_without_backtrace();
    EXPECT_NE(msg.find("index"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("Exception raised from"), std::string::npos) << msg;
  }
  expect_same(at::relu(src), at::relu(src.cpu()));  // the device keeps working
}

}  // namespace
