"""OPENREG_SANITIZER=1 / torch.openreg.sanitizer: stream races are reported at the op that completes
them (Note [Stream race checker model] in backend/sanitizer/RaceChecker.h). Each program runs in a
subprocess because the checker is enabled once per process."""
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


def run(body, mode="1", pythonpath=None):
    env = dict(os.environ, OPENREG_SANITIZER=mode)
    env.pop("OPENREG_SCHEDULE_FUZZ", None)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([pythonpath, env.get("PYTHONPATH", "")])
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
        z = torch.empty(1 << 16, device="openreg").fill_(5)
        cur().wait_stream(side)
        print((y.sum() + z.sum()).item())
        """,
    "host_saw_side_finish_by_item_before_free": """
        x = torch.ones(1 << 16, device="openreg")
        side.wait_stream(cur())
        with side:
            y = x * 2
            print(y.sum().item())  # the host waits for the side stream
        del x
        z = torch.empty(1 << 16, device="openreg").fill_(5)
        print(y[0].item() + z[0].item())
        """,
    "host_saw_side_finish_by_cpu": """
        x = torch.ones(4096, device="openreg")
        side.wait_stream(cur())
        with side:
            y = x * 2
            host = y.cpu()  # blocking copy: the host waits for the side stream
        x.add_(1)  # the side stream's read of x is done
        print(y.sum().item(), host.sum().item())
        """,
    "host_saw_event_by_synchronize": """
        x = torch.ones(4096, device="openreg")
        side.wait_stream(cur())
        e = torch.Event(device="openreg")
        with side:
            y = x * 2
        e.record(side)
        e.synchronize()
        x.add_(1)
        print((y + 1).sum().item())
        """,
    "host_saw_event_by_query": """
        x = torch.ones(4096, device="openreg")
        side.wait_stream(cur())
        e = torch.Event(device="openreg")
        with side:
            y = x * 2
        e.record(side)
        while not e.query():
            pass
        x.add_(1)
        print((y + 1).sum().item())
        """,
    "host_saw_stream_by_query": """
        x = torch.ones(4096, device="openreg")
        side.wait_stream(cur())
        with side:
            y = x * 2
        while not side.query():
            pass
        x.add_(1)
        print((y + 1).sum().item())
        """,
    "cross_device_copy_ordered_by_copy_itself": """
        a = torch.ones(1000, device="openreg:0")
        b = a.to("openreg:1")  # runs after device 1's current stream, which then waits for it
        b.mul_(3)
        c = b.to("openreg:0")
        print((a + c).sum().item())
        """,
    "fast_kernels_in_one_stream": """
        a = torch.randn(64, 64, device="openreg")
        b = torch.randn(64, 64, device="openreg")
        for _ in range(5):
            c = torch.relu(a @ b + a * 2 - b / 3)
            a.add_(c, alpha=0.1)
            torch.addmm(b[0], a, b.t())
        print(a.sum().item())
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


def test_correct_programs_have_no_report():
    # One process for the whole corpus (report mode: every race would be counted); each program runs in
    # its own namespace and ends with the device idle, so none can leave history for the next.
    driver = "import textwrap\nPROGRAMS = " + repr(CORRECT) + textwrap.dedent("""
        for name, body in sorted(PROGRAMS.items()):
            before = len(torch.openreg.sanitizer.races())
            exec(textwrap.dedent(body), {"torch": torch, "side": side, "cur": cur})
            torch.accelerator.synchronize()
            side.synchronize()
            print("PROGRAM", name, len(torch.openreg.sanitizer.races()) - before)
        """)
    r = run(driver, mode="report")
    assert r.returncode == 0, r.stdout + r.stderr
    for name in CORRECT:
        assert f"PROGRAM {name} 0" in r.stdout, (name, r.stdout, r.stderr)


BAD_VALUE_PROGRAM = """
import torch
print("IMPORTED")
assert torch.ones(3).add(1).sum().item() == 6.0  # a CPU-only program is unaffected
assert not torch.openreg.is_available()  # as with any malformed OPENREG_* variable
uses = {
    "tensor": lambda: torch.ones(1, device="openreg"),
    "init": torch.openreg.init,
    "enable": torch.openreg.sanitizer.enable,
    "is_enabled": torch.openreg.sanitizer.is_enabled,
}
for name, use in uses.items():
    for attempt in range(2):  # stable, not a one-off
        try:
            use()
        except RuntimeError as err:
            print("ERROR", name, str(err).replace(chr(10), " "))
        else:
            raise AssertionError(name + " accepted the malformed value")
print("DONE")
"""


