"""Hostile inputs to the timing model and the pictures (issue 44, items 6 and 7): device profiles that are
not small UTF-8 regular files or hold values no chip has, ``timing.collective`` arguments a C int cannot
hold, ``OPENREG_RANKS_PER_NODE`` spelled as the other variables may be, output paths that are symlinks or
fifos, and traces or snapshots that are not what openreg writes. Each is a clear error naming what is
wrong; nothing blocks, is followed or is overwritten.

The profile parser's own cases (ranges, /dev/zero, fifos, directories, sizes, UTF-8) are in
tests/cpp/sim/profile_test.cpp; here, what reaches Python.
"""

from __future__ import annotations

import errno
import json
import os
import pickle
import threading

import pytest
import torch
from torch_openreg._distributed import _clock
from torch_openreg.openreg.viz import _cli, _memory_model

viz = torch.openreg.viz
SHIPPED_H100 = os.path.join(os.path.dirname(__file__), "..", "..", "sim", "profiles", "h100-sxm.profile")


def first_use_error(run_python, profile: str) -> str:
    """What the first use of openreg raises with OPENREG_DEVICE_PROFILE=profile: "<type> <message>"."""
    proc = run_python(
        """
        import torch
        try:
            torch.ones(1, device="openreg")
        except Exception as e:
            print(type(e).__name__, e)
        else:
            print("no error")
        """,
        env={"OPENREG_DEVICE_PROFILE": profile},
        timeout=60,  # the fifo blocked forever before: a hang fails here instead of stalling the suite
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


# ---- device profiles ----


def test_a_profile_that_is_a_fifo_is_refused_at_once(run_python, tmp_path):
    fifo = tmp_path / "gpu.profile"
    os.mkfifo(fifo)
    out = first_use_error(run_python, str(fifo))
    assert out.startswith("RuntimeError "), out
    assert f"OPENREG_DEVICE_PROFILE='{fifo}' is invalid" in out and "is a fifo" in out, out


def test_a_profile_whose_text_is_not_utf8_names_the_variable_and_the_line(run_python, tmp_path):
    # The display name reached Python as bytes that do not decode: UnicodeDecodeError at first use.
    with open(SHIPPED_H100, encoding="utf-8") as f:
        lines = f.read().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("display_name "))
    lines[at] = "display_name = H100 \udce9t\udce9  # Latin-1"
    path = tmp_path / "latin1.profile"
    path.write_bytes("\n".join(lines).encode("utf-8", "surrogateescape") + b"\n")
    out = first_use_error(run_python, str(path))
    assert out.startswith("RuntimeError "), out
    assert f"OPENREG_DEVICE_PROFILE: profile {path}, line {at + 1}: byte 0xe9" in out, out


def test_a_profile_value_no_chip_has_is_refused_with_its_field_line_and_range(run_python, tmp_path):
    # memory_gbps = 1e-12 made a 256 MiB add take 0.009 ms: the clock overflowed silently.
    with open(SHIPPED_H100, encoding="utf-8") as f:
        lines = f.read().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("memory_gbps "))
    lines[at] = "memory_gbps = 1e-12  # hostile"
    path = tmp_path / "slow.profile"
    path.write_text("\n".join(lines) + "\n")
    out = first_use_error(run_python, str(path))
    assert out.startswith("RuntimeError "), out
    assert f"line {at + 1}: field 'memory_gbps' = '1e-12' is invalid: expected a bandwidth in GB/s" in out, out


# ---- torch.openreg.timing.collective ----


