"""Scalar expressions to C statements: one ``const`` temporary per distinct node.

Each :class:`~ember.codegen.ir.Apply` is rendered from its registry template with its
arguments cast to the node's compute type and its params as typed literals; function
names are then specialised to the compute type (``exp`` -> ``expf`` in float, ``fabs`` ->
``ember_abs_i64`` for integers, ``floor_div`` -> ``ember_floor_div_f32``...). Temporaries
make every call unconditional, so GCC can use libmvec's SIMD variants in the loops.

A few templates cannot express C's integer/bool semantics in one string (shifts past the
width, ``~`` of a bool); :data:`OVERRIDES` replaces them here (the registry is read only to
this package). NaN semantics are the templates' own (``relu``, ``sign``, ``clamp`` keep NaN).
"""
from __future__ import annotations

import math
import re

from .. import dtypes as _dt
from ..dtypes import DType
from ..ops.registry import REGISTRY
from .ir import Apply, Const, Index, Load, Philox, Row, dtype_of

_F = _dt.FLOAT

#: compute C type of each dtype (float16/bfloat16 compute in float, stored narrow).
CTYPE = {"float32": "float", "float64": "double", "float16": "float", "bfloat16": "float",
         "int64": "int64_t", "int32": "int32_t", "int16": "int16_t", "int8": "int8_t",
         "uint8": "uint8_t", "bool": "_Bool"}
#: storage C type (what a pointer to the array's elements points to).
STORAGE = {**CTYPE, "float16": "uint16_t", "bfloat16": "uint16_t", "bool": "uint8_t"}
CUDA_STORAGE = {**STORAGE, "float16": "__half", "bool": "bool"}

_MATH = ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "sin", "cos", "tan",
         "asin", "acos", "atan", "sinh", "cosh", "tanh", "erf", "erfc", "fabs", "floor",
         "ceil", "trunc", "rint", "pow", "atan2", "hypot", "copysign", "fmod", "fmin", "fmax")
_HELPERS = ("floor_div", "trunc_div", "pymod", "erfinv", "clamp")
_INT_MAP = {"fabs": "ember_abs_i64", "pow": "ember_pow_i64", "fmod": "ember_fmod_i64",
            "fmin": "ember_min_i64", "fmax": "ember_max_i64", "floor": "", "ceil": "",
            "trunc": "", "rint": "", "isnan": "ember_isnan_i64", "isinf": "ember_isinf_i64",
            "isfinite": "ember_isfinite_i64", "signbit": "ember_signbit_i64"}
_CALL = re.compile(r"(?<![\w.])([A-Za-z_]\w*)\s*\(")

# (op, "float" | "int" | "bool") -> template replacing the registry's.
# NaN semantics live in the registry's templates themselves; what is left here is C's
# integer/bool semantics that no single template can express.
OVERRIDES = {
    # NOTE: ~ on a _Bool promotes to int (~1 == -2, true); NumPy's invert of a bool is not.
    ("bitwise_not", "bool"): "(!{0})",
    ("bitwise_left_shift", "int"): "ember_shl_i64({0}, {1})",
    ("bitwise_right_shift", "int"): "ember_shr_i64({0}, {1})",
    ("neg", "int"): "ember_neg_i64({0})",
}


#: C templates of ``x ** e`` for the exponents ops/arith.POW_FAST computes without pow.
_POW_C = {1: "({0})", 2: "({0} * {0})", 3: "({0} * {0} * {0})", 0.5: "sqrt({0})",
          -1: "(1 / {0})", -2: "(1 / ({0} * {0}))", -0.5: "(1 / sqrt({0}))"}


def kind_of(d: DType) -> str:
    return "float" if d.category == _F else "int" if d.category == _dt.INT else "bool"


def suffix(d: DType) -> str:
    if d.category != _F:
        return "i64"
    return "f64" if d is _dt.float64 else "f32"


def specialise(template: str, d: DType) -> str:
    """Rename the libm/helper calls of ``template`` for compute dtype ``d``."""
    sfx = suffix(d)

    def sub(m):
        name = m.group(1)
        if name in _HELPERS:
            return f"ember_{name}_{sfx}("
        if sfx == "i64" and name in _INT_MAP:
            return _INT_MAP[name] + "("
        if sfx == "f32" and name in ("tanh", "erf"):
            return f"ember_{name}_f32("      # NOTE: Ember's own (prelude.py says why)
        if sfx == "f32" and name in _MATH:
            return name + "f("
        return m.group(0)
    return _CALL.sub(sub, template)


