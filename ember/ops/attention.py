"""Fused scaled-dot-product attention: the ``sdpa`` primitive and its ``sdpa_grad``.

``sdpa(q, k, v, scale, is_causal) = softmax(q kᵀ * scale [+ causal mask]) v`` for
q ``(..., Tq, D)``, k ``(..., Tk, D)``, v ``(..., Tk, Dv)`` with equal batch dims. The
causal mask is PyTorch's top-left aligned ``tril(ones(Tq, Tk))``.

NOTE: a primitive, not a composite of matmul/masked_fill/softmax/matmul, because the
composite's pieces are each a full pass over the ``(..., Tq, Tk)`` scores plus one BLAS
call per small matrix; the ``"cpu"`` kernels (``ember/codegen/attention_kernels.py``) do
the whole forward, and the whole backward, in one pass per head with the scores in L1
(the W3 GPT's attention: ~16 ms a step as ops). The NumPy kernels are the reference and
the fallback (no C compiler, other dtypes). On a GPU the ``"cuda"`` kernels are
FlashAttention-style CUDA kernels (``ember/codegen/cuda_attention.py``: tiled over keys
with an online softmax, O(T) memory; float32/float16/bfloat16, head dims <= 128), else
the NumPy kernels on CuPy.

Semantics both kernels share: a row's softmax runs over the keys it sees only; masked
keys take no part in any sum (a NaN/Inf in a masked key or value never reaches the rows
that do not see it, as in PyTorch's fused CPU kernel); a NaN/Inf score poisons its row.
``Tk == 0`` gives zeros (the composite's empty softmax times an empty matrix).

Gradients: the VJP calls ``sdpa_grad`` (dq, dk, dv packed into one flat array: a
primitive has one output) unless grad mode is on during the backward
(``create_graph=True``): then it recomputes ``P`` with differentiable Ember ops, so
higher derivatives work. The JVP is in Ember ops.
"""
from __future__ import annotations

import math

from .. import config
from .. import dtypes as _dt
from ..autograd.grad_mode import state
from ..errors import DTypeError, ShapeError
from ..tensor import Tensor
from . import dispatch
from ._util import f32_to_lowp, is_lowp, lowp_to_f32
from .factories import ones
from .movement import tril  # NOTE: via movement, which loads join (import order)
from .linalg import matmul
from .reduce import sum
from . import batching_rules as _vb
from .registry import defop
from .softmax import softmax
from .unbind_node import unbind_slots

__all__ = ["sdpa"]

_apply = dispatch.apply


# ------------------------------------------------------------------ NumPy kernels
def _mask(xp, tq, tk):
    return xp.tril(xp.ones((tq, tk), dtype=bool))


def _mm(xp, a, b, mask):
    """``a @ b`` for ``a`` zero outside ``mask``, masked products left out (not 0 * NaN)."""
    r = xp.matmul(a, b)
    if mask is None or bool(xp.isfinite(b).all()):
        return r
    return xp.where(mask[..., None], a[..., :, :, None] * b[..., None, :, :], 0).sum(-2)


