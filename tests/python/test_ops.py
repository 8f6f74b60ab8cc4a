"""ATen ops on openreg tensors give CPU's results, errors and warnings, and run asynchronously.

Every op below goes through openreg's general op execution (or an explicit openreg kernel): the result is
compared with the same op on CPU.
"""

import warnings

import pytest
import torch

DEV = "openreg"


def rand(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g, dtype=dtype)
    return torch.randint(-5, 6, shape, generator=g, dtype=dtype)


def assert_same(actual, expected, **tol):
    """openreg result(s) equal the CPU result(s): same type/shape/dtype, values within tolerance."""
    if isinstance(expected, (tuple, list)):
        assert isinstance(actual, (tuple, list)) and len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_same(a, e, **tol)
        return
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor)
        assert actual.device.type == DEV, actual.device
        torch.testing.assert_close(actual.cpu(), expected, **tol)
        return
    assert actual == expected


def on_both(fn, *inputs):
    """fn applied to CPU inputs and to their openreg copies."""
    expected = fn(*inputs)
    actual = fn(*[x.to(DEV) if isinstance(x, torch.Tensor) else x for x in inputs])
    return actual, expected


# --- elementwise -----------------------------------------------------------------------------------

ELEMENTWISE = {
    "add": lambda a, b: a + b,
    "add_alpha": lambda a, b: torch.add(a, b, alpha=2.5),
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "floor_divide": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "pow": lambda a, b: a.abs().pow(b),
    "maximum": torch.maximum,
    "atan2": torch.atan2,
    "where": lambda a, b: torch.where(a > b, a, b),
    "lerp": lambda a, b: torch.lerp(a, b, 0.3),
    "relu": lambda a, b: torch.relu(a),
    "sigmoid": lambda a, b: torch.sigmoid(a),
    "tanh": lambda a, b: torch.tanh(a),
    "exp": lambda a, b: torch.exp(a),
    "log_abs": lambda a, b: torch.log(a.abs() + 1),
    "gelu": lambda a, b: torch.nn.functional.gelu(a),
    "clamp": lambda a, b: torch.clamp(a, -0.5, 0.5),
    "eq": lambda a, b: a == b,
    "logical_and": lambda a, b: torch.logical_and(a > 0, b > 0),
}


@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
@pytest.mark.parametrize("shape", [(), (1,), (7,), (33, 17), (2, 3, 4, 5)])
def test_elementwise_matches_cpu(name, shape):
    a, b = rand(*shape, seed=1), rand(*shape, seed=2)
    assert_same(*on_both(ELEMENTWISE[name], a, b))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64])
def test_elementwise_dtypes(dtype):
    a, b = rand(4, 5, dtype=dtype, seed=1), rand(4, 5, dtype=dtype, seed=2)
    assert_same(*on_both(lambda x, y: x * y + x, a, b))


def test_broadcasting_and_type_promotion():
    a = rand(3, 1, 5)
    b = rand(4, 1, dtype=torch.int64)
    actual, expected = on_both(lambda x, y: x + y, a, b)
    assert actual.dtype == expected.dtype == torch.float32
    assert_same(actual, expected)


def test_non_contiguous_inputs():
    base = rand(8, 10)
    ops = [
        lambda x: x.t() * 2,
        lambda x: x[::2, 1::3].exp(),
        lambda x: x.t()[1:5] + x[::2, :8],
        lambda x: x.unsqueeze(0).expand(3, 8, 10).sum(0),
    ]
    for op in ops:
        assert_same(*on_both(op, base))


def test_channels_last_layout_is_kept():
    x = rand(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)
    actual, expected = on_both(lambda t: t * 2, x)
    assert actual.stride() == expected.stride()
    assert_same(actual, expected)


# --- reductions ------------------------------------------------------------------------------------

