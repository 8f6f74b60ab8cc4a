"""Autograd on openreg tensors: gradients equal CPU's, through the generic op execution."""

import pytest
import torch

DEV = "openreg"


def leaf(*shape, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(device).requires_grad_()


def grads_on(device, fn, *shapes):
    xs = [leaf(*s, seed=i, device=device) for i, s in enumerate(shapes)]
    out = fn(*xs)
    out.backward()
    return out.detach().cpu(), [x.grad.cpu() for x in xs], [x.grad.device for x in xs]


FUNCTIONS = {
    "mlp": (lambda x, w, b: torch.tanh(x @ w + b).pow(2).mean(), [(4, 5), (5, 3), (3,)]),
    "softmax_ce": (lambda x, w: torch.nn.functional.cross_entropy(x @ w, torch.tensor([0, 2, 1, 0], device=x.device)),
                   [(4, 5), (5, 3)]),
    "conv": (lambda x, w: torch.nn.functional.conv2d(x, w, padding=1).relu().sum(), [(2, 3, 6, 6), (4, 3, 3, 3)]),
    "views": (lambda x: (x.t()[1:] * x.t()[:-1]).sum() + x.diagonal().exp().sum(), [(5, 5)]),
    "indexing": (lambda x: x[torch.tensor([0, 2, 2], device=x.device)].sum() + x[x > 0].sum(), [(4, 3)]),
    "norms": (lambda x: torch.nn.functional.layer_norm(x, (6,)).sum() + x.norm(), [(3, 6)]),
    "reductions": (lambda x: x.max(dim=1).values.sum() + x.logsumexp(0).sum() + x.var(), [(4, 5)]),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_backward_matches_cpu(name):
    fn, shapes = FUNCTIONS[name]
    out_cpu, grads_cpu, _ = grads_on("cpu", fn, *shapes)
    out_dev, grads_dev, devices = grads_on(DEV, fn, *shapes)
    torch.testing.assert_close(out_dev, out_cpu, rtol=1e-4, atol=1e-5)
    for g_dev, g_cpu, d in zip(grads_dev, grads_cpu, devices):
        assert d.type == DEV
        torch.testing.assert_close(g_dev, g_cpu, rtol=1e-4, atol=1e-5)


def test_autograd_grad_and_create_graph():
    for device in ("cpu", DEV):
        x = leaf(3, device=device)
        y = (x ** 3).sum()
        (g,) = torch.autograd.grad(y, x, create_graph=True)
        (gg,) = torch.autograd.grad(g.sum(), x)
        torch.testing.assert_close(g.detach().cpu(), 3 * x.detach().cpu() ** 2)
        torch.testing.assert_close(gg.cpu(), 6 * x.detach().cpu())


def test_retain_graph_accumulates():
    x = leaf(4, device=DEV)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    torch.testing.assert_close(x.grad.cpu(), 4 * x.detach().cpu())
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()


def test_hooks_see_device_gradients():
    x = leaf(3, device=DEV)
    seen = []
    x.register_hook(lambda g: seen.append(g.device) or g * 2)
    y = x * 3
    y.register_hook(lambda g: seen.append(g.device))
    y.sum().backward()
    assert [d.type for d in seen] == [DEV, DEV]
    torch.testing.assert_close(x.grad.cpu(), torch.full((3,), 6.0))


def test_in_place_on_leaf_view_and_version_counter():
    x = leaf(4, device=DEV)
    y = x * 1
    y[1:3].mul_(5)
    y.sum().backward()
    torch.testing.assert_close(x.grad.cpu(), torch.tensor([1.0, 5.0, 5.0, 1.0]))
    z = leaf(3, device=DEV)
    w = z.sigmoid()
    w.add_(1)  # sigmoid's backward needs its output: modified in place
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        w.sum().backward()


def test_backward_on_device_1():
    x = leaf(5, 5, device="openreg:1")
    (x @ x).trace().backward()
    assert x.grad.device == torch.device("openreg:1")
    expected = leaf(5, 5)
    (expected @ expected).trace().backward()
    torch.testing.assert_close(x.grad.cpu(), expected.grad, rtol=1e-5, atol=1e-5)


def test_no_grad_and_detach():
    x = leaf(3, device=DEV)
    with torch.no_grad():
        y = x * 2
    assert not y.requires_grad
    assert not x.detach().requires_grad
