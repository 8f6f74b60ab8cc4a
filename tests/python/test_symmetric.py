"""Symmetric-rank mode (issue 41; Note [Symmetric-rank mode] in torch_openreg/_distributed/_symmetric.py):
a job of N ranks run as one process per role gives each stand-in rank the same step time (to the
nanosecond), peak memory and collective timeline as the job run with every rank a process; the
represented ranks answer every rank and size API; what breaks the symmetry is an error naming it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "tests" / "support" / "symmetric_job.py"


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    for key in [k for k in env if k.startswith("OPENREG_")]:
        del env[key]
    env.update({"OPENREG_DEVICE_PROFILE": "h100-sxm", "OPENREG_EXECUTE": "timing", "OPENREG_DEVICE_COUNT": "16",
                "OPENREG_RANKS_PER_NODE": "8", "PYTHONWARNINGS": "ignore"})
    env.update(extra)
    return env


def _results(out: Path) -> dict[int, dict]:
    return {int(p.stem[4:]): json.loads(p.read_text()) for p in out.glob("rank*.json")}


def _as_processes(world: int, kinds: str, out: Path) -> dict[int, dict]:
    out.mkdir()
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={world}", str(JOB), kinds,
           "--out", str(out)]
    r = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-4000:]
    return _results(out)


def _program(tmp_path: Path, name: str, body: str) -> str:
    """A job's program: a rank's device and the default group, then ``body``, then the group's end."""
    path = tmp_path / name
    path.write_text(
        "import os, torch, torch.distributed as dist\n"
        "torch.openreg.set_device(int(os.environ['LOCAL_RANK']))\n"
        "dist.init_process_group()\n" + body + "dist.destroy_process_group()\n")
    return str(path)