def _probs(xp, q, k, scale, mask):
    s = xp.matmul(q, xp.swapaxes(k, -1, -2)) * q.dtype.type(scale)
    if mask is not None:
        s = xp.where(mask, s, -xp.inf)
    e = xp.exp(s - s.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    return p if mask is None else xp.where(mask, p, 0)


def _sdpa_np(xp, q, k, v, scale, is_causal):
    tq, tk = q.shape[-2], k.shape[-2]
    if tk == 0 or tq == 0:
        return xp.zeros(q.shape[:-1] + v.shape[-1:], q.dtype)
    mask = _mask(xp, tq, tk) if is_causal else None
    return _mm(xp, _probs(xp, q, k, scale, mask), v, mask)


def _grad_parts_np(xp, g, q, k, v, scale, is_causal):
    """``(dq, dk, dv)`` of :func:`_sdpa_np` for output gradient ``g``."""
    tq, tk = q.shape[-2], k.shape[-2]
    if tk == 0 or tq == 0:
        parts = (xp.zeros(q.shape, q.dtype), xp.zeros(k.shape, q.dtype),
                 xp.zeros(v.shape, q.dtype))
    else:
        mask = _mask(xp, tq, tk) if is_causal else None
        sc = q.dtype.type(scale)
        p = _probs(xp, q, k, scale, mask)
        dp = xp.matmul(g, xp.swapaxes(v, -1, -2))
        if mask is not None:
            dp = xp.where(mask, dp, 0)
        ds = p * (dp - (p * dp).sum(-1, keepdims=True))
        if mask is not None:
            ds = xp.where(mask, ds, 0)
        mt = None if mask is None else mask.T
        parts = (_mm(xp, ds, k, mask) * sc, _mm(xp, xp.swapaxes(ds, -1, -2), q, mt) * sc,
                 _mm(xp, xp.swapaxes(p, -1, -2), g, mt))
    return tuple(a.astype(q.dtype, copy=False) for a in parts)


def _sdpa_grad_np(xp, g, q, k, v, scale, is_causal):
    parts = _grad_parts_np(xp, g, q, k, v, scale, is_causal)
    return xp.concatenate([a.reshape(-1) for a in parts])


def _use_c(*arrays):
    if not config.EAGER_KERNELS:
        return None
    from ..codegen import attention_kernels as ak      # NOTE: codegen sits above ops
    if not ak.fits(*arrays) or ak.kernels() is None:
        return None
    return ak


def _sdpa_cpu(xp, q, k, v, scale, is_causal):
    if is_lowp(q, k, v):     # NOTE: float32 inside (no float16 BLAS/loops), rounded once
        r = _sdpa_cpu(xp, *[lowp_to_f32(a) for a in (q, k, v)], scale, is_causal)
        return f32_to_lowp(r, q.dtype)
    ak = _use_c(q, k, v)
    if ak is None:
        return _sdpa_np(xp, q, k, v, scale, is_causal)
    return ak.sdpa(q, k, v, scale, is_causal)


def _sdpa_grad_cpu(xp, g, q, k, v, scale, is_causal):
    if is_lowp(g, q, k, v):
        r = _sdpa_grad_cpu(xp, *[lowp_to_f32(a) for a in (g, q, k, v)], scale, is_causal)
        return f32_to_lowp(r, q.dtype)
    ak = _use_c(g, q, k, v)
    if ak is None:
        return _sdpa_grad_np(xp, g, q, k, v, scale, is_causal)
    return ak.sdpa_grad(g, q, k, v, scale, is_causal)


def _flash(*arrays):
    """The FlashAttention CUDA kernels' module when a GPU's arrays can take them, else None
    (the CPU stand-in runs the CPU kernels; float64 or head dims > 128: the CuPy kernel)."""
    from ..device.base import _backends
    from ..backends.cuda import flash_sdp_enabled    # torch.backends.cuda's switch
    if not _backends["cuda"].has("cuda_kernels") or not flash_sdp_enabled():
        return None
    from ..codegen import cuda_attention as ca       # NOTE: codegen sits above ops
    return ca if ca.supported(*arrays[-3:]) else None


def _sdpa_cuda(xp, q, k, v, scale, is_causal):
    fa = _flash(q, k, v)
    if fa is not None:      # NOTE: with grad on, O and the lse stay for sdpa_grad
        return fa.forward(xp, q, k, v, scale, is_causal, save=state.grad_enabled)
    if _backends_host():
        return _sdpa_cpu(xp, q, k, v, scale, is_causal)
    return _sdpa_np(xp, q, k, v, scale, is_causal)


def _sdpa_grad_cuda(xp, g, q, k, v, scale, is_causal):
    fa = _flash(g, q, k, v)
    if fa is not None:
        return fa.backward(xp, g, q, k, v, scale, is_causal)
    if _backends_host():
        return _sdpa_grad_cpu(xp, g, q, k, v, scale, is_causal)
    return _sdpa_grad_np(xp, g, q, k, v, scale, is_causal)


def _backends_host() -> bool:
    from ..device.base import _backends
    return _backends["cuda"].has("host_kernels")     # the stand-in: NumPy arrays


# NOTE: the compiled graphs' variants (ember/graph/passes/sdpa_layout.py): the same
# kernels, writing into the layout the readers want, so no copy follows. CPU arrays only
# (the "cpu" kernels' contract); the NumPy fallback computes, then copies.
def sdpa_into(xp, q, k, v, out, scale, is_causal):
    """Write ``sdpa(q, k, v)`` into ``out`` (the result's shape, any strides): bitwise the
    primitive's ``"cpu"`` kernel's values."""
    ak = _use_c(q, k, v, out)
    if is_lowp(q, k, v, out):
        out[...] = _sdpa_cpu(xp, q, k, v, scale, is_causal)
    elif ak is None:
        out[...] = _sdpa_np(xp, q, k, v, scale, is_causal)
    else:
        ak.sdpa(q, k, v, scale, is_causal, out=out)
    return out


def sdpa_grad_into(xp, g, q, k, v, outs, scale, is_causal, plus_zero=False):
    """Write ``dq, dk, dv`` into ``outs`` (of q's, k's, v's shapes, any strides): bitwise
    the slices of ``sdpa_grad``'s ``"cpu"`` kernel, plus ``0.0`` with ``plus_zero``.

    A GPU's arrays: the flash kernels write ``outs`` directly, ``-0.0`` kept (a compiled
    GPU graph is not bitwise eager's anyway: its kernels are fused); other cases copy
    ``sdpa_grad``'s CUDA result in."""
    if getattr(xp, "__name__", "numpy") != "numpy":     # NOTE: CuPy (the stand-in: NumPy)
        return _grad_into_cuda(xp, g, q, k, v, outs, scale, is_causal)
    if is_lowp(g, q, k, v, *outs):
        flat, at = _sdpa_grad_cpu(xp, g, q, k, v, scale, is_causal), 0
        for o in outs:
            part = flat[at:at + o.size].reshape(o.shape)
            at += o.size
            if plus_zero:
                xp.add(part, 0.0, out=o)
            else:
                o[...] = part
        return outs
    ak = _use_c(g, q, k, v, *outs)
    if ak is not None:
        return ak.sdpa_grad(g, q, k, v, scale, is_causal, out=outs, plus_zero=plus_zero)
    for o, r in zip(outs, _grad_parts_np(xp, g, q, k, v, scale, is_causal)):
        if plus_zero:
            xp.add(r, 0.0, out=o)                     # -0.0 -> +0.0, as 0 + r does
        else:
            o[...] = r
    return outs


def _grad_into_cuda(xp, g, q, k, v, outs, scale, is_causal):
    """:func:`sdpa_grad_into` on a ``cuda`` device: the flash kernels write ``outs``
    directly; other cases copy ``sdpa_grad``'s CUDA kernel's result in (``-0.0`` kept)."""
    fa = _flash(g, q, k, v)
    if fa is not None:
        return fa.backward(xp, g, q, k, v, scale, is_causal, outs=outs)
    flat, at = _sdpa_grad_cuda(xp, g, q, k, v, scale, is_causal), 0
    for o in outs:
        o[...] = flat[at:at + o.size].reshape(o.shape)
        at += o.size
    return outs


# ------------------------------------------------------------------ rules
def _check_shapes(qs, ks, vs, op="sdpa"):
    ok = len(qs) >= 2 and len(ks) == len(qs) and len(vs) == len(qs) and \
        tuple(qs[:-2]) == tuple(ks[:-2]) == tuple(vs[:-2]) and qs[-1] == ks[-1] and \
        ks[-2] == vs[-2]
    if not ok:
        raise ShapeError(f"{op}: expected q (..., Tq, D), k (..., Tk, D) and v (..., Tk, Dv) "
                         f"with the same batch dims; got {tuple(qs)}, {tuple(ks)}, "
                         f"{tuple(vs)}")


def _dtype_rule(*xs, **params):
    d = xs[0]._dtype
    if d.category != _dt.FLOAT or any(x._dtype is not d for x in xs):
        raise DTypeError(f"sdpa: q, k and v must share one floating point dtype; got "
                         f"{', '.join(x._dtype.name for x in xs)}")
    return None, d


def _grad_shape(gs, qs, ks, vs, scale, is_causal):
    _check_shapes(qs, ks, vs, "sdpa_grad")
    return (math.prod(qs[:-2]) * (qs[-2] * qs[-1] + ks[-2] * ks[-1] + vs[-2] * vs[-1]),)


def _scores(q, k, scale, is_causal):
    """Differentiable ``P = softmax(q kᵀ * scale [masked])`` in Ember ops."""
    s = matmul(q, k.transpose(-2, -1)) * scale
    if is_causal:
        keep = tril(ones(q.shape[-2], k.shape[-2], dtype=_dt.bool_, device=q.device))
        s = s.masked_fill(keep.logical_not(), float("-inf"))
    if k.shape[-2] == 0:
        return s
    return softmax(s, -1)


def _sdpa_vjp(g, out, q, k, v, scale, is_causal):
    if not state.grad_enabled:
        slots = unbind_slots(q, k, v)
        if slots is not None:     # q, k, v = qkv.unbind(dim): one buffer, no stack after
            s = _apply(sdpa_grad_slots_p, (g, q, k, v), {
                "scale": scale, "is_causal": is_causal, "dim": slots[0], "order": slots[1]})
            s._unbind_slots = True
            return s.unbind(slots[0])
        flat = _apply(sdpa_grad_p, (g, q, k, v), {"scale": scale, "is_causal": is_causal})
        a = q.numel()
        b = a + k.numel()
        return (flat[:a].reshape(q.shape), flat[a:b].reshape(k.shape),
                flat[b:].reshape(v.shape))
    # create_graph: the standard formulas in differentiable ops (double backward)
    p = _scores(q, k, scale, is_causal)
    dp = matmul(g, v.transpose(-2, -1))
    ds = p * (dp - sum(p * dp, -1, keepdim=True))
    return (matmul(ds, k) * scale, matmul(ds.transpose(-2, -1), q) * scale,
            matmul(p.transpose(-2, -1), g))


def _sdpa_jvp(t, out, q, k, v, scale, is_causal):
    tq, tk, tv = t
    p = _scores(q, k, scale, is_causal)
    dsc = (matmul(tq, k.transpose(-2, -1)) + matmul(q, tk.transpose(-2, -1))) * scale
    dp = p * (dsc - sum(p * dsc, -1, keepdim=True))
    return matmul(dp, v) + matmul(p, tv)


sdpa_p = defop(
    "sdpa", nin=3, params={"scale": 1.0, "is_causal": False}, dtype=_dtype_rule,
    batch=_vb.sdpa,
    kernels={"xp": _sdpa_np, "cpu": _sdpa_cpu, "cuda": _sdpa_cuda}, save="inputs",
    check=lambda q, k, v, **p: _check_shapes(q.shape, k.shape, v.shape),
    shape=lambda qs, ks, vs, scale, is_causal: (_check_shapes(qs, ks, vs),
                                                tuple(qs[:-1]) + (vs[-1],))[1],
    vjp=_sdpa_vjp, jvp=_sdpa_jvp,
    doc="softmax(q kᵀ * scale [causal]) v over (..., T, D) heads")

sdpa_grad_p = defop(
    "sdpa_grad", nin=4, params={"scale": 1.0, "is_causal": False}, dtype=_dtype_rule,
    batch=_vb.sdpa_grad,
    kernels={"xp": _sdpa_grad_np, "cpu": _sdpa_grad_cpu, "cuda": _sdpa_grad_cuda}, save=None,
    differentiable=False,
    check=lambda g, q, k, v, **p: _check_shapes(q.shape, k.shape, v.shape, "sdpa_grad"),
    shape=_grad_shape,
    doc="dq | dk | dv of sdpa, flattened and concatenated (one output)")


def _slots_shape(gs, qs, ks, vs, scale, is_causal, dim, order):
    _check_shapes(qs, ks, vs, "sdpa_grad_slots")
    if tuple(qs) != tuple(ks) or tuple(qs) != tuple(vs):
        raise ShapeError(f"sdpa_grad_slots: q, k and v must have one shape (slots of one "
                         f"tensor), got {tuple(qs)}, {tuple(ks)}, {tuple(vs)}")
    return tuple(qs[:dim]) + (3,) + tuple(qs[dim:])


def _slots_buffer(xp, q, dim, order):
    """``(buffer, its three slots along dim)``: a new buffer of ``q``'s shape with a slot
    dim of 3 at ``dim``, its memory C order in the dims ``order`` (None: C order)."""
    shape = q.shape[:dim] + (3,) + q.shape[dim:]
    order = tuple(range(len(shape))) if order is None else tuple(order)
    inv = [0] * len(order)
    for i, a in enumerate(order):
        inv[a] = i
    s = xp.empty(tuple(shape[a] for a in order), q.dtype).transpose(inv)
    lead = (slice(None),) * dim
    return s, tuple(s[lead + (i,)] for i in range(3))


def _grad_slots_kernel(xp, g, q, k, v, scale, is_causal, dim, order):
    """dq, dk, dv (each ``+ 0.0``) in the slots along ``dim`` of one new buffer whose memory
    is C order in the dims ``order`` (None: C order)."""
    s, slots = _slots_buffer(xp, q, dim, order)
    sdpa_grad_into(xp, g, q, k, v, slots, scale, is_causal, plus_zero=True)
    return s


def _grad_slots_cuda(xp, g, q, k, v, scale, is_causal, dim, order):
    """:func:`_grad_slots_kernel` on a ``cuda`` device: the flash kernels write the slots
    (``-0.0`` kept, the compiled graphs' contract), then one in-place ``+ 0.0`` pass gives
    eager's values, those of the unbind's stack (``add_(0.0)``) of a flat ``sdpa_grad``."""
    s, slots = _slots_buffer(xp, q, dim, order)
    _grad_into_cuda(xp, g, q, k, v, slots, scale, is_causal)
    xp.add(s, 0.0, out=s)
    return s


# NOTE: the eager form of the compiled graph's sdpa_layout rewrite: when q, k, v are the
# outputs of one eager ``unbind`` (the GPT's ``qkv...unbind(0)``), the VJP writes dq, dk, dv
# straight into the slots of the unbind input's gradient (its memory layout), and the
# unbind's VJP returns that buffer: no stack copy. Values: sdpa_grad's, plus 0.0.
sdpa_grad_slots_p = defop(
    "sdpa_grad_slots", nin=4, params={"scale": 1.0, "is_causal": False, "dim": 0,
                                      "order": None},
    dtype=_dtype_rule, batch="loop", save=None,
    kernels={"xp": _grad_slots_kernel, "cuda": _grad_slots_cuda},
    differentiable=False,
    check=lambda g, q, k, v, **p: _slots_shape(g.shape, q.shape, k.shape, v.shape, **p),
    shape=_slots_shape,
    doc="dq, dk, dv of sdpa in the slots along dim of one buffer (memory order `order`)")


def sdpa(q, k, v, scale=None, is_causal=False) -> Tensor:
    """Fused ``softmax(q kᵀ * scale) v`` (top-left causal mask with ``is_causal``).

    ``scale`` defaults to ``1 / sqrt(D)``. No attention mask, no dropout: see
    ``ember.nn.functional.scaled_dot_product_attention`` for those.

    Example:
        >>> q = ember.randn(2, 4, 8)
        >>> ember.ops.attention.sdpa(q, q, q, is_causal=True).shape
        ember.Size([2, 4, 8])
    """
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, Tensor):
            raise TypeError(f"sdpa: {name} must be a Tensor, got {type(x).__name__}")
    _check_shapes(q.shape, k.shape, v.shape)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1]) if q.shape[-1] else 1.0
    return _apply(sdpa_p, (q, k, v), {"scale": float(scale), "is_causal": bool(is_causal)})