REDUCTIONS = {
    "sum": lambda x: x.sum(),
    "sum_dim": lambda x: x.sum(dim=1, keepdim=True),
    "mean": lambda x: x.mean(dim=(0, 2)),
    "max_dim": lambda x: x.max(dim=1),
    "min": lambda x: x.min(),
    "argmax": lambda x: x.argmax(dim=2),
    "var": lambda x: x.var(dim=0),
    "std_mean": lambda x: torch.std_mean(x, dim=1),
    "prod": lambda x: x.prod(dim=-1),
    "norm": lambda x: x.norm(),
    "logsumexp": lambda x: x.logsumexp(dim=1),
    "cumsum": lambda x: x.cumsum(dim=1),
    "softmax": lambda x: x.softmax(dim=-1),
    "log_softmax": lambda x: x.log_softmax(dim=0),
    "sort": lambda x: x.sort(dim=1),
    "topk": lambda x: x.topk(2, dim=-1),
    "any": lambda x: (x > 1).any(dim=0),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reductions_match_cpu(name):
    assert_same(*on_both(REDUCTIONS[name], rand(4, 5, 6)), rtol=1e-5, atol=1e-5)


# --- matmul ----------------------------------------------------------------------------------------

def test_matmul_family():
    a, b, c = rand(5, 7, seed=1), rand(7, 3, seed=2), rand(5, 3, seed=3)
    assert_same(*on_both(torch.mm, a, b))
    assert_same(*on_both(lambda x, y, z: torch.addmm(z, x, y, beta=0.5, alpha=2.0), a, b, c))
    assert_same(*on_both(torch.matmul, rand(2, 5, 7), rand(7, 3)))
    assert_same(*on_both(torch.bmm, rand(4, 5, 7), rand(4, 7, 3)))
    assert_same(*on_both(torch.nn.functional.linear, rand(6, 7), rand(3, 7), rand(3)))
    assert_same(*on_both(lambda x, y: torch.einsum("ij,jk->ik", x, y), a, b))
    assert_same(*on_both(lambda x, y: x @ y.t(), a, rand(3, 7)))


def test_conv_and_pool():
    x, w, bias = rand(2, 3, 9, 9, seed=1), rand(4, 3, 3, 3, seed=2), rand(4, seed=3)
    assert_same(*on_both(lambda *t: torch.nn.functional.conv2d(*t, padding=1, stride=2), x, w, bias),
                rtol=1e-4, atol=1e-4)
    assert_same(*on_both(lambda t: torch.nn.functional.max_pool2d(t, 2), x))
    assert_same(*on_both(lambda t: torch.nn.functional.adaptive_avg_pool2d(t, 1), x))


def test_normalization():
    x = rand(4, 3, 5, 5)
    w, b = rand(3, seed=4), rand(3, seed=5)
    assert_same(*on_both(lambda t, ww, bb: torch.nn.functional.batch_norm(t, None, None, ww, bb, training=True),
                         x, w, b),
                rtol=1e-5, atol=1e-5)
    # Optional tensors given as None.
    assert_same(*on_both(lambda t: torch.nn.functional.layer_norm(t, (5, 5)), x), rtol=1e-5, atol=1e-5)
    assert_same(*on_both(lambda t: torch.nn.functional.group_norm(t, 1), x), rtol=1e-5, atol=1e-5)


def test_batch_norm_updates_running_stats_in_place():
    x = rand(8, 3)
    stats = {}
    for dev in ("cpu", DEV):
        mean, var = torch.zeros(3, device=dev), torch.ones(3, device=dev)
        torch.nn.functional.batch_norm(x.to(dev), mean, var, training=True, momentum=0.5)
        stats[dev] = (mean, var)
    assert_same(stats[DEV], stats["cpu"])


def test_batch_norm_eval_mode_saves_no_statistics_like_cpu():
    x = rand(4, 3, 5)
    mean, var = torch.zeros(3), torch.ones(3)
    actual, expected = on_both(lambda t, m, v: torch.ops.aten.native_batch_norm(t, None, None, m, v, False, 0.1, 1e-5),
                               x, mean, var)
    assert [t.shape for t in actual] == [t.shape for t in expected]
    assert_same(actual, expected)


def test_losses_whose_out_kernels_resize_internally():
    # huber_loss.out / binary_cross_entropy.out resize their output on the way to the reduction.
    x, y = rand(4, 5, seed=1), rand(4, 5, seed=3)
    for _ in range(2):  # the second call takes the path the first one chose
        assert_same(*on_both(lambda a, b: torch.nn.functional.huber_loss(a, b), x, y))
        assert_same(*on_both(lambda a, b: torch.nn.functional.binary_cross_entropy(a.sigmoid(), b.sigmoid()), x, y))


def test_kernels_choosing_padded_output_strides():
    a, b = rand(5, 3, seed=1), rand(5, 2, seed=2)
    actual, expected = on_both(lambda p, q: torch.linalg.lstsq(p, q).solution, a, b)
    assert_same(actual, expected, rtol=1e-4, atol=1e-5)


# --- indexing --------------------------------------------------------------------------------------

def test_indexing():
    x = rand(6, 5)
    idx = torch.tensor([4, 0, 2])
    assert_same(*on_both(lambda t, i: t[i], x, idx))
    assert_same(*on_both(lambda t, i: t[:, i], x, idx))
    assert_same(*on_both(lambda t, i: t.index_select(1, i), x, idx))
    assert_same(*on_both(lambda t, i: t.gather(0, i.view(1, 3).expand(2, 3)), x, idx))
    assert_same(*on_both(lambda t: t.masked_fill(t > 0, -1.0), x))
    assert_same(*on_both(lambda t: torch.take(t, torch.tensor([0, 7, 29], device=t.device)), x))


def test_cpu_index_tensor_is_allowed_like_cuda():
    x = rand(6, 5)
    idx = torch.tensor([1, 3])
    actual = x.to(DEV)[idx]  # CPU index on a device tensor
    assert_same(actual, x[idx])


def test_index_put_and_scatter_in_place():
    def fn(t, i, v):
        t = t.clone()
        t[i] = v
        t.index_put_((i,), v, accumulate=True)
        t.scatter_add_(0, i.view(-1, 1).expand(-1, 5), v)
        return t

    assert_same(*on_both(fn, rand(6, 5), torch.tensor([4, 1]), rand(2, 5, seed=7)))


# --- in-place, out=, views -------------------------------------------------------------------------

def test_in_place_ops_write_the_tensor():
    x = rand(4, 4)
    d = x.to(DEV)
    ptr = d.data_ptr()
    d.add_(1).mul_(2).clamp_(max=3)
    assert d.data_ptr() == ptr
    assert_same(d, x.add(1).mul(2).clamp(max=3))


def test_in_place_on_views_updates_the_base():
    x = rand(5, 6)
    d = x.to(DEV)
    d.t()[1:3].zero_()
    d[::2, ::3].sub_(1)
    d.diagonal().fill_(7)
    x.t()[1:3].zero_()
    x[::2, ::3].sub_(1)
    x.diagonal().fill_(7)
    assert_same(d, x)


def test_views_of_views_share_storage():
    d = torch.arange(24.0, device=DEV)
    v = d.view(4, 6).t()[2:].unfold(1, 2, 1)
    assert v.untyped_storage().data_ptr() == d.untyped_storage().data_ptr()
    expected = torch.arange(24.0).view(4, 6).t()[2:].unfold(1, 2, 1)
    assert v.shape == expected.shape and v.stride() == expected.stride()
    assert_same(v, expected)
    assert_same(torch.view_as_real(torch.ones(3, dtype=torch.complex64, device=DEV)),
                torch.view_as_real(torch.ones(3, dtype=torch.complex64)))


def test_out_argument():
    a, b = rand(3, 4, seed=1), rand(3, 4, seed=2)
    out = torch.empty(3, 4, device=DEV)
    ptr = out.data_ptr()
    r = torch.add(a.to(DEV), b.to(DEV), out=out)
    assert r is out and out.data_ptr() == ptr
    assert_same(out, a + b)
    vals, idxs = torch.empty(0, device=DEV), torch.empty(0, dtype=torch.long, device=DEV)
    torch.max(a.to(DEV), dim=1, out=(vals, idxs))
    assert_same((vals, idxs), tuple(a.max(dim=1)))


def test_out_argument_is_resized_with_cpus_warning():
    a = rand(3, 4)
    out = torch.empty(5, device=DEV)
    with pytest.warns(UserWarning, match="resized"):
        torch.mul(a.to(DEV), 2, out=out)
    assert out.shape == (3, 4)
    assert_same(out, a * 2)


@pytest.mark.parametrize("loss", ["mse_loss", "smooth_l1_loss"])
def test_reducing_losses_warn_nothing_cpu_does_not(loss):
    # These losses reached the device through PyTorch's composite of their out= kernel, which resized
    # the reduced output and warned on the first call of each shape; CPU (and CUDA) warn nothing.
    fn = getattr(torch.nn.functional, loss)
    a, b = rand(7, 5), rand(7, 5)  # a shape no other test uses: the first call of its signature
    da = a.to(DEV).requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = fn(da, b.to(DEV))
        result.backward()
    ca = a.clone().requires_grad_()
    expected = fn(ca, b)
    expected.backward()
    assert_same(result.detach(), expected.detach())
    assert_same(da.grad, ca.grad)


def test_self_overlap_is_rejected_like_cpu():
    x = torch.arange(6.0)
    with pytest.raises(RuntimeError) as cpu_error:
        torch.add(x[:4], 1, out=x[2:])
    d = torch.arange(6.0, device=DEV)
    with pytest.raises(RuntimeError) as dev_error:
        torch.add(d[:4], 1, out=d[2:])
    assert str(dev_error.value) == str(cpu_error.value)


def test_zero_dim_cpu_scalars_mix_in():
    x = rand(3, 4)
    s = torch.tensor(2.5)
    assert_same(*on_both(lambda t: t * s, x))
    assert_same(*on_both(lambda t: torch.where(t > 0, t, torch.tensor(0.0)), x))
    # Python numbers keep their weak type: an int tensor times 2.5 is float32, not float64.
    i = torch.arange(4, device=DEV)
    assert (i * 2.5).dtype == torch.float32


def test_foreach_ops():
    xs = [rand(3, seed=i) for i in range(4)]
    ys = [rand(3, seed=10 + i) for i in range(4)]
    dx = [x.to(DEV) for x in xs]
    dy = [y.to(DEV) for y in ys]
    assert_same(torch._foreach_add(dx, dy), torch._foreach_add(xs, ys))
    assert_same(torch._foreach_mul(dx, 3.0), torch._foreach_mul(xs, 3.0))
    torch._foreach_addcmul_(dx, dy, dy, value=0.5)
    torch._foreach_addcmul_(xs, ys, ys, value=0.5)
    assert_same(dx, xs)
    assert_same(torch._foreach_norm(dx), torch._foreach_norm(xs))


# --- data-dependent shapes and host values ---------------------------------------------------------

def test_data_dependent_ops():
    x = torch.tensor([[0.0, 1.5, 0.0], [2.0, 0.0, -1.0]])
    assert_same(*on_both(torch.nonzero, x))
    assert_same(*on_both(lambda t: t[t > 0], x))
    assert_same(*on_both(lambda t: torch.masked_select(t, t != 0), x))
    assert_same(*on_both(lambda t: torch.unique(t, return_counts=True), x))
    assert_same(*on_both(lambda t: torch.unique_consecutive(t.flatten(), return_inverse=True), x))
    assert_same(*on_both(lambda r: torch.repeat_interleave(r), torch.tensor([1, 0, 3])))


def test_ops_returning_python_values():
    x = rand(3, 3)
    d = x.to(DEV)
    assert torch.equal(d, x.to(DEV)) is True
    assert torch.equal(d, (x + 1).to(DEV)) is False
    assert torch.allclose(d, d + 1e-9)
    assert bool(d.sum() > -100) is True
    assert d.max().item() == x.max().item()


def test_result_of_pending_work_is_visible_to_host_reads():
    d = torch.zeros(256, 256, device=DEV)
    for _ in range(20):
        d.add_(1)
    assert d.sum().item() == 20 * 256 * 256
    assert torch.nonzero(d - 20).numel() == 0


# --- errors ----------------------------------------------------------------------------------------

def test_mixed_devices_raise_like_cuda():
    a = torch.ones(3, device="openreg:0")
    b = torch.ones(3, device="openreg:1")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device, but found at least "
                                           "two devices, openreg:0 and openreg:1!"):
        a + b
    with pytest.raises(RuntimeError, match="found at least two devices, openreg:0 and cpu!"):
        a + torch.ones(3)
    with pytest.raises(RuntimeError, match="same device"):
        torch.mm(torch.ones(2, 2, device="openreg:1"), torch.ones(2, 2))


