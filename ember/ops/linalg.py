"""Linear algebra: the ``matmul`` and ``einsum`` primitives and the products built on them.

``matmul`` follows every broadcasting case of ``torch.matmul`` and hands the arrays straight
to ``xp.matmul`` (BLAS): no copies beyond NumPy's own. ``einsum`` is a primitive too, so that
contractions of several operands run as one optimised ``xp.einsum`` call; its VJP for each
operand is again an einsum (of the gradient with the other operands).
"""
from __future__ import annotations

import math

import numpy as _np

from ..errors import DTypeError, ShapeError
from ..tensor import Tensor
from . import dispatch
from ._util import f32_to_lowp, is_lowp, lowp_pair_to_f32, lowp_to_f32, wrap_dim
from .complex import cj
from . import batching_rules as _vb
from .registry import defop
from .dispatch import autocast_entry

__all__ = ['matmul', 'mm', 'bmm', 'mv', 'dot', 'vdot', 'inner', 'outer', 'ger', 'einsum',
           'addmm', 'baddbmm', 'tensordot']

_apply = dispatch.apply


def _shp(x) -> tuple:
    return tuple(x._data.shape) if isinstance(x, Tensor) else ()


# ------------------------------------------------------------------ matmul
def _matmul_check(x, y):
    xs, ys = _shp(x), _shp(y)
    if not isinstance(x, Tensor) or not isinstance(y, Tensor) or not xs or not ys:
        raise ShapeError(f"matmul: both arguments need at least 1 dimension, got shapes "
                         f"{xs} and {ys}")
    k1 = xs[-1]
    k2 = ys[-2] if len(ys) > 1 else ys[0]
    if k1 != k2:
        raise ShapeError(f"matmul: shapes {xs} and {ys} cannot be multiplied ({k1} != {k2}: "
                         f"the last dim of the first must equal the "
                         f"{'first' if len(ys) == 1 else 'second-to-last'} dim of the second)")
    bx, by = xs[:-2], ys[:-2]
    if bx and by and bx != by:
        try:
            dispatch.broadcast_shapes(bx, by, op="matmul (batch dims)")
        except ShapeError:
            raise ShapeError(f"matmul: shapes {xs} and {ys} cannot be multiplied: batch dims "
                             f"{bx} and {by} do not broadcast") from None


def _mm_grad_x(g, out, x, y):
    y = cj(y)    # NOTE: complex operands: g @ conj(y)^T (PyTorch's convention)
    if y.ndim == 1:                       # (..., n) x (k,): grad_x = g[..., None] * y
        return g.unsqueeze(-1) @ y.unsqueeze(0)
    if x.ndim == 1:                       # (k,) x (..., k, m): sum over batch by the engine
        return (g.unsqueeze(-2) @ y.mT).squeeze(-2)
    return g @ y.mT


def _mm_grad_y(g, out, x, y):
    x = cj(x)
    if x.ndim == 1:
        if y.ndim == 1:                   # dot product: g is 0-d
            return x * g
        return x.unsqueeze(-1) @ g.unsqueeze(-2)
    if y.ndim == 1:
        return (x.mT @ g.unsqueeze(-1)).squeeze(-1)
    if y.ndim != 2:
        return x.mT @ g
    if x.ndim > 2:
        # NOTE: a Linear layer's weight gradient: one (k, rows) @ (rows, n) GEMM over all
        # batch rows, instead of a batched product the engine then sums over the batch.
        rows = math.prod(x.shape[:-1])
        x, g = x.reshape(rows, x.shape[-1]), g.reshape(rows, g.shape[-1])
    if y.mT.is_contiguous() and not y.is_contiguous():
        # NOTE: y is a transposed matrix (``weight.mT`` in ``F.linear``): produce its gradient
        # in that layout, so the weight's gradient comes out contiguous like the weight. A
        # transposed .grad makes every optimizer pass over it a slow strided walk.
        return (g.mT @ x).mT
    return x.mT @ g


def _matmul_shape(xs, ys):
    batch = dispatch.broadcast_shapes(xs[:-2], ys[:-2])
    return batch + tuple(xs[-2:-1]) + tuple(ys[-1:] if len(ys) > 1 else ())


_F32 = _np.dtype(_np.float32)
_sgemm: list = []        # codegen/sgemm.py, imported on first use (codegen sits above ops)


