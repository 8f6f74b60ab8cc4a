"""openreg's main job (`make demo`):

1. shows that `import torch` alone found the device (autoload) and prints the devices;
2. trains a model data-parallel over openreg:0 and openreg:1 in one process, next to the same training
   on one device and on the CPU, and prints the loss per epoch and the time per step of each;
3. runs the stream-overlap benchmark and prints its table;
4. writes device timelines (Chrome trace JSON for Perfetto, and PNG) and says where they are;
5. runs the same training on a modelled H100 (virtual time, OPENREG_DEVICE_PROFILE=h100-sxm, in a child
   process: the profile is read when the runtime starts) and prints its step times and timeline beside
   the host-time ones.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(os.path.dirname(HERE), "results")


def _human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def step_autoload():
    import torch  # no `import torch_openreg`: the torch.backends entry point loads it

    print("== 1. autoload")
    found = hasattr(torch, "openreg") and "torch_openreg" in sys.modules
    print(f"import torch -> torch.openreg present: {found}; "
          f"accelerator: {torch.accelerator.current_accelerator()}")
    if not found:
        raise SystemExit("autoload did not register openreg (is torch_openreg installed? `make build`)")
    print(f"{'device':<10} {'name':<24} {'compute threads':>15} {'memory capacity':>16} {'copy bandwidth':>15}")
    for i in range(torch.openreg.device_count()):
        p = torch.openreg.get_device_properties(i)
        bw = "unlimited" if not p.copy_bandwidth else _human_bytes(p.copy_bandwidth) + "/s"
        print(f"openreg:{i:<2} {p.name:<24} {p.multi_processor_count:>15} {_human_bytes(p.total_memory):>16} {bw:>15}")
    print()


# The demo's model: narrow layers, wide batch. Its kernels are many and mid-sized, so one device keeps
# about one core busy between them (ATen's intra-op split of a kernel this size gains little), and
# two replicas on two devices run two kernel streams side by side; see docs/figures.md for what bounds it.
FEATURES, HIDDEN, BATCH = 32, 128, 4096
STEPS_PER_EPOCH, EPOCHS = 8, 4


def step_training():
    import torch

    from tests.support import workloads

    print("== 2. data-parallel training: replicas on openreg:0 and openreg:1 vs one device and the CPU")
    print(f"model {FEATURES}->{HIDDEN}->{HIDDEN}->4 MLP, batch {BATCH} ({BATCH // 2} per replica), SGD")
    x, y = workloads.make_data(seed=0, samples=BATCH * STEPS_PER_EPOCH, features=FEATURES)
    model = workloads.make_model(seed=0, features=FEATURES, hidden=HIDDEN)
    epochs = EPOCHS
    cpu = workloads.train_single(model, x, y, "cpu", epochs=epochs, batch=BATCH)
    # One device and data parallel alternate, three times each; the median of each is reported (one
    # run can differ from the next by 1.5x on a small shared machine).
    ones, dps = [], []
    for _ in range(3):
        ones.append(workloads.train_single(model, x, y, "openreg:0", epochs=epochs, batch=BATCH))
        dps.append(workloads.train_data_parallel(model, x, y, ["openreg:0", "openreg:1"], epochs=epochs, batch=BATCH))
    one, dp = ones[0], dps[0]
    one_s = statistics.median(r.step_seconds for r in ones)
    dp_s = statistics.median(r.step_seconds for r in dps)
    print(f"{'epoch':>5} {'cpu loss':>12} {'openreg:0 loss':>15} {'openreg:0+1 DP loss':>20}")
    for e in range(epochs):
        print(f"{e:>5} {cpu.losses[e]:>12.6f} {one.losses[e]:>15.6f} {dp.losses[e]:>20.6f}")
    worst = max(abs(a - b) for a, b in zip(cpu.losses, dp.losses))
    agree = all(abs(a - b) <= 1e-4 * max(1.0, abs(a)) for a, b in zip(cpu.losses, dp.losses))
    print(f"time per step (medians of 3): cpu {cpu.step_seconds * 1e3:.2f} ms, openreg:0 {one_s * 1e3:.2f} ms, "
          f"data parallel over openreg:0+1 {dp_s * 1e3:.2f} ms ({one_s / dp_s:.2f}x one device)")
    print(f"data-parallel losses {'agree' if agree else 'DISAGREE'} with the CPU (largest difference {worst:.2e})\n")
    os.makedirs(OUT, exist_ok=True)
    trace_path = os.path.join(OUT, "demo_training_timeline.json")
    with torch.openreg.trace(trace_path):
        workloads.train_data_parallel(model, x[:2 * BATCH], y[:2 * BATCH], ["openreg:0", "openreg:1"], epochs=1,
                                      batch=BATCH)
    if not agree:
        raise SystemExit("data-parallel training does not match the CPU")
    return trace_path


def step_overlap():
    print("== 3. stream-overlap benchmark")
    subprocess.run([sys.executable, "-m", "bench.benchmarks.overlap_bench", "--quick",
                    "--out", os.path.join(OUT, "overlap_bench.json")], check=True)
    print()


def step_timelines(training_trace: str):
    from bench.common.timeline_png import render

    print("== 4. timelines")
    png = render(training_trace, training_trace.replace(".json", ".png"),
                 title="one epoch of data-parallel training over openreg:0 and openreg:1")
    print(f"training timeline: {training_trace} (open in ui.perfetto.dev) and {png}")
    print(f"overlap timeline:  {os.path.join(OUT, 'overlap_timeline.json')} and "
          f"{os.path.join(OUT, 'overlap_timeline.png')}")


def step_virtual():
    print("== 5. the same training on a modelled H100 (virtual time: OPENREG_DEVICE_PROFILE=h100-sxm)")
    env = dict(os.environ, OPENREG_DEVICE_PROFILE="h100-sxm")
    subprocess.run([sys.executable, "-m", __spec__.name, "--virtual-step"], env=env, check=True)


def virtual_step():
    """In a child with a device profile: the demo's training steps timed on the modelled GPU's clock."""
    import torch

    from bench.common.timeline_png import render
    from tests.support import workloads

    x, y = workloads.make_data(seed=0, samples=BATCH * 3, features=FEATURES)
    model = workloads.make_model(seed=0, features=FEATURES, hidden=HIDDEN)

    def step_time(train) -> float:
        # One step and three steps, set-up included in both: their difference is two steps.
        times = []
        for steps in (1, 3):
            with torch.openreg.timing.region() as r:
                train(x[: steps * BATCH], y[: steps * BATCH])
            times.append(r.wall)
        return (times[1] - times[0]) / 2

    one_s = step_time(lambda xs, ys: workloads.train_single(model, xs, ys, "openreg:0", epochs=1, batch=BATCH))
    devices = ["openreg:0", "openreg:1"]
    dp_s = step_time(lambda xs, ys: workloads.train_data_parallel(model, xs, ys, devices, epochs=1, batch=BATCH))
    print(f"time per step on the modelled {torch.openreg.get_device_name(0)}: openreg:0 {one_s * 1e6:.1f} us, "
          f"data parallel over openreg:0+1 {dp_s * 1e6:.1f} us ({one_s / dp_s:.2f}x one device); "
          "the same on every run")
    with torch.openreg.timing.region() as r:
        workloads.train_data_parallel(model, x[:BATCH], y[:BATCH], devices, epochs=1, batch=BATCH)
    print(f"one data-parallel step, set-up included: {r}")
    trace_path = os.path.join(OUT, "demo_training_timeline_h100.json")
    with torch.openreg.trace(trace_path):
        workloads.train_data_parallel(model, x[:BATCH], y[:BATCH], devices, epochs=1, batch=BATCH)
    png = render(trace_path, trace_path.replace(".json", ".png"),
                 title="one data-parallel step on two modelled H100s (virtual time)")
    print(f"its timeline: {trace_path} and {png}\n")


def main() -> int:
    if "--virtual-step" in sys.argv:
        virtual_step()
        return 0
    t0 = time.perf_counter()
    step_autoload()
    trace = step_training()
    step_overlap()
    step_timelines(trace)
    step_virtual()
    print(f"\ndemo finished in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
