"""Functional forms of layers: linear, dropout, embedding and distances (``torch.nn.functional``).

Normalisation lives in :mod:`._norm` and resampling (interpolate, pixel shuffle) in
:mod:`._resample`; both are re-exported here.
"""
from __future__ import annotations

from ...autograd.grad_mode import no_grad, state as _grad_state
from ...errors import DTypeError, ShapeError
from ...tensor import Tensor
from ._norm import *  # noqa: F401,F403
from ._norm import __all__ as _norm_all
from ._resample import *  # noqa: F401,F403
from ._resample import __all__ as _resample_all
from ...ops import dispatch as _dispatch
from ...ops.dispatch import autocast_entry, apply as _apply
from ...ops._util import min_max
from ...ops.linear import linear_p
from ... import dtypes as _dt

__all__ = ['linear', 'bilinear', 'dropout', 'dropout1d', 'dropout2d', 'dropout3d',
           'alpha_dropout', 'feature_alpha_dropout', 'embedding', 'normalize',
           'cosine_similarity', 'pairwise_distance'] + _norm_all + _resample_all

_SELU_NEG = 1.7580993408473766      # -selu(-inf) = scale * alpha


@autocast_entry("linear")
def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``input @ weight.T + bias``.

    Example:
        >>> F.linear(ember.ones(2, 3), ember.ones(4, 3)).shape
        ember.Size([2, 4])
    """
    if not isinstance(input, Tensor) or not isinstance(weight, Tensor):
        raise TypeError("linear(): input and weight must be Tensors")
    modes = _grad_state.modes
    if isinstance(bias, Tensor) and (not modes or all(
            getattr(m, "eager_vjps", False) for m in modes)) and \
            _linear_p_fits(input, weight, bias):
        # NOTE: eager (and ``estimate_memory``'s mode, ``eager_vjps``, which follows eager's
        # tensors) only: a tracer sees matmul + add, which the graph passes fuse. One
        # primitive and one autograd node instead of a transpose view, a product and an add
        # forward and their three backward nodes (with four more transposes), the same bits
        # as matmul + add (ops/linear.py); on float32 CPU operands the bias is added in the
        # stores of Ember's GEMM
        return _apply(linear_p, (input, weight, bias), {})
    if weight.ndim not in (1, 2) or input.ndim == 0 or input.shape[-1] != weight.shape[-1]:
        raise ShapeError(f"linear: input of shape {tuple(input.shape)} does not fit weight of "
                         f"shape {tuple(weight.shape)}: expected input.shape[-1] == "
                         f"weight.shape[-1] and a 1-D or 2-D weight")
    out = input.matmul(weight.mT if weight.ndim == 2 else weight)
    return out if bias is None else out + bias


#: the dtypes the ``linear`` primitive takes (PyTorch's ``aten::linear``: real floating)
_LINEAR_DTYPES = frozenset((_dt.float32, _dt.float16, _dt.bfloat16, _dt.float64))


def _linear_p_fits(x, w, b) -> bool:
    """Whether ``F.linear(x, w, b)`` is the ``linear`` primitive's case, read from the raw
    shapes (no Size objects on the eager hot path): one real floating dtype and one device
    for the three tensors, a 2-D weight, a 1-D bias and an input of 2 dims, or more when
    contiguous (its rows fold as a view)."""
    dt, dev = x._dtype, x._device
    if w._dtype is not dt or b._dtype is not dt or dt not in _LINEAR_DTYPES or \
            w._device is not dev or b._device is not dev:
        return False
    xs, ws = x._data.shape, w._data.shape
    return len(ws) == 2 and len(b._data.shape) == 1 and len(xs) >= 2 and xs[-1] == ws[1] \
        and (len(xs) == 2 or x.is_contiguous())


@autocast_entry("bilinear")
def bilinear(input1: Tensor, input2: Tensor, weight: Tensor, bias: Tensor | None = None):
    """``y_k = x1 · W_k · x2 + b_k``; ``weight`` has shape (out, in1, in2)."""
    if weight.ndim != 3 or input1.shape[-1] != weight.shape[1] or \
            input2.shape[-1] != weight.shape[2] or input1.shape[:-1] != input2.shape[:-1]:
        raise ShapeError(f"bilinear: inputs of shapes {tuple(input1.shape)} and "
                         f"{tuple(input2.shape)} do not fit weight of shape "
                         f"{tuple(weight.shape)} (expected (..., in1), (..., in2) and "
                         f"(out, in1, in2))")
    out_f, in1, in2 = weight.shape
    # (..., in1) @ (in1, out*in2) -> (..., out, in2), then contract with x2
    t = input1.matmul(weight.permute(1, 0, 2).reshape(in1, out_f * in2))
    out = (t.reshape(*input1.shape[:-1], out_f, in2) * input2.unsqueeze(-2)).sum(-1)
    return out if bias is None else out + bias


# ------------------------------------------------------------------ dropout
def _check_p(p, op):
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{op}: dropout probability has to be between 0 and 1, but got {p}")


def _keep_mask(input, shape, p):
    """0/1 mask (``input``'s dtype) with keep probability ``1 - p``, from the global RNG."""
    from ...ops.factories import empty
    if not input.dtype.is_floating_point:
        raise DTypeError(f"dropout: expected a floating point input, got {input.dtype.name}")
    return empty(*shape, dtype=input.dtype, device=input.device).bernoulli_(1.0 - p)


def _masked(input, mask, scale, inplace):
    if inplace:
        return input.mul_(mask * scale) if scale != 1.0 else input.mul_(mask)
    return input * (mask * scale) if scale != 1.0 else input * mask


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)``.

    The mask comes from the global generator, so ``ember.manual_seed`` makes it reproducible.

    Example:
        >>> F.dropout(ember.ones(4), p=0.5, training=False)
        tensor([1., 1., 1., 1.])
    """
    _check_p(p, "dropout")
    if not training or p == 0.0:
        return input
    mask = _keep_mask(input, input.shape, p)
    return _masked(input, mask, 0.0 if p == 1.0 else 1.0 / (1.0 - p), inplace)


def _feature_dropout(input, p, training, inplace, nd, op):
    _check_p(p, op)
    if input.ndim not in (nd + 1, nd + 2):
        raise ShapeError(f"{op}: expected a {nd + 1}-D (unbatched) or {nd + 2}-D (batched) "
                         f"input, got shape {tuple(input.shape)}")
    if not training or p == 0.0:
        return input
    shape = tuple(input.shape[:input.ndim - nd]) + (1,) * nd     # one draw per channel
    mask = _keep_mask(input, shape, p)
    return _masked(input, mask, 0.0 if p == 1.0 else 1.0 / (1.0 - p), inplace)


def dropout1d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Zero whole channels of (N, C, L) or (C, L) input with probability ``p``."""
    return _feature_dropout(input, p, training, inplace, 1, "dropout1d")


