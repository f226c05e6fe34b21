"""Capture: a dispatch mode that records every op a Python function runs into a graph.

The :class:`Tracer` runs the function for real (values are concrete, so the traced call
itself returns eager results) while it writes each op into a :class:`GraphBuilder`:

* Tensors are matched to graph values by the identity of their array (re-wrapped saved
  tensors share it), with the storage version telling when an alias went stale.
* A tensor that no op produced while tracing is *lifted*: a graph input read, at every
  run, from the same tensor object (parameters, buffers, optimizer state, closure
  tensors) — or from ``p.grad`` when it is a parameter's gradient.
* Tensors made by factories inside the function are constants; random draws become
  ``random`` nodes that draw again at every run from the same generator.
* In-place writes are functionalised: the written tensor's value becomes the new node;
  a write through a view scatters into its base. Lifted tensors whose value changed are
  written back after each run; so are the ``.grad`` fields ``backward()`` produced.
* Reading a traced value into Python (``.item()``, ``bool(t)``, ``.numpy()``) is a graph
  break: tracing stops there and the rest of the call runs eagerly. So is an op whose
  output size depends on values (:data:`DATA_DEPENDENT`: ``nonzero``, boolean masks).

:class:`GraphCapture` is the abstract flavour used by the declarative API
(:mod:`ember.graph.declarative`): no values at all, only shapes and dtypes.
"""
from __future__ import annotations

import os
import sys

import numpy as np

from .. import random as _random
from ..autograd.grad_mode import state
from ..errors import GraphError
from ..ops import dispatch as _dispatch
from ..tensor import Tensor, _wrap
from .ir import CONSTANT, GraphBuilder, GraphOp, Var
from .meta import infer, meta_tensor

_tensor_mod = sys.modules["ember.tensor"]   # (``ember.tensor`` the name is the factory)
_EMBER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class GraphBreak(GraphError):
    """Raised with ``fullgraph=True`` when traced code needs a value in Python."""

    def __init__(self, reason: str, where: str):
        super().__init__(f"graph break at {where}: {reason}. Keep tensors in Ember ops "
                         f"(no .item(), bool(tensor), .numpy(), .tolist() on traced values), or "
                         f"compile with fullgraph=False to run this part eagerly")
        self.reason = reason
        self.where = where


def user_location() -> str:
    """``file:line`` of the innermost stack frame outside Ember itself."""
    f = sys._getframe(1)
    while f is not None:
        fn = os.path.abspath(f.f_code.co_filename)
        if not fn.startswith(_EMBER_DIR + os.sep):
            return f"{f.f_code.co_filename}:{f.f_lineno}"
        f = f.f_back
    return "<unknown>"


_INSIDE: dict = {}   # co_filename -> whether it is one of Ember's own files


def node_location() -> str | None:
    """Like :func:`user_location`, cached per file: recorded on every traced node."""
    f = sys._getframe(2)
    while f is not None:
        fn = f.f_code.co_filename
        inside = _INSIDE.get(fn)
        if inside is None:
            inside = _INSIDE[fn] = os.path.abspath(fn).startswith(_EMBER_DIR + os.sep)
        if not inside:
            return f"{fn}:{f.f_lineno}"
        f = f.f_back
    return None


def _run_random(xp, *arrays, draw, what):
    return draw(*arrays)


def _device_draw(draw, device):
    """``draw`` for a ``random`` node whose values live on ``device``: it samples on the
    host (as eager does: ``ember.random._drawn``) from host copies of its inputs, and the
    samples are copied to the device (a GPU array must never be a NumPy one)."""
    if device.type == "cpu":
        return draw
    from ..device.base import get_backend
    be = get_backend(device)
    if be.xp is np:            # NOTE: the plain stand-in: its arrays are NumPy's
        return draw

    def on_host(*arrays):
        return be.asarray(draw(*(be.to_host(a) for a in arrays)))
    on_host.sample = getattr(draw, "sample", None)
    return on_host


RANDOM = GraphOp("random", _run_random, random=True)

#: Primitives whose output shape depends on their inputs' values: a graph specialised to
#: one call's shapes would be wrong (or fail) at the next, so they break the graph.
DATA_DEPENDENT = frozenset({"nonzero"})


