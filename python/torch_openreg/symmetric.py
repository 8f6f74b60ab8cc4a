"""``python -m torch_openreg.symmetric``: size a job of N ranks with one process per role.

    python -m torch_openreg.symmetric --world-size 128 [--ranks-per-node 8] train.py [args...]
    python -m torch_openreg.symmetric --mesh pp=8,dp=8,tp=8 --vary pp train.py [args...]

The program runs as torchrun would start it (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT``, the store hosted here as torchrun's agent hosts
it), in timing-only execution under the device profile it names, but only the stand-in of each role
runs: one process when every rank plays the same role (data, tensor and context parallelism), one per
coordinate of each ``--vary`` dim otherwise (pipeline stages). Note [Symmetric-rank mode] in
``torch_openreg/_distributed/_symmetric.py`` says what is assumed and what is checked.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

from torch_openreg._distributed._symmetric import ENV, Layout


def _mesh(text: str) -> tuple[tuple[int, ...], tuple[str, ...]]:
    names, sizes = [], []
    for part in text.split(","):
        name, sep, size = part.partition("=")
        if not sep or not name.strip() or not size.strip().isdigit():
            raise argparse.ArgumentTypeError(f"--mesh wants name=size,... (e.g. pp=4,dp=16), got '{text}'")
        names.append(name.strip())
        sizes.append(int(size))
    return tuple(sizes), tuple(names)


def parse(argv: list[str]) -> tuple[argparse.Namespace, Layout]:
    p = argparse.ArgumentParser(prog="python -m torch_openreg.symmetric", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--world-size", type=int, help="ranks in the job (with no --mesh: one role)")
    p.add_argument("--mesh", type=_mesh, help="the job's ranks as a row-major mesh, name=size,... "
                                               "(the dims the program's DeviceMesh has, outermost first)")
    p.add_argument("--vary", default="", help="comma-separated mesh dims along which ranks play different "
                                              "roles (pipeline stages: pp); one process per role")
    p.add_argument("--ranks-per-node", type=int, default=None,
                   help="GPUs per node (default: OPENREG_RANKS_PER_NODE, else 8)")
    p.add_argument("script", help="the program, as torchrun takes it")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    per_node = a.ranks_per_node or int(os.environ.get("OPENREG_RANKS_PER_NODE", "").strip() or 8)
    if a.mesh is None:
        if a.world_size is None:
            p.error("give --world-size N or --mesh name=size,...")
        shape, names = (a.world_size,), ("world",)
    else:
        shape, names = a.mesh
        if a.world_size is not None and a.world_size != Layout(shape, names).world:
            p.error(f"--world-size {a.world_size} is not the mesh's {Layout(shape, names).world} ranks")
    vary = tuple(v.strip() for v in a.vary.split(",") if v.strip())
    try:
        lay = Layout(shape, names, vary, per_node)
    except ValueError as err:
        p.error(str(err))
    return a, lay


def main(argv: list[str] | None = None) -> int:
    import torch.distributed as dist

    a, lay = parse(sys.argv[1:] if argv is None else argv)
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)  # torchrun's agent store
    stand_ins = lay.stand_ins()
    print(f"openreg symmetric: {lay.world} ranks (mesh {lay.describe_mesh()}, {lay.per_node} per node) as "
          f"{len(stand_ins)} process{'es' if len(stand_ins) > 1 else ''}: "
          + "; ".join(f"rank {s} for {lay.describe_role(lay.role_of(s))}" for s in stand_ins),
          file=sys.stderr, flush=True)
    procs: list[tuple[int, subprocess.Popen]] = []
    for s in stand_ins:
        env = dict(os.environ)
        env.update({
            "RANK": str(s), "WORLD_SIZE": str(lay.world), "LOCAL_RANK": str(s % lay.per_node),
            "LOCAL_WORLD_SIZE": str(lay.per_node), "GROUP_RANK": str(s // lay.per_node),
            "ROLE_RANK": str(s), "ROLE_WORLD_SIZE": str(lay.world),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(store.port), "TORCHELASTIC_USE_AGENT_STORE": "True",
            ENV: lay.to_env(), "OPENREG_EXECUTE": "timing", "OPENREG_RANKS_PER_NODE": str(lay.per_node),
        })
        if not env.get("OPENREG_DEVICE_COUNT", "").strip():
            env["OPENREG_DEVICE_COUNT"] = str(min(64, lay.per_node))
        procs.append((s, subprocess.Popen([sys.executable, a.script, *a.args], env=env)))
    failed = 0
    try:
        pending = list(procs)
        while pending:
            for s, p in list(pending):
                code = p.poll()
                if code is None:
                    continue
                pending.remove((s, p))
                if code != 0 and not failed:
                    failed = code
                    print(f"openreg symmetric: rank {s}'s process, standing in for "
                          f"{lay.describe_role(lay.role_of(s))}, exited with {code}; stopping the others",
                          file=sys.stderr, flush=True)
                    for _, other in pending:
                        other.send_signal(signal.SIGTERM)
            time.sleep(0.05)
    except KeyboardInterrupt:
        for _, p in procs:
            p.send_signal(signal.SIGINT)
        for _, p in procs:
            p.wait()
        return 130
    return failed if failed > 0 else (1 if failed else 0)


if __name__ == "__main__":
    sys.exit(main())
