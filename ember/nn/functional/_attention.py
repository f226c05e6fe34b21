"""Attention: ``scaled_dot_product_attention`` and ``multi_head_attention_forward``.

Both are composites of Ember ops (matmul, softmax, masked_fill, ...), so autograd, higher-order
gradients and tracing work through them unchanged.
"""
from __future__ import annotations

import math

from ... import dtypes as _dt
from ...errors import DTypeError, ShapeError
from ...ops.factories import ones, zeros
from ...ops.attention import sdpa_p
from ...ops.index import pad
from ...ops.join import cat
from ...ops.linalg import addmm, matmul
from ...ops.softmax import softmax
from ...tensor import Tensor
from ._layers import dropout
from ...ops.dispatch import autocast_entry

__all__ = ["scaled_dot_product_attention", "multi_head_attention_forward"]

_NEG_INF = float("-inf")

#: ``scaled_dot_product_attention`` without a mask or dropout runs the fused ``sdpa``
#: primitive; False keeps the composite (benchmarks compare the two).
FUSED_SDPA = True


def _causal_mask(L: int, S: int, device) -> Tensor:
    """True above the diagonal: the positions a causal query may NOT attend to."""
    from ...ops.join import triu
    return triu(ones(L, S, dtype=_dt.bool_, device=device), 1)


def _attn_bias(scores: Tensor, attn_mask: Tensor | None, is_causal: bool):
    """Apply the mask to ``scores``; return (scores, dead) with ``dead`` marking fully-masked
    query rows (or None when no row can be fully masked)."""
    L, S = scores.shape[-2], scores.shape[-1]
    if is_causal:
        if attn_mask is not None:
            raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be "
                               "set when is_causal=True")
        # NOTE: row i keeps column 0, so no causal row is ever fully masked.
        return scores.masked_fill(_causal_mask(L, S, scores.device), _NEG_INF), None
    if attn_mask is None:
        return scores, None
    if not isinstance(attn_mask, Tensor):
        raise TypeError(f"scaled_dot_product_attention: attn_mask must be a Tensor or None, "
                        f"got {type(attn_mask).__name__}")
    if attn_mask.dtype is _dt.bool_:
        dead = attn_mask.logical_not().all(-1, keepdim=True)
        scores = scores.masked_fill(attn_mask.logical_not(), _NEG_INF)
    elif attn_mask.dtype.is_floating_point:
        dead = attn_mask.isneginf().all(-1, keepdim=True)
        scores = scores + attn_mask
    else:
        raise DTypeError(f"scaled_dot_product_attention: attn_mask must be bool or floating "
                         f"point, got {attn_mask.dtype}")
    return scores, dead


