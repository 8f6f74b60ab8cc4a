"""torch.openreg.viz: timelines and memory snapshots drawn as pictures that open offline (HTML pages with
everything inline, PNGs), and ``python -m torch_openreg.viz``."""

import gc
import html
import json
import pickle
import re
import runpy
import struct
import sys
from datetime import datetime

import pytest
import torch
from torch_openreg.openreg.viz import _cli, _memory_model, _trace_model

viz = torch.openreg.viz


def png_size(path):
    """(width, height) from a PNG's header; fails if the file is not a PNG."""
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


def page_data(path):
    """The JSON data a page embeds (Note [Self-contained pages]), parsed as the page's script parses it."""
    text = path.read_text(encoding="utf-8")
    found = re.search(r'<script type="application/json" id="data">(.*?)</script>', text, re.S)
    assert found, "the page has no data element"
    return json.loads(found.group(1))


def assert_self_contained(path):
    """Nothing in the page is fetched: no external script, style, image or frame, and no URL at all."""
    text = path.read_text(encoding="utf-8").lower()
    assert "http://" not in text and "https://" not in text
    assert re.search(r"<script[^>]*\bsrc\s*=", text) is None
    for tag in ("<link", "<img", "<iframe", "@import", "url("):
        assert tag not in text, tag
    assert text.count("<script") == 2  # the data and the page's own code


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory):
    """A real trace: kernels on openreg:0, a side stream of openreg:1, copies between host and devices."""
    path = tmp_path_factory.mktemp("viz") / "run.json"
    side = torch.openreg.Stream("openreg:1")
    with torch.openreg.trace(str(path)):
        x = torch.randn(64, 64, device="openreg:0")
        y = (x @ x).relu().sum()
        with torch.openreg.stream(side):
            z = torch.ones(256, device="openreg:1").mul(3)
        y.cpu(), z.cpu()
    return path


def trace_names(path):
    return {e["name"] for e in json.loads(path.read_text())["traceEvents"] if e["ph"] == "X"}


def write_trace(path, events):
    path.write_text(json.dumps({"traceEvents": [{**dict(ph="X", pid=0, tid=0, cat="kernel", args={}), **e}
                                                for e in events]}))
    return path


# ---- timeline ----


def test_timeline_html_is_self_contained_and_names_every_op(trace_path, tmp_path):
    out = tmp_path / "run.html"
    assert viz.timeline_html(trace_path, out) == str(out)
    assert_self_contained(out)
    names = trace_names(trace_path)
    assert {"aten::mm", "aten::relu"} <= names
    data = page_data(out)
    assert set(data["names"]) == names
    table = out.read_text(encoding="utf-8").split("<table id=ops>")[1]
    for name in names:  # the op table, readable without the script
        assert f"<td>{html.escape(name)}</td>" in table, name
    labels = [lane["label"] for lane in data["lanes"]]
    side = [label for label in labels if label.startswith("openreg:1 stream")]
    assert "openreg:0 default stream" in labels and side, labels
    items = sum(len(row["ts"]) for lane in data["lanes"] for row in lane["rows"])
    assert items == sum(1 for e in json.loads(trace_path.read_text())["traceEvents"] if e["ph"] == "X")


def test_timeline_html_data_cannot_end_its_script_element(tmp_path):
    hostile = "</script><script>alert(1)</script>&amp;"
    trace = write_trace(tmp_path / "t.json", [dict(name=hostile, ts=0, dur=5), dict(name="ok", ts=6, dur=1)])
    out = tmp_path / "t.html"
    viz.timeline_html(trace, out)
    assert_self_contained(out)
    assert page_data(out)["names"] == [hostile, "ok"]


