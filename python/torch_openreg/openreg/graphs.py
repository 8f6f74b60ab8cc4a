"""Graphs on openreg: torch.cuda's graph API over ``torch.accelerator.Graph``.

``OpenRegGraph`` is ``torch.cuda.CUDAGraph``'s counterpart; ``graph`` captures a block into one,
``graph_pool_handle`` names a memory pool graphs may share, ``make_graphed_callables`` turns modules or
functions into graphed ones (forward and backward replayed), and ``is_current_stream_capturing`` tells
whether work issued now is being captured. The rules of capture and replay are CUDA's (docs/graphs.md;
Note [Graphs on openreg] in backend/registration/Graph.cpp, Note [Stream capture] in
backend/runtime/Capture.cpp).
"""

from __future__ import annotations

import gc
import os
import weakref
from typing import Any, Callable, Literal, Optional, Union

import torch
import torch.utils._pytree as pytree

from torch_openreg import _C

from . import streams as _streams
from ._device import current_device, synchronize
from ._initialization import _lazy_init, is_initialized

CaptureErrorMode = Literal["default", "global", "thread_local", "relaxed"]
_MODES = ("default", "global", "thread_local", "relaxed")


def is_current_stream_capturing() -> bool:
    """Whether the current stream of the current device is capturing a graph (False before any use)."""
    if not is_initialized():
        return False
    return bool(_C._is_current_stream_capturing(current_device()))


def graph_pool_handle() -> tuple[int, int]:
    """A new memory pool handle: graphs captured with it share one private pool."""
    handle = _C._graph_pool_handle()
    return (int(handle[0]), int(handle[1]))


def _check_mode(mode: str) -> None:
    if mode not in _MODES:
        raise ValueError(f"capture_error_mode must be one of {', '.join(map(repr, _MODES))}, got {mode!r}")


class OpenRegGraph(torch.accelerator.Graph):
    """A graph of openreg work: capture once, replay many times (``torch.cuda.CUDAGraph``'s counterpart).

    Args:
        keep_graph (bool): as torch.cuda.CUDAGraph's: if False, ``capture_end`` instantiates the graph;
            if True, ``instantiate`` (or the first ``replay``) does.
    """

    def __new__(cls, keep_graph: bool = False) -> "OpenRegGraph":
        _lazy_init()
        return super().__new__(cls, keep_graph)

    def __init__(self, keep_graph: bool = False) -> None:
        super().__init__(keep_graph)

    def debug_dump(self, debug_path: str) -> None:
        """Writes the graph as Graphviz DOT to ``debug_path``, which must be a regular file or a new path:
        a symlink, FIFO or device is refused first, as by every writer of openreg's files (Note [Writing
        the trace file] in _trace.py)."""
        from ._trace import check_destination

        check_destination(os.fspath(debug_path), "torch.openreg.OpenRegGraph.debug_dump")
        super().debug_dump(debug_path)

    def capture_begin(
        self, pool: Optional[tuple[int, int]] = None, capture_error_mode: CaptureErrorMode = "global"
    ) -> None:
        """Begins capturing the current stream's work (usually through :class:`graph`).

        Args:
            pool: a handle from :func:`graph_pool_handle` or another graph's :meth:`pool`, to share its
                private memory pool.
            capture_error_mode: ``"global"`` (the default, as torch.cuda's), ``"thread_local"`` or
                ``"relaxed"``: which potentially unsafe calls (a device synchronize) raise during the
                capture, with cudaStreamCaptureMode's meaning.
        """
        _check_mode(capture_error_mode)
        self.graph_pool = pool
        self.capture_error_mode = capture_error_mode
        super().capture_begin()

    def register_generator_state(self, generator: torch.Generator) -> None:
        """Accepted for torch.cuda.CUDAGraph compatibility: every openreg generator a captured random op
        uses is registered with the graph automatically (each replay advances its offset)."""
        if not isinstance(generator, torch.Generator) or generator.device.type != "openreg":
            raise TypeError(f"register_generator_state expects an openreg torch.Generator, got {generator!r}")