def _check_sdpa(query, key, value, enable_gqa):
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, Tensor):
            raise TypeError(f"scaled_dot_product_attention: {name} must be a Tensor, "
                            f"got {type(t).__name__}")
        if t.ndim < 2:
            raise ShapeError(f"scaled_dot_product_attention: {name} must have at least 2 dims "
                             f"(..., L, E), got shape {tuple(t.shape)}")
    if query.shape[-1] != key.shape[-1] or key.shape[-2] != value.shape[-2]:
        raise ShapeError(f"scaled_dot_product_attention: expected query (..., L, E), key "
                         f"(..., S, E) and value (..., S, Ev); got {tuple(query.shape)}, "
                         f"{tuple(key.shape)}, {tuple(value.shape)}")
    if enable_gqa and query.ndim >= 3 and key.shape[-3] != query.shape[-3]:
        hq, hk = query.shape[-3], key.shape[-3]
        if hq % hk or value.shape[-3] != hk:
            raise ShapeError(f"scaled_dot_product_attention: with enable_gqa the query heads "
                             f"({hq}) must be a multiple of the key/value heads ({hk}, "
                             f"{value.shape[-3]})")
        key = key.repeat_interleave(hq // hk, -3)
        value = value.repeat_interleave(hq // hk, -3)
    return key, value


@autocast_entry("scaled_dot_product_attention")
def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False) -> Tensor:
    """``softmax(Q Kᵀ * scale + mask) V`` (``torch.nn.functional.scaled_dot_product_attention``).

    A bool ``attn_mask`` marks with True the positions that take part; a float mask is added to
    the scores. ``is_causal`` masks the upper triangle. Fully masked query rows give zeros.
    ``dropout_p`` is applied to the attention weights whenever it is > 0 (pass 0.0 in eval).

    Example:
        >>> q = ember.randn(2, 4, 8)
        >>> F.scaled_dot_product_attention(q, q, q, is_causal=True).shape
        ember.Size([2, 4, 8])
    """
    key, value = _check_sdpa(query, key, value, enable_gqa)
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    if FUSED_SDPA and attn_mask is None and dropout_p == 0.0 and query.shape[:-2] == key.shape[:-2] == \
            value.shape[:-2] and query.dtype is key.dtype is value.dtype and \
            query.dtype.is_floating_point:
        # NOTE: the fused primitive (one pass per head, C kernels on CPU); masks, dropout,
        # broadcast batch dims and mixed dtypes take the composite below
        return sdpa_p(query, key, value, scale=float(scale), is_causal=bool(is_causal))
    scores = matmul(query * scale, key.transpose(-2, -1))
    scores, dead = _attn_bias(scores, attn_mask, is_causal)
    if dead is not None:
        # NOTE: a fully masked row would be softmax(-inf, ..., -inf) = NaN; torch returns zeros.
        # Neutralise such rows before the softmax (so no NaN reaches autograd), zero them after.
        scores = scores.masked_fill(dead, 0.0)
    weights = softmax(scores, -1)
    if dead is not None:
        weights = weights.masked_fill(dead, 0.0)
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p, training=True)
    return matmul(weights, value)


# ---------------------------------------------------------------- multi-head attention
def _canonical_mask(mask, name: str, dtype) -> Tensor | None:
    """MHA masks: bool (True = masked out) -> float with -inf; float masks pass through."""
    if mask is None:
        return None
    if not isinstance(mask, Tensor):
        raise TypeError(f"multi_head_attention_forward: {name} must be a Tensor or None")
    if mask.dtype is _dt.bool_:
        return zeros(tuple(mask.shape), dtype=dtype, device=mask.device).masked_fill(
            mask, _NEG_INF)
    if not mask.dtype.is_floating_point:
        raise DTypeError(f"multi_head_attention_forward: only bool and floating types of "
                         f"{name} are supported, got {mask.dtype}")
    return mask


