"""Shared fixtures of the Python suite.

The suite runs in the default configuration (2 devices): it unsets every OPENREG_* variable before torch
starts the runtime, and tests that need another configuration run it in a subprocess, since the
configuration is read once per process.
"""

import os
import subprocess
import sys
import textwrap

for _name in [n for n in os.environ if n.startswith("OPENREG_")]:
    del os.environ[_name]
os.environ.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
# Inductor's caches key on torch's code, not on torch_openreg's code generation: a cache shared with
# another checkout (or an older build) can serve wrappers this checkout's torch_openreg does not
# generate. One cache per checkout, next to its build.
_CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_CHECKOUT, "build", "inductor-cache"))

import pytest  # noqa: E402
import torch  # noqa: E402  (autoload registers openreg)
from support.environ import merged_environ  # noqa: E402  (tests/support, pytest's pythonpath)

# A subprocess that has not finished by then is hung: the test fails instead of the suite stalling.
SUBPROCESS_TIMEOUT_S = 120


@pytest.fixture(scope="session", autouse=True)
def _two_devices():
    assert hasattr(torch, "openreg"), "openreg was not autoloaded: is torch_openreg installed (make build)?"
    assert torch.openreg.device_count() >= 2, "the suite needs the default configuration (2 devices)"


@pytest.fixture(autouse=True)
def _fresh_device_state():
    """Every test starts and ends on device 0 with the default streams current."""
    _reset_device_state()
    yield
    _reset_device_state()


def _reset_device_state():
    for i in range(torch.openreg.device_count()):
        torch.openreg.synchronize(i)
        torch.openreg.set_stream(torch.openreg.default_stream(i))
    torch.openreg.set_device(0)


@pytest.fixture
def run_python():
    """Runs a Python snippet in a fresh interpreter and returns the CompletedProcess.

    ``env`` entries override the environment (a value of None removes the variable). The snippet gets
    the clean environment of this suite (no OPENREG_* variables, autoload on) unless told otherwise.
    """

    def run(code, env=None, timeout=SUBPROCESS_TIMEOUT_S):
        full_env = merged_environ(env)
        return subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run


def assert_ok(proc):
    """Asserts that a run_python subprocess exited 0, showing its output otherwise."""
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"


@pytest.fixture
def check_ok():
    return assert_ok