def _matmul_kernel(xp, x, y, out=None):
    if x.dtype == _F32 and y.dtype == _F32 and xp is _np:
        # NOTE: Ember's own float32 GEMM where measured faster than OpenBLAS
        # (codegen/sgemm.py: worth(), its size rule); None elsewhere. Other bits than BLAS.
        # The module is kept after the first import: an import statement per product
        # costs importlib calls on the eager hot path.
        if not _sgemm:
            from ..codegen import sgemm
            _sgemm.append(sgemm)
        r = _sgemm[0].matmul(x, y, out=out)
        if r is not None:
            return r
    elif is_lowp(x, y):
        from ..codegen import lowp_gemm     # NOTE: codegen sits above ops
        r = lowp_gemm.matmul(x, y, out=out)     # bfloat16 on AMX; None elsewhere
        if r is not None:
            return r
        # NOTE: NumPy's float16 matmul is a scalar triple loop (a 512² product: 0.6 s
        # against 2 ms in float32) and bfloat16 has no BLAS either: convert both operands
        # to float32 (exact), one float32 BLAS call (float32 accumulation), round once.
        r = _matmul_kernel(xp, *lowp_pair_to_f32(x, y))
        return f32_to_lowp(r, x.dtype, out=out)
    if out is not None:
        return xp.matmul(x, y, out=out)
    # NOTE: NumPy's stacked matmul runs its own non-BLAS loop when an operand is transposed
    # or has stride-0 (expanded) dims — measured 0.4-1.9 s vs 8 ms for a (16, 64, 128) @
    # (128, 128) layer. Fold batch dims into rows so BLAS sees one 2-D GEMM, and make
    # stride-0 batched operands dense.
    if x.ndim > 2 and y.ndim == 2:
        # NOTE: rows counted explicitly: reshape(-1, 0) can't infer -1 for a 0-wide x
        x2 = xp.ascontiguousarray(x).reshape(math.prod(x.shape[:-1]), x.shape[-1])
        return xp.matmul(x2, y).reshape(x.shape[:-1] + (y.shape[-1],))
    if x.ndim >= 3 or y.ndim >= 3:
        if 0 in x.strides:
            x = xp.ascontiguousarray(x)
        if 0 in y.strides:
            y = xp.ascontiguousarray(y)
    return xp.matmul(x, y)


def _matmul_cuda(xp, x, y, out=None):
    """On a GPU: float16/bfloat16 (TF32 when allowed) products as one cuBLAS GemmEx with
    float32 sums (``codegen/cuda_gemm.py``); else CuPy's matmul (cuBLAS) as above."""
    backends, flags, cuda_gemm = _GPU_MODULES or _gpu_modules()
    if backends["cuda"].has("cuda_kernels"):
        tf32 = flags.allow_tf32
        if cuda_gemm.supported(x, y, tf32):
            return cuda_gemm.matmul(xp, x, y, tf32, out=out)
    return _matmul_kernel(xp, x, y, out=out)


#: the modules ``_matmul_cuda`` reads, imported on its first call. NOTE: three function-
#: level imports were ~3 us of each of a compiled GPT step's ~150 GEMM calls (host-bound)
_GPU_MODULES: tuple = ()


def _gpu_modules() -> tuple:
    global _GPU_MODULES
    from ..device.base import _backends
    from ..backends.cuda import matmul as flags
    from ..codegen import cuda_gemm     # NOTE: codegen sits above ops
    _GPU_MODULES = (_backends, flags, cuda_gemm)
    return _GPU_MODULES


matmul_p = defop(
    "matmul", nin=2, check=_matmul_check, shape=_matmul_shape,
    batch=_vb.matmul,
    kernels={"xp": _matmul_kernel, "cuda": _matmul_cuda},
    vjp=(_mm_grad_x, _mm_grad_y),
    jvp=lambda t, out, x, y: t[0] @ y + x @ t[1])


def _out(r, out):
    if out is None:
        return r
    from .inplace import copy_into_out
    return copy_into_out(out, r)


@autocast_entry("matmul")
def matmul(input, other, *, out=None):
    """Matrix product with broadcasting (``torch.matmul``).

    1-D operands are promoted to matrices (a row for the first, a column for the second)
    and the added dim is removed from the result; batch dims broadcast.

    Example:
        >>> ember.matmul(ember.ones(5, 2, 3), ember.ones(3)).shape
        ember.Size([5, 2])
    """
    return _out(_apply(matmul_p, (input, other), {}), out)


