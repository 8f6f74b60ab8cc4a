"""Serialization: torch.save / torch.load of openreg tensors and modules, with and without map_location."""

import io

import torch


def _round_trip(obj, **load_kwargs):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, **load_kwargs)


def test_tensors_come_back_on_their_devices():
    a = torch.arange(6, dtype=torch.float32).reshape(2, 3).to("openreg:0")
    b = torch.arange(4, dtype=torch.int64).to("openreg:1")
    loaded = _round_trip({"a": a, "b": b})
    assert loaded["a"].device == torch.device("openreg:0")
    assert loaded["b"].device == torch.device("openreg:1")
    assert torch.equal(loaded["a"].cpu(), a.cpu())
    assert torch.equal(loaded["b"].cpu(), b.cpu())
    assert loaded["b"].dtype == torch.int64


def test_views_share_storage_after_loading():
    base = torch.arange(10, dtype=torch.float32).to("openreg:1")
    loaded = _round_trip([base, base[2:5]])
    assert loaded[1].device == torch.device("openreg:1")
    assert loaded[1].untyped_storage().data_ptr() == loaded[0].untyped_storage().data_ptr()
    assert torch.equal(loaded[1].cpu(), torch.arange(2, 5, dtype=torch.float32))


def test_map_location_cpu():
    a = torch.arange(5, dtype=torch.float32).to("openreg:1")
    loaded = _round_trip(a, map_location="cpu")
    assert loaded.device == torch.device("cpu")
    assert torch.equal(loaded, torch.arange(5, dtype=torch.float32))


def test_map_location_to_another_device():
    a = torch.arange(5, dtype=torch.float32).to("openreg:0")
    loaded = _round_trip(a, map_location="openreg:1")
    assert loaded.device == torch.device("openreg:1")
    assert torch.equal(loaded.cpu(), torch.arange(5, dtype=torch.float32))
    loaded = _round_trip(torch.arange(3.0), map_location=torch.device("openreg:1"))
    assert loaded.device == torch.device("openreg:1")


def test_module_state_dict_round_trip():
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)).to("openreg")
    state = module.state_dict()
    assert all(t.device == torch.device("openreg:0") for t in state.values())

    loaded = _round_trip(state, map_location="openreg:1")
    assert all(t.device == torch.device("openreg:1") for t in loaded.values())
    other = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)).to("openreg:1")
    other.load_state_dict(loaded)
    for key, value in other.state_dict().items():
        assert value.device == torch.device("openreg:1")
        assert torch.equal(value.cpu(), state[key].cpu()), key

    on_cpu = _round_trip(state, map_location="cpu")
    cpu_module = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    cpu_module.load_state_dict(on_cpu)
    assert torch.equal(cpu_module[0].weight, state["0.weight"].cpu())


def test_save_to_file_and_load_with_weights_only(tmp_path):
    path = tmp_path / "tensor.pt"
    torch.save(torch.full((3,), 2.5).to("openreg:1"), path)
    loaded = torch.load(path, weights_only=True)
    assert loaded.device == torch.device("openreg:1")
    assert torch.equal(loaded.cpu(), torch.full((3,), 2.5))
