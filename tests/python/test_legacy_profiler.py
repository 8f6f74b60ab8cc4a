"""torch.autograd.profiler.profile(use_device="openreg"): PrivateUse1 profiler stubs are registered, so
the profiler reports CPU times and device times (from openreg events) with no callback errors."""

import json


def test_profiler_reports_device_times_without_callback_errors(run_python, check_ok):
    proc = run_python(
        """
        import json, time, torch
        x = torch.randn(128, 128, device="openreg")
        torch.openreg.synchronize()
        start = time.perf_counter()
        with torch.autograd.profiler.profile(use_device="openreg") as prof:
            for _ in range(3):
                y = (x @ x).relu()
            torch.openreg.synchronize()
        wall_us = (time.perf_counter() - start) * 1e6
        events = [
            {"name": e.name, "cpu": e.cpu_time_total, "device": e.device_time_total}
            for e in prof.function_events
        ]
        print(json.dumps({"wall_us": wall_us, "events": events}))
        """
    )
    check_ok(proc)
    assert "Exception in RecordFunction callback" not in proc.stderr
    assert "used in profiler but not enabled" not in proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    events = out["events"]
    mm = [e for e in events if e["name"] == "aten::mm"]
    assert len(mm) == 3
    for e in events:
        assert 0 <= e["cpu"] <= out["wall_us"], e
        assert 0 <= e["device"] <= out["wall_us"], e
    # A 128x128 matmul does work on the device timeline: its events enclose it.
    assert all(e["device"] > 0 for e in mm)
