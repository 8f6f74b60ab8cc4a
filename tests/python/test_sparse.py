"""Sparse COO tensors on openreg (issue 28 item 5; Note [Sparse COO on openreg] in backend/ops/Sparse.cpp):
construction, coalesce, to_sparse/to_dense, sparse_mask, torch.sparse.mm/addmm, arithmetic, and sparse
gradients of nn.Embedding(sparse=True) with SGD and SparseAdam match the CPU; the ops sparse training
lives on run asynchronously (sync debug mode "error" does not fire); compressed layouts stay refused."""

import warnings

import pytest
import torch

warnings.filterwarnings("ignore", message="Sparse invariant checks are implicitly disabled")

# Duplicate coordinates (0, 2) twice: an uncoalesced tensor, as autograd and concatenation make them.
INDICES = [[0, 1, 1, 0], [2, 0, 2, 2]]
VALUES = [3.0, 4.0, 5.0, 1.5]


def _pair(dtype=torch.float32, size=(2, 3)):
    cpu = torch.sparse_coo_tensor(torch.tensor(INDICES), torch.tensor(VALUES).to(dtype), size)
    dev = torch.sparse_coo_tensor(torch.tensor(INDICES, device="openreg"), cpu._values().to("openreg"), size)
    return cpu, dev


def _assert_same_sparse(got, expected):
    assert got.is_sparse and got.device.type == "openreg"
    assert got.shape == expected.shape and got.dtype == expected.dtype
    torch.testing.assert_close(got.to_dense().cpu(), expected.to_dense())


@pytest.fixture
def no_sync():
    """Calling it turns on sync debug mode "error" (an op that makes the host wait for the device raises);
    the mode goes back to default after the test."""

    def start():
        torch.openreg.synchronize()
        torch.openreg.set_sync_debug_mode("error")

    yield start
    torch.openreg.set_sync_debug_mode(0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.complex64])
def test_construction_and_to_dense_match_cpu(dtype):
    cpu, dev = _pair(dtype)
    assert dev.layout == torch.sparse_coo and dev.device == torch.device("openreg", 0)
    assert (dev.sparse_dim(), dev.dense_dim(), dev._nnz(), dev.is_coalesced()) == (2, 0, 4, False)
    assert dev._indices().device.type == "openreg" and dev._values().device.type == "openreg"
    assert torch.equal(dev.to_dense().cpu(), cpu.to_dense())  # the duplicates add up


def test_coalesce_matches_cpu():
    cpu, dev = _pair()
    got, expected = dev.coalesce(), cpu.coalesce()
    assert got.is_coalesced() and got.device.type == "openreg"
    assert torch.equal(got._indices().cpu(), expected._indices())
    assert torch.equal(got._values().cpu(), expected._values())


def test_moves_between_host_and_device():
    cpu, dev = _pair()
    back = dev.cpu()
    assert back.is_sparse and back.device.type == "cpu" and torch.equal(back.to_dense(), cpu.to_dense())
    moved = cpu.coalesce().to("openreg:1")
    assert moved.device == torch.device("openreg", 1) and moved.is_coalesced()
    assert torch.equal(moved.to_dense().cpu(), cpu.to_dense())


@pytest.mark.parametrize("sparse_dim", [None, 1])
def test_to_sparse_matches_cpu(sparse_dim):
    x = torch.tensor([[1.0, 0.0, 2.0], [0.0, 0.0, 0.0], [0.0, 3.0, 0.0]])
    args = () if sparse_dim is None else (sparse_dim,)
    got, expected = x.to("openreg").to_sparse(*args), x.to_sparse(*args)
    assert got.is_coalesced() == expected.is_coalesced() and got.sparse_dim() == expected.sparse_dim()
    assert torch.equal(got._indices().cpu(), expected._indices())
    assert torch.equal(got._values().cpu(), expected._values())


