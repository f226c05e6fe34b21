"""The kernel IR: elementwise and row-reduction kernels over a scalar expression DAG.

An expression is a small immutable tree (equal subtrees compare equal, so the renderer
shares them: CSE for free). Leaves are input loads (:class:`Load`), constants
(:class:`Const`), the current element's coordinate along an axis (:class:`Index`: an
``arange`` no kernel reads from memory; :class:`Philox`: a random draw's element, computed
where it is used) and, inside reduction kernels, per-row results of earlier reduction
stages (:class:`Row`); nodes (:class:`Apply`) are registry primitives whose ``expr``
template renders them. Every node carries its compute dtype (the dtype its inputs are
cast to, like the dispatcher does) and its output dtype; :func:`typed` fills both in
with the dispatcher's promotion rules when the builder left them out.

Example (GELU-tanh as one kernel over a contiguous float32 vector)::

    x = Load(0)
    y = 0.5 * x * (1 + call("tanh", 0.79788456 * (x + 0.044715 * x ** 3)))
    k = Kernel([InputSpec(float32, (1,))], OutSpec(float32, (n,)), y)
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from .. import dtypes as _dt
from ..dtypes import DType
from ..ops.registry import REGISTRY

#: reduction kinds a :class:`Reduce` stage understands.
REDUCE_KINDS = ("sum", "mean", "amax", "amin")


class Expr:
    """Base of expression nodes; Python operators build :class:`Apply` nodes."""

    __slots__ = ()

    def __add__(self, o): return call("add", self, o)
    def __radd__(self, o): return call("add", o, self)
    def __sub__(self, o): return call("sub", self, o)
    def __rsub__(self, o): return call("sub", o, self)
    def __mul__(self, o): return call("mul", self, o)
    def __rmul__(self, o): return call("mul", o, self)
    def __truediv__(self, o): return call("div", self, o)
    def __rtruediv__(self, o): return call("div", o, self)
    def __pow__(self, o): return call("pow", self, o)
    def __neg__(self): return call("neg", self)


@dataclass(frozen=True)
class Load(Expr):
    """Element of kernel input ``index`` at the current position."""
    index: int


@dataclass(frozen=True)
class Const(Expr):
    """A scalar; ``dtype=None`` is a weak Python scalar (it adopts its consumer's dtype)."""
    value: object
    dtype: DType | None = None
    pytype: str = ""       # NOTE: keeps Const(1), Const(1.0) and Const(True) distinct

    def __post_init__(self):
        object.__setattr__(self, "pytype", type(self.value).__name__)


@dataclass(frozen=True)
class Row(Expr):
    """The result of reduction stage ``index`` for the current row (reduction kernels)."""
    index: int


@dataclass(frozen=True)
class Index(Expr):
    """The current element's coordinate along one axis of the kernel's loop space.

    The axis is given by its length ``size`` and ``inner``, the elements of the
    (C-contiguous) loop space per step along it (the product of the later axes' lengths):
    the value at flat position ``f`` is ``(f // inner) % size``, of integer ``dtype``. So
    it is ``arange(size)`` broadcast along that axis, computed from the loop index
    instead of read from an array (:func:`index_of` builds it from a shape and a dim).

    Why not the dim number: launchers merge and reshape a kernel's loop dims
    (``cuda_launch.collapse``, the emulators' flat loops); the flat position, hence this
    value, survives any of those. A kernel with an ``Index`` leaf has its output shape's
    numbers in its text, so it serves that shape only (graph kernels do; eager kernels,
    which serve every shape, never hold one).
    """
    size: int
    inner: int = 1
    dtype: DType = _dt.int64

    def __post_init__(self):
        if self.size < 1 or self.inner < 1 or self.dtype.category != _dt.INT:
            raise ValueError(f"codegen: Index needs size >= 1, inner >= 1 and an integer "
                             f"dtype, got size={self.size}, inner={self.inner}, "
                             f"dtype={self.dtype}")


#: Philox draw kinds and their ``scalars``: uniform (lo, span), bernoulli (p,), normal
#: (mean, sd) -- :mod:`ember.codegen.cuda_philox`'s entries.
PHILOX_KINDS = {"uniform": 2, "bernoulli": 1, "normal": 2}
#: the dtypes of a :class:`Philox` leaf.
LEAF_DTYPES = (_dt.float32, _dt.float16, _dt.bfloat16)


@dataclass(frozen=True)
class Philox(Expr):
    """Element ``f`` (flat, C order) of a Philox4x32-10 draw over a loop space of
    ``numel`` elements, computed where it is used (no array holds the sample).

    Word ``f % 4`` of counter ``offset + f // 4`` under key ``seed`` (normal: Box-Muller
    on that counter's word pair), then ``kind``'s transform with ``scalars``: the very
    numbers :mod:`ember.codegen.cuda_philox`'s separate kernel writes, so a kernel reading
    this leaf equals one reading that kernel's array bit for bit. ``seed``/``offset`` are
    :class:`Load` s of two 0-d int64 operands (the uint64 words of a ``philox_key`` row);
    ``dtype``: the draw's dtype (float32, float16 or bfloat16: computed in float32 and
    rounded once, a half-precision uniform with the dtype's digits). CUDA renderers and
    the interpreter only.
    """
    kind: str
    seed: Expr
    offset: Expr
    numel: int
    scalars: tuple = ()
    dtype: DType = _dt.float32

    def __post_init__(self):
        if PHILOX_KINDS.get(self.kind) != len(self.scalars) or self.numel < 1 or not (
                isinstance(self.seed, Load) and isinstance(self.offset, Load)) or \
                self.dtype not in LEAF_DTYPES:
            raise ValueError(f"codegen: Philox needs a kind of {PHILOX_KINDS} with that many "
                             f"scalars, numel >= 1, Load seed/offset and a float32/float16/"
                             f"bfloat16 dtype, got {self!r}")


def index_of(shape, dim: int, dtype: DType = _dt.int64) -> Index:
    """The :class:`Index` leaf of loop space ``shape``'s axis ``dim`` (negative counts
    from the end).

    Example:
        >>> index_of((8, 50257), 1)      # arange(50257) along the rows
        Index(size=50257, inner=1, dtype=int64)
    """
    shape = tuple(int(s) for s in shape)
    if not -len(shape) <= dim < len(shape):
        raise IndexError(f"codegen: index_of: dim {dim} out of range for shape {shape}")
    dim %= len(shape)
    inner = 1
    for s in shape[dim + 1:]:
        inner *= s
    return Index(shape[dim], max(inner, 1), dtype)


@dataclass(frozen=True)
class Apply(Expr):
    """Registry op ``op`` on ``args``; ``compute``/``dtype`` are filled in by :func:`typed`."""
    op: str
    args: tuple
    params: tuple = ()
    compute: DType | None = None
    dtype: DType | None = None

    @property
    def kwargs(self) -> dict:
        return dict(self.params)


def call(op: str, *args, compute: DType | None = None, **params) -> Apply:
    """``Apply(op, args)``; Python numbers become weak :class:`Const` leaves.

    Example:
        >>> call("clamp", Load(0), min=0.0, max=6.0)
    """
    if op not in REGISTRY or REGISTRY[op].expr is None:
        raise ValueError(f"codegen: op {op!r} has no C expression template; ops that do: "
                         f"{sorted(n for n, o in REGISTRY.items() if o.expr)}")
    full = {**REGISTRY[op].params, **params}
    return Apply(op, tuple(_leaf(a) for a in args), tuple(sorted(full.items())), compute)


def _leaf(a) -> Expr:
    if isinstance(a, Expr):
        return a
    if isinstance(a, (bool, int, float)):
        return Const(a)
    raise TypeError(f"codegen: cannot use {type(a).__name__} {a!r} in a kernel expression")


# ------------------------------------------------------------------ kernels
@dataclass(frozen=True)
class InputSpec:
    """An input: its dtype and its strides in elements per output dimension (0 = broadcast)."""
    dtype: DType
    strides: tuple


@dataclass(frozen=True)
class OutSpec:
    """The (contiguous) output: dtype and shape."""
    dtype: DType
    shape: tuple


@dataclass(frozen=True)
class Kernel:
    """An elementwise kernel: ``out[idx] = body(inputs[idx])`` over ``out.shape``.

    ``extra`` holds more outputs of the same shape, ``((dtype, expr), ...)``, computed in
    the same loop (equal subexpressions shared): a fusion group whose intermediate values
    are also needed outside it writes them all in one pass.
    """
    inputs: tuple
    out: OutSpec
    body: Expr
    name: str = "ember_ew"
    extra: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "inputs", tuple(self.inputs))
        for i, s in enumerate(self.inputs):
            if len(s.strides) != len(self.out.shape):
                raise ValueError(f"codegen: input {i} has {len(s.strides)} strides for a "
                                 f"{len(self.out.shape)}-d output {self.out.shape}")
        ins = [s.dtype for s in self.inputs]
        object.__setattr__(self, "body", typed(self.body, ins))
        object.__setattr__(self, "extra", tuple((d, typed(e, ins)) for d, e in self.extra))
        _check_index([e for _, e in self.outputs], self.out.shape)

    @property
    def outputs(self) -> tuple:
        """``((dtype, expr), ...)`` of every output, the main one first."""
        return ((self.out.dtype, self.body),) + self.extra


