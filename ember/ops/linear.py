"""The ``linear`` primitive: ``x @ w.T + b`` (PyTorch's ``aten::linear``: one ``addmm``
over ``x``'s rows, leading dims folded).

Why a primitive (``F.linear`` is otherwise ``matmul(x, w.mT)`` then ``add``): in an eager
step each layer then costs one dispatch and one autograd node, not a transpose view, a
product and an add forward and a ``PermuteBackward`` + ``MatmulBackward`` + ``AddBackward``
with four more transposes backward; and on float32 the bias is added inside Ember's GEMM
as the last k block's tiles are stored (``codegen/sgemm.py``'s ``bias``), so the product is
not read and written again. The bits are those of ``matmul(x, w.mT) + b``: the same
products on the same operand layouts (an N-D ``x`` folded into rows, as the matmul kernel
folds it), the bias added to the finished product (rounded once more), so eager results
do not change. Only eager ``F.linear`` calls it (float32 input of 2 dims, or more when
contiguous so the rows fold as a view; 1-D bias; no dispatch mode): traced code
(``ember.compile``, ``vmap``) keeps ``matmul`` + ``add``, which the graph passes fuse.

VJPs: ``dx = g @ w`` and ``dw = g.mT @ x`` over all rows (complex: conjugated like
matmul's), the weight's gradient computed in the weight's own (row-major) layout;
``db = g``, reduced to the bias's shape by the engine like ``add``'s.
"""
from __future__ import annotations

import numpy as _np

from ..autograd.grad_mode import state as _state
from ..errors import ShapeError
from ..tensor import Tensor, _wrap
from .. import dtypes as _dt
from . import dispatch
from .complex import cj
from .linalg import _matmul_cuda, _matmul_kernel, _sgemm, matmul_p as _MATMUL
from .reduce import sum_to as _sum_to
from .arith import add_p as _ADD
from .registry import defop

__all__ = ["linear_p"]

_F32 = _np.dtype(_np.float32)


def _shp(x) -> tuple:
    return tuple(x._data.shape) if isinstance(x, Tensor) else ()


def _check(x, w, b):
    xs, ws, bs = _shp(x), _shp(w), _shp(b)
    if len(xs) < 2 or len(ws) != 2 or xs[-1] != ws[1]:
        raise ShapeError(f"linear: input of shape {xs} does not fit weight of shape {ws} "
                         f"(expected a (..., n, in) input and an (out, in) weight)")
    ps = xs[:-1] + (ws[0],)
    if bs != ps[-1:] and dispatch.broadcast_shapes(bs, ps, op="linear") != ps:
        raise ShapeError(f"linear: bias of shape {bs} does not broadcast to the output's "
                         f"shape {ps}")


def _kernel(xp, x, w, b):
    """``x @ w.T + b``: float32 NumPy operands with a ``(out,)`` bias run Ember's GEMM with
    the bias in its stores where its size rule takes the product; else the matmul kernel
    and the bias added into its fresh result (the same bits either way)."""
    if x.ndim > 2:
        if b.ndim > 1:          # a bias over the leading dims too: no row folding
            return xp.add(_matmul_kernel(xp, x, w.T), b)
        # NOTE: rows folded as the matmul kernel folds them (a view for the contiguous
        # inputs F.linear passes here), so the same 2-D product
        return _kernel(xp, x.reshape(-1, x.shape[-1]), w, b).reshape(x.shape[:-1] + w.shape[:1])
    y = w.T
    if b.ndim == 1 and b.dtype == _F32 and x.dtype == _F32 and w.dtype == _F32 \
            and xp is _np:
        if not _sgemm:      # NOTE: codegen sits above ops; imported once, then kept
            from ..codegen import sgemm
            _sgemm.append(sgemm)
        r = _sgemm[0].addmm(b, x, y)
        if r is not None:
            return r
    return _bias_add(xp, _matmul_kernel(xp, x, y), b, "cpu" if xp is _np else None)


def _kernel_cuda(xp, x, w, b):
    """On a GPU: matmul's CUDA kernel (cuBLAS; TF32/GemmEx where allowed), then the bias
    added as the composite's ``add`` adds it."""
    return _bias_add(xp, _matmul_cuda(xp, x, w.T), b, "cuda")


