"""A job that runs the same under torchrun (every rank a process) and under
``python -m torch_openreg.symmetric`` (one process per role): the parallelisms named on the command line,
each one timed step after a warm-up. Each process prints one line ``RESULT <json>``: per parallelism, the
rank's virtual step time (ns), its peak memory and its collectives' virtual spans (or a file per
rank in ``--out``). Used by
tests/python/test_symmetric.py, which compares the two ways of running it.

    python tests/support/symmetric_job.py fsdp,hsdp,tp,cp,rooted,ring,pp [--pp 2] [--out DIR]
"""

from __future__ import annotations

import json
import os
import resource
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

DIM = 256


def _mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(DIM, 4 * DIM), torch.nn.GELU(), torch.nn.Linear(4 * DIM, DIM))


def _measure(dev, step) -> dict:
    step()
    torch.openreg.synchronize()
    torch.openreg.reset_peak_memory_stats(dev)
    with torch.openreg.trace() as t:
        with torch.openreg.timing.region(dev) as r:
            step()
    origin = min(rec.start_ns for rec in t.records)
    # in time order (a recv's span is recorded when it is first waited on, so record order may differ)
    spans = sorted((rec.start_ns - origin, rec.end_ns - origin, rec.name) for rec in t.records
                   if rec.name.startswith("collective:"))
    return {"step_ns": round(r.wall * 1e9), "peak_allocated": torch.openreg.max_memory_allocated(dev),
            "peak_reserved": torch.openreg.max_memory_reserved(dev), "collectives": spans}


def fsdp(dev, world: int) -> dict:
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh("openreg", (world,), mesh_dim_names=("dp",))
    with torch.device("meta"):
        model = torch.nn.Sequential(*[_mlp() for _ in range(3)])
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model:
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    model.to_empty(device=dev)
    opt = torch.optim.AdamW(model.parameters(), fused=True)
    x = torch.zeros(16, DIM, device=dev)

    def step():
        opt.zero_grad()
        model(x).float().pow(2).mean().backward()
        opt.step()

    return _measure(dev, step)


def hsdp(dev, world: int) -> dict:
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("openreg", (2, world // 2), mesh_dim_names=("replicate", "shard"))
    with torch.device("meta"):
        model = torch.nn.Sequential(*[_mlp() for _ in range(2)])
    for block in model:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    model.to_empty(device=dev)
    opt = torch.optim.AdamW(model.parameters(), foreach=True)
    x = torch.zeros(16, DIM, device=dev)

    def step():
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()

    return _measure(dev, step)


def tp(dev, world: int) -> dict:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh("openreg", (world // 4, 4), mesh_dim_names=("dp", "tp"))
    model = _mlp().to(dev)
    parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.zeros(16, DIM, device=dev)

    def step():
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        for p in model.parameters():  # the data-parallel gradient all-reduce over "dp"
            dist.all_reduce(p.grad.to_local(), group=mesh.get_group("dp"))
        opt.step()

    return _measure(dev, step)


def cp(dev, world: int) -> dict:
    from torch.distributed.tensor.experimental import context_parallel

    mesh = init_device_mesh("openreg", (world,), mesh_dim_names=("cp",))
    heads, seq, hd = 4, 64 * world, 64

    def step():
        q, k, v = (torch.zeros(1, heads, seq, hd, device=dev, dtype=torch.bfloat16) for _ in range(3))
        # context_parallel shards the buffers along the sequence in place; SDPA inside is ring attention
        with context_parallel(mesh, buffers=[q, k, v], buffer_seq_dims=[2, 2, 2]):
            qs, ks, vs = (t.detach().requires_grad_() for t in (q, k, v))
            # SDPA picks the flash kernel, as on CUDA, which context parallelism turns into ring attention
            out = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=True)
            out.float().sum().backward()

    return _measure(dev, step)


def rooted(dev, world: int) -> dict:
    """A scatter from the last rank and a gather to it: the root moves all the chunks, the others one
    (every rank makes the chunks, so that the root's work before them is every rank's)."""
    last = world - 1

    def step():
        me = dist.get_rank()
        out = torch.empty(1 << 16, device=dev)
        chunks = [torch.zeros(1 << 16, device=dev) for _ in range(world)]
        dist.scatter(out, chunks if me == last else None, src=last)
        dist.gather(out, chunks if me == last else None, dst=last)

    return _measure(dev, step)


def ring(dev, world: int) -> dict:
    """A ring of sends over every rank: each sends to the next and receives from the one before, a
    tensor whose time is modelled and one small enough to move in timing-only execution."""

    def step():
        me = dist.get_rank()
        nxt, prev = (me + 1) % world, (me - 1) % world
        big, small = torch.empty(1 << 22, device=dev), torch.full((4,), float(me), device=dev)
        got_big, got_small = torch.empty_like(big), torch.empty_like(small)
        ops = [dist.P2POp(dist.irecv, got_big, prev), dist.P2POp(dist.isend, big, nxt),
               dist.P2POp(dist.isend, small, nxt), dist.P2POp(dist.irecv, got_small, prev)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        got_big.sum()  # the work after the ring starts when its receives end

    return _measure(dev, step)


def pp(dev, world: int, stages: int) -> dict:
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    mesh = init_device_mesh("openreg", (stages, world // stages), mesh_dim_names=("pp", "dp"))
    stage_index = mesh.get_local_rank("pp")
    torch.manual_seed(0)
    module = _mlp().to(dev)
    micro = torch.zeros(4, DIM, device=dev)
    activation = micro.clone().requires_grad_()  # a later stage's input, whose gradient goes back
    # The shapes are given: the stages' shape inference reads sizes computed by kernels, which timing-only
    # execution does not run (Note [Values in timing-only execution] in sim/src/stream.cpp)
    stage = PipelineStage(module, stage_index, stages, dev, input_args=(micro if stage_index == 0 else activation,),
                          output_args=(activation,),
                          group=mesh.get_group("pp"))
    # every stage is given the loss (the schedule runs backward only where it has one)
    schedule = ScheduleGPipe(stage, n_microbatches=4, loss_fn=lambda out, target: out.pow(2).mean())
    x = torch.zeros(16, DIM, device=dev)

    def step():
        if stage_index == 0:
            schedule.step(x)
        elif stage_index == stages - 1:
            schedule.step(target=x, losses=[])
        else:
            schedule.step()
        for p in module.parameters():  # the data-parallel gradient all-reduce over "dp"
            dist.all_reduce(p.grad, group=mesh.get_group("dp"))
            p.grad = None

    return _measure(dev, step)


def main() -> None:
    kinds = sys.argv[1].split(",")
    stages = int(sys.argv[sys.argv.index("--pp") + 1]) if "--pp" in sys.argv else 2
    local = int(os.environ["LOCAL_RANK"])
    dev = torch.device("openreg", local)
    torch.openreg.set_device(dev)
    dist.init_process_group()
    world = dist.get_world_size()
    out: dict = {"rank": dist.get_rank(), "world": world}
    for kind in kinds:
        out[kind] = pp(dev, world, stages) if kind == "pp" else globals()[kind](dev, world)
    out["rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if "--out" in sys.argv:  # one file per rank: the processes of a job share one stdout
        path = os.path.join(sys.argv[sys.argv.index("--out") + 1], f"rank{out['rank']}.json")
        with open(path, "w") as f:
            json.dump(out, f)
    else:
        print("RESULT " + json.dumps(out), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