def test_work_on_device_1_runs_there():
    x = rand(16, 16)
    d = x.to("openreg:1")
    r = (d @ d).relu()
    assert r.device == torch.device("openreg:1")
    assert_same(r, (x @ x).relu())


@pytest.mark.parametrize(
    "fn",
    [
        lambda dev: torch.add(torch.ones(2, dtype=torch.int64, device=dev), 1.5,
                              out=torch.empty(2, dtype=torch.int64, device=dev)),
        lambda dev: torch.ones(2, 3, device=dev) @ torch.ones(2, 3, device=dev),
        lambda dev: torch.ones(2, 3, device=dev) + torch.ones(4, device=dev),
        lambda dev: torch.ones(2, dtype=torch.int64, device=dev).add_(1.5),
        lambda dev: torch.ones(2, 2, device=dev).view(-1, 3),
        lambda dev: torch.ones(2, 2, device=dev).expand(3, 2, 2).add_(1),
    ],
    ids=["out_dtype", "mm_shapes", "broadcast", "inplace_dtype", "view", "internal_overlap"],
)
def test_errors_match_cpu(fn):
    with pytest.raises(Exception) as cpu_error:
        fn("cpu")
    with pytest.raises(Exception) as dev_error:
        fn(DEV)
        torch.openreg.synchronize()
    assert type(dev_error.value) is type(cpu_error.value)
    assert str(cpu_error.value).splitlines()[0] in str(dev_error.value)


