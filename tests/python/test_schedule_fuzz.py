"""OPENREG_SCHEDULE_FUZZ=<seed>: random per-seed delays of every stream's work (Note [Schedule fuzzing] in
sim/src/schedule_fuzz.h) turn a missing synchronization into a wrong result, while correct programs stay
correct. Each seed runs in its own process: the runtime reads the variable once, when it starts."""
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")

PROGRAM = """
import torch, torch_openreg
from support import workloads  # tests/support, on PYTHONPATH
side = torch.Stream(device="openreg")
cur = torch.accelerator.current_stream

# The missing wait: the side stream reads what the default stream is still writing.
a = torch.ones(1 << 16, device="openreg")
torch.accelerator.synchronize()
for _ in range(4):
    a.mul_(2)
with side:
    racy = a.sum()
print("MISSING_WAIT", racy.item() == 16 * (1 << 16))

# The same with wait_stream both ways: always right.
b = torch.ones(1 << 16, device="openreg")
for _ in range(4):
    b.mul_(2)
side.wait_stream(cur())
with side:
    s = b.sum()
cur().wait_stream(side)
assert (s + 0).item() == 16 * (1 << 16)

# Copies over both devices ordered by the copies themselves, and pinned non-blocking round trips.
host = torch.randn(4096).pin_memory()
d0 = host.to("openreg:0", non_blocking=True)
d1 = (d0 * 3).to("openreg:1")
back = torch.empty(4096).pin_memory()
back.copy_(d1 + 1, non_blocking=True)
torch.accelerator.synchronize("openreg:1")
assert torch.allclose(back, host * 3 + 1)

# The project's workloads match the CPU.
x, y = workloads.make_data(seed=3, samples=128)
m = workloads.make_model(seed=3)
cpu = workloads.train_single(m, x, y, "cpu", epochs=1).losses
for run in (workloads.train_single(m, x, y, "openreg:0", epochs=1),
            workloads.train_data_parallel(m, x, y, ["openreg:0", "openreg:1"], epochs=1),
            workloads.train_pipeline(m, x, y, ["openreg:0", "openreg:1"], split=2, epochs=1)):
    torch.testing.assert_close(torch.tensor(run.losses), torch.tensor(cpu), rtol=1e-4, atol=1e-5)
print("CORRECT_OK")
"""


def run(seed, code=PROGRAM):
    env = dict(os.environ, OPENREG_SCHEDULE_FUZZ=str(seed))
    env.pop("OPENREG_SANITIZER", None)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "tests"), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=180)


def test_missing_wait_is_wrong_under_most_seeds_and_correct_programs_stay_correct():
    seeds = range(6)
    right = 0
    for seed in seeds:
        r = run(seed)
        assert r.returncode == 0, f"seed {seed}: " + r.stdout + r.stderr
        assert "CORRECT_OK" in r.stdout, f"seed {seed}: " + r.stdout
        right += "MISSING_WAIT True" in r.stdout
    assert right < len(seeds) / 2, f"the missing wait gave the right result under {right} of {len(seeds)} seeds"


def test_bad_seed_names_the_variable():
    r = run("not-a-seed", "import torch, torch_openreg\ntorch.ones(1, device='openreg')\n")
    assert r.returncode != 0
    assert "OPENREG_SCHEDULE_FUZZ" in r.stderr, r.stderr


def test_stress_tool_sweeps_seeds_under_the_checker():
    cmd = [sys.executable, "-m", "bench.sweeps.stress", "--threads", "2", "--ops", "120",
           "--seconds", "60", "--seed", "9", "--sanitizer", "--fuzz-seed", "11", "--seeds", "2"]
    env = {k: v for k, v in os.environ.items() if k not in ("OPENREG_SANITIZER", "OPENREG_SCHEDULE_FUZZ")}
    r = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "stress: 2 of 2 seeds passed" in r.stdout, r.stdout
    assert "stream race" not in r.stderr, r.stderr