def test_collective_refuses_arguments_a_c_int_or_a_finite_time_cannot_hold():
    collective = torch.openreg.timing.collective
    # 2**32 + 8 ranks were truncated to 8 on their way to C++, and answered as 8.
    with pytest.raises(ValueError, match=r"ranks must be from 1 to 1048576, got 4294967304"):
        collective("all_reduce", 1 << 20, 2**32 + 8)
    with pytest.raises(ValueError, match="nodes must be from 1 to ranks"):
        collective("all_reduce", 1 << 20, 16, 2**32 + 2)
    with pytest.raises(ValueError, match="ranks must be from 1"):
        collective("all_reduce", 1 << 20, 0)
    for nbytes in (float("inf"), float("nan"), -1, 2**64):
        with pytest.raises(ValueError, match="nbytes must be a finite byte count"):
            collective("all_reduce", nbytes, 8)
    with pytest.raises(TypeError, match="nbytes must be a number"):
        collective("all_reduce", "1 MiB", 8)
    with pytest.raises(TypeError, match="ranks and nodes must be ints"):
        collective("all_reduce", 1 << 20, 8.0)
    with pytest.raises(TypeError, match="ranks and nodes must be ints"):
        collective("all_reduce", 1 << 20, True)
    with pytest.raises(TypeError, match="kind must be a str"):
        collective(None, 1 << 20, 8)


def test_collective_accepts_every_well_formed_call(run_python, check_ok):
    check_ok(run_python(
        """
        import numpy as np, torch
        t, algorithm = torch.openreg.timing.collective("all_reduce", np.int64(1 << 30), np.int32(16), 2)
        assert t > 0 and algorithm == "tree", (t, algorithm)
        assert torch.openreg.timing.collective("all_gather", 0.0, 1 << 20, 1)[0] > 0
        """,
        env={"OPENREG_DEVICE_PROFILE": "h100-sxm"},
    ))


# ---- OPENREG_RANKS_PER_NODE ----


def test_ranks_per_node_is_read_as_every_openreg_variable_is(monkeypatch):
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.setenv("OPENREG_RANKS_PER_NODE", " 4 ")  # spaces around the value do not matter
    assert _clock.ranks_per_node() == 4
    monkeypatch.setenv("OPENREG_RANKS_PER_NODE", "  ")  # empty is unset: torchrun's value comes next
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert _clock.ranks_per_node() == 2
    for value in ("\u0668", "\u00b2", "8 ranks", "-1", "0"):  # Arabic-Indic eight, superscript two
        monkeypatch.setenv("OPENREG_RANKS_PER_NODE", value)
        with pytest.raises(RuntimeError, match=f"OPENREG_RANKS_PER_NODE='{value.strip()}' is invalid"):
            _clock.ranks_per_node()


# ---- the pictures' output files ----


def _timeline(path):
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "pid": 0, "tid": 0, "cat": "kernel", "name": "aten::add", "ts": 0, "dur": 5, "args": {}},
        {"ph": "X", "pid": 0, "tid": 0, "cat": "kernel", "name": "aten::mul", "ts": 6, "dur": 3, "args": {}},
    ]}))
    return path


SNAPSHOT = {"segments": [], "device_traces": [[
    {"action": "alloc", "addr": 4096, "size": 512, "stream": 0x55EA00001230, "time_us": 1, "frames": []},
    {"action": "free_requested", "addr": 4096, "size": 512, "stream": 0x55EA00001230, "time_us": 2, "frames": []},
]]}


def _writers(tmp_path):
    """Every writer of torch.openreg.viz, as (name, fn(out))."""
    trace = _timeline(tmp_path / "in.json")
    return [
        ("timeline_html", lambda out: viz.timeline_html(trace, out)),
        ("timeline_png", lambda out: viz.timeline_png(trace, out, width=4, dpi=20)),
        ("timeline_pngs", lambda out: viz.timeline_pngs(trace, out, width=4, dpi=20)),
        ("memory_html", lambda out: viz.memory_html(SNAPSHOT, out)),
        ("memory_png", lambda out: viz.memory_png(SNAPSHOT, out, width=4, dpi=20)),
    ]