def literal(v, d: DType | None) -> str:
    """A C literal of Python scalar ``v`` as dtype ``d`` (``None``: its Python type)."""
    if d is None:
        d = _dt.result_type(v)
    ct = CTYPE[d.name]
    if d.category == _F:
        v = float(v)
        if math.isnan(v):
            return f"(({ct})NAN)"
        if math.isinf(v):
            return f"(({ct})INFINITY)" if v > 0 else f"(({ct})-INFINITY)"
        return f"(({ct}){v!r})"      # NOTE: Python float -> C type, like NumPy's cast
    if d.category == _dt.BOOL:
        return "1" if v else "0"
    v = int(v)
    return f"(({ct})({v}LL))" if v != -2**63 else f"(({ct})(-9223372036854775807LL-1))"


def _param_literal(op: str, name: str, v, d: DType, ctype: dict = CTYPE) -> str:
    if v is None:
        if op == "clamp":
            if d.category == _F:
                return literal(-math.inf if name == "min" else math.inf, d)
            return "(-9223372036854775807LL-1)" if name == "min" else "9223372036854775807LL"
        if op == "nan_to_num":
            if d.category != _F:
                return "0"         # NOTE: unused: integers pass through nan_to_num
            fi = _dt.finfo(d)
            return literal(fi.max if name == "posinf" else fi.min, d)
        raise ValueError(f"codegen: {op} needs a value for {name!r}")
    if isinstance(v, DType):
        return ctype[v.name]     # NOTE: the renderer's types (CUDA's bool is not C's _Bool)
    return literal(v, d)


def template(node: Apply, d: DType) -> str:
    """The C template of ``node`` for compute dtype ``d`` (overrides and special cases)."""
    op, kind, p = node.op, kind_of(d), node.kwargs
    if op == "round":
        dec = int(p.get("decimals", 0))
        if kind != "float":
            if dec < 0:
                raise NotImplementedError("codegen: round of integers to negative decimals")
            return "{0}"
        if dec:
            s = literal(10.0 ** abs(dec), d)
            return f"(rint({{0}} * {s}) / {s})" if dec > 0 else f"(rint({{0}} / {s}) * {s})"
    if op == "cast" and node.dtype.name in ("float16", "bfloat16"):
        fn = "ember_round_f16" if node.dtype is _dt.float16 else "ember_round_bf16"
        return f"{fn}((float){{0}})"
    if op == "pow" and isinstance(node.args[1], Const) and kind == "float":
        # NOTE: x**2 is exact as x*x; x**3 as x*x*x is within 1.5 ulp (vs a libm pow call);
        # 0.5 and -1 are sqrt and 1/x: PyTorch's values (ops/arith.POW_FAST, same table).
        e = node.args[1].value
        if e.__class__ in (int, float) and e in _POW_C:
            return _POW_C[e]
    return OVERRIDES.get((op, kind)) or REGISTRY[op].expr


def _int(v: int) -> str:
    return str(v) if v < 2**31 else f"{v}LL"


def index_c(e: Index, flat: str, total: int | None = None) -> str:
    """C of :class:`~ember.codegen.ir.Index` leaf ``e`` from the element's flat position
    ``flat`` (an integer C expression) in a loop space of ``total`` elements (None:
    unknown): ``(flat / inner) % size``, without the division where ``inner == 1`` and
    without the remainder where the axis is the first (``size * inner == total``).
    The numbers are literals: a division by a constant is a multiply and a shift."""
    v = f"({flat})" if e.inner == 1 else f"(({flat}) / {_int(e.inner)})"
    if total is None or e.size * e.inner != total:
        v = f"({v} % {_int(e.size)})"
    return v