def test_overlapping_items_of_a_lane_get_rows_and_collectives_their_lane(tmp_path):
    trace = write_trace(tmp_path / "t.json", [
        dict(name="a", ts=0, dur=10), dict(name="b", ts=10, dur=5),  # back to back: one row
        dict(name="collective:all_reduce", ts=0, dur=8, tid=7, cat="host_callback"),
        dict(name="collective:broadcast", ts=4, dur=8, tid=7, cat="host_callback"),  # overlaps: second row
    ])
    timeline = _trace_model.load_trace(trace)
    assert [lane.label for lane in timeline.lanes] == ["openreg:0 default stream", "openreg:0 communication"]
    assert [[i.name for i in row] for row in timeline.lanes[0].rows] == [["a", "b"]]
    assert len(timeline.lanes[1].rows) == 2
    assert {i.kind for i in timeline.lanes[1].items} == {"collective"}


def test_timeline_png_has_the_size_asked_for(trace_path, tmp_path):
    out = viz.timeline_png(trace_path, tmp_path / "run.png", width=10, dpi=50)
    lanes = len(_trace_model.load_trace(trace_path).lanes)
    # rows of 0.4 inch, 0.25 row between lanes, 1 inch of margins (title and axis)
    height_in = (lanes + 0.25 * (lanes - 1)) * 0.4 + 1.0
    assert png_size(out) == (500, round(height_in * 50))


def test_timeline_pages_hold_every_item_once_and_cut_at_idle_gaps(tmp_path):
    # two bursts of 5 back-to-back items with a pause between: pages of up to 8 items end at the pause
    events = [dict(name=f"op{i}", ts=i * 2.0, dur=2.0) for i in range(5)]
    events += [dict(name=f"op{5 + i}", ts=100 + i * 2.0, dur=2.0) for i in range(5)]
    trace = write_trace(tmp_path / "t.json", events)
    assert [n for _, _, n in _trace_model.pages(_trace_model.load_trace(trace), 8)] == [5, 5]
    paths = viz.timeline_pngs(trace, tmp_path / "t.png", items_per_page=8, width=8, dpi=40)
    assert paths == [str(tmp_path / "t-01.png"), str(tmp_path / "t-02.png")]
    for path in paths:
        assert png_size(path)[0] == 320
    # a window (ms from the start) keeps the items that overlap it, and every lane
    second = _trace_model.clip(_trace_model.load_trace(trace), (0.05, 0.2))
    assert [i.name for i in second.items] == [f"op{5 + i}" for i in range(5)]
    assert viz.timeline_pngs(trace, tmp_path / "w.png", items_per_page=8, width=8, dpi=40,
                             window_ms=(0.05, 0.2)) == [str(tmp_path / "w-01.png")]
    with pytest.raises(ValueError, match="window_ms"):
        viz.timeline_png(trace, tmp_path / "x.png", window_ms=(0.2, 0.05))


def test_timeline_pages_of_a_real_trace(trace_path, tmp_path):
    timeline = _trace_model.load_trace(trace_path)
    windows = _trace_model.pages(timeline, 3)
    assert sum(n for _, _, n in windows) == len(timeline.items)
    assert all(1 <= n <= 3 for _, _, n in windows)
    paths = viz.timeline_pngs(trace_path, tmp_path / "p.png", items_per_page=3, width=6, dpi=30)
    assert len(paths) == len(windows) and all(png_size(p)[0] == 180 for p in paths)


def test_timeline_bad_input(tmp_path):
    with pytest.raises(FileNotFoundError):
        viz.timeline_html(tmp_path / "missing.json", tmp_path / "a.html")
    (tmp_path / "other.json").write_text('{"loss": 1.5}')
    with pytest.raises(ValueError, match="not a Chrome trace"):
        viz.timeline_html(tmp_path / "other.json", tmp_path / "a.html")
    (tmp_path / "text.json").write_text("not json at all")
    with pytest.raises(ValueError, match="not JSON"):
        viz.timeline_png(tmp_path / "text.json", tmp_path / "a.png")
    (tmp_path / "bad.json").write_text('{"traceEvents": [{"ph": "X", "name": "k", "ts": "soon", "dur": 1}]}')
    with pytest.raises(ValueError, match="non-numeric 'ts'"):
        viz.timeline_html(tmp_path / "bad.json", tmp_path / "a.html")
    with pytest.raises(ValueError, match="items_per_page"):
        viz.timeline_pngs(write_trace(tmp_path / "t.json", [dict(name="a", ts=0, dur=1)]), tmp_path / "p.png",
                          items_per_page=0)
    assert not list(tmp_path.glob("a.*")) and not list(tmp_path.glob("p*.png"))


