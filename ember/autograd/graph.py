"""Nodes of the define-by-run autograd graph.

Every tensor produced by a differentiable op while grad mode is on points at
the :class:`Node` that made it (``grad_fn``). A node keeps the op, its params,
the edges to the nodes (or leaf tensors) of its inputs, the input metadata the
engine needs to reduce gradients back to input shapes, and the values the VJP
rule asked to save, with their version numbers so that in-place writes after
saving are caught.

It also holds ``torch.autograd.graph``'s saved-tensor hooks (:class:`saved_tensors_hooks`,
:class:`save_on_cpu`, :class:`disable_saved_tensors_hooks`): inside such a region a node
keeps what the pack hook returned for each tensor it saves, and its VJP sees what the
unpack hook makes of it.
"""
from __future__ import annotations

import itertools
import weakref

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
                 "seq", "pre_hooks", "retain", "stack", "nout", "name_", "packed",
                 "__weakref__")

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
        self.packed = False
        if state.saved_hooks and (saved_inputs or out is not None):
            _pack_node(self, out)
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
                out.append((accumulate_grad(e[0]), 0))
        return tuple(out)

    def register_prehook(self, fn):
        """Run ``fn(grad_outputs) -> tuple | None`` before this node's backward, after its
        outputs' tensor hooks; a tuple returned replaces the gradients
        (``torch.autograd.graph.Node.register_prehook``). Returns a removable handle."""
        return _node_hook(self, "prehook", fn)

    def register_hook(self, fn):
        """Run ``fn(grad_inputs, grad_outputs) -> tuple | None`` after this node's backward;
        a tuple returned replaces ``grad_inputs`` (``Node.register_hook``). Returns a
        removable handle."""
        return _node_hook(self, "hook", fn)


def _node_hook(node, kind: str, fn):
    """Node-level hooks live in ``pre_hooks`` under the keys ``"prehook"``/``"hook"`` beside
    the outputs' tensor hooks (int keys), so the engine's hook-free fast path stays one
    check."""
    from .hooks import _RemovableHandle
    if node.pre_hooks is None:
        node.pre_hooks = {}
    lst = node.pre_hooks.setdefault(kind, [])
    lst.append(fn)
    return _RemovableHandle(lst, fn)


class AccumulateGrad:
    """The sink of a leaf tensor in ``next_functions``."""

    def __init__(self, variable):
        self.variable = variable

    def name(self) -> str:
        return "AccumulateGrad"

    def register_hook(self, fn):
        """Run ``fn((), (grad,))`` after the leaf's gradient was accumulated, ``grad`` being
        the leaf's ``.grad`` then (PyTorch passes this pass's incoming gradient: the same
        unless ``.grad`` already held one). The hook behind DDP-style gradient hooks
        (``p.expand_as(p).grad_fn.next_functions[0][0].register_hook``)."""
        return self.variable.register_post_accumulate_grad_hook(
            lambda t: fn((), (t.grad,)))

    def register_prehook(self, fn):
        """Run ``fn((grad,)) -> tuple | None`` on the leaf's gradient before it is
        accumulated; a tuple returned replaces it."""
        def hook(g):
            r = fn((g,))
            return None if r is None else r[0]
        return self.variable.register_hook(hook)

    def __repr__(self) -> str:
        return "<AccumulateGrad object>"


#: id(leaf) -> its AccumulateGrad while someone holds that node (which holds the leaf, so
#: the id stays the leaf's): two edges of one leaf name the same node, as in PyTorch
_accumulators: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()


def accumulate_grad(leaf) -> AccumulateGrad:
    """The ``AccumulateGrad`` node of ``leaf`` (the same object while anyone holds it)."""
    node = _accumulators.get(id(leaf))
    if node is None:
        node = _accumulators[id(leaf)] = AccumulateGrad(leaf)
    return node


def _version_of(x):
    """The version counter of a tensor's storage, or None for a Python scalar."""
    st = getattr(x, "_storage", None)
    return None if st is None else st.version


# --- saved-tensor hooks (torch.autograd.graph) ------------------------------------------

class _AliasOp(EngineOp):
    """The edge of a packed tensor: under ``create_graph`` its unpacked value passes its
    gradient on to where the saved tensor came from (a leaf, or a node's output)."""

    name = "alias"

    @staticmethod
    def vjp(g, out, x):
        return (g,)


class Packed:
    """A saved tensor as a pack hook left it: the hook's result, the unpack hook to call
    and, for an input requiring grad, the edge its unpacked value is re-attached to under
    ``create_graph`` (an output is re-attached to its own node)."""

    __slots__ = ("obj", "unpack", "edge")

    def __init__(self, x, pack, unpack, edge_too: bool):
        self.unpack = unpack
        # NOTE: hooks run without grad recording and without hooks (a pack hook's own ops
        # save nothing), as data movers; the edge below carries the graph instead
        prev = state.grad_enabled, state.saved_hooks
        state.grad_enabled, state.saved_hooks = False, []
        try:
            self.obj = pack(x)
        finally:
            state.grad_enabled, state.saved_hooks = prev
        self.edge = Node(_AliasOp, {}, [x], False) if edge_too and x._requires_grad else None

    def get(self, node=None, out_nr: int = 0, create_graph: bool = False):
        """The unpacked tensor; under ``create_graph`` linked to the saved tensor's graph
        (``node``: the node whose output this was)."""
        prev = state.grad_enabled, state.saved_hooks
        state.grad_enabled, state.saved_hooks = False, []
        try:
            t = self.unpack(self.obj)
        finally:
            state.grad_enabled, state.saved_hooks = prev
        if not isinstance(t, _Tensor):
            raise TypeError(f"saved_tensors_hooks: the unpack hook must return a Tensor, got "
                            f"{type(t).__name__}")
        if create_graph and (node is not None or self.edge is not None):
            from ..tensor import _alias
            t = _alias(t, False)
            if node is not None:
                t._grad_fn, t._out_nr = node, out_nr
            else:
                t._grad_fn, t._out_nr = self.edge, 0
            t._requires_grad = True
        return t


