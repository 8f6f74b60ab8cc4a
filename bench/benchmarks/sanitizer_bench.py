"""Cost of the stream race checker (OPENREG_SANITIZER) against the same work with it off, in one run.

    python -m bench.benchmarks.sanitizer_bench [--quick] [--rounds N] [--out bench/results/sanitizer_bench.json]

Each configuration runs in its own process (the checker is decided once per process):

* small     - the small-op loop: per-op host time of add/mul/relu on 256 elements and mm 32x32, each
              loop followed by a synchronize (what ops_bench's `small` section measures);
* training  - the demo's training step: workloads.train_single on openreg:0 (an MLP, SGD, batch 128),
              time per optimizer step;
* training_dp - the demo's data-parallel step over openreg:0 and openreg:1 (events and peer copies).

Configurations: off (no variable), checker (OPENREG_SANITIZER=1: every access checked, a Python stack
gathered per op). Each configuration runs `--rounds` times, alternating with the other, and the best
figure of each is kept, so that a burst of load from other processes skews one round rather than the
ratio; the machine's idle share during the run is recorded (`idle`, from /proc/stat) so a figure taken
under load can be told from a quiet one. Targets: checker / off <= 3x on `small`, <= 1.5x on the training steps. The hooks'
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
    cmd = [sys.executable, "-m", __spec__.name, "--child", section] + (["--quick"] if quick else [])
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"{section} under {config} failed:\n{proc.stdout}\n{proc.stderr}")
    line = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def cpu_idle() -> tuple[int, int] | None:
    """(idle ticks, all ticks) of the machine so far, or None where /proc/stat is absent."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except OSError:
        return None
    return fields[3], sum(fields)


def best_of(section: str, quick: bool, rounds: int) -> dict:
    """Each configuration `rounds` times, alternating; per figure, the best (lowest) of the rounds."""
    best: dict = {c: {} for c in CONFIGS}
    for _ in range(rounds):
        for c in CONFIGS:
            for k, v in run_child(section, c, quick).items():
                best[c][k] = min(v, best[c].get(k, float("inf")))
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=None, help="runs per configuration (default 2, quick 1)")
    parser.add_argument("--out", default=os.path.join(RESULTS, "sanitizer_bench.json"))
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.quick)
        return 0

    rounds = args.rounds if args.rounds is not None else (1 if args.quick else 2)
    idle0 = cpu_idle()
    rows = []
    small = best_of("small", args.quick, rounds)
    for op in small["off"]:
        rows.append({"section": "small", "case": op, "unit": "us/op", "off": small["off"][op],
                     "checker": small["checker"][op]})
    for section in ("training", "training_dp"):
        res = best_of(section, args.quick, rounds)
        rows.append({"section": section, "case": "step", "unit": "ms/step", "off": res["off"]["step_ms"],
                     "checker": res["checker"]["step_ms"]})
    for r in rows:
        r["ratio"] = r["checker"] / r["off"]
        r["target"] = TARGETS[r["section"]]
    idle1 = cpu_idle()
    idle = None
    if idle0 is not None and idle1 is not None and idle1[1] > idle0[1]:
        idle = (idle1[0] - idle0[0]) / (idle1[1] - idle0[1])

    print(f"{'section':<12} {'case':<10} {'unit':<8} {'off':>9} {'checker':>9} {'ratio':>7} {'target':>7}")
    for r in rows:
        print(f"{r['section']:<12} {r['case']:<10} {r['unit']:<8} {r['off']:>9.2f} {r['checker']:>9.2f} "
              f"{r['ratio']:>6.2f}x {'<=' + format(r['target'], 'g') + 'x':>7}")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"cores": os.cpu_count(), "quick": args.quick, "rounds": rounds, "idle": idle, "rows": rows}, f,
                  indent=2)
    if idle is not None:
        print(f"machine idle {idle:.0%} of the time while it ran (other processes load it when this is low)")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
