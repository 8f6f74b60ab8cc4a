"""Nested tensors on openreg (Note [Nested tensors on openreg] in backend/ops/Nested.cpp): the paths
PyTorch takes on PrivateUse1 devices, nn.TransformerEncoder's inference fast path with a padding mask
above all, give CPU's results; nested tensors are made, used in place and moved like CUDA's."""

from __future__ import annotations

import torch

G = torch.Generator().manual_seed(0)
A = torch.randn(3, 4, generator=G)
B = torch.randn(5, 4, generator=G)


def _assert_nested_equal(got, want):
    assert got.is_nested and got.device.type == "openreg"
    assert len(got.unbind()) == len(want.unbind())
    for g, w in zip(got.unbind(), want.unbind()):
        torch.testing.assert_close(g.cpu(), w)


def test_transformer_encoder_with_a_padding_mask_takes_the_nested_fast_path_as_on_cpu():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True)
    encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=True).eval()
    src = torch.randn(2, 5, 8, generator=G)
    mask = torch.tensor([[False] * 5, [False, False, False, True, True]])
    with torch.no_grad():
        want = encoder(src, src_key_padding_mask=mask)
        encoder.to("openreg")
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            got = encoder(src.to("openreg"), src_key_padding_mask=mask.to("openreg"))
    names = {e.name for e in prof.events()}
    assert {"aten::_nested_tensor_from_mask", "aten::_transformer_encoder_layer_fwd"} <= names, "fast path not taken"
    assert got.device.type == "openreg" and not got.is_nested
    torch.testing.assert_close(got.cpu(), want)


def test_nested_tensors_are_made_computed_and_moved_as_on_cpu():
    weight = torch.randn(6, 4, generator=G)
    want = torch.nested.nested_tensor([A, B])
    got = torch.nested.nested_tensor([A.to("openreg"), B.to("openreg")])
    _assert_nested_equal(got, want)
    _assert_nested_equal((got * 2).relu(), (want * 2).relu())
    linear = torch.nn.functional.linear
    _assert_nested_equal(linear(got, weight.to("openreg")), linear(want, weight))
    # In place: the openreg tensor itself changes.
    got.mul_(3)
    _assert_nested_equal(got, want * 3)
    # Moves: to the CPU and back, the layout kept.
    back = got.to("cpu")
    assert back.is_nested and back.device.type == "cpu"
    _assert_nested_equal(back.to("openreg"), want * 3)
    padded = got.to_padded_tensor(0.0)
    assert padded.device.type == "openreg" and not padded.is_nested
    assert torch.equal(padded.cpu(), (want * 3).to_padded_tensor(0.0))