def dropout2d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Zero whole channels of (N, C, H, W) or (C, H, W) input with probability ``p``."""
    return _feature_dropout(input, p, training, inplace, 2, "dropout2d")


def dropout3d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Zero whole channels of (N, C, D, H, W) or (C, D, H, W) input with probability ``p``."""
    return _feature_dropout(input, p, training, inplace, 3, "dropout3d")


def _alpha(input, mask_shape, p, inplace):
    # NOTE: PyTorch's formula: dropped units go to SELU's negative saturation, then an affine
    # map (a, b) restores zero mean and unit variance.
    mask = _keep_mask(input, mask_shape, p)
    a = 1.0 / ((_SELU_NEG ** 2 * p + 1) * (1 - p)) ** 0.5
    b = (mask - 1.0 + p) * (_SELU_NEG * a)
    return input.mul_(mask * a).add_(b) if inplace else input * (mask * a) + b


def alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False):
    """Dropout that keeps SELU's self-normalising mean and variance."""
    _check_p(p, "alpha_dropout")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return input.mul_(0.0) if inplace else input * 0.0
    return _alpha(input, input.shape, p, inplace)


def feature_alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False,
                          inplace: bool = False):
    """Alpha dropout of whole channels (dim 1 of batched input)."""
    _check_p(p, "feature_alpha_dropout")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return input.mul_(0.0) if inplace else input * 0.0
    if input.ndim < 2:
        raise ShapeError(f"feature_alpha_dropout: expected an input with at least 2 dims, got "
                         f"shape {tuple(input.shape)}")
    return _alpha(input, tuple(input.shape[:2]) + (1,) * (input.ndim - 2), p, inplace)