def _linear(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    # NOTE: one 2-D GEMM over all rows: NumPy's N-D @ 2-D matmul (esp. on transposed views)
    # is several times slower than BLAS on the flattened rows.
    lead = tuple(x.shape[:-1])
    x2 = x.reshape(-1, x.shape[-1])
    out = matmul(x2, w.t()) if b is None else addmm(b, x2, w.t())
    return out.reshape(*lead, w.shape[0])


def _in_projection(q, k, v, w, b, sep):
    """Project q, k, v with the packed ``w`` (3E x E) or the separate weights ``sep``."""
    if sep is not None:
        bq = bk = bv = None
        if b is not None:
            bq, bk, bv = b.chunk(3)
        return _linear(q, sep[0], bq), _linear(k, sep[1], bk), _linear(v, sep[2], bv)
    E = q.shape[-1]
    if k is v and q is k:
        return _linear(q, w, b).unflatten(-1, (3, E)).unbind(-2)
    wq, wk, wv = w.chunk(3)
    bq = bk = bv = None
    if b is not None:
        bq, bk, bv = b.chunk(3)
    if k is v:
        kv = _linear(k, cat([wk, wv]), None if b is None else cat([bk, bv]))
        return (_linear(q, wq, bq),) + kv.unflatten(-1, (2, E)).unbind(-2)
    return _linear(q, wq, bq), _linear(k, wk, bk), _linear(v, wv, bv)


def _attn_mask_3d(attn_mask, L, S, bsz, num_heads):
    if attn_mask.ndim == 2:
        if tuple(attn_mask.shape) != (L, S):
            raise ShapeError(f"multi_head_attention_forward: the shape of the 2D attn_mask is "
                             f"{tuple(attn_mask.shape)}, but should be {(L, S)}")
        return attn_mask.unsqueeze(0)
    if attn_mask.ndim == 3:
        if tuple(attn_mask.shape) != (bsz * num_heads, L, S):
            raise ShapeError(f"multi_head_attention_forward: the shape of the 3D attn_mask is "
                             f"{tuple(attn_mask.shape)}, but should be {(bsz * num_heads, L, S)}")
        return attn_mask
    raise ShapeError(f"multi_head_attention_forward: attn_mask's dimension {attn_mask.ndim} "
                     f"is not supported (2 or 3 expected)")


def _add_extra_keys(k, v, attn_mask, kpm, extra_k, extra_v):
    """Append one key/value row (bias_k/bias_v or zeros) and widen the masks by one column."""
    k, v = cat([k, extra_k]), cat([v, extra_v])
    if attn_mask is not None:
        attn_mask = pad(attn_mask, (0, 1))
    if kpm is not None:
        kpm = pad(kpm, (0, 1))
    return k, v, attn_mask, kpm


def _mha_check(query, key, value, embed_dim_to_check, num_heads, kpm):
    if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim:
        raise ShapeError(f"multi_head_attention_forward: query, key and value must all be 3-D "
                         f"(L, N, E) or all 2-D unbatched (L, E); got shapes "
                         f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}")
    E = query.shape[-1]
    if E != embed_dim_to_check:
        raise ShapeError(f"multi_head_attention_forward: was expecting embedding dimension of "
                         f"{embed_dim_to_check}, but got {E}")
    if E % num_heads:
        raise ShapeError(f"multi_head_attention_forward: embed_dim {E} not divisible by "
                         f"num_heads {num_heads}")
    if key.shape[:-1] != value.shape[:-1]:
        raise ShapeError(f"multi_head_attention_forward: key shape {tuple(key.shape)} does not "
                         f"match value shape {tuple(value.shape)}")
    if kpm is not None:
        want = (key.shape[0],) if query.ndim == 2 else (key.shape[1], key.shape[0])
        if tuple(kpm.shape) != want:
            raise ShapeError(f"multi_head_attention_forward: expected key_padding_mask of shape "
                             f"{want}, got {tuple(kpm.shape)}")


def _mha_masks(query, attn_mask, kpm, is_causal, need_weights):
    """Canonicalise the masks (torch's rules, incl. ``is_causal`` as a hint)."""
    kpm = _canonical_mask(kpm, "key_padding_mask", query.dtype)
    if is_causal and attn_mask is None:
        raise RuntimeError("multi_head_attention_forward: need attn_mask if specifying the "
                           "is_causal hint. You may use the Transformer module method "
                           "`generate_square_subsequent_mask` to create this mask.")
    if is_causal and kpm is None and not need_weights:
        # NOTE: the mask is assumed causal; SDPA builds it itself.
        return None, None, True
    return _canonical_mask(attn_mask, "attn_mask", query.dtype), kpm, False


def _heads(x: Tensor, bsz_heads: int, head_dim: int) -> Tensor:
    """(S, N, E) -> (N * num_heads, S, head_dim)."""
    return x.reshape(x.shape[0], bsz_heads, head_dim).transpose(0, 1)


def _attention_core(q, k, v, attn_mask, dropout_p, need_weights, is_causal, dims):
    """Attention over (N*H, L, hd) tensors; returns (output (L, N, E), weights or None)."""
    bsz, num_heads, L, S, E = dims
    hd = E // num_heads
    if need_weights:
        qs = q * math.sqrt(1.0 / hd)
        w = matmul(qs, k.transpose(-2, -1))
        if attn_mask is not None:
            w = w + attn_mask
        w = softmax(w, -1)
        if dropout_p > 0.0:
            w = dropout(w, dropout_p, training=True)
        out = matmul(w, v)
        return out.transpose(0, 1).reshape(L * bsz, E), w.reshape(bsz, num_heads, L, S)
    if attn_mask is not None:
        if attn_mask.shape[0] == 1:
            attn_mask = attn_mask.unsqueeze(0)
        else:
            attn_mask = attn_mask.reshape(bsz, num_heads, -1, S)
    q, k, v = (t.reshape(bsz, num_heads, t.shape[1], hd) for t in (q, k, v))
    out = scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal)
    return out.permute(2, 0, 1, 3).reshape(L * bsz, E), None


