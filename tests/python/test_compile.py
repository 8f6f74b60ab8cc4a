"""torch.compile on openreg: the Dynamo device interface and compiled graphs."""

import copy
import subprocess
import sys

import pytest
import torch
import torch_openreg  # noqa: F401
from torch_openreg import _compile_cache


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


def test_compiled_call_returns_before_its_kernels_run():
    # Note [Compiled kernels are stream work items]: the compiled kernel is queued behind slow eager
    # work on the stream; the call returns while the stream is still busy, and the result is right.
    f = torch.compile(lambda a, b: (a * 2 + b).relu().sum(dim=1))
    a, b = torch.randn(32, 64, device="openreg"), torch.randn(32, 64, device="openreg")
    expected = f(a, b).cpu()
    big = torch.randn(1024, 1024, device="openreg")
    torch.openreg.synchronize()
    for _ in range(8):
        big = big @ big / 1024  # slow, queued on the current stream
    out = f(a, b)
    assert not torch.openreg.current_stream().query()  # the call did not wait for the stream
    torch.testing.assert_close(out.cpu(), expected)


def test_compiled_kernels_run_on_the_current_stream_lane(tmp_path):
    f = torch.compile(lambda a: (a.sin() * 3).cos())
    x = torch.randn(256, device="openreg")
    f(x)
    side = torch.openreg.Stream()
    side.wait_stream(torch.openreg.current_stream())
    path = tmp_path / "trace.json"
    with torch.openreg.trace(str(path)):
        with torch.openreg.stream(side):
            out = f(x)
        torch.openreg.current_stream().wait_stream(side)
        result = out.cpu()
    import json

    kernels = [e for e in json.loads(path.read_text())["traceEvents"]
               if e.get("ph") == "X" and e["name"].startswith("cpp_fused")]
    assert kernels and all(e["tid"] == side.stream_id for e in kernels), kernels
    torch.testing.assert_close(result, (x.cpu().sin() * 3).cos())


def test_inductor_conv_batchnorm_train_step():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 2))
    _check_inductor_train_step(model.to("openreg"), torch.randn(4, 3, 8, 8, device="openreg"))


def test_inductor_transformer_block_train_step():
    torch.manual_seed(0)
    block = torch.nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0, batch_first=True)
    _check_inductor_train_step(block.to("openreg"), torch.randn(2, 5, 16, device="openreg"))


def test_reduce_overhead_is_refused_with_a_clear_message():
    from torch._inductor import config

    f = torch.compile(lambda a: (a * 2).relu(), mode="reduce-overhead")
    # The refusal happens when Inductor generates the graph's code; an earlier run's cache entry (from a
    # version that did not refuse) must not stand in for it.
    with config.patch(fx_graph_cache=False), pytest.raises(Exception, match="reduce-overhead.*openreg"):
        f(torch.randn(16, device="openreg"))
    torch._dynamo.reset()
    g = torch.compile(lambda a: (a * 2).relu())  # the default mode still compiles afterwards
    x = torch.randn(16, device="openreg")
    torch.testing.assert_close(g(x).cpu(), (x.cpu() * 2).relu())


def test_inductor_fullgraph_standard_models_have_no_graph_break():
    # fullgraph=True raises on any graph break; forward and backward both compile.
    torch.manual_seed(0)
    models = [
        (torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)), (3, 8)),
        (torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU()), (2, 3, 6, 6)),
        (torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True), (2, 3, 8)),
    ]
    for model, shape in models:
        model = model.to("openreg")
        ref = copy.deepcopy(model)
        x = torch.randn(*shape, device="openreg")
        out = torch.compile(model, fullgraph=True)(x)
        out.sum().backward()
        ref(x).sum().backward()
        for p, rp in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad.cpu(), rp.grad.cpu(), rtol=1e-4, atol=1e-4)


