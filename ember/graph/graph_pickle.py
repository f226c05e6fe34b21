"""Optimised graphs to bytes and back, for the on-disk graph cache (:mod:`.disk_cache`).

A graph is pickled with everything that is not plain data replaced by a name:

* registry primitives by their registry name, dtypes and devices by name;
* graph-only ops (``sum_rows``, ``sdpa_grad_stacked``, ``constant``...) by the module and
  attribute that define them (they are module-level singletons);
* a fused kernel (:class:`~ember.graph.passes.fuse_lower.FusedOp`) by its kernel IR and the C
  text it was compiled from: loading compiles nothing new -- the text finds the same entry
  of the kernel cache, which has its own checks -- and renders nothing.

Anything else that would be pickled by reference (a function, a lambda in a param, a class
outside Ember's graph and kernel IR) makes the graph *not portable*
(:class:`NotPortable`): it is simply not cached on disk. Loading goes through an
unpickler that resolves only the same short list of names, so the bytes can name no other
callable. (The cache folder is trusted exactly like the kernel cache beside it, whose
shared objects run code when loaded; the allow-list is a second fence, not the first.)
"""
from __future__ import annotations

import hashlib
import importlib
import io
import pickle
import sys
import types

import numpy as np

from ..device.base import device as _device
from ..dtypes import DType, as_dtype
from .ir import Graph, GraphOp, Node, Var

__all__ = ["NotPortable", "dumps", "loads", "graph_bytes"]

FORMAT = 1


class NotPortable(ValueError):
    """The graph holds something that can't be written to the graph cache."""


#: classes the bytes may name: Ember's graph and kernel IR, NumPy's arrays and scalars.
_EMBER_MODULES = ("ember.graph.ir", "ember.codegen.ir")
_NUMPY_FUNCS = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray",
                                                            "_reconstruct"),
                ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
                ("numpy._core.numeric", "_frombuffer"), ("numpy.core.numeric", "_frombuffer")}
_BUILTINS = frozenset({"slice", "complex", "set", "frozenset", "range", "bytearray"})


def _allowed(module: str, name: str, obj) -> bool:
    """Whether a pickle may name ``module.name`` (``obj``: what it resolves to)."""
    if module == "builtins":
        return name in _BUILTINS
    if (module, name) in _NUMPY_FUNCS:
        return True
    if not isinstance(obj, type):
        return False
    if module in _EMBER_MODULES:
        return True
    if module.split(".")[0] in ("numpy", "ml_dtypes"):
        return issubclass(obj, (np.ndarray, np.dtype, np.generic))
    return False


#: constants bigger than this enter a key by their SHA-256 (the bytes of the graph itself
#: are never loaded, only compared)
_DIGEST_BYTES = 1 << 16
_GRAPH_OPS: dict = {}     # id(op) -> (module, attribute) of the module-level graph ops


def _graph_op_names() -> dict:
    """``{id(op): (module, attribute)}`` for every module-level GraphOp in Ember's loaded
    modules (refreshed when a module was imported since)."""
    if _GRAPH_OPS.get("_n") != len(sys.modules):
        for name, mod in list(sys.modules.items()):
            if name.startswith("ember.") and mod is not None:
                for attr, v in list(vars(mod).items()):
                    if isinstance(v, GraphOp) and type(v).__name__ != "FusedOp":
                        _GRAPH_OPS.setdefault(id(v), (name, attr))
        _GRAPH_OPS["_n"] = len(sys.modules)
    return _GRAPH_OPS


#: types pickled as themselves (never given a persistent name)
_NOT_NAMED = frozenset({int, float, str, bool, type(None), tuple, list, dict, bytes, slice,
                        Var, Node, Graph, np.ndarray})


