"""torch.distributed on openreg: the ``openreg`` backend over gloo, 2 processes on loopback."""

import os
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
from support import spawn  # tests/support (pytest's pythonpath)

WORLD = spawn.WORLD
TIMEOUT_S = 60


def _spawn(fn, backend=None):
    spawn.run(fn, backend=backend, timeout_s=TIMEOUT_S)


def _dev(rank):
    return torch.device("openreg", rank % torch.openreg.device_count())


# --- collectives ------------------------------------------------------------------------------


def _same(dev_tensor, cpu_tensor):
    torch.testing.assert_close(dev_tensor.cpu(), cpu_tensor, rtol=0, atol=0)


def _collectives(rank):
    """Every collective on openreg tensors against the same collective on CPU tensors in a gloo group."""
    import torch.distributed._functional_collectives as funcol

    dev = _dev(rank)
    torch.openreg.set_device(dev)
    ref = dist.new_group(backend="gloo")  # the reference: gloo on CPU tensors
    other = 1 - rank

    def both(make):
        """(openreg tensor, CPU tensor) with the same values."""
        t = make()
        return t.to(dev), t.clone()

    # all_reduce with every reduction op (AVG / PREMUL_SUM: gloo has none; reference is SUM, scaled)
    for op in ("sum", "avg", "min", "max", "product", "premul_sum"):
        x, c = both(lambda: torch.arange(6, dtype=torch.float32) * (rank + 2) - 3)
        if op == "avg":
            dist.all_reduce(x, op=dist.ReduceOp.AVG)
            dist.all_reduce(c, group=ref)
            c /= WORLD
        elif op == "premul_sum":
            dist.all_reduce(x, op=dist._make_nccl_premul_sum(0.5))
            dist.all_reduce(c, group=ref)
            c *= 0.5
        else:
            red = getattr(dist.ReduceOp, op.upper())
            dist.all_reduce(x, op=red)
            dist.all_reduce(c, op=red, group=ref)
        torch.testing.assert_close(x.cpu(), c, msg=op)
    # integer AVG: SUM // world, as the CPU reference
    x = torch.tensor([3, 8], device=dev) + rank
    dist.all_reduce(x, op=dist.ReduceOp.AVG)
    assert x.cpu().tolist() == [(3 + 4) // 2, (8 + 9) // 2]
    # broadcast
    x, c = both(lambda: torch.full((4,), float(rank)))
    dist.broadcast(x, src=1)
    dist.broadcast(c, src=1, group=ref)
    _same(x, c)
    # reduce (root only defined)
    x, c = both(lambda: torch.arange(3.0) + rank)
    dist.reduce(x, dst=0, op=dist.ReduceOp.MAX)
    dist.reduce(c, dst=0, op=dist.ReduceOp.MAX, group=ref)
    if rank == 0:
        _same(x, c)
    # all_gather / all_gather_into_tensor
    x, c = both(lambda: torch.full((3,), float(rank + 1)))
    outs, couts = [torch.empty(3, device=dev) for _ in range(WORLD)], [torch.empty(3) for _ in range(WORLD)]
    dist.all_gather(outs, x)
    dist.all_gather(couts, c, group=ref)
    for o, co in zip(outs, couts):
        _same(o, co)
    out, cout = torch.empty(WORLD * 3, device=dev), torch.empty(WORLD * 3)
    dist.all_gather_into_tensor(out, x)
    dist.all_gather_into_tensor(cout, c, group=ref)
    _same(out, cout)
    # reduce_scatter (list) and reduce_scatter_tensor, with SUM and AVG
    ins = [torch.arange(2.0) + 10 * i + rank for i in range(WORLD)]
    out, cout = torch.empty(2, device=dev), torch.empty(2)
    dist.reduce_scatter(out, [i.to(dev) for i in ins])
    dist.reduce_scatter(cout, [i.clone() for i in ins], group=ref)
    _same(out, cout)
    big, cbig = both(lambda: torch.arange(4.0) * (rank + 1))
    out, cout = torch.empty(2, device=dev), torch.empty(2)
    dist.reduce_scatter_tensor(out, big, op=dist.ReduceOp.AVG)
    dist.reduce_scatter_tensor(cout, cbig, group=ref)
    torch.testing.assert_close(out.cpu(), cout / WORLD)
    # all_to_all and all_to_all_single (even and uneven splits)
    ins = [torch.arange(2.0) + 10.0 * rank + i for i in range(WORLD)]
    outs = [torch.empty(2, device=dev) for _ in range(WORLD)]
    couts = [torch.empty(2) for _ in range(WORLD)]
    dist.all_to_all(outs, [i.to(dev) for i in ins])
    dist.all_to_all(couts, ins, group=ref)
    for o, co in zip(outs, couts):
        _same(o, co)
    x, c = both(lambda: torch.arange(4.0) + 10 * rank)
    out, cout = torch.empty(4, device=dev), torch.empty(4)
    dist.all_to_all_single(out, x)
    dist.all_to_all_single(cout, c, group=ref)
    _same(out, cout)
    in_splits, out_splits = ([1, 3], [1, 2]) if rank == 0 else ([2, 2], [3, 2])
    x, c = both(lambda: torch.arange(4.0) + 10 * rank)
    out, cout = torch.empty(sum(out_splits), device=dev), torch.empty(sum(out_splits))
    dist.all_to_all_single(out, x, out_splits, in_splits)
    dist.all_to_all_single(cout, c, out_splits, in_splits, group=ref)
    _same(out, cout)
    # gather / scatter
    x, c = both(lambda: torch.full((2,), float(rank)))
    outs = [torch.empty(2, device=dev) for _ in range(WORLD)] if rank == 1 else None
    couts = [torch.empty(2) for _ in range(WORLD)] if rank == 1 else None
    dist.gather(x, outs, dst=1)
    dist.gather(c, couts, dst=1, group=ref)
    if rank == 1:
        for o, co in zip(outs, couts):
            _same(o, co)
    ins = [torch.full((2,), 5.0 + i) for i in range(WORLD)] if rank == 0 else None
    out, cout = torch.empty(2, device=dev), torch.empty(2)
    dist.scatter(out, [i.to(dev) for i in ins] if ins else None, src=0)
    dist.scatter(cout, ins, src=0, group=ref)
    _same(out, cout)
    # send / recv / isend / irecv / recv from any source / batch_isend_irecv
    if rank == 0:
        dist.send(torch.tensor([42.0], device=dev), dst=1)
        dist.isend(torch.tensor([43.0], device=dev), dst=1).wait()
        dist.send(torch.tensor([44.0], device=dev), dst=1)
    else:
        r = torch.empty(1, device=dev)
        dist.recv(r, src=0)
        assert r.item() == 42.0
        dist.irecv(r, src=0).wait()
        assert r.item() == 43.0
        assert dist.recv(r) == 0  # any source: the sender's rank
        assert r.item() == 44.0
    send, recv = torch.full((3,), float(rank), device=dev), torch.empty(3, device=dev)
    works = dist.batch_isend_irecv([dist.P2POp(dist.isend, send, other), dist.P2POp(dist.irecv, recv, other)])
    for w in works:
        w.wait()
    assert recv.cpu().tolist() == [float(other)] * 3
    # coalesced variants: all_reduce_coalesced, and c10d's coalescing manager (as FSDP2 uses it)
    a, b = torch.ones(2, device=dev) * (rank + 1), torch.ones(3, device=dev)
    dist.all_reduce_coalesced([a, b])
    assert a.cpu().tolist() == [3.0] * 2 and b.cpu().tolist() == [2.0] * 3
    a, b = torch.ones(2, device=dev), torch.ones(3, device=dev) * 2
    with dist._coalescing_manager(device=dev, async_ops=True) as cm:
        dist.all_reduce(a)
        dist.all_reduce(b)
    cm.wait()
    assert a.cpu().tolist() == [2.0] * 2 and b.cpu().tolist() == [4.0] * 3
    ins = [torch.full((2,), float(rank)), torch.full((1,), 5.0 + rank)]
    outs = [torch.empty(2 * WORLD, device=dev), torch.empty(WORLD, device=dev)]
    with dist._coalescing_manager(device=dev):
        for o, i in zip(outs, ins):
            dist.all_gather_into_tensor(o, i.to(dev))
    assert outs[0].cpu().tolist() == [0.0, 0.0, 1.0, 1.0] and outs[1].cpu().tolist() == [5.0, 6.0]
    outs = [torch.empty(1, device=dev), torch.empty(2, device=dev)]
    ins = [torch.arange(2.0, device=dev) + rank, torch.arange(4.0, device=dev)]
    with dist._coalescing_manager(device=dev):
        for o, i in zip(outs, ins):
            dist.reduce_scatter_tensor(o, i)
    assert outs[0].cpu().tolist() == [float(2 * rank + 1)]
    assert outs[1].cpu().tolist() == [float(2 * (2 * rank)), float(2 * (2 * rank + 1))]
    # subgroups
    sub = dist.new_group([0, 1])
    x = torch.ones(2, device=dev) * (rank + 1)
    dist.all_reduce(x, group=sub)
    assert x.cpu().tolist() == [3.0, 3.0]
    solo = [dist.new_group([r]) for r in range(WORLD)][rank]  # every rank creates every group
    x = torch.ones(2, device=dev)
    dist.all_reduce(x, group=solo)
    assert x.cpu().tolist() == [1.0, 1.0]
    # functional collectives (DTensor's path)
    x = torch.arange(4.0, device=dev) + rank
    torch.testing.assert_close(funcol.all_reduce(x, "sum", dist.group.WORLD).cpu(), torch.arange(4.0) * 2 + 1)
    g = funcol.all_gather_tensor(torch.full((2,), float(rank), device=dev), 0, dist.group.WORLD)
    assert g.cpu().tolist() == [0.0, 0.0, 1.0, 1.0]
    rs = funcol.reduce_scatter_tensor(torch.arange(4.0, device=dev), "sum", 0, dist.group.WORLD)
    assert rs.cpu().tolist() == [float(2 * (2 * rank)), float(2 * (2 * rank + 1))]
    a2a = funcol.all_to_all_single(torch.arange(2.0, device=dev) + 10 * rank, None, None, dist.group.WORLD)
    assert a2a.cpu().tolist() == [float(rank), 10.0 + rank]
    # a contiguous view at an offset is reduced in place, its neighbours untouched
    m = torch.zeros(4, 4, device=dev)
    row = m[1]
    row.fill_(1.0)
    dist.all_reduce(row)
    assert m.cpu()[1].tolist() == [2.0] * 4 and m.cpu()[2].tolist() == [0.0] * 4
    # a non-contiguous one is refused, as NCCL does
    with pytest.raises(ValueError, match="contiguous"):
        dist.all_reduce(m[:, 1])
    # CPU tensors through the default group go to gloo; barrier blocks the host until all arrive
    c = torch.ones(2) * (rank + 1)
    dist.all_reduce(c)
    assert c.tolist() == [3.0, 3.0]
    dist.barrier()
    # monitored_barrier is gloo's only (NCCL has none either): on a gloo group it works
    with pytest.raises(ValueError, match="GLOO"):
        dist.monitored_barrier()
    dist.monitored_barrier(group=ref, timeout=timedelta(seconds=20))


def _stream_semantics(rank):
    """NCCL's stream semantics, made deterministic by gating rank 1 on rank 0's checks (store keys)."""
    dev = _dev(rank)
    torch.openreg.set_device(dev)
    store = dist.distributed_c10d._get_default_store()
    stream = torch.openreg.current_stream()

    # 1. Ordered after the kernels queued before it: a long chain of them.
    t = torch.zeros(256, 256, device=dev)
    for _ in range(50):
        t = t + 1
    dist.all_reduce(t)
    assert torch.all(t == 100).item()

    # 2. async_op: wait() makes the current stream wait, the host does not. Rank 1 joins only after
    #    rank 0 has seen its stream still waiting, so the collective cannot have finished yet.
    x = torch.ones(1024, device=dev) * (rank + 1)
    if rank == 0:
        work = dist.all_reduce(x, async_op=True)
        assert work.wait()  # returns while the peer has not even issued its collective
        y = x * 10  # queued behind the collective on the current stream
        assert not work.is_completed()
        assert not stream.query()  # the stream is parked on the collective
        # The communication thread holds no compute thread: another stream's work runs meanwhile.
        side = torch.openreg.Stream()
        with torch.openreg.stream(side):
            z = torch.ones(64, 64, device=dev) @ torch.ones(64, 64, device=dev)
            assert z[0, 0].item() == 64.0  # synchronizes the side stream only
        # In-flight tensors stay alive: drop the only reference to an input and allocate the same
        # size on the same stream; had its block been reused, the collective would overwrite it.
        pending = dist.all_reduce(torch.full((4096,), 1.0, device=dev), async_op=True)
        fresh = torch.full((4096,), 7.0, device=dev)
        # With its Work dropped too, a tensor in flight leaves the allocated count at the free (CUDA's
        # record_stream frees): the peak does not depend on when the communication thread ends the
        # collective. Its block is still not reused before then.
        allocated = torch.openreg.memory_allocated(dev)
        inflight = torch.full((1024,), 1.0, device=dev)
        inflight_ptr = inflight.data_ptr()
        dist.all_reduce(inflight, async_op=True)
        del inflight
        assert torch.openreg.memory_allocated(dev) == allocated
        again = torch.full((1024,), 5.0, device=dev)
        assert again.data_ptr() != inflight_ptr
        fut = pending.get_future()
        store.set("rank0_checked", "1")
        assert torch.all(y == 30).item()
        assert work.is_completed() and work.is_success()
        value = fut.wait()
        assert value[0].device == dev and torch.all(value[0] == 2.0).item()
        assert torch.all(fresh == 7.0).item() and torch.all(again == 5.0).item()
    else:
        store.wait(["rank0_checked"], timedelta(seconds=30))
        dist.all_reduce(x)
        dist.all_reduce(torch.full((4096,), 1.0, device=dev))
        dist.all_reduce(torch.full((1024,), 1.0, device=dev))
        assert torch.all(x == 3).item()

    # 3. Work.synchronize() is NCCL's: stream-side too; get_future() of a sync collective.
    x = torch.ones(3, device=dev)
    work = dist.all_reduce(x, async_op=True)
    work.synchronize()
    assert x.cpu().tolist() == [2.0] * 3
    fut = dist.all_reduce(torch.ones(3, device=dev), async_op=True).get_future()
    assert fut.then(lambda f: f.value()[0] * 2).wait().cpu().tolist() == [4.0] * 3

    # 4. A collective issued from a non-current stream follows that stream.
    side = torch.openreg.Stream()
    with torch.openreg.stream(side):
        s = torch.zeros(8, device=dev)
        for _ in range(20):
            s = s + 1
        dist.all_reduce(s)
        r = s * 1
    side.synchronize()
    assert torch.all(r == 40).item()

    # 5. The device timeline shows collectives on a lane of their own, apart from the compute streams.
    with torch.openreg.trace() as tr:
        x = torch.ones(1024, device=dev) * 2
        dist.all_reduce(x)
        y = x + 1
    comm = [rec for rec in tr.records if rec.name == "collective:allreduce"]
    assert len(comm) == 1 and comm[0].device == dev.index
    compute_lanes = {rec.stream for rec in tr.records if rec.kind == "kernel"}
    assert compute_lanes and comm[0].stream not in compute_lanes
    assert torch.all(y == 5).item()


def _wrong_device(rank):
    dev = _dev(rank)
    torch.openreg.set_device(dev)
    with pytest.raises(ValueError, match="not supported"):
        dist.all_reduce(torch.ones(2, device="meta"))
    if torch.openreg.device_count() > 1:
        outs = [torch.empty(1, device="openreg:0"), torch.empty(1, device="openreg:1")]
        with pytest.raises(ValueError, match="different devices"):
            dist.all_gather(outs, torch.ones(1, device="openreg:0"))
    dist.barrier()


def _default_backend_suite(rank):
    _collectives(rank)
    _stream_semantics(rank)
    _wrong_device(rank)
    _dtensor_matmul(rank)


def test_collectives_stream_semantics_errors_and_dtensor():
    _spawn(_default_backend_suite)


def _explicit_backend(rank):
    dev = _dev(rank)
    cpu = torch.ones(3)
    dist.all_reduce(cpu)
    t = torch.ones(3, device=dev)
    dist.all_reduce(t)
    assert cpu.tolist() == [2.0] * 3 and t.cpu().tolist() == [2.0] * 3
    assert dist.get_backend() is not None
    _pipeline(rank)


def test_explicit_backend_string_and_pipeline():
    _spawn(_explicit_backend, backend="cpu:gloo,openreg:openreg")


# --- DDP ---------------------------------------------------------------------------------------


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def _data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(16, 8, generator=g), torch.randn(16, 1, generator=g)


class _WithUnused(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = _model()
        self.unused = torch.nn.Linear(8, 1)  # never in the graph: find_unused_parameters must cope

    def forward(self, x):
        return self.body(x)


def _ddp_run(rank, steps=3, **ddp_kwargs):
    """DDP over the two halves of the batch vs one process on the whole batch: parameters equal."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    dev = _dev(rank)
    x, y = _data()
    ref = _model()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    hook = ddp_kwargs.pop("comm_hook", None)
    accumulate = ddp_kwargs.pop("no_sync", False)
    unused = ddp_kwargs.get("find_unused_parameters", False)
    inner = _WithUnused() if unused else _model()
    model = DDP(inner.to(dev), **ddp_kwargs)
    if hook is not None:
        model.register_comm_hook(dist.group.WORLD, hook)
    body = model.module.body if unused else model.module
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    half = x.shape[0] // WORLD
    xs, ys = x[rank * half:(rank + 1) * half].to(dev), y[rank * half:(rank + 1) * half].to(dev)
    for _ in range(steps):
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(ref(x), y).backward()
        ref_opt.step()
        opt.zero_grad()
        if accumulate:
            # Half of the local batch without sync, the other half with: the same average gradient.
            q = half // 2
            with model.no_sync():
                (torch.nn.functional.mse_loss(model(xs[:q]), ys[:q]) / 2).backward()
            (torch.nn.functional.mse_loss(model(xs[q:]), ys[q:]) / 2).backward()
        else:
            torch.nn.functional.mse_loss(model(xs), ys).backward()
        opt.step()
    for p, q in zip(body.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6)


def _ddp(rank):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    torch.openreg.set_device(_dev(rank))
    _ddp_run(rank)
    _ddp_run(rank, gradient_as_bucket_view=True, bucket_cap_mb=0.0001)  # several buckets
    _ddp_run(rank, comm_hook=default_hooks.allreduce_hook)  # get_future() path
    _ddp_run(rank, no_sync=True)
    _ddp_run(rank, find_unused_parameters=True)


def test_ddp_matches_single_process():
    _spawn(_ddp)


def _ddp_sparse_embedding(rank, device_type):
    """An nn.Embedding(sparse=True) trained with DDP and SGD; the weights after three steps."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    dev = _dev(rank) if device_type == "openreg" else torch.device("cpu")
    if device_type == "openreg":
        torch.openreg.set_device(dev)
    torch.manual_seed(0)
    emb = torch.nn.Embedding(10, 4, sparse=True).to(dev)
    model = DDP(emb)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    for _ in range(3):
        idx = torch.randint(0, 10, (3, 5), generator=g).to(dev)
        opt.zero_grad()
        model(idx).square().sum().backward()
        assert emb.weight.grad.is_sparse and emb.weight.grad.device == dev
        opt.step()
    # A direct all_reduce of a sparse tensor sums the ranks' tensors.
    s = torch.sparse_coo_tensor(torch.tensor([[rank, 2]]), torch.tensor([1.0, 2.0]), (3,)).to(dev)
    dist.all_reduce(s)
    assert s.is_sparse and s.to_dense().cpu().tolist() == [1.0, 1.0, 4.0]
    return emb.weight.detach().cpu().tolist()


def test_ddp_trains_sparse_gradients_as_gloo_on_cpu():
    """DDP's all_reduce of sparse gradients refused openreg tensors ("Tensors must be contiguous"); it
    runs gloo's sparse all_reduce on host copies now."""
    expected = spawn.run(_ddp_sparse_embedding, "cpu", backend="gloo", timeout_s=TIMEOUT_S)
    got = spawn.run(_ddp_sparse_embedding, "openreg", timeout_s=TIMEOUT_S)
    assert expected[0] == expected[1]
    for g, e in zip(got, expected):
        torch.testing.assert_close(torch.tensor(g), torch.tensor(e))


# --- errors ------------------------------------------------------------------------------------


def _mismatched(rank):
    dev = _dev(rank)
    torch.openreg.set_device(dev)
    store = dist.distributed_c10d._get_default_store()
    pg = dist.new_group([0, 1], timeout=timedelta(seconds=2))
    dead = dist.new_group([0, 1], timeout=timedelta(seconds=5))
    # rank 1 never joins: rank 0's collective ends in gloo's timeout error, not a hang
    if rank == 0:
        t = torch.ones(4, device=dev)
        dist.all_reduce(t, group=pg)  # returns at once: the stream waits on it, the host does not
        # The failure surfaces on the stream that waited, like a failed kernel, naming the collective.
        with pytest.raises(RuntimeError, match="(?i)allreduce.*timed out"):
            torch.openreg.synchronize(dev)
        # The device keeps working after the failure has been reported.
        assert (torch.ones(2, device=dev) + 1).cpu().tolist() == [2.0, 2.0]
        store.set("rank0_timed_out", "1")
        # rank 1 is now dead: a collective with it fails (closed connection or timeout), naming itself
        store.wait(["rank1_exiting"], timedelta(seconds=30))
        time.sleep(0.5)  # let rank 1's process end (either error is accepted; none may hang)
        t = torch.ones(4, device=dev)
        dist.broadcast(t, src=1, group=dead)
        with pytest.raises(RuntimeError, match="(?i)openreg distributed broadcast on openreg"):
            torch.openreg.synchronize(dev)
    else:
        # alive but absent, so rank 0 sees gloo's timeout (not a closed connection)
        store.wait(["rank0_timed_out"], timedelta(seconds=30))
        store.set("rank1_exiting", "1")
        os._exit(0)  # dies without destroying its groups


def test_absent_or_dead_peer_fails_the_collective_by_name():
    _spawn(_mismatched)


def _set_timeout(rank):
    dev = _dev(rank)
    torch.openreg.set_device(dev)
    store = dist.distributed_c10d._get_default_store()
    pg = dist.new_group([0, 1], timeout=timedelta(seconds=120))
    # torch 2.13 has the operation only as ProcessGroup.set_timeout; torch_openreg adds the function
    # torchtitan calls (Note [torch.distributed.set_timeout on torch 2.13]), which lowers this group's
    # timeout for what follows.
    dist.set_timeout(timedelta(seconds=2), group=pg)
    with pytest.raises(TypeError, match="timedelta"):
        dist.set_timeout(2.0, group=pg)
    if rank == 0:
        t = torch.ones(4, device=dev)
        start = time.monotonic()
        dist.all_reduce(t, group=pg)  # rank 1 never joins: 2 s, not the group's 120 s
        with pytest.raises(RuntimeError, match="(?i)allreduce.*timed out"):
            torch.openreg.synchronize(dev)
        assert time.monotonic() - start < 30
        store.set("rank0_timed_out", "1")
    else:
        store.wait(["rank0_timed_out"], timedelta(seconds=60))
        os._exit(0)  # its half of the group is abandoned


def test_set_timeout_lowers_a_groups_timeout_for_what_follows():
    assert dist.set_timeout.__module__ == "torch_openreg._distributed._torch_compat"  # torch 2.13 lacks it
    _spawn(_set_timeout)


# --- DTensor / FSDP2 ---------------------------------------------------------------------------


def _dtensor_matmul(rank):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    torch.openreg.set_device(_dev(rank))
    mesh = init_device_mesh("openreg", (WORLD,))
    torch.manual_seed(0)
    a, b = torch.randn(8, 6), torch.randn(6, 4)
    da = distribute_tensor(a.to(_dev(rank)), mesh, [Shard(0)])
    db = distribute_tensor(b.to(_dev(rank)), mesh, [Replicate()])
    out = (da @ db).full_tensor()
    torch.testing.assert_close(out.cpu(), a @ b, rtol=1e-5, atol=1e-5)





def _fsdp2(rank):
    from torch.distributed.fsdp import fully_shard

    dev = _dev(rank)
    torch.openreg.set_device(dev)
    x, y = _data()
    ref = _model()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    model = _model().to(dev)
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    half = x.shape[0] // WORLD
    xs, ys = x[rank * half:(rank + 1) * half].to(dev), y[rank * half:(rank + 1) * half].to(dev)
    for _ in range(3):
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(ref(x), y).backward()
        ref_opt.step()
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(xs), ys).backward()
        opt.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.full_tensor().cpu(), q.detach(), rtol=1e-5, atol=1e-6)


