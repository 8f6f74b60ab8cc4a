"""The OpInfo sweep at PyTorch's test depth: every op of ``op_db``, every dtype it supports on the CPU,
every category of ``tests/support/opinfo_depth.py`` (forward, non-contiguous, method, in-place, out= and
its rules, error_inputs, float32 backward, float64 gradcheck for a subset), openreg against the CPU.

    python -m bench.sweeps.opinfo_sweep --report bench/results/opinfo_sweep.json     (make opinfo-sweep)

The ops run in child processes, a fresh one after each crash: an op that kills its process (SIGSEGV,
abort) or runs past ``--op-timeout`` is recorded as that op's failure and the sweep goes on with the next.
The report is rewritten after every op, so an interrupted sweep leaves its results so far (``--resume``
continues it). The ops are visited in a strided order (every 7th op first), so a partial sweep samples
the whole database rather than its alphabetical prefix.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKOUT = os.path.dirname(os.path.dirname(HERE))

STRIDE = 7

# float64 gradcheck (numerical vs analytical Jacobians) is slow: a representative subset of
# differentiable families (elementwise, reductions, linear algebra, indexing, shape, nn.functional).
GRADCHECK_OPS = {
    "add", "mul", "div", "exp", "tanh", "sigmoid", "pow", "atan2", "lerp", "addcmul", "sum", "mean", "prod",
    "amax", "logsumexp", "cumsum", "std", "var_mean", "mm", "bmm", "addmm", "matmul", "einsum", "linalg.solve",
    "cholesky", "linalg.norm", "gather", "index_select", "index_add", "scatter_add", "take", "masked_fill",
    "where", "cat", "stack", "permute", "flip", "roll", "repeat", "diagonal", "tril", "unfold", "cdist",
    "softmax", "log_softmax", "nn.functional.conv2d", "nn.functional.linear", "nn.functional.layer_norm",
    "nn.functional.avg_pool2d", "nn.functional.max_pool2d", "nn.functional.gelu", "nn.functional.mse_loss",
    "nn.functional.cross_entropy", "nn.functional.interpolate", "nn.functional.pad", "sort", "topk", "kthvalue",
}


def ordered_ops():
    import torch_openreg  # noqa: F401  (the device must exist before OpInfo makes error inputs on it)
    from torch.testing._internal.common_methods_invocations import op_db

    return [op_db[i] for s in range(STRIDE) for i in range(s, len(op_db), STRIDE)]


def child(args) -> int:
    """Runs ops [start, end) of the order, appending one JSON line per op to ``args.lines``; before each op
    it writes the op's index to ``args.lines + '.current'``, so the parent knows which op a crash killed."""
    from tests.support import opinfo_depth as depth

    ops = ordered_ops()
    end = min(args.end, len(ops))
    for n in range(args.start, end):
        op = ops[n]
        if args.only and depth.op_id(op) not in args.only and op.name not in args.only:
            continue
        with open(args.lines + ".current", "w") as f:
            f.write(str(n))
        t0 = time.time()
        outcomes = []
        dtypes = sorted(op.supported_dtypes("cpu"), key=str)
        for k, dtype in enumerate(dtypes):
            cats = [c for c in depth.CATEGORIES if c != "error_inputs" or k == 0]
            try:
                found = depth.check_op_dtype(op, dtype, max_samples=args.max_samples or None,
                                             max_variant_samples=args.max_variant_samples or None, categories=cats,
                                             gradcheck=op.name in GRADCHECK_OPS and not op.variant_test_name)
            except Exception as e:  # noqa: BLE001 - outside every check's guard: the harness's failure
                found = [depth.Outcome("harness", False, -1, depth.first_line(e))]
                depth.settle()
            for o in found:
                outcomes.append({"dtype": str(dtype).replace("torch.", ""), "category": o.category, "ok": o.ok,
                                 "sample": o.sample, "reason": o.reason})
        if not dtypes:
            outcomes.append({"dtype": "-", "category": "forward", "ok": True, "sample": -1,
                             "reason": "no dtype supported on the CPU"})
        record = {"index": n, "op": depth.op_id(op), "seconds": round(time.time() - t0, 2), "outcomes": outcomes}
        with open(args.lines, "a") as f:
            f.write(json.dumps(record) + "\n")
        fails = sum(1 for o in outcomes if not o["ok"])
        print(f"[{n + 1}/{len(ops)}] {depth.op_id(op)}: {len(outcomes) - fails} pass, {fails} fail "
              f"({record['seconds']}s)", flush=True)
    return 0


def read_lines(path) -> dict:
    records = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                if line.strip():
                    r = json.loads(line)
                    records[r["index"]] = r
    return records


