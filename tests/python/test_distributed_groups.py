"""torch.distributed on openreg: split_group, argument errors at the call, DDP's all-reduce overlapping backward.

2 processes on loopback (tests/support/spawn.py), each bound to its device (``init_process_group(device_id=)``).
"""

import pytest
import torch
import torch.distributed as dist
from support import spawn  # tests/support (pytest's pythonpath)

WORLD = spawn.WORLD


def _dev(rank):
    return torch.device("openreg", rank % torch.openreg.device_count())


def _same(dev_tensor, cpu_tensor):
    torch.testing.assert_close(dev_tensor.cpu(), cpu_tensor, rtol=0, atol=0)


def _collectives_vs_gloo(group, ref, dev, rank):
    """all_reduce, broadcast, all_gather_into_tensor, reduce_scatter_tensor on ``group`` (openreg tensors)
    equal the same on ``ref`` (a gloo group of the same ranks, CPU tensors)."""
    n = group.size()
    assert ref.size() == n
    x = torch.arange(6, dtype=torch.float32) * (rank + 2) - 1
    d, c = x.to(dev), x.clone()
    dist.all_reduce(d, op=dist.ReduceOp.MAX, group=group)
    dist.all_reduce(c, op=dist.ReduceOp.MAX, group=ref)
    _same(d, c)
    d, c = torch.full((3,), float(rank), device=dev), torch.full((3,), float(rank))
    dist.broadcast(d, group_src=n - 1, group=group)
    dist.broadcast(c, group_src=n - 1, group=ref)
    _same(d, c)
    out, cout = torch.empty(2 * n, device=dev), torch.empty(2 * n)
    dist.all_gather_into_tensor(out, torch.full((2,), rank + 0.5, device=dev), group=group)
    dist.all_gather_into_tensor(cout, torch.full((2,), rank + 0.5), group=ref)
    _same(out, cout)
    big = torch.arange(2.0 * n) * (rank + 1)
    out, cout = torch.empty(2, device=dev), torch.empty(2)
    dist.reduce_scatter_tensor(out, big.to(dev), group=group)
    dist.reduce_scatter_tensor(cout, big.clone(), group=ref)
    _same(out, cout)


def _split(rank):
    dev = _dev(rank)
    torch.openreg.set_device(dev)
    world = dist.group.WORLD
    assert world.bound_device_id == dev  # init_process_group(device_id=) bound it
    # The reference: gloo on CPU tensors. With a bound device c10d asks every new group for a backend
    # on it; gloo serves openreg devices (tests/python/test_distributed_device_id.py), as it serves cuda.
    ref = dist.new_group(backend="gloo")
    both_ones = torch.ones(1, device=dev)
    dist.all_reduce(both_ones, group=ref)
    _same(both_ones, torch.full((1,), float(WORLD)))

    # A split with both ranks: a new openreg group, its collectives as gloo's
    both = dist.split_group(split_ranks=[[0, 1]])
    assert both is not None and both.size() == WORLD and both.rank() == rank
    assert both.getBackendName() == "openreg" and both.bound_device_id == dev
    assert dist.get_process_group_ranks(both) == [0, 1]
    _collectives_vs_gloo(both, ref, dev, rank)
    # Every rank alone: a group of one, in which an all_reduce is the identity
    solo = dist.split_group(split_ranks=[[0], [1]])
    assert solo is not None and solo.size() == 1 and solo.rank() == 0
    assert dist.get_process_group_ranks(solo) == [rank]
    x = torch.arange(3.0, device=dev) + rank
    dist.all_reduce(x, group=solo)
    _same(x, torch.arange(3.0) + rank)
    # Ranks outside every split get no group (and do not wait for the others)
    only0 = dist.split_group(split_ranks=[[0]])
    assert (only0 is None) == (rank == 1)
    if only0 is not None:
        y = torch.ones(2, device=dev)
        dist.all_reduce(y, group=only0)
        _same(y, torch.ones(2))
    # A split of a split (the parent's options are deep-copied again), its ranks reversed in the list
    again = dist.split_group(parent_pg=both, split_ranks=[[1, 0]])
    assert again is not None and again.size() == WORLD
    _collectives_vs_gloo(again, ref, dev, rank)
    # Asynchronous collectives on a split group keep NCCL's stream semantics
    z = torch.ones(1024, device=dev) * (rank + 1)
    work = dist.all_reduce(z, group=both, async_op=True)
    work.wait()
    assert torch.all(z * 1 == 3).item()
    # Bad options are a clear error
    with pytest.raises(TypeError, match="pg_options must be gloo's options"):
        dist.split_group(split_ranks=[[0, 1]], pg_options=object())
    # A device mesh over a bound group is made by split_group (as with NCCL): DTensor on it
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("openreg", (1, WORLD), mesh_dim_names=("dp", "tp"))
    tp = mesh.get_group("tp")
    assert tp.getBackendName() == "openreg" and tp.size() == WORLD
    torch.manual_seed(0)
    a, b = torch.randn(8, 6), torch.randn(6, 4)
    da = distribute_tensor(a.to(dev), mesh["tp"], [Shard(0)])
    db = distribute_tensor(b.to(dev), mesh["tp"], [Replicate()])
    torch.testing.assert_close((da @ db).full_tensor().cpu(), a @ b, rtol=1e-5, atol=1e-5)
    dist.barrier()