def test_fsdp2_matches_unsharded():
    _spawn(_fsdp2)


def _pipeline(rank):
    dev = _dev(rank)
    torch.openreg.set_device(dev)
    torch.manual_seed(0)
    stage0, stage1 = torch.nn.Linear(4, 8), torch.nn.Linear(8, 2)
    x = torch.randn(3, 4)
    expect = stage1(stage0(x)).detach()
    if rank == 0:
        act = stage0.to(dev)(x.to(dev))
        dist.send(act.detach(), dst=1)
    else:
        act = torch.empty(3, 8, device=dev)
        req = dist.irecv(act, src=0)
        req.wait()
        out = stage1.to(dev)(act)
        torch.testing.assert_close(out.detach().cpu(), expect, rtol=1e-5, atol=1e-6)





# --- a recv's deferred span -------------------------------------------------------------------


def test_a_recv_span_that_failed_on_the_completing_thread_fails_its_waiter_too():
    """The waiter and the completing thread both resolve a recv's span; whichever comes second must
    raise what the first met. A waiter that found the completing thread resolving used to return as if
    the recv had succeeded (test_symmetric's ring that waits before it sends exited 0 under load)."""
    import threading

    from torch_openreg._distributed._comm_queue import _Job

    job = _Job("recv", None, [], None, None)
    started, release = threading.Event(), threading.Event()

    def resolve():
        started.set()
        release.wait()
        raise RuntimeError("no mirrored send")

    job.defer_span(resolve)
    first: list[BaseException] = []

    def completing_thread():
        try:
            job.resolve_span()
        except RuntimeError as err:
            first.append(err)

    t = threading.Thread(target=completing_thread)
    t.start()
    started.wait()
    release.set()  # the waiter below queues on the resolve lock, or comes after: both must raise
    with pytest.raises(RuntimeError, match="no mirrored send"):
        job.resolve_span()
    t.join()
    assert [str(e) for e in first] == ["no mirrored send"]


