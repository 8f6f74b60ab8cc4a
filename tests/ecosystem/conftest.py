"""Shared fixtures of the ecosystem tests (third-party libraries training on openreg).

They run with the Python of ``build/ecosystem-venv`` (``make test-ecosystem``), which sees the system's
torch and torch_openreg. As in tests/python, every OPENREG_* variable is unset so each process runs the
default configuration (2 devices). Multi-process runs go through ``torchrun`` as a user starts them:
``run_torchrun`` launches a script with ``python -m torch.distributed.run`` and fails the test with the
workers' output when it does not exit 0.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest
from support.environ import merged_environ  # tests/support (pytest's pythonpath)

for _name in [n for n in os.environ if n.startswith("OPENREG_")]:
    del os.environ[_name]
os.environ.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)

# A run that has not finished by then is hung: the test fails instead of the suite stalling.
SUBPROCESS_TIMEOUT_S = 240


class Started:
    """A subprocess started by ``run_script`` / ``run_torchrun`` with ``wait=False``; ``wait()`` returns its
    CompletedProcess and fails the test with its output when it did not exit 0. Two runs started before
    either is waited for overlap (a one-process run beside a torchrun run)."""

    def __init__(self, argv: list[str], env: dict[str, str | None] | None, timeout: float) -> None:
        full_env = merged_environ(env)
        self.argv, self.timeout = argv, timeout
        # Files, not pipes: a run nobody reads yet must not block on a full pipe.
        self.out, self.err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen(argv, env=full_env, stdout=self.out, stderr=self.err, text=True)

    def _output(self) -> tuple[str, str]:
        self.out.seek(0)
        self.err.seek(0)
        return self.out.read(), self.err.read()

    def wait(self) -> subprocess.CompletedProcess:
        try:
            self.proc.wait(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            out, err = self._output()
            pytest.fail(f"{' '.join(self.argv)}: still running after {self.timeout} s\n{out[-6000:]}\n{err[-12000:]}")
        out, err = self._output()
        assert self.proc.returncode == 0, (
            f"{' '.join(self.argv)}: exit {self.proc.returncode}\nstdout:\n{out[-6000:]}\nstderr:\n{err[-12000:]}"
        )
        return subprocess.CompletedProcess(self.argv, self.proc.returncode, out, err)


def _run(argv: list[str], env, timeout: float, wait: bool):
    started = Started(argv, env, timeout)
    return started.wait() if wait else started


@pytest.fixture(scope="session")
def run_script():
    """``run_script(path, *args, env=None, wait=True)``: runs a script with this Python in one process;
    ``env`` entries override the environment (None removes a variable). ``wait=False`` returns a
    ``Started`` at once."""

    def run(path, *args, env=None, timeout=SUBPROCESS_TIMEOUT_S, wait=True):
        return _run([sys.executable, str(path), *map(str, args)], env, timeout, wait)

    return run


@pytest.fixture(scope="session")
def run_torchrun():
    """``run_torchrun(path, *args, nproc=2, env=None, wait=True)``: ``torchrun --nproc-per-node=nproc`` on
    one host; ``--standalone`` rendezvouses on a free port, so runs never meet another run's store."""

    def run(path, *args, nproc=2, env=None, timeout=SUBPROCESS_TIMEOUT_S, wait=True):
        argv = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={nproc}",
            str(path),
            *map(str, args),
        ]
        return _run(argv, env, timeout, wait)

    return run
