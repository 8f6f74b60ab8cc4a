"""torch.openreg.set_sync_debug_mode / get_sync_debug_mode, as torch.cuda's: operations that make the
host wait for the device warn ("warn", 1) or raise ("error", 2); device synchronize does not."""

import warnings

import pytest
import torch

MESSAGE = "called a synchronizing openreg operation"


@pytest.fixture(autouse=True)
def _restore_mode():
    yield
    torch.openreg.set_sync_debug_mode(0)


def _sync_warnings(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [w for w in caught if MESSAGE in str(w.message)]


def test_mode_values_round_trip():
    assert torch.openreg.get_sync_debug_mode() == 0
    for value, expected in [("warn", 1), ("error", 2), ("default", 0), (1, 1), (2, 2), (0, 0)]:
        torch.openreg.set_sync_debug_mode(value)
        assert torch.openreg.get_sync_debug_mode() == expected


def test_bad_values_are_rejected():
    with pytest.raises(RuntimeError, match="invalid value of debug_mode"):
        torch.openreg.set_sync_debug_mode("loud")
    with pytest.raises(RuntimeError, match="invalid value of debug_mode"):
        torch.openreg.set_sync_debug_mode(3)
    assert torch.openreg.get_sync_debug_mode() == 0


SYNCING = {
    "item": lambda x: x.sum().item(),
    "tolist": lambda x: x.tolist(),
    "cpu": lambda x: x.cpu(),
    "nonzero": lambda x: x.nonzero(),
    "masked_select": lambda x: x[x > 0],
    "pageable_h2d": lambda x: torch.ones(3).to("openreg"),
    "pageable_d2h_non_blocking": lambda x: torch.empty(4).copy_(x, non_blocking=True),
    "stream_synchronize": lambda x: torch.openreg.current_stream().synchronize(),
}

NOT_SYNCING = {
    "add": lambda x: x + 1,
    "matmul": lambda x: x.view(2, 2) @ x.view(2, 2),
    "device_to_device": lambda x: x.to("openreg:1"),
    "pinned_h2d_non_blocking": lambda x: torch.ones(3).pin_memory().to("openreg", non_blocking=True),
    "pinned_d2h_non_blocking": lambda x: torch.empty(4).pin_memory().copy_(x, non_blocking=True),
    # _to_copy makes a pinned result for a non-blocking device-to-host copy, as for CUDA.
    "to_cpu_non_blocking": lambda x: x.to("cpu", non_blocking=True),
    "device_synchronize": lambda x: torch.openreg.synchronize(),
    "event_synchronize": lambda x: torch.openreg.current_stream().record_event().synchronize(),
}


@pytest.mark.parametrize("name", sorted(SYNCING))
def test_warn_mode_flags_synchronizing_operations(name):
    x = torch.randn(4, device="openreg")
    torch.openreg.set_sync_debug_mode("warn")
    assert len(_sync_warnings(lambda: SYNCING[name](x))) >= 1


@pytest.mark.parametrize("name", sorted(NOT_SYNCING))
def test_warn_mode_leaves_asynchronous_operations_alone(name):
    x = torch.randn(4, device="openreg")
    torch.openreg.set_sync_debug_mode("warn")
    assert _sync_warnings(lambda: NOT_SYNCING[name](x)) == []
    torch.openreg.set_sync_debug_mode(0)
    torch.openreg.synchronize()


def test_default_mode_is_silent():
    x = torch.randn(4, device="openreg")
    assert _sync_warnings(lambda: x.sum().item()) == []


def test_error_mode_raises_before_the_host_waits():
    x = torch.randn(4, device="openreg")
    expected = x.sum().item()
    torch.openreg.set_sync_debug_mode("error")
    with pytest.raises(RuntimeError, match=MESSAGE):
        x.sum().item()
    with pytest.raises(RuntimeError, match=MESSAGE):
        x.nonzero()
    y = x * 2  # asynchronous work still runs
    torch.openreg.set_sync_debug_mode("default")
    assert y.sum().item() == pytest.approx(2 * expected, rel=1e-5)