# --- torchtitan 0.3.0's calls on torch 2.13 ---------------------------------------------------


def _pipeline_losses(rank):
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    dev = torch.device("openreg", rank % torch.openreg.device_count())
    torch.openreg.set_device(dev)
    torch.manual_seed(0)
    stage_module = [torch.nn.Linear(8, 8) for _ in range(2)][rank].to(dev)
    x, y = torch.randn(4, 8, device=dev), torch.randn(4, 8, device=dev)
    out = []
    for given in (False, True):
        stage = PipelineStage(stage_module, rank, 2, dev, group=dist.group.WORLD)
        schedule = Schedule1F1B(stage, n_microbatches=2, loss_fn=torch.nn.functional.mse_loss)
        losses: list = []
        if given:  # torchtitan 0.3.0: its own microbatches, the keywords of torch releases after 2.13
            schedule.step(arg_mbs=[(x[:2],), (x[2:],)] if rank == 0 else None, kwarg_mbs=[{}, {}],
                          target_mbs=[y[:2], y[2:]] if rank == 1 else None, losses=losses, return_outputs=False)
        elif rank == 0:
            schedule.step(x)
        else:
            schedule.step(target=y, losses=losses)
        out.append([float(v) for v in losses])
        stage_module.zero_grad()
    return out


def test_a_pipeline_schedule_steps_over_microbatches_its_caller_made():
    """Note [Pipeline steps over given microbatches on torch 2.13]: torchtitan 0.3.0 calls
    ``step(arg_mbs=..., target_mbs=...)``, which torch 2.13's schedules took for model keywords and ran
    one microbatch of nothing ("Expecting 32 arg_mbs but got 1"); now the losses are those of the
    whole-batch step."""
    results = spawn.run(_pipeline_losses, timeout_s=TIMEOUT_S)
    whole, given = results[1]
    assert len(whole) == 2 and given == whole
    assert results[0] == [[], []]  # the first stage computes no loss