def test_an_empty_trace_draws_an_empty_timeline(tmp_path):
    trace = tmp_path / "empty.json"
    with torch.openreg.trace(trace):
        pass
    viz.timeline_html(trace, tmp_path / "e.html")
    assert page_data(tmp_path / "e.html")["lanes"] == []
    assert png_size(viz.timeline_png(trace, tmp_path / "e.png", width=6, dpi=30))[0] == 180


# ---- memory snapshot ----


@pytest.fixture
def recorded():
    """History recording from a settled state; stopped and cleared after the test."""
    gc.collect()
    for d in range(torch.openreg.device_count()):
        torch.openreg.synchronize(d)
    torch.openreg.empty_cache()
    torch.openreg.memory._record_memory_history(stacks="python", clear_history=True)
    torch.openreg.reset_peak_memory_stats(0)
    try:
        yield
    finally:
        torch.openreg.memory._record_memory_history(None, clear_history=True)


def allocation_work():
    """Allocations on the default stream and a side stream, frees in between and one freed while
    another stream still uses it (free_requested now, free_completed later)."""
    side = torch.openreg.Stream("openreg:0")
    keep = [torch.empty(1 << 20, dtype=torch.uint8, device="openreg:0")]
    temp = torch.empty(3 << 20, dtype=torch.uint8, device="openreg:0")
    keep.append(torch.empty(2 << 20, dtype=torch.uint8, device="openreg:0"))
    del temp  # frees a block below a live one: the live one moves down
    with torch.openreg.stream(side):
        keep.append(torch.empty(5 << 10, dtype=torch.uint8, device="openreg:0"))
    shared = torch.ones(1 << 17, device="openreg:0")  # 512 KiB, on the default stream
    shared.record_stream(side)
    with torch.openreg.stream(side):
        keep.append(shared * 2)
    del shared
    return keep, side


def check_layout(dm):
    """At every step the bands alive are stacked from 0 without gap or overlap up to the merged band,
    whose top is the bytes allocated."""
    for k in range(dm.steps + 1):
        alive = sorted(([o for s, o in a.offsets if s <= k][-1], a.size) for a in dm.allocations
                       if a.start <= k < (dm.steps + 1 if a.end is None else a.end))
        level = 0
        for off, size in alive:
            assert off == level, (k, alive)
            level += size
        assert level == dm.merged_base[k] and dm.allocated[k] >= level
    if not dm.merged:
        assert dm.merged_base == dm.allocated


def test_snapshot_view_accounts_for_exactly_the_bytes_allocated(recorded, tmp_path):
    keep, side = allocation_work()
    snap = torch.openreg.memory._snapshot()
    [dm] = [d for d in _memory_model.device_memory(snap) if d.device == 0]
    assert dm.allocated[-1] == torch.openreg.memory_allocated(0)
    assert dm.peak[0] == torch.openreg.max_memory_allocated(0)
    assert max(dm.reserved) >= dm.peak[0] and dm.reserved[-1] == torch.openreg.memory_reserved(0)
    check_layout(dm)
    ours = [a for a in dm.allocations if not a.before_history]
    assert all(any(f["filename"] == __file__ for f in a.frames) for a in ours)
    default = {a.stream for a in ours if a.size == 1 << 20}
    side = {a.stream for a in ours if a.size == 5 << 10}
    assert len(default) == len(side) == 1 and default != side
    [shared] = [a for a in ours if a.size == 1 << 19 and a.stream in default]
    assert shared.end is not None  # freed by `del shared`, while the side stream still used it
    del keep, side

    # a few bands of their own, the rest merged: the same totals
    small = _memory_model.device_memory(snap, max_allocations=2)
    [dm2] = [d for d in small if d.device == 0]
    assert dm2.allocated == dm.allocated and len(dm2.allocations) == 2 and dm2.merged == len(dm.allocations) - 2
    def area(a):  # bytes times steps alive: the two drawn are those covering the most of the picture
        return a.size * ((dm.steps + 1 if a.end is None else a.end) - a.start)

    biggest = sorted(dm.allocations, key=lambda a: (-area(a), a.order))[:2]
    assert {(a.addr, a.start) for a in dm2.allocations} == {(a.addr, a.start) for a in biggest}
    check_layout(dm2)