@dataclass(frozen=True)
class Reduce:
    """One reduction stage: ``kind`` over the trailing axes of ``body`` (the prologue)."""
    kind: str
    body: Expr
    dtype: DType | None = None

    def __post_init__(self):
        if self.kind not in REDUCE_KINDS:
            raise ValueError(f"codegen: reduction {self.kind!r} is not one of {REDUCE_KINDS}")


@dataclass(frozen=True)
class ReduceKernel:
    """Row reductions over the last ``naxes`` axes of ``shape``, then an optional epilogue.

    Stages run in order for each row; a stage's prologue may read earlier stages through
    :class:`Row`. Without an epilogue the output is the last stage (shape ``shape[:-naxes]``);
    with one, ``full=False`` evaluates it once per row (it may read rows only) and
    ``full=True`` once per element (output shape ``shape``), e.g. softmax as one kernel::

        m = Reduce("amax", Load(0)); s = Reduce("sum", call("exp", Load(0) - Row(0)))
        ReduceKernel(ins, shape, 1, [m, s], call("exp", Load(0) - Row(0)) / Row(1),
                     OutSpec(float32, shape), full=True)
    """
    inputs: tuple
    shape: tuple
    naxes: int
    stages: tuple
    epilogue: Expr | None
    out: OutSpec
    full: bool = False
    name: str = "ember_red"
    row_dtypes: tuple = field(default=(), compare=False)
    extra: tuple = ()     # more outputs: ((dtype, expr, full), ...); full=False: per row

    def __post_init__(self):
        object.__setattr__(self, "inputs", tuple(self.inputs))
        if not 0 <= self.naxes <= len(self.shape):
            raise ValueError(f"codegen: cannot reduce {self.naxes} axes of shape {self.shape}")
        want = self.shape if self.full else self.shape[:len(self.shape) - self.naxes]
        if tuple(self.out.shape) != tuple(want):
            raise ValueError(f"codegen: reduction output shape {self.out.shape} != {want}")
        ins = [s.dtype for s in self.inputs]
        stages, rows = [], []
        for st in self.stages:
            body = typed(st.body, ins, rows)
            dt = st.dtype or _stage_dtype(st.kind, _strong(dtype_of(body, ins, rows)))
            stages.append(replace(st, body=body, dtype=dt))
            rows.append(dt)
        object.__setattr__(self, "stages", tuple(stages))
        object.__setattr__(self, "row_dtypes", tuple(rows))
        # NOTE: a per-row output (full=False) may read inputs only where they are
        # broadcast along the reduced axes (a layer norm's weight... per row): it reads
        # the row's first element.
        if self.epilogue is not None:
            object.__setattr__(self, "epilogue", typed(self.epilogue, ins, rows))
        extra = []
        for d, e, full in self.extra:
            extra.append((d, typed(e, ins, rows), bool(full)))
        object.__setattr__(self, "extra", tuple(extra))
        _check_index([st.body for st in stages] + [e for _, e, _ in self.outputs
                                                   if e is not None], self.shape)

    @property
    def outputs(self) -> tuple:
        """``((dtype, expr or None = last row, full), ...)``, the main output first."""
        return ((self.out.dtype, self.epilogue, self.full),) + self.extra


