"""The README's two-host torchrun command, as written, in two network namespaces joined by a veth pair.

Each "host" is a network namespace the test creates (and deletes after) with its own address; where the
test also gives each host its own hostname and /etc/hosts (``unshare --mount --uts``, private to the
host's processes), the README's ``<host0>`` is a name. The hosts' names resolve to a loopback address
on themselves (containers, Debian's ``127.0.1.1 <hostname>``), or to their real addresses; with the
namespaces inheriting this machine's hostname and /etc/hosts, ``<host0>`` is an address. 2 nodes x 1
process train with DDP on openreg (tests/support/multihost_train.py), and the result equals training
on the whole batch in one process. Skipped, with the system's message, where namespaces cannot be made.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from support import multihost_train  # tests/support (pytest's pythonpath)

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tests" / "support" / "multihost_train.py"
ADDRS = ("10.231.0.1", "10.231.0.2")  # private to the namespaces' veth pair
DEADLINE_S = 90  # both nodes' torchrun, start to end (about 40 s on a loaded 2-core machine); a hang is killed


def _readme_command(node_rank: int, host0: str, out: Path) -> list[str]:
    """The README's two-host command (the ``--nnodes=2`` line of the torch.distributed section and
    its continuation lines), with ``<0|1>``, ``<host0>`` and ``train.py`` filled in."""
    text = (REPO / "README.md").read_text()
    section = text.split("\n## torch.distributed\n", 1)[1].split("\n## ", 1)[0]
    lines = section.splitlines()
    start = next(i for i, line in enumerate(lines) if "--nnodes=2" in line)
    command = ""
    for line in lines[start:]:
        line = line.split("#", 1)[0].rstrip()
        command += " " + line.rstrip("\\")
        if not line.endswith("\\"):
            break
    args = shlex.split(command.replace("<0|1>", str(node_rank)).replace("<host0>", host0))
    assert args[0] == "torchrun" and "train.py" in args, command
    args[args.index("train.py")] = str(SCRIPT)
    # torchrun is `python -m torch.distributed.run`, run with this interpreter's torch
    return [sys.executable, "-m", "torch.distributed.run", *args[1:], str(out)]


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


@pytest.fixture
def two_hosts():
    """Two network namespaces joined by a veth pair, ADDRS[i] on host i; deleted after the test."""
    if not sys.platform.startswith("linux") or shutil.which("ip") is None:
        pytest.skip("needs Linux network namespaces and the `ip` command (iproute2)")
    tag = f"{os.getpid() % 10**7}"
    names = (f"orh{tag}a", f"orh{tag}b")
    made = []
    try:
        for ns in names:
            r = _ip("netns", "add", ns)
            if r.returncode != 0:
                pytest.skip(f"network namespaces not permitted here: `ip netns add` says: {r.stderr.strip()}")
            made.append(ns)
        veth = (f"orv{tag}a", f"orv{tag}b")
        steps = [("link", "add", veth[0], "type", "veth", "peer", "name", veth[1])]
        for ns, dev, addr in zip(names, veth, ADDRS):
            steps += [("link", "set", dev, "netns", ns), ("-n", ns, "addr", "add", f"{addr}/24", "dev", dev),
                      ("-n", ns, "link", "set", dev, "up"), ("-n", ns, "link", "set", "lo", "up")]
        for step in steps:
            r = _ip(*step)
            if r.returncode != 0:
                pytest.skip(f"a veth pair between network namespaces is not permitted here: "
                            f"`ip {' '.join(step)}` says: {r.stderr.strip()}")
        yield names
    finally:
        for ns in made:  # the veth pair goes with its namespaces
            _ip("netns", "del", ns)


def _ours(pid: int) -> bool:
    """``pid`` is still a rank of this test (a pid file can outlive its process and the pid be reused)."""
    try:
        return str(SCRIPT) in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


def _end(procs: list[subprocess.Popen], out: Path) -> None:
    """Ends the torchrun processes still running and the ranks they started (in sessions of their
    own), by id."""
    running = [p for p in procs if p.poll() is None]
    if not running:
        return
    ranks = [int(f.read_text()) for f in out.glob("pid*") if f.read_text().strip()]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in running:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):  # ended meanwhile
                    os.killpg(p.pid, sig)
        for pid in ranks:
            if _ours(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
        deadline = time.monotonic() + 5
        while any(p.poll() is None for p in running) and time.monotonic() < deadline:
            time.sleep(0.1)
    for p in running:
        p.wait(timeout=5)


def _run_two_hosts(names, host0: str, tmp_path: Path, hosts_files=None) -> list[dict]:
    """Runs the README's command on both hosts; returns each rank's record (multihost_train)."""
    out = tmp_path / "out"
    out.mkdir()
    procs, logs = [], []
    for rank, ns in enumerate(names):
        command = _readme_command(rank, host0, out)
        prefix = ["ip", "netns", "exec", ns]
        if hosts_files is not None:
            # this host's own name and /etc/hosts, private to its processes
            prefix += ["unshare", "--mount", "--uts", "sh", "-c",
                       'mount --bind "$1" /etc/hosts && hostname "$2" && shift 2 && exec "$@"', "sh",
                       str(hosts_files[rank]), f"node{rank}"]
        log = open(tmp_path / f"node{rank}.log", "w")  # noqa: SIM115 - closed below
        logs.append(log)
        procs.append(subprocess.Popen(prefix + command, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path,
                                      start_new_session=True))
    deadline = time.monotonic() + DEADLINE_S
    try:
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            time.sleep(0.2)
        hung = [rank for rank, p in enumerate(procs) if p.poll() is None]
    finally:
        _end(procs, out)
        for log in logs:
            log.close()
    report = "\n".join(f"--- node{r} (exit {p.returncode}):\n{(tmp_path / f'node{r}.log').read_text()[-3000:]}"
                       for r, p in enumerate(procs))
    assert not hung, f"nodes {hung} still running after {DEADLINE_S} s\n{report}"
    assert all(p.returncode == 0 for p in procs), report
    return [torch.load(out / f"rank{r}.pt") for r in range(2)]


def _check_ddp_equals_single(records: list[dict]) -> None:
    assert [r["world"] for r in records] == [2, 2]
    expected = multihost_train.train_single(torch.device("openreg", 0))
    for record in records:
        assert record["params"].keys() == expected.keys()
        for name, value in record["params"].items():
            torch.testing.assert_close(value, expected[name], msg=lambda m, n=name: f"{n}: {m}")
    for name, value in records[0]["params"].items():  # DDP keeps the replicas identical
        torch.testing.assert_close(value, records[1]["params"][name], rtol=0, atol=0)


def test_readme_command_host0_by_address(two_hosts, tmp_path):
    """``<host0>`` is host 0's address; the hosts keep this machine's hostname and /etc/hosts (here,
    where the hostname resolves to 127.0.0.1, the case of containers)."""
    _check_ddp_equals_single(_run_two_hosts(two_hosts, ADDRS[0], tmp_path))


def _hosts_files(tmp_path: Path, own: str | None) -> list[Path]:
    """Each host's /etc/hosts: its own name at ``own`` (a loopback address) or, with None, at its real
    address; the other host's name at the other's real address."""
    files = []
    for rank in range(2):
        lines = ["127.0.0.1 localhost"]
        for node, addr in enumerate(ADDRS):
            lines.append(f"{own if (node == rank and own) else addr} node{node}")
        path = tmp_path / f"hosts{rank}"
        path.write_text("\n".join(lines) + "\n")
        files.append(path)
    return files


def _require_unshare(tmp_path: Path) -> None:
    probe = tmp_path / "probe_hosts"
    probe.write_text("127.0.0.1 localhost\n")
    r = subprocess.run(["unshare", "--mount", "--uts", "sh", "-c", 'mount --bind "$1" /etc/hosts && hostname probe',
                        "sh", str(probe)], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        pytest.skip(f"a private hostname and /etc/hosts per host need `unshare --mount --uts`, which says: "
                    f"{r.stderr.strip()}")


@pytest.mark.parametrize("own", ["127.0.0.1", None], ids=["loopback", "real"])
def test_readme_command_host0_by_name(two_hosts, tmp_path, own):
    """``<host0>`` is host 0's name; each host's name resolves to ``own`` on itself (None: to its real
    address), and to its real address on the other host."""
    _require_unshare(tmp_path)
    records = _run_two_hosts(two_hosts, "node0", tmp_path, _hosts_files(tmp_path, own))
    assert [r["hostname"] for r in records] == ["node0", "node1"]
    _check_ddp_equals_single(records)