def supervise(args) -> int:
    lines = args.report + ".jsonl"
    os.makedirs(os.path.dirname(os.path.abspath(lines)), exist_ok=True)
    if not args.resume and os.path.exists(lines):
        os.remove(lines)
    n_ops = len(ordered_ops())
    end = min(args.end if args.end is not None else n_ops, n_ops)
    start = args.start
    done = read_lines(lines)
    if args.resume and done:
        start = max(start, max(done) + 1)
    forwarded = ["--max-samples", str(args.max_samples), "--max-variant-samples", str(args.max_variant_samples)]
    if args.only:
        forwarded += ["--only", *args.only]
    current_path = lines + ".current"
    failed_starts = 0
    while start < end:
        if os.path.exists(current_path):
            os.remove(current_path)
        cmd = [sys.executable, "-m", __spec__.name, "--child", "--lines", lines, "--start", str(start),
               "--end", str(end), *forwarded]
        proc = subprocess.Popen(cmd)
        last_seen, last_change = None, time.time()
        timed_out = False
        while proc.poll() is None:
            time.sleep(2)
            seen = open(current_path).read() if os.path.exists(current_path) else None
            if seen != last_seen:
                last_seen, last_change = seen, time.time()
            elif time.time() - last_change > args.op_timeout:
                proc.kill()  # the child this loop started: a hung op
                proc.wait()
                timed_out = True
        if proc.returncode == 0:
            break
        if not os.path.exists(current_path):
            # The child died before its first op (torch or openreg failed to import, e.g. while the
            # library is being rebuilt): no op is to blame; try again a few times.
            failed_starts += 1
            if failed_starts > 10:
                print("the sweep's child process fails before its first op; giving up", flush=True)
                return 1
            time.sleep(30)
            continue
        failed_starts = 0
        done = read_lines(lines)
        killed = int(open(current_path).read())
        if killed not in done:
            ops = ordered_ops()
            from tests.support.opinfo_depth import op_id

            why = (f"no progress for {args.op_timeout}s (killed)" if timed_out
                   else f"crashed the process (exit {proc.returncode})")
            record = {"index": killed, "op": op_id(ops[killed]), "seconds": 0,
                      "outcomes": [{"dtype": "-", "category": "crash", "ok": False, "sample": -1, "reason": why}]}
            with open(lines, "a") as f:
                f.write(json.dumps(record) + "\n")
            print(f"[{killed + 1}/{n_ops}] {record['op']}: {why}", flush=True)
        start = killed + 1
    return summarize(lines, args.report)


def summarize(lines: str, report: str) -> int:
    records = read_lines(lines)
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    failures = []
    ops_ok = 0
    for r in sorted(records.values(), key=lambda r: r["op"]):
        ok = True
        for o in r["outcomes"]:
            counts[o["category"]]["pass" if o["ok"] else "fail"] += 1
            if not o["ok"]:
                ok = False
                failures.append({"op": r["op"], "dtype": o["dtype"], "category": o["category"],
                                 "sample": o["sample"], "reason": o["reason"]})
        ops_ok += ok
    summary = {
        "ops": len(records), "ops_all_pass": ops_ok,
        "categories": {c: dict(v) for c, v in sorted(counts.items())},
        "seconds": round(sum(r["seconds"] for r in records.values()), 1),
        "failures": failures,
    }
    os.makedirs(os.path.dirname(os.path.abspath(report)), exist_ok=True)
    with open(report, "w") as f:
        json.dump(summary, f, indent=1)
    from bench.common.bench_table import print_table

    print_table([{"category": c, "pass": v.get("pass", 0), "fail": v.get("fail", 0)}
                 for c, v in sorted(counts.items())], align="<")
    print(f"\n{ops_ok}/{len(records)} ops pass every check; {len(failures)} failing checks:")
    for f_ in failures:
        print(f"  {f_['op']} [{f_['dtype']}] {f_['category']} sample {f_['sample']}: "
              f"{f_['reason'].splitlines()[0] if f_['reason'] else ''}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--report", default=os.path.join(CHECKOUT, "bench", "results", "opinfo_sweep.json"))
    parser.add_argument("--max-samples", type=int, default=12, help="samples per op and dtype (0: all)")
    parser.add_argument("--max-variant-samples", type=int, default=4,
                        help="of those, how many the method, in-place and out= checks use (0: all)")
    parser.add_argument("--op-timeout", type=float, default=300.0, help="seconds one op may run")
    parser.add_argument("--only", nargs="*", help="op ids or names to run")
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--end", type=int, default=None)
    parser.add_argument("--resume", action="store_true", help="continue the sweep of --report")
    parser.add_argument("--summarize", action="store_true", help="only rewrite the report from its .jsonl")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--lines", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    if args.summarize:
        return summarize(args.report + ".jsonl", args.report)
    return supervise(args)


if __name__ == "__main__":
    sys.exit(main())
