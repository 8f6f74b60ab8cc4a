"""Issue 10's figures at the DEFAULT configuration (what users get), with a tuned configuration beside
each, labelled. Every ratio compares openreg with CPU eager measured in the same process and run
(except cpu_slowdown, which compares processes); each time is the median of at least 3 repetitions. Prints a table and writes JSON.

Configurations (each in its own process: the openreg configuration is read once per process):
  default  no OPENREG_* variable set
  tuned    OPENREG_DEVICE_COUNT=1 (for the two-device figure: OPENREG_COMPUTE_THREADS=1 per device)

Figures and targets:
  small_op        host time per add/relu on 1024 floats, openreg / CPU          <= 1.2
  elementwise_1m  loop of add on 1M floats, results dropped, openreg / CPU       <= 1.2
  mm2048          mm 2048^2 throughput with one device busy, CPU time / openreg  >= 0.9
  mlp_step        3x Linear 512, batch 64, SGD step, openreg / CPU               <= 1.2
  conv_step       ResNet-style conv block step, openreg / CPU                    <= 1.2
  transformer     one small TransformerEncoderLayer step, openreg / CPU          <= 1.2
  two_streams     small kernels on two streams of one device vs one stream       >= 1.6
  two_devices     the same kernels over two devices vs one device                >= 1.6
  cpu_slowdown    CPU-eager mm 32^2 / mm 256^2, processes after openreg use /    <= 1.1
                  processes without openreg (medians of 3 processes each)
  d2h_over_h2d    .cpu() of 64 MiB / .to("openreg") of 64 MiB                    <= 1.2

Usage: python -m bench.benchmarks.default_config_bench [--quick] [--only NAME ...] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from bench.common.bench_process import ChildFailed, child_env, load_openreg, run_child, write_results
from bench.common.bench_table import TablePrinter
from bench.common.bench_workloads import kernels_over_devices, kernels_over_streams

TARGETS = {
    "small_op": ("<=", 1.2), "elementwise_1m": ("<=", 1.2), "mm2048": (">=", 0.9), "mlp_step": ("<=", 1.2),
    "conv_step": ("<=", 1.2), "transformer": ("<=", 1.2), "two_streams": (">=", 1.6),
    "two_devices": (">=", 1.6), "cpu_slowdown": ("<=", 1.1), "d2h_over_h2d": ("<=", 1.2),
}
TUNED = {"two_devices": {"OPENREG_COMPUTE_THREADS": "1"}}
TUNED_DEFAULT = {"OPENREG_DEVICE_COUNT": "1"}
REPS = 3


def median_time(fn, reps=REPS):
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _sync(torch, dev):
    if dev != "cpu":
        torch.openreg.synchronize()


def _ratio_rows(torch, make, step, n, reps):
    """Times `n` calls of step(state) on CPU and on openreg:0, alternating the two devices rep by rep
    (so load from other processes on a shared machine hits both alike); returns the medians
    (cpu s/call, openreg s/call)."""
    states = {}
    for dev in ("cpu", "openreg:0"):
        states[dev] = make(dev)
        for _ in range(max(2, n // 10)):
            step(states[dev])
        _sync(torch, dev)
    times = {"cpu": [], "openreg:0": []}
    for _ in range(reps):
        for dev in times:
            t0 = time.perf_counter()
            for _ in range(n):
                step(states[dev])
            _sync(torch, dev)
            times[dev].append((time.perf_counter() - t0) / n)
    return statistics.median(times["cpu"]), statistics.median(times["openreg:0"])


def fig_small_op(quick):
    torch = load_openreg()
    n = 500 if quick else 3000
    rows = {}
    for name, fn in (("add", lambda t: t[0] + t[1]), ("relu", lambda t: t[0].relu())):
        cpu, dev = _ratio_rows(torch, lambda d: (torch.randn(1024, device=d), torch.randn(1024, device=d)), fn, n, REPS)
        rows[name] = {"cpu_us": cpu * 1e6, "openreg_us": dev * 1e6, "value": dev / cpu}
    return {"value": max(r["value"] for r in rows.values()), "detail": rows}


def fig_elementwise_1m(quick):
    torch = load_openreg()
    cpu, dev = _ratio_rows(torch, lambda d: (torch.randn(1 << 20, device=d), torch.randn(1 << 20, device=d)),
                           lambda t: t[0] + t[1], 20 if quick else 100, REPS)
    return {"value": dev / cpu, "detail": {"cpu_us": cpu * 1e6, "openreg_us": dev * 1e6}}


def fig_mm2048(quick):
    torch = load_openreg()
    cpu, dev = _ratio_rows(torch, lambda d: (torch.randn(2048, 2048, device=d), torch.randn(2048, 2048, device=d)),
                           lambda t: t[0] @ t[1], 2 if quick else 4, REPS)
    return {"value": cpu / dev, "detail": {"cpu_ms": cpu * 1e3, "openreg_ms": dev * 1e3}}


def _train_step_ratio(torch, build, batch_shape, target, n, quick):
    def make(dev):
        torch.manual_seed(0)
        model = build().to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        x = torch.randn(*batch_shape, device=dev)
        y = target(dev)
        return model, opt, x, y

    def step(state):
        model, opt, x, y = state
        opt.zero_grad(set_to_none=True)
        out = model(x)
        loss = torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y)
        loss.backward()
        opt.step()

    cpu, dev = _ratio_rows(torch, make, step, n, REPS)
    return {"value": dev / cpu, "detail": {"cpu_ms": cpu * 1e3, "openreg_ms": dev * 1e3}}


def fig_mlp_step(quick):
    torch = load_openreg()
    nn = torch.nn
    return _train_step_ratio(torch, lambda: nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                                                          nn.Linear(512, 10)),
                             (64, 512), lambda d: torch.randint(0, 10, (64,), device=d), 20 if quick else 50, quick)


class _ConvBlock:
    @staticmethod
    def build(torch):
        nn = torch.nn

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.stem = nn.Conv2d(3, 32, 3, padding=1, bias=False)
                self.bn1 = nn.BatchNorm2d(32)
                self.c1 = nn.Conv2d(32, 32, 3, padding=1, bias=False)
                self.bn2 = nn.BatchNorm2d(32)
                self.head = nn.Linear(32, 10)

            def forward(self, x):
                x = torch.relu(self.bn1(self.stem(x)))
                x = torch.relu(x + self.bn2(self.c1(x)))
                return self.head(x.mean((2, 3)))

        return Block()


def fig_conv_step(quick):
    torch = load_openreg()
    return _train_step_ratio(torch, lambda: _ConvBlock.build(torch), (16, 3, 32, 32),
                             lambda d: torch.randint(0, 10, (16,), device=d), 5 if quick else 15, quick)


def fig_transformer(quick):
    torch = load_openreg()
    nn = torch.nn

    def build():
        class Tiny(nn.Module):
            def __init__(self):
                super().__init__()
                self.layer = nn.TransformerEncoderLayer(128, 4, 256, dropout=0.0, batch_first=True)
                self.head = nn.Linear(128, 100)

            def forward(self, x):
                return self.head(self.layer(x))

        return Tiny()

    return _train_step_ratio(torch, build, (8, 64, 128), lambda d: torch.randint(0, 100, (8 * 64,), device=d),
                             5 if quick else 20, quick)


def fig_two_streams(quick):
    torch = load_openreg()
    run = kernels_over_streams(torch, 200 if quick else 1000)
    run(2)
    one, two = median_time(lambda: run(1)), median_time(lambda: run(2))
    return {"value": one / two, "detail": {"one_stream_ms": one * 1e3, "two_streams_ms": two * 1e3}}


def fig_two_devices(quick):
    torch = load_openreg()
    if torch.openreg.device_count() < 2:
        return {"value": None, "detail": "needs two devices"}
    run = kernels_over_devices(torch, 200 if quick else 1000)
    run(2)
    one, two = median_time(lambda: run(1)), median_time(lambda: run(2))
    return {"value": one / two, "detail": {"one_device_ms": one * 1e3, "two_devices_ms": two * 1e3}}


def _cpu_eager_times(torch, quick):
    a, b = torch.randn(32, 32), torch.randn(32, 32)
    c, d = torch.randn(256, 256), torch.randn(256, 256)
    n = 2000 if quick else 10000

    def small():
        for _ in range(n):
            a @ b

    def mid():
        for _ in range(n // 20):
            c @ d

    small(), mid()
    return {"mm32_us": median_time(small, 5) / n * 1e6, "mm256_us": median_time(mid, 5) / (n // 20) * 1e6}


def _use_openreg(torch):
    """Parallel kernels and small ops on a device, then the device idle: what a program that mixes
    openreg and CPU eager leaves behind for its CPU code."""
    x = torch.randn(1 << 20, device="openreg")
    w = torch.randn(512, 512, device="openreg")
    for _ in range(50):
        x.add_(1)
        w @ w
    torch.openreg.synchronize()


SLOWDOWN_PROCESSES = 3


def fig_cpu_slowdown(quick):
    """CPU-eager mm timings in processes that used openreg over processes that never imported it.

    Both sides are fresh processes, alternated, and each side is the median over its processes: one
    process's CPU-eager timings can stay in a fast or a slow mode for its whole life (mm 32x32 at 6.5
    or at 9-13 us, openreg imported or not), so the two sides must be sampled alike. (Until 2026-11-26
    this figure compared the faster of two processes without openreg against this one process: a
    slow mode of this process alone read as openreg's slowdown.)"""
    without_env = child_env({"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    after_env = child_env(inherit_openreg=True)  # this figure's own configuration
    runs = {"without_openreg": [], "after_openreg_use": []}
    for _ in range(SLOWDOWN_PROCESSES):
        runs["without_openreg"].append(run_child(__spec__.name, ["--cpu-baseline"], without_env, quick))
        runs["after_openreg_use"].append(run_child(__spec__.name, ["--cpu-after-openreg"], after_env, quick))
    keys = list(runs["without_openreg"][0])
    medians = {side: {k: statistics.median(r[k] for r in rs) for k in keys} for side, rs in runs.items()}
    value = max(medians["after_openreg_use"][k] / medians["without_openreg"][k] for k in keys)
    return {"value": value, "detail": {"medians": medians, "processes": runs}}


def fig_d2h_over_h2d(quick):
    """.cpu() (into memory the CPU allocator has just mapped: Note [Fresh host destinations] in
    sim/src/copy_engine.cpp) over .to("openreg") (into recycled device memory), interleaved rep by rep.
    Beside it: device-to-host into an existing host tensor (already backed: the engine's copy speed),
    and how long non_blocking copies with pinned memory take to return (they must not wait)."""
    torch = load_openreg()
    host = torch.randn(16 << 20)  # 64 MiB
    dev = host.to("openreg")
    existing = torch.empty_like(host).fill_(0)
    pinned = torch.empty(host.shape, pin_memory=True).fill_(0)
    torch.openreg.synchronize()

    def h2d():
        host.to("openreg")
        torch.openreg.synchronize()

    def d2h():
        dev.cpu()

    def d2h_existing():
        existing.copy_(dev)

    fns = {"h2d": h2d, "d2h": d2h, "d2h_existing": d2h_existing}
    for fn in fns.values():
        fn()
    times = {k: [] for k in fns}
    for _ in range(7):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    returns = {}
    for name, (dst, src) in {"d2h_pinned": (pinned, dev), "h2d_pinned": (dev, pinned)}.items():
        ts = []
        for _ in range(3):
            torch.openreg.synchronize()
            t0 = time.perf_counter()
            dst.copy_(src, non_blocking=True)
            ts.append(time.perf_counter() - t0)
            torch.openreg.synchronize()
        returns[name + "_nonblocking_return_ms"] = statistics.median(ts) * 1e3
    return {"value": med["d2h"] / med["h2d"],
            "detail": {"h2d_ms": med["h2d"] * 1e3, "d2h_ms": med["d2h"] * 1e3,
                       "d2h_existing_ms": med["d2h_existing"] * 1e3,
                       "d2h_existing_over_h2d": med["d2h_existing"] / med["h2d"], **returns}}


FIGURES = {name: globals()["fig_" + name] for name in TARGETS}


def run_figure(name, env_extra, quick):
    try:
        return run_child(__spec__.name, ["--figure", name], child_env(env_extra), quick)
    except ChildFailed as e:
        return {"value": None, "error": e.last_error_line()}


def _fmt(v):
    return "-" if v is None else f"{v:.2f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--figure", choices=sorted(FIGURES), help=argparse.SUPPRESS)
    parser.add_argument("--cpu-baseline", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cpu-after-openreg", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--only", nargs="*", choices=sorted(FIGURES), help="figures to run (default: all)")
    parser.add_argument("--no-tuned", action="store_true", help="only the default configuration")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions per timing (still medians of 3)")
    parser.add_argument("--out", default=os.path.join("bench", "results", "default_config_bench.json"))
    args = parser.parse_args()
    if args.cpu_baseline:  # the side without openreg: its parent turned the backend autoload off
        import torch

        print(json.dumps(_cpu_eager_times(torch, args.quick)))
        return 0
    if args.cpu_after_openreg:
        torch = load_openreg()
        _use_openreg(torch)
        print(json.dumps(_cpu_eager_times(torch, args.quick)))
        return 0
    if args.figure:
        print(json.dumps(FIGURES[args.figure](args.quick)))
        return 0
    results = {"cores": os.cpu_count(), "reps": REPS, "figures": {}}
    table = TablePrinter([("figure", 16), ("target", 8), ("default", 9), ("tuned", 9), ("tuned config", 0)],
                         align="<>>><")
    for name in args.only or list(FIGURES):
        default = run_figure(name, {}, args.quick)
        tuned_env = TUNED.get(name, TUNED_DEFAULT)
        tuned = None if args.no_tuned else run_figure(name, tuned_env, args.quick)
        op, target = TARGETS[name]
        results["figures"][name] = {"target": f"{op} {target}", "default": default, "tuned": tuned,
                                    "tuned_env": tuned_env}
        table.row(name, f"{op} {target}", _fmt(default.get("value")), _fmt(tuned.get("value") if tuned else None),
                  tuned_env)
    print()
    write_results(results, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
