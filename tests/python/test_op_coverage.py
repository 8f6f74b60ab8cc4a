"""Op coverage is decided at the call: an op openreg cannot run raises NotImplementedError naming the op
and openreg before anything is queued, instead of returning a tensor that fails at a later sync.
Quantized and sparse compressed tensors are refused at the call (openreg has dense and sparse COO tensors)."""

from __future__ import annotations

import warnings

import pytest
import torch


def dev(t):
    return t.to("openreg")


def _assert_nothing_failed_later():
    # A refused call queued nothing: the stream has no failure to report.
    torch.openreg.synchronize()


def test_op_without_cpu_kernel_is_refused_at_the_call():
    x = torch.randn(2, 3, 3, 3, device="openreg")
    with pytest.raises(NotImplementedError, match="mkldnn_reorder_conv2d_weight.*openreg"):
        torch.ops.aten.mkldnn_reorder_conv2d_weight(x)
    _assert_nothing_failed_later()


@pytest.mark.parametrize(
    "call",
    [
        lambda x: torch.bitwise_not(x),  # float
        lambda x: torch.special.bessel_j0(x.half()),
        lambda x: torch.bmm(x.bool().view(1, 2, 2), x.bool().view(1, 2, 2)),
        lambda x: torch.atan2(x.to(torch.complex64), x.to(torch.complex64)),
        lambda x: x.to(torch.complex64).clamp_min(torch.zeros_like(x, dtype=torch.complex64)),
    ],
    ids=["bitwise_not_float", "bessel_j0_half", "bmm_bool", "atan2_complex", "clamp_min_complex"],
)
def test_dtype_without_cpu_kernel_is_refused_at_the_call(call):
    x_cpu = torch.randn(4)
    with pytest.raises(NotImplementedError) as cpu_error:
        call(x_cpu)
    with pytest.raises(NotImplementedError, match="openreg") as dev_error:
        call(dev(x_cpu))
    assert str(cpu_error.value).split("\n")[0] in str(dev_error.value)
    _assert_nothing_failed_later()


def test_dtype_refusal_is_not_cached_from_empty_inputs():
    # CPU's kernel returns on empty inputs before its dtype dispatch (so does openreg); a later
    # non-empty call must still be refused at the call.
    pool = torch.nn.functional.adaptive_avg_pool2d
    pool(torch.empty(0, 3, 4, 4, dtype=torch.int64), 2)
    pool(torch.empty(0, 3, 4, 4, dtype=torch.int64, device="openreg"), 2)
    with pytest.raises(NotImplementedError, match="Long"):
        pool(torch.ones(1, 3, 4, 4, dtype=torch.int64, device="openreg"), 2)
    _assert_nothing_failed_later()


def test_refusal_repeats_while_the_same_op_on_other_types_is_served_from_the_cache():
    # Note [A cached signature was covered]: a call whose signature the shape-pass cache holds skips
    # the coverage check; a refused combination of types is never cached, so it is refused every time.
    x = torch.randn(4, device="openreg")
    for _ in range(3):
        torch.testing.assert_close(torch.special.bessel_j0(x).cpu(), torch.special.bessel_j0(x.cpu()))
        with pytest.raises(NotImplementedError, match="Half"):
            torch.special.bessel_j0(x.half())
    _assert_nothing_failed_later()


def test_a_refused_type_combination_still_runs_where_the_cpu_takes_it():
    """cumsum from int16 into a bool out= is refused by CPU's kernel, but CPU takes a 0-d input, which
    returns before the dtype dispatch. The refusal learned on one call refused the 0-d call too; now a
    call of refused types runs on the sync path, where CPU's kernel decides."""
    def call(device, shape):
        out = torch.empty(shape, dtype=torch.bool, device=device)
        return torch.cumsum(torch.ones(shape, dtype=torch.int16, device=device), 0, out=out)

    for _ in range(2):
        with pytest.raises(NotImplementedError, match="cumsum.*openreg.*not implemented for 'Bool'"):
            call("openreg", (3,))
        assert call("cpu", ()).item() is True
        assert call("openreg", ()).cpu().item() is True
    _assert_nothing_failed_later()


def test_refusal_leaves_the_device_working():
    x = torch.randn(4, device="openreg")
    with pytest.raises(NotImplementedError):
        torch.bitwise_not(x)
    assert torch.equal((x * 2).cpu(), x.cpu() * 2)


# --- quantized ---------------------------------------------------------------------------------------

