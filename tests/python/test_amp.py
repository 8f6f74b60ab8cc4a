"""torch.autocast("openreg") follows CUDA's policy: matmuls in lower precision, reductions in fp32."""

import pytest
import torch

DEV = "openreg"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_lower_precision_ops(dtype):
    a = torch.randn(8, 8, device=DEV)
    w = torch.randn(4, 8, device=DEV)
    with torch.autocast(DEV, dtype=dtype):
        assert torch.is_autocast_enabled(DEV)
        assert torch.mm(a, a).dtype == dtype
        assert (a @ a).dtype == dtype
        assert torch.nn.functional.linear(a, w).dtype == dtype
        assert torch.addmm(a, a, a).dtype == dtype
        conv = torch.nn.functional.conv2d(torch.randn(1, 2, 5, 5, device=DEV), torch.randn(3, 2, 3, 3, device=DEV))
        assert conv.dtype == dtype
    assert torch.mm(a, a).dtype == torch.float32


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_fp32_ops_and_promotion(dtype):
    a = torch.randn(8, 8, device=DEV)
    with torch.autocast(DEV, dtype=dtype):
        h = a @ a
        assert h.dtype == dtype
        assert torch.softmax(h, dim=-1).dtype == torch.float32
        assert h.exp().dtype == torch.float32
        assert h.sum().dtype == torch.float32
        assert torch.nn.functional.mse_loss(h, a).dtype == torch.float32
        assert torch.nn.functional.layer_norm(h, (8,)).dtype == torch.float32
        # promote: widest input dtype wins.
        assert torch.addcmul(a, h, h).dtype == torch.float32
        # ops outside the lists keep their input dtype.
        assert (h + h).dtype == dtype


def test_autocast_matches_cpu_values_within_bf16_tolerance():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(16, 16, generator=g), torch.randn(16, 16, generator=g)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = a @ b
    with torch.autocast(DEV, dtype=torch.bfloat16):
        actual = a.to(DEV) @ b.to(DEV)
    assert actual.dtype == expected.dtype == torch.bfloat16
    torch.testing.assert_close(actual.cpu(), expected)


def test_autocast_training_step_with_grad_scaler():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler(DEV)
    x, y = torch.randn(16, 8, device=DEV), torch.randint(0, 2, (16,), device=DEV)
    losses = []
    for _ in range(10):
        opt.zero_grad()
        with torch.autocast(DEV, dtype=torch.float16):
            logits = model(x)
            assert logits.dtype == torch.float16
            loss = torch.nn.functional.cross_entropy(logits, y)
        assert loss.dtype == torch.float32
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    for p in model.parameters():
        assert p.dtype == torch.float32 and p.grad.dtype == torch.float32
    assert losses[-1] < losses[0]


def test_autocast_disabled_region_and_cache():
    a = torch.randn(4, 4, device=DEV)
    with torch.autocast(DEV, dtype=torch.float16):
        with torch.autocast(DEV, enabled=False):
            assert (a @ a).dtype == torch.float32
        assert (a @ a).dtype == torch.float16
