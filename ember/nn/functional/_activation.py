"""Activation functions (``torch.nn.functional`` names), as composites of Ember ops.

Branches that could overflow in the unused side of a ``where`` (``exp`` of a large input)
are fed a clamped or masked input, so that neither the value nor the gradient of the
unused side is ever ``inf``/``nan`` (``0 * inf`` would poison the gradient otherwise).
"""
from __future__ import annotations

import math
import warnings

from ...errors import ShapeError
from ...ops import select as _select
from ...ops import softmax as _softmax
from ...ops import unary as _unary
from ...ops.inplace import check_inplace, commit
from ...autograd.grad_mode import state as _state
from ...tensor import Tensor
from ...ops.dispatch import autocast_entry

__all__ = ['relu', 'relu_', 'relu6', 'leaky_relu', 'leaky_relu_', 'prelu', 'elu', 'elu_', 'selu',
           'celu', 'gelu', 'silu', 'mish', 'softplus', 'softsign', 'hardtanh', 'hardtanh_',
           'hardsigmoid', 'hardswish', 'sigmoid', 'tanh', 'logsigmoid', 'softmin', 'glu',
           'threshold', 'threshold_', 'tanhshrink', 'softshrink', 'hardshrink']

_where = _select.where
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _check(x, op):
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}(): argument 'input' must be a Tensor, not {type(x).__name__}")
    return x


def _apply(fn, input, inplace, op):
    """``fn(input)``, written into ``input`` when ``inplace`` (like PyTorch's ``op_``)."""
    _check(input, op)
    if not inplace:
        return fn(input)
    check_inplace(input, op + "_")
    # NOTE: the composite may save ``input`` for backward; computing it on a clone keeps the
    # saved values intact when ``input`` is then overwritten.
    src = input.clone() if _state.grad_enabled and input.requires_grad else input
    return commit(input, fn(src), op + "_")


def relu(input: Tensor, inplace: bool = False) -> Tensor:
    """``max(x, 0)``.

    Example:
        >>> F.relu(ember.tensor([-1.0, 2.0]))
        tensor([0., 2.])
    """
    _check(input, "relu")
    return input.relu_() if inplace else _unary.relu(input)


def relu_(input: Tensor) -> Tensor:
    """In-place :func:`relu`."""
    return relu(input, inplace=True)


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0,
             inplace: bool = False) -> Tensor:
    """Clamp to ``[min_val, max_val]``."""
    if min_val > max_val:
        raise ValueError(f"hardtanh: min_val ({min_val}) cannot be greater than max_val "
                         f"({max_val})")
    _check(input, "hardtanh")
    return input.clamp_(min_val, max_val) if inplace else _select.clamp(input, min_val, max_val)


