"""OpInfo checks at the depth of PyTorch's device tests, openreg against the CPU.

For one OpInfo and one dtype, ``check_op_dtype`` runs every category below on the op's samples and
returns one ``Outcome`` per (category, sample) that was checked. The CPU is the reference everywhere:
a category is only checked where the CPU gives an answer, and where the CPU raises, openreg must raise
the same exception type at the call.

- ``forward``: the function variant on contiguous samples, values compared with
  ``torch.testing.assert_close``'s default tolerances for the dtype.
- ``noncontiguous``: the same samples made non-contiguous *on openreg* (``SampleInput.noncontiguous``
  interleaves a poison value, so a kernel that reads a view as dense reads NaN/12/True), compared with
  the CPU's contiguous result; in float32 also their gradients.
- ``method`` / ``inplace``: ``op.method_variant`` and ``op.inplace_variant``. In-place must return
  ``self`` and must raise where the CPU does (an in-place op may not resize ``self`` to a broadcast shape,
  nor write a result type ``self`` cannot hold).
- ``out``: ``out=`` of the right shape gives the CPU's values and is returned; ``out_resize``: a
  wrong-shaped non-empty ``out`` warns "resized" exactly when the CPU warns; ``out_dtype``: an ``out``
  of a dtype the result cannot be cast to raises when the CPU raises; ``out_device``: an ``out`` on the
  CPU for openreg inputs raises, as CUDA does.
- ``error_inputs``: every ``ErrorInput`` that the CPU raises as declared must raise the same type, with a
  message matching the declared regex, at the call on openreg (not at a later synchronize).
- ``backward``: float32 gradients against the CPU's (the existing sweep's check).
- ``gradcheck``: ``torch.autograd.gradcheck`` in float64 on openreg, where it passes on the CPU
  (run for the ops the caller names; it is slow).

Samples are made on the CPU and moved, so both sides see the same values; ops that draw random numbers
are compared by shape and dtype only.
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.testing._internal.common_utils import noncontiguous_like

DEV = "openreg"

# The float32 tolerance of the first sweep (test_opinfo.py): openreg's reductions split work over its
# own threads, so float32 sums differ from the CPU's in the last bits; the other dtypes use
# assert_close's defaults (exact for integers and bool).
FLOAT32_TOL = (1e-4, 1e-4)

CATEGORIES = ("forward", "noncontiguous", "method", "inplace", "out", "out_resize", "out_dtype", "out_device",
              "error_inputs", "backward", "gradcheck")


@dataclasses.dataclass
class Outcome:
    category: str
    ok: bool
    sample: int = -1
    reason: str = ""


def op_id(op) -> str:
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def first_line(e: BaseException) -> str:
    text = str(e)
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"


# --- samples ---------------------------------------------------------------------------------------

def move_tensor(t: torch.Tensor, device: str) -> torch.Tensor:
    """``t`` on ``device`` with its strides and storage offset: a view moves with its whole storage, so
    a non-contiguous or offset sample (and ``as_strided`` on it) means the same on both devices."""
    t = t.detach()
    if t.layout != torch.strided or t.is_conj() or t.is_neg():
        return t.to(device)
    n = t.untyped_storage().nbytes() // max(1, t.element_size())
    if n == 0 or (t.is_contiguous() and t.storage_offset() == 0 and n == t.numel()):
        return t.to(device)
    whole = t.new_empty(0).set_(t.untyped_storage(), 0, (n,), (1,))
    return whole.to(device).as_strided(t.shape, t.stride(), t.storage_offset())


def to_device(value, device=DEV, source="cpu"):
    """``value`` with every tensor moved to ``device`` and every device named ``source`` renamed."""
    if isinstance(value, torch.Tensor):
        moved = move_tensor(value, device)
        return moved.requires_grad_(value.requires_grad) if value.is_floating_point() or value.is_complex() else moved
    if isinstance(value, torch.device) and value.type == source:
        return torch.device(device)
    if isinstance(value, str) and value == source:
        return device
    if isinstance(value, list):
        return [to_device(v, device, source) for v in value]
    if isinstance(value, tuple):
        return tuple(to_device(v, device, source) for v in value)
    if isinstance(value, dict):
        return {k: to_device(v, device, source) for k, v in value.items()}
    return value


# Arguments that stay on the CPU, as on CUDA: tensor_split's indices_or_sections tensor must be a CPU
# tensor (it is read on the host to decide the output's shapes).
INPUT_ONLY_MOVED = {"tensor_split"}


def move(sample, device=DEV, source="cpu", op=None):
    """The sample on ``device``: tensors, and ``device=`` arguments (which ``SampleInput.transform`` leaves
    alone), so a factory op makes its result on ``device`` too."""
    from torch.testing._internal.opinfo.core import SampleInput

    with torch.no_grad():
        moved_input = to_device(sample.input, device, source)
    if op is not None and op.name in INPUT_ONLY_MOVED:
        args, kwargs = sample.args, sample.kwargs
    else:
        with torch.no_grad():
            args, kwargs = to_device(sample.args, device, source), to_device(sample.kwargs, device, source)
    if isinstance(moved_input, torch.Tensor) and isinstance(sample.input, torch.Tensor):
        moved_input.requires_grad_(sample.input.requires_grad)
    return SampleInput(moved_input, args=tuple(args), kwargs=kwargs,
                       output_process_fn_grad=sample.output_process_fn_grad,
                       broadcasts_input=sample.broadcasts_input, name=sample.name)


def detached(sample):
    return sample.transform(lambda v: v.detach() if isinstance(v, torch.Tensor) else v)


def noncontiguous(sample):
    """The sample with every tensor a strided view into a buffer twice its size (poison in between),
    made where the sample is, so the view reaches the op on that device."""
    return sample.transform(lambda v: noncontiguous_like(v) if isinstance(v, torch.Tensor) else v)


def flatten(value) -> list:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        out: list = []
        for v in value:
            out.extend(flatten(v))
        return out
    return [value]


def call(fn, sample):
    return fn(sample.input, *sample.args, **sample.kwargs)


# Ops that draw random numbers: seeded identically, CPU and openreg still draw different streams (as CUDA
# does), and OpInfo wraps many of them to reseed before every call, so detection alone cannot tell.
RANDOM_NAME_PARTS = ("rand", "normal", "bernoulli", "dropout", "multinomial", "uniform", "exponential",
                     "geometric", "cauchy", "log_normal", "rrelu", "poisson", "randperm", "fractional_max_pool",
                     "lowrank", "scaled_dot_product_attention", "multi_head_attention",
                     # uninitialized memory: only shape and dtype mean anything
                     "empty")


def is_random(op, sample) -> bool:
    if any(part in op.name for part in RANDOM_NAME_PARTS):
        return True
    outs = []
    try:
        for seed in (1, 2):
            torch.manual_seed(seed)
            outs.append(flatten(call(op, sample)))
        for x, y in zip(*outs):
            if isinstance(x, torch.Tensor) and x.layout == torch.strided and x.shape == y.shape:
                if not torch.equal(x.nan_to_num() if x.is_floating_point() else x,
                                   y.nan_to_num() if y.is_floating_point() else y):
                    return True
    except Exception:  # noqa: BLE001 - CPU cannot run or compare it: not random as far as we can tell
        return False
    return False


# --- comparing -------------------------------------------------------------------------------------

def targets_device(sample) -> bool:
    """Whether the sample names openreg: a tensor on it or a ``device=`` argument. A factory op's sample
    that names no device makes its result on the default device (the CPU) on both sides."""
    values = flatten([sample.input, list(sample.args), list(sample.kwargs.values())])
    return any((isinstance(v, torch.Tensor) and v.device.type == DEV) or (isinstance(v, str) and v.split(":")[0] == DEV)
               or (isinstance(v, torch.device) and v.type == DEV) for v in values)


def compare(actual, expected, shape_only=False, what="output", device: str | None = DEV) -> None:
    """Raises AssertionError at the first value of ``actual`` (made on openreg, its tensors expected on
    ``device``; None: where the reference's are, for a sample that names no device and so makes its
    result on the default device) that differs from ``expected`` (the reference)."""
    a, e = flatten(actual), flatten(expected)
    if len(a) != len(e):
        raise AssertionError(f"{what}: {len(a)} values vs CPU's {len(e)}")
    for i, (x, y) in enumerate(zip(a, e)):
        if isinstance(y, torch.Tensor):
            if not isinstance(x, torch.Tensor):
                raise AssertionError(f"{what}[{i}]: {type(x).__name__} vs CPU's tensor")
            if x.device.type != (device or y.device.type):
                raise AssertionError(f"{what}[{i}]: on {x.device}, not on {device or y.device.type}")
            if x.shape != y.shape or x.dtype != y.dtype:
                raise AssertionError(f"{what}[{i}]: {tuple(x.shape)} {x.dtype} vs CPU's {tuple(y.shape)} {y.dtype}")
            if shape_only or y.layout != torch.strided:
                continue
            rtol, atol = FLOAT32_TOL if y.dtype in (torch.float32, torch.complex64) else (None, None)
            torch.testing.assert_close(x.detach().cpu(), y.detach(), rtol=rtol, atol=atol, equal_nan=True,
                                       check_stride=False, msg=lambda m, i=i: f"{what}[{i}]: {m}")
        elif not shape_only and x != y and not (isinstance(y, float) and y != y and x != x):
            raise AssertionError(f"{what}[{i}]: {x!r} vs CPU's {y!r}")


def grad_inputs(sample) -> list[torch.Tensor]:
    return [t for t in flatten([sample.input, list(sample.args), list(sample.kwargs.values())])
            if isinstance(t, torch.Tensor) and t.requires_grad]


def backward(sample, out):
    out = sample.output_process_fn_grad(out)
    outs = [o for o in flatten(out) if isinstance(o, torch.Tensor) and o.requires_grad]
    inputs = grad_inputs(sample)
    if not outs or not inputs:
        return None
    g = torch.Generator().manual_seed(0)
    grad_outputs = [torch.randn(o.shape, generator=g, dtype=o.dtype).to(o.device) for o in outs]
    return torch.autograd.grad(outs, inputs, grad_outputs, allow_unused=True)


class Checker:
    """Collects the outcomes of one (op, dtype); every check runs in its own guard, so one failure (or
    an error the device reports late) is that check's outcome and the next check still runs."""

    def __init__(self) -> None:
        self.outcomes: list[Outcome] = []

    def run(self, category: str, index: int, check: Callable[..., Any], *args: Any) -> None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                done = check(*args)
            torch.openreg.synchronize()
        except SkipCheck:
            return
        except Exception as e:  # noqa: BLE001 - every difference or error is this check's failure
            reason = str(e) if isinstance(e, AssertionError) else first_line(e)
            self.outcomes.append(Outcome(category, False, index, reason[:1000]))
            settle()
            return
        if done is not False:
            self.outcomes.append(Outcome(category, True, index))