class graph:
    """Context manager that captures the openreg work of its block into ``openreg_graph``.

    As ``torch.cuda.graph``: on entry it synchronizes the device, collects garbage and empties the
    cache, makes ``stream`` (or a side stream of the current device kept for captures) current and
    begins the capture; on exit it ends the capture.
    """

    _default_capture_streams: dict[int, _streams.Stream] = {}

    def __init__(
        self,
        openreg_graph: OpenRegGraph,
        pool: Optional[tuple[int, int]] = None,
        stream: Optional[torch.Stream] = None,
        capture_error_mode: CaptureErrorMode = "global",
    ) -> None:
        _check_mode(capture_error_mode)
        device = current_device()
        if stream is None:
            stream = self._default_capture_streams.get(device)
            if stream is None:
                stream = _streams.Stream(device)
                self._default_capture_streams[device] = stream
        self.capture_stream = stream
        self.openreg_graph = openreg_graph
        self.pool = pool
        self.capture_error_mode = capture_error_mode
        self._stream_ctx = _streams.stream(stream)

    def __enter__(self) -> None:
        synchronize()
        gc.collect()
        from . import memory

        memory.empty_cache()
        self._stream_ctx.__enter__()
        try:
            self.openreg_graph.capture_begin(pool=self.pool, capture_error_mode=self.capture_error_mode)
        except BaseException:
            self._stream_ctx.__exit__(None, None, None)
            raise

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            if exc_type is None:
                self.openreg_graph.capture_end()
            else:
                # The block raised (a forbidden call): end the capture, which then fails as invalidated,
                # and let the block's own error, the one that says what went wrong, propagate.
                try:
                    self.openreg_graph.capture_end()
                except Exception:  # noqa: BLE001
                    pass
        finally:
            self._stream_ctx.__exit__(exc_type, exc, tb)


# Note [Graphed callables]
# make_graphed_callables(callables, sample_args) replaces each callable by one whose forward and backward
# are graph replays, as torch.cuda.make_graphed_callables does, following the same contract:
#  - the sample arguments fix the inputs' shapes, dtypes and requires_grad; a module's parameters are
#    inputs too. Calls copy their arguments into the captured ("static") inputs, replay, and return the
#    captured outputs detached;
#  - before capture every callable runs num_warmup_iters forward and backward passes on a side stream
#    (lazy initialisations must not be captured), then the forward graphs are captured in order and
#    the backward graphs in reverse order, all in one memory pool (the callables are meant to run in
#    that order);
#  - the backward graph computes torch.autograd.grad of the outputs that require grad with respect to
#    the inputs that require grad, from captured grad_output buffers that backward fills;
#  - a module runs the graphed forward only in the training mode it had when graphed; in the other
#    mode it runs its own forward.


