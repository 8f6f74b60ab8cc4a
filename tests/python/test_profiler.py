"""torch.profiler with ProfilerActivity.PrivateUse1 on openreg: device work items appear on their
device/stream lanes, linked by correlation id to the CPU op that issued them, with flow arrows in the
Chrome trace, device time in key_averages, and allocator events on the memory timeline."""

import json

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, record_function

ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def _device_events(prof):
    return [e for e in prof.events() if e.device_type == DeviceType.PrivateUse1]


def _chrome(prof, tmp_path):
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    return json.loads(path.read_text())["traceEvents"]


def test_kernels_and_copies_on_their_device_and_stream_lanes(tmp_path):
    x = torch.randn(32, 32, device="openreg:1")
    side = torch.openreg.Stream(device="openreg:1")
    host = torch.empty(32, 32).pin_memory()
    torch.openreg.synchronize(1)
    with profile(activities=ACTIVITIES) as prof:
        y = x.mul(2)
        with torch.openreg.stream(side):
            z = x.add(1)
            host.copy_(z, non_blocking=True)
        torch.openreg.synchronize(1)
    events = _chrome(prof, tmp_path)
    kernels = [e for e in events if e.get("cat") == "kernel"]
    copies = [e for e in events if e.get("cat") == "gpu_memcpy"]
    default_id = torch.openreg.default_stream(1).stream_id
    mul = [e for e in kernels if e["name"].startswith("aten::mul")]
    add = [e for e in kernels if e["name"].startswith("aten::add")]
    assert len(mul) == 1 and len(add) == 1
    assert (mul[0]["pid"], mul[0]["tid"], mul[0]["args"]["stream"]) == (1, default_id, default_id)
    assert (add[0]["pid"], add[0]["tid"], add[0]["args"]["stream"]) == (1, side.stream_id, side.stream_id)
    assert mul[0]["args"]["device"] == 1 and add[0]["args"]["device"] == 1
    assert any(c["pid"] == 1 and c["tid"] == side.stream_id and c["args"]["bytes"] == 32 * 32 * 4 for c in copies)
    for e in kernels + copies:
        assert e["dur"] >= 0
    # Lanes are named like CUDA's.
    names = {(e["pid"], e["tid"]): e["args"]["name"]
             for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
    assert names[(1, side.stream_id)] == f"stream {side.stream_id}"
    assert torch.equal(y.cpu(), x.cpu() * 2)


def test_device_activity_correlates_with_the_issuing_cpu_op():
    x = torch.randn(16, 16, device="openreg")
    torch.openreg.synchronize()
    with profile(activities=ACTIVITIES) as prof:
        x.mm(x)
        x.sub(3)
        torch.openreg.synchronize()
    cpu = {e.id: e.name for e in prof.events() if e.device_type == DeviceType.CPU and e.name != "openregLaunch"}
    launches = [e for e in prof.events() if e.name == "openregLaunch"]
    device = _device_events(prof)
    mm = [e for e in device if e.name.startswith("aten::mm")]
    sub = [e for e in device if e.name.startswith("aten::sub")]
    assert len(mm) == 1 and len(sub) == 1
    assert cpu[mm[0].id] == "aten::mm"
    assert cpu[sub[0].id] == "aten::sub"
    assert mm[0].device_index == 0
    # The host side of each launch sits inside the op that issued it (as cudaLaunchKernel does).
    assert {(e.cpu_parent.name, e.id) for e in launches} >= {("aten::mm", mm[0].id), ("aten::sub", sub[0].id)}


def test_chrome_trace_has_flow_arrows_from_cpu_to_openreg(tmp_path):
    x = torch.randn(16, 16, device="openreg")
    with profile(activities=ACTIVITIES) as prof:
        x.relu()
        torch.openreg.synchronize()
    events = _chrome(prof, tmp_path)
    pid_cpu = next(e["pid"] for e in events if e.get("cat") == "cpu_op")
    relu = next(e for e in events if e.get("cat") == "kernel" and e["name"].startswith("aten::relu"))
    corr = relu["args"]["correlation"]
    ends = [e for e in events if e.get("ph") == "f" and e.get("cat") == "ac2g"
            and (e["pid"], e["tid"]) == (relu["pid"], relu["tid"])]
    assert len(ends) == 1
    starts = [e for e in events if e.get("ph") == "s" and e.get("cat") == "ac2g" and e["id"] == ends[0]["id"]]
    assert len(starts) == 1 and starts[0]["pid"] == pid_cpu
    op = next(e for e in events if e.get("cat") == "cpu_op" and e["args"].get("External id") == corr)
    assert op["name"] == "aten::relu"


def test_an_op_that_enqueues_several_items_starts_one_flow_per_item(tmp_path, capfd):
    # A copy from pageable host memory enqueues more than one item under one CPU op (one correlation
    # id); flows named by that id started twice, and torch warned "duplicate flow start" at every such
    # profile.
    x = torch.randn(64, 64)
    with profile(activities=ACTIVITIES) as prof:
        y = x.to("openreg")
        (y * 2).sum().item()
    events = _chrome(prof, tmp_path)
    device = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    assert len({e["args"]["correlation"] for e in device}) < len(device)  # an op enqueued several
    starts = [e["id"] for e in events if e.get("ph") == "s" and e.get("cat") == "ac2g"]
    ends = [e["id"] for e in events if e.get("ph") == "f" and e.get("cat") == "ac2g"]
    assert starts and len(set(starts)) == len(starts) and sorted(starts) == sorted(ends)
    assert "duplicate flow" not in capfd.readouterr().err


def test_key_averages_has_device_time_for_openreg_ops():
    x = torch.randn(128, 128, device="openreg")
    torch.openreg.synchronize()
    with profile(activities=ACTIVITIES) as prof:
        for _ in range(3):
            x.mm(x)
        torch.openreg.synchronize()
    mm = [a for a in prof.key_averages() if a.key == "aten::mm" and a.device_time_total > 0]
    assert mm, [(a.key, a.device_time_total) for a in prof.key_averages()]
    assert mm[0].count == 3


def test_record_function_range_encloses_its_device_work():
    x = torch.randn(16, 16, device="openreg")
    with profile(activities=ACTIVITIES) as prof:
        with record_function("my_block"):
            x.neg()
        torch.openreg.synchronize()
    cpu = {e.id: e for e in prof.events() if e.device_type == DeviceType.CPU and e.name != "openregLaunch"}
    (neg,) = [e for e in _device_events(prof) if e.name.startswith("aten::neg")]
    issuer, ancestors = cpu[neg.id], []
    while issuer is not None:
        ancestors.append(issuer.name)
        issuer = issuer.cpu_parent
    assert ancestors[0] == "aten::neg" and "my_block" in ancestors


def test_profile_memory_shows_openreg_allocations():
    nbytes = 1024 * 1024 * 4
    torch.openreg.synchronize()
    with profile(activities=ACTIVITIES, profile_memory=True) as prof:
        t = torch.empty(1024, 1024, device="openreg:1")
        del t
        torch.openreg.synchronize(1)
    events = prof.events()
    # The allocation is charged to the op that made it, the free is a [memory] event, both as device
    # (not CPU) memory, as CUDA's caching allocator reports them.
    assert any(e.name == "aten::empty" and e.device_memory_usage == nbytes and e.cpu_memory_usage == 0 for e in events)
    assert any(e.name == "[memory]" and e.device_memory_usage == -nbytes for e in events)


def test_openreg_trace_works_inside_a_profiler_session():
    x = torch.randn(8, 8, device="openreg")
    with profile(activities=ACTIVITIES) as prof:
        x.exp()
        with torch.openreg.trace() as tr:
            x.log1p()
            torch.openreg.synchronize()
        x.sin()
        torch.openreg.synchronize()
    assert [r.name.split(".")[0] for r in tr.records if r.kind == "kernel"] == ["aten::log1p"]
    names = {e.name.split(".")[0] for e in _device_events(prof)}
    assert {"aten::exp", "aten::log1p", "aten::sin"} <= names


def test_profiler_inside_openreg_trace_does_not_truncate_it():
    x = torch.randn(8, 8, device="openreg")
    with torch.openreg.trace() as tr:
        x.exp()
        torch.openreg.synchronize()
        with profile(activities=ACTIVITIES) as prof:
            x.cos()
            torch.openreg.synchronize()
        x.sin()
        torch.openreg.synchronize()
    assert [r.name.split(".")[0] for r in tr.records if r.kind == "kernel"] == ["aten::exp", "aten::cos", "aten::sin"]
    assert [e.name.split(".")[0] for e in _device_events(prof)] == ["aten::cos"]


def test_cpu_only_profile_records_no_device_activity():
    x = torch.randn(8, 8, device="openreg")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        x.exp()
        torch.openreg.synchronize()
    assert not _device_events(prof)
    assert any(e.name == "aten::exp" for e in prof.events())


def test_record_function_range_appears_on_the_device_lanes_of_its_work(tmp_path):
    x = torch.randn(64, 64, device="openreg:1")
    side = torch.openreg.Stream(device="openreg:1")
    torch.openreg.synchronize(1)
    with profile(activities=ACTIVITIES) as prof:
        with record_function("outer_block"):
            y = x.mm(x)
            with torch.openreg.stream(side):
                z = x.neg()
        x.relu()  # outside the range: not part of its device span
        torch.openreg.synchronize(1)
    events = _chrome(prof, tmp_path)
    ranges = [e for e in events if e.get("cat") == "gpu_user_annotation" and e["name"] == "outer_block"]
    lanes = {(e["pid"], e["tid"]) for e in ranges}
    default_id = torch.openreg.default_stream(1).stream_id
    assert lanes == {(1, default_id), (1, side.stream_id)}, ranges
    kernels = {e["name"].split(" ")[0]: e for e in events if e.get("cat") == "kernel"}
    on_default = next(e for e in ranges if e["tid"] == default_id)
    mm, relu = kernels["aten::mm"], kernels["aten::relu"]
    assert on_default["ts"] <= mm["ts"] and mm["ts"] + mm["dur"] <= on_default["ts"] + on_default["dur"] + 1
    assert relu["ts"] >= on_default["ts"] + on_default["dur"] - 1
    assert torch.equal(z.cpu(), -x.cpu()) and y.shape == (64, 64)
