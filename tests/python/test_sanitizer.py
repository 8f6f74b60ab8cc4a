"""OPENREG_SANITIZER=1: stream races are reported at the op that completes them (Note [Stream race
checker model] in backend/sanitizer/RaceChecker.h). Each program runs in a subprocess because the
checker is enabled once per process from the environment."""
import os
import subprocess
import sys
import textwrap

import pytest

PRELUDE = """
import torch, torch_openreg
cur = torch.accelerator.current_stream
side = torch.Stream(device="openreg")
"""


TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(body, mode="1"):
    # tests/ on the path: correct programs include the project's own workloads (tests/support).
    path = os.pathsep.join(p for p in (TESTS_DIR, os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, OPENREG_SANITIZER=mode, PYTHONPATH=path)
    code = PRELUDE + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


RACES = {
    "side_reads_default_write": ("""
        a = torch.ones(1000, device="openreg")
        a.mul_(2)
        with side:
            b = a.sum()
        """, ["aten::sum", "aten::mul_"]),
    "default_uses_side_result_without_wait_stream": ("""
        x = torch.ones(64, device="openreg")
        torch.accelerator.synchronize()
        with side:
            y = x * 3
        z = y + 1
        """, ["aten::add", "aten::mul"]),
    "two_streams_write_one_tensor": ("""
        t = torch.zeros(256, device="openreg")
        torch.accelerator.synchronize()
        t.fill_(1)
        with side:
            t.fill_(2)
        """, ["aten::fill_", "write by aten::fill_"]),
    "event_recorded_on_the_wrong_stream": ("""
        a = torch.ones(1000, device="openreg")
        a.mul_(2)
        e = torch.Event(device="openreg")
        e.record(side)
        side.wait_event(e)
        with side:
            b = a.sum()
        """, ["aten::sum", "aten::mul_"]),
    "freed_without_record_stream_and_reused": ("""
        x = torch.ones(1 << 16, device="openreg")
        torch.accelerator.synchronize()
        with side:
            y = x * 2
        del x
        z = torch.empty(1 << 16, device="openreg").fill_(5)
        """, ["write by aten::fill_", "read by aten::mul"]),
    "cross_device_copy_without_ordering": ("""
        a = torch.ones(1000, device="openreg:0")
        torch.accelerator.synchronize()
        with side:
            a.mul_(2)
        b = a.to("openreg:1")
        """, ["aten::copy_", "aten::mul_"]),
}


@pytest.mark.parametrize("name", sorted(RACES))
def test_race_is_reported_naming_both_ops(name):
    body, needles = RACES[name]
    r = run(body)
    assert r.returncode != 0, r.stdout + r.stderr
    assert "stream race" in r.stderr, r.stderr
    for n in needles:
        assert n in r.stderr, (n, r.stderr)


def test_report_mode_continues_and_exits_nonzero():
    r = run(textwrap.dedent(RACES["side_reads_default_write"][0]) + "print('continued')\n", mode="report")
    assert "continued" in r.stdout
    assert r.returncode != 0
    assert "1 stream race(s) found" in r.stderr, r.stderr
    assert "aten::sum" in r.stderr and "aten::mul_" in r.stderr


CORRECT = {
    "wait_stream_both_ways": """
        a = torch.ones(1000, device="openreg")
        a.mul_(2)
        side.wait_stream(cur())
        with side:
            b = a.sum()
        cur().wait_stream(side)
        c = b + 1
        print(c.item())
        """,
    "event_record_and_wait": """
        a = torch.ones(1000, device="openreg")
        a.mul_(2)
        e = torch.Event(device="openreg")
        e.record(cur())
        side.wait_event(e)
        with side:
            b = a.sum()
        side.synchronize()
        print((b * 2).item())
        """,
    "host_synchronize": """
        with side:
            y = torch.ones(10, device="openreg") * 3
        torch.accelerator.synchronize()
        print((y + 1).sum().item())
        """,
    "record_stream_then_reuse": """
        x = torch.ones(1 << 16, device="openreg")
        side.wait_stream(cur())
        with side:
            y = x * 2
        x.record_stream(side)
        del x
        import time
        time.sleep(0.05)  # side's work ends: the allocator may now hand x's block to the default stream
        z = torch.empty(1 << 16, device="openreg").fill_(5)
        cur().wait_stream(side)
        print(y.sum().item(), z.sum().item())
        """,
    "project_workloads_one_device_and_data_parallel": """
        from support import workloads
        x, y = workloads.make_data(seed=0, samples=256)
        m = workloads.make_model(seed=0)
        print(workloads.train_single(m, x, y, "openreg:0", epochs=2, batch=64).losses)
        print(workloads.train_data_parallel(m, x, y, ["openreg:0", "openreg:1"], epochs=2, batch=64).losses)
        """,
    "training_loop": """
        m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)).to("openreg")
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for _ in range(3):
            loss = m(torch.randn(16, 8, device="openreg")).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(loss.item())
        """,
}


@pytest.mark.parametrize("name", sorted(CORRECT))
def test_correct_program_has_no_report(name):
    r = run(CORRECT[name])
    assert r.returncode == 0, r.stderr
    assert "stream race" not in r.stderr


def test_enable_from_python_raises_accelerator_error_with_both_stacks():
    body = """
        import torch.openreg.sanitizer as san
        assert not san.is_enabled()
        san.enable()
        assert san.is_enabled()

        def producer(a):
            a.mul_(2)

        def consumer(a):
            with side:
                return a.sum()

        a = torch.ones(1000, device="openreg")
        producer(a)
        try:
            consumer(a)
        except torch.AcceleratorError as e:
            assert e.error_code == san.RACE_ERROR_CODE and isinstance(e, RuntimeError)
            print(str(e))
        try:
            san.enable(report=True)
        except RuntimeError as e:
            print("second mode refused:", e)
        """
    r = run(body, mode="0")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "stream race" in out and "aten::sum" in out and "aten::mul_" in out
    # The Python stack where each op was issued.
    assert "in consumer" in out and "in producer" in out
    assert out.index("in consumer") < out.index("is not ordered after") < out.index("in producer")
    assert "second mode refused" in out


def test_bad_value_names_the_variable():
    r = run("print('imported')", mode="bogus")
    assert r.returncode != 0
    assert "OPENREG_SANITIZER" in r.stderr
