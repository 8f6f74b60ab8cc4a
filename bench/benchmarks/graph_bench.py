"""Host cost of issuing work: eager ops vs one graph replay (Note [Graphs on openreg] in
backend/registration/Graph.cpp), and what the timing model makes of it.

A chain of N small elementwise ops (the launch-bound case graphs exist for) is issued eagerly and as one
replay of its captured graph, in the same process, alternating, each timed from the first call to the
return of the last (the host's cost, not the device's: both leave the work queued). The table gives the
host time per op and the ratio. With --profile (default h100-sxm), a second part runs in a child process
under that device profile and reports the modelled step: host time and device wall time per step,
eager vs replay, as a GPU would see them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from bench.common.bench_table import print_table

# Both children: a chain of n small ops (n = argv[1]), warmed up, and its graph (replayed once).
CHAIN = r"""
import json, statistics, sys, time
import torch
n = int(sys.argv[1])
x = torch.ones(256, device="openreg")
def chain():
    y = x
    for _ in range(n):
        y = y * 1.0001
    return y
for _ in range(3):
    chain()
torch.openreg.synchronize()
g = torch.openreg.OpenRegGraph()
with torch.openreg.graph(g):
    out = chain()
g.replay()
torch.openreg.synchronize()
"""

MEASURE = CHAIN + r"""
reps = int(sys.argv[2])
eager, replay = [], []
for _ in range(reps):
    t = time.perf_counter(); chain(); eager.append(time.perf_counter() - t)
    torch.openreg.synchronize()
    t = time.perf_counter(); g.replay(); replay.append(time.perf_counter() - t)
    torch.openreg.synchronize()
print(json.dumps({"eager_s": statistics.median(eager), "replay_s": statistics.median(replay)}))
"""

MODELLED = CHAIN + r"""
out = {}
for name, step in (("eager", chain), ("replay", g.replay)):
    t0 = torch.openreg.timing.now()
    with torch.openreg.timing.region() as r:
        step()
        host = torch.openreg.timing.now() - t0
    out[name] = {"host_s": host, "wall_s": r.wall, "busy_s": r.devices[0].busy}
print(json.dumps(out))
"""


def child(code: str, args: list[str], env: dict[str, str]) -> dict:
    r = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(r.stderr)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, nargs="+", default=[50, 200])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--profile", default="h100-sxm")
    parser.add_argument("--out", default=None, help="JSON results")
    args = parser.parse_args()
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("OPENREG_")}

    rows, results = [], {"host": [], "modelled": []}
    for n in args.ops:
        m = child(MEASURE, [str(n), str(args.reps)], base_env)
        eager_us, replay_us = m["eager_s"] / n * 1e6, m["replay_s"] / n * 1e6
        rows.append({"ops": n, "eager µs/op": f"{eager_us:.2f}", "replay µs/op": f"{replay_us:.2f}",
                     "eager/replay": f"{eager_us / replay_us:.1f}×"})
        results["host"].append({"ops": n, "eager_us_per_op": eager_us, "replay_us_per_op": replay_us})
    print("Host time to issue a chain of small ops on this machine (median of", args.reps, "reps):")
    print_table(rows, indent="  ")

    if args.profile:
        rows = []
        env = dict(base_env, OPENREG_DEVICE_PROFILE=args.profile)
        for n in args.ops:
            m = child(MODELLED, [str(n)], env)
            e, r = m["eager"], m["replay"]
            rows.append({"ops": n, "eager host µs": f"{e['host_s'] * 1e6:.1f}",
                         "replay host µs": f"{r['host_s'] * 1e6:.1f}",
                         "eager step µs": f"{e['wall_s'] * 1e6:.1f}", "replay step µs": f"{r['wall_s'] * 1e6:.1f}",
                         "device busy µs": f"{r['busy_s'] * 1e6:.1f}",
                         "step eager/replay": f"{e['wall_s'] / r['wall_s']:.2f}×"})
            results["modelled"].append({"ops": n, "profile": args.profile, **{f"{k}_{q}": v for k, d in m.items()
                                                                            for q, v in d.items()}})
        print(f"\nModelled on {args.profile} (virtual time; one step = the chain, then a synchronize):")
        print_table(rows, indent="  ")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