def _stage_dtype(kind: str, d: DType) -> DType:
    if kind in ("sum", "mean") and d.category != _dt.FLOAT:
        if kind == "mean":
            raise TypeError(f"codegen: mean of {d} is not supported (PyTorch raises too)")
        return _dt.int64
    return d


def _check_index(exprs, shape) -> None:
    """Every :class:`Index` leaf of ``exprs`` names an axis that tiles loop space
    ``shape`` (``size * inner`` divides its element count); a :class:`Philox` leaf
    draws one element per position of it."""
    numel = 1
    for s in shape:
        numel *= s
    seen: set = set()

    def go(x):
        if x in seen:
            return
        seen.add(x)
        if isinstance(x, Index) and numel and numel % (x.size * x.inner):
            raise ValueError(f"codegen: {x} is no axis of the loop space {tuple(shape)} "
                             f"({numel} elements)")
        if isinstance(x, Philox) and numel and x.numel != numel:
            raise ValueError(f"codegen: a Philox draw of {x.numel} elements in a loop space "
                             f"{tuple(shape)} of {numel}")
        if isinstance(x, Apply):
            for a in x.args:
                go(a)
    for e in exprs:
        go(e)


def has_philox(k) -> bool:
    """Whether kernel ``k`` (elementwise or reduction) holds a :class:`Philox` leaf."""
    exprs = [e for o in k.outputs for e in o[1:2] if e is not None]
    exprs += [st.body for st in getattr(k, "stages", ())]
    return any(_has(e, Philox) for e in exprs)


