// Fused scaled dot product attention on openreg.
//
// Note [Fused attention on openreg]
// For a PrivateUse1 tensor, ATen's scaled_dot_product_attention asks the device's _fused_sdp_choice
// stub which kernel to run; a device that registers none gets the math path: about fifteen separate ops
// (two bmm, softmax, masks, views) and, in backward, as many again, where CPU runs one flash kernel
// each way. CUDA runs a fused kernel too, so the math path made openreg slower than the CPU and gave
// Inductor a decomposed graph to compile where CPU and CUDA keep one extern kernel.
//
// openreg's device memory is host memory, so the fused kernel it runs is CPU's flash attention kernel
// (on the device's threads, in stream order, as every op): the choice answers "overrideable" exactly
// where CPU's own choice answers "flash" (same dtypes, shapes, strides, no dropout, the same
// torch.backends.cuda / sdpa_kernel switches), and math elsewhere, with three more conditions that come
// from the overrideable op's contract rather than from the kernel:
//   - float32, bfloat16 and float16 only: the overrideable op returns a float32 logsumexp, and CPU's
//     kernel keeps float64's in float64;
//   - 4-d inputs only (CPU's check already requires them);
//   - an attn_mask that needs no gradient: CPU's flash backward computes none for it, while the math
//     path (and CUDA's efficient attention) does.
// Dropout never takes the fused path (CPU's check refuses it), so the kernel draws no random numbers
// and the device's generator stays the one that dropout uses.
//
// The overrideable op promises the layouts of its meta function (what Inductor and FakeTensor assume):
// the output laid out like the query, a contiguous (B, H, L) logsumexp, and gradients laid out like
// their inputs. CPU's kernel writes (B, L, H, D)-ordered tensors; where that differs from the promise
// (a query that is not a transposed (B, L, H, D) tensor) the result is copied once into the promised
// layout. Attention from a (B, L, H*D) projection, the usual case, needs no copy.

#include <ATen/Context.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <optional>
#include <tuple>