@pytest.mark.parametrize("coalesced", [False, True])
def test_sparse_mask_matches_cpu(coalesced):
    cpu, dev = _pair()
    if coalesced:
        cpu, dev = cpu.coalesce(), dev.coalesce()
    x = torch.randn(2, 3)
    got, expected = x.to("openreg").sparse_mask(dev), x.sparse_mask(cpu)
    assert got.is_coalesced() == expected.is_coalesced()
    assert torch.equal(got._indices().cpu(), expected._indices())
    assert torch.equal(got._values().cpu(), expected._values())


@pytest.mark.parametrize("beta, alpha", [(1, 1), (0.5, 2.0), (0, 1)])
def test_addmm_and_mm_match_cpu(beta, alpha):
    cpu, dev = _pair(torch.float64)
    dense = torch.randn(3, 4, dtype=torch.float64)
    bias = torch.randn(2, 4, dtype=torch.float64)
    bias[0, 0] = float("nan")  # beta 0 ignores it, as on CPU
    got = torch.addmm(bias.to("openreg"), dev, dense.to("openreg"), beta=beta, alpha=alpha)
    torch.testing.assert_close(got.cpu(), torch.addmm(bias, cpu, dense, beta=beta, alpha=alpha), equal_nan=True)
    torch.testing.assert_close(torch.sparse.mm(dev, dense.to("openreg")).cpu(), torch.sparse.mm(cpu, dense))


def test_sparse_mm_backward_matches_cpu():
    grads = []
    dense = torch.randn(3, 4)
    for device in ("cpu", "openreg"):
        s = _pair()[0].to(device).requires_grad_()
        d = dense.detach().to(device).requires_grad_()
        torch.sparse.mm(s, d).square().sum().backward()
        assert s.grad.is_sparse and s.grad.device.type == device
        grads.append((s.grad.to_dense().cpu(), d.grad.cpu()))
    torch.testing.assert_close(grads[1], grads[0])


ARITHMETIC = {
    "dense + sparse": lambda x, s: x + s,
    "dense - sparse": lambda x, s: x - s,
    "dense.add_(sparse, alpha)": lambda x, s: x.clone().add_(s, alpha=-2),
    "dense.sub_(sparse)": lambda x, s: x.clone().sub_(s),
    "sparse + sparse": lambda x, s: s + s * 2,
    "sparse.add_(sparse)": lambda x, s: s.clone().add_(s),
    "sparse - sparse": lambda x, s: s - s.coalesce(),
    "sparse * scalar": lambda x, s: s * 3,
    "sparse.mul_(scalar)": lambda x, s: s.clone().mul_(-1.5),
    "sparse / scalar": lambda x, s: s / 4,
    "sparse.div_(0-d tensor)": lambda x, s: s.clone().div_(torch.tensor(2.0, device=s.device)),
    "sparse.sum()": lambda x, s: s.sum(),
    "sparse.clone()": lambda x, s: s.clone(),
    "sparse.t()": lambda x, s: s.t(),
    # Elementwise ops with f(0) = 0 on the values: CPU coalesces first (not for neg, which is linear).
    "sparse.sqrt()": lambda x, s: s.abs().sqrt(),
    "sparse.sin() uncoalesced": lambda x, s: s.sin(),
    "sparse.sin() coalesced": lambda x, s: s.coalesce().sin(),
    "sparse.neg()": lambda x, s: s.neg(),
    "sparse.sqrt_() coalesced": lambda x, s: s.coalesce().sqrt_(),
    "sparse.isnan()": lambda x, s: (s / 0).coalesce().isnan(),
    "sparse.nan_to_num()": lambda x, s: (s / 0).coalesce().nan_to_num(posinf=7.0),
    # Ops without a kernel of openreg's own run CPU's kernel on a host copy.
    "sparse.neg_()": lambda x, s: s.clone().neg_(),
    "torch.sparse.sum(dim)": lambda x, s: torch.sparse.sum(s, dim=1),
    "index_select": lambda x, s: s.index_select(1, torch.tensor([2, 0], device=s.device)),
}