def _need_dims(op, name, x, nd):
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: expected {name} to be a Tensor, got {type(x).__name__}")
    if x.ndim != nd:
        kind = {1: "a vector (1-D)", 2: "a matrix (2-D)", 3: "a 3-D tensor"}[nd]
        raise ShapeError(f"{op}: {name} must be {kind}, got shape {tuple(x.shape)}")


def mm(input, mat2, *, out=None):
    """Product of two matrices, no broadcasting (``torch.mm``)."""
    _need_dims("mm", "input", input, 2)
    _need_dims("mm", "mat2", mat2, 2)
    return matmul(input, mat2, out=out)


def bmm(input, mat2, *, out=None):
    """Batched product of ``(b, n, k)`` and ``(b, k, m)`` tensors (``torch.bmm``)."""
    _need_dims("bmm", "input", input, 3)
    _need_dims("bmm", "mat2", mat2, 3)
    b, _, k = input.shape
    if tuple(mat2.shape[:2]) != (b, k):
        raise ShapeError(f"bmm: expected mat2 of shape ({b}, {k}, m) for input of shape "
                         f"{tuple(input.shape)}, got {tuple(mat2.shape)}")
    return matmul(input, mat2, out=out)


@autocast_entry("mv")
def mv(input, vec, *, out=None):
    """Matrix-vector product (``torch.mv``)."""
    _need_dims("mv", "input", input, 2)
    _need_dims("mv", "vec", vec, 1)
    return matmul(input, vec, out=out)


@autocast_entry("dot")
def dot(input, other, *, out=None):
    """Inner product of two 1-D tensors of the same size and dtype (``torch.dot``)."""
    _need_dims("dot", "input", input, 1)
    _need_dims("dot", "other", other, 1)
    if input._dtype is not other._dtype:
        raise DTypeError(f"dot: expected both vectors to have the same dtype, but found "
                         f"{input._dtype.name} and {other._dtype.name}")
    if input.shape[0] != other.shape[0]:
        raise ShapeError(f"dot: inconsistent tensor size, expected tensors of shape "
                         f"{tuple(input.shape)} and {tuple(other.shape)} to have the same "
                         f"number of elements")
    return matmul(input, other, out=out)


def vdot(input, other, *, out=None):
    """``sum(conj(input) * other)`` of two 1-D tensors (``torch.vdot``)."""
    return dot(cj(input), other, out=out)


def outer(input, vec2, *, out=None):
    """Outer product of two 1-D tensors (``torch.outer``)."""
    _need_dims("outer", "input", input, 1)
    _need_dims("outer", "vec2", vec2, 1)
    return _out(input.unsqueeze(-1) * vec2, out)


ger = outer


@autocast_entry("tensordot", leaf=False)
def tensordot(a, b, dims=2, out=None):
    """Contract ``dims`` of ``a`` with ``dims`` of ``b`` (``torch.tensordot``).

    Example:
        >>> ember.tensordot(ember.ones(2, 3, 4), ember.ones(3, 4, 5), dims=2).shape
        ember.Size([2, 5])
    """
    if isinstance(dims, int):
        if dims < 0 or dims > min(a.ndim, b.ndim):
            raise ShapeError(f"tensordot: dims={dims} is out of range for shapes "
                             f"{tuple(a.shape)} and {tuple(b.shape)}")
        da, db = list(range(a.ndim - dims, a.ndim)), list(range(dims))
    else:
        da, db = ([d] if isinstance(d, int) else list(d) for d in dims)
        da = [wrap_dim(d, a.ndim, "tensordot") for d in da]
        db = [wrap_dim(d, b.ndim, "tensordot") for d in db]
    if len(da) != len(db) or any(a.shape[i] != b.shape[j] for i, j in zip(da, db)):
        raise ShapeError(f"tensordot: contracted dims {da} of {tuple(a.shape)} and {db} of "
                         f"{tuple(b.shape)} must have equal sizes")
    fa = [d for d in range(a.ndim) if d not in da]
    fb = [d for d in range(b.ndim) if d not in db]
    k = 1
    for d in da:
        k *= a.shape[d]
    am = a.permute(*fa, *da).reshape(-1, k)
    bm = b.permute(*db, *fb).reshape(k, -1)
    shape = [a.shape[d] for d in fa] + [b.shape[d] for d in fb]
    return _out((am @ bm).reshape(shape), out)


