"""Converters, one per Ember primitive: ``convert(b, node, ins) -> output name(s)``.

``b`` is the :class:`~ember.onnx.builder.OnnxBuilder`, ``node`` the IR node (its params,
and its input/output :class:`~ember.graph.ir.Var` shapes and dtypes) and ``ins`` the ONNX
names of the node's inputs, one per ``node.inputs`` entry: already cast to the node's
compute dtype ``node.ct`` as the executor does, Python scalars turned into 0-d constants
of that dtype. A converter returns names holding values of the output Vars' dtypes.

This module holds the elementwise ops and the reductions; movement, indexing and
convolution live in :mod:`ember.onnx.shape_ops`. Add an op with ``@converts("name")``.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import GraphError

#: Ember op name -> converter.
CONVERTERS: dict = {}


def converts(*names):
    """Register the decorated function as the converter of the ops ``names``."""
    def register(fn):
        for n in names:
            CONVERTERS[n] = fn
        return fn
    return register


def unsupported(node, why: str = "") -> GraphError:
    return GraphError(f"ember.onnx.export: no ONNX conversion for op '{node.op.name}' "
                      f"({node.format()})" + (f": {why}" if why else ""))


def _in_ct(b, node, name):
    """Cast a result computed in ``node.ct`` to the output dtype when they differ."""
    out = node.outs[0].dtype
    if node.ct is not None and node.ct is not out:
        return b.cast(name, out)
    return name


# ---------------------------------------------------------------------- elementwise
#: Ember op -> ONNX op of the same meaning (NumPy broadcasting on both sides).
SAME = {
    "add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "pow": "Pow",
    "neg": "Neg", "exp": "Exp", "log": "Log", "sqrt": "Sqrt", "sin": "Sin", "cos": "Cos",
    "tan": "Tan", "asin": "Asin", "acos": "Acos", "atan": "Atan", "sinh": "Sinh",
    "cosh": "Cosh", "tanh": "Tanh", "sigmoid": "Sigmoid", "erf": "Erf", "abs": "Abs",
    "relu": "Relu", "sign": "Sign", "floor": "Floor", "ceil": "Ceil",
    "maximum": "Max", "minimum": "Min", "where": "Where",
}

COMPARE = {"eq": "Equal", "lt": "Less", "le": "LessOrEqual", "gt": "Greater",
           "ge": "GreaterOrEqual"}
LOGICAL = {"logical_and": "And", "logical_or": "Or", "logical_xor": "Xor"}
BITWISE = {"bitwise_and": ("And", "BitwiseAnd"), "bitwise_or": ("Or", "BitwiseOr"),
           "bitwise_xor": ("Xor", "BitwiseXor")}


@converts(*SAME)
def _same(b, node, ins):
    if node.op.name == "div" and node.ct is not None and not node.ct.is_floating_point:
        raise unsupported(node, "integer division")
    if node.op.name == "where":
        ins = [_as_bool(b, node.inputs[0], ins[0])] + list(ins[1:])
    return _in_ct(b, node, b.op(SAME[node.op.name], ins))


def _as_bool(b, x, name):
    from ..dtypes import bool_
    return name if getattr(x, "dtype", None) is bool_ else b.op("Cast", [name], to=9)


@converts(*COMPARE, "ne")
def _compare(b, node, ins):
    if node.op.name == "ne":
        return b.op("Not", [b.op("Equal", ins)])
    return b.op(COMPARE[node.op.name], ins)


@converts(*LOGICAL)
def _logical(b, node, ins):
    ins = [_as_bool(b, x, n) for x, n in zip(node.inputs, ins)]
    return b.op(LOGICAL[node.op.name], ins)


@converts(*BITWISE)
def _bitwise(b, node, ins):
    logical, bitwise = BITWISE[node.op.name]
    if node.outs[0].dtype.name == "bool":
        return b.op(logical, ins)
    if b.opset < 18:
        raise unsupported(node, "integer bitwise ops need opset >= 18")
    return b.op(bitwise, ins)


@converts("logical_not")
def _not(b, node, ins):
    return b.op("Not", [_as_bool(b, node.inputs[0], ins[0])])


@converts("isnan", "isinf")
def _isnan(b, node, ins):
    return b.op("IsNaN" if node.op.name == "isnan" else "IsInf", ins)


@converts("isfinite")
def _isfinite(b, node, ins):
    return b.op("Not", [b.op("Or", [b.op("IsNaN", ins), b.op("IsInf", ins)])])


def _k(b, node, value):
    """A 0-d constant in the node's compute dtype."""
    return b.scalar(value, node.ct or node.outs[0].dtype)


