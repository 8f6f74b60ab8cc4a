"""Timing-only execution (OPENREG_EXECUTE=timing) runs the programs people size jobs with: what they read
back to steer themselves is real (Note [Control data in timing-only execution] in sim/src/stream.cpp),
and device-side asserts do not fire on values that were never computed."""

from __future__ import annotations

import json

import pytest
import torch
from support import spawn  # tests/support (pytest's pythonpath)

TIMING = {"OPENREG_DEVICE_PROFILE": "h100-sxm", "OPENREG_EXECUTE": "timing"}


def _last_json(proc):
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_small_data_from_the_host_reads_back_and_large_results_stay_uncomputed(run_python, check_ok):
    proc = run_python(
        """
        import json, warnings, torch
        warnings.simplefilter("ignore")
        counts = torch.tensor([3, 5, 7], device="openreg")          # a copy of 24 bytes: it moves
        mib = torch.full((1 << 18,), 2.0).to("openreg")              # 1 MiB: it moves
        big = torch.full(((1 << 18) + 1,), 2.0).to("openreg")        # a float more: timed only
        doubled = (counts * 2).tolist()                              # a kernel of 48 bytes: it runs
        total = counts.sum().item()                                  # (recv_object_list's sum of sizes)
        big_doubled = (big * 2)[:3].tolist()                         # a kernel of 2 MiB: timed only
        print(json.dumps({"counts": counts.tolist(), "mib": mib[-2:].tolist(), "big": big[:3].tolist(),
                          "doubled": doubled, "total": total, "big_doubled": big_doubled}))
        """,
        env=TIMING,
    )
    check_ok(proc)
    out = _last_json(proc)
    assert out["counts"] == [3, 5, 7]
    assert out["mib"] == [2.0, 2.0]
    assert out["big"] == [0.0, 0.0, 0.0]
    assert out["doubled"] == [6, 10, 14]
    assert out["total"] == 15
    assert out["big_doubled"] == [0.0, 0.0, 0.0]


def test_assert_async_does_not_fire_on_values_timing_only_execution_never_computed(run_python, check_ok):
    proc = run_python(
        """
        import json, warnings, torch
        warnings.simplefilter("ignore")
        pos = torch.arange(2048, device="openreg")            # computed on a GPU, not here
        torch._assert_async((pos[1:] > pos[:-1]).all())        # torchtitan's position-ids check
        torch._assert_async(torch.tensor(True, device="openreg"), "true is true")
        torch.openreg.synchronize()
        try:  # CUDA's host check stays: only a one-element tensor has a truth value
            torch._assert_async(torch.zeros(2, device="openreg"))
            numel = ""
        except RuntimeError as e:
            numel = str(e)
        print(json.dumps({"numel": numel}))
        """,
        env=TIMING,
    )
    check_ok(proc)
    assert "more than one value is ambiguous" in _last_json(proc)["numel"]


def test_assert_async_is_a_device_side_assert_in_compute_mode():
    """As on CUDA: no host wait at the call, the failure at the next synchronize, a host error for a
    tensor without one element."""
    dev = torch.device("openreg")
    torch.openreg.synchronize()
    torch.openreg.set_sync_debug_mode("error")
    try:
        torch._assert_async(torch.ones((), device=dev))
        torch._assert_async(torch.zeros((), device=dev), "the value is zero")
    finally:
        torch.openreg.set_sync_debug_mode(0)
    with pytest.raises(RuntimeError, match="the value is zero"):
        torch.openreg.synchronize()
    torch.openreg.synchronize()  # reported once; the device goes on working
    with pytest.raises(RuntimeError, match="Boolean value of Tensor with no values is ambiguous"):
        torch._assert_async(torch.zeros(0, device=dev))
    assert torch.ones(2, device=dev).sum().item() == 2


def _ddp_steps(rank, init_sync: bool, params_on_rank1: int):
    import torch.distributed as dist  # noqa: F401 - the group is made by spawn.run
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    dev = torch.device("openreg", rank % torch.openreg.device_count())
    torch.openreg.set_device(dev)
    layers = [nn.Linear(64, 64) for _ in range(2 if rank == 0 else params_on_rank1 // 2)]
    model = DDP(nn.Sequential(*layers).to(dev), init_sync=init_sync, bucket_cap_mb=0.01)
    opt = torch.optim.AdamW(model.parameters())
    with torch.openreg.timing.region() as r:
        for _ in range(3):  # DDP rebuilds its buckets after the first backward, from rank 0's order
            model(torch.randn(32, 64, device=dev)).sum().backward()
            opt.step()
            opt.zero_grad()
    return {"wall": r.wall, "buckets": len(model.reducer._get_zeros_like_grad_buckets())}


@pytest.mark.parametrize("init_sync", [True, False], ids=["init_sync", "no_init_sync"])
def test_ddp_trains_in_timing_only_execution(monkeypatch, init_sync):
    for key, value in TIMING.items():
        monkeypatch.setenv(key, value)
    results = spawn.run(_ddp_steps, init_sync, 4, timeout_s=180)
    assert results[0]["wall"] > 0 and results[0]["wall"] == results[1]["wall"]
    assert results[0]["buckets"] == results[1]["buckets"] >= 2  # 10 KB buckets of 16 KB weights


def test_ddp_still_refuses_ranks_with_different_models_in_timing_only_execution(monkeypatch):
    for key, value in TIMING.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(AssertionError, match="DDP expects same model across all ranks"):
        spawn.run(_ddp_steps, True, 6, timeout_s=180)


def test_a_gather_costs_the_rows_it_reads_not_its_whole_source(run_python, check_ok):
    # An embedding lookup of one token from Llama 3's 1 GiB table reads one row (8 KiB): it used to be
    # charged a read of the whole table (0.35 ms on the modelled H100, where the GPU takes microseconds).
    proc = run_python(
        """
        import json, warnings, torch
        import torch.nn.functional as F
        warnings.simplefilter("ignore")
        token = torch.zeros(1, 1, dtype=torch.long, device="openreg")
        ns = {}
        for rows in (1024, 128256):
            table = torch.empty(rows, 4096, dtype=torch.bfloat16, device="openreg")
            index = torch.zeros(1, dtype=torch.long, device="openreg")
            with torch.openreg.trace() as t:
                F.embedding(token, table)
                table.index_select(0, index)
            ns[rows] = [r.end_ns - r.start_ns for r in t.records if r.name in ("aten::embedding", "aten::index_select")]
        print(json.dumps(ns))
        """,
        env=TIMING,
    )
    check_ok(proc)
    ns = _last_json(proc)
    assert len(ns["1024"]) == 2 and ns["1024"] == ns["128256"]
    assert max(ns["128256"]) < 10_000  # a few microseconds, not the table's 0.35 ms
