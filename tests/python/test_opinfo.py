"""Differential sweep over PyTorch's OpInfo database: every op's float32 samples on openreg vs CPU.

Forward for every op, backward for ops that support autograd. Inputs are made on CPU and moved, so both
sides see the same values. Random ops (detected by running them twice on CPU) are compared by shape and
dtype only. An op whose CPU run raises must raise on openreg too.

In pytest the tests come from PyTorch's device-type machinery: ``@ops`` over the OpInfo database and
``instantiate_device_type_tests(..., only_for=("openreg",))``, which instantiates them for the
PrivateUse1 device (``TestOpInfoPRIVATEUSE1.test_op_matches_cpu_<op>_openreg_float32``). CI runs a fixed
representative subset (OPENREG_OPINFO=full selects the whole database). As a script:

    python tests/python/test_opinfo.py --full --report bench/results/opinfo.json

prints pass/fail counts and every failure with its reason.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

import torch
import torch_openreg  # noqa: F401  (registers the device before the test classes are instantiated)
from torch.testing._internal.common_device_type import instantiate_device_type_tests, ops
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase

DEV = "openreg"
DTYPE = torch.float32
RTOL, ATOL = 1e-4, 1e-4

# The CI subset: common ops of every family (elementwise, reductions, linear algebra, indexing, shape,
# nn.functional, random, data-dependent), enough to catch a regression in any execution path.
SUBSET = [
    "abs", "add", "addcmul", "addmm", "amax", "argmax", "atan2", "baddbmm", "bernoulli", "bmm", "cat",
    "cdist", "clamp", "cumsum", "diag", "diagonal", "div", "einsum", "exp", "expand", "flip", "gather",
    "index_add", "index_put", "index_select", "kthvalue", "lerp", "linalg.norm", "log_softmax", "logsumexp",
    "masked_fill", "masked_select", "matmul", "max", "mean", "mm", "mul", "mv", "nn.functional.avg_pool2d",
    "nn.functional.batch_norm", "nn.functional.conv2d", "nn.functional.cross_entropy",
    "nn.functional.dropout", "nn.functional.embedding", "nn.functional.gelu", "nn.functional.interpolate",
    "nn.functional.layer_norm", "nn.functional.linear", "nn.functional.max_pool2d",
    "nn.functional.mse_loss", "nn.functional.pad", "nn.functional.relu", "nonzero", "norm", "permute",
    "pow", "prod", "repeat", "reshape", "roll", "rsqrt", "scatter", "scatter_add", "sigmoid", "softmax",
    "sort", "split", "squeeze", "stack", "std", "sum", "t", "take", "tanh", "topk", "transpose", "tril",
    "unbind", "unique", "unfold", "var_mean", "view", "where", "zeros_like", "arange", "randn",
    "normal", "rand_like", "_foreach_add", "_foreach_mul", "new_full", "linalg.solve", "cholesky",
]
MAX_SAMPLES_SUBSET = 16


def full_mode() -> bool:
    return os.environ.get("OPENREG_OPINFO", "") == "full"


def load_ops():
    return [op for op in op_db if DTYPE in op.supported_dtypes("cpu")]


def op_id(op) -> str:
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


# --- moving samples ---------------------------------------------------------------------------------

def to_device(value, device=DEV):
    if isinstance(value, torch.Tensor):
        moved = value.detach().to(device)
        return moved.requires_grad_(value.requires_grad) if value.is_floating_point() or value.is_complex() else moved
    if isinstance(value, torch.device) and value.type == "cpu":
        return torch.device(device)
    if isinstance(value, str) and value == "cpu":
        return device
    if isinstance(value, list):
        return [to_device(v, device) for v in value]
    if isinstance(value, tuple):
        return tuple(to_device(v, device) for v in value)
    if isinstance(value, dict):
        return {k: to_device(v, device) for k, v in value.items()}
    return value


def run(op, sample, device_sample):
    s = device_sample
    return op(s.input, *s.args, **s.kwargs)


def flatten(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        out = []
        for v in value:
            out.extend(flatten(v))
        return out
    return [value]


def compare(actual, expected, shape_only=False, what="output"):
    a, e = flatten(actual), flatten(expected)
    if len(a) != len(e):
        raise AssertionError(f"{what}: {len(a)} values vs CPU's {len(e)}")
    for i, (x, y) in enumerate(zip(a, e)):
        if isinstance(y, torch.Tensor):
            if not isinstance(x, torch.Tensor):
                raise AssertionError(f"{what}[{i}]: {type(x).__name__} vs CPU's tensor")
            if y.device.type == "cpu" and x.device.type != DEV and x.device.type != "cpu":
                raise AssertionError(f"{what}[{i}]: on {x.device}")
            if x.shape != y.shape or x.dtype != y.dtype:
                raise AssertionError(f"{what}[{i}]: {tuple(x.shape)} {x.dtype} vs CPU's {tuple(y.shape)} {y.dtype}")
            if not shape_only:
                torch.testing.assert_close(x.detach().cpu(), y.detach(), rtol=RTOL, atol=ATOL, equal_nan=True,
                                           check_stride=False, msg=lambda m, i=i: f"{what}[{i}]: {m}")
        elif not shape_only and x != y and not (isinstance(y, float) and y != y and x != x):
            raise AssertionError(f"{what}[{i}]: {x!r} vs CPU's {y!r}")


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
            outs.append(flatten(op(sample.input, *sample.args, **sample.kwargs)))
        for x, y in zip(*outs):
            if isinstance(x, torch.Tensor) and x.layout == torch.strided and x.shape == y.shape:
                if not torch.equal(x.nan_to_num() if x.is_floating_point() else x,
                                   y.nan_to_num() if y.is_floating_point() else y):
                    return True
    except Exception:  # noqa: BLE001 - CPU cannot run or compare it: not random as far as we can tell
        return False
    return False


def grad_inputs(sample):
    return [t for t in flatten([sample.input, list(sample.args), list(sample.kwargs.values())])
            if isinstance(t, torch.Tensor) and t.requires_grad]


def backward(op, sample, out):
    out = sample.output_process_fn_grad(out)
    outs = [o for o in flatten(out) if isinstance(o, torch.Tensor) and o.requires_grad]
    inputs = grad_inputs(sample)
    if not outs or not inputs:
        return None
    g = torch.Generator().manual_seed(0)
    grad_outputs = [torch.randn(o.shape, generator=g, dtype=o.dtype).to(o.device) for o in outs]
    return torch.autograd.grad(outs, inputs, grad_outputs, allow_unused=True)


def check_sample(op, sample, do_backward: bool, device=DEV):
    """Raises AssertionError describing the first difference between openreg and CPU."""
    random = is_random(op, sample)
    dsample = sample.transform(lambda v: to_device(v, device))
    cpu_error = None
    try:
        if random:
            torch.manual_seed(0)
        expected = op(sample.input, *sample.args, **sample.kwargs)
    except Exception as e:  # noqa: BLE001 - any CPU error must be matched on openreg
        cpu_error = e
    try:
        actual = run(op, sample, dsample)
        torch.openreg.synchronize()
    except Exception as e:  # noqa: BLE001
        if cpu_error is not None:
            return
        raise AssertionError(
            f"forward raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e
    if cpu_error is not None:
        raise AssertionError(f"CPU raised {type(cpu_error).__name__} ({str(cpu_error).splitlines()[0]}) "
                             f"but openreg did not")
    compare(actual, expected, shape_only=random)
    if not do_backward or random:
        return
    try:
        expected_grads = backward(op, sample, expected)
    except Exception:  # noqa: BLE001 - not differentiable for this sample on CPU either
        return
    if expected_grads is None:
        return
    try:
        actual_grads = backward(op, dsample, actual)
        torch.openreg.synchronize()
    except Exception as e:  # noqa: BLE001
        raise AssertionError(
            f"backward raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e
    compare([g for g in actual_grads if g is not None], [g for g in expected_grads if g is not None],
            what="grad")


def samples_of(op, limit):
    samples = op.sample_inputs("cpu", DTYPE, requires_grad=op.supports_autograd)
    out = []
    for s in samples:
        out.append(s)
        if limit is not None and len(out) >= limit:
            break
    return out


def check_op(op, limit, device=DEV):
    for i, sample in enumerate(samples_of(op, limit)):
        try:
            check_sample(op, sample, op.supports_autograd, device)
        except AssertionError as e:
            raise AssertionError(f"sample {i}: {e}") from None


# --- pytest ----------------------------------------------------------------------------------------

def _selected():
    ops = load_ops()
    if full_mode():
        return ops
    wanted = set(SUBSET)
    return [op for op in ops if op.name in wanted and not op.variant_test_name]


_OPS = _selected()


def test_subset_is_found():
    assert full_mode() or len(_OPS) >= len(SUBSET) * 0.9, [n for n in SUBSET if n not in {o.name for o in _OPS}]


class TestOpInfo(TestCase):
    @ops(_OPS, allowed_dtypes=(DTYPE,))
    def test_op_matches_cpu(self, device, dtype, op):
        self.assertEqual(torch.device(device).type, DEV)
        check_op(op, None if full_mode() else MAX_SAMPLES_SUBSET, device)


instantiate_device_type_tests(TestOpInfo, globals(), only_for=(DEV,))


# --- script ----------------------------------------------------------------------------------------

def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", action="store_true", help="every op of op_db (default: the CI subset)")
    parser.add_argument("--max-samples", type=int, default=None, help="samples per op (default: all)")
    parser.add_argument("--only", nargs="*", help="op ids to run")
    parser.add_argument("--start", type=int, default=0, help="skip the first N selected ops (resume)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--report", help="write the results as JSON here")
    args = parser.parse_args()
    if args.report and not args.child:
        return supervise(args)
    ops = load_ops()
    if not args.full:
        ops = [op for op in ops if op.name in set(SUBSET) and not op.variant_test_name]
    if args.only:
        ops = [op for op in ops if op_id(op) in set(args.only) or op.name in set(args.only)]
    results = {}
    if args.report and args.start and os.path.exists(args.report):
        with open(args.report) as f:
            results = json.load(f)["results"]  # resume: keep what an earlier run found
    start = time.time()
    for n, op in enumerate(ops):
        if n < args.start:
            continue
        t0 = time.time()
        try:
            check_op(op, args.max_samples)
            results[op_id(op)] = {"status": "pass"}
        except Exception as e:  # noqa: BLE001
            reason = str(e) if isinstance(e, AssertionError) else f"{type(e).__name__}: {e}"
            if not isinstance(e, AssertionError):
                reason += "\n" + traceback.format_exc(limit=3)
            results[op_id(op)] = {"status": "fail", "reason": reason[:2000]}
            try:
                torch.openreg.synchronize()
            except Exception:  # noqa: BLE001 - a failed work item reported late
                pass
        results[op_id(op)]["seconds"] = round(time.time() - t0, 3)
        status = results[op_id(op)]["status"]
        print(f"[{n + 1}/{len(ops)}] {op_id(op)}: {status}", flush=True)
        if args.report:
            write_report(args.report, results)
    failures = {k: v for k, v in results.items() if v["status"] == "fail"}
    passed = len(results) - len(failures)
    print(f"\n{passed}/{len(results)} ops pass ({100.0 * passed / max(1, len(results)):.1f}%) "
          f"in {time.time() - start:.0f}s; {len(failures)} fail:")
    for k, v in failures.items():
        print(f"  {k}: {v['reason'].splitlines()[0] if v['reason'] else ''}")
    if args.report:
        write_report(args.report, results)
    return 0


def supervise(args):
    """Runs the sweep in child processes, so an op that kills the process (a crash is a failure too)
    is recorded and the sweep goes on with the next op."""
    import subprocess

    start = args.start
    if start == 0 and os.path.exists(args.report):
        os.remove(args.report)
    forwarded = [a for a in sys.argv[1:] if not a.startswith("--start")]
    while True:
        cmd = [sys.executable, os.path.abspath(__file__), *forwarded, "--child", "--start", str(start)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        last = start - 1
        last_total = None
        for line in proc.stdout:
            print(line, end="", flush=True)
            if line.startswith("[") and "/" in line.split("]")[0]:
                idx, total = line[1:].split("]")[0].split("/")
                last, last_total = int(idx) - 1, int(total)
        if proc.wait() == 0:
            return 0
        crashed = last + 1
        with open(args.report) as f:
            results = json.load(f)["results"] if os.path.getsize(args.report) else {}
        ops = load_ops() if args.full else [
            op for op in load_ops() if op.name in set(SUBSET) and not op.variant_test_name]
        if args.only:
            ops = [op for op in ops if op_id(op) in set(args.only) or op.name in set(args.only)]
        if crashed >= len(ops):
            return 1
        results[op_id(ops[crashed])] = {"status": "fail", "reason": f"crashed the process (exit {proc.returncode})",
                                        "seconds": 0}
        write_report(args.report, results)
        print(f"[{crashed + 1}/{last_total or len(ops)}] {op_id(ops[crashed])}: fail (crash)", flush=True)
        start = crashed + 1


def write_report(path, results):
    passed = sum(1 for v in results.values() if v["status"] == "pass")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"passed": passed, "total": len(results), "dtype": str(DTYPE), "results": results}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
