"""Collectives on the virtual clock (issue 27): nccl-tests' all_reduce measurements, made through
torch.distributed on openreg with the H100 profile, beside the published figures and their sources.

    python bench/python/collective_bench.py [--quick] [--out bench/results/collectives.json]

Each configuration spawns its ranks as processes on this machine (8 for one HGX node, 16 for two),
in timing-only execution (``OPENREG_EXECUTE=timing``: no data moves, so a 16 GiB all_reduce costs
nothing but its exchange of virtual times). Each size is timed as nccl-tests times it: events on the
issuing stream around a loop of ``dist.all_reduce`` (Note [Collectives on the virtual clock]), reported as bus
bandwidth (bytes x 2(n-1)/n / time) or latency. A row is OK when it is within 10% of its figure, or
inside its published band. Virtual times are exactly reproducible: no repeats needed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

from bench_process import write_results  # noqa: E402
from bench_table import print_table  # noqa: E402

MIB = 1 << 20
GIB = 1 << 30

# (configuration, size, published figure, unit, low, high, source): a figure with a band (low, high)
# is OK inside it; one without is OK within 10%.
ANCHORS = [
    ("8xH100, NVLS", 1 * GIB, 480, "GB/s busbw", None, None, "NVIDIA/nccl-tests #212 (NCCL maintainer)"),
    ("8xH100, NVLS", 8 * GIB, 480, "GB/s busbw", None, None, "NVIDIA/nccl-tests #212 (NCCL maintainer)"),
    ("8xH100, ring (NVLS off)", 1 * GIB, 370, "GB/s busbw", None, None, "NVIDIA/nccl-tests #212, #309"),
    ("8xH100, NVLS", 8, 15.5, "us", 6, 25, "NVIDIA/nccl #1259, #1940 (6-25 us)"),
    ("8xH100, NVLS", 64 * 1024, 15.5, "us", 6, 25, "NVIDIA/nccl #1259, #1940 (6-25 us)"),
    ("2x8 H100, 3.2 Tb/s EFA", 256 * MIB, 343, "GB/s busbw", None, None, "AWS awsome-distributed-training"),
    ("2x8 H100, 3.2 Tb/s EFA", 1 * GIB, 437, "GB/s busbw", None, None, "AWS awsome-distributed-training"),
    ("2x8 H100, 3.2 Tb/s EFA", 8 * GIB, 479, "GB/s busbw", None, None, "AWS awsome-distributed-training"),
    ("2x8 H100, 3.2 Tb/s EFA", 16 * GIB, 487, "GB/s busbw", None, None, "AWS awsome-distributed-training"),
    ("2x8 H100, 3.2 Tb/s EFA", 8, 70, "us", 65, 75, "AWS awsome-distributed-training (65-75 us)"),
]
QUICK_SKIP = {8 * GIB, 16 * GIB}
ITERS = 10  # all_reduces between the two events, as nccl-tests times a loop (one event pair per loop)


def _rank(rank: int, sizes: list[int]) -> dict:
    """One rank: each size's all_reduce timed with events, in virtual time."""
    import torch
    import torch.distributed as dist

    dev = torch.device("openreg", rank % torch.openreg.device_count())  # type: ignore[attr-defined]
    torch.openreg.set_device(dev)  # type: ignore[attr-defined]
    out = {}
    for nbytes in sizes:
        x = torch.empty(max(1, nbytes // 2), device=dev, dtype=torch.bfloat16)
        dist.all_reduce(x)  # warm-up, as nccl-tests
        start, end = torch.Event(enable_timing=True), torch.Event(enable_timing=True)
        start.record()
        for _ in range(ITERS):
            dist.all_reduce(x)
        end.record()
        end.synchronize()
        out[nbytes] = start.elapsed_time(end) / 1e3 / ITERS  # seconds per all_reduce
        del x
    return out


def _profile_without_nvls() -> str:
    """The H100 profile with NVLS switched off (as NCCL_NVLS_ENABLE=0), as a profile file."""
    src = os.path.join(os.path.dirname(os.path.dirname(HERE)), "sim", "profiles", "h100-sxm.profile")
    with open(src) as f:
        lines = [ln for ln in f if not ln.startswith(("nvls_bus_gbps", "nvls_latency_us"))]
    path = os.path.join(tempfile.mkdtemp(prefix="openreg-bench-"), "h100-sxm-no-nvls.profile")
    with open(path, "w") as f:
        f.writelines(lines)
    return path


def _measure(config: str, sizes: list[int]) -> dict[int, float]:
    from tests.support import spawn

    world = 16 if config.startswith("2x8") else 8
    profile = _profile_without_nvls() if "NVLS off" in config else "h100-sxm"
    saved = dict(os.environ)
    os.environ.update({"OPENREG_DEVICE_PROFILE": profile, "OPENREG_EXECUTE": "timing", "OPENREG_RANKS_PER_NODE": "8"})
    try:
        results = spawn.run(_rank, sizes, world=world, timeout_s=900, pg_timeout_s=600)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    times = results[0]
    assert all(r == times for r in results), "ranks disagree on a collective's time"
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="leave out the 8 and 16 GiB sizes")
    parser.add_argument("--out", default="bench/results/collectives.json")
    args = parser.parse_args()
    anchors = [a for a in ANCHORS if not (args.quick and a[1] in QUICK_SKIP)]
    measured: dict[str, dict[int, float]] = {}
    for config in dict.fromkeys(a[0] for a in anchors):
        measured[config] = _measure(config, sorted({a[1] for a in anchors if a[0] == config}))
    rows = []
    for config, nbytes, published, unit, low, high, source in anchors:
        seconds = measured[config][nbytes]
        world = 16 if config.startswith("2x8") else 8
        if unit == "us":
            value = seconds * 1e6
        else:
            value = nbytes * 2 * (world - 1) / world / seconds / 1e9
        ok = low <= value <= high if low is not None else abs(value / published - 1) <= 0.10
        rows.append(
            {
                "configuration": config,
                "size": f"{nbytes // GIB} GiB" if nbytes >= GIB else f"{nbytes // MIB} MiB" if nbytes >= MIB
                else f"{nbytes // 1024} KiB" if nbytes >= 1024 else f"{nbytes} B",
                "modelled": round(value, 1),
                "published": f"{low}-{high}" if low is not None else published,
                "unit": unit,
                "ratio": round(value / published, 3),
                "OK": "OK" if ok else "NO",
                "source": source,
            }
        )
    print_table(rows, align="<>>><><<")
    write_results({"rows": rows, "seconds": {c: {str(k): v for k, v in m.items()} for c, m in measured.items()}},
                  args.out)
    if any(r["OK"] != "OK" for r in rows):
        raise SystemExit("a modelled figure is off its published one")


if __name__ == "__main__":
    main()
