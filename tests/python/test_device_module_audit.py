"""torch's own Python code finds on torch.openreg what it finds on torch.cuda (issue 30, item 1).

docs/device-module-audit.md lists every place in the installed torch that looks up a device module
(``getattr(torch, device_type)``, ``torch.get_device_module``, ``_get_device_module``, the FSDP and
DeviceMesh handles, the Dynamo device interface) with the attributes it reads and openreg's answer.
One test per area runs torch's real code path on openreg and checks CUDA's behaviour; the last two
tests read the doc's tables, so a row that stops being true (an attribute renamed, a "missing" one
added, a torch file gone) fails here instead of rotting in the doc.

Activation checkpointing (``torch.utils.checkpoint``: ``_initialized``, ``device``, ``get_rng_state``,
``set_rng_state``) is exercised end to end in test_checkpoint.py and not repeated here.
"""

import io
import os
import re
import warnings

import pytest
import torch

_DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "device-module-audit.md")
_TORCH_DIR = os.path.dirname(torch.__file__)


# -- lookup: torch.get_device_module, torch.accelerator, torch._utils ------------------------------------


def test_device_module_lookups_return_torch_openreg():
    from torch._utils import _get_all_device_indices, _get_available_device_type, _get_device_module

    assert torch.get_device_module("openreg") is torch.openreg
    assert torch.get_device_module(torch.device("openreg", 1)) is torch.openreg
    # No argument: the current accelerator's module, as torch.cuda is on a CUDA machine.
    assert torch.get_device_module() is torch.openreg
    assert _get_device_module("openreg") is torch.openreg
    # DataParallel's device discovery (_get_device_attr) finds openreg and all of its devices.
    assert _get_available_device_type() == "openreg"
    assert _get_all_device_indices() == list(range(torch.openreg.device_count()))
    assert torch.accelerator.device_count() == torch.openreg.device_count()


# -- random: torch.manual_seed, torch.random.fork_rng -----------------------------------------------------


def test_fork_rng_restores_every_openreg_device_and_manual_seed_seeds_them_all():
    n = torch.openreg.device_count()
    torch.manual_seed(7)  # seeds every device, as torch.cuda.manual_seed_all
    seeded = [torch.openreg.get_rng_state(i) for i in range(n)]
    torch.openreg.manual_seed_all(7)
    assert all(torch.equal(seeded[i], torch.openreg.get_rng_state(i)) for i in range(n))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fork_rng warns once when it forks more than one device
        with torch.random.fork_rng(device_type="openreg"):
            for i in range(n):
                torch.randn(8, device=f"openreg:{i}")
            assert not torch.equal(seeded[1], torch.openreg.get_rng_state(1))
    assert all(torch.equal(seeded[i], torch.openreg.get_rng_state(i)) for i in range(n))

    # DTensor's RNG tracker reads and writes the state as CUDA's Philox state: 8 bytes of seed, then 8 of
    # offset, and an offset it writes must select the numbers drawn next.
    def draw_at(offset):
        torch.openreg.manual_seed(3)
        state = torch.openreg.get_rng_state()
        assert state.numel() == 16 and state[:8].view(torch.int64).item() == 3
        state[8:] = torch.tensor([offset], dtype=torch.int64).view(torch.uint8)
        torch.openreg.set_rng_state(state)
        return torch.rand(4, device="openreg").cpu()

    assert torch.equal(draw_at(4), draw_at(4)) and not torch.equal(draw_at(0), draw_at(4))
    torch.manual_seed(7)

    # devices=[1]: only device 1 is saved and restored; draws on device 0 stay drawn.
    with torch.random.fork_rng(devices=[1], device_type="openreg"):
        torch.randn(8, device="openreg:0")
        torch.randn(8, device="openreg:1")
    assert torch.equal(seeded[1], torch.openreg.get_rng_state(1))
    assert not torch.equal(seeded[0], torch.openreg.get_rng_state(0))


# -- amp: torch.autocast reads get_amp_supported_dtype ---------------------------------------------------


def test_autocast_takes_cuda_dtypes_and_disables_itself_for_others():
    from torch._functorch._aot_autograd.graph_capture_wrappers import disable_autocast

    a = torch.randn(4, 4, device="openreg")
    assert torch.get_autocast_dtype("openreg") == torch.float16  # CUDA's default autocast dtype
    with torch.autocast("openreg"):
        assert (a @ a).dtype == torch.float16
    with torch.autocast("openreg", dtype=torch.bfloat16):
        assert (a @ a).dtype == torch.bfloat16
        # AOTAutograd turns autocast off on every device torch names and that has a module.
        with disable_autocast():
            assert not torch.is_autocast_enabled("openreg")
        assert torch.is_autocast_enabled("openreg")
    with pytest.warns(UserWarning, match="not supported. Disabling autocast"):
        with torch.autocast("openreg", dtype=torch.float64):
            assert (a @ a).dtype == torch.float32