class SkipCheck(Exception):
    """The CPU gives no reference for this check (the category does not apply to this sample)."""


def settle() -> None:
    """Collects an error a failed check left queued on the device, so it is not blamed on the next."""
    for _ in range(2):
        try:
            torch.openreg.synchronize()
            return
        except Exception:  # noqa: BLE001 - the late error of the check that just failed
            continue


def cpu_result(fn: Callable[[], Any]):
    """(result, None) or (None, exception) of running ``fn`` on the CPU."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(), None
    except Exception as e:  # noqa: BLE001 - the CPU's error is the reference
        return None, e


def expect_same_error(cpu_error: BaseException, device_fn: Callable[[], Any], what: str) -> None:
    """The CPU raised ``cpu_error``; openreg must raise the same type at the call."""
    try:
        device_fn()
    except Exception as e:  # noqa: BLE001
        if isinstance(e, type(cpu_error)) or isinstance(cpu_error, type(e)):
            return
        raise AssertionError(f"{what}: raised {first_line(e)}; CPU raised {first_line(cpu_error)}") from None
    try:
        torch.openreg.synchronize()
    except Exception as e:  # noqa: BLE001
        raise AssertionError(f"{what}: CPU raised {first_line(cpu_error)} at the call; openreg raised it "
                             f"at the next synchronize ({first_line(e)})") from None
    raise AssertionError(f"{what}: CPU raised {first_line(cpu_error)}; openreg did not")


# --- the categories --------------------------------------------------------------------------------

def check_forward(op, sample, dsample, random: bool, with_grad: bool, what="output") -> None:
    if random:
        torch.manual_seed(0)
    expected, cpu_error = cpu_result(lambda: call(op, sample))
    if cpu_error is not None:
        expect_same_error(cpu_error, lambda: call(op, dsample), what)
        return
    actual = call(op, dsample)
    torch.openreg.synchronize()
    compare(actual, expected, shape_only=random, what=what, device=DEV if targets_device(dsample) else None)
    if not with_grad or random:
        return
    expected_grads, grad_error = cpu_result(lambda: backward(sample, expected))
    if grad_error is not None or expected_grads is None:
        return  # not differentiable for this sample on the CPU either
    try:
        actual_grads = backward(dsample, actual)
        torch.openreg.synchronize()
    except Exception as e:  # noqa: BLE001
        raise AssertionError(f"backward raised {first_line(e)}") from e
    compare([g for g in actual_grads if g is not None], [g for g in expected_grads if g is not None],
            what="grad")


def check_noncontiguous(op, sample, dsample, random: bool, with_grad: bool) -> None:
    # Both sides get the same interleaved layout: a view op (as_strided, view_as_complex) sees the same
    # storage on both, and an op that refuses such strides refuses them on both.
    check_forward(op, noncontiguous(sample), noncontiguous(dsample), random, with_grad, "noncontiguous")


def check_variant(variant, sample, dsample, random: bool, inplace: bool) -> None:
    if inplace and not isinstance(sample.input, torch.Tensor):
        raise SkipCheck
    cpu_in = sample.input.clone() if inplace else sample.input
    dev_in = dsample.input.clone() if inplace else dsample.input
    if random:
        torch.manual_seed(0)
    expected, cpu_error = cpu_result(lambda: variant(cpu_in, *sample.args, **sample.kwargs))
    if cpu_error is not None:
        expect_same_error(cpu_error, lambda: variant(dev_in, *dsample.args, **dsample.kwargs),
                          "in-place" if inplace else "method")
        return
    actual = variant(dev_in, *dsample.args, **dsample.kwargs)
    torch.openreg.synchronize()
    if inplace:
        if actual is not dev_in:
            raise AssertionError("in-place variant did not return self")
        compare(dev_in, cpu_in, shape_only=random, what="self")
    else:
        compare(actual, expected, shape_only=random, what="method",
                device=DEV if targets_device(dsample) else None)


def _tensor_outputs(expected) -> bool:
    return isinstance(expected, torch.Tensor) or (
        isinstance(expected, tuple) and len(expected) > 0 and all(isinstance(t, torch.Tensor) for t in expected))


def _make_out(expected, device, shape=None, dtype=None):
    def one(t):
        return torch.empty(t.shape if shape is None else shape, dtype=dtype or t.dtype, device=device)
    return one(expected) if isinstance(expected, torch.Tensor) else tuple(one(t) for t in expected)


def _resize_warned(fn) -> bool:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return any("resized" in str(w.message) for w in caught)


def _uncastable(dtype: torch.dtype) -> torch.dtype:
    """A dtype a result of ``dtype`` cannot be written into (the type-promotion rule of out=)."""
    if dtype.is_complex or dtype.is_floating_point:
        return torch.int64
    return torch.bool if dtype != torch.bool else torch.float32


def out_checks(op, sample, dsample, random: bool, checker: Checker, index: int) -> None:
    expected, cpu_error = cpu_result(lambda: call(op, sample))
    if cpu_error is not None or not _tensor_outputs(expected):
        return

    def same_values():
        out = _make_out(expected, "cpu")
        _, err = cpu_result(lambda: op(sample.input, *sample.args, **sample.kwargs, out=out))
        dout = _make_out(expected, DEV)
        if err is not None:
            expect_same_error(err, lambda: op(dsample.input, *dsample.args, **dsample.kwargs, out=dout), "out=")
            return
        if not random:
            try:
                compare(out, expected, what="CPU's out", device="cpu")
            except AssertionError:
                # CPU's out= kernel disagrees with its own functional result (fft.ihfftn over one dim
                # writes uninitialized values): the CPU fails here, so it gives no reference.
                raise SkipCheck from None
        if random:
            torch.manual_seed(0)
        returned = op(dsample.input, *dsample.args, **dsample.kwargs, out=dout)
        torch.openreg.synchronize()
        if isinstance(dout, torch.Tensor) and returned is not dout:
            raise AssertionError("out= did not return out")
        compare(dout, out, shape_only=random, what="out")

    checker.run("out", index, same_values)

    def resize_warning():
        # A non-empty out of the wrong shape is resized with a warning; an empty one silently.
        for numel in (0, 1 if flatten(expected)[0].numel() != 1 else 2):
            out = _make_out(expected, "cpu", shape=(numel,))
            try:
                cpu_warned = _resize_warned(lambda out=out: op(sample.input, *sample.args, **sample.kwargs, out=out))
            except Exception:  # noqa: BLE001 - the CPU refuses this out=: nothing to compare
                raise SkipCheck from None
            dout = _make_out(expected, DEV, shape=(numel,))
            dev_warned = _resize_warned(
                lambda dout=dout: op(dsample.input, *dsample.args, **dsample.kwargs, out=dout))
            if cpu_warned != dev_warned:
                raise AssertionError(f"out= of {numel} element(s): resize warning {dev_warned} vs CPU's {cpu_warned}")

    checker.run("out_resize", index, resize_warning)

    def wrong_dtype():
        first = flatten(expected)[0]
        bad = _uncastable(first.dtype)
        out = _make_out(expected, "cpu", dtype=bad)
        _, err = cpu_result(lambda: op(sample.input, *sample.args, **sample.kwargs, out=out))
        dout = _make_out(expected, DEV, dtype=bad)
        if err is None:
            if isinstance(expected, torch.Tensor):
                op(dsample.input, *dsample.args, **dsample.kwargs, out=dout)
                torch.openreg.synchronize()
                compare(dout, out, shape_only=random, what=f"out ({bad})")
            return
        expect_same_error(err, lambda: op(dsample.input, *dsample.args, **dsample.kwargs, out=dout),
                          f"out= of {bad}")

    checker.run("out_dtype", index, wrong_dtype)

    def wrong_device():
        # CUDA refuses a CPU out for device inputs (except when every device input is a 0-dim tensor,
        # which CUDA treats as a scalar): only samples with a device tensor of rank >= 1 are checked.
        if not any(isinstance(t, torch.Tensor) and t.device.type == DEV and t.dim() > 0
                   for t in flatten([dsample.input, list(dsample.args), list(dsample.kwargs.values())])):
            raise SkipCheck
        _, cpu_error = cpu_result(lambda: op(sample.input, *sample.args, **sample.kwargs,
                                             out=_make_out(expected, "cpu")))
        if cpu_error is not None:
            raise SkipCheck  # the CPU takes no such out= either
        out = _make_out(expected, "cpu")
        try:
            op(dsample.input, *dsample.args, **dsample.kwargs, out=out)
        except RuntimeError:
            return
        raise AssertionError("out= on the CPU for openreg inputs did not raise")

    checker.run("out_device", index, wrong_device)


def _devices_of(sample) -> set[str]:
    return {t.device.type for t in flatten([sample.input, list(sample.args), list(sample.kwargs.values())])
            if isinstance(t, torch.Tensor)}


def check_error_inputs(op, checker: Checker) -> None:
    """``op.error_inputs`` made for openreg, as PyTorch's test_errors makes them for CUDA: each must raise
    the declared type with a message matching the declared regex, at the call. One whose tensors are all
    on openreg (or that has none) is checked only where the same input on the CPU raises as declared there
    (the CPU is the reference); one that mixes devices (an error CUDA raises for mixing) is checked as
    declared."""
    try:
        dev_inputs = list(op.error_inputs(DEV))
    except Exception as e:  # noqa: BLE001 - generating them failed: report, do not guess
        checker.outcomes.append(Outcome("error_inputs", False, -1, f"generating error_inputs: {first_line(e)}"))
        settle()
        return
    for i, ei in enumerate(dev_inputs):
        if isinstance(ei, tuple):  # (ErrorInput, subtest context) when subtests are on
            ei = ei[0]
        if len(_devices_of(ei.sample_input)) <= 1:
            cpu_sample = move(ei.sample_input, "cpu", source=DEV, op=op)
            _, cpu_error = cpu_result(lambda s=cpu_sample: call(op, s))
            if not (isinstance(cpu_error, ei.error_type) and re.search(ei.error_regex, str(cpu_error))):
                continue  # the CPU does not raise as declared either

        def check(ei=ei):
            try:
                call(op, ei.sample_input)
            except Exception as e:  # noqa: BLE001
                if not isinstance(e, ei.error_type):
                    raise AssertionError(f"raised {first_line(e)}; expected {ei.error_type.__name__} "
                                         f"matching {ei.error_regex!r}") from None
                if not re.search(ei.error_regex, str(e)):
                    raise AssertionError(f"message {str(e).splitlines()[0] if str(e) else ''!r} does not match "
                                         f"{ei.error_regex!r}") from None
                return
            try:
                torch.openreg.synchronize()
            except Exception as e:  # noqa: BLE001
                raise AssertionError(f"raised at the next synchronize, not at the call: {first_line(e)}") from None
            raise AssertionError(f"did not raise {ei.error_type.__name__} matching {ei.error_regex!r}")

        checker.run("error_inputs", i, check)


def check_gradcheck(op, sample, index: int, checker: Checker) -> None:
    def gradcheck_on(s) -> bool:
        inputs = grad_inputs(s)
        if not inputs:
            raise SkipCheck

        def fn(*replacements):
            by_id = {id(t): r for t, r in zip(inputs, replacements)}
            s2 = s.transform(lambda v: by_id.get(id(v), v))
            return s.output_process_fn_grad(call(op, s2))

        return bool(torch.autograd.gradcheck(fn, tuple(inputs), raise_exception=False, check_batched_grad=False,
                                             check_undefined_grad=False, fast_mode=True))

    def check():
        ok_cpu, err = cpu_result(lambda: gradcheck_on(sample))
        if err is not None or not ok_cpu:
            raise SkipCheck
        if not gradcheck_on(move(sample, op=op)):
            raise AssertionError("gradcheck failed on openreg (passes on the CPU)")

    checker.run("gradcheck", index, check)


def samples_of(op, dtype: torch.dtype, requires_grad: bool, limit: int | None) -> list:
    out = []
    for s in op.sample_inputs("cpu", dtype, requires_grad=requires_grad):
        out.append(s)
        if limit is not None and len(out) >= limit:
            break
    return out


def check_op_dtype(op, dtype: torch.dtype, max_samples: int | None = None, max_variant_samples: int | None = 2,
                   categories: Iterable[str] = CATEGORIES, gradcheck: bool = False) -> list[Outcome]:
    """Every category for one op and dtype; ``max_variant_samples`` bounds the samples the variant and
    out= checks use (they repeat the forward's work), ``error_inputs`` runs once per op (for its first
    dtype: the caller decides)."""
    cats = set(categories)
    checker = Checker()
    with_grad = dtype == torch.float32 and op.supports_autograd and "backward" in cats
    try:
        samples = samples_of(op, dtype, with_grad, max_samples)
    except Exception as e:  # noqa: BLE001 - OpInfo cannot make samples for this dtype on the CPU
        return [Outcome("forward", False, -1, f"making samples: {first_line(e)}")]
    for i, sample in enumerate(samples):
        random = is_random(op, sample)
        try:
            dsample = move(sample, op=op)
        except Exception as e:  # noqa: BLE001 - the sample cannot reach openreg: every check of it fails
            checker.outcomes.append(Outcome("forward", False, i, f"moving the sample to {DEV}: {first_line(e)}"))
            settle()
            continue
        if "forward" in cats:
            checker.run("forward", i, check_forward, op, sample, dsample, random, False)
        if with_grad and not random:
            checker.run("backward", i, check_forward, op, sample, dsample, random, True, "output")
        if "noncontiguous" in cats and any(isinstance(t, torch.Tensor) and t.numel() > 0 and t.layout == torch.strided
                                           for t in flatten([sample.input, list(sample.args)])):
            checker.run("noncontiguous", i, check_noncontiguous, op, sample, dsample, random, with_grad)
        if max_variant_samples is not None and i >= max_variant_samples:
            continue
        plain, dplain = detached(sample), detached(dsample)
        if "method" in cats and op.method_variant is not None:
            checker.run("method", i, check_variant, op.method_variant, plain, dplain, random, False)
        if "inplace" in cats and op.inplace_variant is not None:
            checker.run("inplace", i, check_variant, op.inplace_variant, plain, dplain, random, True)
        if "out" in cats and op.supports_out:
            out_checks(op, plain, dplain, random, checker, i)
    if gradcheck and "gradcheck" in cats and op.supports_autograd and dtype == torch.float64:
        for i, sample in enumerate(samples_of(op, torch.float64, True, 2)):
            check_gradcheck(op, sample, i, checker)
    if "error_inputs" in cats and op.error_inputs_func is not None:
        check_error_inputs(op, checker)
    return checker.outcomes