def _pack_node(node, out) -> None:
    """Replace what ``node`` saved by the innermost pack hook's results."""
    pack, unpack = state.saved_hooks[-1]
    if node.saved is not None:
        node.saved = [Packed(x, pack, unpack, True) if isinstance(x, _Tensor) else x
                      for x in node.saved]
        node.versions = [None] * len(node.saved)
    if out is not None:
        node.out_saved = Packed(out, pack, unpack, False)
    node.packed = True


def unpack_node(node, create_graph: bool):
    """(inputs, output) a packed node's VJP reads, through the unpack hook."""
    inputs = [x.get(create_graph=create_graph) if x.__class__ is Packed else x
              for x in node.saved] if node.saved is not None else \
        [None if m is None else ShapeOnly(*m) for m in node.in_meta]
    out = None
    if node.out_saved is not None:
        out = node.out_saved.get(node, 0, create_graph)
    return inputs, out


class saved_tensors_hooks:
    """Context manager: tensors autograd saves for backward inside it go through
    ``pack_hook(tensor) -> object`` when saved and ``unpack_hook(object) -> tensor`` when
    the backward reads them (``torch.autograd.graph.saved_tensors_hooks``). The innermost
    region's pair applies. The hooks run without grad recording; ``unpack_hook`` must
    return a tensor with the saved one's values (a gradient through it under
    ``create_graph`` flows to the saved tensor's origin).

    Example:
        >>> with ember.autograd.graph.saved_tensors_hooks(lambda t: t.numpy().copy(),
        ...                                               ember.from_numpy):
        ...     y = (x * x).sum()          # x saved as a NumPy copy
        >>> y.backward()
    """

    def __init__(self, pack_hook, unpack_hook):
        self.pack_hook, self.unpack_hook = pack_hook, unpack_hook

    def __enter__(self):
        if _disabled:
            raise RuntimeError(_disabled[-1])
        state.saved_hooks.append((self.pack_hook, self.unpack_hook))
        return self

    def __exit__(self, *exc):
        state.saved_hooks.pop()
        return False


class save_on_cpu(saved_tensors_hooks):
    """Saved tensors go to host memory in the forward and back to their device when the
    backward reads them (``torch.autograd.graph.save_on_cpu``): activation memory on a GPU
    for copies each way. ``pin_memory=True`` packs into page-locked memory (asynchronous
    copies). On the CPU it keeps the tensor as it is.

    Example:
        >>> with ember.autograd.graph.save_on_cpu(pin_memory=True):
        ...     loss = model(x.cuda()).sum()
        >>> loss.backward()
    """

    def __init__(self, pin_memory: bool = False, device_type: str = "cuda"):
        def pack(t):
            if t.device.type == "cpu":
                return (t.device, t)
            host = t.to("cpu", non_blocking=pin_memory)
            return (t.device, host.pin_memory() if pin_memory and not host.is_pinned()
                    else host)

        def unpack(packed):
            device, t = packed
            return t if t.device == device else t.to(device, non_blocking=pin_memory)
        super().__init__(pack, unpack)
        self.device_type = device_type


def increment_version(tensor) -> None:
    """Bump the version counter of ``tensor`` (or of each tensor in an iterable), as an
    in-place write would (``torch.autograd.graph.increment_version``): for code that
    writes a tensor's memory behind autograd's back, so a saved copy of it is refused."""
    for t in (tensor,) if isinstance(tensor, _Tensor) else tensor:
        t._storage.version += 1


_disabled: list = []


class disable_saved_tensors_hooks:
    """Context manager in which :class:`saved_tensors_hooks` (and entering one) raise
    ``RuntimeError(error_message)`` (``torch.autograd.graph.disable_saved_tensors_hooks``):
    for code whose saved tensors must stay as they are."""

    def __init__(self, error_message: str):
        self.error_message = error_message

    def __enter__(self):
        if state.saved_hooks:
            raise RuntimeError(self.error_message)
        _disabled.append(self.error_message)
        return self

    def __exit__(self, *exc):
        _disabled.pop()
        return False


_EDGE_NAMES = ("GradientEdge", "get_gradient_edge", "register_multi_grad_hook")


def __getattr__(name):
    # NOTE: torch.autograd.graph's gradient-edge names live in edges.py, a layer above this
    # module (they build on the engine): bound on first use
    if name in _EDGE_NAMES:
        from . import edges
        return getattr(edges, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_EDGE_NAMES))