# -- data: DataLoader pinning, save_on_cpu ----------------------------------------------------------------


def test_dataloader_pins_for_openreg_and_save_on_cpu_pins():
    from torch.utils.data import DataLoader, TensorDataset

    data = TensorDataset(torch.randn(8, 2))
    batch = next(iter(DataLoader(data, batch_size=4, pin_memory=True)))[0]
    assert batch.is_pinned() and batch.device.type == "cpu"
    with pytest.warns(UserWarning, match="pin_memory_device is deprecated"):
        batch = next(iter(DataLoader(data, batch_size=4, pin_memory=True, pin_memory_device="openreg")))[0]
    assert batch.is_pinned()

    x = torch.randn(3, device="openreg", requires_grad=True)
    hooks = torch.autograd.graph.save_on_cpu(pin_memory=True, device_type="openreg")
    device, packed = hooks.pack_hook(x.detach())
    assert packed.is_pinned() and device == x.device
    assert torch.equal(hooks.unpack_hook((device, packed)).cpu(), x.detach().cpu())
    with hooks:
        y = (x * x).sum()
    y.backward()
    assert torch.equal(x.grad.cpu(), 2 * x.detach().cpu())


# -- distributed: FSDP and DeviceMesh handles, DCP's loader, torchrun's device count ----------------------


def test_fsdp_and_device_mesh_handles_forward_to_torch_openreg():
    from torch.distributed.device_mesh import _get_device_handle, _mesh_resources
    from torch.distributed.fsdp._common_utils import _FSDPDeviceHandle
    from torch.distributed.run import determine_local_world_size

    handle = _FSDPDeviceHandle.from_device(torch.device("openreg", 0))
    assert handle.device_count() == torch.openreg.device_count()
    assert handle.current_stream() == torch.openreg.current_stream()
    side = handle.Stream()
    assert isinstance(side, torch.openreg.Stream)
    side.wait_stream(handle.current_stream())
    with handle.stream(side):
        assert torch.openreg.current_stream() == side
    event = handle.Event()
    event.record(side)
    event.synchronize()
    # A name torch.openreg lacks is the AttributeError FSDP reports for custom backends.
    with pytest.raises(AttributeError, match="torch.openreg.no_such_function"):
        handle.no_such_function  # noqa: B018

    assert _get_device_handle("openreg") is torch.openreg
    assert _mesh_resources.num_devices_per_host("openreg") == torch.openreg.device_count()
    assert determine_local_world_size("openreg") == torch.openreg.device_count()


def test_ddp_compression_hook_and_fsdp_decompression_run_on_openreg():
    import torch.distributed as dist
    from torch.distributed.algorithms._comm_hooks.default_hooks import LowPrecisionState, _decompress
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import fp16_compress_hook

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        plain = torch.nn.Linear(4, 3).to("openreg")
        ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 3).to("openreg"))
        ddp.module.load_state_dict(plain.state_dict())
        ddp.register_comm_hook(None, fp16_compress_hook)
        x = torch.randn(5, 4, device="openreg")
        plain(x).square().sum().backward()
        ddp(x).square().sum().backward()
        # One rank: the hook's all-reduce returns the gradient rounded through float16.
        want = plain.weight.grad.half().float().cpu()
        assert torch.equal(ddp.module.weight.grad.cpu(), want)

        # FSDP's low-precision hooks cast a gradient back on the device's current stream (_decompress).
        state = LowPrecisionState(dist.group.WORLD, parameter_type=torch.float32)
        grad = torch.randn(6, device="openreg").half()
        want = grad.float().cpu()
        _decompress(state, grad)
        assert grad.dtype == torch.float32 and grad.device.type == "openreg"
        assert torch.equal(grad.cpu(), want)
    finally:
        dist.destroy_process_group()


def test_distributed_checkpoint_loader_copies_openreg_tensors_to_the_cpu_on_a_side_stream():
    from torch.distributed.checkpoint.filesystem import _OverlappingCpuLoader

    tensors = [torch.randn(n, device="openreg") for n in (4, 64, 16)]
    loader = _OverlappingCpuLoader(lambda t: t, inflight_threshhold=100)
    assert loader.device_module is torch.openreg
    for t in tensors:
        loader.add(t.numel() * t.element_size(), t)
    copies = list(loader.values())
    assert len(copies) == len(tensors)
    for cpu_copy, original in copies:
        assert cpu_copy.device.type == "cpu"
        assert torch.equal(cpu_copy, original.cpu())


# -- dynamo / inductor: the device interface, torch.get_device_module under compile -----------------------