def multi_head_attention_forward(query, key, value, embed_dim_to_check, num_heads,
                                 in_proj_weight, in_proj_bias, bias_k, bias_v, add_zero_attn,
                                 dropout_p, out_proj_weight, out_proj_bias, training=True,
                                 key_padding_mask=None, need_weights=True, attn_mask=None,
                                 use_separate_proj_weight=False, q_proj_weight=None,
                                 k_proj_weight=None, v_proj_weight=None, static_k=None,
                                 static_v=None, average_attn_weights=True, is_causal=False):
    """Multi-head attention on (L, N, E) inputs (``F.multi_head_attention_forward``).

    Masks follow ``nn.MultiheadAttention``: in ``key_padding_mask`` and bool ``attn_mask``,
    True marks a position that is NOT attended to. Returns ``(output, weights or None)``.

    Example:
        >>> x = ember.randn(5, 2, 8)  # (L, N, E)
        >>> mha = ember.nn.MultiheadAttention(8, 2)
        >>> mha(x, x, x)[0].shape
        ember.Size([5, 2, 8])
    """
    _mha_check(query, key, value, embed_dim_to_check, num_heads, key_padding_mask)
    batched = query.ndim == 3
    if not batched:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.unsqueeze(0)
    L, bsz, E = query.shape
    attn_mask, kpm, is_causal = _mha_masks(query, attn_mask, key_padding_mask, is_causal,
                                           need_weights)
    sep = (q_proj_weight, k_proj_weight, v_proj_weight) if use_separate_proj_weight else None
    q, k, v = _in_projection(query, key, value, in_proj_weight, in_proj_bias, sep)
    if attn_mask is not None:
        attn_mask = _attn_mask_3d(attn_mask, L, key.shape[0], bsz, num_heads)
    if bias_k is not None and bias_v is not None:
        if static_k is not None or static_v is not None:
            raise ValueError("multi_head_attention_forward: bias cannot be added to static "
                             "key/value")
        k, v, attn_mask, kpm = _add_extra_keys(k, v, attn_mask, kpm, bias_k.expand(1, bsz, E),
                                               bias_v.expand(1, bsz, E))
    elif (bias_k is None) != (bias_v is None):
        raise ValueError("multi_head_attention_forward: bias_k and bias_v must both be given")
    hd = E // num_heads
    q = _heads(q, bsz * num_heads, hd)
    k = _heads(k, bsz * num_heads, hd) if static_k is None else static_k
    v = _heads(v, bsz * num_heads, hd) if static_v is None else static_v
    if add_zero_attn:
        z = zeros((bsz * num_heads, 1, hd), dtype=q.dtype, device=q.device)
        k, v = cat([k, z], 1), cat([v, z], 1)
        attn_mask = None if attn_mask is None else pad(attn_mask, (0, 1))
        kpm = None if kpm is None else pad(kpm, (0, 1))
    S = k.shape[1]
    if kpm is not None:
        kpm = kpm.reshape(bsz, 1, 1, S).expand(-1, num_heads, -1, -1).reshape(
            bsz * num_heads, 1, S)
        attn_mask = kpm if attn_mask is None else attn_mask + kpm
    out, w = _attention_core(q, k, v, attn_mask, dropout_p if training else 0.0,
                             need_weights, is_causal, (bsz, num_heads, L, S, E))
    out = _linear(out, out_proj_weight, out_proj_bias).reshape(L, bsz, E)
    if w is not None and average_attn_weights:
        w = w.mean(1)
    if not batched:
        out = out.squeeze(1)
        w = None if w is None else w.squeeze(0)
    return out, w
