"""Device indices are checked as whole integers everywhere: the backend's index type is 8 bits, and an
index that names no device raises torch.AcceleratorError (a RuntimeError, as torch.cuda's "invalid
device ordinal") giving the valid range, never acts on another device."""

import pytest
import torch

# 2: one past the last device; 128: -128 once narrowed to 8 bits; 255: -1 (the current device);
# 256: device 0; 2**40: overflows int32; 2**70: overflows int64.
BAD_INDICES = [2, 128, 255, 256, 258, 2**40, 2**70]

CALLS = {
    "set_device": lambda i: torch.openreg.set_device(i),
    "device_context": lambda i: torch.openreg.device(i).__enter__(),
    "synchronize": lambda i: torch.openreg.synchronize(i),
    "memory_allocated": lambda i: torch.openreg.memory_allocated(i),
    "memory_stats": lambda i: torch.openreg.memory_stats(i),
    "mem_get_info": lambda i: torch.openreg.mem_get_info(i),
    "get_device_properties": lambda i: torch.openreg.get_device_properties(i),
    "get_device_name": lambda i: torch.openreg.get_device_name(i),
    "get_device_capability": lambda i: torch.openreg.get_device_capability(i),
    "get_rng_state": lambda i: torch.openreg.get_rng_state(i),
    "Stream": lambda i: torch.openreg.Stream(device=i),
    "current_stream": lambda i: torch.openreg.current_stream(i),
    "default_stream": lambda i: torch.openreg.default_stream(i),
    "can_device_access_peer": lambda i: torch.openreg.can_device_access_peer(0, i),
}


@pytest.mark.parametrize("index", BAD_INDICES)
@pytest.mark.parametrize("call", list(CALLS.values()), ids=list(CALLS))
def test_out_of_range_index_raises_accelerator_error_with_the_valid_range(call, index):
    torch.openreg.set_device(1)  # a wrapped index would silently act on 0 or "the current device"
    with pytest.raises(torch.AcceleratorError, match=r"invalid device ordinal .*valid device indices are 0\.\.1"):
        call(index)
    assert torch.openreg.current_device() == 1


def test_accelerator_error_is_a_runtime_error_with_cudas_error_code():
    with pytest.raises(RuntimeError) as info:
        torch.openreg.set_device(256)
    assert isinstance(info.value, torch.AcceleratorError)
    assert info.value.error_code == 101  # cudaErrorInvalidDevice
    assert str(256) in str(info.value)


def test_set_rng_state_with_an_out_of_range_index_raises_and_changes_nothing():
    states = torch.openreg.get_rng_state_all()
    with pytest.raises(torch.AcceleratorError):
        torch.openreg.set_rng_state(torch.openreg.get_rng_state(1), 256)
    assert all(torch.equal(a, b) for a, b in zip(states, torch.openreg.get_rng_state_all()))


def test_get_rng_state_255_is_not_the_current_device():
    torch.openreg.set_device(1)
    with pytest.raises(torch.AcceleratorError, match="255"):
        torch.openreg.get_rng_state(255)


def test_torch_accelerator_and_generic_paths_raise_accelerator_error():
    torch.ones(1, device="openreg")  # torch.accelerator skips synchronize before the runtime starts
    with pytest.raises(torch.AcceleratorError, match="invalid device ordinal 5"):
        torch.accelerator.synchronize(5)
    with pytest.raises(torch.AcceleratorError, match="invalid device ordinal 5"):
        torch.accelerator.set_device_index(5)
    with pytest.raises(torch.AcceleratorError):
        torch.empty(1, device="openreg:2")
    with pytest.raises(torch.AcceleratorError):
        torch.Stream("openreg:3")
    assert torch.openreg.current_device() == 0


def test_negative_indices_keep_torch_cudas_meaning():
    torch.openreg.set_device(1)
    torch.openreg.set_device(-1)  # a no-op, as torch.cuda.set_device(-1)
    with torch.openreg.device(-1):
        assert torch.openreg.current_device() == 1
    with pytest.raises(torch.AcceleratorError, match="invalid device ordinal -1"):
        torch.openreg.synchronize(-1)


def test_valid_indices_in_every_form_still_work():
    for form in (1, "openreg:1", torch.device("openreg", 1), torch.openreg.device(1)):
        torch.openreg.synchronize(form)
        assert torch.openreg.get_device_properties(form).uuid == torch.openreg.get_device_properties(1).uuid
    assert torch.openreg.Stream(device=1).device_index == 1