def test_data_errors_surface_at_the_next_synchronization():
    # An out-of-range index is found only when the kernel reads it: like CUDA's device-side assert, the
    # error is raised by the next synchronizing call, with the kernel's name and CPU's message.
    bad = torch.ones(3, device=DEV)[torch.tensor([5], device=DEV)]
    with pytest.raises(RuntimeError, match="index 5 is out of bounds for dimension 0 with size 3") as e:
        torch.openreg.synchronize()
    assert "aten::index" in str(e.value)
    assert "frame #" not in str(e.value)
    del bad
    # The device keeps working afterwards.
    assert (torch.ones(2, device=DEV) * 2).sum().item() == 4


def test_exit_with_pending_work_is_clean(run_python, check_ok):
    # Work items may hold the last reference to device memory when the interpreter exits; releasing it
    # on a device thread must not need the GIL.
    check_ok(run_python("""
        import torch
        import torch_openreg
        x = torch.randn(256, 256, device="openreg")
        for _ in range(50):
            x = (x @ x).tanh()
    """))


# --- randomness ------------------------------------------------------------------------------------

def test_random_ops_follow_the_seed():
    def draw():
        x = torch.empty(1000, device=DEV)
        return torch.cat([
            torch.randn(100, device=DEV), x.uniform_(-1, 1)[:100], torch.rand(100, device=DEV),
            torch.nn.functional.dropout(torch.ones(100, device=DEV), 0.5),
            torch.randint(0, 10, (100,), device=DEV).float(), torch.randperm(100, device=DEV).float(),
            torch.multinomial(torch.ones(10, device=DEV), 100, replacement=True).float(),
        ]).cpu()

    torch.openreg.manual_seed(123)
    first = draw()
    torch.openreg.manual_seed(123)
    second = draw()
    assert torch.equal(first, second)
    torch.openreg.manual_seed(124)
    assert not torch.equal(first, draw())