def inner(input, other, *, out=None):
    """Sum-product over the last dims (``torch.inner``); scalars multiply."""
    if input.ndim == 0 or (isinstance(other, Tensor) and other.ndim == 0):
        return _out(input * other, out)
    if input.shape[-1] != other.shape[-1]:
        raise ShapeError(f"inner: the last dims of shapes {tuple(input.shape)} and "
                         f"{tuple(other.shape)} must match")
    return tensordot(input, other, ([-1], [-1]), out=out)


@autocast_entry("addmm")
def addmm(input, mat1, mat2, *, beta=1, alpha=1, out=None):
    """``beta * input + alpha * (mat1 @ mat2)`` (``torch.addmm``); ``beta=0`` ignores input."""
    return _out(_scaled_add(input, mm(mat1, mat2), beta, alpha), out)


@autocast_entry("baddbmm")
def baddbmm(input, batch1, batch2, *, beta=1, alpha=1, out=None):
    """``beta * input + alpha * bmm(batch1, batch2)`` (``torch.baddbmm``)."""
    return _out(_scaled_add(input, bmm(batch1, batch2), beta, alpha), out)


def _scaled_add(input, prod, beta, alpha):
    ps = _shp(prod)
    if dispatch.broadcast_shapes(_shp(input), ps, op="addmm") != ps:
        raise ShapeError(f"addmm: input of shape {_shp(input)} does not broadcast to the "
                         f"product's shape {ps}")
    if alpha != 1:
        prod = prod * alpha
    if beta == 0:     # NOTE: like PyTorch, nan/inf in input are not propagated when beta == 0
        return prod
    return (input if beta == 1 else input * beta) + prod


# ------------------------------------------------------------------ einsum
_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _optimize(n: int):
    """einsum's ``optimize=`` from ``ember.backends.opt_einsum`` (``enabled``, ``strategy``)."""
    from ..backends import opt_einsum as flags     # NOTE: the flags sit above the ops layer
    if n < 2 or not flags.enabled:
        return False
    return "optimal" if flags.strategy == "optimal" else True


def _einsum_kernel(xp, *arrays, equation):
    if is_lowp(*arrays):    # NOTE: float32 inside, rounded once (as matmul)
        r = xp.einsum(equation, *[lowp_to_f32(a) for a in arrays],
                      optimize=_optimize(len(arrays)))
        return f32_to_lowp(r, arrays[0].dtype)
    r = xp.einsum(equation, *arrays, optimize=_optimize(len(arrays)))
    # NOTE: xp.einsum returns views for pure relabellings ("ij->ji", "ii->i"); a primitive
    # that is not declared a view must not alias its inputs.
    if any(xp.may_share_memory(r, a) for a in arrays):
        r = r.copy()
    return r


def _eye(n, like):
    from .factories import tensor
    return tensor([[float(i == j) for j in range(n)] for i in range(n)], dtype=like.dtype,
                  device=like.device)


def _einsum_grad(i, g, inputs, equation):
    """Gradient of operand ``i``: an einsum of ``g`` with the other operands."""
    lhs, rhs = equation.split("->")
    subs = lhs.split(",")
    si = subs[i]
    sizes = {c: n for s, x in zip(subs, inputs) for c, n in zip(s, x.shape)}
    others = [s for j, s in enumerate(subs) if j != i]
    avail = set(rhs).union(*others)
    uniq = "".join(dict.fromkeys(si))
    keep = "".join(c for c in uniq if c in avail)
    ops = [g] + [x for j, x in enumerate(inputs) if j != i]
    r = _apply(einsum_p, tuple(ops), {"equation": ",".join([rhs] + others) + "->" + keep})
    if keep != uniq:   # labels only operand i has: their gradient is broadcast
        r = r.reshape([sizes[c] if c in keep else 1 for c in uniq]).expand(
            [sizes[c] for c in uniq])
    if uniq == si:
        return r
    # Repeated labels (a diagonal, "ii->i"): embed r on the diagonal with identity matrices.
    fresh = iter(c for c in _LETTERS if c not in equation)
    target, eyes, seen = "", [], set()
    for c in si:
        if c in seen:
            f = next(fresh)
            target += f
            eyes.append((c + f, _eye(sizes[c], g)))
        else:
            seen.add(c)
            target += c
    eq = ",".join([uniq] + [e for e, _ in eyes]) + "->" + target
    return _apply(einsum_p, (r, *[t for _, t in eyes]), {"equation": eq})


