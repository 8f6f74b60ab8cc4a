// scaled_dot_product_attention on openreg: CUDA's choice of kernel, and CUDA's named ops.
//
// Note [Fused attention on openreg]
// On CUDA, scaled_dot_product_attention picks its kernel by CUDA's rules (select_sdp_backend, in the
// priority order torch.backends.cuda sets): FlashAttention-2 for float16/bfloat16 without a mask, head
// dimension at most 256; memory-efficient attention for float32 and for masks; math otherwise. What it
// picks is visible to programs: the op named in profiler traces and compiled graphs
// (aten::_scaled_dot_product_flash_attention), the ops a selective activation-checkpointing policy
// saves (torchtitan lists the flash and efficient ones), and the ops that context parallelism
// intercepts (torch.distributed.tensor.experimental.context_parallel handles only the flash, efficient
// and cuDNN ops). So openreg picks as CUDA does and calls the same ops, which it implements with CPU's
// flash kernel on the device's threads (Note [CUDA's attention kernels on openreg]).
//
// ATen's own scaled_dot_product_attention (CompositeImplicitAutograd) runs the flash choice as the
// CUDA op only on CUDA; on any other device it calls the CPU flash op. openreg therefore registers its
// own scaled_dot_product_attention for AutogradPrivateUse1 (where the composite would otherwise run):
// where the choice below is flash it calls CUDA's flash op (which records its own autograd node);
// everything else is ATen's composite itself, which checks the inputs, converts a boolean mask, asks the
// dispatch stub for the choice and runs the efficient or math op. The dispatch stub and the
// aten::_fused_sdp_choice op answer the same choice.
//
// The choice is CUDA's on an A100 or H100 (sm80/sm90) with the default priority order, within what
// openreg's kernels run:
//   - cuDNN attention is never chosen (openreg has no cuDNN kernel; CUDA puts it first only on Hopper
//     and Blackwell with cuDNN newer than 9.15, where it computes the same values);
//   - dropout takes the math path, where CUDA's fused kernels draw Philox numbers openreg cannot
//     reproduce (the math path's dropout uses the device's generator);
//   - efficient attention needs equal query and key/value heads and a mask that needs no gradient
//     (CUDA's computes one), else math;
//   - CUDA pads a flash head dimension that is not a multiple of 8 and slices the output; openreg's
//     kernel needs no padding, so its traces show the unpadded shapes.
// With every allowed kernel ruled out, the answer is "error" and the call raises CUDA's "No viable
// backend" error.

#include <ATen/Context.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>
#include <ATen/ops/_scaled_dot_product_flash_attention.h>
#include <ATen/ops/scaled_dot_product_attention_native.h>
#include <torch/library.h>

#include <array>
#include <optional>