@converts("exp2", "expm1", "log2", "log10", "log1p", "erfc")
def _derived_unary(b, node, ins):
    x, name = ins[0], node.op.name
    if name == "exp2":
        r = b.op("Pow", [_k(b, node, 2.0), x])
    elif name == "expm1":
        r = b.op("Sub", [b.op("Exp", [x]), _k(b, node, 1.0)])
    elif name in ("log2", "log10"):
        r = b.op("Div", [b.op("Log", [x]), _k(b, node, math.log(2 if name == "log2" else 10))])
    elif name == "log1p":
        r = b.op("Log", [b.op("Add", [x, _k(b, node, 1.0)])])
    else:
        r = b.op("Sub", [_k(b, node, 1.0), b.op("Erf", [x])])
    return _in_ct(b, node, r)


@converts("trunc")
def _trunc(b, node, ins):
    x = ins[0]
    if not node.outs[0].dtype.is_floating_point:
        return b.op("Identity", [x])
    neg = b.op("Less", [x, _k(b, node, 0.0)])
    return b.op("Where", [neg, b.op("Ceil", [x]), b.op("Floor", [x])])


@converts("round")
def _round(b, node, ins):
    d = node.params.get("decimals", 0)
    if not d:
        return _in_ct(b, node, b.op("Round", ins))
    s = _k(b, node, 10.0 ** d)
    return _in_ct(b, node, b.op("Div", [b.op("Round", [b.op("Mul", [ins[0], s])]), s]))


@converts("floor_divide")
def _floor_divide(b, node, ins):
    if node.ct is not None and not node.ct.is_floating_point:
        raise unsupported(node, "integer floor division")
    return _in_ct(b, node, b.op("Floor", [b.op("Div", ins)]))


@converts("fmod", "remainder")
def _mod(b, node, ins):
    if node.ct is not None and node.ct.is_floating_point:
        if node.op.name == "fmod":
            return b.op("Mod", ins, fmod=1)
        x, y = ins
        q = b.op("Floor", [b.op("Div", [x, y])])
        return b.op("Sub", [x, b.op("Mul", [q, y])])
    return b.op("Mod", ins, fmod=int(node.op.name == "fmod"))


@converts("hypot")
def _hypot(b, node, ins):
    x, y = ins
    return b.op("Sqrt", [b.op("Add", [b.op("Mul", [x, x]), b.op("Mul", [y, y])])])


@converts("clamp")
def _clamp(b, node, ins):
    r = ins[0]
    lo, hi = node.params.get("min"), node.params.get("max")
    if lo is not None:
        r = b.op("Max", [r, _k(b, node, lo)])
    if hi is not None:
        r = b.op("Min", [r, _k(b, node, hi)])
    return _in_ct(b, node, r)


@converts("nan_to_num")
def _nan_to_num(b, node, ins):
    dt = node.outs[0].dtype
    if not dt.is_floating_point:
        return b.op("Identity", ins)
    fi = np.finfo(dt.np)
    p = node.params
    x = ins[0]
    r = b.op("Where", [b.op("IsNaN", [x]), b.scalar(p.get("nan", 0.0), dt), x])
    pos = fi.max if p.get("posinf") is None else p["posinf"]
    neg = fi.min if p.get("neginf") is None else p["neginf"]
    r = b.op("Where", [b.op("IsInf", [r], detect_negative=0), b.scalar(pos, dt), r])
    return b.op("Where", [b.op("IsInf", [r], detect_positive=0), b.scalar(neg, dt), r])