def test_explicit_generator_and_streams_do_not_change_values():
    g = torch.Generator(device=DEV).manual_seed(7)
    a = torch.randn(1000, device=DEV, generator=g)
    g.manual_seed(7)
    s = torch.openreg.Stream()
    with torch.openreg.stream(s):
        b = torch.randn(1000, device=DEV, generator=g)
    s.synchronize()
    assert torch.equal(a.cpu(), b.cpu())


def test_dropout_mask_is_consistent():
    torch.openreg.manual_seed(0)
    x = torch.ones(1000, device=DEV)
    y = torch.nn.functional.dropout(x, p=0.25)
    values = set(y.cpu().unique().tolist())
    assert values <= {0.0, torch.tensor(1.0 / 0.75).item()}
    kept = (y != 0).float().mean().item()
    assert 0.65 < kept < 0.85


# --- asynchrony ------------------------------------------------------------------------------------

def test_large_mm_returns_before_it_finishes():
    a = torch.randn(1024, 1024, device=DEV)
    b = torch.randn(1024, 1024, device=DEV)
    torch.openreg.synchronize()
    seen_pending = False
    for _ in range(5):
        c = a @ b
        done = torch.Event(device=DEV)
        done.record()
        if not done.query():
            seen_pending = True
        done.synchronize()
        assert done.query()
        if seen_pending:
            break
    assert seen_pending, "every mm had finished when its call returned: ops do not run asynchronously"
    torch.testing.assert_close(c.cpu(), a.cpu() @ b.cpu(), rtol=1e-4, atol=1e-3)