QUANTIZING = {
    "quantize_per_tensor": lambda x: torch.quantize_per_tensor(x, 0.1, 0, torch.qint8),
    "quantize_per_tensor_tensor_args": lambda x: torch.quantize_per_tensor(
        x, torch.tensor(0.1, device=x.device), torch.tensor(0, device=x.device), torch.quint8
    ),
    "quantize_per_channel": lambda x: torch.quantize_per_channel(
        x.view(2, 2), torch.tensor([0.1, 0.2], device=x.device), torch.tensor([0, 0], device=x.device), 0, torch.qint8
    ),
    "quantize_per_tensor_dynamic": lambda x: torch.quantize_per_tensor_dynamic(x, torch.quint8, False),
    "_make_per_tensor_quantized_tensor": lambda x: torch._make_per_tensor_quantized_tensor(
        x.to(torch.int8), 0.1, 0
    ),
    "_empty_affine_quantized": lambda x: torch._empty_affine_quantized([2], device=x.device, dtype=torch.qint8),
}


@pytest.mark.parametrize("name", sorted(QUANTIZING))
def test_quantizing_is_refused_at_the_call(name):
    x = torch.randn(4, device="openreg")
    with pytest.raises(NotImplementedError, match="openreg.*quantized|quantized.*openreg"):
        QUANTIZING[name](x)
    _assert_nothing_failed_later()


def test_moving_a_quantized_tensor_is_refused():
    q = torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.qint8)
    with pytest.raises(NotImplementedError, match="quantized tensors on openreg"):
        q.to("openreg")
    # dequantize/int_repr/q_scale work on the CPU tensor, and their dense results move as usual.
    assert torch.equal(q.dequantize().to("openreg").cpu(), q.dequantize())
    assert torch.equal(q.int_repr().to("openreg").cpu(), q.int_repr())


# --- sparse compressed -------------------------------------------------------------------------------
# Sparse COO tensors work on openreg (test_sparse.py); the compressed layouts do not.

SPARSE_COMPRESSED = {
    "to_sparse_csr": lambda: torch.eye(3, device="openreg").to_sparse_csr(),
    "to_sparse_csc": lambda: torch.eye(3, device="openreg").to_sparse_csc(),
    "to_sparse_bsr": lambda: torch.eye(4, device="openreg").to_sparse_bsr((2, 2)),
}


@pytest.mark.parametrize("name", sorted(SPARSE_COMPRESSED))
def test_sparse_compressed_is_refused_at_the_call(name):
    with pytest.raises(NotImplementedError, match="no sparse compressed ones"):
        SPARSE_COMPRESSED[name]()
    _assert_nothing_failed_later()


# --- the sweep ---------------------------------------------------------------------------------------


def _move(v):
    if isinstance(v, torch.Tensor):
        return v.detach().to("openreg")
    if isinstance(v, torch.device) and v.type == "cpu":
        return torch.device("openreg")
    if isinstance(v, str) and v == "cpu":
        return "openreg"
    if isinstance(v, list):
        return [_move(x) for x in v]
    if isinstance(v, tuple):
        return tuple(_move(x) for x in v)
    if isinstance(v, dict):
        return {k: _move(x) for k, x in v.items()}
    return v


def _tensors(o):
    if isinstance(o, torch.Tensor):
        return [o]
    if isinstance(o, (list, tuple)):
        return [t for x in o for t in _tensors(x)]
    return []


# Norms whose saved statistics CUDA (and openreg, following the meta kernels) keep in float32 for
# half inputs, where CPU returns half: openreg matches CUDA there.
CUDA_DTYPE_DIFFERS_FROM_CPU = {"native_layer_norm", "native_batch_norm", "_native_batch_norm_legit",
                               "_batch_norm_with_update"}

# CUDA's attention kernels, which CPU has no kernel for and openreg runs as CUDA does (Note [CUDA's
# attention kernels on openreg]; tests/python/test_attention_kernels.py checks them against the math).
CUDA_KERNELS_CPU_LACKS = {"torch.ops.aten._efficient_attention_forward", "torch.ops.aten._flash_attention_forward"}


def _first_samples(dtype):
    from torch.testing._internal.common_methods_invocations import op_db

    for op in op_db:
        try:
            sample = next(iter(op.sample_inputs("cpu", dtype, requires_grad=False)))
        except Exception:  # noqa: BLE001 - no samples for this dtype
            continue
        yield op, sample