def test_a_history_cut_short_still_accounts_for_every_byte(tmp_path):
    # max_entries keeps only the newest events: frees of blocks whose "alloc" fell out, and live blocks
    # never seen allocated, are allocations made before the history; the totals stay exact.
    gc.collect()
    torch.openreg.synchronize(0)
    torch.openreg.empty_cache()
    old = [torch.empty(n << 10, dtype=torch.uint8, device="openreg:0") for n in (64, 128, 256)]
    torch.openreg.memory._record_memory_history(max_entries=3, clear_history=True)
    try:
        new = [torch.empty(n << 10, dtype=torch.uint8, device="openreg:0") for n in (8, 16, 32)]
        del old[1]  # freed last: its free is kept, its "alloc" is not
        snap = torch.openreg.memory._snapshot()
    finally:
        torch.openreg.memory._record_memory_history(None, clear_history=True)
    [dm] = [d for d in _memory_model.device_memory(snap) if d.device == 0]
    assert len(snap["device_traces"][0]) <= 3
    assert dm.allocated[-1] == torch.openreg.memory_allocated(0)
    # the snapshot itself is an entry of the history
    assert [e["action"] for e in snap["device_traces"][0]] == ["free_requested", "free_completed", "snapshot"]
    before = {a.size: a for a in dm.allocations if a.before_history}
    assert dm.steps == 1 and before[128 << 10].end == 1  # freed at the one step, allocated before it
    assert all(before[n << 10].end is None for n in (64, 256, 8, 16, 32))  # alive, their allocs not kept
    assert dm.allocated[0] - dm.allocated[1] == 128 << 10
    check_layout(dm)
    del old, new


def test_memory_html_is_self_contained_with_sizes_streams_stacks_and_segments(recorded, tmp_path):
    keep, side = allocation_work()
    path = tmp_path / "snap.pickle"
    torch.openreg.memory._dump_snapshot(str(path))
    allocated = torch.openreg.memory_allocated(0)
    segments = [s for s in torch.openreg.memory_snapshot() if s["device"] == 0]
    out = tmp_path / "snap.html"
    assert viz.memory_html(path, out) == str(out)
    assert_self_contained(out)
    data = page_data(out)
    [dev] = [d for d in data["devices"] if d["device"] == 0]
    assert dev["allocated"][-1] == allocated
    alive = [b for b in dev["bands"] if b["live"]]
    assert sum(b["s"] for b in alive) == allocated
    assert {b["s"] for b in dev["bands"]} >= {1 << 20, 3 << 20, 2 << 20, 5 << 10}
    assert len({b["st"] for b in dev["bands"] if not b["pre"]}) == 2  # the default and the side stream
    assert dev["streams"] == ["stream 1", "stream 2"]  # in order of first use, never by handle (an address)
    ours = [b for b in dev["bands"] if b["s"] == 3 << 20][0]
    stack = [data["frames"][i][0] for i in data["stacks"][ours["f"]]]
    assert any("allocation_work" in f and "test_viz.py" in f for f in stack), stack
    text = out.read_text(encoding="utf-8")
    for seg in segments:
        assert f"<td>{seg['address']:#x}</td>" in text
    del keep, side


