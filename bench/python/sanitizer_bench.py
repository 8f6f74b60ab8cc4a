"""Cost of the stream race checker (OPENREG_SANITIZER) against the same work with it off, in one run.

    python bench/python/sanitizer_bench.py [--quick] [--out bench/results/sanitizer_bench.json]

Each configuration runs in its own process (the checker is decided once per process):

* small     - the small-op loop: per-op host time of add/mul/relu on 256 elements and mm 32x32, each
              loop followed by a synchronize (what ops_bench's `small` section measures);
* training  - the demo's training step: workloads.train_single on openreg:0 (an MLP, SGD, batch 128),
              time per optimizer step;
* training_dp - the demo's data-parallel step over openreg:0 and openreg:1 (events and peer copies).

Configurations: off (no variable), checker (OPENREG_SANITIZER=1: every access checked, a Python stack
gathered per op). Targets: checker / off <= 3x on `small`, <= 1.5x on the training steps. The hooks'
cost when off is one predictable branch on a static flag per op (Note [Sanitizer hooks]); there is no
build without them to compare against in the same run.

Prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(os.path.dirname(HERE), "results")

CONFIGS = {"off": {}, "checker": {"OPENREG_SANITIZER": "1"}}
TARGETS = {"small": 3.0, "training": 1.5, "training_dp": 1.5}


def section_small(quick: bool) -> dict:
    import torch

    n = 300 if quick else 2000
    out = {}
    cases = [("add[256]", (256,), lambda a, b: a + b), ("mul[256]", (256,), lambda a, b: a * b),
             ("relu[256]", (256,), lambda a, b: a.relu()), ("mm[32x32]", (32, 32), lambda a, b: a @ b)]
    for name, shape, fn in cases:
        a, b = torch.randn(shape, device="openreg"), torch.randn(shape, device="openreg")
        best = float("inf")
        for _ in range(3):
            for _ in range(50):
                fn(a, b)
            torch.openreg.synchronize()
            t0 = time.perf_counter()
            for _ in range(n):
                fn(a, b)
            torch.openreg.synchronize()
            best = min(best, (time.perf_counter() - t0) / n * 1e6)
        out[name] = best
    return out


def section_training(quick: bool, data_parallel: bool) -> dict:
    sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # the checkout: tests/support
    from tests.support import workloads

    x, y = workloads.make_data(seed=0, samples=512 if quick else 2048)
    model = workloads.make_model(seed=0)
    epochs = 2 if quick else 4
    if data_parallel:
        r = workloads.train_data_parallel(model, x, y, ["openreg:0", "openreg:1"], epochs=epochs, batch=128)
    else:
        r = workloads.train_single(model, x, y, "openreg:0", epochs=epochs, batch=128)
    return {"step_ms": r.step_seconds * 1e3}


def child(section: str, quick: bool) -> None:
    import torch  # noqa: F401  (autoloads torch_openreg)

    if section == "small":
        result = section_small(quick)
    else:
        result = section_training(quick, data_parallel=section == "training_dp")
    print("RESULT " + json.dumps(result))


def run_child(section: str, config: str, quick: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENREG_SANITIZER", "OPENREG_SCHEDULE_FUZZ")}
    env.update(CONFIGS[config])
    cmd = [sys.executable, os.path.abspath(__file__), "--child", section] + (["--quick"] if quick else [])
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"{section} under {config} failed:\n{proc.stdout}\n{proc.stderr}")
    line = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=os.path.join(RESULTS, "sanitizer_bench.json"))
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.quick)
        return 0

    rows = []
    small = {c: run_child("small", c, args.quick) for c in CONFIGS}
    for op in small["off"]:
        rows.append({"section": "small", "case": op, "unit": "us/op", "off": small["off"][op],
                     "checker": small["checker"][op]})
    for section in ("training", "training_dp"):
        res = {c: run_child(section, c, args.quick) for c in CONFIGS}
        rows.append({"section": section, "case": "step", "unit": "ms/step", "off": res["off"]["step_ms"],
                     "checker": res["checker"]["step_ms"]})
    for r in rows:
        r["ratio"] = r["checker"] / r["off"]
        r["target"] = TARGETS[r["section"]]

    print(f"{'section':<12} {'case':<10} {'unit':<8} {'off':>9} {'checker':>9} {'ratio':>7} {'target':>7}")
    for r in rows:
        print(f"{r['section']:<12} {r['case']:<10} {r['unit']:<8} {r['off']:>9.2f} {r['checker']:>9.2f} "
              f"{r['ratio']:>6.2f}x {'<=' + format(r['target'], 'g') + 'x':>7}")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"cores": os.cpu_count(), "quick": args.quick, "rows": rows}, f, indent=2)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