# float32 (what models run) and bool (the type CPU kernels refuse most). float16, int64 and complex64
# pass too (about a minute more on 2 cores): add them here when changing the probe in engine/OpCoverage.cpp.
SWEEP_DTYPES = [torch.float32, torch.bool]


@pytest.mark.parametrize("dtype", SWEEP_DTYPES, ids=str)
def test_opinfo_sweep_raises_at_the_call_or_returns_what_cpu_returns(dtype):
    """Every OpInfo op's first sample: an op CPU refuses with NotImplementedError (no kernel for these
    types) is refused at the call on openreg; an op CPU runs returns tensors of CPU's dtypes and shapes
    and never fails later with NotImplementedError."""
    problems = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for op, s in _first_samples(dtype):
            name = op.name + ("." + op.variant_test_name if op.variant_test_name else "")
            args = (s.input, *s.args)
            cpu_error = dev_error = None
            try:
                cpu = op(*args, **s.kwargs)
            except Exception as e:  # noqa: BLE001 - any CPU error is the reference
                cpu_error = e
            try:
                res = op(*_move(args), **_move(s.kwargs))
            except Exception as e:  # noqa: BLE001
                dev_error = e
            try:
                torch.openreg.synchronize()
            except NotImplementedError as e:
                problems.append(f"{name}: NotImplementedError only at the sync: {e}")
                continue
            except Exception:  # noqa: BLE001 - data-dependent errors surface at the sync, as on CUDA
                continue
            if isinstance(cpu_error, NotImplementedError) and dev_error is None and name not in CUDA_KERNELS_CPU_LACKS:
                problems.append(f"{name}: CPU refuses ({cpu_error}) but openreg returned")
            if cpu_error is None and dev_error is None and op.name not in CUDA_DTYPE_DIFFERS_FROM_CPU:
                a, b = _tensors(cpu), _tensors(res)
                got = [(t.dtype, tuple(t.shape)) for t in b]
                want = [(t.dtype, tuple(t.shape)) for t in a]
                if got != want:
                    problems.append(f"{name}: returned {got}, CPU returns {want}")
    assert problems == []


def test_host_side_runs_of_cpu_kernels_use_one_thread_and_restore_the_count():
    """Note [Host threads open no OpenMP teams]: the coverage probe runs CPU's kernel on the calling
    thread with one OpenMP thread (a team opened there outlives the call and slows every team in the
    process), and leaves the thread's count as it was; the kernel itself runs on the device."""
    import threading

    lib = torch.library.Library("openreg_thread_spy", "DEF")
    lib.define("spy(Tensor x) -> Tensor")
    calls = []

    def spy_cpu(x):
        calls.append((threading.get_ident(), torch.get_num_threads()))
        return x * 2

    lib.impl("spy", spy_cpu, "CPU")
    lib.impl("spy", lambda x: torch.empty_like(x), "Meta")
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        x = torch.ones(1 << 16, device="openreg")
        y = torch.ops.openreg_thread_spy.spy(x)
        torch.openreg.synchronize()
        main = threading.get_ident()
        on_host = [n for tid, n in calls if tid == main]
        assert on_host, "the probe did not run on the calling thread"
        assert on_host == [1] * len(on_host), on_host
        assert any(tid != main for tid, _ in calls), "the kernel did not run on a device thread"
        assert torch.get_num_threads() == 2
        assert torch.equal(y.cpu(), torch.full((1 << 16,), 2.0))
    finally:
        torch.set_num_threads(previous)
        lib._destroy()


def test_composites_that_refused_openreg_tensors_run_as_on_cpu():
    """conj_physical_ on a complex tensor failed with an internal assert (its composite calls a
    DispatchStub with no openreg kernel), and mode(out=) refused openreg ("only supports CPU, CUDA and
    XPU"): the engine runs both on CPU (OpPolicy.cpp, kFunctionalKernel)."""
    g = torch.Generator().manual_seed(0)
    z = torch.randn(3, 4, dtype=torch.complex128, generator=g)
    x = torch.randint(0, 3, (3, 5), generator=g).float()
    got_z = z.to("openreg").conj_physical_()
    values = torch.empty(0, device="openreg")
    indices = torch.empty(0, dtype=torch.long, device="openreg")
    torch.mode(x.to("openreg"), 1, out=(values, indices))
    assert torch.equal(got_z.cpu(), z.clone().conj_physical_())
    want = torch.mode(x, 1)
    assert torch.equal(values.cpu(), want.values) and torch.equal(indices.cpu(), want.indices)
