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
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from torch_openreg._distributed._symmetric import ENV, LOG_ENV, Layout, compare_witness


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
    p.add_argument("--check", action="store_true",
                   help="also run each role's witness, its rank at the far corner of the other dims, as a "
                        "second job, and check that it does what its stand-in does (doubles the processes)")
    p.add_argument("-m", "--module", action="store_true",
                   help="the program is a module run as python -m runs it (torchrun's -m): -m torchtitan.train")
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


def _start(script: list[str], lay: Layout, ranks: list[int], port: int, log: str | None,
           quiet_dir: str | None) -> list[tuple[int, subprocess.Popen]]:
    """One process per rank in ``ranks``, as torchrun would start it, the layout in the environment."""
    procs = []
    for s in ranks:
        env = dict(os.environ)
        env.update({
            "RANK": str(s), "WORLD_SIZE": str(lay.world), "LOCAL_RANK": str(s % lay.per_node),
            "LOCAL_WORLD_SIZE": str(lay.per_node), "GROUP_RANK": str(s // lay.per_node),
            "ROLE_RANK": str(s), "ROLE_WORLD_SIZE": str(lay.world),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "TORCHELASTIC_USE_AGENT_STORE": "True",
            ENV: lay.to_env(), "OPENREG_EXECUTE": "timing", "OPENREG_RANKS_PER_NODE": str(lay.per_node),
        })
        if log is not None:
            env[LOG_ENV] = log
        if not env.get("OPENREG_DEVICE_COUNT", "").strip():
            env["OPENREG_DEVICE_COUNT"] = str(min(64, lay.per_node))
        if quiet_dir is None:
            procs.append((s, subprocess.Popen([sys.executable, *script], env=env)))
        else:  # a witness: its output is kept aside and shown only if it fails
            with open(os.path.join(quiet_dir, f"witness{s}.log"), "w") as out:
                procs.append((s, subprocess.Popen([sys.executable, *script], env=env, stdout=out, stderr=out)))
    return procs


def _describe_process(lay: Layout, witness: Layout, s: int) -> str:
    if witness.corner and s in witness.stand_ins() and s not in lay.stand_ins():
        return f"rank {s}'s process, the witness of {lay.describe_role(lay.role_of(s))},"
    return f"rank {s}'s process, standing in for {lay.describe_role(lay.role_of(s))},"


def _wait(procs: list[tuple[int, subprocess.Popen]], lay: Layout, witness: Layout, logs: str | None) -> int:
    """Waits for every process; the first that fails stops the others. Returns the exit code."""
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
                    name = os.path.join(logs, f"witness{s}.log") if logs else ""
                    if name and os.path.exists(name):
                        with open(name) as f:
                            sys.stderr.write(f.read()[-8000:])
                    print(f"openreg symmetric: {_describe_process(lay, witness, s)} exited with {code}; "
                          f"stopping the others", file=sys.stderr, flush=True)
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


def _check(lay: Layout, witness: Layout, logs: str) -> int:
    """Compares each role's stand-in with its witness (--check); 0 when every role's agree."""
    for role in lay.roles():
        s, w = lay.stand_in(role), witness.stand_in(role)
        with open(os.path.join(logs, f"rank{s}.json")) as f:
            mine = json.load(f)
        with open(os.path.join(logs, f"rank{w}.json")) as f:
            theirs = json.load(f)
        diff = compare_witness(lay, s, w, mine, theirs)
        if diff is not None:
            print(f"openreg symmetric: the ranks of {lay.describe_role(role)} do not behave alike: {diff}. "
                  f"A stand-in times every rank of its role as itself, so the job's figures would be "
                  f"wrong: make the dims along which they differ roles (--vary) or run the job as "
                  f"processes", file=sys.stderr, flush=True)
            return 1
    print(f"openreg symmetric: --check: each role's witness (rank "
          f"{', '.join(str(witness.stand_in(r)) for r in lay.roles())}) did what its stand-in did",
          file=sys.stderr, flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    import torch.distributed as dist

    a, lay = parse(sys.argv[1:] if argv is None else argv)
    stand_ins = lay.stand_ins()
    witness = dataclasses.replace(lay, corner=True)
    check = a.check and witness.stand_ins() != stand_ins
    print(f"openreg symmetric: {lay.world} ranks (mesh {lay.describe_mesh()}, {lay.per_node} per node) as "
          f"{len(stand_ins)} process{'es' if len(stand_ins) > 1 else ''}: "
          + "; ".join(f"rank {s} for {lay.describe_role(lay.role_of(s))}" for s in stand_ins)
          + (f"; witnesses (--check): rank{'s' if len(stand_ins) > 1 else ''} "
             f"{', '.join(str(w) for w in witness.stand_ins())}" if check else ""),
          file=sys.stderr, flush=True)
    if a.check and not check:
        print("openreg symmetric: --check has nothing to compare: every role has one rank",
              file=sys.stderr, flush=True)
    script = ["-m"] * a.module + [a.script, *a.args]
    with tempfile.TemporaryDirectory(prefix="openreg-symmetric-") as logs:
        store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)  # torchrun's agent store
        procs = _start(script, lay, stand_ins, store.port, logs if check else None, None)
        if check:  # the witnesses run as a job of their own: their own store, their own exchanges
            witness_store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
            procs += _start(script, witness, witness.stand_ins(), witness_store.port, logs, logs)
        code = _wait(procs, lay, witness, logs if check else None)
        if code == 0 and check:
            code = _check(lay, witness, logs)
    return code


if __name__ == "__main__":
    sys.exit(main())