class _Pickler(pickle.Pickler):
    def __init__(self, f, fused: list | None):
        super().__init__(f, protocol=5)
        self.fused = fused          # None: a raw graph (no fused kernels expected)
        self._fused_ix: dict = {}

    def persistent_id(self, obj):
        if type(obj) in _NOT_NAMED:          # NOTE: called for every object: the common
            return None                      # ones (vars, nodes, numbers...) leave at once
        from ..ops.registry import REGISTRY, Op
        if isinstance(obj, DType):
            return ("dtype", obj.name)
        if isinstance(obj, _device):
            return ("device", str(obj))
        if isinstance(obj, Op):
            if REGISTRY.get(obj.name) is not obj:
                raise NotPortable(f"op {obj.name} is not the registry's")
            return ("op", obj.name)
        if isinstance(obj, GraphOp):
            if type(obj).__name__ == "FusedOp" and self.fused is not None:
                i = self._fused_ix.get(id(obj))
                if i is None:
                    i = self._fused_ix[id(obj)] = len(self.fused)
                    self.fused.append(obj)
                return ("fused", i)
            where = _graph_op_names().get(id(obj))
            if where is None:
                raise NotPortable(f"graph op {obj.name} is not a module-level op")
            return ("gop",) + where
        return None

    def reducer_override(self, obj):
        if isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType)):
            module = getattr(obj, "__module__", None) or ""
            name = getattr(obj, "__qualname__", getattr(obj, "__name__", ""))
            if not _allowed(module, name, obj):
                raise NotPortable(f"{module}.{name} can't be named in the graph cache")
        elif isinstance(obj, (types.MethodType, types.ModuleType, types.CodeType)):
            raise NotPortable(f"a {type(obj).__name__} can't be written to the graph cache")
        return NotImplemented


class _Unpickler(pickle.Unpickler):
    def __init__(self, f, fused: list):
        super().__init__(f)
        self.fused = fused
        self._refs: dict = {}       # pid -> object: a W3 graph names ~8,000 dtypes/ops

    def find_class(self, module, name):
        try:
            obj = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as e:
            raise pickle.UnpicklingError(f"graph cache: {module}.{name}: {e}") from None
        if not _allowed(module, name, obj):
            raise pickle.UnpicklingError(f"graph cache: {module}.{name} is not allowed")
        return obj

    def persistent_load(self, pid):
        try:
            return self._refs[pid]
        except (KeyError, TypeError):
            pass
        obj = self._resolve(pid)
        if pid[0] != "fused":
            self._refs[pid] = obj
        return obj

    def _resolve(self, pid):
        from ..ops.registry import REGISTRY
        kind = pid[0]
        if kind == "dtype":
            return as_dtype(pid[1])
        if kind == "device":
            return _device(pid[1])
        if kind == "op":
            return REGISTRY[pid[1]]
        if kind == "fused":
            return self.fused[pid[1]]
        if kind == "gop" and pid[1].startswith("ember."):
            op = getattr(importlib.import_module(pid[1]), pid[2])
            if isinstance(op, GraphOp):
                return op
        raise pickle.UnpicklingError(f"graph cache: unknown reference {pid!r}")


def graph_bytes(graph) -> bytes:
    """The traced graph as canonical bytes: equal bytes mean equal graphs (the cache key).

    Every node's op (by name), inputs (var ids, scalars with their types), params, output
    vars (id, shape, dtype, device, name), compute dtype and source line; the inputs and
    outputs. Constants bigger than 64 KiB enter by their SHA-256.

    Raises:
        NotPortable: a param with no portable spelling (a callable, an object).
    """
    from ..ops.registry import REGISTRY, Op
    out = [("in",) + tuple(_var(v) for v in graph.inputs)]
    for n in graph.nodes:
        op = n.op
        if isinstance(op, Op) and REGISTRY.get(op.name) is op:
            name = op.name
        elif isinstance(op, GraphOp) and id(op) in _graph_op_names():
            name = _graph_op_names()[id(op)]
        else:
            raise NotPortable(f"op {op.name} has no portable name")
        ins = tuple(x.id if x.__class__ is Var else _value(x) for x in n.inputs)
        out.append((name, ins, _value(n.params), tuple(_var(v) for v in n.outs),
                    n.ct.name if n.ct is not None else None, n.loc))
    out.append(("out",) + tuple(v.id for v in graph.outputs))
    return repr(out).encode()


def _var(v) -> tuple:
    return (v.id, v.shape, v.dtype.name, str(v.device), v.name)


_PLAIN = (int, str, bool, type(None), bytes)


