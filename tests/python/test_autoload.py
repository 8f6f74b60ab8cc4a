"""Autoload: `import torch` registers openreg by itself; explicit imports in any order register it once.

Every case runs in a fresh interpreter. Registering twice cannot pass silently: torch raises on a second
`_register_device_module("openreg", ...)` and on a second generation of `Tensor.openreg`.
"""

import textwrap

import pytest

AUTOLOAD_OFF = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}

# Checks, in the subprocess, that openreg is registered once and usable.
CHECK_REGISTERED = """
import sys
import torch
import torch_openreg
assert torch.openreg is sys.modules["torch.openreg"] is torch_openreg.openreg
assert torch._C._get_privateuse1_backend_name() == "openreg"
assert hasattr(torch.Tensor, "openreg") and hasattr(torch.Tensor, "is_openreg")
assert hasattr(torch.nn.Module, "openreg")
x = torch.randn(2, device="openreg")
assert x.device == torch.device("openreg:0") and x.is_openreg
assert torch.ones(3, device="openreg:1").cpu().sum().item() == 3.0
print("REGISTERED")
"""


def _then_check(snippet):
    """``snippet`` followed by CHECK_REGISTERED, as one script."""
    return textwrap.dedent(snippet) + CHECK_REGISTERED


def test_import_torch_alone_autoloads(run_python, check_ok):
    proc = run_python(
        _then_check("""
        import importlib
        import sys
        import torch
        assert "torch_openreg" in sys.modules
        # importing registers but starts nothing: a bad configuration cannot break `import torch`
        assert not torch.openreg.is_initialized()
        print(torch.randn(2, device="openreg"))
        assert torch.openreg.is_initialized()
        # neither a re-import nor a reload registers again
        module = torch.openreg
        import torch_openreg
        importlib.reload(torch_openreg)
        assert torch.openreg is module
        """)
    )
    check_ok(proc)
    assert "device='openreg:0'" in proc.stdout
    assert "REGISTERED" in proc.stdout


def test_autoload_off_leaves_torch_alone_until_imported(run_python, check_ok):
    proc = run_python(
        _then_check("""
        import sys
        import torch
        assert "torch_openreg" not in sys.modules
        assert not hasattr(torch, "openreg")
        try:
            torch.device("openreg")
        except RuntimeError:
            pass
        else:
            raise AssertionError("'openreg' must be unknown before torch_openreg is imported")
        """),
        env=AUTOLOAD_OFF,
    )
    check_ok(proc)
    assert "REGISTERED" in proc.stdout


@pytest.mark.parametrize("autoload", ["on", "off"])
def test_importing_torch_openreg_first(run_python, check_ok, autoload):
    # With autoload on, `import torch_openreg` imports torch, whose autoload imports torch_openreg again
    # while it is half-initialised: the classic circular import.
    proc = run_python(
        _then_check("""
        import torch_openreg
        import torch
        """),
        env=AUTOLOAD_OFF if autoload == "off" else None,
    )
    check_ok(proc)
    assert "REGISTERED" in proc.stdout


def test_entry_point_is_declared():
    from importlib.metadata import entry_points

    eps = [ep for ep in entry_points(group="torch.backends") if ep.name == "openreg"]
    assert len(eps) == 1
    assert eps[0].value == "torch_openreg:_autoload"
    eps[0].load()()  # calling it again after registration is harmless