def _bias_add(xp, r, b, device_type):
    """``r + b`` for the fresh product ``r``, run as the composite's ``add`` dispatch runs
    it: a large one through the eager elementwise kernels (the CPU's C kernels for
    float16/bfloat16, whose NumPy loops convert element by element; a GPU's generated
    kernels, with their bias-row entry), else into ``r`` in place. An add rounds once
    whichever kernel runs it: the same bits."""
    if device_type is not None and r.size >= dispatch._EAGER_MIN and r.dtype == b.dtype:
        res = dispatch.eager_elementwise(_ADD, [r, b], {}, device_type, r.dtype.itemsize)
        if res is not None:
            return res
    if r.base is None and r.dtype == b.dtype and b.ndim <= 2 and b.size <= r.size:
        r += b          # NOTE: in place: the product is a fresh array nobody else holds
        return r
    return xp.add(r, b)


def _rows(t):
    """``t`` with its leading dims folded into rows (the weight gradient's one GEMM)."""
    return t if t.ndim == 2 else t.reshape(-1, t.shape[-1])


def _eager_vjp(nxt, g, out, x, w, b):
    """The three rules on the raw arrays of a plain eager backward (the engine's
    ``eager_vjp``): ``dx = g @ w`` and ``dw = rows(g).T @ rows(x)`` through the matmul
    kernel the rules' ``matmul`` dispatches reach (rows folded by the ``reshape`` kernel's
    reshape), with the same arguments (the same bits) but no dispatch or view of their own.
    ``db`` first, as the composite's ``AddBackward`` runs before its ``MatmulBackward`` (so
    the peak memory is the composite's, as ``estimate_memory`` traces it): the engine's
    ``sum_to`` over the leading dims — on float32 CPU values its kernel's
    ``np.add.reduce`` without the dispatch. Real floating values of one dtype, no dispatch
    mode or forward AD (tracers and ``vmap`` see the rules' ops); None elsewhere (the rules
    run)."""
    st = _state.__dict__
    if st["modes"] or st["fw_levels"] or not isinstance(x, Tensor) or \
            not isinstance(w, Tensor) or not isinstance(b, Tensor):
        return None
    ga, xa, wa, ba = g._data, x._data, w._data, b._data
    nd = ga.ndim
    dt, dev = g._dtype, g._device
    if nd < 2 or xa.ndim != nd or xa.shape[:-1] != ga.shape[:-1] or \
            ba.shape != ga.shape[-1:] or x._dtype is not dt or w._dtype is not dt or \
            b._dtype is not dt or dt.category != _dt.FLOAT or \
            (nd > 2 and (not ga.size or not xa.size)):   # NOTE: reshape(-1, 0): the rules
        return None
    if ga.dtype == _F32 and ga.__class__ is _np.ndarray and dev.type == "cpu":
        xp, mm = _np, _matmul_kernel
        # NOTE: np.add.reduce is what sum's kernel (np.sum) calls, without np.sum's wrapper
        db = None if nxt[2] is None else _wrap(
            _np.add.reduce(ga, axis=(0,) if nd == 2 else tuple(range(nd - 1))), dt, dev)
    else:
        xp, mm = dispatch._backends[dev.type].xp, _MATMUL.kernel_for(dev.type)
        db = None if nxt[2] is None else _sum_to(g, ba.shape)
    dx = None if nxt[0] is None else _wrap(mm(xp, ga, wa), dt, dev)
    if nxt[1] is None:
        return dx, None, db
    if nd > 2:
        rows = ga.size // ga.shape[-1]
        ga, xa = xp.reshape(ga, (rows, ga.shape[-1])), xp.reshape(xa, (rows, xa.shape[-1]))
    return dx, _wrap(mm(xp, ga.T, xa), dt, dev), db


linear_p = defop(
    "linear", nin=3, check=_check, batch="loop",
    shape=lambda xs, ws, bs: tuple(xs[:-1]) + (ws[0],),
    kernels={"xp": _kernel, "cuda": _kernel_cuda},
    vjp=(lambda g, out, x, w, b: g @ cj(w),
         lambda g, out, x, w, b: _rows(g).mT @ cj(_rows(x)),
         lambda g, out, x, w, b: g),
    jvp=lambda t, out, x, w, b: t[0] @ w.mT + x @ t[1].mT + t[2], eager_vjp=_eager_vjp,
    doc="x @ w.T + b over x's rows (eager F.linear with a bias)")