@pytest.mark.parametrize("value", ["raise", "yes", "off", "2", "true", "on", "1 1"])
def test_bad_value_is_a_clear_error_at_first_use_not_a_crash_at_import(value):
    # It used to be parsed by a static initializer of the backend: SIGABRT during `import torch`.
    env = {k: v for k, v in os.environ.items() if k != "OPENREG_SCHEDULE_FUZZ"}
    env["OPENREG_SANITIZER"] = value
    r = subprocess.run([sys.executable, "-c", BAD_VALUE_PROGRAM], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    assert "IMPORTED" in r.stdout and "DONE" in r.stdout, r.stdout
    errors = [line for line in r.stdout.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 8, r.stdout
    for line in errors:
        # The same message as every other OPENREG_* variable: the variable, the value, what is accepted.
        assert "openreg: invalid configuration (OPENREG_SANITIZER)" in line, line
        assert f"OPENREG_SANITIZER='{value}' is invalid" in line, line
        assert "expected 0 (off), 1 (raise" in line and "or report" in line, line


@pytest.mark.parametrize("value,report", [(" 1", False), ("1 ", False), ("REPORT", True), ("Report", True)])
def test_values_are_trimmed_and_words_case_insensitive_as_for_every_variable(value, report):
    r = run("""
        assert torch.openreg.sanitizer.is_enabled()
        a = torch.ones(1000, device="openreg")
        a.mul_(2)
        with side:
            try:
                b = a.sum()
            except torch.AcceleratorError:
                print("RAISED")
        """, mode=value)
    if report:
        assert r.returncode == 66 and "RAISED" not in r.stdout, (r.stdout, r.stderr)
        assert "1 stream race(s) found" in r.stderr, r.stderr
    else:
        assert r.returncode == 0 and "RAISED" in r.stdout, (r.stdout, r.stderr)


def test_freed_without_record_stream_is_reported_only_when_reused():
    # CUDA's caching allocator has the same rule: the race is the reuse, not the free.
    body = """
        x = torch.ones(1 << 16, device="openreg")
        side.wait_stream(cur())
        with side:
            y = x * 2
        del x
        print("freed")
        """
    r = run(body)
    assert r.returncode == 0 and "stream race" not in r.stderr, r.stderr
    r = run(body + "z = torch.empty(1 << 16, device='openreg').fill_(5)\n")
    assert r.returncode != 0
    assert "write by aten::fill_" in r.stderr and "read by aten::mul" in r.stderr, r.stderr


def test_fast_kernels_are_checked():
    # add/mul/mm/relu take unboxed fast kernels: their operands are checked like any op's.
    r = run("""
        a = torch.randn(32, 32, device="openreg")
        b = torch.randn(32, 32, device="openreg")
        with side:
            c = a @ b
        """)
    assert r.returncode != 0
    assert "read by aten::mm" in r.stderr and "write by aten::" in r.stderr, r.stderr


ENABLE_PRELUDE = """
import os, torch, torch_openreg
assert not torch.openreg.sanitizer.is_enabled()
torch.openreg.sanitizer.enable({args})
side = torch.Stream(device="openreg")
def produce():
    a = torch.ones(1000, device="openreg")
    a.mul_(2)
    return a
def consume(a):
    with side:
        return a.sum()
"""


def run_plain(code):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENREG_SANITIZER", "OPENREG_SCHEDULE_FUZZ")}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def test_enable_raises_accelerator_error_naming_both_accesses_and_their_stacks():
    r = run_plain(ENABLE_PRELUDE.format(args="") + textwrap.dedent("""
        a = produce()
        try:
            consume(a)
        except torch.AcceleratorError as e:
            assert e.error_code == torch.openreg.sanitizer.RACE_ERROR_CODE and isinstance(e, RuntimeError)
            print("MESSAGE", e)
        """))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "MESSAGE" in out, out
    read, _, write = out.partition("is not ordered after the earlier")
    # The racing read: op, stream, device, tensor, byte range, and where it was issued.
    assert "read by aten::sum" in read and "stream 1 on openreg:0" in read, out
    assert "Float[1000]" in read and "bytes [0x" in read, out
    assert "in consume" in read and "in produce" not in read, out
    # The earlier write, with its own stack.
    assert "write by aten::mul_" in write and "stream 0 on openreg:0" in write, out
    assert "in produce" in write and "in consume" not in write, out


def test_enable_report_mode_records_every_race_and_exits_nonzero():
    r = run_plain(ENABLE_PRELUDE.format(args="report=True") + textwrap.dedent("""
        a1, a2 = produce(), produce()  # both kept alive: no reuse of a block the side stream read
        consume(a1)
        consume(a2)
        print("continued", len(torch.openreg.sanitizer.races()))
        """))
    assert "continued 2" in r.stdout, r.stdout + r.stderr
    assert r.returncode == 66  # torch.openreg.sanitizer.RACE_ERROR_CODE
    assert "2 stream race(s) found" in r.stderr, r.stderr


def test_enable_in_the_other_mode_than_the_environment_is_an_error():
    r = run("""
        assert torch.openreg.sanitizer.is_enabled()
        torch.openreg.sanitizer.enable()  # same mode: fine
        try:
            torch.openreg.sanitizer.enable(report=True)
        except RuntimeError as e:
            print("refused:", e)
        """)
    assert r.returncode == 0, r.stderr
    assert "refused:" in r.stdout and "raise mode" in r.stdout, r.stdout


def test_checker_off_by_default():
    r = run_plain("""
import torch, torch_openreg
side = torch.Stream(device="openreg")
a = torch.ones(1000, device="openreg")
a.mul_(2)
with side:
    b = a.sum()
print("ok", torch.openreg.sanitizer.is_enabled())
""")
    assert r.returncode == 0 and "ok False" in r.stdout, r.stderr


ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")

WORKLOADS = """
import torch, torch_openreg
from support import workloads  # tests/support, on PYTHONPATH
x, y = workloads.make_data(seed=3, samples=128)
m = workloads.make_model(seed=3)
workloads.train_single(m, x, y, "openreg:0", epochs=1)
workloads.train_data_parallel(m, x, y, ["openreg:0", "openreg:1"], epochs=1)
workloads.train_pipeline(m, x, y, ["openreg:0", "openreg:1"], split=2, epochs=1)

# The overlap benchmark's pattern: chunks of one buffer through H2D copy, kernel and D2H copy, each
# chunk on one of several streams, pinned memory and non-blocking copies; then every stream synchronized.
n, chunks = 1 << 16, 16
host_in, host_out = torch.randn(n).pin_memory(), torch.empty(n).pin_memory()
buf = torch.empty(n, device="openreg")
streams = [torch.openreg.Stream("openreg") for _ in range(4)]
step = n // chunks
for _ in range(2):
    for i in range(chunks):
        sl = slice(i * step, (i + 1) * step)
        with torch.openreg.stream(streams[i % 4]):
            buf[sl].copy_(host_in[sl], non_blocking=True)
            torch.sin(buf[sl], out=buf[sl])
            host_out[sl].copy_(buf[sl], non_blocking=True)
    for s in streams:
        s.synchronize()
assert torch.equal(host_out, host_in.sin())
print("workloads done", len(torch.openreg.sanitizer.races()))
"""


def test_project_workloads_run_clean_under_the_checker():
    # Report mode: every race would be listed and the exit status would be 66.
    r = run(WORKLOADS, mode="report", pythonpath=os.path.join(ROOT, "tests"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "workloads done 0" in r.stdout and "stream race" not in r.stderr, r.stderr


def test_stress_tool_runs_clean_under_the_checker():
    env = dict(os.environ, OPENREG_SANITIZER="report")
    cmd = [sys.executable, "-m", "bench.sweeps.stress", "--threads", "2", "--ops", "250",
           "--seconds", "60", "--seed", "5"]
    r = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "stress: PASS" in r.stdout and "stream race" not in r.stderr, r.stdout + r.stderr


BACKWARD_PRELUDE = """
import torch, torch_openreg
torch.openreg.sanitizer.enable()
side = torch.openreg.Stream()
w = torch.ones(1000, device="openreg", requires_grad=True)
with torch.openreg.stream(side):
    g = torch.zeros(1000, device="openreg")  # written on the side stream
w.grad = g  # the default stream accumulates into it without waiting for the side stream
del g
"""


def test_backward_ops_name_their_autograd_node():
    # Backward runs on the autograd engine's device thread, which has no Python stack: its accesses name
    # the node (gathering a stack there took the GIL per op and cost 1.7x on the data-parallel step).
    r = run_plain(BACKWARD_PRELUDE + textwrap.dedent("""
        try:
            (w * 2).sum().backward()
        except torch.AcceleratorError as e:
            print("MESSAGE", e)
        """))
    assert r.returncode == 0, r.stderr
    now, _, prior = r.stdout.partition("is not ordered after the earlier")
    assert "by aten::add_" in now and "in the backward of AccumulateGrad" in now, r.stdout
    assert "write by aten::zero_" in prior and 'line 7, in <module>' in prior, r.stdout


def test_python_backward_of_a_custom_function_keeps_its_stack():
    r = run_plain(BACKWARD_PRELUDE + textwrap.dedent("""
        class Twice(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2
            @staticmethod
            def backward(ctx, grad):
                return custom_backward_body(grad)
        def custom_backward_body(grad):
            return w.grad + grad  # reads the side stream's write
        try:
            Twice.apply(w).sum().backward()
        except torch.AcceleratorError as e:
            print("MESSAGE", e)
        """))
    assert r.returncode == 0, r.stderr
    now, _, _ = r.stdout.partition("is not ordered after the earlier")
    assert "read by aten::add" in now and "in custom_backward_body" in now, r.stdout