def _call_without_blocking(fifo, fn, *args, reading=False):
    """fn(*args)'s exception (None if it returned), failing the test if fn blocks on ``fifo``: the old writers
    opened it for writing, which waits for a reader, and the old readers for reading, which waits for a
    writer. The test then takes the other end, so that the thread ends."""
    outcome = {}

    def run():
        try:
            fn(*args)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            outcome["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(60)
    if thread.is_alive():
        fd = os.open(fifo, (os.O_WRONLY if reading else os.O_RDONLY) | os.O_NONBLOCK)
        try:
            while thread.is_alive() and not reading:
                try:
                    os.read(fd, 1 << 16)
                except BlockingIOError:
                    pass
                thread.join(0.01)
        finally:
            os.close(fd)  # a waiting reader reads the end of the file
        thread.join()
        pytest.fail(f"{fifo}: the call blocked on the fifo")
    return outcome.get("error")


@pytest.mark.parametrize("writer", ["timeline_html", "timeline_png", "timeline_pngs", "memory_html", "memory_png"])
def test_no_writer_follows_a_symlink_creates_its_target_or_blocks_on_a_fifo(tmp_path, writer):
    [fn] = [fn for name, fn in _writers(tmp_path) if name == writer]
    suffix = ".html" if writer.endswith("html") else ".png"
    pages = writer == "timeline_pngs"  # writes <stem>-01.png: the bad entries sit at that name

    def target(name):
        return tmp_path / (f"{name}-01{suffix}" if pages else f"{name}{suffix}")

    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    target("link").symlink_to(victim)
    target("dangling").symlink_to(tmp_path / "created-through-the-link")
    os.mkfifo(target("fifo"))
    for name, code in (("link", errno.ELOOP), ("dangling", errno.ELOOP), ("fifo", errno.EINVAL)):
        out = tmp_path / f"{name}{suffix}"
        error = _call_without_blocking(target(name), fn, out)
        assert isinstance(error, OSError) and error.errno == code, (name, error)
        assert str(target(name)) in str(error) and f"torch.openreg.viz.{writer}" in str(error), error
    assert victim.read_text() == "keep"
    assert not (tmp_path / "created-through-the-link").exists()
    assert target("link").is_symlink() and target("dangling").is_symlink()
    # a regular file is replaced whole, keeping its mode, and nothing else is left beside it
    target("plain").write_text("old")
    os.chmod(target("plain"), 0o640)
    before = set(os.listdir(tmp_path))
    fn(tmp_path / f"plain{suffix}")
    assert target("plain").read_bytes() != b"old" and (target("plain").stat().st_mode & 0o777) == 0o640
    assert set(os.listdir(tmp_path)) == before


def test_the_trace_writer_refuses_the_same_paths(tmp_path):
    for name in ("link", "dangling"):
        (tmp_path / f"{name}.json").symlink_to(tmp_path / "nowhere")
        with pytest.raises(OSError, match="torch.openreg.trace: the destination is a symbolic link") as info:
            torch.openreg.trace(tmp_path / f"{name}.json")
        assert info.value.errno == errno.ELOOP
    os.mkfifo(tmp_path / "fifo.json")
    with pytest.raises(OSError, match="the destination is a fifo"):
        torch.openreg.trace(tmp_path / "fifo.json")
    assert not (tmp_path / "nowhere").exists()


def test_the_memory_snapshot_dump_refuses_the_same_paths(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    (tmp_path / "link.pickle").symlink_to(victim)
    with pytest.raises(OSError, match="_dump_snapshot: the destination is a symbolic link"):
        torch.openreg.memory._dump_snapshot(str(tmp_path / "link.pickle"))
    assert victim.read_text() == "keep me"
    os.mkfifo(tmp_path / "fifo.pickle")
    with pytest.raises(OSError, match="the destination is a fifo"):
        torch.openreg.memory._dump_snapshot(str(tmp_path / "fifo.pickle"))
    torch.openreg.memory._dump_snapshot(str(tmp_path / "plain.pickle"))
    assert (tmp_path / "plain.pickle").stat().st_size > 0


def test_a_graphs_debug_dump_refuses_the_same_paths(tmp_path):
    g = torch.openreg.OpenRegGraph(keep_graph=True)
    g.enable_debug_mode()
    x = torch.ones(4, device="openreg")
    with torch.openreg.graph(g):
        x.add_(1)
    (tmp_path / "link.dot").symlink_to(tmp_path / "created-through-the-link")
    with pytest.raises(OSError, match="debug_dump: the destination is a symbolic link"):
        g.debug_dump(str(tmp_path / "link.dot"))
    assert not (tmp_path / "created-through-the-link").exists()
    os.mkfifo(tmp_path / "fifo.dot")
    with pytest.raises(OSError, match="the destination is a fifo"):
        g.debug_dump(str(tmp_path / "fifo.dot"))
    # torch.accelerator.Graph's own debug_dump (no Python check before it) refuses them in C++.
    with pytest.raises(RuntimeError, match="the destination is a symbolic link"):
        torch.accelerator.Graph.debug_dump(g, str(tmp_path / "link.dot"))
    with pytest.raises(RuntimeError, match="the destination is not a regular file"):
        torch.accelerator.Graph.debug_dump(g, str(tmp_path / "fifo.dot"))
    assert not (tmp_path / "created-through-the-link").exists()
    g.debug_dump(str(tmp_path / "graph.dot"))
    assert (tmp_path / "graph.dot").read_text().startswith("digraph")


def test_viz_refuses_an_input_that_is_not_a_regular_file(tmp_path):
    # A fifo blocked until a writer came; a device was read to its end (/dev/zero: until memory ran out;
    # /dev/null: "not JSON").
    os.mkfifo(tmp_path / "fifo.json")
    for source in ("/dev/null", str(tmp_path / "fifo.json")):
        for draw in (viz.timeline_html, viz.memory_html):
            error = _call_without_blocking(source, draw, source, tmp_path / "a.html", reading=True)
            assert isinstance(error, OSError) and error.errno == errno.EINVAL and source in str(error), error
            assert "not a regular file" in str(error), error
    with pytest.raises(IsADirectoryError):
        viz.timeline_html(tmp_path, tmp_path / "a.html")
    assert not (tmp_path / "a.html").exists()


# ---- malformed traces and snapshots ----


def _trace_error(tmp_path, doc_text):
    path = tmp_path / "bad.json"
    path.write_text(doc_text)
    with pytest.raises(ValueError) as info:
        viz.timeline_html(path, tmp_path / "out.html")
    with pytest.raises(ValueError):
        viz.timeline_png(path, tmp_path / "out.png", width=4, dpi=20)
    assert str(path) in str(info.value), info.value
    assert not list(tmp_path.glob("out.*"))
    return str(info.value)


def _events(*events):
    return json.dumps({"traceEvents": list(events)})


def test_a_malformed_trace_is_a_value_error_naming_the_file_and_what_is_wrong(tmp_path):
    x = {"ph": "X", "name": "k", "pid": 0, "tid": 0, "ts": 0, "dur": 1}
    # was RecursionError
    assert "nested too deeply" in _trace_error(tmp_path, '{"traceEvents": ' + "[" * 100000 + "]" * 100000 + "}")
    # was AttributeError: 'list' object has no attribute 'get'
    error = _trace_error(tmp_path, _events({"ph": "M", "name": "thread_name", "pid": 0, "tid": 0, "args": [1]}, x))
    assert "trace event 0" in error and "'args'" in error, error
    # was ZeroDivisionError: a span of inf between two times near the float limit
    error = _trace_error(tmp_path, _events({**x, "ts": -1.7e308}, {**x, "ts": 1.7e308}))
    assert "'ts'" in error and "outside" in error, error
    assert "'dur'" in _trace_error(tmp_path, '{"traceEvents": [{"ph": "X", "name": "k", "ts": 0, "dur": NaN}]}')
    assert "'ts'" in _trace_error(tmp_path, '{"traceEvents": [{"ph": "X", "name": "k", "ts": Infinity, "dur": 1}]}')
    # was TypeError: unhashable type: 'list'
    assert "'pid'" in _trace_error(tmp_path, _events({**x, "pid": [0]}))
    assert "'tid'" in _trace_error(tmp_path, _events({**x, "tid": {"a": 1}}))
    # was ValueError from the page's JSON, without the file: NaN in args cannot be embedded
    assert "'args'" in _trace_error(tmp_path, '{"traceEvents": [{"ph": "X", "name": "k", "ts": 0, "dur": 1, '
                                              '"args": {"GB/s": NaN}}]}')


def test_a_malformed_snapshot_is_a_value_error_naming_the_file_and_what_is_wrong(tmp_path):
    event = SNAPSHOT["device_traces"][0][0]
    cases = [
        ({"segments": [7], "device_traces": []}, "segment 0 is int"),
        ({"segments": [{"device": "zero"}], "device_traces": []}, "'device' = 'zero'"),
        ({"segments": [{"device": -3}], "device_traces": []}, "'device' is out of range"),
        ({"segments": [{"blocks": [None]}], "device_traces": []}, "block 0 of segment 0"),
        ({"segments": [], "device_traces": [[{**event, "addr": "0x10"}]]}, "'addr' = '0x10'"),
        ({"segments": [], "device_traces": [[{**event, "time_us": float("nan")}]]}, "'time_us' = nan"),
        ({"segments": [], "device_traces": [[{**event, "frames": "here"}]]}, "'frames'"),
        ({"segments": [], "device_traces": [[1, 2]]}, "event 0 of device 0's history is int"),
        ({"segments": [], "device_traces": "none"}, "not a memory snapshot"),
    ]
    path = tmp_path / "snap.pickle"
    for snapshot, what in cases:
        path.write_bytes(pickle.dumps(snapshot))
        for draw in (viz.memory_html, viz.memory_png):
            with pytest.raises(ValueError) as info:
                draw(path, tmp_path / ("out.png" if draw is viz.memory_png else "out.html"))
            assert str(path) in str(info.value) and what in str(info.value), (what, info.value)
    assert not list(tmp_path.glob("out.*"))


def test_the_memory_picture_names_streams_as_a_reader_does_never_by_address(tmp_path):
    [dm] = _memory_model.device_memory(SNAPSHOT)
    assert [_memory_model.stream_label(dm, i) for i in range(len(dm.streams))] == ["stream 1"]
    out = viz.memory_html(SNAPSHOT, tmp_path / "m.html")
    text = open(out, encoding="utf-8").read()
    assert "stream 1" in text
    assert "0x55ea" not in text.lower() and str(0x55EA00001230) not in text  # no stream handle anywhere


# ---- python -m torch_openreg.viz ----


def test_the_command_line_refuses_an_empty_or_reversed_window_for_every_output(tmp_path, capsys):
    trace = _timeline(tmp_path / "in.json")
    for out in ("w.html", "w.png"):
        for window in ("5,1", "1,1", "nan,2", "0,inf", "5"):
            with pytest.raises(SystemExit) as exited:
                _cli.main(["timeline", str(trace), str(tmp_path / out), "--window-ms", window])
            assert exited.value.code == 2, (out, window)
            assert "--window-ms" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        _cli.main(["timeline", str(trace), str(tmp_path / "w.png"), "--pages", "--items-per-page", "0"])
    assert exited.value.code == 2
    assert not list(tmp_path.glob("w*"))
    # a valid window opens the page on it
    assert _cli.main(["timeline", str(trace), str(tmp_path / "w.html"), "--window-ms", "0.001,0.004"]) == 0
    text = (tmp_path / "w.html").read_text(encoding="utf-8")
    assert '"view":[1.0,4.0]' in text
