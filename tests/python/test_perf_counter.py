"""OPENREG_PERF_COUNTER=virtual (issue 40; Note [A program's own timer under a profile] in
torch_openreg/_perf_counter.py): a program that times itself with time.perf_counter reads the modelled
GPU's time under a device profile, and only perf_counter changes."""

from __future__ import annotations

PROFILE = {"OPENREG_DEVICE_PROFILE": "h100-sxm", "OPENREG_EXECUTE": "timing", "OPENREG_PERF_COUNTER": "virtual"}


def test_perf_counter_reads_the_modelled_gpus_time(run_python, check_ok):
    check_ok(run_python(
        """
        import time, torch
        a = torch.empty(8192, 8192, device="openreg", dtype=torch.bfloat16)
        # a program's own timer around ten 8192^3 matmuls, and openreg's region around the same
        t0, n0 = time.perf_counter(), time.perf_counter_ns()
        with torch.openreg.timing.region() as r:
            for _ in range(10):
                a @ a
            torch.openreg.synchronize()
        t1, n1 = time.perf_counter(), time.perf_counter_ns()
        assert n1 - n0 == round(r.wall * 1e9), (n1 - n0, r.wall)  # to the nanosecond
        assert abs((t1 - t0) - r.wall) < 1e-9, (t1 - t0, r.wall)
        tflops = 10 * 2 * 8192**3 / (t1 - t0) / 1e12
        assert 600 < tflops < 800, tflops  # the modelled H100's rate, not this CPU's (~0.001)
        # the clock is the calling thread's virtual one, as torch.openreg.timing.now() reads it
        assert time.perf_counter() == torch.openreg.timing.now()
        # names bound after the import read it too; the wall clock and sleeps stay the host's
        from time import perf_counter
        assert perf_counter() == time.perf_counter()
        w, v = time.time(), time.perf_counter()
        time.sleep(0.05)
        assert time.time() - w >= 0.05 and time.perf_counter() == v
        """,
        env=PROFILE,
    ))


def test_unset_or_host_leaves_perf_counter_alone(run_python, check_ok):
    for value in (None, "host", " "):
        check_ok(run_python(
            """
            import time, torch, torch_openreg._perf_counter as hc
            assert not hc.installed() and time.perf_counter is hc._host_perf_counter
            t0 = time.perf_counter()
            time.sleep(0.02)
            assert time.perf_counter() - t0 >= 0.02
                """,
            env={**PROFILE, "OPENREG_PERF_COUNTER": value},
        ))


def test_a_forked_child_reads_the_hosts_clock(run_python, check_ok):
    check_ok(run_python(
        """
        import os, time, torch
        torch.empty(4, device="openreg").sum().item()  # the runtime is started: a child cannot use it
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            t0 = time.perf_counter()
            time.sleep(0.02)
            os.write(w, b"1" if time.perf_counter() - t0 >= 0.02 else b"0")
            os._exit(0)
        os.waitpid(pid, 0)
        assert os.read(r, 1) == b"1"
        """,
        env=PROFILE,
    ))


def test_a_bad_setting_is_an_error_naming_it(run_python):
    r = run_python("import torch", env={**PROFILE, "OPENREG_PERF_COUNTER": "virtul"})
    assert r.returncode != 0
    assert "OPENREG_PERF_COUNTER='virtul' is invalid: expected 'virtual'" in r.stderr
    r = run_python("import torch", env={"OPENREG_PERF_COUNTER": "virtual"})
    assert r.returncode != 0
    assert "OPENREG_PERF_COUNTER=virtual needs OPENREG_DEVICE_PROFILE" in r.stderr
