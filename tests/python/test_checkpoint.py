"""Activation checkpointing on openreg gives the gradients of the plain model, random ops included.

torch.utils.checkpoint saves and restores the device's RNG state around the recomputation only when the
device module says it is initialized (``torch.openreg._initialized``, as ``torch.cuda._initialized``);
without it the recomputed forward draws other dropout masks and the gradients are silently wrong.
"""

import pytest
import torch
from torch.utils.checkpoint import checkpoint


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Dropout(0.5), torch.nn.Linear(64, 8)
    ).to("openreg")


def _grads(model, x, checkpointed, use_reentrant):
    model.zero_grad()
    torch.openreg.manual_seed(1234)
    if checkpointed:
        out = checkpoint(model, x, use_reentrant=use_reentrant)
    else:
        out = model(x)
    out.square().sum().backward()
    return [p.grad.cpu() for p in model.parameters()]


def test_the_device_module_reports_initialization_like_torch_cuda():
    torch.empty(1, device="openreg")
    assert torch.openreg._initialized is True
    assert torch.openreg._initialized == torch.openreg.is_initialized()


@pytest.mark.parametrize("use_reentrant", [False, True], ids=["non_reentrant", "reentrant"])
def test_checkpointed_gradients_with_dropout_equal_the_plain_ones(use_reentrant):
    model = _mlp()
    x = torch.randn(16, 32, device="openreg", requires_grad=use_reentrant)
    plain = _grads(model, x, checkpointed=False, use_reentrant=use_reentrant)
    ckpt = _grads(model, x, checkpointed=True, use_reentrant=use_reentrant)
    for a, b in zip(plain, ckpt):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_checkpointing_restores_the_rng_of_the_device_the_inputs_are_on():
    model = _mlp().to("openreg:1")
    x = torch.randn(16, 32, device="openreg:1")
    with torch.openreg.device(1):
        plain = _grads(model, x, checkpointed=False, use_reentrant=False)
        ckpt = _grads(model, x, checkpointed=True, use_reentrant=False)
    for a, b in zip(plain, ckpt):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