def _symmetric(args: list[str], script: list[str], out: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch_openreg.symmetric", *args, *script]
    if out is not None:
        out.mkdir()
        cmd += ["--out", str(out)]
    return subprocess.run(cmd, env=_env(**env), capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize(("world", "kinds", "layout", "ranks"), [
    # one role; a scatter and a gather rooted at the last rank, which the stand-in (rank 0) is not
    (8, "fsdp,hsdp,tp,rooted", ["--world-size", "8"], [0]),
    (8, "pp,fsdp", ["--mesh", "pp=2,dp=4", "--vary", "pp"], [0, 4]),  # two roles; FSDP's group holds both
    # a ring of sends within one role over two nodes: rank 0 receives from rank 15, across the network
    (16, "ring", ["--world-size", "16"], [0]),
    # two nodes of 8, two roles: HSDP's replicas, TP's data-parallel groups and FSDP's span both stages;
    # with --check each role's witness (ranks 7 and 15) runs too, as a job of its own, and must agree
    (16, "fsdp,hsdp,tp,pp", ["--mesh", "pp=2,dp=8", "--vary", "pp", "--check"], [0, 7, 8, 15]),
])
def test_a_symmetric_job_times_each_stand_in_as_its_rank_in_the_job_run_as_processes(
        tmp_path, world, kinds, layout, ranks):
    procs = _as_processes(world, kinds, tmp_path / "procs")
    assert sorted(procs) == list(range(world))
    r = _symmetric(layout, [str(JOB), kinds], tmp_path / "sym")
    assert r.returncode == 0, r.stderr[-4000:]
    sym = _results(tmp_path / "sym")
    assert sorted(sym) == ranks  # one process per role (and one per role's witness), not per rank
    if "--check" in layout:
        assert "--check: each role's witness (rank 7, 15) did what its stand-in did" in r.stderr
    for rank, got in sym.items():
        assert got["world"] == world
        want = procs[rank]
        for kind in kinds.split(","):
            assert got[kind]["collectives"], kind  # the step communicates
            assert got[kind] == want[kind], (rank, kind)  # step ns, peaks, every collective's span


@pytest.mark.parametrize("world", [8, 16])  # one node; two nodes of 8
def test_context_parallel_with_cp_as_roles_times_every_rank_as_the_job_run_as_processes(tmp_path, world):
    # SDPA picks CUDA's flash kernel, so torch's context parallelism runs ring attention. Its load
    # balancing gives each cp rank different attention shapes, hence one role per cp rank.
    procs = _as_processes(world, "cp", tmp_path / "procs")
    r = _symmetric(["--mesh", f"cp={world}", "--vary", "cp"], [str(JOB), "cp"], tmp_path / "sym")
    assert r.returncode == 0, r.stderr[-4000:]
    sym = _results(tmp_path / "sym")
    assert sorted(sym) == list(range(world))
    for rank, got in sym.items():
        want = procs[rank]["cp"]
        assert len(got["cp"]["collectives"]) >= 2  # the keys and values gathered, the gradients rotated
        # Step, peak allocated and every collective's span. Peak reserved is left out: ring attention's
        # gathers are small enough to move in timing-only execution (control data), and a block they
        # used is reused only once the communication thread has ended them, in real time, as on CUDA
        # a block recorded on NCCL's stream is (docs/timing.md).
        keys = ("step_ns", "peak_allocated", "collectives")
        assert [got["cp"][k] for k in keys] == [want[k] for k in keys], rank


def test_causal_context_parallelism_over_one_role_is_refused(tmp_path):
    # Ring attention's causal steps give each cp rank other work, so the stand-in (rank 0) would time
    # every rank as itself: refused at the call unless cp is a varied dim (the test above runs that).
    r = _symmetric(["--mesh", "cp=8"], [str(JOB), "cp"])
    assert r.returncode != 0
    assert "openreg symmetric-rank mode: context parallelism's causal ring attention over group 0 " \
           "(default_pg) (8 ranks of the one role (all 8 ranks)) gives each of its ranks other attention " \
           "work at each step" in r.stderr
    assert "(--vary cp)" in r.stderr


def test_check_finds_ranks_of_one_role_that_do_not_behave_alike(tmp_path):
    # The last rank of every 8 does more work before the all_reduce: its witness (rank 7, run as a second
    # job) reaches it later than the stand-in (rank 0), and --check names the point.
    program = _program(
        tmp_path, "slow_last.py",
        "a = torch.empty(4096, 4096, device='openreg', dtype=torch.bfloat16)\n"
        "if dist.get_rank() % 8 == 7:\n"
        "    a @ a\n"
        "dist.all_reduce(torch.ones(4, device='openreg'))\n")
    r = _symmetric(["--world-size", "16", "--check"], [program])
    assert r.returncode == 1, r.stderr[-4000:]
    assert "witnesses (--check): rank 15" in r.stderr
    assert "the ranks of the one role (all 16 ranks) do not behave alike: their 1st collective or send, " \
           "allreduce (all_reduce) of 16 bytes in a group of 16 ranks over 2 node(s) (default_pg), runs " \
           "from" in r.stderr
    assert "on rank 0 (world=0) but from" in r.stderr and "on rank 15 (world=15) (virtual time)" in r.stderr
    # with every rank its own role there is nothing to compare, and the job runs as before
    r = _symmetric(["--mesh", "cp=4", "--vary", "cp", "--check"], [str(JOB), "cp"])
    assert r.returncode == 0, r.stderr[-4000:]
    assert "--check has nothing to compare: every role has one rank" in r.stderr


def test_check_names_a_witness_that_differs_in_what_it_calls(tmp_path):
    program = _program(
        tmp_path, "uneven.py",
        "n = 4 if dist.get_rank() % 4 == 0 else 8  # the first rank of each 4 differs\n"
        "dist.all_reduce(torch.ones(n, device='openreg'))\n"
        "print('stdout of rank', dist.get_rank(), flush=True)\n")
    r = _symmetric(["--world-size", "8", "--check"], [program])
    assert r.returncode == 1, r.stderr[-4000:]
    assert "their 1st collective or send differs: rank 0 (world=0) made allreduce (all_reduce) of 16 bytes " \
           "in a group of 8 ranks over 1 node(s) (default_pg), rank 7 (world=7) made allreduce (all_reduce) " \
           "of 32 bytes" in r.stderr
    assert r.stdout.split() == ["stdout", "of", "rank", "0"]  # a witness's output is kept aside


def test_stand_ins_answer_for_the_job_and_compose_control_data_from_every_rank(tmp_path):
    program = _program(
        tmp_path, "api.py",
        "from torch.distributed.device_mesh import init_device_mesh\n"
        "mesh = init_device_mesh('openreg', (4, 2, 8), mesh_dim_names=('pp', 'dp', 'tp'))\n"
        "me = dist.get_rank()\n"
        "ones = torch.ones(3, device='openreg')\n"
        "dist.all_reduce(ones)\n"
        "world = torch.zeros(64, dtype=torch.long, device='openreg')\n"
        "dist.all_gather_into_tensor(world, torch.tensor([me], device='openreg'))\n"
        "tp = torch.tensor([float(me)], device='openreg')\n"
        "dist.all_reduce(tp, op=dist.ReduceOp.MAX, group=mesh.get_group('tp'))\n"
        "print('API', me, dist.get_world_size(), mesh['tp'].size(), mesh.get_local_rank('pp'),\n"
        "      mesh.get_group('dp').size(), ones.tolist(), sorted(set(world.tolist())), tp.item(), flush=True)\n")
    r = _symmetric(["--mesh", "pp=4,dp=2,tp=8", "--vary", "pp"], [program])
    assert r.returncode == 0, r.stderr[-4000:]
    lines = sorted(line.split(" ", 1)[1] for line in r.stdout.splitlines() if line.startswith("API "))
    # stand-ins of the 4 stages: ranks 0, 16, 32, 48; every rank of a stage is taken to give its value
    assert lines == [
        f"{s} 64 8 {s // 16} 2 [64.0, 64.0, 64.0] {[0, 16, 32, 48]} {float(s)}" for s in (0, 16, 32, 48)
    ]
    assert "64 ranks (mesh pp=4,dp=2,tp=8, 8 per node) as 4 processes" in r.stderr


def test_collectives_that_differ_between_roles_are_an_error_naming_the_point(tmp_path):
    program = _program(
        tmp_path, "asym.py",
        "n = 4 if dist.get_rank() == 0 else 8\n"
        "dist.all_reduce(torch.ones(n, device='openreg'))\n"
        "torch.openreg.synchronize()\n")
    r = _symmetric(["--mesh", "pp=2,dp=4", "--vary", "pp"], [program])
    assert r.returncode != 0
    assert "openreg symmetric-rank mode: in group 0 (default_pg) rank" in r.stderr
    assert "all_reduce of 16 bytes" in r.stderr and "all_reduce of 32 bytes" in r.stderr


def test_a_receive_within_a_role_waited_on_before_its_mirrored_send_is_an_error(tmp_path):
    path = tmp_path / "recv_first.py"
    path.write_text(
        "import os, datetime, torch, torch.distributed as dist\n"
        "torch.openreg.set_device(int(os.environ['LOCAL_RANK']))\n"
        "dist.init_process_group(timeout=datetime.timedelta(seconds=3))\n"
        "me, n = dist.get_rank(), dist.get_world_size()\n"
        "dist.recv(torch.empty(1 << 20, device='openreg'), (me - 1) % n)  # before any send: a ring that hangs\n"
        "dist.send(torch.empty(1 << 20, device='openreg'), (me + 1) % n)\n")
    r = _symmetric(["--world-size", "16"], [str(path)])
    assert r.returncode != 0
    assert "rank 0 waited on a receive from rank 15, a rank of its own role, but made no send to the rank " \
           "1 after it" in r.stderr


def test_an_out_of_memory_rank_is_reported_with_its_role(tmp_path):
    program = _program(
        tmp_path, "oom.py",
        "if dist.get_rank() == 8:  # the last stage holds more\n"
        "    torch.empty(100 * 2**30, dtype=torch.uint8, device='openreg')\n"
        "dist.barrier()\n")
    r = _symmetric(["--mesh", "pp=2,dp=8", "--vary", "pp"], [program])
    assert r.returncode != 0
    assert "torch.OutOfMemoryError" in r.stderr
    assert "rank 8's process, standing in for role pp=1 (ranks 8..15 of 16: 8 ranks), exited with 1" in r.stderr


def test_the_launcher_refuses_a_mesh_that_does_not_name_its_varied_dim():
    r = _symmetric(["--mesh", "dp=4,tp=2", "--vary", "pp"], ["unused.py"])
    assert r.returncode == 2
    assert "--vary names ['pp'], which the mesh dp=4,tp=2 does not have" in r.stderr


def test_a_groups_timeout_is_set_as_torchtitan_sets_it_after_its_first_step(tmp_path):
    """``torch.distributed.set_timeout`` (torchtitan calls it after its first step) on a symmetric group:
    it failed with "Backend fake does not support setting timeout", the group's stand-in backend."""
    program = _program(
        tmp_path, "timeout.py",
        "import datetime\n"
        "t = torch.ones(4, device='openreg')\n"
        "dist.all_reduce(t)\n"
        "dist.set_timeout(datetime.timedelta(seconds=30))\n"
        "dist.all_reduce(t)\n"
        "dist.barrier()\n")
    for layout in (["--world-size", "8"], ["--mesh", "pp=2,dp=4", "--vary", "pp"]):  # one role; two
        r = _symmetric(layout, [program])
        assert r.returncode == 0, r.stderr[-3000:]
