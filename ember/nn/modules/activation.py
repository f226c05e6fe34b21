"""Activation modules: thin wrappers over :mod:`ember.nn.functional` (PyTorch names and reprs)."""
from __future__ import annotations

from .. import functional as F
from ..module import Module
from ..parameter import Parameter

__all__ = ['ReLU', 'ReLU6', 'LeakyReLU', 'PReLU', 'ELU', 'CELU', 'SELU', 'GELU', 'SiLU', 'Mish',
           'Softplus', 'Softsign', 'Sigmoid', 'Tanh', 'LogSigmoid', 'Softmax', 'LogSoftmax',
           'Softmin', 'Softmax2d', 'Hardtanh', 'Hardsigmoid', 'Hardswish', 'Threshold', 'GLU',
           'Tanhshrink', 'Softshrink', 'Hardshrink', 'RReLU']


def _inplace_repr(inplace: bool) -> str:
    return "inplace=True" if inplace else ""


class _Inplace(Module):
    """An activation ``F.<fn>(x, inplace=...)`` with no other arguments."""

    _fn = None

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return type(self)._fn(input, inplace=self.inplace)

    def extra_repr(self) -> str:
        return _inplace_repr(self.inplace)


class _Plain(Module):
    """An activation ``F.<fn>(x)`` with no arguments."""

    _fn = None

    def forward(self, input):
        return type(self)._fn(input)


class ReLU(_Inplace):
    """``max(x, 0)``.

    Example:
        >>> ember.nn.ReLU()(ember.tensor([-1.0, 1.0]))
        tensor([0., 1.])
    """
    _fn = staticmethod(F.relu)


class SELU(_Inplace):
    """Scaled ELU with the self-normalising constants."""
    _fn = staticmethod(F.selu)


class SiLU(_Inplace):
    """``x * sigmoid(x)``."""
    _fn = staticmethod(F.silu)


class Mish(_Inplace):
    """``x * tanh(softplus(x))``."""
    _fn = staticmethod(F.mish)


class Hardsigmoid(_Inplace):
    """``relu6(x + 3) / 6``."""
    _fn = staticmethod(F.hardsigmoid)

    def extra_repr(self) -> str:
        return ""


class Hardswish(_Inplace):
    """``x * relu6(x + 3) / 6``."""
    _fn = staticmethod(F.hardswish)

    def extra_repr(self) -> str:
        return ""


class Sigmoid(_Plain):
    """``1 / (1 + exp(-x))``."""
    _fn = staticmethod(F.sigmoid)


class Tanh(_Plain):
    """Hyperbolic tangent."""
    _fn = staticmethod(F.tanh)


class Softsign(_Plain):
    """``x / (1 + |x|)``."""
    _fn = staticmethod(F.softsign)


class LogSigmoid(_Plain):
    """``log(sigmoid(x))``."""
    _fn = staticmethod(F.logsigmoid)


class Tanhshrink(_Plain):
    """``x - tanh(x)``."""
    _fn = staticmethod(F.tanhshrink)


class Hardtanh(Module):
    """Clamp to ``[min_val, max_val]``."""

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
        super().__init__()
        if max_val <= min_val:
            raise ValueError(f"Hardtanh: max_val ({max_val}) must be greater than min_val "
                             f"({min_val})")
        self.min_val, self.max_val, self.inplace = min_val, max_val, inplace

    def forward(self, input):
        return F.hardtanh(input, self.min_val, self.max_val, self.inplace)

    def extra_repr(self) -> str:
        return f"min_val={self.min_val}, max_val={self.max_val}" + \
            (", inplace=True" if self.inplace else "")


class ReLU6(Hardtanh):
    """``min(max(x, 0), 6)``."""

    def __init__(self, inplace: bool = False):
        super().__init__(0.0, 6.0, inplace)

    def extra_repr(self) -> str:
        return _inplace_repr(self.inplace)


class LeakyReLU(Module):
    """``x`` if ``x > 0`` else ``negative_slope * x``."""

    def __init__(self, negative_slope: float = 1e-2, inplace: bool = False):
        super().__init__()
        self.negative_slope, self.inplace = negative_slope, inplace

    def forward(self, input):
        return F.leaky_relu(input, self.negative_slope, self.inplace)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace else "")


class ELU(Module):
    """``x`` if ``x > 0`` else ``alpha * (exp(x) - 1)``."""

    _fn = staticmethod(F.elu)

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def forward(self, input):
        return type(self)._fn(input, self.alpha, self.inplace)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