@converts("cast")
def _cast(b, node, ins):
    return b.cast(ins[0], node.outs[0].dtype)


@converts("clone", "contiguous")
def _identity(b, node, ins):
    return b.op("Identity", ins)


# ---------------------------------------------------------------------- reductions
def _axes(node, key="dim"):
    dim = node.params.get(key)
    nd = node.inputs[0].ndim
    return list(range(nd)) if dim is None else [d % nd for d in dim]


def _reduce(b, node, op_type, x):
    axes = _axes(node)
    if not axes:
        return b.op("Identity", [x])
    return b.reduce(op_type, x, axes, node.params.get("keepdim", False))


@converts("sum", "prod", "amax", "amin")
def _reduction(b, node, ins):
    x = ins[0]
    if node.params.get("dtype") is not None or node.inputs[0].dtype is not node.outs[0].dtype:
        x = b.cast(x, node.outs[0].dtype)
    kind = {"sum": "ReduceSum", "prod": "ReduceProd", "amax": "ReduceMax",
            "amin": "ReduceMin"}[node.op.name]
    return _reduce(b, node, kind, x)


@converts("all", "any")
def _all_any(b, node, ins):
    # NOTE: ReduceMin/Max take no bool before opset 20: reduce 0/1 as int32.
    from ..dtypes import int32
    x = b.cast(_as_bool(b, node.inputs[0], ins[0]), int32)
    r = _reduce(b, node, "ReduceMin" if node.op.name == "all" else "ReduceMax", x)
    return b.cast(r, node.outs[0].dtype)


@converts("argmax", "argmin")
def _argext(b, node, ins):
    x, dim = ins[0], node.params.get("dim")
    kind = "ArgMax" if node.op.name == "argmax" else "ArgMin"
    if dim is None:           # index into the flattened input
        r = b.op(kind, [b.op("Reshape", [x, b.ints([-1])])], axis=0, keepdims=0)
        return b.op("Reshape", [r, b.ints(node.outs[0].shape)])
    return b.op(kind, [x], axis=dim % max(node.inputs[0].ndim, 1),
                keepdims=int(node.params.get("keepdim", False)))


@converts("cumsum")
def _cumsum(b, node, ins):
    x = ins[0]
    if node.inputs[0].dtype is not node.outs[0].dtype:
        x = b.cast(x, node.outs[0].dtype)
    dim = node.params.get("dim", 0) % max(node.inputs[0].ndim, 1)
    return b.op("CumSum", [x, b.const(np.asarray(dim, np.int64))],
                reverse=int(bool(node.params.get("reverse", False))))


@converts("softmax", "log_softmax")
def _softmax(b, node, ins):
    x = ins[0]
    if node.inputs[0].dtype is not node.outs[0].dtype:
        x = b.cast(x, node.outs[0].dtype)
    kind = "Softmax" if node.op.name == "softmax" else "LogSoftmax"
    return b.op(kind, [x], axis=node.params.get("dim", -1))


@converts("matmul")
def _matmul(b, node, ins):
    return _in_ct(b, node, b.op("MatMul", ins))


@converts("einsum")
def _einsum(b, node, ins):
    return _in_ct(b, node, b.op("Einsum", ins, equation=node.params["equation"]))


@converts("sdpa")
def _sdpa(b, node, ins):
    """The fused attention primitive as MatMul, Mul, an additive causal mask, Softmax, MatMul."""
    q, k, v = ins
    nd = node.inputs[1].ndim
    dt = node.outs[0].dtype
    kt = b.op("Transpose", [k], perm=list(range(nd - 2)) + [nd - 1, nd - 2])
    s = b.op("Mul", [b.op("MatMul", [q, kt]), b.scalar(node.params["scale"], dt)])
    if node.params["is_causal"]:
        tq, tk = node.inputs[0].shape[-2], node.inputs[1].shape[-2]
        keep = np.tril(np.ones((tq, tk), bool))
        s = b.op("Add", [s, b.const(np.where(keep, 0.0, -np.inf).astype(dt.np), "causal")])
    return b.op("MatMul", [b.op("Softmax", [s], axis=-1), v])
