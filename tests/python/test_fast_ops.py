"""The fast kernels of hot small ops (add/sub/mul/div, relu, mm, addmm) give CPU's exact results, leave
everything unusual to the general op execution with its semantics and errors, and keep stream order.
"""

import pytest
import torch

DEV = "openreg"
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def rand(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(shape, generator=g, dtype=dtype if dtype.is_complex else torch.float32).to(dtype)
    return torch.randint(-5, 6, shape, generator=g, dtype=dtype)


def check(fn, *inputs):
    """fn on openreg copies of `inputs` equals fn on CPU bit for bit, with the same dtype and strides."""
    expected = fn(*inputs)
    actual = fn(*[x.to(DEV) if isinstance(x, torch.Tensor) else x for x in inputs])
    assert actual.device.type == DEV
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    assert actual.stride() == expected.stride()
    torch.testing.assert_close(actual.cpu(), expected, rtol=0, atol=0, equal_nan=True)


BINARY = {
    "add": lambda a, b: a + b,
    "add_alpha": lambda a, b: torch.add(a, b, alpha=2.5),
    "sub": lambda a, b: a - b,
    "sub_alpha": lambda a, b: torch.sub(a, b, alpha=3),
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
}


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("shape", [(1,), (16,), (3, 5), (2, 3, 4)], ids=str)
def test_binary_same_shape(name, shape, dtype):
    check(BINARY[name], rand(*shape, dtype=dtype), rand(*shape, dtype=dtype, seed=1))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("number", [2.5, 3, -1e-3])
def test_python_numbers(dtype, number):
    a = rand(7, dtype=dtype)
    check(lambda x: x + number, a)
    check(lambda x: x - number, a)
    check(lambda x: x * number, a)
    check(lambda x: x / number, a)
    check(lambda x: number * x, a)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_relu(dtype):
    check(lambda x: x.relu(), rand(4, 6, dtype=dtype))
    check(torch.relu, torch.tensor([float("nan"), -0.0, 0.0, -1.0, 2.0], dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_mm(dtype):
    check(torch.mm, rand(5, 7, dtype=dtype), rand(7, 3, dtype=dtype, seed=1))
    check(lambda a, b: a @ b, rand(32, 32, dtype=dtype), rand(32, 32, dtype=dtype, seed=1))


IN_PLACE = {
    "add_": lambda a, b: a.add_(b),
    "add_alpha_": lambda a, b: a.add_(b, alpha=-0.5),
    "sub_": lambda a, b: a.sub_(b, alpha=2),
    "mul_": lambda a, b: a.mul_(b),
    "div_": lambda a, b: a.div_(b),
    "number_": lambda a, b: a.mul_(1.5).add_(2).sub_(3).div_(7),
    "self_": lambda a, b: a.mul_(a),  # the same elements on both sides: allowed
    "broadcast_": lambda a, b: a.add_(b[0]),  # general path
    "promote_": lambda a, b: a.add_(b.double()),  # general path
}


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", sorted(IN_PLACE))
def test_in_place(name, dtype):
    a, b = rand(3, 4, dtype=dtype), rand(3, 4, dtype=dtype, seed=1)
    da, db = a.to(DEV), b.to(DEV)
    expected = IN_PLACE[name](a, b)
    actual = IN_PLACE[name](da, db)
    assert actual is da
    torch.testing.assert_close(da.cpu(), expected, rtol=0, atol=0)
    torch.testing.assert_close(db.cpu(), b, rtol=0, atol=0)


def test_in_place_partial_overlap_is_cpus_error():
    a = torch.arange(8.0, device=DEV)
    with pytest.raises(RuntimeError, match="unsupported operation"):
        a[1:].add_(a[:-1])
    with pytest.raises(RuntimeError, match="result type Float can't be cast"):
        torch.ones(3, dtype=torch.int64, device=DEV).add_(torch.ones(3, device=DEV))


def test_in_place_on_a_view_writes_the_base():
    base = torch.zeros(4, 4, device=DEV)
    base[1].add_(torch.ones(4, device=DEV))
    base[:, 2].mul_(3.0)  # non-contiguous view: general path
    expected = torch.zeros(4, 4)
    expected[1] += 1
    expected[:, 2] *= 3
    assert torch.equal(base.cpu(), expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_addmm_and_linear(dtype):
    x, w = rand(6, 5, dtype=dtype), rand(4, 5, dtype=dtype, seed=1)
    check(torch.nn.functional.linear, x, w, rand(4, dtype=dtype, seed=2))  # addmm(bias, x, w.t())
    check(lambda b, a, m: torch.addmm(b, a, m, beta=0.5, alpha=-2), rand(6, 4, dtype=dtype), x, w.t().contiguous())
    check(lambda b, a, m: torch.addmm(b, a, m, beta=0), torch.full((4,), float("nan"), dtype=dtype), x, w.t())
    check(lambda b, a, m: torch.addmm(b, a, m), rand(1, 4, dtype=dtype), x, w.t())  # broadcast row: general


@pytest.mark.parametrize(
    "fn, inputs",
    [
        (lambda a, b: a + b, (rand(4, 3), rand(3))),  # broadcasting
        (lambda a, b: a + b, (rand(4, 3), rand(4, 3, dtype=torch.float64))),  # promotion
        (lambda a, b: a * b, (rand(4, 3, dtype=torch.int64), rand(4, 3, dtype=torch.int64))),  # integers
        (lambda a, b: a / b, (rand(5, dtype=torch.int32), rand(5, dtype=torch.int32, seed=2) + 6)),  # true division
        (lambda a: a + 2.5, (rand(5, dtype=torch.int64),)),  # int tensor + float number promotes
        (lambda a: a * True, (rand(5),)),  # a bool number
        (lambda a, b: a.t() + b, (rand(3, 4), rand(4, 3))),  # non-contiguous
        (lambda a, b: a[::2] * b, (rand(8), rand(4))),  # strided view
        (lambda a, b: a + b, (rand(0, 3), rand(0, 3))),  # empty
        (lambda a: torch.relu(a), (rand(6, dtype=torch.int32),)),  # integer relu
        (lambda a, b: a.t() @ b, (rand(4, 3), rand(4, 2))),  # transposed mm
        (lambda a, b: a @ b, (rand(3, 0), rand(0, 2))),  # empty inner dimension: zeros
        (lambda a, b: a + b.conj(), (rand(3, dtype=torch.complex64), rand(3, dtype=torch.complex64))),
        (lambda a, b: torch.addmm(a, b, b.t()), (rand(3), rand(3, 4))),
    ],
)
def test_unusual_arguments_take_the_general_path(fn, inputs):
    check(fn, *inputs)


def test_errors_are_cpus():
    a = torch.ones(3, device=DEV)
    with pytest.raises(RuntimeError, match="at least two devices, openreg:0 and openreg:1"):
        a + torch.ones(3, device="openreg:1")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        a * torch.ones(3)
    with pytest.raises(RuntimeError, match="must match the size"):
        a + torch.ones(4, device=DEV)
    with pytest.raises(RuntimeError, match="alpha must not be a complex"):
        torch.add(a, a, alpha=1j)
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        torch.ones(2, 3, device=DEV) @ torch.ones(2, 3, device=DEV)


def test_results_land_on_the_inputs_device():
    a = torch.arange(6.0).to("openreg:1")
    assert torch.openreg.current_device() == 0
    c = a * a + a
    assert c.device == torch.device("openreg:1")
    assert torch.equal(c.cpu(), torch.arange(6.0) ** 2 + torch.arange(6.0))


def test_ops_run_in_stream_order_on_the_current_stream():
    s = torch.openreg.Stream()
    a = torch.full((1000,), 1.0, device=DEV)
    with torch.openreg.stream(s):
        for _ in range(50):
            a = a + 1.0
            a = a * 1.0
        b = (a.view(10, 100) @ torch.ones(100, 10, device=DEV)).relu()
    s.synchronize()
    assert torch.equal(a.cpu(), torch.full((1000,), 51.0))
    assert torch.equal(b.cpu(), torch.full((10, 10), 5100.0))


def test_a_pending_op_keeps_the_geometry_it_was_enqueued_with():
    a = torch.arange(12.0, device=DEV)
    b = torch.ones(12, device=DEV)
    c = a + b
    a.resize_(3, 4)  # a host-side metadata change after enqueue must not reach the pending kernel
    a.t_()
    del b
    assert torch.equal(c.cpu(), torch.arange(12.0) + 1)


def test_outputs_are_independent_of_their_inputs_lifetime():
    results = []
    for i in range(20):
        x = torch.full((64,), float(i), device=DEV)
        results.append((x + x).relu())  # x is freed while the kernels are pending
    torch.openreg.synchronize()
    for i, r in enumerate(results):
        assert torch.equal(r.cpu(), torch.full((64,), 2.0 * i))


def test_autograd_through_the_fast_kernels():
    a = rand(4, 5).requires_grad_()
    b = rand(5, 3, seed=1).requires_grad_()
    da = a.detach().to(DEV).requires_grad_()
    db = b.detach().to(DEV).requires_grad_()
    ((a @ b).relu() * 2 + 1).sum().backward()
    ((da @ db).relu() * 2 + 1).sum().backward()
    torch.testing.assert_close(da.grad.cpu(), a.grad)
    torch.testing.assert_close(db.grad.cpu(), b.grad)
