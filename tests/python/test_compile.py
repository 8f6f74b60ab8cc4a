"""torch.compile on openreg: the Dynamo device interface and compiled graphs."""

import copy
import subprocess
import sys

import torch

import torch_openreg  # noqa: F401


def test_import_does_not_load_dynamo():
    # The interface registers lazily: importing torch_openreg must not pay for torch._dynamo.
    code = "import sys, torch, torch_openreg; print('torch._dynamo' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "False"


def test_device_interface_registered():
    from torch._dynamo.device_interface import get_interface_for_device

    iface = get_interface_for_device("openreg")
    assert get_interface_for_device(torch.device("openreg")) is iface
    assert get_interface_for_device("openreg:0") is iface
    assert iface.device_count() == torch.openreg.device_count()
    assert iface.is_available()
    assert iface.current_device() == torch.openreg.current_device()
    props = iface.get_device_properties(0)
    assert props.total_memory == torch.openreg.get_device_properties(0).total_memory
    assert iface.Worker.get_device_properties(0).name == props.name
    assert not iface.is_triton_capable()


def test_device_interface_streams_and_events():
    from torch._dynamo.device_interface import get_interface_for_device

    iface = get_interface_for_device("openreg")
    side = torch.openreg.Stream()
    assert isinstance(side, iface.Stream)
    with iface.stream(side):
        assert iface.current_stream() == side
        assert iface.get_raw_stream(side.device_index) == side.stream_id
    assert iface.current_stream() == torch.openreg.default_stream()
    event = iface.Event()
    x = torch.ones(1024, device="openreg")
    event.record(iface.current_stream())
    iface.synchronize()
    assert event.query()
    assert (x.cpu() == 1).all()


def test_device_interface_exchange_device():
    from torch._dynamo.device_interface import get_interface_for_device

    iface = get_interface_for_device("openreg")
    prev = iface.exchange_device(1)
    try:
        assert iface.current_device() == 1
    finally:
        iface.exchange_device(prev)
    assert iface.current_device() == prev


def test_aot_eager_fullgraph_matches_eager():
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to("openreg")
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    x = torch.randn(5, 8, device="openreg")
    torch.testing.assert_close(compiled(x).cpu(), model(x).cpu())


def _check_inductor_train_step(model, x):
    ref = copy.deepcopy(model)
    compiled = torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for _ in range(2):
        out, ref_out = compiled(x), ref(x)
        torch.testing.assert_close(out.cpu(), ref_out.cpu(), rtol=1e-4, atol=1e-4)
        out.sum().backward()
        ref_out.sum().backward()
        for p, rp in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad.cpu(), rp.grad.cpu(), rtol=1e-4, atol=1e-4)
        opt.step()
        ref_opt.step()
        opt.zero_grad()
        ref_opt.zero_grad()


def test_inductor_mlp_forward_backward_step():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).to("openreg")
    _check_inductor_train_step(model, torch.randn(5, 8, device="openreg"))


def test_inductor_kernels_follow_side_stream():
    torch.manual_seed(0)
    f = torch.compile(lambda a: (a * 2).relu() + 1)
    x = torch.randn(64, device="openreg")
    f(x)
    side = torch.openreg.Stream()
    side.wait_stream(torch.openreg.current_stream())
    with torch.openreg.stream(side):
        y = torch.randn(4096, device="openreg") * 3  # queued on the side stream before the kernel
        out = f(y)
    torch.openreg.current_stream().wait_stream(side)
    torch.testing.assert_close(out.cpu(), (y.cpu() * 2).relu() + 1)


def test_inductor_lstm_forward():
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(4, 8, batch_first=True).to("openreg")
    x = torch.randn(2, 3, 4, device="openreg")
    out, _ = torch.compile(lstm)(x)
    torch.testing.assert_close(out.cpu(), lstm(x)[0].cpu(), rtol=1e-4, atol=1e-4)


def test_inductor_dynamic_shapes():
    f = torch.compile(lambda a: torch.tanh(a) * a.sum(), dynamic=True)
    for n in (3, 7, 11):
        x = torch.randn(n, device="openreg")
        torch.testing.assert_close(f(x).cpu(), torch.tanh(x.cpu()) * x.cpu().sum(), rtol=1e-4, atol=1e-4)
