// CUDA's named attention kernels on openreg: the ops programs call directly, not through
// scaled_dot_product_attention's choice (Note [Fused attention on openreg] in Attention.cpp).
//
// Note [CUDA's attention kernels on openreg]
// CUDA registers kernels for _flash_attention_forward/_backward (FlashAttention-2, dense and varlen),
// _efficient_attention_forward/_backward (memory-efficient attention) and the SDPA entry points over
// them (_scaled_dot_product_flash_attention, _scaled_dot_product_efficient_attention and their
// backwards). Libraries call them by name: torch.nn.attention.varlen calls _flash_attention_forward
// for packed documents, which is what torchtitan's varlen attention runs. A PrivateUse1 device gets
// none of them from ATen, so on openreg they would raise "Could not run ...".
//
// openreg computes them with CPU's flash attention kernel (_scaled_dot_product_flash_attention_for_cpu
// and its backward), called on the openreg tensors: like every op, it is enqueued on the current stream
// and runs on the device's threads, so these ops return at once. What each returns is what CUDA's
// kernel returns, as torch's meta functions (torch/_meta_registrations.py) declare it and as FakeTensor
// and Inductor assume: the output laid out like the query ((batch, seq, heads, dim) for the flash and
// efficient ops, whose inputs are in that order), a float32 logsumexp ((batch, heads, seq) for dense
// flash, (heads, total) for varlen flash, and (batch, heads, seq rounded up to 32) for efficient
// attention, the padding zero), and the random-number state CUDA's dropout would have used: flash's
// rng_state (2 uint64) and an unused uint64 scalar, efficient attention's int64 philox seed and offset
// scalars. No random numbers are drawn (dropout is not supported, below), so these are zero.
//
// Inputs CUDA refuses are refused with CUDA's message (flash: fp16/bf16 only, head dimension at most
// 256, key/value heads dividing the query's; efficient: 4-d, equal heads). What CUDA runs and openreg
// does not is a NotImplementedError naming it: dropout (CUDA's Philox stream cannot be reproduced, and
// CPU's kernel has none), sliding windows, ALiBi, paged KV, a key/value head dimension different from
// the query's, the bottom-right causal mask with different query and key lengths, and a gradient for
// efficient attention's bias. The causal mask is top-left aligned, as scaled_dot_product_attention's
// is_causal documents; with equal query and key lengths both alignments are the same mask.
//
// Varlen (cumulative sequence lengths): each sequence is attended on its own, which needs the offsets
// on the host: the op reads cum_seq_q/cum_seq_k from the device (a synchronization that CUDA's kernel,
// reading them on the device, does not make), then enqueues one kernel per sequence.

#include <ATen/core/Tensor.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/empty_permuted.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include <array>
#include <optional>
#include <tuple>
#include <vector>

