"""Multi-device training loops compared with the CPU: one device, data parallel over two devices in one
process, and a two-stage pipeline over two devices (streams and events between the stages)."""

import pytest
import torch
from support import workloads  # tests/support (pytest's pythonpath)

EPOCHS = 3
TWO = ["openreg:0", "openreg:1"]


@pytest.fixture(scope="module")
def data():
    return workloads.make_data(seed=3, samples=256)


@pytest.fixture(scope="module")
def model():
    return workloads.make_model(seed=3)


@pytest.fixture(scope="module")
def cpu_run(data, model):
    return workloads.train_single(model, *data, "cpu", epochs=EPOCHS)


def assert_losses_match(got, expected):
    assert len(got) == len(expected) == EPOCHS
    torch.testing.assert_close(torch.tensor(got), torch.tensor(expected), rtol=1e-4, atol=1e-5)
    assert expected[-1] < expected[0], "the reference run did not learn; the comparison would be vacuous"


def assert_params_match(model, reference):
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("device", TWO)
def test_single_device_matches_cpu(data, model, cpu_run, device):
    run = workloads.train_single(model, *data, device, epochs=EPOCHS)
    assert_losses_match(run.losses, cpu_run.losses)
    assert_params_match(run.models[0], cpu_run.models[0])


def test_adam_single_device_matches_cpu(data, model):
    cpu = workloads.train_single(model, *data, "cpu", epochs=EPOCHS, optimizer="adam")
    dev = workloads.train_single(model, *data, "openreg:1", epochs=EPOCHS, optimizer="adam")
    assert_losses_match(dev.losses, cpu.losses)


def test_data_parallel_two_devices_matches_cpu(data, model, cpu_run):
    run = workloads.train_data_parallel(model, *data, TWO, epochs=EPOCHS)
    assert_losses_match(run.losses, cpu_run.losses)
    # Both replicas end identical to the CPU model: a step that ran before the averaged gradient
    # arrived (a missing event) would make them diverge.
    assert [str(next(r.parameters()).device) for r in run.models] == TWO
    for replica in run.models:
        assert_params_match(replica, cpu_run.models[0])


def test_pipeline_two_stages_matches_cpu(data, model, cpu_run):
    run = workloads.train_pipeline(model, *data, TWO, split=2, epochs=EPOCHS)
    assert_losses_match(run.losses, cpu_run.losses)
    stage0, stage1 = run.models
    assert next(stage0.parameters()).device == torch.device("openreg:0")
    assert next(stage1.parameters()).device == torch.device("openreg:1")
    reference = list(cpu_run.models[0].parameters())
    for p, q in zip(list(stage0.parameters()) + list(stage1.parameters()), reference):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-4, atol=1e-5)