@pytest.mark.parametrize("name", sorted(ARITHMETIC))
def test_arithmetic_matches_cpu(name):
    cpu, dev = _pair()
    x = torch.randn(2, 3)
    expected = ARITHMETIC[name](x, cpu)
    got = ARITHMETIC[name](x.to("openreg"), dev)
    assert got.layout == expected.layout and got.device.type == "openreg"
    if expected.is_sparse:
        _assert_same_sparse(got, expected)
    else:
        torch.testing.assert_close(got.cpu(), expected)


def test_in_place_ops_write_the_tensor_itself():
    cpu, dev = _pair()
    same = dev.add_(dev)
    assert same is dev and dev._nnz() == 8  # CUDA's concatenation: uncoalesced, no host round trip
    dev.neg_()  # CPU's kernel on a host copy, written back into dev
    torch.testing.assert_close(dev.to_dense().cpu(), -2 * cpu.to_dense())


def _train(device, make_optimizer, steps=4):
    torch.manual_seed(0)
    emb = torch.nn.Embedding(10, 4, sparse=True).to(device)
    head = torch.nn.Linear(4, 1).to(device)
    opt = make_optimizer(emb.parameters())
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        idx = torch.randint(0, 10, (3, 5), generator=g).to(device)
        opt.zero_grad()
        head(emb(idx)).square().mean().backward()
        assert emb.weight.grad.is_sparse and emb.weight.grad.device.type == device
        opt.step()
    return emb.weight.detach().cpu()


OPTIMIZERS = {
    "SGD": lambda p: torch.optim.SGD(p, lr=0.1),
    "SGD momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
    "SparseAdam": lambda p: torch.optim.SparseAdam(list(p), lr=0.1),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_embedding_sparse_gradients_train_as_on_cpu(name):
    torch.testing.assert_close(_train("openreg", OPTIMIZERS[name]), _train("cpu", OPTIMIZERS[name]))


def _embedding_bag_grad(device, mode, per_sample_weights, include_last_offset, padding_idx):
    torch.manual_seed(0)
    bag = torch.nn.EmbeddingBag(
        10, 3, mode=mode, sparse=True, include_last_offset=include_last_offset, padding_idx=padding_idx
    ).to(device)
    x = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9], device=device)
    offsets = torch.tensor([0, 4, 8] if include_last_offset else [0, 4], device=device)
    weights = torch.rand(8, generator=torch.Generator().manual_seed(1)).to(device) if per_sample_weights else None
    out = bag(x, offsets, per_sample_weights=weights)
    (out * torch.arange(out.numel(), dtype=out.dtype, device=device).reshape(out.shape)).sum().backward()
    assert bag.weight.grad.is_sparse and bag.weight.grad.device.type == device
    return bag.weight.grad.to_dense().cpu()


@pytest.mark.parametrize("padding_idx", [None, 2])
@pytest.mark.parametrize("include_last_offset", [False, True])
@pytest.mark.parametrize("mode, per_sample_weights", [("sum", False), ("sum", True), ("mean", False)])
def test_embedding_bag_sparse_gradient_matches_cpu(mode, per_sample_weights, include_last_offset, padding_idx):
    """_embedding_bag_backward(sparse=True) made a sparse CPU result the device could not take ("copy_()
    between dense and sparse Tensors"), reported at the next synchronize."""
    args = (mode, per_sample_weights, include_last_offset, padding_idx)
    torch.testing.assert_close(_embedding_bag_grad("openreg", *args), _embedding_bag_grad("cpu", *args))


