"""torch.openreg.trace: the device timeline as Chrome trace JSON, and its PNG rendering."""

import errno
import importlib.util
import json
import os
import stat
from pathlib import Path

import pytest
import torch


def test_trace_records_kernels_and_copies_per_device_and_stream(tmp_path):
    path = tmp_path / "run.json"
    s = torch.openreg.Stream("openreg:1")
    with torch.openreg.trace(str(path)) as t:
        a = torch.ones(1000, device="openreg:0")
        with torch.openreg.stream(s):
            b = torch.full((256,), 2.0, device="openreg:1")
            host = b.cpu()
    assert host.sum().item() == 512.0 and a.device.index == 0
    lanes = {(r.device, r.stream) for r in t.records}
    assert (1, s.stream_id) in lanes, lanes
    assert any(r.device == 0 for r in t.records)
    copies = [r for r in t.records if r.kind == "copy"]
    assert any(r.bytes == 256 * 4 and r.device == 1 for r in copies), copies
    assert all(r.end_ns >= r.start_ns for r in t.records)
    doc = json.loads(path.read_text())
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == len(t.records)
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert {"openreg:0", "openreg:1"} <= names


def test_nothing_recorded_outside_a_trace(tmp_path):
    with torch.openreg.trace(str(tmp_path / "a.json")) as t:
        pass
    torch.ones(10, device="openreg:0").cpu()
    assert t.records == []


def test_nested_trace_is_an_error(tmp_path):
    with torch.openreg.trace(None):
        try:
            with torch.openreg.trace(None):
                pass
        except RuntimeError as e:
            assert "already active" in str(e)
        else:
            raise AssertionError("nested trace did not raise")


def test_timeline_png(tmp_path):
    # The renderer is a bench tool (the code under test here, not a shared helper): loaded from its file
    # so that the tests put nothing of bench/ on the import path.
    source = Path(__file__).resolve().parents[2] / "bench" / "common" / "timeline_png.py"
    spec = importlib.util.spec_from_file_location("timeline_png", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    render = module.render

    path = tmp_path / "run.json"
    with torch.openreg.trace(str(path)):
        torch.ones(64, device="openreg:0").cpu()
    png = render(str(path), str(tmp_path / "run.png"))
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


# Note [Writing the trace file] (python/torch_openreg/openreg/_trace.py): the temporary file, bad destinations,
# failures midway.


def _traced_work():
    torch.ones(64, device="openreg:0").add_(1).cpu()


def test_a_symlink_planted_at_the_old_temporary_name_is_never_written_through(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    path = tmp_path / "run.json"
    (tmp_path / "run.json.tmp").symlink_to(victim)
    mask = os.umask(0o022)
    os.umask(mask)
    with torch.openreg.trace(path):
        _traced_work()
    assert victim.read_text() == "keep"
    assert json.loads(path.read_text())["traceEvents"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask  # as open(path, "w") makes it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json", "run.json.tmp", "victim"]
    assert (tmp_path / "run.json.tmp").is_symlink()


def _bad_destinations(tmp_path):
    (tmp_path / "a-file").write_text("")
    (tmp_path / "a-dir").mkdir()
    os.mkfifo(tmp_path / "a-fifo")
    (tmp_path / "to-a-fifo").symlink_to(tmp_path / "a-fifo")
    (tmp_path / "to-a-device").symlink_to("/dev/null")
    (tmp_path / "to-a-file").symlink_to(tmp_path / "a-file")
    return [
        (tmp_path / "missing-dir" / "run.json", FileNotFoundError, errno.ENOENT),
        (tmp_path / "a-file" / "run.json", NotADirectoryError, errno.ENOTDIR),
        (tmp_path / "a-dir", IsADirectoryError, errno.EISDIR),
        (tmp_path / "a-fifo", OSError, errno.EINVAL),
        (tmp_path / "to-a-fifo", OSError, errno.ELOOP),
        (tmp_path / "to-a-device", OSError, errno.ELOOP),
        (tmp_path / "to-a-file", OSError, errno.ELOOP),
    ]


def test_a_bad_destination_raises_at_the_call_and_leaves_nothing(tmp_path):
    for path, error, code in _bad_destinations(tmp_path):
        before = sorted(p.name for p in tmp_path.iterdir())
        with pytest.raises(error) as info:
            torch.openreg.trace(path)  # before any traced work: not at exit
        assert info.value.errno == code, (path, info.value)
        assert str(path) in str(info.value)
        assert sorted(p.name for p in tmp_path.iterdir()) == before, path
    assert os.path.exists("/dev/null") and stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_directory_where_no_file_can_be_created_raises_at_the_call(tmp_path):
    # sysfs refuses new files to everyone, root included (a read-only directory would not stop root).
    path = "/sys/openreg-trace.json"
    with pytest.raises(OSError) as want:
        open(path, "w")
    with pytest.raises(type(want.value)) as got:
        torch.openreg.trace(path)
    assert got.value.errno == want.value.errno and path in str(got.value)


def test_a_write_that_fails_midway_leaves_the_old_file_and_no_temporary(run_python, check_ok, tmp_path):
    # A file size limit makes the JSON write fail partway (EFBIG), as a full disk does (ENOSPC).
    path = tmp_path / "run.json"
    path.write_text("old")
    check_ok(run_python(f"""
        import errno, os, resource, signal, torch
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead of a signal
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
        try:
            with torch.openreg.trace({str(path)!r}) as t:
                for _ in range(200):
                    torch.ones(8, device="openreg").add_(1)
        except OSError as e:
            assert e.errno == errno.EFBIG, e
        else:
            raise AssertionError("the write did not fail")
        assert len(t.records) >= 200
        assert sorted(os.listdir({str(tmp_path)!r})) == ["run.json"], os.listdir({str(tmp_path)!r})
        assert open({str(path)!r}).read() == "old"
    """))
