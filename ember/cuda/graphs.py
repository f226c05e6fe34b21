"""CUDA graphs by hand: ``torch.cuda.CUDAGraph``, ``graph``, ``graph_pool_handle``.

Work queued while a :class:`CUDAGraph` captures is recorded, not run; ``replay()`` then
launches all of it at once, on the same memory: the tensors made during the capture are
the graph's *static* outputs (overwritten by each replay), and its inputs are whatever
tensors the captured ops read — refill them in place (``static_x.copy_(batch)``) before
each replay. Memory comes from a pool private to the graph (or shared with other graphs
through :func:`graph_pool_handle`), reported by ``memory_reserved``.

What a replay cannot redo: work on the host. Random draws on a ``cuda`` device are made
on the host (PCG64, then copied), so they raise inside a capture instead of replaying
the same numbers; optimizers' step counts are host numbers too: capture the model's
forward and backward and step the optimizer outside, or compile the whole step with
``ember.compile(step, mode="reduce-overhead")`` (:mod:`ember.graph.cuda_graphs`), which
recomputes the host values at every call.

Needs a GPU (CuPy's stream capture); the ``EMBER_FAKE_CUDA`` stand-in runs work
synchronously and refuses with an error saying so.

Example:
    >>> g = ember.cuda.CUDAGraph()
    >>> static_x = ember.zeros(64, 128, device="cuda")
    >>> s = ember.cuda.Stream()
    >>> with ember.cuda.stream(s):                   # warm up on a side stream
    ...     for _ in range(3):
    ...         y = model(static_x)
    >>> with ember.cuda.graph(g):
    ...     static_y = model(static_x)
    >>> static_x.copy_(batch); g.replay()           # static_y holds model(batch)
"""
from __future__ import annotations

import contextlib
import gc

from ._state import need
from ._streams import Stream, current_stream
from ._streams import stream as _stream_ctx

__all__ = ["CUDAGraph", "graph", "graph_pool_handle", "is_current_stream_capturing",
           "make_graphed_callables"]


def _cupy_backend(what: str):
    be = need(what)
    if be.is_fake:
        raise RuntimeError(
            f"ember.cuda.{what}: CUDA graph capture needs a GPU (CuPy's stream capture); "
            f"the EMBER_FAKE_CUDA stand-in runs work synchronously and has nothing to "
            f"capture. ember.compile(fn, mode='reduce-overhead') replays compiled programs "
            f"on the stand-in too.")
    return be


class _PoolHandle:
    """An opaque memory pool several graphs may share (``graph_pool_handle``)."""

    __slots__ = ("gp",)

    def __init__(self, gp):
        self.gp = gp

    def __repr__(self) -> str:
        return f"<ember.cuda graph pool {hex(id(self.gp))}>"


def graph_pool_handle() -> _PoolHandle:
    """A new private memory pool to pass as ``pool=`` to several captures."""
    be = _cupy_backend("graph_pool_handle")
    from ..device.cuda_graph import GraphPool
    gp = GraphPool(be.runtime.cupy)
    be.allocator.graph_pools.add(gp)
    return _PoolHandle(gp)


def is_current_stream_capturing() -> bool:
    """Whether the current stream is capturing a CUDA graph (False without a GPU)."""
    from ..device.cuda_graph import is_capturing
    return is_capturing()


class CUDAGraph:
    """A captured CUDA graph (``torch.cuda.CUDAGraph``); see the module doc.

    ``keep_graph`` is accepted for PyTorch's signature: CuPy instantiates the graph when
    the capture ends, so there is no separate :meth:`instantiate` step to keep it for.
    """

    def __init__(self, keep_graph: bool = False):
        self._got = None
        self._gp = None
        self._ctx = None
        self._stream = None

    def capture_begin(self, pool=None, capture_error_mode: str = "global") -> None:
        """Begin capturing the current stream's work (it must not be the default
        stream: :class:`graph` uses a side stream)."""
        be = _cupy_backend("CUDAGraph.capture_begin")
        from ..device import cuda_graph as cg
        if capture_error_mode not in cg.MODES:
            raise ValueError(f"CUDAGraph.capture_begin: capture_error_mode must be one of "
                             f"{sorted(cg.MODES)}, got {capture_error_mode!r}")
        if self._ctx is not None or self._got is not None:
            raise RuntimeError("CUDAGraph.capture_begin: this graph already holds a "
                               "capture; call reset() first")
        cp = be.runtime.cupy
        raw = cp.cuda.get_current_stream()
        if raw.ptr in (0, 1):
            raise RuntimeError("CUDAGraph.capture_begin: CUDA graphs cannot be captured on "
                               "the default stream; capture inside ember.cuda.graph(g) "
                               "(a side stream) or an ember.cuda.stream(s) block")
        if isinstance(pool, _PoolHandle):
            self._gp = pool.gp
        elif pool is None:
            self._gp = cg.GraphPool(cp, stream=raw)
            be.allocator.graph_pools.add(self._gp)
        else:
            raise TypeError(f"CUDAGraph.capture_begin: pool must come from "
                            f"ember.cuda.graph_pool_handle() or another graph's pool(), "
                            f"got {type(pool).__name__}")
        stack = contextlib.ExitStack()
        stack.enter_context(cp.cuda.using_allocator(self._gp.malloc))
        try:
            self._got = stack.enter_context(cg.capture(self._gp, capture_error_mode, raw))
        except BaseException:
            stack.close()
            self._got = None
            raise
        self._ctx, self._stream = stack, raw

    def capture_end(self) -> None:
        """End the capture: the graph is ready to :meth:`replay`."""
        if self._ctx is None:
            raise RuntimeError("CUDAGraph.capture_end: no capture in progress "
                               "(capture_begin was not called)")
        stack, self._ctx = self._ctx, None
        try:
            stack.close()
        except BaseException:
            self._got = None
            raise

    def _abandon(self) -> None:
        if self._ctx is not None:
            stack, self._ctx = self._ctx, None
            with contextlib.suppress(BaseException):
                stack.__exit__(RuntimeError, RuntimeError("capture abandoned"), None)
        self._got = None

    def replay(self) -> None:
        """Launch the captured work on the current stream."""
        if self._got is None or self._got.graph is None:
            raise RuntimeError("CUDAGraph.replay: nothing captured (capture first with "
                               "ember.cuda.graph(g) or capture_begin/capture_end)")
        be = need("CUDAGraph.replay")
        self._got.launch(be.runtime.cupy.cuda.get_current_stream())

    def reset(self) -> None:
        """Drop the captured graph (its pool's memory goes back when nothing uses it)."""
        self._abandon()
        self._gp = None

    def pool(self) -> _PoolHandle:
        """This graph's memory pool, to share with a later capture."""
        if self._gp is None:
            raise RuntimeError("CUDAGraph.pool: capture first")
        return _PoolHandle(self._gp)

    def enable_debug_mode(self) -> None:
        """Accepted for PyTorch's API (:meth:`debug_dump` always works)."""

    def debug_dump(self, debug_path: str) -> None:
        """Write the graph as Graphviz DOT text to ``debug_path``."""
        if self._got is None or self._got.graph is None:
            raise RuntimeError("CUDAGraph.debug_dump: nothing captured")
        with open(debug_path, "w") as f:
            f.write(self._got.graph.debug_dot_str())