# ------------------------------------------------------------------ embedding
def _renorm_rows(weight, idx, max_norm, norm_type):
    """PyTorch's ``embedding_renorm_``: rescale looked-up rows whose norm exceeds max_norm."""
    with no_grad():
        rows = _unique(idx)
        sel = weight.index_select(0, rows)
        norms = sel.norm(p=norm_type, dim=1, keepdim=True)
        scale = (max_norm / (norms + 1e-7)).clamp(max=1.0)
        weight.index_copy_(0, rows, sel * scale)


def _unique(idx):
    s, _ = idx.reshape(-1).sort()
    if s.numel() <= 1:
        return s
    keep = s[1:] != s[:-1]
    from ...ops.join import cat
    return cat([s[:1], s[1:][keep]])


def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None,
              max_norm: float | None = None, norm_type: float = 2.0,
              scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
    """Look up rows of ``weight`` by the integer indices in ``input``.

    Rows at ``padding_idx`` are returned as stored but receive no gradient.

    Example:
        >>> F.embedding(ember.tensor([[0, 2]]), ember.eye(3)).shape
        ember.Size([1, 2, 3])
    """
    if not isinstance(input, Tensor) or input.dtype.is_floating_point or \
            input.dtype.name == "bool":
        raise DTypeError(f"embedding: expected integer indices, got "
                         f"{getattr(input, 'dtype', type(input).__name__)}")
    if weight.ndim != 2:
        raise ShapeError(f"embedding: weight must be 2-D, got shape {tuple(weight.shape)}")
    if scale_grad_by_freq:
        raise NotImplementedError("embedding: scale_grad_by_freq is not supported")
    n = weight.shape[0]
    if padding_idx is not None:
        if not -n <= padding_idx < n:
            raise ValueError(f"embedding: padding_idx must be within num_embeddings ({n}), got "
                             f"{padding_idx}")
        padding_idx = padding_idx % n
    flat = input.reshape(-1)
    a = flat._data       # NOTE: values read for validation only (no effect on the graph)
    lo, hi = min_max(_dispatch._backends[flat._device.type].xp, a) if a.size else (0, 0)
    if lo < 0 or hi >= n:
        from ...errors import EmberIndexError
        raise EmberIndexError(f"embedding: index out of range: indices must be in [0, {n}), got "
                              f"[{lo}, {hi}]")
    if max_norm is not None:
        _renorm_rows(weight, flat, max_norm, norm_type)
    if sparse and weight.requires_grad and _grad_state.grad_enabled:
        from ...sparse._embedding import sparse_embedding    # COO gradient of the rows
        return sparse_embedding(flat, weight, padding_idx).reshape(*input.shape,
                                                                   weight.shape[1])
    out = weight.index_select(0, flat).reshape(*input.shape, weight.shape[1])
    if padding_idx is not None and out.requires_grad:
        from ...ops.select import where
        keep = (input != padding_idx).unsqueeze(-1)
        out = where(keep, out, out.detach())     # the padding row gets no gradient
    return out


# ------------------------------------------------------------------ distances
def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out=None):
    """``x / max(||x||_p, eps)`` along ``dim``."""
    norm = input.norm(p=p, dim=dim, keepdim=True).clamp(min=eps)
    r = input / norm
    if out is not None:
        return out.copy_(r)
    return r


@autocast_entry("cosine_similarity")
def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """``<x1, x2> / (max(||x1||, eps) * max(||x2||, eps))`` along ``dim`` (broadcasting)."""
    from ...ops.dispatch import broadcast_shapes
    shape = broadcast_shapes(tuple(x1.shape), tuple(x2.shape), op="cosine_similarity")
    a, b = x1.expand(shape), x2.expand(shape)
    na = a.norm(p=2, dim=dim, keepdim=True).clamp(min=eps)
    nb = b.norm(p=2, dim=dim, keepdim=True).clamp(min=eps)
    return ((a / na) * (b / nb)).sum(dim)


def pairwise_distance(x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6,
                      keepdim: bool = False) -> Tensor:
    """``||x1 - x2 + eps||_p`` along the last dim."""
    d = x1 - x2 + eps
    nd = max(x1.ndim, x2.ndim)
    return d.norm(p=p, dim=-1, keepdim=keepdim) if nd else d.abs()
