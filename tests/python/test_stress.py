"""The concurrency stress tool, short: several threads, streams on both devices, random ops, event waits,
cross-device copies, allocation and free; every result checked against the CPU and memory returning to
its starting level. The tool exits 0 only if all of that holds (see bench/python/stress.py)."""

import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def test_short_stress_run_passes():
    cmd = [sys.executable, os.path.join(ROOT, "bench", "python", "stress.py"),
           "--threads", "3", "--ops", "300", "--seconds", "60", "--hang-seconds", "60", "--seed", "7"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "stress: PASS" in proc.stdout
    assert "mismatches 0, errors 0, memory not returned 0 bytes" in proc.stdout