def _has(e: Expr, cls) -> bool:
    if isinstance(e, cls):
        return True
    return isinstance(e, Apply) and any(_has(a, cls) for a in e.args)


# ------------------------------------------------------------------ dtype inference
def typed(e: Expr, inputs: list, rows: list = ()) -> Expr:
    """``e`` with every :class:`Apply` carrying its compute and output dtype.

    Follows the dispatcher: the op's dtype kind over the argument dtypes, weak Python
    scalars joining only by category (``x * 0.5`` stays float32).
    """
    memo: dict = {}

    def go(x):
        if x in memo:
            return memo[x]
        if isinstance(x, Apply):
            args = tuple(go(a) for a in x.args)
            compute, out = x.compute, x.dtype
            if out is None:
                compute, out = infer(x.op, [dtype_of(a, inputs, rows) for a in args],
                                     x.kwargs, compute)
            r = replace(x, args=args, compute=compute, dtype=out)
        else:
            dtype_of(x, inputs, rows)     # validates the index
            if isinstance(x, Philox) and any(dtype_of(w, inputs) is not _dt.int64
                                             for w in (x.seed, x.offset)):
                raise TypeError(f"codegen: a Philox leaf's seed and offset are int64 "
                                f"inputs, got {x.seed}, {x.offset} of {inputs}")
            r = x
        memo[x] = r
        return r
    return go(e)


def dtype_of(e: Expr, inputs, rows=()):
    """An expression's dtype; a weak constant returns its Python value instead."""
    if isinstance(e, Load):
        if not 0 <= e.index < len(inputs):
            raise IndexError(f"codegen: Load({e.index}) but the kernel has {len(inputs)} inputs")
        return inputs[e.index]
    if isinstance(e, Row):
        if not 0 <= e.index < len(rows):
            raise IndexError(f"codegen: Row({e.index}) read before that stage exists")
        return rows[e.index]
    if isinstance(e, Const):
        return e.dtype if e.dtype is not None else e.value
    return e.dtype          # Apply, Index, Philox


