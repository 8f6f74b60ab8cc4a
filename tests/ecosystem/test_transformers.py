"""HF transformers' Trainer and accelerate train on openreg (issue 30, item 2), with the recipe of docs/distributed.md
("Hugging Face Trainer and accelerate"): ``ACCELERATE_TORCH_DEVICE=openreg``, and under torchrun the
process group made first and accelerate's device-agnostic DDP path (``use_cpu=True``).

``hf_train.py`` is the recipe as a script. It runs twice, as a user runs it: once as one process (which
also trains the same model on the CPU for comparison) and once under ``torchrun --nproc-per-node=2``
with half the batch per rank. The tests compare what the runs report.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

for _package in ("transformers", "accelerate"):
    pytest.importorskip(_package, reason="the ecosystem tests run in build/ecosystem-venv (make test-ecosystem)")

SCRIPT = Path(__file__).with_name("hf_train.py")
RECIPE_ENV = {"ACCELERATE_TORCH_DEVICE": "openreg", "ACCELERATE_MIXED_PRECISION": None}
STEPS = 4

# fp32: openreg runs the CPU's kernels, and DDP's averaged half-batch gradients differ from the whole
# batch's by rounding only. AdamW (lr 1e-2) turns that rounding into parameter differences up to ~1e-5
# where a gradient is near zero. bf16: the autocast op lists of openreg (CUDA's) and the CPU differ,
# and bf16 matmuls round to ~3 significant digits.
FP32_LOSS_ATOL = 1e-5
FP32_PARAM_ATOL = 1e-4
BF16_LOSS_ATOL = 2e-3


class Run:
    def __init__(self, out_dir: Path, mode: str, ranks: int) -> None:
        self.out_dir, self.mode = out_dir, mode
        self.results = [json.loads((out_dir / f"{mode}_rank{r}.json").read_text()) for r in range(ranks)]

    def __getitem__(self, scenario: str) -> dict:
        return self.results[0][scenario]

    def params(self, scenario: str, rank: int = 0) -> dict[str, torch.Tensor]:
        return torch.load(self.out_dir / f"{self.mode}_{scenario}_rank{rank}.pt")


@pytest.fixture(scope="module")
def runs(tmp_path_factory, run_script, run_torchrun) -> dict[str, Run]:
    """The one-process run and the torchrun run, started together (they overlap on the cores)."""
    out = tmp_path_factory.mktemp("hf")
    started = {
        "single": run_script(SCRIPT, out, "single", env=RECIPE_ENV, wait=False),
        "ddp": run_torchrun(SCRIPT, out, "ddp", nproc=2, env=RECIPE_ENV, wait=False),
    }
    for run in started.values():
        run.wait()
    return {"single": Run(out, "single", 1), "ddp": Run(out, "ddp", 2)}


@pytest.fixture
def single(runs) -> Run:
    return runs["single"]


@pytest.fixture
def ddp(runs) -> Run:
    return runs["ddp"]


def assert_params_close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float) -> None:
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=atol, msg=lambda m, n=name: f"{n}: {m}")


def assert_ddp(run: Run, scenario: str) -> None:
    """Both ranks trained one model with DDP over openreg's group, each on its own device and its own
    half of every batch, and ended with identical parameters: the gradients were all-reduced."""
    for rank, result in enumerate(run.results):
        r = result[scenario]
        assert r["wrapped"] == "DistributedDataParallel", r
        assert r["world_size"] == 2 and r["group"] == "ProcessGroupOpenReg", r
        assert r["param_devices"] == [f"openreg:{rank}"], r
    batches = [result[scenario]["batches"] for result in run.results]
    assert len(batches[0]) == STEPS and all(b0 != b1 for b0, b1 in zip(*batches)), batches
    rank0, rank1 = run.params(scenario, 0), run.params(scenario, 1)
    for name in rank0:
        assert torch.equal(rank0[name], rank1[name]), f"{name} differs between the ranks: no gradient all-reduce"


def test_trainer_trains_on_openreg_as_on_cpu(single):
    r, cpu = single["trainer"], single["cpu_trainer"]
    assert r["args_device"] == "openreg" and r["param_devices"] == ["openreg:0"], r
    assert cpu["param_devices"] == ["cpu"], cpu
    assert len(r["losses"]) == STEPS
    torch.testing.assert_close(r["losses"], cpu["losses"], rtol=0, atol=FP32_LOSS_ATOL)
    assert_params_close(single.params("trainer"), single.params("cpu_trainer"), FP32_PARAM_ATOL)


def test_trainer_ddp_under_torchrun_matches_one_process(single, ddp):
    assert_ddp(ddp, "trainer")
    assert ddp["trainer"]["matmul_dtypes"] == ["torch.float32"]
    # The logged loss is the mean over the ranks, as the one process's over the whole batch.
    torch.testing.assert_close(ddp["trainer"]["losses"], single["trainer"]["losses"], rtol=0, atol=FP32_LOSS_ATOL)
    assert_params_close(ddp.params("trainer"), single.params("trainer"), FP32_PARAM_ATOL)


def test_trainer_bf16_autocast(single, ddp):
    # One process: bf16 from ACCELERATE_MIXED_PRECISION (TrainingArguments(bf16=True) is refused by
    # transformers for a device it does not know, unless use_cpu=True: see docs/distributed.md).
    one = single["trainer_bf16"]
    assert one["mixed_precision"] == "bf16" and one["matmul_dtypes"] == ["torch.bfloat16"], one
    assert one["param_devices"] == ["openreg:0"] and one["param_dtypes"] == ["torch.float32"], one
    torch.testing.assert_close(one["losses"], single["cpu_trainer_bf16"]["losses"], rtol=0, atol=BF16_LOSS_ATOL)
    # torchrun: TrainingArguments(bf16=True), accepted on the recipe's use_cpu=True path.
    assert_ddp(ddp, "trainer_bf16")
    two = ddp["trainer_bf16"]
    assert two["mixed_precision"] == "bf16" and two["matmul_dtypes"] == ["torch.bfloat16"], two
    assert two["param_dtypes"] == ["torch.float32"], two
    torch.testing.assert_close(two["losses"], one["losses"], rtol=0, atol=BF16_LOSS_ATOL)


def test_accelerate_loop_bf16(single, ddp):
    one = single["accelerate_bf16"]
    assert one["device"] == "openreg" and one["param_devices"] == ["openreg:0"], one
    assert one["matmul_dtypes"] == ["torch.bfloat16"] and one["param_dtypes"] == ["torch.float32"], one
    assert len(one["losses"]) == STEPS
    assert_ddp(ddp, "accelerate_bf16")
    assert ddp["accelerate_bf16"]["matmul_dtypes"] == ["torch.bfloat16"]
    torch.testing.assert_close(ddp["accelerate_bf16"]["losses"], one["losses"], rtol=0, atol=BF16_LOSS_ATOL)
