"""``init_process_group(device_id=...)`` on openreg in every form c10d takes for CUDA.

With CUDA, ``device_id`` (a ``torch.device`` or, for the accelerator, an int) is accepted with
``"gloo"``, with no backend (the device's default backend), with ``"cpu:gloo,cuda:nccl"`` strings and
with the device's own backend; it binds the device to the group (eager connection; ``new_group`` and
``split_group`` inherit it), and the group serves the device's tensors. 2 processes on loopback
(tests/support/spawn.py); each form re-initialises the default group on a fresh port.
"""

import torch
import torch.distributed as dist
from support import spawn  # tests/support (pytest's pythonpath)

WORLD = spawn.WORLD

# (backend, device_id as given: "device" = torch.device("openreg", rank), "int" = rank, expected backend)
FORMS = [
    ("gloo", "device", "gloo"),
    ("gloo", "int", "gloo"),
    (None, "device", "openreg"),
    (None, "int", "openreg"),
    ("openreg", "device", "openreg"),
    ("cpu:gloo,openreg:openreg", "device", "cpu:gloo,openreg:openreg"),
    ("cpu:gloo,openreg:gloo", "int", "cpu:gloo,openreg:gloo"),
]


def _collectives(group, dev, rank):
    """Collectives on openreg tensors (and one on CPU tensors) in ``group`` give the known results."""
    n = group.size()
    ranks = dist.get_process_group_ranks(group)
    t = torch.arange(4, dtype=torch.float32, device=dev) + rank
    dist.all_reduce(t, group=group)
    expected = sum(torch.arange(4, dtype=torch.float32) + r for r in ranks)
    torch.testing.assert_close(t.cpu(), expected, rtol=0, atol=0)
    b = torch.full((3,), float(rank), device=dev)
    dist.broadcast(b, group_src=n - 1, group=group)
    torch.testing.assert_close(b.cpu(), torch.full((3,), float(ranks[-1])), rtol=0, atol=0)
    out = torch.empty(2 * n, device=dev)
    dist.all_gather_into_tensor(out, torch.full((2,), rank + 0.5, device=dev), group=group)
    torch.testing.assert_close(out.cpu(), torch.tensor([r + 0.5 for r in ranks for _ in range(2)]), rtol=0, atol=0)
    rs = torch.empty(2, device=dev)
    dist.reduce_scatter_tensor(rs, torch.arange(2.0 * n, device=dev), group=group)
    me = dist.get_group_rank(group, rank)
    torch.testing.assert_close(rs.cpu(), torch.arange(2.0 * me, 2.0 * me + 2) * n, rtol=0, atol=0)
    if n == 2:  # point to point, both directions at once
        got = torch.empty(3, device=dev)
        works = [dist.isend(torch.full((3,), rank + 7.0, device=dev), group_dst=1 - me, group=group),
                 dist.irecv(got, group_src=1 - me, group=group)]
        for w in works:
            w.wait()
        torch.testing.assert_close(got.cpu(), torch.full((3,), ranks[1 - me] + 7.0), rtol=0, atol=0)
    w = dist.all_reduce(torch.ones(2, device=dev), group=group, async_op=True)
    w.wait()
    c = torch.ones(2)
    dist.all_reduce(c, group=group)
    torch.testing.assert_close(c, torch.full((2,), float(n)), rtol=0, atol=0)
    dist.barrier(group=group)


def _forms(rank, ports):
    dist.destroy_process_group()  # spawn.run's group; each form makes its own
    dev = torch.device("openreg", rank % torch.openreg.device_count())
    torch.openreg.set_device(dev)
    for (backend, given, expected_backend), port in zip(FORMS, ports):
        form = f"backend={backend!r}, device_id={given}"
        device_id = dev if given == "device" else dev.index
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                                device_id=device_id)
        try:
            world = dist.group.WORLD
            assert world.bound_device_id == dev, form
            assert dist.get_backend() == expected_backend, form
            _collectives(world, dev, rank)
            # new_group inherits the bound device (c10d passes the default group's on), or takes it
            sub = dist.new_group([0, 1])
            assert sub.bound_device_id == dev, form
            _collectives(sub, dev, rank)
            explicit = dist.new_group([0, 1], device_id=dev)
            assert explicit.bound_device_id == dev, form
            _collectives(explicit, dev, rank)
            if expected_backend in ("openreg", "cpu:gloo,openreg:openreg"):  # openreg's group
                # split_group splits the group bound to the device (as with NCCL); a rank alone, too.
                # (On c10d's gloo groups c10d deep-copies gloo's options, which cannot be copied: a
                # TypeError, with CUDA as here.)
                both = dist.split_group(split_ranks=[[0, 1]])
                assert both is not None and both.bound_device_id == dev, form
                _collectives(both, dev, rank)
                alone = dist.split_group(split_ranks=[[0], [1]])
                assert alone is not None and alone.size() == 1, form
                _collectives(alone, dev, rank)
        except BaseException as e:
            raise AssertionError(f"{form}: {e!r}") from e
        finally:
            dist.destroy_process_group()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{ports[-1]}", rank=rank, world_size=WORLD)


def test_device_id_forms_bind_and_serve_openreg():
    ports = [spawn.free_port() for _ in range(len(FORMS) + 1)]
    spawn.run(_forms, ports, timeout_s=180)


def _gloo_ddp(rank):
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    dev = dist.group.WORLD.bound_device_id
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    ref = nn.Linear(4, 2)
    ref.load_state_dict(model.state_dict())
    ddp = DDP(model.to(dev))
    x = torch.arange(16, dtype=torch.float32).reshape(4, 4) / 10
    ddp(x[rank * 2:(rank + 1) * 2].to(dev)).sum().backward()
    (ref(x).sum() / WORLD).backward()
    for p, q in zip(ddp.module.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad)


def test_gloo_bound_to_openreg_trains_with_ddp():
    """``init_process_group("gloo", device_id=openreg:N)`` carries DDP's openreg gradients, as gloo
    carries cuda ones: the averaged gradients are the whole batch's."""
    spawn.run(_gloo_ddp, backend="gloo", bind_device=True)

