"""Differential sweep over PyTorch's OpInfo database: every op's float32 samples on openreg vs CPU.

Forward for every op, backward for ops that support autograd. Inputs are made on CPU and moved, so both
sides see the same values. Random ops (detected by running them twice on CPU) are compared by shape and
dtype only. An op whose CPU run raises must raise on openreg too.

In pytest the tests come from PyTorch's device-type machinery: ``@ops`` over the OpInfo database and
``instantiate_device_type_tests(..., only_for=("openreg",))``, which instantiates them for the
PrivateUse1 device (``TestOpInfoPRIVATEUSE1.test_op_matches_cpu_<op>_openreg_float32``). CI runs a fixed
representative subset (OPENREG_OPINFO=full selects the whole database). As a script:

    PYTHONPATH=tests python tests/python/test_opinfo.py --full --report bench/results/opinfo.json

prints pass/fail counts and every failure with its reason.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
import traceback

import torch
import torch_openreg  # noqa: F401  (registers the device before the test classes are instantiated)
from support import opinfo_depth as depth  # tests/support: pytest's pythonpath (PYTHONPATH=tests as a script)
from torch.testing._internal.common_device_type import OpDTypes, instantiate_device_type_tests, ops
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase

DEV = depth.DEV
DTYPE = torch.float32

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


def check_sample(op, sample, do_backward: bool, device=DEV):
    """Raises AssertionError describing the first difference between openreg and CPU (the forward and,
    where ``do_backward``, the gradients; support/opinfo_depth.py)."""
    random = depth.is_random(op, sample)
    depth.check_forward(op, sample, depth.move(sample, device, op=op), random, do_backward)


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


# --- depth: every dtype, every variant and its rules (tests/support/opinfo_depth.py) ----------------
#
# A few ops of different families at full depth, every dtype each supports on the CPU; the whole database
# at this depth is `make opinfo-sweep` (bench/sweeps/opinfo_sweep.py). Chosen so that every category is
# exercised: all have in-place and out= variants except where named, and error_inputs.
DEPTH_SUBSET = [
    "add",  # binary, type promotion, in-place broadcast rules, error_inputs
    "floor_divide",  # in-place may not resize self (issue 28 item 2)
    "abs",  # unary, integer and complex dtypes
    "sum",  # reduction with dim/dtype kwargs
    "mm",  # linear algebra, error_inputs
    "index_put",  # indexing with host-side argument checks, error_inputs
    "masked_scatter",  # data-dependent, error_inputs
    "gather",  # error_inputs with shape rules
    "cat",  # list input, out=
    "clamp",  # tensor and scalar bounds
    "max.reduction_with_dim",  # tuple outputs (values, indices) through out=
    "nn.functional.adaptive_max_pool3d",  # backward crashed the process (issue 28 item 1)
    "where",  # three inputs, broadcast
    "bitwise_and",  # integer and bool only
]
DEPTH_MAX_SAMPLES = 2
# Ops whose error_inputs reach openreg's argument checks of different kinds (shapes, index ranges, dtypes,
# devices, list inputs, convolution parameters).
ERROR_SUBSET = ["gather", "index_select", "masked_scatter", "cat", "where", "diagonal", "nn.functional.conv2d",
                "scatter", "kthvalue", "reshape", "amax", "roll", "dot", "nn.functional.max_pool2d"]
GRADCHECK_SUBSET = ["mul", "sum", "mm", "gather", "nn.functional.conv2d", "softmax"]


def _named(names):
    wanted = set(names)
    found = [op for op in op_db if depth.op_id(op) in wanted]
    assert {depth.op_id(op) for op in found} == wanted, wanted - {depth.op_id(op) for op in found}
    return found


def _assert_no_failures(outcomes):
    failures = [f"{o.category} sample {o.sample}: {o.reason}" for o in outcomes if not o.ok]
    assert not failures, "\n".join(failures)
    assert outcomes, "nothing was checked"


class TestOpInfoDepth(TestCase):
    @ops(_named(DEPTH_SUBSET), dtypes=OpDTypes.supported)
    def test_depth_matches_cpu(self, device, dtype, op):
        cats = [c for c in depth.CATEGORIES if c not in ("error_inputs", "gradcheck")]
        _assert_no_failures(depth.check_op_dtype(op, dtype, max_samples=DEPTH_MAX_SAMPLES, max_variant_samples=1,
                                                 categories=cats))

    @ops(_named(ERROR_SUBSET), dtypes=OpDTypes.none)
    def test_error_inputs_raise_at_the_call(self, device, op):
        checker = depth.Checker()
        depth.check_error_inputs(op, checker)
        _assert_no_failures(checker.outcomes)

    @ops(_named(GRADCHECK_SUBSET), allowed_dtypes=(torch.float64,))
    def test_gradcheck_float64(self, device, dtype, op):
        checker = depth.Checker()
        for i, sample in enumerate(depth.samples_of(op, dtype, True, 2)):
            depth.check_gradcheck(op, sample, i, checker)
        _assert_no_failures(checker.outcomes)


instantiate_device_type_tests(TestOpInfoDepth, globals(), only_for=(DEV,))


def _misbehaving(name, **variants):
    """A copy of an OpInfo whose variants are replaced, to show that a check catches what it must."""
    op = copy.copy(_named([name])[0])
    for attr, fn in variants.items():
        setattr(op, attr, fn)
    return op


def _failed(outcomes, category):
    return [o for o in outcomes if o.category == category and not o.ok]


def test_depth_checks_catch_differences():
    on_dev = lambda t: t.device.type == DEV  # noqa: E731

    # A wrong value on openreg only.
    op = _misbehaving("add", op=lambda x, y, **kw: torch.add(x, y, **kw) + on_dev(x))
    assert _failed(depth.check_op_dtype(op, torch.float32, max_samples=1, categories=["forward"]), "forward")

    # A kernel that reads a strided view as if it were dense reads the poison between its elements.
    def dense_read(x, *args, **kwargs):
        return torch.abs(x.as_strided(x.shape, x.contiguous().stride()) if on_dev(x) else x)
    op = _misbehaving("abs", op=dense_read)
    assert _failed(depth.check_op_dtype(op, torch.float32, max_samples=2, categories=["noncontiguous"]),
                   "noncontiguous")

    # An in-place op that resizes self to the broadcast shape where the CPU refuses (issue 28 item 2).
    def resizing(x, y, **kw):
        if on_dev(x):
            return x.resize_(torch.broadcast_shapes(x.shape, y.shape)).copy_(torch.floor_divide(x, y))
        return x.floor_divide_(y)
    op = _misbehaving("floor_divide", inplace_variant=resizing)
    samples = [s for s in op.sample_inputs("cpu", torch.float32) if s.broadcasts_input][:1]
    assert samples, "floor_divide has a sample that broadcasts self"
    checker = depth.Checker()
    checker.run("inplace", 0, depth.check_variant, resizing, samples[0], depth.move(samples[0]), False, True)
    assert _failed(checker.outcomes, "inplace")

    # out= that ignores a wrong-dtype out, and an out on the CPU for openreg inputs.
    def lax_out(x, y, *, out=None, **kw):
        if out is not None and on_dev(x):
            return out.copy_(torch.add(x.to(out.device), y.to(out.device), **kw))
        return torch.add(x, y, out=out, **kw)
    op = _misbehaving("add", op=lax_out)
    outcomes = depth.check_op_dtype(op, torch.float32, max_samples=3, categories=["out"])
    assert _failed(outcomes, "out_dtype") and _failed(outcomes, "out_device")


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