def _value(x):
    """A canonical, type-tagged spelling of a param value (see :func:`graph_bytes`)."""
    t = type(x)
    if t in _PLAIN:
        return x
    if t is float or t is complex:
        return (t.__name__, repr(x))
    if t is tuple or t is list:
        return (t.__name__,) + tuple(_value(v) for v in x)
    if t is dict:
        return ("dict",) + tuple((k, _value(v)) for k, v in x.items())
    if t is slice:
        return ("slice", _value(x.start), _value(x.stop), _value(x.step))
    if isinstance(x, DType):
        return ("dtype", x.name)
    if isinstance(x, _device):
        return ("device", str(x))
    if t is np.ndarray:
        # NOTE: bytes viewed as uint8: a memoryview refuses ml_dtypes' bfloat16 ('E')
        data = np.ascontiguousarray(x).reshape(-1).view(np.uint8).data
        body = hashlib.sha256(data).hexdigest() if x.nbytes > _DIGEST_BYTES else bytes(data)
        return ("ndarray", x.dtype.str, x.shape, body)
    if isinstance(x, np.generic):
        return ("scalar", x.dtype.str, x.tobytes())
    raise NotPortable(f"a param of type {t.__name__} has no portable spelling")


def dumps(payload: dict) -> bytes:
    """``payload`` (holding an optimised graph under ``"graph"``) as bytes.

    Raises:
        NotPortable: something in it has no portable name (see the module doc).
    """
    fused: list = []
    buf = io.BytesIO()
    try:
        _Pickler(buf, fused).dump(payload)
        outs = {id(n.op): [(o.shape, o.dtype) for o in n.outs] for n in payload["graph"].nodes
                if any(n.op is f for f in fused)}
        specs = [_fused_spec(op, outs[id(op)]) for op in fused]
        head = io.BytesIO()
        _Pickler(head, None).dump(specs)
    except (pickle.PicklingError, TypeError, AttributeError, KeyError) as e:
        raise NotPortable(str(e)) from None
    h = head.getvalue()
    return FORMAT.to_bytes(2, "little") + len(h).to_bytes(8, "little") + h + buf.getvalue()


def _fused_spec(op, outs) -> tuple:
    """What rebuilds fused op ``op``: kernel IR, ops, output metas, how it takes ``out=``,
    and the library text, layout key and symbol it was compiled as."""
    origin = getattr(op.compiled, "origin", None)
    if origin is None:
        raise NotPortable("a fused kernel without a compiled library (no C compiler?)")
    return (op.kernel, op.ops, outs, op.accepts_out, op.accepts_outs, origin)


def rebuild_fused(specs) -> list:
    """The fused ops of ``specs`` (:func:`_fused_spec`), their libraries loaded through the
    kernel cache (which verifies them, or compiles the text again if they are gone)."""
    from ..codegen import cache
    from ..codegen.runtime import CompiledKernel
    from ..codegen.toolchain import find_compiler
    from .passes.fuse_lower import FusedOp, Lowered
    cc = find_compiler()
    if cc is None:
        raise ValueError("graph cache: fused kernels but no C compiler")
    libs: dict = {}
    out = []
    for kernel, ops, outs, acc, accs, (text, key, sym) in specs:
        lib = libs.get(id(text))
        if lib is None:
            lib = libs[id(text)] = cache.load(text, cc)
        ck = CompiledKernel(kernel, cc)
        ck._install(key, lib, sym)
        ck.origin = (text, key, sym)
        ovars = [var_like(shape, dt) for shape, dt in outs]
        space = ovars[0].shape if "inplace" in (acc, accs) else (-1,)
        op = FusedOp(Lowered(kernel, (), ovars, ops, types.SimpleNamespace(space=space)), ck)
        if (op.accepts_out, op.accepts_outs) != (acc, accs):
            raise ValueError("graph cache: a fused kernel's buffer rules changed")
        out.append(op)
    return out


def loads(data: bytes) -> dict:
    """The payload :func:`dumps` wrote, fused kernels loaded (:func:`rebuild_fused`).

    Raises:
        pickle.UnpicklingError, ValueError: the bytes are not a payload of this format.
    """
    if int.from_bytes(data[:2], "little") != FORMAT:
        raise ValueError("graph cache: another format")
    n = int.from_bytes(data[2:10], "little")
    specs = _Unpickler(io.BytesIO(data[10:10 + n]), []).load()
    fused = rebuild_fused(specs)
    return _Unpickler(io.BytesIO(data[10 + n:]), fused).load()


def var_like(shape, dtype) -> Var:
    """A stand-in var of ``shape`` and ``dtype`` (fused ops read only those)."""
    return Var(-1, shape, dtype, None)