def test_split_group_on_openreg_matches_gloo():
    spawn.run(_split, bind_device=True)


def _bad_arguments(rank):
    """gloo's argument errors raise at the call, on the calling thread, before anything is queued."""
    dev = _dev(rank)
    torch.openreg.set_device(dev)
    x = torch.ones(3, device=dev)
    with pytest.raises(ValueError, match="output tensor size must be equal to world_size times input tensor size"):
        dist.all_gather_into_tensor(torch.empty(5, device=dev), x)
    with pytest.raises(TypeError, match="output tensor must have the same type as input tensor"):
        dist.all_gather_into_tensor(torch.empty(6, device=dev, dtype=torch.int64), x)
    with pytest.raises(ValueError, match="input tensor must be the same size as output size times world size"):
        dist.reduce_scatter_tensor(torch.empty(2, device=dev), torch.ones(3, device=dev))
    with pytest.raises(TypeError, match="same type"):
        dist.reduce_scatter_tensor(torch.empty(3, device=dev), torch.ones(6, device=dev, dtype=torch.int32))
    with pytest.raises(RuntimeError, match="invalid root rank: 5"):
        dist.broadcast(x, src=5)
    with pytest.raises(RuntimeError, match="invalid root rank: 7"):
        dist.reduce(x, dst=7)
    with pytest.raises(RuntimeError, match="invalid root rank: 3"):
        dist.gather(x, [torch.empty(3, device=dev) for _ in range(WORLD)] if rank == 3 else None, dst=3)
    with pytest.raises(RuntimeError, match="invalid peer rank: 3"):
        dist.send(x, dst=3)
    with pytest.raises(RuntimeError, match="invalid peer rank: 4"):
        dist.recv(x, src=4)
    with pytest.raises(RuntimeError, match="do not add up"):
        dist.all_to_all_single(torch.empty(4, device=dev), torch.ones(4, device=dev), [1, 1], [2, 1])
    with pytest.raises(RuntimeError, match="does not divide equally"):
        dist.all_to_all_single(torch.empty(3, device=dev), torch.ones(3, device=dev))
    with pytest.raises(RuntimeError, match="invalid output tensor size at index 1"):
        dist.all_gather([torch.empty(3, device=dev), torch.empty(4, device=dev)], x)
    with pytest.raises(RuntimeError, match="the output list has 1 tensors, expected 2"):
        dist.all_gather([torch.empty(3, device=dev)], x)
    with pytest.raises(RuntimeError, match="the input list has 3 tensors, expected 2"):
        dist.reduce_scatter(torch.empty(3, device=dev), [torch.ones(3, device=dev)] * 3)
    with pytest.raises(RuntimeError, match="Cannot use ReduceOp.BAND with non-integral dtype"):
        dist.all_reduce(x, op=dist.ReduceOp.BAND)
    if rank == 0:
        with pytest.raises(RuntimeError, match="the scatter list has 1 tensors, expected 2"):
            dist.scatter(x, [torch.ones(3, device=dev)], src=0)
    # Nothing was queued: the device and the group are in step, and the next collective is right.
    y = torch.ones(3, device=dev) * (rank + 1)
    dist.all_reduce(y)
    torch.openreg.synchronize(dev)
    _same(y, torch.full((3,), 3.0))


def test_argument_errors_raise_at_the_call():
    spawn.run(_bad_arguments, bind_device=True)


def _ddp_overlap(rank):
    """DDP with several buckets: the device timeline shows gradient all-reduces (communication lane)
    running beside backward kernels (compute stream), from the order of the recorded spans."""
    from support import ddp_overlap
    from torch.nn.parallel import DistributedDataParallel as DDP

    dev = _dev(rank)
    torch.openreg.set_device(dev)
    inner = ddp_overlap.deep_mlp()
    model = DDP(inner.to(dev), bucket_cap_mb=ddp_overlap.bucket_cap_mb_for(inner))
    g = torch.Generator().manual_seed(rank)
    x, y = torch.randn(512, 256, generator=g).to(dev), torch.randn(512, 1, generator=g).to(dev)
    ddp_overlap.traced_backward(model, x, y, dev)  # DDP rebuilds its buckets after the first step
    records = ddp_overlap.traced_backward(model, x, y, dev)
    o = ddp_overlap.overlap(records, dev.index)
    # The first bucket's all-reduce is issued, and starts on the communication thread, as soon as the
    # last layers' gradients are computed; the other layers' backward kernels are still queued behind
    # them on the compute stream, so they run while it does (nothing orders them after it).
    assert o.allreduces >= 3, o  # several buckets, one all-reduce each
    assert o.first_allreduce_before_backward_ends, o
    assert o.overlapping_allreduces >= 1, o
    return o


def test_ddp_allreduce_overlaps_backward_in_the_device_timeline():
    spawn.run(_ddp_overlap)
