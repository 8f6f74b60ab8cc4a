"""Calibration on whole workloads (issue 39, first part): runs the rows of tests/support/calibration.py
(published training and inference jobs rebuilt as plain PyTorch programs, in timing-only execution) and
prints modelled against published throughput, MFU and peak memory; JSON in bench/results/calibration.json.
No profile is fitted to these rows.

    python -m bench.sweeps.calibration_bench [--rows NAME ...] [--steps 2] [--out bench/results]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time

from tests.support.calibration import ROWS, run_row

HERE = os.path.dirname(os.path.abspath(__file__))


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def main() -> int:
    from bench.common.bench_table import print_table

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", nargs="*", help="names of rows to run (default: every runnable row)")
    parser.add_argument("--steps", type=int, default=2, help="timed steps per row (after one warm-up)")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(HERE), "results"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "calibration.json")
    previous = {}
    if os.path.exists(path):  # a run of some rows keeps the others' last results
        with open(path) as f:
            previous = {r["row"]: r for r in json.load(f)["rows"]}
    results = []
    for row in ROWS:
        if row.not_run is not None:
            results.append({"row": row.name, "profile": row.profile, "gpus": row.gpus, "not_run": row.not_run,
                            "published": row.published, "source": row.source, "setup": row.setup,
                            "notes": row.notes})
            continue
        if args.rows and row.name not in args.rows:
            if row.name in previous:
                results.append(previous[row.name])
            continue
        print(f"running {row.name} ({row.gpus} ranks, {row.profile}) ...", flush=True)
        try:
            results.append(run_row(row, args.steps))
        except AssertionError as err:  # a rank failed: the row reports it, the others still run
            print(f"{row.name} failed:\n{err}", flush=True)
            results.append({"row": row.name, "profile": row.profile, "gpus": row.gpus, "failed": str(err)[-4000:],
                            "published": row.published, "source": row.source, "setup": row.setup})
    table = []
    for r in results:
        pub = r["published"]
        run = "tok_s_gpu" in r
        if "oom" in r:  # a configuration the source reports out of memory
            shown = "out of memory" if r["oom"] else "fits"
        else:
            shown = _fmt(r.get("tok_s_gpu"), ",.0f") if run else ("failed" if "failed" in r else "not run")
        table.append({
            "row": r["row"], "profile": r["profile"], "GPUs": r["gpus"], "tok/s/GPU": shown,
            "published": "out of memory" if pub.get("oom") else _fmt(pub.get("tok_s_gpu"), ",.0f"), "ratio": _fmt(r.get("ratio"), ".2f"),
            "MFU": _fmt(r.get("mfu") and 100 * r["mfu"], ".1f"), "pub MFU": _fmt(pub.get("mfu") and 100 * pub["mfu"], ".1f"),
            "mem GiB": _fmt(r.get("mem_gib"), ".1f"), "pub mem": _fmt(pub.get("mem_gib"), ".1f"),
            "step s": _fmt(r.get("step_s"), ".3f"), "pub step": _fmt(pub.get("step_s"), ".2f"),
            "wall s": _fmt(r.get("wall_s"), ".0f"), "rank RSS GiB": _fmt(r.get("max_rank_rss_gib"), ".2f"),
        })
    print_table(table, align="<<")
    compared = {row.name for row in ROWS if row.compared}
    errors = [abs(r["ratio"] - 1) for r in results if "ratio" in r and r["row"] in compared]
    summary = {}
    if errors:
        summary = {"median_abs_error": statistics.median(errors), "worst_abs_error": max(errors)}
        print(f"throughput |error| over {len(errors)} rows run: median {100 * summary['median_abs_error']:.1f}%, "
              f"worst {100 * summary['worst_abs_error']:.1f}%")
    with open(path, "w") as f:
        json.dump({"rows": results, "summary": summary, "steps": args.steps,
                   "date": time.strftime("%Y-%m-%d")}, f, indent=1)
    print(f"JSON: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