ASYNC = {
    "construct": lambda i, v, x, d: torch.sparse_coo_tensor(i, v, (2, 3)),
    "to_dense": lambda i, v, x, d: torch.sparse_coo_tensor(i, v, (2, 3)).to_dense(),
    "sparse.mm": lambda i, v, x, d: torch.sparse.mm(torch.sparse_coo_tensor(i, v, (2, 3)), d),
    "addmm": lambda i, v, x, d: torch.addmm(x[:, :1], torch.sparse_coo_tensor(i, v, (2, 3)), d),
    "sparse_mask": lambda i, v, x, d: x.sparse_mask(torch.sparse_coo_tensor(i, v, (2, 3))),
    "dense.add_(sparse)": lambda i, v, x, d: x.add_(torch.sparse_coo_tensor(i, v, (2, 3))),
    "sparse + sparse": lambda i, v, x, d: torch.sparse_coo_tensor(i, v, (2, 3)) * 2 + torch.sparse_coo_tensor(
        i, v, (2, 3)
    ),
    "sum": lambda i, v, x, d: torch.sparse_coo_tensor(i, v, (2, 3)).sum(),
    "neg": lambda i, v, x, d: torch.sparse_coo_tensor(i, v, (2, 3)).neg(),
    "sqrt of a coalesced tensor": lambda i, v, x, d: torch.sparse_coo_tensor(
        i[:, 1:3], v[1:3], (2, 3), is_coalesced=True
    ).sqrt(),
}


@pytest.mark.parametrize("name", sorted(ASYNC))
def test_sparse_ops_run_asynchronously(name, no_sync):
    i = torch.tensor(INDICES).to("openreg")
    v = torch.tensor(VALUES).to("openreg")
    x = torch.randn(2, 3).to("openreg")
    d = torch.randn(3, 4).to("openreg")
    no_sync()
    ASYNC[name](i, v, x, d)  # raises "called a synchronizing openreg operation" if the host waits


def test_an_embedding_step_with_sgd_runs_asynchronously(no_sync):
    emb = torch.nn.Embedding(10, 4, sparse=True).to("openreg")
    opt = torch.optim.SGD(emb.parameters(), lr=0.1)
    idx = torch.randint(0, 10, (3, 5)).to("openreg")
    no_sync()
    for _ in range(2):  # the second step accumulates into the first's gradient
        emb(idx).sum().backward()
        opt.step()


def test_coalesce_synchronizes_as_on_cuda(no_sync):
    """Its nnz depends on the indices, which the host must read (CUDA's coalesce synchronizes too)."""
    i = torch.tensor(INDICES).to("openreg")
    v = torch.tensor(VALUES).to("openreg")
    no_sync()
    with pytest.raises(RuntimeError, match="called a synchronizing openreg operation"):
        torch.sparse_coo_tensor(i, v, (2, 3)).coalesce()


ERRORS = {
    "add(sparse, dense)": lambda s, x: s + x,
    "mm shapes": lambda s, x: torch.sparse.mm(s, x),
    "sparse_mask sizes": lambda s, x: x.t().sparse_mask(s),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_errors_match_cpu(name):
    cpu, dev = _pair()
    x = torch.randn(2, 3)
    with pytest.raises(RuntimeError) as expected:
        ERRORS[name](cpu, x)
    with pytest.raises(RuntimeError) as got:
        ERRORS[name](dev, x.to("openreg"))
    assert str(got.value).split("\n")[0] == str(expected.value).split("\n")[0]
    assert torch.equal(dev.to_dense().cpu(), cpu.to_dense())  # the device keeps working


def test_a_cpu_operand_is_refused_as_for_dense_ops():
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.randn(3, device="openreg") + torch.randn(3).to_sparse()
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.randn(3).to_sparse().to("openreg").mul(torch.randn(3).to_sparse())


COMPRESSED = {
    "to_sparse_csr": lambda: torch.eye(3, device="openreg").to_sparse_csr(),
    "coo to_sparse_csr": lambda: torch.eye(3).to_sparse().to("openreg").to_sparse_csr(),
    "to_sparse(layout=bsr)": lambda: torch.eye(4, device="openreg").to_sparse(
        layout=torch.sparse_bsr, blocksize=(2, 2)
    ),
}


@pytest.mark.parametrize("name", sorted(COMPRESSED))
def test_compressed_layouts_are_refused_at_the_call(name):
    with pytest.raises(NotImplementedError, match="no sparse compressed ones"):
        COMPRESSED[name]()
    assert torch.equal(torch.ones(2, device="openreg").cpu(), torch.ones(2))
