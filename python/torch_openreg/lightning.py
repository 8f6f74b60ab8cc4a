"""Lightning on openreg: ``import torch_openreg.lightning``, then ``Trainer(accelerator="openreg", ...)``.

Importing this module registers, in Lightning's registries (``lightning.pytorch``, the package ``lightning``
installs):

* the accelerator ``"openreg"`` (:class:`OpenRegAccelerator`), so ``Trainer(accelerator="openreg")`` and
  ``devices=N`` / ``devices=[i, j]`` / ``devices="auto"`` / ``devices=-1`` pick openreg devices as
  ``accelerator="cuda"`` picks GPUs;
* the strategies ``"ddp"``, ``"ddp_spawn"``, ``"ddp_fork"`` and ``"ddp_notebook"`` as
  :class:`OpenRegDDPStrategy`, which is Lightning's ``DDPStrategy`` unchanged except on openreg devices
  (see Note [Lightning's CUDA-only paths]);
* the strategy ``"single_openreg"`` (:class:`OpenRegSingleDeviceStrategy`), one process on one openreg device.

Lightning finds accelerators only in its own modules and reads entry points only for callbacks, which it
loads after it has chosen the accelerator, so the registration needs this import, before the ``Trainer``
is built (the processes Lightning's ``"ddp"`` launches run the same script, so they import it too). Nothing
in ``import torch`` / ``import torch_openreg`` imports this module or Lightning.
"""

# Note [Lightning's CUDA-only paths]
# Lightning (2.6) runs a third-party accelerator through its generic paths, and three of them assume CUDA:
#  * DDPStrategy._setup_model builds DistributedDataParallel inside `torch.cuda.stream(torch.cuda.Stream())`
#    whenever the root device is not the CPU; on a torch without CUDA that raises. The side stream is there
#    only for CUDA-graph capture of the whole network (Lightning-AI/pytorch-lightning#21746 later drops it
#    for ordinary training: DDP's gradient hooks then sit on another stream than backward), so on openreg
#    we build DDP on the current stream, as plain PyTorch code does.
#  * DDPStrategy._register_ddp_hooks installs `ddp_comm_hook` only when the root device is "cuda"; openreg's
#    process group runs DDP communication hooks (tests/python/test_distributed.py), so a hook the user passes
#    is installed on openreg too instead of being silently dropped.
#  * The accelerator connector gives "16-mixed"/"bf16-mixed" a MixedPrecision plugin for "cuda" for any
#    accelerator other than cpu/mps; torch.autocast("cuda") on openreg tensors does nothing (on a torch
#    without CUDA it only warns), so training would silently stay in float32. The strategies retarget that
#    plugin to "openreg" (autocast and GradScaler) once the root device is known.
# For one device the connector builds `SingleDeviceStrategy(device="cpu")` for every accelerator but
# cuda/mps, so `Trainer(accelerator="openreg", devices=1)` would train on the CPU; OpenRegAccelerator's
# setup_device refuses a non-openreg device with a message naming strategy="single_openreg".

from __future__ import annotations

from typing import Any

import torch

try:
    import lightning  # noqa: F401  (only to tell a missing Lightning from an error inside it)
except ModuleNotFoundError as error:
    raise ModuleNotFoundError(
        "torch_openreg.lightning needs PyTorch Lightning: `pip install lightning` (tested with 2.6)",
        name=error.name,
    ) from error

from lightning.fabric.accelerators.registry import _AcceleratorRegistry
from lightning.fabric.strategies.registry import _StrategyRegistry
from lightning.fabric.utilities.types import _DEVICE
from lightning.pytorch.accelerators import AcceleratorRegistry
from lightning.pytorch.accelerators.accelerator import Accelerator
from lightning.pytorch.plugins.precision import MixedPrecision
from lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy, StrategyRegistry
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from torch.nn.parallel import DistributedDataParallel

from torch_openreg import openreg as _openreg

__all__ = ["OpenRegAccelerator", "OpenRegDDPStrategy", "OpenRegSingleDeviceStrategy"]

_DEVICE_TYPE = "openreg"