class CELU(ELU):
    """``x`` if ``x > 0`` else ``alpha * (exp(x / alpha) - 1)``."""
    _fn = staticmethod(F.celu)


class PReLU(Module):
    """Leaky ReLU with a learned slope (one, or one per channel), initialised to ``init``."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device=None, dtype=None):
        from ...ops.factories import empty
        super().__init__()
        self.num_parameters, self.init = num_parameters, init
        self.weight = Parameter(empty(num_parameters, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        from ...autograd.grad_mode import no_grad
        with no_grad():
            self.weight.fill_(self.init)

    def forward(self, input):
        return F.prelu(input, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


class GELU(Module):
    """Gaussian error linear unit (``approximate='none'`` or ``'tanh'``)."""

    def __init__(self, approximate: str = "none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, input):
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Softplus(Module):
    """``log(1 + exp(beta * x)) / beta``, linear above ``threshold``."""

    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, input):
        return F.softplus(input, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class Threshold(Module):
    """``x`` if ``x > threshold`` else ``value``."""

    def __init__(self, threshold: float, value: float, inplace: bool = False):
        super().__init__()
        self.threshold, self.value, self.inplace = threshold, value, inplace

    def forward(self, input):
        return F.threshold(input, self.threshold, self.value, self.inplace)

    def extra_repr(self) -> str:
        return f"threshold={self.threshold}, value={self.value}" + \
            (", inplace=True" if self.inplace else "")


class _Shrink(Module):
    _fn = None

    def __init__(self, lambd: float = 0.5):
        super().__init__()
        self.lambd = lambd

    def forward(self, input):
        return type(self)._fn(input, self.lambd)

    def extra_repr(self) -> str:
        return str(self.lambd)


class Softshrink(_Shrink):
    """Shrink towards zero by ``lambd``."""
    _fn = staticmethod(F.softshrink)


class Hardshrink(_Shrink):
    """Zero where ``|x| <= lambd``."""
    _fn = staticmethod(F.hardshrink)


class _DimModule(Module):
    """Softmax-like activations over ``dim``."""

    _fn = None

    def __init__(self, dim: int | None = None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        dim = self.dim
        if dim is None:
            dim = F._activation._legacy_dim(input.ndim, type(self).__name__.lower(), 4)
        return type(self)._fn(input, dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Softmax(_DimModule):
    """``exp(x) / sum(exp(x), dim)``.

    Example:
        >>> ember.nn.Softmax(dim=-1)(ember.zeros(2))
        tensor([0.5000, 0.5000])
    """
    _fn = staticmethod(F.softmax)


class LogSoftmax(_DimModule):
    """``log(softmax(x, dim))``, computed stably."""
    _fn = staticmethod(F.log_softmax)


class Softmin(_DimModule):
    """``softmax(-x, dim)``."""
    _fn = staticmethod(F.softmin)


class Softmax2d(Module):
    """Softmax over the channel dim of (N, C, H, W) or (C, H, W) input."""

    def forward(self, input):
        if input.ndim not in (3, 4):
            from ...errors import ShapeError
            raise ShapeError(f"Softmax2d: expected a 3-D or 4-D input, got shape "
                             f"{tuple(input.shape)}")
        return F.softmax(input, -3)


class RReLU(Module):
    """Randomized leaky ReLU: negative slopes drawn from U(lower, upper) in training,
    ``(lower + upper) / 2`` in eval.

    Example:
        >>> ember.nn.RReLU().eval()(ember.tensor([-2., 3.]))
        tensor([-0.4583,  3.0000])
    """

    def __init__(self, lower: float = 1.0 / 8, upper: float = 1.0 / 3, inplace: bool = False):
        super().__init__()
        self.lower, self.upper, self.inplace = lower, upper, inplace

    def forward(self, input):
        return F.rrelu(input, self.lower, self.upper, self.training, self.inplace)

    def extra_repr(self) -> str:
        inplace = ", inplace=True" if self.inplace else ""
        return f"lower={self.lower}, upper={self.upper}{inplace}"


class GLU(Module):
    """Gated linear unit over ``dim``."""

    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.glu(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


# NOTE: PyTorch keeps MultiheadAttention in torch.nn.modules.activation; the class lives in
# .attention and is importable from here too.
from .attention import MultiheadAttention  # noqa: E402,F401