def make_graphed_callables(
    callables: Union[Callable[..., Any], tuple[Callable[..., Any], ...]],
    sample_args: Union[tuple[Any, ...], tuple[tuple[Any, ...], ...]],
    num_warmup_iters: int = 3,
    allow_unused_input: bool = False,
    pool: Optional[tuple[int, int]] = None,
) -> Any:
    """Graphed versions of ``callables`` (a callable or a tuple of them; modules or functions).

    Arguments as torch.cuda.make_graphed_callables's (Note [Graphed callables]).
    """
    if torch.is_autocast_enabled("openreg") and torch.is_autocast_cache_enabled():
        raise RuntimeError(
            "make_graphed_callables does not support the autocast caching. Please set `cache_enabled=False`."
        )
    just_one = not isinstance(callables, tuple)
    if just_one:
        callables = (callables,)  # type: ignore[assignment]
        sample_args = (sample_args,)
    assert isinstance(callables, tuple)
    per_callable_args: list[tuple[Any, ...]] = []
    for fn, args in zip(callables, sample_args):
        if isinstance(fn, torch.nn.Module):
            hooks = (fn._backward_hooks, fn._forward_hooks, fn._forward_pre_hooks)
            if any(len(h) for h in hooks) or any(
                len(m._backward_hooks) or len(m._forward_hooks) or len(m._forward_pre_hooks) for m in fn.modules()
            ):
                raise RuntimeError(
                    "Modules must not have hooks registered at the time they are passed. However, registering "
                    "hooks on modules after passing them through make_graphed_callables is allowed."
                )
            if any(b.requires_grad for b in fn.buffers()):
                raise RuntimeError("In any module passed to make_graphed_callables, no buffer may require grad.")
        flat, _ = pytree.tree_flatten(args)
        if not all(isinstance(a, torch.Tensor) for a in flat):
            raise TypeError("In the sample arguments, every leaf must be a torch.Tensor.")
        per_callable_args.append(tuple(flat))
    params = [tuple(fn.parameters()) if isinstance(fn, torch.nn.Module) else () for fn in callables]
    static_inputs = [args + p for args, p in zip(per_callable_args, params)]
    mempool = graph_pool_handle() if pool is None else pool

    def grads_of(outputs: tuple[torch.Tensor, ...], inputs: tuple[torch.Tensor, ...], grad_outputs: Any) -> Any:
        needs = tuple(o for o in outputs if o.requires_grad)
        wrt = tuple(i for i in inputs if i.requires_grad)
        return torch.autograd.grad(
            needs, wrt, grad_outputs=grad_outputs, only_inputs=True, allow_unused=allow_unused_input
        )

    # Warm-up on a side stream, so that lazy initialisations are not captured.
    synchronize()
    with _streams.stream(_streams.Stream()):
        for fn, args, inputs in zip(callables, sample_args, static_inputs):
            for _ in range(num_warmup_iters):
                outs = tuple(pytree.tree_flatten(fn(*args))[0])
                grads_of(outs, inputs, tuple(torch.empty_like(o) for o in outs if o.requires_grad))
            del outs
    synchronize()

    fwd_graphs = [OpenRegGraph() for _ in callables]
    bwd_graphs = [OpenRegGraph() for _ in callables]
    static_outputs: list[tuple[torch.Tensor, ...]] = []
    specs: list[Any] = []
    for fn, args, g in zip(callables, sample_args, fwd_graphs):
        with graph(g, pool=mempool):
            out = fn(*args)
        flat_out, spec = pytree.tree_flatten(out)
        static_outputs.append(tuple(flat_out))
        specs.append(spec)

    static_grad_outputs: list[tuple[Optional[torch.Tensor], ...]] = [()] * len(callables)
    static_grad_inputs: list[tuple[Optional[torch.Tensor], ...]] = [()] * len(callables)
    for i in reversed(range(len(callables))):
        outs, inputs = static_outputs[i], static_inputs[i]
        grad_outs = tuple(torch.empty_like(o) if o.requires_grad else None for o in outs)
        with graph(bwd_graphs[i], pool=mempool):
            grads = grads_of(outs, inputs, tuple(g for g in grad_outs if g is not None))
        it = iter(grads)
        static_grad_inputs[i] = tuple(next(it) if x.requires_grad else None for x in inputs)
        static_grad_outputs[i] = grad_outs
        # The captured autograd graph is not needed any more: keeping it would keep the parameters'
        # gradient accumulators of the capture stream alive.
        static_outputs[i] = tuple(o.detach() for o in outs)

    results: list[Any] = []
    for i, fn in enumerate(callables):
        graphed = _graphed_function(
            fwd_graphs[i], bwd_graphs[i], static_inputs[i], static_outputs[i], static_grad_outputs[i],
            static_grad_inputs[i], specs[i], len(per_callable_args[i]), params[i],
        )
        if isinstance(fn, torch.nn.Module):
            results.append(_graph_module(fn, graphed))
        else:
            results.append(graphed)
    return results[0] if just_one else tuple(results)


def _graphed_function(
    fwd: OpenRegGraph,
    bwd: OpenRegGraph,
    static_inputs: tuple[torch.Tensor, ...],
    static_outputs: tuple[torch.Tensor, ...],
    static_grad_outputs: tuple[Optional[torch.Tensor], ...],
    static_grad_inputs: tuple[Optional[torch.Tensor], ...],
    spec: Any,
    n_user_args: int,
    params: tuple[torch.Tensor, ...],
) -> Callable[..., Any]:
    class Replayed(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
            for static, given in zip(static_inputs, inputs):
                if static.data_ptr() != given.data_ptr():
                    static.copy_(given)
            fwd.replay()
            return tuple(o.detach() for o in static_outputs)

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx: Any, *grads: Optional[torch.Tensor]) -> tuple[Optional[torch.Tensor], ...]:
            for static, given in zip(static_grad_outputs, grads):
                if static is not None and given is not None and static.data_ptr() != given.data_ptr():
                    static.copy_(given)
            bwd.replay()
            return tuple(g.detach() if g is not None else None for g in static_grad_inputs)

    def run(*args: Any) -> Any:
        flat, _ = pytree.tree_flatten(args)
        if len(flat) != n_user_args:
            raise TypeError(f"the graphed callable was captured with {n_user_args} tensor arguments, got {len(flat)}")
        outs = Replayed.apply(*(tuple(flat) + params))
        return pytree.tree_unflatten(list(outs), spec)

    return run


def _graph_module(module: torch.nn.Module, graphed: Callable[..., Any]) -> torch.nn.Module:
    training = module.training
    own_forward = module.forward
    ref = weakref.ref(module)

    def forward(*args: Any, **kwargs: Any) -> Any:
        m = ref()
        if m is not None and m.training == training and not kwargs:
            return graphed(*args)
        return own_forward(*args, **kwargs)

    module.forward = forward
    return module


__all__ = [
    "OpenRegGraph",
    "graph",
    "graph_pool_handle",
    "is_current_stream_capturing",
    "make_graphed_callables",
]