def _parse_device_indices(devices: int | str | list[int] | tuple[int, ...]) -> list[int]:
    """``Trainer(devices=...)`` for openreg, read as Lightning reads it for CUDA.

    ``N > 0`` (or ``"N"``) means devices ``0..N-1``, ``-1`` (or ``"-1"``) all of them, a list (or ``"i,j"``)
    those indices. ``0``, ``"0"`` and ``[]`` request no device; the Trainer refuses them before asking us.
    """
    if isinstance(devices, bool) or not isinstance(devices, (int, str, list, tuple)):
        raise TypeError(f"devices must be an int, a string or a list of ints, got {devices!r}")
    if isinstance(devices, str):
        text = devices.strip()
        try:
            if "," in text:
                devices = [int(part) for part in text.split(",") if part.strip()]
            else:
                devices = int(text)
        except ValueError:
            raise MisconfigurationException(f"devices={devices!r} is not an int or a list of ints") from None
    count = _openreg.device_count()
    if isinstance(devices, int):
        if devices == -1:
            indices = list(range(count))
        elif devices < 0:
            raise MisconfigurationException(f"devices={devices} is negative; -1 means all devices")
        elif devices > count:
            raise MisconfigurationException(
                f"devices={devices} requests more openreg devices than there are ({count}); "
                "set OPENREG_DEVICE_COUNT for more"
            )
        else:
            indices = list(range(devices))
    else:
        indices = list(devices)
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in indices):
            raise TypeError(f"devices must be a list of ints, got {devices!r}")
        if len(set(indices)) != len(indices):
            raise MisconfigurationException(f"devices={devices!r} names a device more than once")
        missing = [i for i in indices if not 0 <= i < count]
        if missing:
            raise MisconfigurationException(f"devices={devices!r}: openreg has devices 0..{count - 1} only")
    if not indices:
        raise MisconfigurationException(
            f"devices={devices!r} selects no openreg device" if count else "openreg has no devices"
        )
    return indices


class OpenRegAccelerator(Accelerator):
    """Lightning's accelerator for openreg devices, registered as ``"openreg"``.

    What ``CUDAAccelerator`` does for GPUs: parses ``devices``, counts the devices, makes the process's device
    current and reports its memory statistics (``torch.openreg.memory_stats``, the keys CUDA's has).
    """

    def setup_device(self, device: torch.device) -> None:
        """Make ``device`` the current openreg device of this process (each DDP rank has its own)."""
        if device.type != _DEVICE_TYPE:
            # See Note [Lightning's CUDA-only paths]: Lightning chose the CPU for a single device.
            raise MisconfigurationException(
                f"OpenRegAccelerator got the device {device}, not an openreg device. For one device write "
                "Trainer(accelerator='openreg', devices=1, strategy='single_openreg'); Lightning's automatic "
                "strategy puts a single device of an accelerator it does not know on the CPU."
            )
        _openreg.set_device(device)

    def setup(self, trainer: Any) -> None:
        """Release cached blocks left by earlier work before training, as CUDAAccelerator does."""
        _openreg.empty_cache()

    def teardown(self) -> None:
        _openreg.empty_cache()

    def get_device_stats(self, device: _DEVICE) -> dict[str, Any]:
        """The caching allocator's statistics for ``device`` (``DeviceStatsMonitor`` logs them)."""
        return _openreg.memory_stats(device)

    @staticmethod
    def parse_devices(devices: int | str | list[int]) -> list[int]:
        return _parse_device_indices(devices)

    @staticmethod
    def get_parallel_devices(devices: list[int]) -> list[torch.device]:
        return [torch.device(_DEVICE_TYPE, i) for i in devices]

    @staticmethod
    def auto_device_count() -> int:
        return _openreg.device_count()

    @staticmethod
    def is_available() -> bool:
        return _openreg.is_available()

    @staticmethod
    def name() -> str:
        return _DEVICE_TYPE

    @classmethod
    def register_accelerators(cls, accelerator_registry: _AcceleratorRegistry) -> None:
        accelerator_registry.register(cls.name(), cls, description=cls.__name__, override=True)