def _einsum_vjp(g, out, *inputs, equation):
    inputs = tuple(cj(x) for x in inputs)   # NOTE: complex: g times conj(the others)
    return tuple(_einsum_grad(i, g, inputs, equation) for i in range(len(inputs)))


def _einsum_jvp(tangents, out, *inputs, equation):
    res = None
    for i, t in enumerate(tangents):
        if t is not None:
            ops = inputs[:i] + (t,) + inputs[i + 1:]
            r = _apply(einsum_p, ops, {"equation": equation})
            res = r if res is None else res + r
    return res


def _einsum_shape(*shapes, equation):
    lhs, rhs = equation.split("->")
    sizes = {c: n for s, shp in zip(lhs.split(","), shapes) for c, n in zip(s, shp)}
    return tuple(sizes[c] for c in rhs)


einsum_p = defop("einsum", nin=-1, params={"equation": ""}, kernel=_einsum_kernel,
                 batch=_vb.einsum,
                 shape=_einsum_shape, vjp=_einsum_vjp, jvp=_einsum_jvp)


def _parse_einsum(equation, shapes):
    """Explicit, ellipsis-free form of ``equation`` and the size of every label."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ShapeError(f"einsum(): {equation!r} names {len(terms)} operands but "
                         f"{len(shapes)} were given")
    bad = set(eq) - set(_LETTERS) - set(",.->")
    if bad or eq.replace("...", "").count(".") or "-" in lhs + rhs or ">" in lhs + rhs:
        raise ValueError(f"einsum(): invalid equation {equation!r}: subscripts must be "
                         f"letters, with at most one '...' per operand")
    ell = max((len(s) - len(t.replace("...", "")) for t, s in zip(terms, shapes)
               if "..." in t), default=0)
    letters = "".join(c for c in _LETTERS if c not in eq)[:ell]   # the '...' dims
    out_terms = []
    for n, (t, s) in enumerate(zip(terms, shapes)):
        k = len(s) - len(t.replace("...", ""))
        t = t.replace("...", letters[ell - k:] if k > 0 else "")
        if len(t) != len(s) or k < 0:
            raise ShapeError(f"einsum(): the subscripts {terms[n]!r} do not match the "
                             f"{len(s)} dims of operand {n} (shape {tuple(s)})")
        out_terms.append(t)
    allin = "".join(out_terms)
    if arrow:
        rhs = rhs.replace("...", letters)
        if len(set(rhs)) != len(rhs) or set(rhs) - set(allin):
            raise ValueError(f"einsum(): output subscripts of {equation!r} must be distinct "
                             f"and appear in the inputs")
    else:
        rhs = letters + "".join(sorted(c for c in set(allin) - set(letters)
                                       if allin.count(c) == 1))
    sizes = {}
    for n, (t, s) in enumerate(zip(out_terms, shapes)):
        for c, d in zip(t, s):
            cur = sizes.get(c, 1)
            if d != cur and cur != 1 and d != 1:
                raise ShapeError(f"einsum(): subscript {c!r} has size {d} in operand {n} "
                                 f"but {cur} elsewhere (operand shapes "
                                 f"{[tuple(x) for x in shapes]})")
            sizes[c] = max(cur, d) if c in sizes else d
    return out_terms, rhs, sizes


def einsum(equation, *operands):
    """Sum of products over labelled dims (``torch.einsum``), with ``...`` and implicit output.

    Example:
        >>> a, b = ember.randn(2, 3), ember.randn(3, 4)
        >>> ember.einsum("ij,jk->ik", a, b).shape
        ember.Size([2, 4])
    """
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not operands or not all(isinstance(x, Tensor) for x in operands):
        raise TypeError("einsum(): expected one or more Tensor operands")
    terms, rhs, sizes = _parse_einsum(equation, [x.shape for x in operands])
    ops = []
    for t, x in zip(terms, operands):   # size-1 dims broadcast against their label's size
        full = tuple(sizes[c] for c in t)
        ops.append(x.expand(full) if full != tuple(x.shape) and len(set(t)) == len(t) else x)
    return _apply(einsum_p, tuple(ops), {"equation": ",".join(terms) + "->" + rhs})

Tensor.__matmul__ = lambda self, other: _apply(matmul_p, (self, other), {})
Tensor.__rmatmul__ = lambda self, other: _apply(matmul_p, (other, self), {})
for _n in ("matmul", "mm", "bmm", "mv", "dot", "vdot", "inner", "outer", "ger", "addmm",
           "baddbmm"):
    setattr(Tensor, _n, globals()[_n])
del _n
