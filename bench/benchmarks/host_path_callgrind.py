"""Instructions per small op on the calling thread, openreg vs CPU eager, counted by callgrind.

Wall-clock timings of a 5 us op are noise on a shared machine; instruction counts are repeatable. The
script re-runs itself under `valgrind --tool=callgrind` and brackets each measured loop with two libc
calls the loop never makes: callgrind zeroes its counters when `getppid` is entered and dumps them when
`getpgrp` is entered (`--zero-before` / `--dump-before`), so each dump holds exactly one loop. With
`--separate-threads=yes` a dump triggered by the main thread holds the main thread only: the host
path, what issue 10 asks to bring to CPU-eager parity (openreg's device threads run the kernels and
are not counted; CPU eager runs its kernels on the calling thread, so mm's ratio is below 1).

Each op runs `--iters` times with its result dropped, after a warm-up (plans, meta cache, allocator
pools). The figures include the Python loop and the call from Python (`empty` measures that alone), the
same for both backends. openreg streams are drained outside the counted region.

Prints a table and writes bench/results/host_path_callgrind.json.

Usage: python -m bench.benchmarks.host_path_callgrind [--iters 2000] [--out bench/results/host_path_callgrind.json]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "..", "results", "host_path_callgrind.json")

def _cat(a, b):
    import torch

    torch.cat(a)


def _foreach_add_(a, b):
    import torch

    torch._foreach_add_(a, b, alpha=0.5)  # an SGD step's update over a list of parameters


def _foreach_mul_(a, b):
    import torch

    torch._foreach_mul_(a, 0.5)  # momentum's decay


# (name, shape, body, lists): the body is called with two tensors of `shape` (two lists of `lists` such
# tensors when `lists` is not 0) and its result dropped.
CASES = [
    ("empty", (1,), lambda a, b: None),
    ("add[1024]", (1024,), lambda a, b: a + b),
    ("relu[1024]", (1024,), lambda a, b: a.relu()),
    ("mm[32x32]", (32, 32), lambda a, b: a @ b),
    # Not a fast kernel: the boxed engine (plan, shape-pass cache, CPU aliases, one work item).
    ("sigmoid[1024]", (1024,), lambda a, b: a.sigmoid()),
    ("addcmul[1024]", (1024,), lambda a, b: a.addcmul(a, b)),
    # A list argument: one work item over eight tensors.
    ("cat[8x1024]", (1024,), _cat, 8),
    # An optimizer's multi-tensor ops over 8 parameters: one call, all tensors on one device (aten's
    # per-tensor loop of add_ / mul_ on either backend).
    ("foreach_add_[8x1024]", (1024,), _foreach_add_, 8),
    ("foreach_mul_[8x1024]", (1024,), _foreach_mul_, 8),
]
CASES = [c if len(c) == 4 else (*c, 0) for c in CASES]
BACKENDS = ("cpu", "openreg")


def inner(iters: int) -> None:
    """Runs under callgrind: one zero/dump bracket per (backend, case), in the order of `plan`."""
    import torch

    if not hasattr(torch, "openreg"):
        import torch_openreg  # noqa: F401

    torch.manual_seed(0)
    for backend in BACKENDS:
        for name, shape, body, lists in CASES:
            if lists:
                a = [torch.randn(shape).to(backend) for _ in range(lists)]
                b = [torch.randn(shape).to(backend) for _ in range(lists)]
            else:
                a = torch.randn(shape).to(backend)
                b = torch.randn(shape).to(backend)
            for _ in range(50):  # warm-up: plans, caches, allocator pools
                body(a, b)
            if backend == "openreg":
                torch.openreg.synchronize()
            os.getppid()  # callgrind: zero the counters
            for _ in range(iters):
                body(a, b)
            os.getpgrp()  # callgrind: dump them
            if backend == "openreg":
                torch.openreg.synchronize()
            print(f"measured {backend} {name}", flush=True)


def parse_dumps(directory: str) -> dict[int, dict[int, int]]:
    """{part: {thread: instructions}} of every dump callgrind wrote."""
    parts: dict[int, dict[int, int]] = {}
    for path in glob.glob(os.path.join(directory, "callgrind.out.*")):
        header = {}
        with open(path, errors="replace") as f:
            for line in f:
                m = re.match(r"^(part|thread|summary|totals): *(\d+)", line)
                if m:
                    header[m.group(1)] = int(m.group(2))
        if "part" not in header or "thread" not in header:
            continue
        count = header.get("summary", 0)  # the dump's total; `totals` also counts frames open at the zero
        parts.setdefault(header["part"], {})[header["thread"]] = count
    return parts


def outer(iters: int, out: str) -> list[dict]:
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        sys.exit("valgrind not found: install it (apt-get install valgrind)")
    workdir = tempfile.mkdtemp(prefix="openreg_callgrind_")
    cmd = [
        valgrind, "--tool=callgrind", "--separate-threads=yes", "--zero-before=getppid", "--dump-before=getpgrp",
        f"--callgrind-out-file={workdir}/callgrind.out.%p", sys.executable, os.path.abspath(__file__), "--inner",
        "--iters", str(iters),
    ]
    env = dict(os.environ, PYTHONHASHSEED="0")
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr[-4000:])
        sys.exit(f"the run under callgrind failed ({proc.returncode})")
    parts = parse_dumps(workdir)
    shutil.rmtree(workdir, ignore_errors=True)
    # Dumps are numbered in the order the brackets closed; the final dump at exit has the highest part.
    measured = sorted(parts)[: len(BACKENDS) * len(CASES)]
    if len(measured) != len(BACKENDS) * len(CASES):
        sys.exit(f"expected {len(BACKENDS) * len(CASES)} dumps, found {len(parts)}")
    rows = []
    k = 0
    for backend in BACKENDS:
        for name, *_ in CASES:
            threads = parts[measured[k]]
            k += 1
            rows.append({"backend": backend, "op": name, "host_instructions_per_op": round(threads.get(1, 0) / iters)})
    by_op = {}
    for r in rows:
        by_op.setdefault(r["op"], {})[r["backend"]] = r
    table = []
    for name, *_ in CASES:
        cpu = by_op[name]["cpu"]["host_instructions_per_op"]
        dev = by_op[name]["openreg"]["host_instructions_per_op"]
        table.append({"op": name, "cpu_host": cpu, "openreg_host": dev, "ratio": round(dev / cpu, 2) if cpu else None})
    print(f"callgrind instructions per op on the calling thread ({iters} iterations, results dropped)")
    print(f"{'op':<22}{'CPU eager':>12}{'openreg':>12}{'ratio':>8}")
    for t in table:
        ratio = "" if t["ratio"] is None else f"{t['ratio']:.2f}"
        print(f"{t['op']:<22}{t['cpu_host']:>12}{t['openreg_host']:>12}{ratio:>8}")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"iterations": iters, "unit": "instructions per op (callgrind Ir)", "rows": table,
                   "python": sys.version.split()[0]}, f, indent=2)
    print(f"wrote {out}")
    return table


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=2000)
    p.add_argument("--out", default=DEFAULT_OUT)
    p.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.inner:
        inner(args.iters)
    else:
        outer(args.iters, args.out)


if __name__ == "__main__":
    main()
