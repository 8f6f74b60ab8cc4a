"""nn.LSTM / nn.GRU / nn.RNN and their cells on openreg match CPU, forward and backward. Their fused
pointwise cells (_thnn_fused_lstm_cell, _thnn_fused_gru_cell) have no CPU kernel; openreg has its own."""

import copy

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


def _flatten(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, nn.utils.rnn.PackedSequence):
        return [out.data]
    res = []
    for o in out:
        res += _flatten(o)
    return res


def _check(module, make_inputs):
    """Runs module on CPU and on openreg with the same weights and inputs; compares outputs and grads."""
    torch.manual_seed(0)
    ref = module
    dev = copy.deepcopy(module).to("openreg")
    cpu_inputs = make_inputs("cpu")
    dev_inputs = make_inputs("openreg")
    ref_out = _flatten(ref(*cpu_inputs))
    dev_out = _flatten(dev(*dev_inputs))
    assert len(ref_out) == len(dev_out)
    for a, b in zip(ref_out, dev_out):
        assert b.device.type == "openreg" and b.dtype == a.dtype and b.shape == a.shape
        torch.testing.assert_close(b.cpu(), a, atol=1e-5, rtol=1e-4)
    weights = [torch.randn_like(o) for o in ref_out]
    sum((o * w).sum() for o, w in zip(ref_out, weights)).backward()
    sum((o * w.to("openreg")).sum() for o, w in zip(dev_out, weights)).backward()
    for (name, a), (_, b) in zip(ref.named_parameters(), dev.named_parameters()):
        torch.testing.assert_close(b.grad.cpu(), a.grad, atol=1e-5, rtol=1e-4, msg=name)
    for a, b in zip(cpu_inputs, dev_inputs):
        if isinstance(a, torch.Tensor) and a.requires_grad:
            torch.testing.assert_close(b.grad.cpu(), a.grad, atol=1e-5, rtol=1e-4)


def _seq_inputs(batch_first, with_state=None):
    torch.manual_seed(1)
    x = torch.randn(3, 5, 4) if batch_first else torch.randn(5, 3, 4)

    def make(device):
        inputs = [x.detach().to(device).requires_grad_()]
        if with_state is not None:
            inputs.append(tuple(s.detach().to(device).requires_grad_() for s in with_state))
            if len(inputs[1]) == 1:
                inputs[1] = inputs[1][0]
        return inputs

    return make


@pytest.mark.parametrize("cls", [nn.LSTM, nn.GRU, nn.RNN])
@pytest.mark.parametrize("num_layers,bidirectional,batch_first", [(1, False, False), (2, True, True), (3, False, True)])
def test_rnn_modules_match_cpu(cls, num_layers, bidirectional, batch_first):
    torch.manual_seed(0)
    m = cls(4, 6, num_layers=num_layers, bidirectional=bidirectional, batch_first=batch_first)
    _check(m, _seq_inputs(batch_first))


def test_lstm_with_projection_and_initial_state_matches_cpu():
    torch.manual_seed(0)
    m = nn.LSTM(4, 6, num_layers=2, proj_size=3, bidirectional=True)
    state = (torch.randn(4, 3, 3), torch.randn(4, 3, 6))
    _check(m, _seq_inputs(False, state))


def test_gru_with_initial_state_and_no_bias_matches_cpu():
    torch.manual_seed(0)
    m = nn.GRU(4, 6, num_layers=2, bias=False)
    _check(m, _seq_inputs(False, (torch.randn(2, 3, 6),)))


@pytest.mark.parametrize("cls", [nn.LSTM, nn.GRU])
def test_packed_sequences_match_cpu(cls):
    torch.manual_seed(0)
    m = cls(4, 5, num_layers=2, bidirectional=True, batch_first=True)
    x = torch.randn(3, 6, 4)
    lengths = torch.tensor([6, 4, 2])

    class Packed(nn.Module):
        def __init__(self, rnn):
            super().__init__()
            self.rnn = rnn

        def forward(self, x):
            packed = pack_padded_sequence(x, lengths, batch_first=True)
            out, state = self.rnn(packed)
            return pad_packed_sequence(out, batch_first=True)[0], state

    _check(Packed(m), lambda device: [x.detach().to(device).requires_grad_()])


@pytest.mark.parametrize("cls", [nn.LSTMCell, nn.GRUCell, nn.RNNCell])
@pytest.mark.parametrize("bias", [True, False])
def test_cells_match_cpu(cls, bias):
    torch.manual_seed(0)
    m = cls(4, 5, bias=bias)
    x = torch.randn(3, 4)
    h = torch.randn(3, 5)
    if cls is nn.LSTMCell:
        c = torch.randn(3, 5)
        _check(m, lambda d: [x.detach().to(d).requires_grad_(),
                             (h.detach().to(d).requires_grad_(), c.detach().to(d).requires_grad_())])
    else:
        _check(m, lambda d: [x.detach().to(d).requires_grad_(), h.detach().to(d).requires_grad_()])


def test_unbatched_lstm_cell_matches_cpu():
    torch.manual_seed(0)
    _check(nn.LSTMCell(4, 5), lambda d: [torch.randn(4, generator=torch.Generator().manual_seed(2)).to(d)])


def test_lstm_double_backward_matches_cpu():
    torch.manual_seed(0)
    cell = nn.LSTMCell(3, 4)
    x = torch.randn(2, 3)
    grads = []
    for device in ("cpu", "openreg"):
        c = copy.deepcopy(cell).to(device)
        xi = x.detach().to(device).requires_grad_()
        h, _ = c(xi)
        (g,) = torch.autograd.grad(h.sum(), xi, create_graph=True)
        (gg,) = torch.autograd.grad(g.pow(2).sum(), xi)
        grads.append(gg.cpu())
    torch.testing.assert_close(grads[1], grads[0], atol=1e-5, rtol=1e-4)


def test_fused_cell_rejects_mismatched_gates_at_the_call():
    g = torch.randn(2, 8, device="openreg")
    with pytest.raises(RuntimeError, match="_thnn_fused_lstm_cell"):
        torch.ops.aten._thnn_fused_lstm_cell(
            g, torch.randn(2, 4, device="openreg"), torch.randn(2, 2, device="openreg"))
