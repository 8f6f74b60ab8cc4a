"""torch.distributed on openreg: the ``openreg`` backend over gloo, 2 processes on loopback."""

import os
import socket
import time
import traceback
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 2
TIMEOUT_S = 60


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, fn, port, backend, errors):
    try:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        kwargs = {} if backend is None else {"backend": backend}
        dist.init_process_group(
            rank=rank, world_size=WORLD, timeout=timedelta(seconds=20), **kwargs
        )
        try:
            fn(rank)
        finally:
            dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 - reported to the parent
        errors.put((rank, traceback.format_exc()))


def _spawn(fn, backend=None):
    ctx = mp.get_context("spawn")
    errors = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_worker, args=(r, fn, port, backend, errors)) for r in range(WORLD)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(TIMEOUT_S)
    hung = [p for p in procs if p.is_alive()]
    for p in hung:
        p.kill()
        p.join()
    failures = []
    while not errors.empty():
        failures.append(errors.get(timeout=5))
    assert not hung, f"ranks still running after {TIMEOUT_S} s"
    assert not failures, "\n".join(f"rank {r}:\n{tb}" for r, tb in failures)
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]


def _dev(rank):
    return torch.device("openreg", rank % torch.openreg.device_count())


# --- collectives -------------------------------------------------------------------------------


def _basic_collectives(rank):
    dev = _dev(rank)
    torch.openreg.set_device(dev)
    for op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG, dist.ReduceOp.MIN, dist.ReduceOp.MAX,
               dist.ReduceOp.PRODUCT):
        base = torch.arange(6, dtype=torch.float32) + rank + 1
        expect = base.clone()
        if op == dist.ReduceOp.AVG:  # gloo on CPU has no AVG: SUM / world
            dist.all_reduce(expect)
            expect /= WORLD
        else:
            dist.all_reduce(expect, op=op)  # gloo on CPU
        t = base.to(dev)
        dist.all_reduce(t, op=op)
        torch.testing.assert_close(t.cpu(), expect)
    # broadcast
    t = torch.full((4,), float(rank), device=dev)
    dist.broadcast(t, src=1)
    assert t.cpu().tolist() == [1.0] * 4
    # all_gather
    outs = [torch.empty(3, device=dev) for _ in range(WORLD)]
    dist.all_gather(outs, torch.full((3,), float(rank), device=dev))
    assert [o.cpu().tolist() for o in outs] == [[float(r)] * 3 for r in range(WORLD)]
    # all_gather_into_tensor
    out = torch.empty(WORLD * 2, device=dev)
    dist.all_gather_into_tensor(out, torch.full((2,), float(rank + 1), device=dev))
    assert out.cpu().tolist() == [1.0, 1.0, 2.0, 2.0]
    # reduce_scatter_tensor
    out = torch.empty(2, device=dev)
    dist.reduce_scatter_tensor(out, torch.arange(4, dtype=torch.float32, device=dev))
    assert out.cpu().tolist() == [float(2 * (2 * rank)), float(2 * (2 * rank + 1))]
    # all_to_all_single
    out = torch.empty(WORLD, device=dev)
    dist.all_to_all_single(out, torch.tensor([10.0 * rank, 10.0 * rank + 1], device=dev))
    assert out.cpu().tolist() == [float(rank), 10.0 + rank]
    # send / recv
    if rank == 0:
        dist.send(torch.tensor([42.0], device=dev), dst=1)
    else:
        r = torch.empty(1, device=dev)
        dist.recv(r, src=0)
        assert r.item() == 42.0
    # a contiguous view at an offset is reduced in place, its neighbours untouched
    m = torch.zeros(4, 4, device=dev)
    row = m[1]
    row.fill_(1.0)
    dist.all_reduce(row)
    assert m.cpu()[1].tolist() == [2.0] * 4 and m.cpu()[2].tolist() == [0.0] * 4
    # a non-contiguous one is refused, as NCCL does
    with pytest.raises(ValueError, match="contiguous"):
        dist.all_reduce(m[:, 1])
    dist.barrier()


def test_collectives_match_gloo_default_backend():
    _spawn(_basic_collectives)


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


def _async_and_stream_order(rank):
    dev = _dev(rank)
    torch.openreg.set_device(dev)
    # A long chain of kernels queued before the collective: it must see their result.
    t = torch.zeros(256, 256, device=dev)
    for _ in range(50):
        t = t + 1
    work = dist.all_reduce(t, async_op=True)
    work.wait()
    assert work.is_completed()
    assert torch.all(t == 100).item()
    fut_val = dist.all_reduce(torch.ones(3, device=dev), async_op=True).get_future().wait()
    assert fut_val[0].device == dev and fut_val[0].cpu().tolist() == [2.0] * 3


def test_async_op_and_stream_ordering():
    _spawn(_async_and_stream_order)


def _wrong_device(rank):
    dev = _dev(rank)
    with pytest.raises(ValueError, match="different devices|not supported"):
        dist.all_reduce(torch.ones(2, device="meta"))
    dist.barrier()


def _wrong_device_then_dtensor(rank):
    _wrong_device(rank)
    _dtensor_matmul(rank)


def test_wrong_device_is_a_clear_error_and_dtensor_matmul():
    _spawn(_wrong_device_then_dtensor)


# --- DDP ---------------------------------------------------------------------------------------


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def _data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(16, 8, generator=g), torch.randn(16, 1, generator=g)


def _ddp(rank):
    from torch.nn.parallel import DistributedDataParallel as DDP

    dev = _dev(rank)
    torch.openreg.set_device(dev)
    x, y = _data()
    ref = _model()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    model = DDP(_model().to(dev), device_ids=[dev.index] if False else None)
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
    for p, q in zip(model.module.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6)


def test_ddp_matches_single_process():
    _spawn(_ddp)


# --- errors ------------------------------------------------------------------------------------


def _mismatched(rank):
    dev = _dev(rank)
    torch.openreg.set_device(dev)
    # rank 1 never joins: rank 0's collective ends in gloo's timeout error, not a hang
    if rank == 0:
        pg = dist.new_group([0, 1], timeout=timedelta(seconds=2))
        with pytest.raises(RuntimeError, match="(?i)allreduce.*timed out"):
            dist.all_reduce(torch.ones(4, device=dev), group=pg)
    else:
        dist.new_group([0, 1], timeout=timedelta(seconds=2))
        time.sleep(6)  # alive but absent, so rank 0 sees gloo's timeout (not a closed connection)


def test_missing_peer_is_a_timeout_error():
    _spawn(_mismatched)


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