class _Mode:
    """Shared machinery of the tracers: push/pop on the dispatcher's mode stack."""

    def __enter__(self):
        state.modes.append(self)
        self._prev_hook = _tensor_mod._DATA_HOOK
        _tensor_mod._DATA_HOOK = self.on_data_access
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def stop(self):
        if self in state.modes:
            state.modes.remove(self)
            _tensor_mod._DATA_HOOK = self._prev_hook

    def suspended(self):
        return _Suspend(self)


class _Suspend:
    def __init__(self, mode):
        self.mode = mode

    def __enter__(self):
        self.i = state.modes.index(self.mode)
        state.modes.pop(self.i)
        self.hook = _tensor_mod._DATA_HOOK
        _tensor_mod._DATA_HOOK = None

    def __exit__(self, *exc):
        state.modes.insert(self.i, self.mode)
        _tensor_mod._DATA_HOOK = self.hook
        return False


class Source:
    """Where a lifted graph input comes from at run time."""

    __slots__ = ("kind", "obj", "label")

    def __init__(self, kind: str, obj, label: str):
        self.kind = kind      # "tensor" (read obj._data), "grad" (obj.grad), "call" (obj())
        self.obj = obj
        self.label = label

    def read(self):
        if self.kind == "tensor":
            return self.obj._data
        if self.kind == "grad":
            g = self.obj.grad
            if g is None:
                raise GraphError(f"compiled graph reads {self.label} but it is None now")
            return g._data
        return self.obj()


