"""Lightning on openreg (issue 30): ``Trainer(accelerator="openreg", ...)`` on one device and on 2-process DDP.

One device trains in this process and must equal the same Lightning training on the CPU; DDP runs
``lightning_train.py`` as a script (Lightning's "ddp" starts the second process by running it again) and
must equal one process training on the whole batch.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("lightning", reason="the ecosystem tests run in build/ecosystem-venv (make test-ecosystem)")

import lightning_train  # noqa: E402  (tests/ecosystem is on sys.path: pytest puts a test's folder there)
from lightning.pytorch.utilities.exceptions import MisconfigurationException  # noqa: E402
from torch_openreg.lightning import OpenRegAccelerator  # noqa: E402

HERE = Path(__file__).resolve().parent
DDP_TIMEOUT_S = 240  # a hang must fail the test, not stall the suite; a healthy run takes about 30 s


def _assert_states_equal(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert actual.keys() == expected.keys()
    for name in expected:
        torch.testing.assert_close(actual[name], expected[name], msg=lambda m, name=name: f"{name}: {m}")


def test_registered_in_lightnings_registries() -> None:
    from lightning.pytorch.accelerators import AcceleratorRegistry
    from lightning.pytorch.strategies import StrategyRegistry
    from torch_openreg.lightning import OpenRegDDPStrategy, OpenRegSingleDeviceStrategy

    assert AcceleratorRegistry["openreg"]["accelerator"] is OpenRegAccelerator
    for name, start_method in [("ddp", "popen"), ("ddp_spawn", "spawn"), ("ddp_fork", "fork")]:
        assert StrategyRegistry[name]["strategy"] is OpenRegDDPStrategy
        assert StrategyRegistry[name]["init_params"] == {"start_method": start_method}
    assert StrategyRegistry["single_openreg"]["strategy"] is OpenRegSingleDeviceStrategy


def test_accelerator_devices_and_stats() -> None:
    assert OpenRegAccelerator.is_available()
    assert OpenRegAccelerator.auto_device_count() == torch.openreg.device_count() == 2
    parse = OpenRegAccelerator.parse_devices
    assert parse(1) == [0]
    assert parse(2) == parse(-1) == parse("-1") == parse("2") == parse("0,1") == [0, 1]
    assert parse([1]) == parse("1,") == [1]
    for bad in (3, [2], [0, 0], -2, "x"):
        with pytest.raises(MisconfigurationException):
            parse(bad)
    with pytest.raises(TypeError):
        parse(1.5)  # type: ignore[arg-type]
    assert OpenRegAccelerator.get_parallel_devices([0, 1]) == [torch.device("openreg", 0), torch.device("openreg", 1)]

    x = torch.ones(1024, device="openreg:1")
    stats = OpenRegAccelerator().get_device_stats("openreg:1")
    assert stats["allocated_bytes.all.current"] == torch.openreg.memory_allocated(1) >= x.nbytes


def test_single_device_matches_cpu() -> None:
    module, trainer = lightning_train.fit(
        lightning_train.GLOBAL_BATCH, accelerator="openreg", devices=1, strategy="single_openreg"
    )
    cpu_module, _ = lightning_train.fit(lightning_train.GLOBAL_BATCH, accelerator="cpu", devices=1)

    assert trainer.strategy.root_device == torch.device("openreg", 0)
    assert len(module.steps) == lightning_train.STEPS
    for step in module.steps:
        assert step["param_device"] == step["batch_device"] == "openreg:0"
        assert step["out_dtype"] == torch.float32
    assert {s["param_device"] for s in cpu_module.steps} == {"cpu"}
    torch.testing.assert_close([s["loss"] for s in module.steps], [s["loss"] for s in cpu_module.steps])
    _assert_states_equal(module.net.state_dict(), cpu_module.net.state_dict())
    # Lightning's one-process training is the reference's, step for step.
    reference_state, reference_losses = lightning_train.reference_training()
    torch.testing.assert_close([s["loss"] for s in module.steps], reference_losses)
    _assert_states_equal(module.net.state_dict(), reference_state)


def test_single_device_chosen_by_devices_list() -> None:
    # The accelerator as an instance, as Lightning also takes it.
    module, trainer = lightning_train.fit(8, accelerator=OpenRegAccelerator(), devices=[1], strategy="single_openreg")
    assert trainer.strategy.root_device == torch.device("openreg", 1)
    assert {s["param_device"] for s in module.steps} == {"openreg:1"}


def test_single_device_without_strategy_refuses_the_cpu() -> None:
    # Lightning's automatic strategy puts one device of an accelerator it does not know on the CPU; training
    # there silently is what users hit, so the accelerator refuses it and names the strategy to use.
    with pytest.raises(MisconfigurationException, match="strategy='single_openreg'"):
        lightning_train.fit(8, accelerator="openreg", devices=1)


@pytest.mark.parametrize("precision, dtype", [("bf16-mixed", torch.bfloat16), ("16-mixed", torch.float16)])
def test_mixed_precision_autocasts_on_openreg(precision: str, dtype: torch.dtype) -> None:
    # Lightning makes the plugin for "cuda"; autocast("cuda") would leave openreg's matmuls in float32.
    module, trainer = lightning_train.fit(
        8, accelerator="openreg", devices=1, strategy="single_openreg", precision=precision
    )
    assert {s["out_dtype"] for s in module.steps} == {dtype}
    assert {s["param_device"] for s in module.steps} == {"openreg:0"}
    plugin = trainer.strategy.precision_plugin
    assert plugin.device == "openreg"
    if precision == "16-mixed":  # fp16 gradients are scaled on openreg, not by a disabled CUDA scaler
        assert plugin.scaler.is_enabled() and plugin.scaler._device == "openreg"


def test_ddp_two_processes_match_one_process_on_the_whole_batch(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "RANK")}
    # Its own session, so a hang kills rank 0 and the rank it launched together.
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "lightning_train.py"), str(tmp_path)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=DDP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        pytest.fail(f"2-process Lightning DDP did not finish in {DDP_TIMEOUT_S} s:\n{output[-4000:]}")
    assert proc.returncode == 0, output[-4000:]

    results = [torch.load(tmp_path / f"ddp_rank{rank}.pt", weights_only=False) for rank in (0, 1)]
    # The samples each step trained on, over both ranks: disjoint halves of one batch of GLOBAL_BATCH.
    batches = []
    for step0, step1 in zip(results[0]["steps"], results[1]["steps"]):
        assert len(step0["samples"]) == len(step1["samples"]) == lightning_train.GLOBAL_BATCH // 2
        assert not set(step0["samples"]) & set(step1["samples"])
        batches.append(step0["samples"] + step1["samples"])
    reference_state, reference_losses = lightning_train.reference_training(batches)
    for rank, result in enumerate(results):
        assert result["rank"] == rank
        assert result["strategy"] == "OpenRegDDPStrategy"
        assert len(result["steps"]) == lightning_train.STEPS
        for step in result["steps"]:
            assert step["world_size"] == 2
            assert step["backend"] == "openreg"
            assert step["wrapper"] == "DistributedDataParallel"
            assert step["param_device"] == step["batch_device"] == f"openreg:{rank}"
        _assert_states_equal(result["state"], reference_state)
        # The hook ran for every step's gradients and computed what the default all-reduce does (the second
        # fit sees the same samples: Lightning's sampler shuffles with the same seed).
        assert result["hook_calls"] >= lightning_train.STEPS
        _assert_states_equal(result["hooked_state"], reference_state)
    # Each rank's loss is over its half of the batch; the two halves average to the whole batch's loss.
    averaged = [(a["loss"] + b["loss"]) / 2 for a, b in zip(results[0]["steps"], results[1]["steps"])]
    torch.testing.assert_close(averaged, reference_losses)


def test_package_imports_without_lightning() -> None:
    # `import torch` (which autoloads torch_openreg) never imports Lightning, even where it is installed.
    probe = "import sys, torch, torch_openreg; assert not [m for m in sys.modules if m.startswith('lightning')]"
    subprocess.run([sys.executable, "-c", probe], check=True, timeout=120)
    # Where Lightning is missing, importing the integration says what to install: in this interpreter with
    # Lightning hidden (None in sys.modules makes its import fail as if it were not installed), and in the
    # interpreter the venv was made from (the system's, with torch and torch_openreg) where that lacks it.
    hidden = "import sys; sys.modules['lightning'] = None; import torch_openreg.lightning"
    commands = [[sys.executable, "-c", hidden]]
    base = getattr(sys, "_base_executable", sys.executable)
    if base != sys.executable and subprocess.run([base, "-c", "import lightning"], capture_output=True).returncode:
        commands.append([base, "-c", "import torch_openreg.lightning"])
    for command in commands:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert proc.returncode != 0, command
        message = "ModuleNotFoundError: torch_openreg.lightning needs PyTorch Lightning: `pip install lightning`"
        assert message in proc.stderr, (command, proc.stderr)
