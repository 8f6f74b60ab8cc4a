"""Random number generation: one default generator per openreg device, as torch.cuda has.

A random op takes its seed and offset from the generator when it is enqueued, so its result depends on
the program order only, never on when the device runs it. Seeding before the runtime starts is queued
(see ``_initialization._lazy_call``), so ``torch.manual_seed`` at program start starts nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from torch_openreg import _C

from ._device import device_count
from ._device_index import Device, _current_device, _get_device_index
from ._initialization import _lazy_call, _lazy_init

__all__ = [
    "get_rng_state",
    "get_rng_state_all",
    "set_rng_state",
    "set_rng_state_all",
    "manual_seed",
    "manual_seed_all",
    "seed",
    "seed_all",
    "initial_seed",
]


def _generator(idx: int) -> torch.Generator:
    return _C._get_default_generator(idx)


def get_rng_state(device: Device = "openreg") -> torch.Tensor:
    """The state of ``device``'s default generator, as a CPU ByteTensor."""
    _lazy_init()
    return _generator(_get_device_index(device, optional=True)).get_state()


def get_rng_state_all() -> list[torch.Tensor]:
    """The generator states of all devices, in device order."""
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state(new_state: torch.Tensor, device: Device = "openreg") -> None:
    """Sets the state of ``device``'s default generator (from ``get_rng_state``)."""
    if not isinstance(new_state, torch.Tensor):
        raise TypeError(f"new_state must be a torch.ByteTensor, but got: {type(new_state).__name__}")
    with torch._C._DisableFuncTorch():
        new_state = new_state.clone(memory_format=torch.contiguous_format)
    idx = _get_device_index(device, optional=True)

    def cb() -> None:
        _generator(idx).set_state(new_state)

    _lazy_call(cb)


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    """Sets the generator state of every device, in device order."""
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


def manual_seed(seed: int) -> None:
    """Seeds the current device's default generator."""
    seed = int(seed)

    def cb() -> None:
        _generator(_current_device()).manual_seed(seed)

    _lazy_call(cb, seed=True)


def manual_seed_all(seed: int) -> None:
    """Seeds the default generator of every device (``torch.manual_seed`` calls this)."""
    seed = int(seed)

    def cb() -> None:
        for i in range(device_count()):
            _generator(i).manual_seed(seed)

    _lazy_call(cb, seed_all=True)


def seed() -> None:
    """Seeds the current device's default generator with a non-deterministic random number."""

    def cb() -> None:
        _generator(_current_device()).seed()

    _lazy_call(cb)


def seed_all() -> None:
    """Seeds every device's default generator with one non-deterministic random number."""

    def cb() -> None:
        count = device_count()
        if count == 0:
            return
        random_seed = _generator(0).seed()
        for i in range(1, count):
            _generator(i).manual_seed(random_seed)

    _lazy_call(cb)


def initial_seed() -> int:
    """The seed of the current device's default generator."""
    _lazy_init()
    return _generator(_current_device()).initial_seed()