class graph:
    """Capture the block into ``cuda_graph`` (``torch.cuda.graph``): on ``stream`` (default
    a side stream shared by every capture), after a device synchronize and emptying the
    cache, as PyTorch does."""

    default_capture_stream = None

    def __init__(self, cuda_graph: CUDAGraph, pool=None, stream: Stream | None = None,
                 capture_error_mode: str = "global"):
        if not isinstance(cuda_graph, CUDAGraph):
            raise TypeError(f"ember.cuda.graph: expected a CUDAGraph, got "
                            f"{type(cuda_graph).__name__}")
        _cupy_backend("graph")
        if stream is None:
            if graph.default_capture_stream is None:
                graph.default_capture_stream = Stream()
            stream = graph.default_capture_stream
        self.cuda_graph, self.pool, self.stream = cuda_graph, pool, stream
        self.mode = capture_error_mode
        self._ctx = None

    def __enter__(self):
        from . import empty_cache, synchronize
        synchronize()
        gc.collect()
        empty_cache()
        self.stream.wait_stream(current_stream())
        self._ctx = _stream_ctx(self.stream)
        self._ctx.__enter__()
        try:
            self.cuda_graph.capture_begin(self.pool, capture_error_mode=self.mode)
        except BaseException:
            self._ctx.__exit__(None, None, None)
            raise
        return None

    def __exit__(self, *exc):
        try:
            if exc[0] is None:
                self.cuda_graph.capture_end()
            else:
                self.cuda_graph._abandon()
        finally:
            self._ctx.__exit__(*exc)
        return False


def make_graphed_callables(callables, sample_args, num_warmup_iters: int = 3,
                           allow_unused_input: bool = False, pool=None):
    """Graphed versions of ``callables`` (``torch.cuda.make_graphed_callables``): each is
    compiled with ``mode="reduce-overhead"`` — its forward and, where its outputs need
    gradients, its backward replayed as CUDA graphs (:mod:`ember.graph.cuda_graphs`) —
    and run ``num_warmup_iters`` times on its ``sample_args`` (forward and
    ``autograd.grad``: no ``.grad`` is touched) so later calls replay. A Module comes back
    itself, its calls compiled in place; a function as the compiled function.

    Ember differs: the graphs are made by ``ember.compile`` (new input shapes trace again
    instead of failing), so ``pool`` is accepted and unused, and returned tensors are
    copies (see :mod:`ember.graph.cuda_graphs`).
    """
    from ..autograd.engine import grad as _grad
    from ..graph.compile import compile as _compile
    from ..nn.module import Module
    from ..tensor import Tensor
    one = not isinstance(callables, tuple)
    if one:
        callables, sample_args = (callables,), (sample_args,)
    if len(callables) != len(sample_args):
        raise ValueError(f"make_graphed_callables: {len(callables)} callables but "
                         f"{len(sample_args)} sample_args tuples")
    out = []
    for c, args in zip(callables, sample_args):
        args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
        if not all(isinstance(a, Tensor) for a in args):
            raise TypeError("make_graphed_callables: sample_args must be tensors only")
        if isinstance(c, Module):
            c.compile(mode="reduce-overhead")
            fn = c
        else:
            fn = _compile(c, mode="reduce-overhead")
        params = [p for p in c.parameters() if p.requires_grad] if isinstance(c, Module) \
            else []
        wrt = [a for a in args if a.requires_grad] + params
        for _ in range(max(int(num_warmup_iters), 0) + 3):    # NOTE: + trace, stage, capture
            res = fn(*args)
            outs = [r for r in (res if isinstance(res, (tuple, list)) else (res,))
                    if isinstance(r, Tensor) and r.requires_grad]
            if outs and wrt:
                from ..ops.factories import ones_like
                _grad(outs, wrt, [ones_like(o) for o in outs], allow_unused=True)
        out.append(fn)
    return out[0] if one else tuple(out)