class Tracer(_Mode):
    """Concrete tracer for :func:`ember.compile` (see the module docstring)."""

    def __init__(self, name="graph", fullgraph=False, grad_owners=None, labels=None):
        self.b = GraphBuilder(name)
        self.env: dict = {}          # id(array) -> (Var, storage version)
        self.keep: list = []         # keeps traced arrays alive (ids stay unique)
        self.sources: list = []      # (Var, Source) for every graph input
        self.lifted: dict = {}       # id(tensor) -> tensor, for every lifted tensor
        self.grad_owners = grad_owners or {}   # id(grad array) -> parameter
        self.labels = labels or {}   # id(tensor) -> readable name ("model.fc.weight")
        self.fullgraph = fullgraph
        self.broken = None           # (reason, where) after a graph break
        self.randoms = 0
        self.written: dict = {}      # id(array) -> a tensor written in place while tracing
        self.internal: set = set()   # id(array) of tensors made while tracing
        self.gen_floor = _random._next_serial()   # Generators from here on are local

    # ------------------------------------------------------------ values
    def bind(self, t: Tensor, var: Var) -> None:
        a = t._data
        self.env[id(a)] = (var, t._storage.version)
        self.keep.append(a)

    def read(self, t: Tensor) -> Var:
        e = self.env.get(id(t._data))
        if e is not None:
            if e[1] == t._storage.version:
                return e[0]
            return self._refresh(t)
        return self._lift(t)

    def _refresh(self, t: Tensor) -> Var:
        """A stale alias: re-take it as a view of its base's current value."""
        b = t._base
        if b is None or id(b._data) not in self.env:
            raise GraphError(f"compile: a tensor of shape {tuple(t.shape)} was modified "
                             f"outside Ember ops while tracing (at {user_location()})")
        from ..ops.strided import view_geometry, as_strided_p
        geo = view_geometry(t, b)
        if not isinstance(geo, tuple):
            raise GraphError("compile: a view of a non-contiguous base was written in place "
                             "while tracing; clone() the base first")
        out = _dispatch.apply(as_strided_p, (b,), {"size": geo[0], "stride": geo[1],
                                                   "storage_offset": geo[2]})
        v = self.read(out)
        self.bind(t, v)
        return v

    def _lift(self, t: Tensor) -> Var:
        owner = self.grad_owners.get(id(t._data))
        if owner is not None and owner.grad is not None and owner.grad._data is t._data:
            src = Source("grad", owner, self.labels.get(id(owner), "param") + ".grad")
        else:
            src = Source("tensor", t, self.labels.get(id(t), f"tensor{len(self.sources)}"))
        v = self.b.input(t._data.shape, t._dtype, t._device, src.label)
        self.sources.append((v, src))
        self.lifted[id(t)] = t
        self.bind(t, v)
        return v

    def lift_scalar(self, getter, value, dtype, device, label: str) -> Tensor:
        """A 0-d graph input read from ``getter()`` at every run (a learning rate)."""
        from ..ops.factories import tensor
        with self.suspended():
            t = tensor(value, dtype=dtype, device=device)
        self.internal.add(id(t._data))
        v = self.b.input((), dtype, t._device, label)
        self.sources.append((v, Source("call", lambda: np.asarray(getter(), dtype.np), label)))
        self.bind(t, v)
        return t

    # ------------------------------------------------------------ the dispatch mode
    def process(self, op, inputs, params):
        if op.name in DATA_DEPENDENT:
            self.unsupported(f"{op.name} (its output's size depends on the input's values: "
                             f"nonzero, boolean-mask indexing, masked_select)")
            return _dispatch.apply(op, inputs, params)      # tracing stopped: eager
        if op.random and isinstance(g := params.get("generator"), _random.Generator):
            self.on_generator(g)
            if self.broken is not None:
                return _dispatch.apply(op, inputs, params)  # tracing stopped: eager
        with self.suspended():
            out = _dispatch.apply(op, inputs, params)
        ins = tuple(self.read(x) if isinstance(x, Tensor) else x for x in inputs)
        ct = None
        if op.dtype not in ("same", "bool", "int64"):
            ct, _ = _dispatch._compute_dtype(op, op.dtype, inputs, next(
                x for x in inputs if isinstance(x, Tensor)), params)
        self.b.loc = node_location()
        v = self.b.add1(op, ins, dict(params), out._data.shape, out._dtype, out._device, ct)
        self.bind(out, v)
        self.internal.add(id(out._data))
        return out

    def on_write(self, x: Tensor, r: Tensor) -> None:
        """``x`` now holds ``r``'s values (an in-place op was committed)."""
        rv = self.read_value(r)
        b = x._base
        self.written.setdefault(id(x._data), x)
        if b is not None:
            from ..ops.strided import view_geometry, as_strided_scatter_p
            geo = view_geometry(x, b)
            if not isinstance(geo, tuple):
                raise GraphError("compile: an in-place write into a view of a non-contiguous "
                                 "tensor can't be traced; clone() the base first")
            bv = self._current(b)
            nb = self.b.add1(as_strided_scatter_p, (bv, rv), {
                "size": geo[0], "stride": geo[1], "storage_offset": geo[2]},
                b._data.shape, b._dtype, b._device, None)
            self.env[id(b._data)] = (nb, b._storage.version)
            self.keep.append(b._data)
            self.written.setdefault(id(b._data), b)
        self.bind(x, rv)

    def _current(self, t: Tensor) -> Var:
        """``t``'s value just before the write being recorded (no staleness check)."""
        e = self.env.get(id(t._data))
        return e[0] if e is not None else self._lift_old(t)

    def _lift_old(self, t):
        return self._lift(t)

    def read_value(self, r: Tensor) -> Var:
        if id(r._data) in self.env:
            return self.read(r)
        return self.constant(r)

    def on_fill(self, x: Tensor, value) -> None:
        """``x.fill_(value)`` wrote a number into every element."""
        self.on_write(x, self._const_tensor(np.full(x._data.shape, value, x._dtype.np), x))

    def _const_tensor(self, arr, like) -> Tensor:
        """A constant of ``like``'s dtype and device holding host array ``arr`` (copied to
        the device: a GPU array must never hold a NumPy one)."""
        if like._device.type != "cpu":
            from ..device.base import get_backend
            arr = get_backend(like._device).asarray(arr)
        t = _wrap(arr, like._dtype, like._device)
        self.constant(t)
        return t

    def constant(self, t: Tensor) -> Var:
        """``t`` was created inside the traced function from Python data (a factory)."""
        arr = t._data.copy()      # NOTE: a device array stays one (CuPy refuses np.array)
        v = self.b.add1(CONSTANT, (), {"value": arr}, arr.shape, t._dtype, t._device)
        self.bind(t, v)
        self.internal.add(id(t._data))
        return v

    def random(self, t: Tensor, draw, inputs, what: str) -> None:
        """``t`` holds fresh random values: ``draw(*input arrays)`` makes new ones per run."""
        ins = tuple(self.read(x) for x in inputs)
        self.b.loc = node_location()
        v = self.b.add1(RANDOM, ins, {"draw": _device_draw(draw, t._device), "what": what},
                        t._data.shape, t._dtype, t._device)
        self.randoms += 1
        self.bind(t, v)
        self.internal.add(id(t._data))

    def on_generator(self, g) -> None:
        """A draw from ``g``: one created inside the traced function (seeded there, so eager
        draws the same numbers at every call) can't be replayed by drawing on from it. A
        device's default generator made on its first draw is not the function's own."""
        if g._serial >= self.gen_floor and not _random.is_device_default(g):
            self.unsupported("a random draw from an ember.Generator created inside the "
                             "compiled function")

    def on_data_access(self, t: Tensor, what: str) -> None:
        """Python asked for ``t``'s values (``what``: item, bool, numpy...)."""
        if id(t._data) not in self.env:
            return          # not a traced value: reading it changes nothing in the graph
        where = user_location()
        reason = f"{what}() reads a traced tensor's value into Python"
        if self.fullgraph:
            raise GraphBreak(reason, where)
        self.broken = (reason, where)
        self.stop()

    def on_transfer(self, t: Tensor, dev) -> None:
        """``t`` is copied to device ``dev`` (``.to``, ``.cuda()``, ``.cpu()``). A graph has
        no device-copy node yet, and the copy's result would be lifted as a tensor read
        from this call's copy at every run (stale values): a graph break instead, so the
        transfer and what follows run eagerly (or, with ``fullgraph=True``, an error)."""
        self.unsupported(f"a device transfer of a {t._device} tensor to {dev} "
                         f"(.to / .cuda() / .cpu(); move inputs before the compiled call)")

    def unsupported(self, what: str) -> None:
        """An operation the tracer can't record (e.g. randperm) happens under tracing."""
        where = user_location()
        reason = f"{what} can't be captured in a graph"
        if self.fullgraph:
            raise GraphBreak(reason, where)
        self.broken = (reason, where)
        self.stop()