def test_inductor_lstm_backward():
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(4, 8, batch_first=True).to("openreg")
    ref = copy.deepcopy(lstm)
    x = torch.randn(2, 3, 4, device="openreg")
    torch.compile(lstm)(x)[0].sum().backward()
    ref(x)[0].sum().backward()
    for p, rp in zip(lstm.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad.cpu(), rp.grad.cpu(), rtol=1e-4, atol=1e-4)


def test_compiled_optimizer_step_matches_eager():
    torch.manual_seed(0)
    params = [torch.randn(16, 8, device="openreg"), torch.randn(8, device="openreg")]
    ref_params = [p.clone() for p in params]
    grads = [torch.randn_like(p) for p in params]
    opt = torch.optim.Adam(params, lr=0.01)
    ref_opt = torch.optim.Adam(ref_params, lr=0.01)
    for p, rp, g in zip(params, ref_params, grads):
        p.grad, rp.grad = g.clone(), g.clone()

    @torch.compile
    def step():
        opt.step()

    # No synchronization between steps: Adam's step counters are CPU tensors that a CPU kernel of the
    # compiled graph increments while the openreg kernel reading them may still be queued (Note
    # [Compiled kernels that touch CPU tensors]).
    for _ in range(10):
        step()
        ref_opt.step()
    for p, rp in zip(params, ref_params):
        torch.testing.assert_close(p.cpu(), rp.cpu(), rtol=1e-5, atol=1e-5)


def test_compiled_dropout_is_reproducible_under_manual_seed():
    # Inductor's random kernels take their seeds from openreg's generator (a seed tensor drawn when the
    # compiled call is issued), so torch.manual_seed fixes them. As on CUDA and CPU, the bits differ
    # from eager dropout's: Inductor uses its own counter-based generator.
    f = torch.compile(lambda a: torch.nn.functional.dropout(a, 0.5, training=True))
    x = torch.ones(4096, device="openreg")
    torch.manual_seed(1)
    first = f(x).cpu()
    torch.manual_seed(1)
    again = f(x).cpu()
    torch.manual_seed(2)
    other = f(x).cpu()
    assert torch.equal(first, again)
    assert not torch.equal(first, other)
    assert set(first.unique().tolist()) == {0.0, 2.0}
    assert 0.4 < (first == 0).float().mean().item() < 0.6


def test_compiled_kernel_failure_is_reported_at_sync_with_its_name():
    # An out-of-bounds index fails inside the compiled kernel on a device thread: like an eager kernel
    # failure, it is reported at the next synchronization, naming the kernel, and the device goes on.
    f = torch.compile(lambda a, i: a[i] + 1)
    x = torch.randn(8, device="openreg")
    torch.testing.assert_close(f(x, torch.tensor([1, 2], device="openreg")).cpu(), x.cpu()[[1, 2]] + 1)
    f(x, torch.tensor([0, 100], device="openreg"))
    with pytest.raises(RuntimeError, match="cpp_fused.*index out of bounds"):
        torch.openreg.synchronize()
    torch.testing.assert_close(f(x, torch.tensor([3, 4], device="openreg")).cpu(), x.cpu()[[3, 4]] + 1)


_CACHE_PROBE = """
import torch, torch_openreg
from torch._dynamo.utils import counters
f = torch.compile(lambda a: (a.sin() * 2 + 1).relu())
x = torch.arange(16, dtype=torch.float32, device="openreg")
torch.testing.assert_close(f(x).cpu(), (x.cpu().sin() * 2 + 1).relu())
print(counters["inductor"]["fxgraph_cache_hit"], counters["inductor"]["fxgraph_cache_miss"])
"""


