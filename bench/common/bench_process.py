"""What the benchmarks that measure in child processes share (ops_bench, memory_bench,
default_config_bench).

openreg reads its configuration (the OPENREG_* variables) once per process, so a benchmark that compares
configurations runs each measurement in a fresh child of its own module: the parent picks the child's
environment, the child loads openreg, measures, and prints its result as JSON on its last line of output,
and the parent gathers the results and writes them to one JSON file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Mapping, Optional, Sequence


def load_openreg():
    """Returns torch with openreg loaded. `import torch` loads torch_openreg through the backend entry
    point where the package is installed; run from a source tree (PYTHONPATH=python) it may not be, and
    importing it by hand then registers it."""
    import torch

    if not hasattr(torch, "openreg"):
        import torch_openreg  # noqa: F401
    return torch


def child_env(extra: Optional[Mapping[str, str]] = None, inherit_openreg: bool = False) -> dict:
    """This process's environment for a child, plus `extra`. Without inherit_openreg every OPENREG_*
    variable is dropped first, so that the child measures the configuration it is given (the default
    one when `extra` names none) and not whatever the calling shell happened to set."""
    env = {k: v for k, v in os.environ.items() if inherit_openreg or not k.startswith("OPENREG_")}
    env.update(extra or {})
    return env


class ChildFailed(RuntimeError):
    """A child exited non-zero; the benchmark records why in its results instead of stopping."""

    def __init__(self, proc: subprocess.CompletedProcess):
        super().__init__(f"{' '.join(map(str, proc.args))} exited with {proc.returncode}")
        self.proc = proc

    def last_error_line(self) -> str:
        """The last line of the child's stderr (a traceback's last line names the error)."""
        lines = self.proc.stderr.strip().splitlines()
        return lines[-1] if lines else f"exit {self.proc.returncode}"

    def output_tail(self, chars: int) -> str:
        """The end of everything the child printed, for a failure that needs more than one line."""
        return (self.proc.stdout + self.proc.stderr)[-chars:]


def run_child(module: str, args: Sequence[str], env: Mapping[str, str], quick: bool = False,
              timeout: float = 1800) -> Any:
    """Runs `python -m module *args [--quick]` under `env` and returns the JSON value on the last line of
    its output (what it printed before that, such as warnings, is passed over). A benchmark passes its own
    ``__spec__.name``: the child starts in this process's directory, the checkout's root the benchmark was
    started from, so it finds the module as the parent did. Raises ChildFailed where it exits non-zero; the
    timeout keeps a hung child from stalling the whole run."""
    cmd = [sys.executable, "-m", module, *args] + (["--quick"] if quick else [])
    proc = subprocess.run(cmd, env=dict(env), capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise ChildFailed(proc)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def write_results(results: Any, path: str) -> None:
    """Writes the gathered results as JSON to `path` (creating its folder: bench/results is not
    committed) and says where."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(results, f, indent=1)
    print(f"wrote {path}")
