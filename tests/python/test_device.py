"""Device management: torch.openreg's device API, as a user of torch.cuda would use it."""

import threading

import pytest
import torch


def test_available_with_two_devices_by_default():
    assert torch.openreg.is_available()
    assert torch.openreg.device_count() == 2
    assert torch.accelerator.is_available()
    assert torch.accelerator.device_count() == 2
    assert torch.accelerator.current_accelerator() == torch.device("openreg")


def test_initialized_after_first_use():
    torch.empty(1, device="openreg")
    assert torch.openreg.is_initialized()
    torch.openreg.init()  # idempotent
    assert torch.openreg.is_initialized()


def test_set_device_changes_where_tensors_go():
    assert torch.openreg.current_device() == 0
    torch.openreg.set_device(1)
    assert torch.openreg.current_device() == 1
    assert torch.accelerator.current_device_index() == 1
    assert torch.empty(2, device="openreg").device == torch.device("openreg:1")
    torch.openreg.set_device("openreg:0")
    assert torch.openreg.current_device() == 0
    torch.openreg.set_device(torch.device("openreg", 1))
    assert torch.openreg.current_device() == 1


def test_set_device_negative_is_a_noop():
    torch.openreg.set_device(1)
    torch.openreg.set_device(-1)
    assert torch.openreg.current_device() == 1


def test_device_context_switches_and_restores():
    with torch.openreg.device(1):
        assert torch.openreg.current_device() == 1
        x = torch.zeros(3, device="openreg")
        with torch.openreg.device("openreg:0"):
            assert torch.openreg.current_device() == 0
        assert torch.openreg.current_device() == 1
    assert torch.openreg.current_device() == 0
    assert x.device == torch.device("openreg:1")


def test_device_context_restores_after_exception():
    with pytest.raises(KeyError):
        with torch.openreg.device(1):
            raise KeyError("inside")
    assert torch.openreg.current_device() == 0


def test_device_context_with_none_or_negative_is_a_noop():
    torch.openreg.set_device(1)
    with torch.openreg.device(None):
        assert torch.openreg.current_device() == 1
    with torch.openreg.device(-1):
        assert torch.openreg.current_device() == 1
    assert torch.openreg.current_device() == 1


def test_device_of_uses_the_tensor_device():
    x = torch.ones(2, device="openreg:1")
    with torch.openreg.device_of(x):
        assert torch.openreg.current_device() == 1
    assert torch.openreg.current_device() == 0
    with torch.openreg.device_of(torch.ones(2)):  # a CPU tensor: no-op
        assert torch.openreg.current_device() == 0


def test_current_device_is_per_thread():
    torch.openreg.set_device(1)
    seen = []

    def worker():
        seen.append(torch.openreg.current_device())
        torch.openreg.set_device(1)
        torch.openreg.set_device(0)

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen == [0]
    assert torch.openreg.current_device() == 1


def test_device_properties():
    for i in range(torch.openreg.device_count()):
        props = torch.openreg.get_device_properties(i)
        assert props.name == torch.openreg.get_device_name(i)
        assert isinstance(props.name, str) and props.name
        assert props.total_memory > 0
        assert props.multi_processor_count >= 1
        assert props.copy_bandwidth >= 0
    assert torch.openreg.get_device_properties() == torch.openreg.get_device_properties(0)
    assert torch.openreg.get_device_properties("openreg:1") == torch.openreg.get_device_properties(1)
    assert "total_memory" in repr(torch.openreg.get_device_properties(0))


def test_synchronize_accepts_every_device_form():
    x = torch.ones(1000, device="openreg:1")
    x.fill_(3.0)
    torch.openreg.synchronize(1)
    torch.openreg.synchronize("openreg:1")
    torch.openreg.synchronize(torch.device("openreg:1"))
    torch.openreg.synchronize()
    torch.accelerator.synchronize(1)
    assert x.cpu().eq(3.0).all()


def test_generated_tensor_and_module_methods():
    x = torch.arange(4.0)
    y = x.openreg()
    assert y.is_openreg and not x.is_openreg
    assert y.device == torch.device("openreg:0")
    assert x.openreg(1).device == torch.device("openreg:1")
    module = torch.nn.Linear(2, 2).openreg(1)
    assert all(p.device == torch.device("openreg:1") for p in module.parameters())
    storage = y.untyped_storage()
    assert storage.is_openreg
    assert storage.device == torch.device("openreg:0")


def test_copies_between_host_and_devices_round_trip():
    src = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    on0 = src.to("openreg:0")
    on1 = on0.to("openreg:1")
    back = on1.cpu()
    assert on1.device == torch.device("openreg:1")
    assert torch.equal(back, src)
    # views are metadata-only and copy correctly
    assert torch.equal(on1.t().cpu(), src.t())
    assert on1[1, 2].item() == src[1, 2].item()


def test_amp_supported_dtypes():
    assert torch.openreg.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
