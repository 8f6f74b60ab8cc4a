"""Op execution on openreg vs CPU eager, measured in the same run.

Prints a table and writes bench/results/ops_bench.json. Sections (each in its own process, because the
openreg configuration is read once per process):

  small      per-op host time of small ops (elementwise on 1..1024 elements, mm 32x32): openreg / CPU
  async      host return time of a 2048x2048 mm vs its execution time
  large      throughput of large ops (mm 2048, conv2d batch): CPU time / openreg time
  streams    small independent kernels on two streams of one device vs one stream
  devices    the same work over openreg:0 and openreg:1 vs one device

Every section runs at the DEFAULT configuration (no OPENREG_* variable: what users get; each device may
use every core, Note [Elastic device concurrency]); `--tuned` adds each section again under the tuned
configuration labelled beside it (OPENREG_DEVICE_COUNT=1; for `devices`, OPENREG_COMPUTE_THREADS=1).
bench/benchmarks/default_config_bench.py has issue 10's full figure list.

Usage: python -m bench.benchmarks.ops_bench [--quick] [--out bench/results/ops_bench.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from bench.common import bench_table
from bench.common.bench_process import ChildFailed, child_env, load_openreg, run_child, write_results
from bench.common.bench_workloads import kernels_over_devices, kernels_over_streams

CORES = os.cpu_count() or 1
TARGETS = {
    "small": "openreg/CPU per-op host time <= 2.0 (stretch 1.5)",
    "async": "return time / execution time < 5%",
    "large": "CPU time / openreg time >= 0.85",
    "streams": "two streams / one stream throughput >= 1.6",
    "devices": "two devices / one device throughput >= 1.6",
}


def per_call_us(fn, n, warmup=50):
    for _ in range(warmup):
        fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def best_of(k, measure):
    return min(measure() for _ in range(k))


def seconds(fn, *args):
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def section_small(quick):
    torch = load_openreg()
    n = 500 if quick else 3000
    rows = []
    cases = []
    for size in (1, 16, 256, 1024):
        cases += [(f"add[{size}]", (size,), lambda a, b: a + b), (f"mul[{size}]", (size,), lambda a, b: a * b),
                  (f"relu[{size}]", (size,), lambda a, b: a.relu())]
    cases.append(("mm[32x32]", (32, 32), lambda a, b: a @ b))
    for name, shape, fn in cases:
        a, b = torch.randn(shape), torch.randn(shape)
        da, db = a.to("openreg"), b.to("openreg")
        cpu = best_of(3, lambda: per_call_us(lambda: fn(a, b), n))

        def dev_measure():
            r = per_call_us(lambda: fn(da, db), n)
            torch.openreg.synchronize()
            return r

        dev = best_of(3, dev_measure)
        rows.append({"op": name, "cpu_us": round(cpu, 2), "openreg_us": round(dev, 2), "ratio": round(dev / cpu, 2)})
    return rows


def section_async(quick):
    torch = load_openreg()
    a = torch.randn(2048, 2048, device="openreg")
    b = torch.randn(2048, 2048, device="openreg")
    (a @ b)
    torch.openreg.synchronize()
    rows = []
    for _ in range(2 if quick else 5):
        t0 = time.perf_counter()
        c = a @ b
        t1 = time.perf_counter()
        torch.openreg.synchronize()
        t2 = time.perf_counter()
        rows.append({"return_ms": round((t1 - t0) * 1e3, 3), "execution_ms": round((t2 - t0) * 1e3, 2),
                     "ratio_pct": round(100 * (t1 - t0) / (t2 - t0), 3)})
        del c
    return rows


def section_large(quick):
    torch = load_openreg()
    reps = 2 if quick else 5
    rows = []
    cases = [
        ("mm[2048]", lambda dev: (torch.randn(2048, 2048, device=dev), torch.randn(2048, 2048, device=dev)),
         lambda a, b: a @ b),
        ("conv2d[16x32x64x64,k3]", lambda dev: (torch.randn(16, 32, 64, 64, device=dev),
                                               torch.randn(64, 32, 3, 3, device=dev)),
         lambda x, w: torch.nn.functional.conv2d(x, w, padding=1)),
    ]
    for name, make, fn in cases:
        times = {}
        for dev in ("cpu", "openreg"):
            args = make(dev)
            fn(*args)
            if dev == "openreg":
                torch.openreg.synchronize()

            def once():
                t0 = time.perf_counter()
                for _ in range(reps):
                    fn(*args)
                if dev == "openreg":
                    torch.openreg.synchronize()
                return (time.perf_counter() - t0) / reps * 1e3

            times[dev] = best_of(2, once)
        rows.append({"op": name, "cpu_ms": round(times["cpu"], 2), "openreg_ms": round(times["openreg"], 2),
                     "throughput_ratio": round(times["cpu"] / times["openreg"], 3)})
    return rows


def section_streams(quick):
    torch = load_openreg()
    count = 200 if quick else 1000
    run = kernels_over_streams(torch, count)  # each run waits for its kernels: the next starts idle
    run(2)
    one = best_of(3, lambda: seconds(run, 1))
    two = best_of(3, lambda: seconds(run, 2))
    return [{"kernels": count, "one_stream_ms": round(one * 1e3, 2), "two_streams_ms": round(two * 1e3, 2),
             "speedup": round(one / two, 3)}]


def section_devices(quick):
    torch = load_openreg()
    count = 200 if quick else 1000
    run = kernels_over_devices(torch, count)
    run(2)
    one = best_of(3, lambda: seconds(run, 1))
    two = best_of(3, lambda: seconds(run, 2))
    threads = torch.openreg.get_device_properties(0).multi_processor_count
    return [{"kernels": count, "threads_per_device": threads, "one_device_ms": round(one * 1e3, 2),
             "two_devices_ms": round(two * 1e3, 2), "speedup": round(one / two, 3)}]


SECTIONS = {
    "small": (section_small, {}),
    "async": (section_async, {}),
    "large": (section_large, {}),
    "streams": (section_streams, {}),
    "devices": (section_devices, {}),
}
TUNED = {"devices": {"OPENREG_COMPUTE_THREADS": "1"}}
TUNED_DEFAULT = {"OPENREG_DEVICE_COUNT": "1"}


def run_section_in_subprocess(name, quick, env_extra=None):
    env = child_env(SECTIONS[name][1] if env_extra is None else env_extra)
    try:
        return run_child(__spec__.name, ["--section", name], env, quick)
    except ChildFailed as e:
        return {"error": e.last_error_line()}


def print_table(name, result, env=None):
    env = SECTIONS[name][1] if env is None else env
    print(f"\n== {name}: {TARGETS[name]}  (configuration: {('tuned ' + str(env)) if env else 'default'})")
    if isinstance(result, dict):
        print(f"   error: {result['error']}")
        return
    bench_table.print_table(result, indent="   ")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--section", choices=sorted(SECTIONS), help=argparse.SUPPRESS)
    parser.add_argument("--only", nargs="*", choices=sorted(SECTIONS), help="sections to run (default: all)")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--tuned", action="store_true", help="also run each section under the tuned configuration")
    parser.add_argument("--out", default=os.path.join("bench", "results", "ops_bench.json"))
    args = parser.parse_args()
    if args.section:  # child process: one section, JSON on the last line
        print(json.dumps(SECTIONS[args.section][0](args.quick)))
        return 0
    results = {"cores": CORES, "sections": {}}
    for name in args.only or list(SECTIONS):
        results["sections"][name] = run_section_in_subprocess(name, args.quick)
        print_table(name, results["sections"][name])
        if args.tuned:
            env = TUNED.get(name, TUNED_DEFAULT)
            results.setdefault("tuned", {})[name] = {"env": env,
                                                     "result": run_section_in_subprocess(name, args.quick, env)}
            print_table(name, results["tuned"][name]["result"], env)
    print()
    write_results(results, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
