"""openreg: a simulated multi-device accelerator for PyTorch.

``import torch`` loads this package through its ``torch.backends`` entry point (autoload). With
``TORCH_DEVICE_BACKEND_AUTOLOAD=0``, ``import torch_openreg`` does the same job. Either way the backend
is registered exactly once: the device type ``openreg``, the module ``torch.openreg`` and the generated
``Tensor.openreg()`` / ``Tensor.is_openreg`` / ``Module.openreg()`` methods.
"""

# Note [Autoload and import order]
# torch calls its `torch.backends` entry points at the very end of torch/__init__.py. Two import
# orders reach this file, and registration must happen once in both:
#  * `import torch` first: torch, complete but for its last lines, imports this package; `import torch`
#    below returns that module at once and the registration below runs.
#  * `import torch_openreg` first: `import torch` below starts torch/__init__.py, whose autoload asks
#    for `torch_openreg:_autoload`. Python hands back this module, still executing, so `_autoload` must
#    already exist (it is defined above the import) and must not register: torch is not finished. Once
#    torch returns, the registration below runs.
# The registration itself lives in `_registration`, which remembers that it ran, so even a reload of
# this package does not register twice.


def _autoload() -> None:
    """Entry point of group ``torch.backends``: nothing to do, importing the package registered it.

    See Note [Autoload and import order].
    """


import torch  # noqa: E402, F401  (after _autoload: see Note [Autoload and import order])

from torch_openreg import _registration  # noqa: E402

_registration.register()

from torch_openreg import _perf_counter  # noqa: E402

_perf_counter.install_from_env()  # OPENREG_PERF_COUNTER=virtual (Note [A program's own timer under a profile])

__version__ = "0.1.0"
