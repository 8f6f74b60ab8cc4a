"""torchtitan's published Llama 3 jobs, sized by torchtitan itself on openreg (issues 39, 40 and 41).

    build/ecosystem-venv/bin/python -m bench.sweeps.titan_sizing [--quick] [--out bench/results/titan_sizing.json]

Each row runs torchtitan's own training loop, its code unchanged, in timing-only execution under a
device profile, with one process per pipeline stage standing for all of a job's ranks
(``python -m torch_openreg.symmetric``), and reads torchtitan's own log lines: tokens/s per GPU, MFU and
memory, on the modelled GPU's clock (``OPENREG_PERF_COUNTER=virtual``). The configurations are
torchtitan's (``tests/ecosystem/openreg_titan``: varlen attention in place of FlexAttention), the
dataset the long-document stand-in (every row one document, so attention costs full causal attention,
as on the published runs: ``tests/ecosystem/torchtitan_assets.py``). The figure is the third step's
(steady state); the ratio is modelled / published tokens per second per GPU. Virtual figures are
exactly reproducible; the wall time and peak RSS are this machine's. ``--quick`` leaves out the 405B row
(8.5 minutes of the ~11). What each row is and why some are off: docs/distributed.md, "Sizing
torchtitan's published jobs". Run it with the ecosystem venv's Python (``make deps-ecosystem``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time

from bench.common.bench_process import write_results
from bench.common.bench_table import print_table
from tests.ecosystem.openreg_titan import log_lines, sizing_args
from tests.ecosystem.torchtitan_assets import build

CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ECOSYSTEM = os.path.join(CHECKOUT, "tests", "ecosystem")
H100, A100 = "h100-sxm-500w", "a100-sxm"
H100_REPORT = "torchtitan benchmarks/llama3_h100_202412_torchtitan.md"

# (row, profile, config, symmetric layout, torchtitan arguments, published tokens/s/GPU, published GiB, source)
ROWS = [
    ("8B FSDP 8, batch 2, selective op AC", H100, "llama3_8b_varlen", ["--world-size", "8"],
     ["--training.local-batch-size", "2"], 5762, 82.4, f"{H100_REPORT}, Table 1"),
    ("8B FSDP 128, batch 2, selective op AC", H100, "llama3_8b_varlen", ["--world-size", "128"],
     ["--training.local-batch-size", "2"], 5605, 67.0, f"{H100_REPORT}, Table 3"),
    ("70B FSDP 32 x TP 8, batch 16, full AC", H100, "llama3_70b_varlen", ["--world-size", "256"],
     ["--training.local-batch-size", "16"], 829, 71.9, f"{H100_REPORT}, Table 4 (compiled, Float8)"),
    ("405B PP 8 x FSDP 8 x TP 8, 1F1B, full AC", H100, "llama3_405b_varlen",
     ["--mesh", "pp=8,dp_shard=8,tp=8", "--vary", "pp"],
     ["--training.local-batch-size", "32", "--compile.no-enable", "--training.disable-cuda-graphs",
      "--parallelism.pipeline-parallel-degree", "8", "--parallelism.pipeline-parallel-schedule", "1F1B",
      "--parallelism.pipeline-parallel-microbatch-size", "1"], 100, 82.5, f"{H100_REPORT}, Table 5 (compiled, Float8)"),
    ("8B FSDP 64, batch 1, selective op AC", A100, "llama3_8b_varlen", ["--world-size", "64"],
     ["--training.local-batch-size", "1"], 2973, None, "torchtitan docs/performance.md"),
    ("70B FSDP 64, batch 1, full AC", A100, "llama3_70b_varlen", ["--world-size", "64"],
     ["--training.local-batch-size", "1", "--parallelism.tensor-parallel-degree", "1"], 331, None,
     "torchtitan docs/performance.md"),
]
STEPS = 3


def _ranks(layout: list[str]) -> int:
    """The job's ranks: --world-size N, or the product of --mesh's sizes."""
    value = layout[layout.index("--world-size" if "--world-size" in layout else "--mesh") + 1]
    ranks = 1
    for dim in value.split(","):
        ranks *= int(dim.split("=")[-1])
    return ranks


def _run(assets: str, out: str, profile: str, config: str, layout: list[str], extra: list[str]) -> dict:
    """One sizing run; torchtitan's last logged step, the wall time and the largest process's RSS."""
    cmd = [sys.executable, "-m", "torch_openreg.symmetric", *layout, *sizing_args(assets, out, config, STEPS, *extra)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENREG_")}
    env.update({"OPENREG_DEVICE_PROFILE": profile, "OPENREG_PERF_COUNTER": "virtual", "PYTHONPATH": ECOSYSTEM,
                "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": os.path.join(out, "hf")})
    start = time.monotonic()
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
        hung = threading.Timer(1800, proc.kill)  # a hung run fails its row instead of stalling the sweep
        hung.start()
        # wait4: this run's largest process (the launcher's children are waited for inside it), in kB
        _, status, usage = os.wait4(proc.pid, 0)
        hung.cancel()
        wall = time.monotonic() - start
        log.seek(0)
        output = log.read()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise RuntimeError(f"{config} exited {code}:\n{output[-3000:]}")
    steps = log_lines(output)
    if STEPS not in steps:
        raise RuntimeError(f"{config}: no line for step {STEPS}:\n{output[-3000:]}")
    mem, tps, tflops, mfu = steps[STEPS][0]
    return {"tok_s_gpu": tps, "tflops": tflops, "mfu": mfu, "mem_gib": mem, "wall_s": round(wall, 1),
            "max_rss_gib": round(usage.ru_maxrss / 2**20, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="leave out the 405B row")
    ap.add_argument("--out", default=os.path.join(CHECKOUT, "bench", "results", "titan_sizing.json"))
    args = ap.parse_args()
    results, table = [], []
    with tempfile.TemporaryDirectory() as tmp:
        build(os.path.join(tmp, "assets"))
        for row, profile, config, layout, extra, tps, mem, source in ROWS:
            if args.quick and "405B" in row:
                continue
            got = _run(os.path.join(tmp, "assets"), os.path.join(tmp, config), profile, config, layout, extra)
            ranks = _ranks(layout)
            results.append({"row": row, "profile": profile, "ranks": ranks, "config": config, "args": extra,
                            "published": {"tok_s_gpu": tps, "mem_gib": mem}, "source": source, **got,
                            "ratio": got["tok_s_gpu"] / tps})
            table.append({"row": row, "profile": profile, "ranks": ranks, "tok/s/GPU": f"{got['tok_s_gpu']:,.0f}",
                          "published": f"{tps:,}", "ratio": f"{got['tok_s_gpu'] / tps:.3f}", "MFU %": got["mfu"],
                          "GiB": f"{got['mem_gib']:.1f}" + (f" / {mem}" if mem else ""),
                          "wall s": got["wall_s"], "RSS GiB": got["max_rss_gib"]})
            print(f"{row}: {got}", flush=True)
    print_table(table, align="<<")
    write_results({"rows": results, "steps": STEPS, "date": time.strftime("%Y-%m-%d")}, args.out)


if __name__ == "__main__":
    main()
