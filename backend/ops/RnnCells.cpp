// Note [Fused RNN cells on openreg]
// aten's LSTM and GRU cells (nn.LSTM, nn.GRU, LSTMCell, GRUCell) call the fused pointwise ops
// _thnn_fused_lstm_cell / _thnn_fused_gru_cell on any non-CPU device, and those ops have CUDA kernels
// only: there is no CPU kernel for the fallback to run. These kernels compose the same pointwise math
// from aten ops on openreg tensors, each of which the fallback enqueues like any other op (no host
// sync). Autograd stays aten's: the ops' derivative formulas call the backward ops below.
//
// Workspaces are private to each forward/backward pair (like CUDA's, whose layout we do not need to
// share since nothing else reads them):
//  - LSTM: [B, 4H] = the activated gates (input, forget, cell, output), in the order of the weights.
//  - GRU:  [B, 5H] = reset, update, new gates, hx, and the hidden n-gate term (hidden_gates_n + b_hn).

#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/tanh.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include <tuple>

namespace at::openreg {
namespace {

//! The gates with the (optional) biases added, as an out-of-place sum.
at::Tensor biased(const at::Tensor& gates, const std::optional<at::Tensor>& bias) {
  if (bias.has_value() && bias->defined()) return gates + *bias;
  return gates;
}

void check_gates(const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& state,
                 int64_t chunks, const char* op) {
  TORCH_CHECK(input_gates.sizes() == hidden_gates.sizes(), op, ": input_gates and hidden_gates differ in size, ",
              input_gates.sizes(), " vs ", hidden_gates.sizes());
  TORCH_CHECK(input_gates.dim() == 2 && state.dim() == 2 && input_gates.size(0) == state.size(0) &&
                  input_gates.size(1) == chunks * state.size(1),
              op, ": expected gates of size [B, ", chunks, "H] for a state of size [B, H], got ",
              input_gates.sizes(), " and ", state.sizes());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell(const at::Tensor& input_gates,
                                                               const at::Tensor& hidden_gates, const at::Tensor& cx,
                                                               const std::optional<at::Tensor>& input_bias,
                                                               const std::optional<at::Tensor>& hidden_bias) {
  check_gates(input_gates, hidden_gates, cx, 4, "_thnn_fused_lstm_cell");
  const at::Tensor gates = biased(biased(input_gates, input_bias) + hidden_gates, hidden_bias);
  auto g = gates.chunk(4, 1);
  const at::Tensor ig = at::sigmoid(g[0]);
  const at::Tensor fg = at::sigmoid(g[1]);
  const at::Tensor cg = at::tanh(g[2]);
  const at::Tensor og = at::sigmoid(g[3]);
  at::Tensor cy = fg * cx + ig * cg;
  at::Tensor hy = og * at::tanh(cy);
  at::Tensor workspace = at::cat({ig, fg, cg, og}, 1);
  return {std::move(hy), std::move(cy), std::move(workspace)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell_backward(const std::optional<at::Tensor>& grad_hy,
                                                                        const std::optional<at::Tensor>& grad_cy,
                                                                        const at::Tensor& cx, const at::Tensor& cy,
                                                                        const at::Tensor& workspace, bool has_bias) {
  const bool has_ghy = grad_hy.has_value() && grad_hy->defined();
  const bool has_gcy = grad_cy.has_value() && grad_cy->defined();
  if (!has_ghy && !has_gcy) return {at::Tensor(), at::Tensor(), at::Tensor()};
  auto w = workspace.chunk(4, 1);
  const at::Tensor& ig = w[0];
  const at::Tensor& fg = w[1];
  const at::Tensor& cg = w[2];
  const at::Tensor& og = w[3];
  const at::Tensor tanh_cy = at::tanh(cy);
  // d(loss)/d(cy): from cy itself and through hy = og * tanh(cy).
  at::Tensor gcy;
  at::Tensor d_og;
  if (has_ghy) {
    gcy = *grad_hy * og * (1 - tanh_cy * tanh_cy);
    if (has_gcy) gcy = gcy + *grad_cy;
    d_og = *grad_hy * tanh_cy * og * (1 - og);
  } else {
    gcy = *grad_cy;
    d_og = at::zeros_like(og);
  }
  const at::Tensor d_ig = gcy * cg * ig * (1 - ig);
  const at::Tensor d_fg = gcy * cx * fg * (1 - fg);
  const at::Tensor d_cg = gcy * ig * (1 - cg * cg);
  at::Tensor grad_gates = at::cat({d_ig, d_fg, d_cg, d_og}, 1);
  at::Tensor grad_cx = gcy * fg;
  at::Tensor grad_bias = has_bias ? grad_gates.sum(0) : at::Tensor();
  return {std::move(grad_gates), std::move(grad_cx), std::move(grad_bias)};
}

std::tuple<at::Tensor, at::Tensor> fused_gru_cell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                                  const at::Tensor& hx, const std::optional<at::Tensor>& input_bias,
                                                  const std::optional<at::Tensor>& hidden_bias) {
  check_gates(input_gates, hidden_gates, hx, 3, "_thnn_fused_gru_cell");
  auto i = biased(input_gates, input_bias).chunk(3, 1);
  auto h = biased(hidden_gates, hidden_bias).chunk(3, 1);
  const at::Tensor rg = at::sigmoid(i[0] + h[0]);
  const at::Tensor zg = at::sigmoid(i[1] + h[1]);
  const at::Tensor& hn = h[2];
  const at::Tensor ng = at::tanh(i[2] + rg * hn);
  at::Tensor hy = ng + zg * (hx - ng);
  at::Tensor workspace = at::cat({rg, zg, ng, hx, hn}, 1);
  return {std::move(hy), std::move(workspace)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  auto w = workspace.chunk(5, 1);
  const at::Tensor& rg = w[0];
  const at::Tensor& zg = w[1];
  const at::Tensor& ng = w[2];
  const at::Tensor& hx = w[3];
  const at::Tensor& hn = w[4];
  const at::Tensor d_n = grad_hy * (1 - zg) * (1 - ng * ng);    // before the tanh
  const at::Tensor d_z = grad_hy * (hx - ng) * zg * (1 - zg);  // before the sigmoid
  const at::Tensor d_r = d_n * hn * rg * (1 - rg);             // before the sigmoid
  at::Tensor grad_input_gates = at::cat({d_r, d_z, d_n}, 1);
  at::Tensor grad_hidden_gates = at::cat({d_r, d_z, d_n * rg}, 1);
  at::Tensor grad_hx = grad_hy * zg;
  at::Tensor grad_input_bias = has_bias ? grad_input_gates.sum(0) : at::Tensor();
  at::Tensor grad_hidden_bias = has_bias ? grad_hidden_gates.sum(0) : at::Tensor();
  return {std::move(grad_input_gates), std::move(grad_hidden_gates), std::move(grad_hx), std::move(grad_input_bias),
          std::move(grad_hidden_bias)};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_thnn_fused_lstm_cell", TORCH_FN(fused_lstm_cell));
  m.impl("_thnn_fused_lstm_cell_backward_impl", TORCH_FN(fused_lstm_cell_backward));
  m.impl("_thnn_fused_gru_cell", TORCH_FN(fused_gru_cell));
  m.impl("_thnn_fused_gru_cell_backward", TORCH_FN(fused_gru_cell_backward));
}

}  // namespace at::openreg
