"""Symmetric-rank mode's cost on this machine (issue 41): wall time and memory of sizing a job of N ranks
with ``python -m torch_openreg.symmetric``, from 8 to 16,384 ranks, for a job of one role (FSDP2 over all
ranks) and one of four (a 4-stage GPipe pipeline, data parallel within each stage). Wall time
should grow with the number of roles, not with N. Prints a table, writes JSON and a plot.

    python -m bench.sweeps.symmetric_bench [--ranks 8 64 512 4096 16384] [--out bench/results]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "tests" / "support" / "symmetric_job.py"

# (name, the job's parallelism, launcher arguments for N ranks)
JOBS = [
    ("fsdp, 1 role", "fsdp", lambda n: ["--world-size", str(n)]),
    ("pipeline 4 stages x dp, 4 roles", "pp", lambda n: ["--mesh", f"pp=4,dp={n // 4}", "--vary", "pp"]),
]


def run(kind: str, args: list[str]) -> dict:
    env = dict(os.environ)
    env.update({"OPENREG_DEVICE_PROFILE": "h100-sxm", "PYTHONWARNINGS": "ignore"})
    with tempfile.TemporaryDirectory() as out:
        t0 = time.monotonic()
        cmd = [sys.executable, "-m", "torch_openreg.symmetric", *args, str(JOB), kind, "--pp", "4", "--out", out]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
        wall = time.monotonic() - t0
        if done.returncode != 0:
            raise RuntimeError(done.stderr[-3000:])
        ranks = [json.loads(p.read_text()) for p in Path(out).glob("rank*.json")]
    return {"wall_s": wall, "processes": len(ranks), "max_rss_gib": max(r["rss"] for r in ranks) / 2**30,
            "sum_rss_gib": sum(r["rss"] for r in ranks) / 2**30,
            "step_ms": max(r[kind]["step_ns"] for r in ranks) / 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[8, 64, 512, 4096, 16384])
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    a = ap.parse_args()
    rows = []
    print(f"{'job':34} {'ranks':>6} {'procs':>5} {'wall s':>7} {'max RSS GiB':>11} {'modelled step ms':>16}")
    for name, kind, args in JOBS:
        for n in a.ranks:
            r = {"job": name, "ranks": n, **run(kind, args(n))}
            rows.append(r)
            print(f"{name:34} {n:>6} {r['processes']:>5} {r['wall_s']:>7.1f} {r['max_rss_gib']:>11.2f} "
                  f"{r['step_ms']:>16.3f}", flush=True)
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "symmetric.json")
    with open(path, "w") as f:
        json.dump({"profile": "h100-sxm", "rows": rows}, f, indent=1)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, _, _ in JOBS:
        pts = [r for r in rows if r["job"] == name]
        ax.plot([r["ranks"] for r in pts], [r["wall_s"] for r in pts], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("ranks in the job (N)")
    ax.set_ylabel("wall time to size one step, s")
    ax.set_title("symmetric-rank mode on a 2-core machine: time grows with roles, not ranks")
    ax.legend()
    fig.tight_layout()
    png = os.path.join(a.out, "symmetric.png")
    fig.savefig(png, dpi=110)
    print(f"JSON: {path}\nplot: {png}")


if __name__ == "__main__":
    main()