def test_ops_on_two_streams_respect_events():
    x = torch.zeros(512, 512, device=DEV)
    s = torch.openreg.Stream()
    x.add_(1)
    s.wait_stream(torch.openreg.current_stream())
    with torch.openreg.stream(s):
        y = x * 2
    torch.openreg.current_stream().wait_stream(s)
    assert y.sum().item() == 2 * 512 * 512


def test_pending_general_path_ops_keep_their_enqueued_geometry():
    """The general path's items build their CPU aliases on the device thread from the geometry taken
    at enqueue: host-side metadata changes afterwards must not reach them, and views of one storage
    must still share memory there."""
    dev = "openreg"
    busy = torch.ones(512, 512, device=dev)
    a = torch.arange(12.0, device=dev)
    b = torch.arange(12.0, device=dev).flip(0)
    for _ in range(4):
        busy = busy @ busy / 512  # keeps the stream busy while the ops below are queued
    s = a.sigmoid()
    m = torch.addcmul(a, a.view(3, 4)[:, 1:3].reshape(-1).repeat(2)[:12], b)
    w = torch.where(a > 5, a, b)
    shared = torch.addcmul(a[:6], a[6:], a[:6])  # three views of one storage
    a.resize_(3, 4)
    a.t_()
    b.resize_(2, 6)
    del b
    ref_a = torch.arange(12.0)
    ref_b = ref_a.flip(0)
    assert torch.allclose(s.cpu(), ref_a.sigmoid())
    assert torch.equal(m.cpu(), torch.addcmul(ref_a, ref_a.view(3, 4)[:, 1:3].reshape(-1).repeat(2)[:12], ref_b))
    assert torch.equal(w.cpu(), torch.where(ref_a > 5, ref_a, ref_b))
    assert torch.equal(shared.cpu(), torch.addcmul(ref_a[:6], ref_a[6:], ref_a[:6]))


def test_list_arguments_travel_as_recipes_and_keep_sharing_storage():
    """Note [Work items hold CPU aliases, not tensors]: tensors inside list arguments (cat, stack, index,
    index_put_) are rebuilt on the device thread like single tensors, over one storage table, so list
    elements that share memory with each other or with other arguments share it in the CPU kernel."""
    torch.manual_seed(0)
    c = torch.randn(5, 5)
    d = c.to("openreg")
    ci = torch.tensor([4, 0, 2])
    di = ci.to("openreg")
    cases = [
        (lambda t, i: torch.cat([t, t, t[1:]]), "cat of one storage"),
        (lambda t, i: torch.stack([t, t.t(), t[1:].repeat(2, 1)[:5]]), "stack of views"),
        (lambda t, i: t[:, i], "index with a None in the index list"),
        (lambda t, i: t[i, i], "index list of one storage"),
        (lambda t, i: t.clone().index_put_((i,), t[0], accumulate=True), "index_put_ with a list index"),
    ]
    for fn, what in cases:
        assert torch.equal(fn(d, di).cpu(), fn(c, ci)), what


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_adaptive_max_pool_backward_matches_cpu(dims):
    """The 3d backward used to kill the process: the coverage probe ran CPU's kernel on expanded index
    stand-ins, which that kernel reads as dense (Note [Probing CPU kernels for the argument types])."""
    pool = getattr(torch.nn.functional, f"adaptive_max_pool{dims}d")
    x = torch.randn(1, 2, *([4] * dims))
    grads = []
    for device in ("cpu", "openreg"):
        xd = x.detach().clone().to(device).requires_grad_()
        pool(xd, 2).sum().backward()
        grads.append(xd.grad.cpu())
    assert torch.equal(grads[0], grads[1])


