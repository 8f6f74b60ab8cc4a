"""_foreach_* ops (optimizers' multi-tensor steps) on openreg give CPU's results, raise size mismatches
at the call, and accept lists that span devices, as CUDA's foreach ops do (they reach openreg
through aten's per-tensor loop)."""

from __future__ import annotations

import copy

import pytest
import torch


def _pair(shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    cpu = [torch.randn(s, generator=g) for s in shapes]
    return cpu, [t.to("openreg") for t in cpu]


SHAPES = [(3,), (4, 5), (2, 3, 4), (7,)]


@pytest.mark.parametrize(
    "call",
    [
        lambda a, b: torch._foreach_add(a, b, alpha=2),
        lambda a, b: torch._foreach_addcmul_(a, b, b, value=0.5),
        lambda a, b: torch._foreach_lerp_(a, b, 0.25),
        lambda a, b: torch._foreach_sqrt(torch._foreach_abs(a)),
        lambda a, b: torch._foreach_norm(a),
        lambda a, b: torch._foreach_maximum_(a, b),
        lambda a, b: torch._foreach_mul_(a, [1.0, 2.0, 3.0, 4.0]),
        lambda a, b: torch._foreach_add_(a, torch.tensor(2.0)),  # a 0-dim CPU tensor beside device lists
    ],
    ids=["add_alpha", "addcmul_", "lerp_", "sqrt_abs", "norm", "maximum_", "mul_scalarlist", "add_cpu_scalar"],
)
def test_foreach_ops_match_cpu(call):
    cpu_a, dev_a = _pair(SHAPES, seed=1)
    cpu_b, dev_b = _pair(SHAPES, seed=2)
    out_cpu = call(cpu_a, cpu_b)
    out_dev = call(dev_a, dev_b)
    if out_cpu is not None:
        assert all(d.device.type == "openreg" for d in out_dev)
        for c, d in zip(out_cpu, out_dev):
            torch.testing.assert_close(d.cpu(), c, rtol=0, atol=0)
    for c, d in zip(cpu_a, dev_a):  # in-place ops wrote their first list
        torch.testing.assert_close(d.cpu(), c, rtol=0, atol=0)


def test_a_list_spanning_two_devices_runs_per_tensor_like_cuda():
    tensors = [torch.ones(2, device="openreg:0"), torch.ones(3, device="openreg:1")]
    torch._foreach_add_(tensors, 1.0)
    out = torch._foreach_mul(tensors, 2.0)
    assert [t.device.index for t in out] == [0, 1]
    assert [t.cpu().tolist() for t in out] == [[4.0, 4.0], [4.0, 4.0, 4.0]]


def test_a_size_mismatch_is_raised_at_the_call():
    _, a = _pair([(3,), (4,)])
    _, b = _pair([(3,), (5,)])
    with pytest.raises(RuntimeError):
        torch._foreach_add(a, b)
    torch.openreg.synchronize()  # nothing failed on the device


@pytest.mark.parametrize("make", [
    lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
    lambda p: torch.optim.Adam(p, lr=0.01),
    lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1),
], ids=["sgd_momentum", "adam", "adamw"])
def test_optimizer_steps_match_cpu(make):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    x, y = torch.randn(32, 8), torch.randn(32, 4)
    results = {}
    for device in ("cpu", "openreg"):
        m = copy.deepcopy(model).to(device)
        opt = make(m.parameters())
        for _ in range(3):
            opt.zero_grad()
            torch.nn.functional.mse_loss(m(x.to(device)), y.to(device)).backward()
            opt.step()
        results[device] = [p.detach().cpu() for p in m.parameters()]
    for c, d in zip(results["cpu"], results["openreg"]):
        torch.testing.assert_close(d, c)
