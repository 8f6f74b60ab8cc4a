"""Tensor identity across devices: openreg and CPU dense tensors are shallow-copy compatible, like CPU
and CUDA, so `.data =` swaps work and Module.to keeps Parameter objects (tied weights, optimizers)."""

import copy

import pytest
import torch
from torch import nn


def test_cpu_and_openreg_are_shallow_copy_compatible():
    cpu = torch.randn(3)
    dev = torch.randn(3, device="openreg")
    assert torch._has_compatible_shallow_copy_type(cpu, dev)
    assert torch._has_compatible_shallow_copy_type(dev, cpu)
    assert torch._has_compatible_shallow_copy_type(dev, torch.randn(2, device="openreg:1"))


def test_sparse_is_not_shallow_copy_compatible_with_openreg():
    dev = torch.randn(3, device="openreg")
    assert not torch._has_compatible_shallow_copy_type(dev, torch.randn(3).to_sparse())


def test_data_assignment_cpu_to_openreg_and_back():
    t = torch.zeros(2, 3)
    src = torch.arange(4.0, device="openreg")
    t.data = src
    assert t.device == src.device and t.shape == (4,)
    assert torch.equal(t.cpu(), torch.arange(4.0))

    u = torch.zeros(5, device="openreg")
    u.data = torch.ones(2, 2)
    assert u.device.type == "cpu"
    assert torch.equal(u, torch.ones(2, 2))


def test_parameter_data_assignment_keeps_the_parameter():
    p = nn.Parameter(torch.randn(3))
    ident = id(p)
    p.data = p.data.to("openreg")
    assert id(p) == ident and isinstance(p, nn.Parameter) and p.device.type == "openreg"
    (p * 2).sum().backward()
    assert p.grad.device.type == "openreg"
    assert torch.equal(p.grad.cpu(), torch.full((3,), 2.0))


def test_module_to_keeps_parameter_objects_and_ties():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(10, 4)
            self.lm_head = nn.Linear(4, 10, bias=False)
            self.lm_head.weight = self.wte.weight

    m = Tied()
    before = [id(p) for p in m.parameters()]
    m.to("openreg")
    assert [id(p) for p in m.parameters()] == before
    assert m.lm_head.weight is m.wte.weight
    assert m.wte.weight.device.type == "openreg"
    m.to("cpu")
    assert [id(p) for p in m.parameters()] == before and m.lm_head.weight is m.wte.weight


def test_optimizer_built_before_to_trains():
    torch.manual_seed(0)
    m = nn.Linear(4, 2)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    m.to("openreg")
    w0 = m.weight.detach().cpu().clone()
    loss = m(torch.randn(8, 4, device="openreg")).pow(2).sum()
    loss.backward()
    opt.step()
    assert not torch.equal(m.weight.detach().cpu(), w0)


def _tied_lm():
    class TiedLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(16, 8)
            self.ln = nn.LayerNorm(8)
            self.lm_head = nn.Linear(8, 16, bias=False)
            self.lm_head.weight = self.wte.weight

        def forward(self, ids):
            return self.lm_head(self.ln(self.wte(ids)))

    return TiedLM()


@pytest.mark.parametrize("opt_cls", [torch.optim.SGD, torch.optim.AdamW])
def test_tied_weight_model_trains_as_on_cpu(opt_cls):
    torch.manual_seed(0)
    ref = _tied_lm()
    dev = copy.deepcopy(ref)
    kwargs = {"lr": 0.1, "momentum": 0.9} if opt_cls is torch.optim.SGD else {"lr": 0.01}
    ref_opt = opt_cls(ref.parameters(), **kwargs)
    dev_opt = opt_cls(dev.parameters(), **kwargs)  # built before .to(), as users do
    dev.to("openreg")
    assert dev.lm_head.weight is dev.wte.weight
    ids = torch.randint(0, 16, (4, 6))
    for _ in range(5):
        for model, opt, x in ((ref, ref_opt, ids), (dev, dev_opt, ids.to("openreg"))):
            opt.zero_grad()
            logits = model(x)
            loss = nn.functional.cross_entropy(logits.reshape(-1, 16), x.reshape(-1))
            loss.backward()
            opt.step()
    for (name, a), (_, b) in zip(ref.named_parameters(), dev.named_parameters()):
        torch.testing.assert_close(b.detach().cpu(), a.detach(), msg=name)
    assert dev.lm_head.weight is dev.wte.weight