def test_indexing_through_a_uint8_mask_warns_as_often_as_on_cpu():
    """Item 4 of issue 28: reading through one warned 3 times (the index.Tensor wrapper's meta, then our
    out= kernel's), assigning through one never (the warning was raised on the device thread)."""
    counts = []
    for device in ("cpu", "openreg"):
        x = torch.arange(4.0, device=device)
        mask = torch.tensor([1, 0, 1, 0], dtype=torch.uint8, device=device)
        with warnings.catch_warnings(record=True) as read:
            warnings.simplefilter("always")
            y = x[mask]
        with warnings.catch_warnings(record=True) as written:
            warnings.simplefilter("always")
            x[mask] = torch.tensor([7.0, 8.0], device=device)
        torch.openreg.synchronize()
        counts.append((len(read), len(written), y.cpu().tolist(), x.cpu().tolist()))
    assert counts[0] == counts[1] == (1, 1, [0.0, 2.0], [7.0, 1.0, 8.0, 3.0])


@pytest.mark.parametrize("out", [None, "c", "f"])
@pytest.mark.parametrize("adjoint", [False, True])
def test_lu_solve_from_the_right_in_complex_is_not_conjugated(out, adjoint):
    """CPU's linalg_lu_solve with left=False flips its output's conj bit instead of conjugating the data;
    run through a CPU alias the flip was lost and openreg returned the conjugate, silently (Note [Kernels
    that flip a conj bit])."""
    torch.manual_seed(0)
    lu, pivots = torch.linalg.lu_factor(torch.randn(3, 3, dtype=torch.complex128))
    b = torch.randn(2, 3, dtype=torch.complex128)
    expected = torch.linalg.lu_solve(lu, pivots, b, left=False, adjoint=adjoint)
    args = (lu.to("openreg"), pivots.to("openreg"), b.to("openreg"))
    if out is None:
        got = torch.linalg.lu_solve(*args, left=False, adjoint=adjoint)
    else:
        got = torch.empty(2, 3, dtype=torch.complex128, device="openreg")
        if out == "f":
            got = torch.empty(3, 2, dtype=torch.complex128, device="openreg").mT
        torch.linalg.lu_solve(*args, left=False, adjoint=adjoint, out=got)
    torch.testing.assert_close(got.cpu().resolve_conj(), expected.resolve_conj(), rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "call",
    [lambda d: torch.ones(1, device=d).std(), lambda d: torch.ones(2, 1, device=d).var(dim=1)],
    ids=["std", "var"],
)
def test_an_ops_warning_comes_at_every_call_as_on_cpu(call):
    """The warning came from the shape pass, which a repeated signature skips (its outcome was cached):
    "degrees of freedom is <= 0" came at the first call only (Note [Warnings of a cached shape pass])."""
    counts = []
    for device in ("cpu", "openreg"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                call(device)
            torch.openreg.synchronize()
        counts.append([str(w.message) for w in caught])
    assert len(counts[0]) == 3 and counts[1] == counts[0]


def test_addbmm_in_place_resizes_a_broadcasting_self_as_on_cpu():
    """CPU's and CUDA's addbmm_ broadcast self to the product's shape and resize self to it; openreg
    raised "output with shape [1, 5] doesn't match the broadcast shape [3, 5]" (OpPolicy.h,
    kResizesSelfWhen)."""
    torch.manual_seed(0)
    self_, b1, b2 = torch.randn(1, 5), torch.randn(2, 3, 4), torch.randn(2, 4, 5)
    expected = self_.clone().addbmm_(b1, b2, beta=0.5, alpha=2)
    got = self_.to("openreg")
    returned = got.addbmm_(b1.to("openreg"), b2.to("openreg"), beta=0.5, alpha=2)
    assert returned is got and got.shape == expected.shape == (3, 5)
    torch.testing.assert_close(got.cpu(), expected)
