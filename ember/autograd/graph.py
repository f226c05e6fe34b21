"""Nodes of the define-by-run autograd graph.

Every tensor produced by a differentiable op while grad mode is on points at
the :class:`Node` that made it (``grad_fn``). A node keeps the op, its params,
the edges to the nodes (or leaf tensors) of its inputs, the input metadata the
engine needs to reduce gradients back to input shapes, and the values the VJP
rule asked to save, with their version numbers so that in-place writes after
saving are caught.
"""
from __future__ import annotations

import itertools

from ..tensor import Tensor as _Tensor
from .grad_mode import state

_seq = itertools.count()


class ShapeOnly:
    """Stands in for an input the VJP rule did not ask to save: shape and dtype only."""

    __slots__ = ("shape", "dtype", "device")

    def __init__(self, shape, dtype, device):
        self.shape, self.dtype, self.device = shape, dtype, device

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        return len(self.shape)


#: Installed by ``ember.ops.inplace``: rebuilds the grad_fn of a view whose base was
#: written in place after the view was made (PyTorch regenerates such views the same way).
refresh_view = None


def view_grad_fn(x):
    """``x._grad_fn``, rebuilt first if ``x`` is a stale view of an in-place-modified base."""
    vv = x._view_version
    if vv is not None and vv != x._storage.version and refresh_view is not None:
        refresh_view(x)
    return x._grad_fn


class EngineOp:
    """Base of ops that exist only for the engine (a custom ``Function``'s application, a
    checkpoint): the attributes it reads from a registry op, with the values such an op has.
    A subclass provides ``name`` and its own ``vjp``."""

    save = None
    view = False
    elementwise = False
    expr = None
    differentiable = True
    eager_vjp = None
    params: dict = {}


class Node:
    """One recorded op application (``grad_fn``)."""

    __slots__ = ("op", "params", "next", "saved", "versions", "in_meta", "out_saved",
                 "seq", "pre_hooks", "retain", "stack", "nout", "name_", "__weakref__")

    def __init__(self, op, params, inputs, saved_inputs: bool, out=None, nout: int = 1):
        self.op = op
        self.params = params
        self.nout = nout
        self.pre_hooks = None   # {out_nr: [hooks]} from register_hook on non-leaf outputs
        self.retain = None      # {out_nr: weakref to tensor} for retain_grad()
        self.stack = None
        self.name_ = None
        nxt = []
        meta = []
        # NOTE: one loop fills the edges, the input metadata and (when the inputs are saved)
        # their versions; Python numbers are recognised by class before any isinstance.
        vers = [] if saved_inputs else None
        for x in inputs:
            c = x.__class__
            if c is not _Tensor and (c is float or c is int or not isinstance(x, _Tensor)):
                nxt.append(None)             # a Python scalar (or an absent optional input)
                meta.append(None)
                if vers is not None:
                    vers.append(None)
                continue
            meta.append((x._data.shape, x._dtype, x._device))
            if x._requires_grad:
                fn = x._grad_fn if x._base is None else view_grad_fn(x)
                nxt.append((x, 0) if fn is None else (fn, x._out_nr))
            else:
                nxt.append(None)
            if vers is not None:
                vers.append(x._storage.version)
        self.next = nxt
        self.in_meta = meta
        self.saved = inputs if saved_inputs else None
        self.versions = vers
        self.out_saved = None
        if out is not None:
            # NOTE: keep the output's data, not the Tensor: Tensor -> Node -> Tensor would be a
            # reference cycle that only the cyclic GC frees, holding activations too long.
            # The 7th field is the output's forward-AD tangents, filled in by
            # forward_ad.push_tangents after this node exists (forward-over-reverse).
            self.out_saved = (out._data, out._storage, out._dtype, out._device,
                              out._storage.version, out._base, None)
        if state.anomaly:
            from .anomaly import capture_stack
            self.stack = capture_stack()
        # NOTE: numbered last: resolving an edge may create nodes (a stale view's rebuilt
        # grad_fn), and the engine relies on every node outnumbering its inputs' nodes.
        self.seq = next(_seq)

    def name(self) -> str:
        if self.name_ is not None:
            return self.name_
        n = self.op.name
        return "".join(w.capitalize() for w in n.split("_")) + "Backward"

    def __repr__(self) -> str:
        return f"<{self.name()} object>"

    @property
    def next_functions(self):
        """((node_or_AccumulateGrad, output_nr), ...) like PyTorch."""
        out = []
        for e in self.next:
            if e is None:
                out.append((None, 0))
            elif e[0].__class__ is Node or isinstance(e[0], Node):
                out.append(e)
            else:
                out.append((AccumulateGrad(e[0]), 0))
        return tuple(out)

    def register_hook(self, fn):
        """Hook ``fn(grad_inputs, grad_outputs)`` is not supported; use Tensor.register_hook."""
        raise NotImplementedError("Node.register_hook: use Tensor.register_hook instead")


class AccumulateGrad:
    """The sink of a leaf tensor in ``next_functions``."""

    def __init__(self, variable):
        self.variable = variable

    def name(self) -> str:
        return "AccumulateGrad"

    def __repr__(self) -> str:
        return "<AccumulateGrad object>"


def _version_of(x):
    """The version counter of a tensor's storage, or None for a Python scalar."""
    st = getattr(x, "_storage", None)
    return None if st is None else st.version
