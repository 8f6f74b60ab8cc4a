"""torch.openreg.trace: the device timeline as Chrome trace JSON, and its PNG rendering."""

import importlib.util
import json
from pathlib import Path

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
    source = Path(__file__).resolve().parents[2] / "bench" / "python" / "timeline_png.py"
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