namespace at::openreg {
namespace {

using sdp::SDPBackend;

constexpr auto kFlashDtypes = std::to_array<at::ScalarType>({at::kHalf, at::kBFloat16});
constexpr auto kEfficientDtypes = std::to_array<at::ScalarType>({at::kHalf, at::kFloat, at::kBFloat16});
constexpr int64_t kFlashMaxHeadDim = 256;

bool has_mask(const sdp::sdp_params& params) {
  return params.attn_mask.has_value() && params.attn_mask->defined();
}

// Conditions of openreg's kernels that CUDA's do not have (Note [Fused attention on openreg]).
bool openreg_kernels_run(const sdp::sdp_params& params) {
  return params.dropout == 0.0 && !params.query.is_nested() && !params.key.is_nested() && !params.value.is_nested();
}

// CUDA's can_use_flash_attention on sm80/sm90, dense inputs.
bool flash_runs(const sdp::sdp_params& params) {
  constexpr bool debug = false;
  const auto head_dim = params.query.sym_size(-1);
  const bool head_dims_ok = head_dim == params.key.sym_size(-1) && head_dim == params.value.sym_size(-1) &&
                            head_dim <= kFlashMaxHeadDim;
  const bool causal_square = !params.is_causal || params.query.sym_size(-2) == params.key.sym_size(-2);
  return at::globalContext().userEnabledFlashSDP() && openreg_kernels_run(params) &&
         sdp::check_tensor_shapes(params, debug) && !has_mask(params) && head_dims_ok && causal_square &&
         sdp::check_tensor_dtype(params, kFlashDtypes, debug) &&
         sdp::check_batch_size_and_num_heads_dense</*supports_gqa=*/true>(params, debug) &&
         sdp::check_nonzero_sequence_lengths_dense(params, debug) &&
         sdp::check_last_dim_stride_equals_1_dense</*ignore_singleton_dim=*/true>(params, debug);
}

// CUDA's can_use_mem_efficient_attention on sm80/sm90 (head dimensions aligned to the tensor cores' 16
// bytes, storage offsets to as many bytes), dense inputs, with openreg's kernel's conditions: equal
// heads (no grouped-query support in the heads check) and no gradient for the mask.
bool efficient_runs(const sdp::sdp_params& params) {
  constexpr bool debug = false;
  const int64_t alignment = params.query.element_size() == 2 ? 8 : 4;
  const auto& q = params.query;
  const auto& k = params.key;
  const auto& v = params.value;
  const bool head_dims_ok = q.sym_size(-1) == k.sym_size(-1) && q.sym_size(-1) == v.sym_size(-1) &&
                            q.sym_size(-1) % alignment == 0 && q.sym_size(-1) > 0;
  const auto aligned = [&](const at::Tensor& t) {
    return t.sym_numel() == 0 || (t.sym_storage_offset() % alignment) == 0;
  };
  const bool mask_needs_grad = has_mask(params) && params.attn_mask->requires_grad();
  return at::globalContext().userEnabledMemEfficientSDP() && openreg_kernels_run(params) &&
         sdp::check_tensor_shapes(params, debug) && head_dims_ok && aligned(q) && aligned(k) && aligned(v) &&
         !mask_needs_grad &&
         sdp::check_tensor_dtype(params, kEfficientDtypes, debug) &&
         sdp::check_batch_size_and_num_heads_dense</*supports_gqa=*/false>(params, debug) &&
         sdp::check_nonzero_sequence_lengths_dense(params, debug) &&
         sdp::check_last_dim_stride_equals_1_dense</*ignore_singleton_dim=*/false>(params, debug);
}

// CUDA's select_sdp_backend over the kernels openreg runs (Note [Fused attention on openreg]).
SDPBackend choose(const sdp::sdp_params& params) {
  auto& ctx = at::globalContext();
  if (!ctx.userEnabledMathSDP() && !ctx.userEnabledFlashSDP() && !ctx.userEnabledMemEfficientSDP() &&
      !ctx.userEnabledCuDNNSDP()) {
    return SDPBackend::error;
  }
  for (const auto backend : ctx.sDPPriorityOrder()) {
    switch (backend) {
      case SDPBackend::flash_attention:
        if (flash_runs(params)) return SDPBackend::flash_attention;
        break;
      case SDPBackend::efficient_attention:
        if (efficient_runs(params)) return SDPBackend::efficient_attention;
        break;
      case SDPBackend::math:
        if (ctx.userEnabledMathSDP()) return SDPBackend::math;
        break;
      default:  // cuDNN: no kernel on openreg; overrideable: CUDA never chooses it
        break;
    }
  }
  return SDPBackend::error;
}

int64_t fused_sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                         const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                         std::optional<double> /*scale*/, bool enable_gqa) {
  const sdp::sdp_params params{query, key, value, attn_mask, dropout_p, is_causal, enable_gqa};
  return static_cast<int64_t>(choose(params));
}

// openreg's scaled_dot_product_attention (AutogradPrivateUse1): CUDA's flash op where the choice is
// flash, else ATen's composite (Note [Fused attention on openreg]). The flash choice implies what the
// composite's input checks would check (four dimensions, one fp16/bf16 dtype, no mask, no dropout)
// except the devices, so inputs on different devices go to the composite, which refuses them.
at::Tensor scaled_dot_product_attention(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                                        const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                                        std::optional<double> scale, bool enable_gqa) {
  const sdp::sdp_params params{query, key, value, attn_mask, dropout_p, is_causal, enable_gqa};
  const bool one_device = query.device() == key.device() && query.device() == value.device();
  if (one_device && choose(params) == SDPBackend::flash_attention) {
    return std::get<0>(at::_scaled_dot_product_flash_attention(query, key, value, dropout_p, is_causal,
                                                               /*return_debug_mask=*/false, scale));
  }
  return at::native::scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal, scale,
                                                  enable_gqa);
}

}  // namespace
}  // namespace at::openreg

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &at::openreg::fused_sdp_choice)
}  // namespace at::native

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_sdp_choice", &at::openreg::fused_sdp_choice);
}

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("scaled_dot_product_attention", &at::openreg::scaled_dot_product_attention);
}
