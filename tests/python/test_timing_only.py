"""Timing-only execution (OPENREG_EXECUTE=timing) runs the programs people size jobs with: what they read
back to steer themselves is real (Note [Values in timing-only execution] in sim/src/stream.cpp),
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
        pos = torch.arange(1 << 18, device="openreg")         # 2 MiB: computed on a GPU, not here
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


def test_values_computed_from_the_host_data_are_the_gpus_whatever_their_size(run_python, check_ok):
    """torchtitan's varlen attention: each document starts where the position ids are zero, and the
    sequence lengths it derives must be non-decreasing. Kernels of 64 KiB on position ids from the host
    used to be timed only, and the boundaries read back were garbage (Note [Values in timing-only
    execution] in sim/src/stream.cpp)."""
    proc = run_python(
        """
        import json, warnings, torch
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        lengths = torch.randint(1, 900, (40,))
        host = torch.cat([torch.arange(int(n)) for n in lengths])[: 2 * 8192].view(2, 8192)
        positions = host.to("openreg")                           # 128 KiB from the host: values
        cu = []
        for b in range(2):
            starts = (positions[b] == 0).nonzero().flatten()     # 64 KiB compared, on the device
            ends = torch.cat([starts[1:], torch.tensor([8192], device="openreg")])
            seq = torch.cat([torch.zeros(1, dtype=torch.int64, device="openreg"), (ends - starts).cumsum(0)])
            torch._assert_async((seq[1:] >= seq[:-1]).all(), "cumulative sequence lengths must be non-decreasing")
            cu.append(seq.tolist())
        expected = []
        for b in range(2):
            starts = (host[b] == 0).nonzero().flatten()
            ends = torch.cat([starts[1:], torch.tensor([8192])])
            expected.append(torch.cat([torch.zeros(1, dtype=torch.int64), (ends - starts).cumsum(0)]).tolist())
        torch.openreg.synchronize()
        print(json.dumps({"cu": cu, "expected": expected}))
        """,
        env=TIMING,
    )
    check_ok(proc)
    out = _last_json(proc)
    assert out["cu"] == out["expected"]
    assert len(out["cu"][0]) > 2  # several documents per row


def test_a_result_never_computed_reads_zeros_and_loops_on_it_end(run_python, check_ok):
    """What a kernel that did not run wrote reads back as zeros, not as what its block held before;
    a rejection loop over weights never computed (nn.init.trunc_normal_'s shape) ends at once."""
    proc = run_python(
        """
        import json, warnings, torch
        warnings.simplefilter("ignore")
        x = torch.full((1024,), 5.0, device="openreg")             # a fill of 4 KiB: values
        before = x[:2].tolist()
        big = torch.ones((1 << 18) + 1).to("openreg")               # over 1 MiB from the host: none
        x.add_(big[:1024])                                          # reads a value never computed
        after = x[:2].tolist()
        w = torch.empty(4096, 1024, device="openreg")               # a layer's weight (16 MiB)
        torch.nn.init.trunc_normal_(w, std=0.02)
        rounds = 0
        while ((w < -0.04) | (w > 0.04)).any() and rounds < 100:   # resample what falls outside
            w.normal_(0, 0.02)
            rounds += 1
        print(json.dumps({"before": before, "after": after, "rounds": rounds}))
        """,
        env=TIMING,
    )
    check_ok(proc)
    out = _last_json(proc)
    assert out["before"] == [5.0, 5.0]
    assert out["after"] == [0.0, 0.0]
    assert out["rounds"] == 0


def test_a_kernel_on_values_fails_as_on_a_gpu(run_python, check_ok):
    """An index out of range computed from the host's data is the program's error, on a GPU too: it
    is reported, not dropped as a failure on values never computed is."""
    proc = run_python(
        """
        import json, warnings, torch
        warnings.simplefilter("ignore")
        table = torch.zeros(3, 4, device="openreg")
        idx = torch.tensor([1, 5], device="openreg")
        err = ""
        try:
            table.index_select(0, idx)
            torch.openreg.synchronize()
        except RuntimeError as e:
            err = str(e)
        big = torch.ones((1 << 18) + 1, dtype=torch.int64).to("openreg")   # never computed
        table.index_select(0, big[:2] + 7)                                  # timed only: no failure
        torch.openreg.synchronize()
        print(json.dumps({"err": err}))
        """,
        env=TIMING,
    )
    check_ok(proc)
    assert "out of range" in _last_json(proc)["err"] or "out of bounds" in _last_json(proc)["err"]


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


def _small_all_reduces(rank):
    import torch.distributed as dist

    dev = torch.device("openreg", rank % torch.openreg.device_count())
    torch.openreg.set_device(dev)
    counts = torch.tensor([rank + 1.0, 10.0], device=dev)  # from the host: values
    dist.all_reduce(counts)
    loss = torch.full((2,), 7.0, device=dev)  # its block holds 7s ...
    big = torch.ones((1 << 18) + 1).to(dev)
    loss.add_(big[:2])  # ... but the loss is now a value never computed
    dist.all_reduce(loss)  # 8 bytes: the data moves, the 7s with it
    return {"counts": counts.tolist(), "loss": loss.tolist()}


def test_a_small_collective_gives_values_only_where_each_rank_gave_values(monkeypatch):
    """A collective of at most 1 MiB moves its data; what it writes holds values when what this rank gave
    did (Note [Values in timing-only execution]). A loss never computed, reduced, read back the stale
    bytes of its block (torchtitan's first steps logged nan and stopped)."""
    for key, value in TIMING.items():
        monkeypatch.setenv(key, value)
    results = spawn.run(_small_all_reduces, world=2, timeout_s=120)
    for r in results:
        assert r["counts"] == [3.0, 20.0]
        assert r["loss"] == [0.0, 0.0]


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