def test_memory_png_has_a_panel_per_device(recorded, tmp_path):
    keep = [torch.empty(1 << 20, dtype=torch.uint8, device=f"openreg:{d}") for d in (0, 1)]
    snap = torch.openreg.memory._snapshot()
    panels = len(_memory_model.device_memory(snap))
    assert panels == 2
    out = viz.memory_png(snap, tmp_path / "m.png", width=8, dpi=40)
    assert png_size(out) == (320, round((0.6 + 3.6 * panels) * 40))
    assert png_size(viz.memory_png(snap, tmp_path / "t.png", x="time", width=8, dpi=40))[0] == 320
    del keep


def test_a_snapshot_without_history_shows_the_live_blocks(tmp_path):
    keep = torch.empty(1 << 20, dtype=torch.uint8, device="openreg:0")
    snap = torch.openreg.memory._snapshot()
    assert not any(snap["device_traces"])
    [dm] = [d for d in _memory_model.device_memory(snap) if d.device == 0]
    assert dm.steps == 0 and not dm.history
    assert dm.allocated == [torch.openreg.memory_allocated(0)]
    assert all(a.before_history and a.end is None for a in dm.allocations)
    assert png_size(viz.memory_png(snap, tmp_path / "m.png", width=6, dpi=30))[0] == 180
    del keep


def test_memory_bad_input(tmp_path):
    with pytest.raises(FileNotFoundError):
        viz.memory_html(tmp_path / "missing.pickle", tmp_path / "a.html")
    (tmp_path / "list.pickle").write_bytes(pickle.dumps([1, 2]))
    with pytest.raises(ValueError, match="not a memory snapshot"):
        viz.memory_png(tmp_path / "list.pickle", tmp_path / "a.png")
    # a pickle that names a class is refused before anything in it is built
    (tmp_path / "object.pickle").write_bytes(pickle.dumps({"segments": [], "when": datetime(2026, 1, 1)}))
    with pytest.raises(ValueError, match="datetime"):
        viz.memory_html(tmp_path / "object.pickle", tmp_path / "a.html")
    (tmp_path / "trace.json").write_text('{"traceEvents": []}')
    with pytest.raises(ValueError, match="not a memory snapshot"):
        viz.memory_html(tmp_path / "trace.json", tmp_path / "a.html")
    with pytest.raises(ValueError, match="not a memory snapshot"):
        viz.memory_html({"segments": "none"}, tmp_path / "a.html")
    with pytest.raises(ValueError, match="x must be"):
        viz.memory_png({"segments": [], "device_traces": []}, tmp_path / "a.png", x="steps")
    assert not list(tmp_path.glob("a.*"))


# ---- python -m torch_openreg.viz ----


def test_command_line(trace_path, tmp_path, capsys, monkeypatch):
    out = tmp_path / "run.html"
    assert _cli.main(["timeline", str(trace_path), str(out)]) == 0
    assert capsys.readouterr().out.split() == [str(out)]
    assert set(page_data(out)["names"]) == trace_names(trace_path)
    assert _cli.main(["timeline", str(trace_path), str(tmp_path / "p.png"), "--pages", "--items-per-page", "4"]) == 0
    assert all(png_size(p) for p in capsys.readouterr().out.split())
    assert _cli.main(["timeline", str(trace_path), str(tmp_path / "w.png"), "--window-ms", "0,0.001"]) == 0
    assert png_size(tmp_path / "w.png")
    snap = tmp_path / "s.pickle"
    torch.openreg.memory._dump_snapshot(str(snap))
    assert _cli.main(["memory", str(snap), str(tmp_path / "s.png")]) == 0
    assert png_size(tmp_path / "s.png")
    assert _cli.main(["timeline", str(tmp_path / "missing.json"), str(out)]) == 1
    assert "missing.json" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _cli.main(["timeline", str(trace_path), str(tmp_path / "run.svg")])
    # `python -m torch_openreg.viz` runs the same main
    monkeypatch.setattr(sys, "argv", ["viz", "memory", str(snap), str(tmp_path / "s.html")])
    with pytest.raises(SystemExit) as exited:
        runpy.run_module("torch_openreg.viz", run_name="__main__")
    assert exited.value.code == 0 and page_data(tmp_path / "s.html")["devices"] is not None
