"""torch.cuda names that device-generic code reaches for exist on torch.openreg with torch.cuda's
signatures and meanings (simulated values as documented in docs/cuda-parity.md)."""

import inspect
import re
import uuid

import pytest
import torch

CUDA_PROPERTY_FIELDS = [
    "name", "major", "minor", "total_memory", "multi_processor_count", "is_integrated", "is_multi_gpu_board",
    "max_threads_per_multi_processor", "gcnArchName", "warp_size", "uuid", "L2_cache_size", "clock_rate",
    "memory_clock_rate", "memory_bus_width", "shared_memory_per_block", "shared_memory_per_multiprocessor",
]


def test_device_properties_have_torch_cudas_fields():
    props = torch.openreg.get_device_properties(0)
    for field in CUDA_PROPERTY_FIELDS:
        assert hasattr(props, field), field
    assert (props.major, props.minor) == (1, 0)
    assert props.warp_size == 1 and props.is_integrated == 0
    assert props.total_memory > 0 and props.multi_processor_count >= 1
    assert "major=1" in repr(props) and "uuid=" in repr(props)


def test_uuids_are_stable_and_distinct_per_device():
    uuids = [torch.openreg.get_device_properties(i).uuid for i in range(torch.openreg.device_count())]
    assert len(set(uuids)) == len(uuids)
    for u in uuids:
        uuid.UUID(u)  # well-formed
    assert uuids == [torch.openreg.get_device_properties(i).uuid for i in range(torch.openreg.device_count())]


def test_get_device_capability():
    assert torch.openreg.get_device_capability() == (1, 0)
    assert torch.openreg.get_device_capability("openreg:1") == (1, 0)
    sig = inspect.signature(torch.openreg.get_device_capability)
    assert list(sig.parameters) == list(inspect.signature(torch.cuda.get_device_capability).parameters)


def test_can_device_access_peer_is_true_between_distinct_devices_only():
    assert torch.openreg.can_device_access_peer(0, 1)
    assert torch.openreg.can_device_access_peer("openreg:1", torch.device("openreg:0"))
    assert not torch.openreg.can_device_access_peer(0, 0)
    with pytest.raises(torch.AcceleratorError):
        torch.openreg.can_device_access_peer(0, -1)


def test_default_generators_are_the_devices_default_generators():
    torch.ones(1, device="openreg")
    gens = torch.openreg.default_generators
    assert isinstance(gens, tuple) and len(gens) == torch.openreg.device_count()
    for i, gen in enumerate(gens):
        assert gen.device == torch.device("openreg", i)
    torch.openreg.manual_seed_all(123)
    gens[1].manual_seed(7)
    assert torch.openreg.initial_seed() == 123
    with torch.openreg.device(1):
        assert torch.openreg.initial_seed() == 7


def test_default_generators_is_empty_before_the_runtime_starts(run_python, check_ok):
    check_ok(run_python("""
        import torch
        assert torch.openreg.default_generators == ()
        assert not torch.openreg.is_initialized()
        torch.ones(1, device="openreg")
        assert len(torch.openreg.default_generators) == 2
    """))


def test_tf32_arch_list_and_gencode_flags():
    assert torch.openreg.is_tf32_supported() is False
    arch = torch.openreg.get_arch_list()
    assert arch == ["sim_10"]
    assert torch.openreg.get_gencode_flags() == ""


def test_utilization_exists_with_torch_cudas_signature():
    assert list(inspect.signature(torch.openreg.utilization).parameters) == ["device"]


def test_every_item_8_name_exists():
    for name in ["get_device_capability", "can_device_access_peer", "priority_range", "default_generators",
                 "is_tf32_supported", "utilization", "get_arch_list", "get_gencode_flags", "ExternalStream"]:
        assert hasattr(torch.openreg, name), name
        assert name in torch.openreg.__all__, name


def test_missing_attributes_name_torch_openreg():
    with pytest.raises(AttributeError, match=re.escape("module 'torch.openreg' has no attribute 'no_such_name'")):
        torch.openreg.no_such_name  # noqa: B018


def test_device_modules_import_without_a_cycle(run_python, check_ok):
    # Each module imports on its own, before the package has imported its siblings.
    check_ok(run_python("""
        import ast, pathlib, torch_openreg.openreg as pkg
        here = pathlib.Path(pkg.__file__).parent
        def deps(name):
            tree = ast.parse((here / f"{name}.py").read_text())
            return {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 1}
        assert "_device" not in deps("_device_index"), deps("_device_index")
        assert "_device_index" in deps("_device")
    """))


def test_utilization_is_the_busy_share_of_the_time_since_the_previous_sample(monkeypatch):
    # The simulator's busy-time counter and the clock are replaced, so the arithmetic is checked exactly.
    from torch_openreg import _C
    from torch_openreg.openreg import _utilization

    clock = {"now": 0}
    busy = {0: 0, 1: 0}

    class FakeTime:
        @staticmethod
        def monotonic_ns():
            return clock["now"]

    torch.ones(1, device="openreg")
    monkeypatch.setattr(_utilization, "time", FakeTime)
    monkeypatch.setattr(_C, "_device_busy_time_ns", lambda i: busy[i])
    monkeypatch.setattr(_utilization, "_previous", {})
    monkeypatch.setattr(_utilization, "_runtime_start_ns", [0])
    clock["now"], busy[0] = 1000, 250
    assert torch.openreg.utilization() == 25  # since the runtime started
    clock["now"], busy[0] = 2000, 1250
    assert torch.openreg.utilization(0) == 100  # since the previous sample of device 0
    busy[1] = 500
    assert torch.openreg.utilization("openreg:1") == 25  # device 1 has its own previous sample
    with pytest.raises(torch.AcceleratorError):
        torch.openreg.utilization(2)


def test_device_busy_time_counts_work_of_that_device_only():
    # utilization() reads this counter; it grows with the device's own work and no other device's.
    from torch_openreg import _C

    x = torch.randn(512, 512, device="openreg:0")
    torch.openreg.synchronize()
    before = [_C._device_busy_time_ns(0), _C._device_busy_time_ns(1)]
    for _ in range(4):
        x = x @ x / 512
    torch.openreg.synchronize(0)
    after = [_C._device_busy_time_ns(0), _C._device_busy_time_ns(1)]
    assert after[0] > before[0]
    assert after[1] == before[1]
    assert 0 <= torch.openreg.utilization(0) <= 100


def test_legacy_storage_types_exist_as_on_cuda():
    """Tensor.storage_type() looks its class up by name on the device module: it returned None for
    openreg tensors. Every <Dtype>Storage torch.cuda has, torch.openreg has, with the same meaning."""
    import warnings

    names = [n for n in dir(torch.cuda) if n.endswith("Storage") and not n.startswith("_")]
    assert names  # torch.cuda's: FloatStorage, HalfStorage, ...
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TypedStorage is deprecated, on CUDA too
        for name in names:
            cls = getattr(torch.openreg, name)
            assert cls.__name__ == name and cls.dtype == getattr(torch.cuda, name)._dtype
        x = torch.ones(3, device="openreg")
        assert x.storage_type() is torch.openreg.FloatStorage
        assert x.to(torch.bfloat16).storage_type() is torch.openreg.BFloat16Storage
        assert isinstance(x.storage(), torch.openreg.FloatStorage)
        assert not isinstance(x.storage(), torch.openreg.HalfStorage)
        assert not isinstance(torch.ones(3).storage(), torch.openreg.FloatStorage)  # a CPU storage
        s = torch.openreg.FloatStorage(4)
        assert s.device == torch.device("openreg", torch.openreg.current_device()) and len(s) == 4