namespace at::openreg {
namespace {

using sdp::SDPBackend;

// The dtypes the fused path takes (Note [Fused attention on openreg]: not float64).
constexpr auto kFusedDtypes = std::to_array<at::ScalarType>({at::kFloat, at::kBFloat16, at::kHalf});

bool fused_dtype(const at::Tensor& t) {
  return std::find(kFusedDtypes.begin(), kFusedDtypes.end(), t.scalar_type()) != kFusedDtypes.end();
}

// Whether CPU's flash kernel runs these inputs as the overrideable op promises: CPU's own conditions
// for its flash kernel (the checks of sdp_utils_cpp.h it applies), then the op's (Note [Fused attention
// on openreg]).
bool fused_kernel_runs(const sdp::sdp_params& params) {
  const bool same_head_dim = params.query.sym_size(-1) == params.key.sym_size(-1) &&
                             params.query.sym_size(-1) == params.value.sym_size(-1);
  const bool mask_needs_grad = params.attn_mask.has_value() && params.attn_mask->defined() &&
                               params.attn_mask->requires_grad();
  constexpr bool debug = false;
  return sdp::check_nested_tensor(params, debug) && sdp::check_for_dropout(params, debug) &&
         sdp::check_tensor_shapes(params, debug) &&
         sdp::check_batch_size_and_num_heads_dense</*supports_gqa=*/true>(params, debug) &&
         sdp::check_attn_mask_shape(params, debug) && same_head_dim &&
         sdp::check_nonzero_sequence_lengths_dense(params, debug) &&
         sdp::check_last_dim_stride_equals_1_dense</*ignore_singleton_dim=*/false>(params, debug) &&
         sdp::check_tensor_dtype(params, kFusedDtypes, debug) && !mask_needs_grad;
}

// The _fused_sdp_choice stub for openreg. The fused kernel is enabled under either of its names:
// FLASH_ATTENTION (what it is, and what sdpa_kernel users of CPU and CUDA code name) and OVERRIDEABLE
// (the backend ATen runs). Where neither it nor math may run, the answer is "error", and ATen raises
// its "no viable backend" error, as on CPU.
int64_t fused_sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                         const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                         std::optional<double> /*scale*/, bool enable_gqa) {
  const auto& ctx = at::globalContext();
  const sdp::sdp_params params{query, key, value, attn_mask, dropout_p, is_causal, enable_gqa};
  if ((ctx.userEnabledFlashSDP() || ctx.userEnabledOverrideableSDP()) && fused_kernel_runs(params)) {
    return static_cast<int64_t>(SDPBackend::overrideable);
  }
  return static_cast<int64_t>(ctx.userEnabledMathSDP() ? SDPBackend::math : SDPBackend::error);
}

// `result` in the layout of `like` (same sizes), the layout empty_like(like) has: itself where the
// strides already agree, else a copy. A dense `like` keeps its own strides under empty_like, so the
// usual case is decided without allocating.
at::Tensor in_layout_of(const at::Tensor& result, const at::Tensor& like) {
  if (like.is_non_overlapping_and_dense() && result.strides() == like.strides()) return result;
  at::Tensor promised = at::empty_like(like);
  if (promised.strides() == result.strides()) return result;
  return promised.copy_(result);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor, at::Tensor,
           at::Tensor>
fused_attention(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                const std::optional<at::Tensor>& attn_bias, double dropout_p, bool is_causal, bool return_debug_mask,
                std::optional<double> scale) {
  TORCH_CHECK(dropout_p == 0.0, "openreg's fused attention runs without dropout (the math path has it)");
  TORCH_CHECK(!return_debug_mask, "openreg's fused attention has no debug attention mask");
  TORCH_CHECK(query.dim() == 4 && fused_dtype(query),
              "openreg's fused attention takes float32, bfloat16 or float16 4-d inputs, got ", query.scalar_type(),
              " with ", query.dim(), " dimensions");
  auto [output, logsumexp] =
      at::_scaled_dot_product_flash_attention_for_cpu(query, key, value, 0.0, is_causal, attn_bias, scale);
  // No random numbers were drawn: the philox seed and offset are placeholders (allocated, never
  // written or read, so no work is queued for them).
  const auto rng_options = query.options().dtype(at::kLong);
  // The sequence lengths are the inputs' (the overrideable op's max_q / max_k); no cumulative lengths,
  // since the inputs are dense.
  return {in_layout_of(output, query), logsumexp.contiguous(), at::Tensor(), at::Tensor(), query.sym_size(2),
          key.sym_size(2), at::empty({}, rng_options), at::empty({}, rng_options), at::Tensor()};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_attention_backward(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& attn_bias, std::array<bool, 4> grad_input_mask, const at::Tensor& out,
    const at::Tensor& logsumexp, const at::Tensor& /*cum_seq_q*/, const at::Tensor& /*cum_seq_k*/,
    int64_t /*max_q*/, int64_t /*max_k*/, double dropout_p, bool is_causal, const at::Tensor& /*philox_seed*/,
    const at::Tensor& /*philox_offset*/, std::optional<double> scale) {
  TORCH_CHECK(dropout_p == 0.0, "openreg's fused attention runs without dropout (the math path has it)");
  TORCH_CHECK(!grad_input_mask[3], "openreg's fused attention computes no gradient for attn_bias (the math path does)");
  std::optional<at::Tensor> mask;
  if (attn_bias.defined()) mask = attn_bias;
  auto [grad_q, grad_k, grad_v] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
      grad_out, query, key, value, out, logsumexp, 0.0, is_causal, mask, scale);
  // The meta function promises a bias gradient shaped like the bias; none is needed (checked above).
  at::Tensor grad_bias = attn_bias.defined() ? at::empty_like(attn_bias) : at::Tensor();
  return {in_layout_of(grad_q, query), in_layout_of(grad_k, key), in_layout_of(grad_v, value), grad_bias};
}

}  // namespace

}  // namespace at::openreg

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &at::openreg::fused_sdp_choice)
}  // namespace at::native

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_scaled_dot_product_fused_attention_overrideable", &at::openreg::fused_attention);
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward", &at::openreg::fused_attention_backward);
}