def index_row_c(e: Index, row: str, col: str, m: int, rows: int, flat: str) -> str:
    """C of Index leaf ``e`` in a row kernel: row ``row`` of ``rows``, element ``col`` of
    the row's ``m`` (so the flat position is ``flat`` = ``row * m + col``). An axis
    inside the row needs ``col`` only, one outside it ``row`` only."""
    span = e.size * e.inner
    if m and m % span == 0:                 # an axis of the row (its last: col itself)
        return index_c(e, col, m)
    if m and e.inner % m == 0:              # an axis of the rows
        return index_c(Index(e.size, e.inner // m, e.dtype), row, rows)
    return index_c(e, flat, m * rows)


class Emitter:
    """Renders expression DAGs to ``const`` statements, sharing equal subtrees.

    Args:
        load: ``fn(index) -> C expression`` of input ``index``'s current element, already
            in its compute C type.
        inputs: input dtypes; ``rows``: dtypes of the reduction stages' results.
        row: ``fn(index) -> C name`` of a stage's per-row result.
        index: ``fn(leaf) -> C expression`` of an :class:`~ember.codegen.ir.Index`
            leaf's value at the current element (:func:`index_c`); None: the kernel
            has none.
    """

    def __init__(self, load, inputs, rows=(), row=lambda i: f"row{i}", prefix="t",
                 ctype=None, index=None):
        self.load, self.inputs, self.rows, self.row = load, list(inputs), list(rows), row
        self.index = index
        self.ctype = ctype or CTYPE
        self.lines: list = []
        self.names: dict = {}
        self.prefix = prefix

    def value(self, e) -> tuple:
        """(C expression, dtype or None for a weak constant) of ``e``."""
        if e in self.names:
            return self.names[e]
        if isinstance(e, Const):
            r = (literal(e.value, e.dtype), e.dtype) if e.dtype else (None, None)
        elif isinstance(e, Load):
            d = self.inputs[e.index]
            r = (self._temp(d, self.load(e.index)), d)
        elif isinstance(e, Row):
            r = (self.row(e.index), self.rows[e.index])
        elif isinstance(e, Index):
            if self.index is None:
                raise TypeError(f"codegen: this renderer gives no loop index for {e!r}")
            r = (self._temp(e.dtype, self.index(e)), e.dtype)
        elif isinstance(e, Apply):
            r = (self._temp(e.dtype, self._apply(e)), e.dtype)
        elif isinstance(e, Philox):
            r = (self._temp(e.dtype, self._philox(e)), e.dtype)
        else:
            raise TypeError(f"codegen: unknown expression node {e!r}")
        self.names[e] = r
        return r

    def _philox(self, e: Philox) -> str:
        """A draw's element at the current flat position (the loop index's leaf over the
        whole space); CUDA only (``cuda_philox.LEAF_TEXT``)."""
        if self.index is None or self.ctype is CTYPE:
            raise TypeError(f"codegen: only CUDA renderers give a Philox leaf, not {e!r}")
        from .cuda_philox import leaf_c
        flat = self.index(Index(e.numel, 1))
        seed, off = self.value(e.seed)[0], self.value(e.offset)[0]
        return leaf_c(e.kind, seed, off, flat, e.scalars, e.dtype.np)

    def _temp(self, d: DType, expr: str) -> str:
        name = f"{self.prefix}{len(self.lines)}"
        ct = self.ctype[d.name]
        self.lines.append(f"const {ct} {name} = ({ct})({expr});")
        return name

    def _apply(self, node: Apply) -> str:
        d = node.compute or self._arg_dtype(node.args[0]) or node.dtype
        cast_from = 1 if node.op == "where" else 0
        # NOTE: a traced where() carries no compute dtype (its dtype rule casts the values
        # itself); its values are its output's dtype, so a weak Python scalar must be
        # written at that precision (1.2 as a float literal widened to double is not 1.2).
        values_dt = node.compute or (node.dtype if node.op == "where" else None)
        args = []
        for k, a in enumerate(node.args):
            target = values_dt if k >= cast_from else None
            args.append(self._arg(a, target))
        params = {k: _param_literal(node.op, k, v, d, self.ctype) for k, v in node.params}
        return specialise(template(node, d), d).format(*args, **params)

    def _arg_dtype(self, a):
        return dtype_of(a, self.inputs, self.rows) if not isinstance(a, Const) or a.dtype \
            else None

    def _arg(self, a, target: DType | None) -> str:
        if isinstance(a, Const) and a.dtype is None:
            return literal(a.value, target)
        name, d = self.value(a)
        if target is not None and d is not target and CTYPE[d.name] != CTYPE[target.name]:
            if d is _dt.bool_ and target.category == _F:
                # NOTE: a select, not `(float)t`: GCC 12 does not vectorise a _Bool -> float
                # conversion in an `omp simd` loop (relu's backward `gt,mul` ran scalar, 5x)
                return f"({name} ? ({CTYPE[target.name]})1 : ({CTYPE[target.name]})0)"
            return f"(({CTYPE[target.name]}){name})"
        return name