def hardtanh_(input: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    return hardtanh(input, min_val, max_val, inplace=True)


def relu6(input: Tensor, inplace: bool = False) -> Tensor:
    """``min(max(x, 0), 6)``."""
    return hardtanh(input, 0.0, 6.0, inplace)


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    """``x`` if ``x > 0`` else ``negative_slope * x``."""
    return _apply(lambda x: _where(x > 0, x, x * negative_slope), input, inplace, "leaky_relu")


def leaky_relu_(input: Tensor, negative_slope: float = 0.01) -> Tensor:
    return leaky_relu(input, negative_slope, inplace=True)


@autocast_entry("prelu")
def prelu(input: Tensor, weight: Tensor) -> Tensor:
    """``x`` if ``x > 0`` else ``weight * x``; ``weight`` has 1 or C (dim 1) entries."""
    _check(input, "prelu")
    n = weight.numel()
    if n != 1:
        ch = 1 if input.ndim >= 2 else 0
        if input.ndim == 0 or input.shape[ch] != n:
            raise ShapeError(f"prelu: the number of weight entries ({n}) does not match the "
                             f"number of channels of input of shape {tuple(input.shape)}")
        weight = weight.reshape((n,) + (1,) * (input.ndim - ch - 1))
    elif weight.ndim:
        weight = weight.reshape(())
    return _where(input > 0, input, weight * input)


def _elu_neg(x, alpha, inv_scale=1.0):
    # exp only ever sees x <= 0: no overflow on the unused (positive) side
    return alpha * _unary.expm1(_select.clamp(x, max=0) * inv_scale)


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """``x`` if ``x > 0`` else ``alpha * (exp(x) - 1)``."""
    return _apply(lambda x: _where(x > 0, x, _elu_neg(x, alpha)), input, inplace, "elu")


def elu_(input: Tensor, alpha: float = 1.0) -> Tensor:
    return elu(input, alpha, inplace=True)


def celu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """``x`` if ``x > 0`` else ``alpha * (exp(x / alpha) - 1)``."""
    if alpha == 0:
        raise ValueError("celu: alpha cannot be 0")
    return _apply(lambda x: _where(x > 0, x, _elu_neg(x, alpha, 1.0 / alpha)), input, inplace,
                  "celu")


def selu(input: Tensor, inplace: bool = False) -> Tensor:
    """``scale * elu(x, alpha)`` with the self-normalising constants."""
    return _apply(lambda x: _where(x > 0, x * _SELU_SCALE, _elu_neg(x, _SELU_ALPHA * _SELU_SCALE)),
                  input, inplace, "selu")


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    """``x * Φ(x)`` (erf form), or the tanh approximation with ``approximate='tanh'``."""
    _check(input, "gelu")
    if approximate == "none":
        return input * 0.5 * (1.0 + _unary.erf(input * (1.0 / math.sqrt(2.0))))
    if approximate == "tanh":
        inner = (input + 0.044715 * input * input * input) * math.sqrt(2.0 / math.pi)
        return input * 0.5 * (1.0 + _unary.tanh(inner))
    raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def silu(input: Tensor, inplace: bool = False) -> Tensor:
    """``x * sigmoid(x)`` (swish)."""
    return _apply(lambda x: x * _unary.sigmoid(x), input, inplace, "silu")


@autocast_entry("softplus")
def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """``log(1 + exp(beta * x)) / beta``; linear where ``beta * x > threshold``."""
    _check(input, "softplus")
    big = input * beta > threshold
    safe = _where(big, 0.0, input)
    soft = _unary.log1p(_unary.exp(safe * beta))
    return _where(big, input, soft if beta == 1 else soft / beta)


def mish(input: Tensor, inplace: bool = False) -> Tensor:
    """``x * tanh(softplus(x))``."""
    return _apply(lambda x: x * _unary.tanh(softplus(x)), input, inplace, "mish")


def softsign(input: Tensor) -> Tensor:
    """``x / (1 + |x|)``."""
    return _check(input, "softsign") / (1 + _unary.abs(input))


def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:
    """``relu6(x + 3) / 6``."""
    return _apply(lambda x: _select.clamp(x + 3.0, 0.0, 6.0) / 6.0, input, inplace,
                  "hardsigmoid")


def hardswish(input: Tensor, inplace: bool = False) -> Tensor:
    """``x * relu6(x + 3) / 6``."""
    return _apply(lambda x: x * _select.clamp(x + 3.0, 0.0, 6.0) / 6.0, input, inplace,
                  "hardswish")


def sigmoid(input: Tensor) -> Tensor:
    """``1 / (1 + exp(-x))``."""
    return _unary.sigmoid(_check(input, "sigmoid"))


def tanh(input: Tensor) -> Tensor:
    """Hyperbolic tangent."""
    return _unary.tanh(_check(input, "tanh"))


def logsigmoid(input: Tensor) -> Tensor:
    """``log(sigmoid(x))``, computed without overflow on either side."""
    _check(input, "logsigmoid")
    pos = input >= 0
    xp, xn = _where(pos, input, 0.0), _where(pos, 0.0, input)
    return _where(pos, -_unary.log1p(_unary.exp(-xp)), xn - _unary.log1p(_unary.exp(xn)))


def _legacy_dim(ndim: int, op: str, stacklevel: int = 3) -> int:
    """PyTorch's legacy implicit softmax dim (0 for 0-, 1- and 3-D input, else 1)."""
    warnings.warn(f"Implicit dimension choice for {op} has been deprecated. Change the call "
                  f"to include dim=X as an argument.", stacklevel=stacklevel)
    return 0 if ndim in (0, 1, 3) else 1


def softmin(input: Tensor, dim=None, _stacklevel: int = 3, dtype=None) -> Tensor:
    """``softmax(-x, dim)``."""
    _check(input, "softmin")
    if dim is None:
        dim = _legacy_dim(input.ndim, "softmin")
    return _softmax.softmax(-input, dim, dtype=dtype)


def glu(input: Tensor, dim: int = -1) -> Tensor:
    """Gated linear unit: split ``dim`` in halves ``a, b`` and return ``a * sigmoid(b)``."""
    _check(input, "glu")
    if input.ndim == 0:
        raise ShapeError("glu: does not support scalars because halving size must be even")
    if input.shape[dim] % 2:
        raise ShapeError(f"glu: halving dimension must be even, but dimension {dim} of input "
                         f"of shape {tuple(input.shape)} is size {input.shape[dim]}")
    a, b = input.chunk(2, dim)
    return a * _unary.sigmoid(b)


def threshold(input: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:
    """``x`` if ``x > threshold`` else ``value``."""
    return _apply(lambda x: _where(x > threshold, x, value), input, inplace, "threshold")


def threshold_(input: Tensor, threshold: float, value: float) -> Tensor:
    return globals()["threshold"](input, threshold, value, inplace=True)


def tanhshrink(input: Tensor) -> Tensor:
    """``x - tanh(x)``."""
    return _check(input, "tanhshrink") - _unary.tanh(input)


def softshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    """``x - lambd`` above ``lambd``, ``x + lambd`` below ``-lambd``, else 0."""
    _check(input, "softshrink")
    if lambd < 0:
        raise ValueError(f"softshrink: lambda must be >= 0, got {lambd}")
    return _where(input > lambd, input - lambd, _where(input < -lambd, input + lambd, 0.0))


def hardshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    """``x`` where ``|x| > lambd``, else 0."""
    _check(input, "hardshrink")
    return _where((input > lambd) | (input < -lambd), input, 0.0)