def test_compile_cache_is_reused_across_processes(tmp_path):
    import os

    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path), TORCHINDUCTOR_FX_GRAPH_CACHE="1")

    def run():
        out = subprocess.run([sys.executable, "-c", _CACHE_PROBE], capture_output=True, text=True, env=env,
                             timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        hit, miss = map(int, out.stdout.split()[-2:])
        return hit, miss

    assert run() == (0, 1)
    assert run() == (1, 0)  # the second process loads the graph (and its openreg kernels) from the cache


def test_another_build_of_openreg_does_not_reuse_the_compile_cache(tmp_path):
    # Note [openreg in torch.compile's cache keys]: a graph is compiled through openreg's kernels, so a
    # cache filled by one build of torch_openreg must not serve another (here: another fingerprint).
    import os

    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path), TORCHINDUCTOR_FX_GRAPH_CACHE="1",
               TORCH_COMPILE_CACHE_KEY_TAG="users-tag")
    other_build = "import torch_openreg._compile_cache as c; c.fingerprint = lambda: 'another-build'\n"

    def run(prelude=""):
        out = subprocess.run([sys.executable, "-c", prelude + _CACHE_PROBE + _TAG_PROBE], capture_output=True,
                             text=True, env=env, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        *_, hit, miss, tag = out.stdout.split()
        return int(hit), int(miss), tag

    hit, miss, tag = run()
    assert (hit, miss) == (0, 1)
    # the user's tag is kept, and this build's fingerprint is added to it
    assert tag.split("|") == ["users-tag", f"torch_openreg-{_compile_cache.fingerprint()}"]
    assert run()[:2] == (1, 0)  # the same build: a hit
    assert run(other_build)[:2] == (0, 1)  # another build: compiled again


_TAG_PROBE = """
import torch.compiler.config
print(torch.compiler.config.cache_key_tag)
"""


_TIMED_STEP = """
import json, math, os, warnings, torch
warnings.simplefilter("ignore")


def built():  # openreg's kernel libraries (their source has openreg's entry), not Inductor's ISA probe
    sources = [os.path.join(d, f) for d, _, files in os.walk(os.environ["TORCHINDUCTOR_CACHE_DIR"])
               for f in files if f.endswith(".cpp")]
    return sum(os.path.exists(p[:-4] + ".so") and "openreg_compiled" in open(p).read() for p in sources)


torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.LayerNorm(256),
                            torch.nn.Linear(256, 64)).to("openreg")
step = torch.compile(lambda x: model(x).square().mean())
x = torch.randn(32, 64, device="openreg")
step(x).backward()  # compiles the forward and the backward: every fused kernel touches more than 4 KiB
torch.openreg.synchronize()
start = torch.openreg.timing.now()
step(x).backward()
torch.openreg.synchronize()
step_ns = round((torch.openreg.timing.now() - start) * 1e9)
step_built = built()
small = torch.compile(lambda a: a.sin() + 1)(torch.ones(16, device="openreg"))  # 128 bytes, from values
stale = torch.full((1,), 5.0, device="openreg")
del stale  # its block, which held 5.0, is free
total = torch.compile(lambda a: a.sum() * 2)(torch.zeros(1 << 20, device="openreg"))  # 4 MiB: timed only
print(json.dumps({"step_ns": step_ns, "step_built": step_built, "built": built(), "small": small[:2].tolist(),
                  "total": total.item(), "want": math.sin(1) + 1}))
"""


def test_timing_only_execution_builds_only_the_compiled_kernels_it_runs(tmp_path):
    """Note [Compiled kernels in timing-only execution]: Inductor builds an openreg kernel only when it is
    about to run (at most 4 KiB, on values the program gave); the step's kernels are timed without being
    built, its modelled time is the one the built kernels give, to the nanosecond, and what an unbuilt
    kernel writes reads back as zeros, not as the bytes its reused block held."""
    import json
    import os

    def run(mode: str):
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / mode), OPENREG_DEVICE_PROFILE="h100-sxm",
                   OPENREG_EXECUTE=mode)
        out = subprocess.run([sys.executable, "-c", _TIMED_STEP], capture_output=True, text=True, env=env,
                             timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    timed, computed = run("timing"), run("compute")
    assert computed["step_built"] > 0 and timed["step_built"] == 0
    assert timed["step_ns"] == computed["step_ns"] > 0
    assert timed["built"] == 1  # the small kernel on values, built when it ran
    for out in (timed, computed):
        assert out["small"] == pytest.approx([out["want"]] * 2)
        assert out["total"] == 0.0
