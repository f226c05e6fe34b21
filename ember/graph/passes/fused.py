"""Graph-only fused ops (:class:`~ember.graph.ir.GraphOp`) that rewrite passes emit.

``linear_act(x, w, b, act=...)`` is ``act(x @ w + b)`` in one node: the bias add and the
activation run in place (``out=``) in the matmul's result, so the layer allocates one
buffer instead of three. Each step is the very ufunc the primitive's kernel calls, with
the same operands, so the result is bitwise that of the unfused nodes.
"""
from __future__ import annotations

from ...ops.registry import REGISTRY
from ..ir import GraphOp


def _relu(xp, out):
    xp.maximum(out, 0, out=out)          # relu's kernel: maximum(x, 0)


def _tanh(xp, out):
    xp.tanh(out, out=out)


def _sigmoid(xp, out):                   # sigmoid's kernel: 1 / (1 + exp(-x))
    xp.negative(out, out=out)
    xp.exp(out, out=out)
    xp.add(out, 1, out=out)
    xp.true_divide(1, out, out=out)


#: activation primitive name -> in-place version.
ACTIVATIONS = {"relu": _relu, "tanh": _tanh, "sigmoid": _sigmoid}


def _run_linear_act(xp, x, w, b, *, act):
    out = REGISTRY["matmul"].kernel_for("xp")(xp, x, w)
    if not out.flags.writeable:
        out = xp.array(out)
    xp.add(out, b, out=out)
    ACTIVATIONS[act](xp, out)
    return out


LINEAR_ACT = GraphOp("linear_act", _run_linear_act)
