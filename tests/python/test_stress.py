"""The concurrency stress tool, short: several threads, streams on both devices, random ops, event waits,
cross-device copies, allocation and free; every result checked against the CPU and memory returning to
its starting level. The tool exits 0 only if all of that holds (see bench/sweeps/stress.py). A run with
injected faults shows the checker catches every wrong result."""

import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")  # the checkout, where `python -m bench.sweeps.stress` runs


def test_short_stress_run_passes():
    cmd = [sys.executable, "-m", "bench.sweeps.stress",
           "--threads", "3", "--ops", "300", "--seconds", "60", "--hang-seconds", "60", "--seed", "7"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "stress: PASS" in proc.stdout
    assert "mismatches 0, errors 0, memory not returned 0 bytes" in proc.stdout


def test_stress_run_catches_every_injected_fault():
    cmd = [sys.executable, "-m", "bench.sweeps.stress",
           "--threads", "3", "--ops", "400", "--seconds", "60", "--hang-seconds", "60", "--seed", "11",
           "--inject-faults", "8"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    injected = [line for line in proc.stdout.splitlines() if line.startswith("stress: injected faults caught")]
    assert injected, proc.stdout
    caught, total = map(int, injected[0].split("caught ")[1].split(" of "))
    assert total >= 10 and caught == total, injected[0]