def infer(op: str, args: list, params: dict, compute: DType | None = None):
    """(compute dtype or None = args as they are, output dtype) of ``op`` on ``args``.

    ``args`` holds DTypes and, for weak constants, Python scalars.
    """
    kind = REGISTRY[op].dtype
    strong = [a for a in args if isinstance(a, DType)]
    if op == "cast":
        return None, _dt.as_dtype(params["dtype"])
    if op == "where":
        ct = compute or _dt.result_type(*args[1:])
        return ct, ct
    if op == "clamp":
        kind = "promote"
        args = args + [v for v in (params.get("min"), params.get("max")) if v is not None]
    if kind == "same":
        return None, _const_default(args[0])
    if kind == "bool":
        return None, _dt.bool_
    if callable(kind) or kind not in ("promote", "float", "compare", "integral"):
        if compute is None:
            raise TypeError(f"codegen: give the compute dtype of {op!r} explicitly")
        return compute, compute
    ct = compute or (_dt.result_type(*args) if strong or args else _dt.get_default_dtype())
    if kind == "float" and ct.category != _dt.FLOAT:
        ct = _dt.get_default_dtype()
    if kind == "integral" and ct.category == _dt.FLOAT:
        raise TypeError(f"codegen: {op} needs integer or bool operands, got {args}")
    return ct, (_dt.bool_ if kind == "compare" else ct)


def _const_default(a):
    return a if isinstance(a, DType) else _dt.result_type(a)


# ------------------------------------------------------------------ builder
def from_nodes(inputs, nodes, out_shape, out_dtype=None, name="ember_ew") -> Kernel:
    """A :class:`Kernel` from a list of fused nodes (how a fusion pass calls codegen).

    Args:
        inputs: ``[InputSpec(dtype, strides)]`` of the kernel's inputs.
        nodes: ``[(op_name, refs, params, compute_dtype)]`` in topological order; a ref is
            ``("in", i)`` (kernel input i), ``("node", k)`` (node k's result), an
            :class:`Expr` or a Python number. The last node is the output.
        out_shape: the output shape; ``out_dtype`` defaults to the last node's dtype.

    Example:
        >>> from_nodes([InputSpec(float32, (1,))], [("mul", [("in", 0), 2.0], {}, None),
        ...            ("exp", [("node", 0)], {}, None)], (n,))
    """
    built: list = []
    for k, node in enumerate(nodes):
        op, refs, params, compute = (tuple(node) + (None, None))[:4]
        args = [_ref(r, built, k) for r in refs]
        built.append(call(op, *args, compute=compute, **dict(params or {})))
    if not built:
        raise ValueError("codegen: from_nodes needs at least one node")
    body = typed(built[-1], [s.dtype for s in inputs])
    return Kernel(tuple(inputs), OutSpec(out_dtype or body.dtype, tuple(out_shape)), body,
                  name)


def _ref(r, built, k):
    if isinstance(r, tuple) and len(r) == 2 and r[0] in ("in", "node", "row"):
        tag, i = r
        if tag == "in":
            return Load(i)
        if tag == "row":
            return Row(i)
        if not 0 <= i < k:
            raise IndexError(f"codegen: node {k} refers to node {i}, which is not before it")
        return built[i]
    return _leaf(r)


def nodes_of(e: Expr) -> list:
    """The distinct :class:`Apply` nodes of ``e`` in topological order."""
    seen, order = set(), []

    def go(x):
        if x in seen or not isinstance(x, Apply):
            return
        seen.add(x)
        for a in x.args:
            go(a)
        order.append(x)
    go(e)
    return order


def _strong(d) -> DType:
    return d if isinstance(d, DType) else _dt.result_type(d)