def test_dynamo_device_interface_answers_like_torch_openreg():
    from torch._dynamo.device_interface import get_interface_for_device

    di = get_interface_for_device("openreg")
    assert get_interface_for_device(torch.device("openreg", 1)) is di
    assert di.device_count() == torch.openreg.device_count() and di.is_available()
    torch.openreg.set_device(1)
    assert di.current_device() == 1
    assert di.current_stream() == torch.openreg.current_stream(1)
    assert di.get_raw_stream(1) == torch.openreg.current_stream(1).stream_id
    torch.openreg.set_device(0)
    major, minor = torch.openreg.get_device_capability()
    assert di.get_compute_capability() == major * 10 + minor  # CudaInterface's encoding
    assert di.is_bf16_supported() == torch.openreg.is_bf16_supported()
    assert di.is_dtype_supported(torch.bfloat16) == torch.openreg.is_bf16_supported()
    assert di.get_device_properties(0) == torch.openreg.get_device_properties(0)
    assert di.Worker.get_device_properties(1) == torch.openreg.get_device_properties(1)
    assert di.memory_allocated() == torch.openreg.memory_allocated()
    assert isinstance(di.Stream(), torch.openreg.Stream)
    di.synchronize()


def test_compiled_code_looks_up_the_device_module_as_eager_code_does():
    # Dynamo evaluates torch.get_device_module at trace time (handle_get_device_module): the lookup is
    # no graph break.
    def fn(x):
        return x + 1 if torch.get_device_module("openreg") is torch.openreg else x - 1

    compiled = torch.compile(fn, backend="eager", fullgraph=True)
    x = torch.zeros(2, device="openreg")
    assert torch.equal(compiled(x).cpu(), torch.ones(2))


def test_compiled_code_folds_is_available_as_it_folds_cudas():
    # Dynamo folds torch.cuda.is_available() to a constant; torch.openreg.is_available() broke the graph
    # at its C++ binding (fullgraph=True raised Unsupported) until openreg marked it constant.
    def fn(x):
        return x + 1 if torch.openreg.is_available() and torch.accelerator.is_available() else x - 1

    compiled = torch.compile(fn, backend="eager", fullgraph=True)
    assert torch.equal(compiled(torch.zeros(2, device="openreg")).cpu(), torch.ones(2))


# -- attention: reads no device module; SDPA's backend choice on openreg ---------------------------------


def test_sdpa_kernel_context_runs_on_openreg_like_the_cpu():
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    q, k, v = (torch.randn(1, 2, 5, 8) for _ in range(3))
    with sdpa_kernel(SDPBackend.MATH):
        got = scaled_dot_product_attention(q.to("openreg"), k.to("openreg"), v.to("openreg"), is_causal=True)
        want = scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(got.cpu(), want)


# -- other: serialization, legacy storages, fake tensors, the autograd profiler ----------------------------


def test_serialization_storages_fake_tensors_and_profiler_use_torch_openreg():
    from torch._subclasses.fake_tensor import FakeTensorMode

    buf = io.BytesIO()
    torch.save(torch.arange(3.0, device="openreg:1"), buf)
    buf.seek(0)
    assert torch.load(buf).device == torch.device("openreg", 1)
    buf.seek(0)
    with pytest.raises(RuntimeError, match="device_count"):  # CUDA's message for a device it lacks
        torch.load(buf, map_location=f"openreg:{torch.openreg.device_count()}")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TypedStorage is deprecated
        storage = torch.ones(2, device="openreg").storage()
        assert storage._get_legacy_storage_class() is torch.openreg.FloatStorage

    torch.openreg.set_device(1)
    with FakeTensorMode():
        assert torch.empty(2, device="openreg").device == torch.device("openreg", 1)
    torch.openreg.set_device(0)

    with torch.autograd.profiler.profile(use_device="openreg"):
        torch.ones(2, device="openreg").add_(1)  # exit synchronizes through torch.openreg.synchronize


# -- the doc's tables -------------------------------------------------------------------------------------


def _rows():
    """(torch file, function, [attributes], answer) for every table row of the doc."""
    rows = []
    with open(_DOC, encoding="utf-8") as f:
        for line in f:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not line.startswith("|") or len(cells) < 3:
                continue
            where = re.match(r"`([\w/.]+\.py):\d+` `([\w.<>]+)`", cells[0])
            if where is None:
                continue  # header or separator
            attributes = re.findall(r"`([\w.]+)`", cells[1])
            rows.append((where.group(1), where.group(2), attributes, cells[2].split()[0].strip("*:,")))
    return rows


def _resolve(name):
    obj = torch.openreg
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def test_doc_rows_name_real_torch_code_and_their_attributes_are_what_they_say():
    rows = _rows()
    assert len(rows) >= 30, "the audit's tables were not found"
    for path, function, attributes, answer in rows:
        with open(os.path.join(_TORCH_DIR, path), encoding="utf-8") as f:
            text = f.read()
        assert all(part in text for part in function.split(".")), f"{path} has no {function}"
        assert answer in ("same", "differs", "missing", "unused"), (path, answer)
        for name in attributes:
            if answer == "same":
                _resolve(name)  # AttributeError names the row's attribute
            elif answer == "missing":
                with pytest.raises(AttributeError):
                    _resolve(name)