def _retarget_mixed_precision(strategy: Any) -> None:
    """Point a "cuda" MixedPrecision plugin at openreg (see Note [Lightning's CUDA-only paths])."""
    plugin = strategy.precision_plugin
    if strategy.root_device.type != _DEVICE_TYPE or not isinstance(plugin, MixedPrecision):
        return
    if plugin.device != "cuda":
        return
    plugin.device = _DEVICE_TYPE
    scaler = plugin.scaler
    if scaler is not None and getattr(scaler, "_device", None) == "cuda":
        # A GradScaler made for CUDA on a torch without CUDA is disabled: fp16 gradients would go unscaled.
        plugin.scaler = torch.amp.GradScaler(_DEVICE_TYPE)


class OpenRegDDPStrategy(DDPStrategy):
    """Lightning's ``DDPStrategy``, registered as ``"ddp"`` (and its spawn/fork variants).

    Identical to ``DDPStrategy`` on other devices; on openreg it avoids the CUDA-only paths of Note
    [Lightning's CUDA-only paths]. The process group uses openreg's c10d backend, which Lightning picks
    itself from ``torch.distributed.Backend.default_device_backend_map``. Construct it directly to pass DDP
    options: ``Trainer(accelerator="openreg", devices=2, strategy=OpenRegDDPStrategy(static_graph=True))``.
    """

    def setup_environment(self) -> None:
        super().setup_environment()
        _retarget_mixed_precision(self)

    def _setup_model(self, model: torch.nn.Module) -> DistributedDataParallel:
        if self.root_device.type != _DEVICE_TYPE:
            return super()._setup_model(model)
        return DistributedDataParallel(module=model, device_ids=self.determine_ddp_device_ids(), **self._ddp_kwargs)

    def _register_ddp_hooks(self) -> None:
        if self.root_device.type != _DEVICE_TYPE:
            return super()._register_ddp_hooks()
        if self._ddp_comm_hook is None:
            return
        assert isinstance(self.model, DistributedDataParallel)
        if self._ddp_comm_wrapper is not None:
            hook = self._ddp_comm_wrapper(self._ddp_comm_hook)
        else:
            hook = self._ddp_comm_hook
        self.model.register_comm_hook(state=self._ddp_comm_state, hook=hook)

    @classmethod
    def register_strategies(cls, strategy_registry: _StrategyRegistry) -> None:
        # The names and start methods of DDPStrategy's own entries, now built as this class.
        for name in ("ddp", "ddp_spawn", "ddp_fork", "ddp_notebook"):
            start_method = strategy_registry[name]["init_params"]["start_method"]
            strategy_registry.register(
                name,
                cls,
                description=f"DDP strategy with `start_method` {start_method!r}, openreg-aware",
                override=True,
                start_method=start_method,
            )


class OpenRegSingleDeviceStrategy(SingleDeviceStrategy):
    """One process on one openreg device, registered as ``"single_openreg"``.

    ``Trainer(accelerator="openreg", devices=[1], strategy="single_openreg")`` trains on ``openreg:1``: the
    Trainer hands the strategy the device list it parsed (through ``parallel_devices``), as it does for its
    parallel strategies. ``OpenRegSingleDeviceStrategy(device="openreg:1")`` names the device itself.
    """

    strategy_name = "single_openreg"

    def __init__(self, device: _DEVICE | None = None, **kwargs: Any) -> None:
        self._device_given = device is not None
        super().__init__(device=device if device is not None else torch.device(_DEVICE_TYPE, 0), **kwargs)

    @property
    def parallel_devices(self) -> list[torch.device] | None:
        return [self.root_device] if self._device_given else None

    @parallel_devices.setter
    def parallel_devices(self, devices: list[torch.device]) -> None:
        if len(devices) != 1:
            raise MisconfigurationException(
                f"strategy='single_openreg' trains on one device, but the Trainer was given {len(devices)} "
                f"({[str(d) for d in devices]}); pass devices=1 (or devices=[i]), or strategy='ddp'"
            )
        self._root_device = devices[0]
        self._device_given = True

    def setup_environment(self) -> None:
        super().setup_environment()
        _retarget_mixed_precision(self)

    @classmethod
    def register_strategies(cls, strategy_registry: _StrategyRegistry) -> None:
        strategy_registry.register(cls.strategy_name, cls, description=cls.__name__, override=True)


OpenRegAccelerator.register_accelerators(AcceleratorRegistry)
OpenRegDDPStrategy.register_strategies(StrategyRegistry)
OpenRegSingleDeviceStrategy.register_strategies(StrategyRegistry)
