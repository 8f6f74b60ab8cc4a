"""Device memory under ordinary loops: CUDA's stream-ordered caching allocator on openreg.

Prints a table and writes bench/results/memory_bench.json (ratios measured in one run, medians of 3).
Sections (each in its own process, because the openreg configuration is read once per process):

  add        1M-float `z = x + x` loop with results dropped: peak device memory above the input, time per
             op vs the out= version (`torch.add(x, x, out=y)`) and vs CPU eager at the device's thread count
  rss        200k small ops issued from one thread: growth of the process's resident memory (sin on
             1024 floats, which the device keeps up with; rss_backlog: sin on 256x256, which it does not)
  capacity   loops at OPENREG_MEMORY_CAPACITY=256M and 1G: `y = x.sin()` (256x256), `t = empty(1M);
             t.fill_(1); del t`, `z = x + x` (1M floats), `x = (x @ w).tanh_()` (512x512), without OOM

Resident memory of the `rss` section also depends on how far the host may run ahead of the device
(the bounded launch queue, OPENREG_LAUNCH_QUEUE_DEPTH, where the build has it).

Usage: python -m bench.benchmarks.memory_bench [--quick] [--out bench/results/memory_bench.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from bench.common.bench_process import ChildFailed, child_env, load_openreg, run_child, write_results

MiB = 1 << 20
TARGETS = {
    "add": "peak above input <= 16 MiB; per op <= 1.3x out= and <= 1.3x CPU eager",
    "rss": "RSS growth <= 256 MiB",
    "capacity": "20k iterations at 256 MiB and 1 GiB without OOM",
}


def _rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def section_add(quick):
    torch = load_openreg()
    n = 100 if quick else 300
    threads = torch.openreg.get_device_properties(0).multi_processor_count
    torch.set_num_threads(threads)
    x = torch.randn(1 << 20, device="openreg")
    out = torch.empty_like(x)
    xc = torch.randn(1 << 20)
    outc = torch.empty_like(xc)
    torch.openreg.synchronize()
    input_bytes = torch.openreg.memory_allocated()

    def loop_dropped():
        for _ in range(n):
            z = x + x  # noqa: F841
        torch.openreg.synchronize()

    def loop_out():
        for _ in range(n):
            torch.add(x, x, out=out)
        torch.openreg.synchronize()

    def loop_cpu():
        for _ in range(n):
            z = xc + xc  # noqa: F841

    def loop_cpu_out():
        for _ in range(n):
            torch.add(xc, xc, out=outc)

    def per_op_us(fn):
        fn()  # warm
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) / n * 1e6)
        return statistics.median(times)

    torch.openreg.reset_peak_memory_stats()
    loop_dropped()
    peak_above = torch.openreg.max_memory_allocated() - input_bytes
    reserved_peak = torch.openreg.max_memory_reserved()
    dropped = per_op_us(loop_dropped)
    with_out = per_op_us(loop_out)
    cpu = per_op_us(loop_cpu)
    cpu_out = per_op_us(loop_cpu_out)
    return {
        "iterations": n,
        "threads": threads,
        "peak_allocated_above_input_mib": peak_above / MiB,
        "peak_reserved_mib": reserved_peak / MiB,
        "openreg_us_per_op": dropped,
        "openreg_out_us_per_op": with_out,
        "cpu_us_per_op": cpu,
        "cpu_out_us_per_op": cpu_out,
        "ratio_vs_out": dropped / with_out,
        "ratio_vs_cpu": dropped / cpu,
    }


def section_rss(quick, shape=(1024,)):
    torch = load_openreg()
    n = 20000 if quick else 200000
    x = torch.randn(*shape, device="openreg")
    for _ in range(1000):  # warm: allocator, meta cache, kernels
        y = x.sin()
    torch.openreg.synchronize()
    before = _rss_bytes()
    peak = before
    t0 = time.perf_counter()
    for i in range(n):
        y = x.sin()  # noqa: F841
        if i % 1000 == 0:
            peak = max(peak, _rss_bytes())
    issued = time.perf_counter() - t0
    peak = max(peak, _rss_bytes())
    torch.openreg.synchronize()
    total = time.perf_counter() - t0
    return {
        "ops": n,
        "shape": list(shape),
        "rss_growth_peak_mib": (peak - before) / MiB,
        "rss_growth_end_mib": (_rss_bytes() - before) / MiB,
        "issue_s": issued,
        "total_s": total,
        "peak_allocated_mib": torch.openreg.max_memory_allocated() / MiB,
    }


def section_capacity(quick, capacity):
    torch = load_openreg()
    n = 2000 if quick else 20000
    n_mm = 200 if quick else 20000  # 512x512 matmuls are compute bound: 20k take about a minute
    results = {"capacity": capacity}

    def run(name, iterations, body):
        torch.openreg.synchronize()
        torch.openreg.reset_peak_memory_stats()
        t0 = time.perf_counter()
        ok = True
        try:
            body(iterations)
            torch.openreg.synchronize()
        except torch.OutOfMemoryError:
            ok = False
        stats = torch.openreg.memory_stats()
        results[name] = {
            "iterations": iterations,
            "ok": ok,
            "seconds": time.perf_counter() - t0,
            "peak_reserved_mib": stats["reserved_bytes.all.peak"] / MiB,
            "num_ooms": stats["num_ooms"],
        }

    x = torch.randn(256, 256, device="openreg")

    def sin_loop(k):
        for _ in range(k):
            y = x.sin()  # noqa: F841

    def fill_loop(k):
        for _ in range(k):
            t = torch.empty(1 << 20, device="openreg")
            t.fill_(1)
            del t

    big = torch.randn(1 << 20, device="openreg")

    def add_loop(k):
        for _ in range(k):
            z = big + big  # noqa: F841

    w = torch.randn(512, 512, device="openreg") / 512

    def mm_loop(k):
        a = torch.randn(512, 512, device="openreg")
        for _ in range(k):
            a = (a @ w).tanh_()

    run("sin", n, sin_loop)
    run("empty_fill", n, fill_loop)
    run("add", n, add_loop)
    run("mm_tanh", n_mm, mm_loop)
    return results


SECTIONS = {
    "add": lambda quick: section_add(quick),
    "rss": lambda quick: section_rss(quick),
    # 256x256 sin takes the device longer than the host takes to issue it: the queue grows unless
    # the launch queue is bounded.
    "rss_backlog": lambda quick: section_rss(quick, (256, 256)),
    "capacity_256M": lambda quick: section_capacity(quick, "256M"),
    "capacity_1G": lambda quick: section_capacity(quick, "1G"),
}
ENV = {"capacity_256M": {"OPENREG_MEMORY_CAPACITY": "256M"}, "capacity_1G": {"OPENREG_MEMORY_CAPACITY": "1G"}}


def run_section(name, quick):
    # The caller's OPENREG_* variables stay: the rss figures depend on settings such as
    # OPENREG_LAUNCH_QUEUE_DEPTH, which a run may set to compare.
    env = child_env(ENV.get(name), inherit_openreg=True)
    try:
        return run_child(__spec__.name, ["--section", name], env, quick)
    except ChildFailed as e:
        return {"error": e.output_tail(2000)}


# The `add` section's rows: (measure, its key in the section's result, number format).
ADD_ROWS = [
    ("peak allocated above input (MiB)", "peak_allocated_above_input_mib", ".2f"),
    ("z = x + x, us/op", "openreg_us_per_op", ".1f"),
    ("add(out=), us/op", "openreg_out_us_per_op", ".1f"),
    ("CPU eager z = x + x, us/op", "cpu_us_per_op", ".1f"),
    ("ratio vs out= (target <= 1.3)", "ratio_vs_out", ".2f"),
    ("ratio vs CPU eager (target <= 1.3)", "ratio_vs_cpu", ".2f"),
]


def _row(section, measure, value, fmt=""):
    # Fixed columns with no gap between them: a label longer than its column is not cut, it pushes the
    # value to the right.
    print(f"{section:<16}{measure:<46}{value:>14{fmt}}")


def print_table(results):
    _row("section", "measure", "value")
    a = results.get("add", {})
    if "error" not in a and a:
        for i, (measure, key, fmt) in enumerate(ADD_ROWS):
            _row("add" if i == 0 else "", measure, a[key], fmt)  # the section named on its first row only
    for key in ("rss", "rss_backlog"):
        r = results.get(key, {})
        if "error" in r or not r:
            continue
        _row(key, f"{r['ops']} x sin{tuple(r['shape'])}: RSS growth peak (MiB)", r["rss_growth_peak_mib"], ".1f")
        _row("", "RSS growth at the end (MiB)", r["rss_growth_end_mib"], ".1f")
    for key in ("capacity_256M", "capacity_1G"):
        c = results.get(key, {})
        if "error" in c or not c:
            continue
        for loop in ("sin", "empty_fill", "add", "mm_tanh"):
            e = c[loop]
            status = "ok" if e["ok"] else "OOM"
            _row(key, f"{loop} x{e['iterations']}: {status}, peak reserved MiB", e["peak_reserved_mib"], ".1f")
    for key, value in results.items():
        if isinstance(value, dict) and "error" in value:
            print(f"{key}: FAILED\n{value['error']}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--section", choices=sorted(SECTIONS), help=argparse.SUPPRESS)
    parser.add_argument("--only", nargs="*", choices=sorted(SECTIONS), help="sections to run (default: all)")
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    parser.add_argument("--out", default=os.path.join("bench", "results", "memory_bench.json"))
    args = parser.parse_args()
    if args.section:
        print(json.dumps(SECTIONS[args.section](args.quick)))
        return
    results = {"targets": TARGETS, "quick": args.quick}
    for name in args.only or SECTIONS:
        results[name] = run_section(name, args.quick)
    print_table(results)
    write_results(results, args.out)


if __name__ == "__main__":
    main()