class GraphCapture(_Mode):
    """Abstract tracer: ops on placeholder tensors are recorded, never computed."""

    def __init__(self, name="graph"):
        self.b = GraphBuilder(name)
        self.env: dict = {}
        self.keep: list = []
        self.consts: dict = {}

    def bind(self, t, var):
        self.env[id(t._data)] = var
        self.keep.append(t._data)

    def placeholder(self, shape, dtype, device, name) -> Tensor:
        v = self.b.input(shape, dtype, device, name)
        t = meta_tensor(shape, dtype, device)
        self.bind(t, v)
        return t

    def tensor_for(self, var: Var) -> Tensor:
        t = meta_tensor(var.shape, var.dtype, var.device)
        self.bind(t, var)
        return t

    def read(self, t: Tensor) -> Var:
        v = self.env.get(id(t._data))
        if v is None:
            v = self.constant(t)
        return v

    def process(self, op, inputs, params):
        ins = tuple(self.read(x) if isinstance(x, Tensor) else x for x in inputs)
        shape, dtype, ct = infer(op, ins, params)
        dev = next(x for x in ins if x.__class__ is Var).device
        v = self.b.add1(op, ins, dict(params), shape, dtype, dev, ct)
        return self.tensor_for(v)

    def constant(self, t: Tensor) -> Var:
        arr = t._data.copy()      # NOTE: a device array stays one (CuPy refuses np.array)
        v = self.b.add1(CONSTANT, (), {"value": arr}, arr.shape, t._dtype, t._device)
        self.bind(t, v)
        return v

    def on_write(self, x, r):
        raise GraphError("in-place ops are not supported while building a graph "
                         "(use the out-of-place op)")

    def on_fill(self, x, value):
        self.on_write(x, None)

    def random(self, t, draw, inputs, what):
        ins = tuple(self.read(x) for x in inputs)
        v = self.b.add1(RANDOM, ins, {"draw": _device_draw(draw, t._device), "what": what},
                        t._data.shape, t._dtype, t._device)
        self.bind(t, v)

    def on_data_access(self, t, what):
        if id(t._data) in self.env:
            raise GraphError(f"{what}(): a graph tensor has no value until the graph runs "
                             f"(at {user_location()}); fetch it with Graph.run")

    def unsupported(self, what):
        raise GraphError(f"{what} can't be recorded in a graph")