namespace at::openreg {
namespace {

constexpr int64_t kFlashMaxHeadDim = 256;   // FlashAttention-2's largest head dimension
constexpr int64_t kEfficientLseAlign = 32;  // efficient attention pads its logsumexp's length to this

// `result` in the layout of `like` (same sizes), empty_like's layout: itself where the strides agree.
at::Tensor in_layout_of(const at::Tensor& result, const at::Tensor& like) {
  if (result.strides() == like.strides()) return result;
  at::Tensor promised = at::empty_like(like);
  if (promised.strides() == result.strides()) return result;
  return promised.copy_(result);
}

void check_flash_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const auto dtype = q.scalar_type();
  TORCH_CHECK(dtype == at::kHalf || dtype == at::kBFloat16, "FlashAttention only support fp16 and bf16 data type");
  TORCH_CHECK(k.scalar_type() == dtype, "query and key must have the same dtype");
  TORCH_CHECK(v.scalar_type() == dtype, "query and value must have the same dtype");
  TORCH_CHECK(q.stride(-1) == 1 && k.stride(-1) == 1 && v.stride(-1) == 1,
              "Input tensor must have contiguous last dimension");
  TORCH_CHECK(q.size(-1) <= kFlashMaxHeadDim, "FlashAttention forward only supports head dimension at most 256");
  TORCH_CHECK(k.size(-2) > 0 && q.size(-2) % k.size(-2) == 0,
              "Number of heads in key/value must divide number of heads in query");
  TORCH_CHECK_NOT_IMPLEMENTED(v.size(-1) == q.size(-1),
                              "openreg's flash attention takes value with the query's head dimension (got ",
                              v.size(-1), " and ", q.size(-1), ")");
}

void check_no_dropout(double dropout_p, const char* op) {
  TORCH_CHECK_NOT_IMPLEMENTED(dropout_p == 0.0, op,
                              " on openreg runs without dropout (CUDA's Philox random numbers cannot be "
                              "reproduced); use scaled_dot_product_attention, whose math path has dropout");
}

// Whether flash attention masks causally. CUDA's kernel (FlashAttention-2) takes a window (left, right)
// of keys around each query, negative for unbounded; is_causal sets right to 0, and (-1, 0) is the
// causal mask itself, which torch.nn.attention.varlen passes for is_causal. Other windows are not
// supported here.
bool flash_causal(bool is_causal, std::optional<c10::SymInt> left, std::optional<c10::SymInt> right,
                  const char* op) {
  const bool left_unbounded = !left.has_value() || *left < 0;
  const bool right_unbounded = !right.has_value() || *right < 0;
  const bool right_zero = right.has_value() && *right == 0;
  TORCH_CHECK_NOT_IMPLEMENTED(left_unbounded && (right_unbounded || right_zero), op,
                              " on openreg has no sliding window (window_size_left/right other than -1, or 0 "
                              "on the right for causal)");
  return is_causal || right_zero;
}

// FlashAttention-2's causal mask is aligned to the bottom right, CPU's kernel's to the top left: the same
// mask where the query and key lengths are equal, which is the only case taken.
void check_causal_lengths(bool causal, int64_t lq, int64_t lk, const char* op) {
  TORCH_CHECK_NOT_IMPLEMENTED(!causal || lq == lk, op,
                              " on openreg has no bottom-right causal mask for different query and key lengths (",
                              lq, " and ", lk, ")");
}

// CPU's flash kernel on (batch, heads, seq, dim) views: the output (same order) and the float32
// logsumexp (batch, heads, seq).
std::tuple<at::Tensor, at::Tensor> attend(const at::Tensor& q_bhld, const at::Tensor& k_bhld,
                                          const at::Tensor& v_bhld, bool is_causal,
                                          const std::optional<at::Tensor>& bias, std::optional<double> scale) {
  return at::_scaled_dot_product_flash_attention_for_cpu(q_bhld, k_bhld, v_bhld, 0.0, is_causal, bias, scale);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> attend_backward(const at::Tensor& grad_bhld, const at::Tensor& q_bhld,
                                                               const at::Tensor& k_bhld, const at::Tensor& v_bhld,
                                                               const at::Tensor& out_bhld, const at::Tensor& lse,
                                                               bool is_causal, const std::optional<at::Tensor>& bias,
                                                               std::optional<double> scale) {
  return at::_scaled_dot_product_flash_attention_for_cpu_backward(grad_bhld, q_bhld, k_bhld, v_bhld, out_bhld, lse,
                                                                   0.0, is_causal, bias, scale);
}

// A (seq, heads, dim) slice as a (1, heads, seq, dim) view.
at::Tensor as_bhld(const at::Tensor& packed, int64_t start, int64_t length) {
  return packed.narrow(0, start, length).unsqueeze(0).transpose(1, 2);
}

// The cumulative sequence lengths on the host (Note [CUDA's attention kernels on openreg], varlen).
std::vector<int64_t> offsets_on_host(const at::Tensor& cum_seq, const char* name) {
  TORCH_CHECK(cum_seq.dim() == 1 && cum_seq.numel() >= 1, name, " must be a 1-d tensor of sequence offsets");
  TORCH_CHECK(cum_seq.scalar_type() == at::kInt, name, " must have dtype int32");
  const at::Tensor host = cum_seq.to(at::kCPU, at::kLong);
  const auto* data = host.const_data_ptr<int64_t>();
  return {data, data + host.numel()};
}

struct Varlen {
  std::vector<int64_t> q, k;  // sequence i is rows [q[i], q[i+1]) of the query, [k[i], k[i+1]) of key/value
};

Varlen varlen_offsets(const at::Tensor& cum_seq_q, const at::Tensor& cum_seq_k, int64_t total_q, int64_t total_k) {
  Varlen offsets{offsets_on_host(cum_seq_q, "cu_seqlens_q"), offsets_on_host(cum_seq_k, "cu_seqlens_k")};
  TORCH_CHECK(offsets.q.size() == offsets.k.size(), "cu_seqlens_q and cu_seqlens_k must have the same length");
  for (size_t i = 0; i + 1 < offsets.q.size(); ++i) {
    TORCH_CHECK(0 <= offsets.q[i] && offsets.q[i] <= offsets.q[i + 1] && offsets.q[i + 1] <= total_q &&
                    0 <= offsets.k[i] && offsets.k[i] <= offsets.k[i + 1] && offsets.k[i + 1] <= total_k,
                "cumulative sequence lengths must be non-decreasing and within the inputs");
  }
  return offsets;
}

at::Tensor rng_state_like(const at::Tensor& q, at::IntArrayRef sizes, at::ScalarType dtype) {
  return at::zeros(sizes, q.options().dtype(dtype));
}

// ---- _flash_attention_forward / _backward ---------------------------------------------------------------

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> flash_attention_forward(
    const at::Tensor& query, const at::Tensor& key, const at::Tensor& value, const std::optional<at::Tensor>& cum_seq_q,
    const std::optional<at::Tensor>& cum_seq_k, c10::SymInt /*max_q*/, c10::SymInt /*max_k*/, double dropout_p,
    bool is_causal, bool return_debug_mask, std::optional<double> scale, std::optional<c10::SymInt> window_size_left,
    std::optional<c10::SymInt> window_size_right, const std::optional<at::Tensor>& seqused_k,
    const std::optional<at::Tensor>& alibi_slopes, const std::optional<at::Tensor>& block_table,
    std::optional<int64_t> /*num_splits: a performance knob of CUDA's kernel*/) {
  constexpr const char* op = "_flash_attention_forward";
  const bool varlen = cum_seq_q.has_value() && cum_seq_q->defined();
  TORCH_CHECK(varlen == (cum_seq_k.has_value() && cum_seq_k->defined()),
              "cum_seq_q and cum_seq_k must both be given or both be None");
  TORCH_CHECK(query.dim() == (varlen ? 3 : 4) && key.dim() == query.dim() && value.dim() == query.dim(),
              op, " takes ", varlen ? "3-d (total, heads, dim) inputs with cumulative sequence lengths"
                                    : "4-d (batch, seq, heads, dim) inputs");
  check_flash_inputs(query, key, value);
  check_no_dropout(dropout_p, op);
  const bool causal = flash_causal(is_causal, window_size_left, window_size_right, op);
  TORCH_CHECK_NOT_IMPLEMENTED(!return_debug_mask, op, " on openreg has no debug attention mask");
  TORCH_CHECK_NOT_IMPLEMENTED(!(seqused_k.has_value() && seqused_k->defined()) &&
                                  !(alibi_slopes.has_value() && alibi_slopes->defined()) &&
                                  !(block_table.has_value() && block_table->defined()),
                              op, " on openreg has no seqused_k, ALiBi slopes or paged KV (block_table)");

  at::Tensor output;
  at::Tensor logsumexp;
  if (!varlen) {
    check_causal_lengths(causal, query.size(1), key.size(1), op);
    auto [out, lse] = attend(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), causal,
                             std::nullopt, scale);
    output = in_layout_of(out.transpose(1, 2), query);
    logsumexp = lse.contiguous();
  } else {
    const Varlen offsets = varlen_offsets(*cum_seq_q, *cum_seq_k, query.size(0), key.size(0));
    output = at::empty_like(query);
    logsumexp = at::empty({query.size(1), query.size(0)}, query.options().dtype(at::kFloat));
    for (size_t i = 0; i + 1 < offsets.q.size(); ++i) {
      const int64_t q0 = offsets.q[i], lq = offsets.q[i + 1] - q0;
      const int64_t k0 = offsets.k[i], lk = offsets.k[i + 1] - k0;
      if (lq == 0) continue;
      TORCH_CHECK(lk > 0, op, ": sequence ", i, " has queries but no keys");
      check_causal_lengths(causal, lq, lk, op);
      auto [out, lse] = attend(as_bhld(query, q0, lq), as_bhld(key, k0, lk), as_bhld(value, k0, lk), causal,
                               std::nullopt, scale);
      output.narrow(0, q0, lq).copy_(out.squeeze(0).transpose(0, 1));
      logsumexp.narrow(1, q0, lq).copy_(lse.squeeze(0));
    }
  }
  return {output, logsumexp, rng_state_like(query, {2}, at::kUInt64), rng_state_like(query, {}, at::kUInt64),
          at::empty({0}, query.options())};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_attention_backward(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& out, const at::Tensor& logsumexp, const at::Tensor& cum_seq_q, const at::Tensor& cum_seq_k,
    c10::SymInt /*max_q*/, c10::SymInt /*max_k*/, double dropout_p, bool is_causal, const at::Tensor& /*rng_state*/,
    const at::Tensor& /*unused*/, std::optional<double> scale, std::optional<c10::SymInt> window_size_left,
    std::optional<c10::SymInt> window_size_right) {
  constexpr const char* op = "_flash_attention_backward";
  check_flash_inputs(query, key, value);
  check_no_dropout(dropout_p, op);
  const bool causal = flash_causal(is_causal, window_size_left, window_size_right, op);
  const bool varlen = cum_seq_q.defined();
  if (!varlen) {
    check_causal_lengths(causal, query.size(1), key.size(1), op);
    auto [gq, gk, gv] =
        attend_backward(grad_out.transpose(1, 2), query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                        out.transpose(1, 2), logsumexp, causal, std::nullopt, scale);
    return {in_layout_of(gq.transpose(1, 2), query), in_layout_of(gk.transpose(1, 2), key),
            in_layout_of(gv.transpose(1, 2), value)};
  }
  TORCH_CHECK(cum_seq_k.defined(), "cum_seq_q and cum_seq_k must both be given or both be undefined");
  const Varlen offsets = varlen_offsets(cum_seq_q, cum_seq_k, query.size(0), key.size(0));
  at::Tensor grad_q = at::empty_like(query);
  // Keys no query attends to (an empty query sequence) get a zero gradient, as on CUDA.
  at::Tensor grad_k = at::zeros_like(key);
  at::Tensor grad_v = at::zeros_like(value);
  for (size_t i = 0; i + 1 < offsets.q.size(); ++i) {
    const int64_t q0 = offsets.q[i], lq = offsets.q[i + 1] - q0;
    const int64_t k0 = offsets.k[i], lk = offsets.k[i + 1] - k0;
    if (lq == 0) continue;
    check_causal_lengths(causal, lq, lk, op);
    auto [gq, gk, gv] = attend_backward(as_bhld(grad_out, q0, lq), as_bhld(query, q0, lq), as_bhld(key, k0, lk),
                                        as_bhld(value, k0, lk), as_bhld(out, q0, lq),
                                        logsumexp.narrow(1, q0, lq).unsqueeze(0), causal, std::nullopt, scale);
    grad_q.narrow(0, q0, lq).copy_(gq.squeeze(0).transpose(0, 1));
    grad_k.narrow(0, k0, lk).copy_(gk.squeeze(0).transpose(0, 1));
    grad_v.narrow(0, k0, lk).copy_(gv.squeeze(0).transpose(0, 1));
  }
  return {grad_q, grad_k, grad_v};
}

// ---- _efficient_attention_forward / _backward -----------------------------------------------------------

// custom_mask_type of the efficient kernels (CustomMaskType in ATen's mem-efficient attention).
enum class MaskType : int64_t { kNone = 0, kCausalFromTopLeft = 1, kCausalFromBottomRight = 2 };

bool causal_of(int64_t custom_mask_type, int64_t lq, int64_t lk, const char* op) {
  TORCH_CHECK(custom_mask_type >= 0 && custom_mask_type <= 2, "custom_mask_type must be 0, 1 or 2, got ",
              custom_mask_type);
  const auto type = static_cast<MaskType>(custom_mask_type);
  TORCH_CHECK_NOT_IMPLEMENTED(type != MaskType::kCausalFromBottomRight || lq == lk, op,
                              " on openreg has no bottom-right causal mask for different query and key lengths");
  return type != MaskType::kNone;
}

void check_efficient_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const char* op) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, op, ": query, key and value must be 4-d");
  const auto dtype = q.scalar_type();
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kHalf || dtype == at::kBFloat16,
              op, " supports float32, float16 and bfloat16, got ", dtype);
  TORCH_CHECK(k.scalar_type() == dtype && v.scalar_type() == dtype, "query, key and value must have the same dtype");
  TORCH_CHECK(q.size(0) == k.size(0) && k.size(0) == v.size(0), "query, key and value must have the same batch size");
  TORCH_CHECK(q.size(2) == k.size(2) && k.size(2) == v.size(2), "query, key and value must have the same number of heads");
  TORCH_CHECK(q.size(3) == k.size(3), "query and key must have the same head dimension");
  TORCH_CHECK(k.size(1) == v.size(1), "key and value must have the same sequence length");
  TORCH_CHECK_NOT_IMPLEMENTED(v.size(3) == q.size(3), op,
                              " on openreg takes value with the query's head dimension (got ", v.size(3), " and ",
                              q.size(3), ")");
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt> efficient_attention_forward(
    const at::Tensor& query, const at::Tensor& key, const at::Tensor& value, const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& cu_seqlens_q, const std::optional<at::Tensor>& cu_seqlens_k,
    std::optional<c10::SymInt> /*max_seqlen_q*/, std::optional<c10::SymInt> /*max_seqlen_k*/, double dropout_p,
    int64_t custom_mask_type, bool compute_log_sumexp, std::optional<double> scale,
    const std::optional<at::Tensor>& seqlen_k, std::optional<int64_t> window_size) {
  constexpr const char* op = "_efficient_attention_forward";
  check_efficient_inputs(query, key, value, op);
  check_no_dropout(dropout_p, op);
  TORCH_CHECK_NOT_IMPLEMENTED(!(cu_seqlens_q.has_value() && cu_seqlens_q->defined()) &&
                                  !(cu_seqlens_k.has_value() && cu_seqlens_k->defined()) &&
                                  !(seqlen_k.has_value() && seqlen_k->defined()),
                              op, " on openreg takes dense inputs (no cu_seqlens, no seqlen_k); "
                                  "_flash_attention_forward has the varlen path");
  TORCH_CHECK_NOT_IMPLEMENTED(!window_size.has_value() || *window_size <= 0, op,
                              " on openreg has no sliding window");
  const int64_t lq = query.size(1), lk = key.size(1);
  const bool causal = causal_of(custom_mask_type, lq, lk, op);
  std::optional<at::Tensor> mask;
  if (bias.has_value() && bias->defined()) mask = *bias;
  auto [out, lse] =
      attend(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), causal, mask, scale);
  // The output is (batch, seq, heads, dim), contiguous, as CUDA's kernel allocates it.
  at::Tensor output = out.transpose(1, 2).contiguous();
  const int64_t lse_len = compute_log_sumexp ? (lq + kEfficientLseAlign - 1) / kEfficientLseAlign * kEfficientLseAlign : 0;
  at::Tensor logsumexp = at::zeros({query.size(0), query.size(2), lse_len}, query.options().dtype(at::kFloat));
  if (compute_log_sumexp) logsumexp.narrow(2, 0, lq).copy_(lse);
  return {output, logsumexp, rng_state_like(query, {}, at::kLong), rng_state_like(query, {}, at::kLong), lq, lk};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> efficient_attention_backward(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const std::optional<at::Tensor>& bias, const at::Tensor& out, const std::optional<at::Tensor>& cu_seqlens_q,
    const std::optional<at::Tensor>& cu_seqlens_k, c10::SymInt /*max_seqlen_q*/, c10::SymInt /*max_seqlen_k*/,
    const at::Tensor& logsumexp, double dropout_p, const at::Tensor& /*philox_seed*/,
    const at::Tensor& /*philox_offset*/, int64_t custom_mask_type, bool bias_requires_grad,
    std::optional<double> scale, std::optional<int64_t> /*num_splits_key*/, std::optional<int64_t> window_size,
    bool shared_storage_dqdkdv) {
  constexpr const char* op = "_efficient_attention_backward";
  check_efficient_inputs(query, key, value, op);
  check_no_dropout(dropout_p, op);
  TORCH_CHECK_NOT_IMPLEMENTED(!(cu_seqlens_q.has_value() && cu_seqlens_q->defined()) &&
                                  !(cu_seqlens_k.has_value() && cu_seqlens_k->defined()),
                              op, " on openreg takes dense inputs (no cu_seqlens)");
  TORCH_CHECK_NOT_IMPLEMENTED(!window_size.has_value() || *window_size <= 0, op, " on openreg has no sliding window");
  TORCH_CHECK_NOT_IMPLEMENTED(!bias_requires_grad, op,
                              " on openreg computes no gradient for the bias (the math path of "
                              "scaled_dot_product_attention does)");
  TORCH_CHECK_NOT_IMPLEMENTED(!shared_storage_dqdkdv, op, " on openreg has no shared_storage_dqdkdv");
  const int64_t lq = query.size(1), lk = key.size(1);
  const bool causal = causal_of(custom_mask_type, lq, lk, op);
  std::optional<at::Tensor> mask;
  if (bias.has_value() && bias->defined()) mask = *bias;
  auto [gq, gk, gv] = attend_backward(grad_out.transpose(1, 2), query.transpose(1, 2), key.transpose(1, 2),
                                      value.transpose(1, 2), out.transpose(1, 2),
                                      logsumexp.narrow(2, 0, lq).contiguous(), causal, mask, scale);
  at::Tensor grad_bias = (bias.has_value() && bias->defined()) ? at::Tensor() : at::empty({}, query.options());
  return {in_layout_of(gq.transpose(1, 2), query), in_layout_of(gk.transpose(1, 2), key),
          in_layout_of(gv.transpose(1, 2), value), grad_bias};
}

