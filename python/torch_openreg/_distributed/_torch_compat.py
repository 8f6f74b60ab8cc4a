"""What torchtitan 0.3.0 calls that torch 2.13 lacks, on any device: ``torch.distributed.set_timeout`` and a
pipeline schedule's ``step`` over microbatches the caller made.

Note [torch.distributed.set_timeout on torch 2.13]
torchtitan 0.3.0 (the release pinned for openreg's torchtitan tests, tests/ecosystem) lowers every
group's timeout after its first step with ``torch.distributed.set_timeout(timeout, group)``, a function of
torch releases after 2.13; on torch 2.13 that is an AttributeError on any device, CUDA's included.
torch 2.13 has the operation itself: ``ProcessGroup.set_timeout(timeout)`` sets the timeout of the
group's backends for the operations that follow. So where ``torch.distributed`` lacks the function,
openreg adds one that does exactly that for the group given, or the default group. It is not added
where torch has it, and it changes nothing else.

Note [Pipeline steps over given microbatches on torch 2.13]
torchtitan 0.3.0 splits each batch into microbatches itself and runs a pipeline schedule's step with
``step(arg_mbs=..., kwarg_mbs=..., target_mbs=..., losses=..., loss_kwargs=..., return_outputs=False)``,
the signature of torch releases after 2.13. torch 2.13's ``step(*args, target=None, ...)`` takes the
whole batch and splits it; given those keywords it took them for the model's and ran one microbatch of
nothing ("Expecting 32 arg_mbs but got 1"), on any device. torch 2.13 has the operation itself: every
schedule's ``_step_microbatches(arg_mbs, kwarg_mbs, target_mbs, losses, return_outputs, loss_kwargs)``
is what ``step`` runs after it has split the batch. So where ``step`` lacks ``arg_mbs``, openreg lets it
take the microbatches given and run exactly that, with ``step``'s own checks and resets before and its
merged outputs after; a call without those keywords is torch's own. The schedules module is patched when
something imports it (importing it at openreg's import would cost 1.7 s).
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import inspect
import sys
from datetime import timedelta

import torch
import torch.distributed as dist


def _set_timeout(timeout: timedelta, group: dist.ProcessGroup | None = None) -> None:
    """Sets ``group``'s timeout (the default group's when None) for the operations that follow."""
    if not isinstance(timeout, timedelta):
        raise TypeError(f"timeout must be a datetime.timedelta, got {type(timeout).__name__}")
    if group is None:
        group = dist.distributed_c10d._get_default_group()
    if dist.distributed_c10d._rank_not_in_group(group):
        raise ValueError("Invalid process group specified")
    group.set_timeout(timeout)


_SCHEDULES = "torch.distributed.pipelining.schedules"


def _stages(schedule) -> list:
    return list(schedule._stages) if hasattr(schedule, "_stages") else [schedule._stage]


def _with_given_microbatches(step):
    """``step`` that also takes the microbatches made by its caller (Note [Pipeline steps over given
    microbatches on torch 2.13])."""

    @functools.wraps(step)
    def wrapper(self, *args, arg_mbs=None, kwarg_mbs=None, target_mbs=None, **kwargs):
        if arg_mbs is None and kwarg_mbs is None and target_mbs is None:
            return step(self, *args, **kwargs)
        extra = set(kwargs) - {"losses", "return_outputs", "loss_kwargs"}
        if args or extra:
            raise TypeError("step() takes either the whole batch or arg_mbs/kwarg_mbs/target_mbs, not both "
                            f"(got {len(args)} positional arguments and {sorted(extra)})")
        if self._has_backward and getattr(self, "_backward_requires_autograd", True) and not torch.is_grad_enabled():
            raise RuntimeError("step() requires gradients to be enabled for backward computation; it should "
                               "not be used under torch.no_grad() context. Please call eval() instead.")
        for stage in _stages(self):
            stage.has_backward = self._has_backward
            stage.clear_runtime_states()
        return_outputs = kwargs.get("return_outputs", True)
        self._step_microbatches(arg_mbs, kwarg_mbs, target_mbs, kwargs.get("losses"), return_outputs,
                                loss_kwargs=kwargs.get("loss_kwargs"))
        for stage in _stages(self):
            if stage.is_last and return_outputs:
                return self._merge_outputs(stage.output_chunks)
        return None

    wrapper._openreg_given_microbatches = True  # type: ignore[attr-defined]
    return wrapper


def _patch_schedules(module) -> None:
    for cls in (module.PipelineScheduleSingle, module.PipelineScheduleMulti):
        step = cls.__dict__["step"]
        if "arg_mbs" not in inspect.signature(step).parameters and not hasattr(step, "_openreg_given_microbatches"):
            cls.step = _with_given_microbatches(step)


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches the pipeline schedules module once it has been imported, wherever the import comes from."""

    def find_spec(self, fullname, path, target=None):
        if fullname != _SCHEDULES:
            return None
        sys.meta_path.remove(self)  # finds the real spec below, and patches once
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module) -> None:
            exec_module(module)
            _patch_schedules(module)

        spec.loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Adds ``torch.distributed.set_timeout`` where torch lacks it (Note [torch.distributed.set_timeout on
    torch 2.13]), and lets pipeline schedules step over given microbatches where they cannot (Note
    [Pipeline steps over given microbatches on torch 2.13])."""
    if not hasattr(dist, "set_timeout"):
        _set_timeout.__name__ = _set_timeout.__qualname__ = "set_timeout"
        dist.set_timeout = _set_timeout  # type: ignore[attr-defined]
    if _SCHEDULES in sys.modules:
        _patch_schedules(sys.modules[_SCHEDULES])
    elif not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())