// ---- the SDPA entry points over them --------------------------------------------------------------------

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor, at::Tensor,
           at::Tensor>
sdpa_flash(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value, double dropout_p, bool is_causal,
           bool return_debug_mask, std::optional<double> scale) {
  constexpr const char* op = "_scaled_dot_product_flash_attention";
  TORCH_CHECK(query.dim() == 4 && key.dim() == 4 && value.dim() == 4, op, ": query, key and value must be 4-d");
  check_flash_inputs(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2));
  check_no_dropout(dropout_p, op);
  TORCH_CHECK_NOT_IMPLEMENTED(!return_debug_mask, op, " on openreg has no debug attention mask");
  check_causal_lengths(is_causal, query.size(2), key.size(2), op);
  auto [out, lse] = attend(query, key, value, is_causal, std::nullopt, scale);
  return {in_layout_of(out, query), lse.contiguous(), at::Tensor(), at::Tensor(), query.sym_size(2),
          key.sym_size(2), rng_state_like(query, {2}, at::kUInt64), rng_state_like(query, {}, at::kUInt64),
          at::empty({0}, query.options())};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> sdpa_flash_backward(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& out, const at::Tensor& logsumexp, const at::Tensor& /*cum_seq_q*/,
    const at::Tensor& /*cum_seq_k*/, c10::SymInt /*max_q*/, c10::SymInt /*max_k*/, double dropout_p, bool is_causal,
    const at::Tensor& /*philox_seed*/, const at::Tensor& /*philox_offset*/, std::optional<double> scale) {
  constexpr const char* op = "_scaled_dot_product_flash_attention_backward";
  check_no_dropout(dropout_p, op);
  check_causal_lengths(is_causal, query.size(2), key.size(2), op);
  auto [gq, gk, gv] = attend_backward(grad_out, query, key, value, out, logsumexp, is_causal, std::nullopt, scale);
  return {in_layout_of(gq, query), in_layout_of(gk, key), in_layout_of(gv, value)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> sdpa_efficient(
    const at::Tensor& query, const at::Tensor& key, const at::Tensor& value, const std::optional<at::Tensor>& attn_bias,
    bool compute_log_sumexp, double dropout_p, bool is_causal, std::optional<double> scale) {
  // CUDA's entry point runs the efficient kernel on (batch, seq, heads, dim) views and hands back its
  // output and logsumexp as they come; so does this one.
  auto [out, lse, seed, offset, max_q, max_k] = efficient_attention_forward(
      query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), attn_bias, std::nullopt, std::nullopt,
      std::nullopt, std::nullopt, dropout_p, is_causal ? static_cast<int64_t>(MaskType::kCausalFromTopLeft) : 0,
      compute_log_sumexp, scale, std::nullopt, std::nullopt);
  return {out.transpose(1, 2), lse, seed, offset};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> sdpa_efficient_backward(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& attn_bias, const at::Tensor& out, const at::Tensor& logsumexp, const at::Tensor& philox_seed,
    const at::Tensor& philox_offset, double dropout_p, std::array<bool, 4> grad_input_mask, bool is_causal,
    std::optional<double> scale) {
  constexpr const char* op = "_scaled_dot_product_efficient_attention_backward";
  check_efficient_inputs(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), op);
  check_no_dropout(dropout_p, op);
  TORCH_CHECK_NOT_IMPLEMENTED(!(attn_bias.defined() && grad_input_mask[3]), op,
                              " on openreg computes no gradient for attn_bias (the math path of "
                              "scaled_dot_product_attention does)");
  std::optional<at::Tensor> mask;
  if (attn_bias.defined()) mask = attn_bias;
  const int64_t lq = query.size(2);
  auto [gq, gk, gv] = attend_backward(grad_out, query, key, value, out, logsumexp.narrow(2, 0, lq).contiguous(),
                                      is_causal, mask, scale);
  // CUDA's gradients are (batch, seq, heads, dim) in memory (empty_permuted in torch's meta function).
  auto permuted = [](const at::Tensor& grad) {
    at::Tensor laid_out = at::empty_permuted(grad.sizes(), {0, 2, 1, 3}, grad.options());
    return laid_out.strides() == grad.strides() ? grad : laid_out.copy_(grad);
  };
  return {permuted(gq), permuted(gk), permuted(gv), at::Tensor()};
}

}  // namespace
}  // namespace at::openreg

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_flash_attention_forward", &at::openreg::flash_attention_forward);
  m.impl("_flash_attention_backward", &at::openreg::flash_attention_backward);
  m.impl("_efficient_attention_forward", &at::openreg::efficient_attention_forward);
  m.impl("_efficient_attention_backward", &at::openreg::efficient_attention_backward);
  m.impl("_scaled_dot_product_flash_attention", &at::openreg::sdpa_flash);
  m.impl("_scaled_dot_product_flash_attention_backward", &at::openreg::sdpa_flash_backward);
  m.impl("_scaled_dot_product_efficient_attention", &at::openreg::sdpa_efficient);
  m.impl("_scaled_dot_product_efficient_attention_backward", &at::openreg::sdpa_efficient_backward);
}
