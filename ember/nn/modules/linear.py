"""Linear layers: Identity, Linear, Bilinear (PyTorch defaults, init and reprs)."""
from __future__ import annotations

import math

from .. import functional as F
from ..module import Module
from ..parameter import Parameter

__all__ = ['Identity', 'Linear', 'Bilinear']


def _empty(*shape, device=None, dtype=None):
    from ...ops.factories import empty
    return empty(*shape, device=device, dtype=dtype)


def fan_in_of(weight) -> int:
    """PyTorch's fan-in: ``weight.shape[1] * prod(weight.shape[2:])``."""
    return weight.shape[1] * math.prod(weight.shape[2:]) if weight.ndim >= 2 else weight.numel()


def default_init_(weight, bias=None) -> None:
    """PyTorch's Linear/Conv default: ``kaiming_uniform_(a=√5)`` (= U(±1/√fan_in)) for the
    weight and U(±1/√fan_in) for the bias."""
    from ...autograd.grad_mode import no_grad
    from .. import init
    fan_in = fan_in_of(weight)
    with no_grad():
        if weight.numel():
            kaiming = getattr(init, "kaiming_uniform_", None)
            if kaiming is not None:
                kaiming(weight, a=math.sqrt(5))
            else:   # gain sqrt(2 / (1 + 5)) times sqrt(3 / fan_in)
                bound = math.sqrt(2.0 / 6.0) * math.sqrt(3.0 / fan_in)
                weight.uniform_(-bound, bound)
        if bias is not None:
            bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
            bias.uniform_(-bound, bound)


class Identity(Module):
    """Returns its input unchanged (accepts and ignores any constructor arguments)."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


class Linear(Module):
    """``y = x @ weight.T + bias`` with weight (out_features, in_features).

    Example:
        >>> fc = ember.nn.Linear(3, 2)
        >>> fc(ember.ones(4, 3)).shape
        ember.Size([4, 2])
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None,
                 dtype=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(_empty(out_features, in_features, device=device, dtype=dtype))
        if bias:
            self.bias = Parameter(_empty(out_features, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        default_init_(self.weight, self.bias)

    def forward(self, input):
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, " \
               f"bias={self.bias is not None}"


class NonDynamicallyQuantizableLinear(Linear):
    """A plain :class:`Linear` (PyTorch uses the name to steer quantization); it lives here
    as in PyTorch (``torch.nn.modules.linear``), and ``MultiheadAttention`` uses it."""


class Bilinear(Module):
    """``y_k = x1 · weight_k · x2 + bias_k`` with weight (out, in1, in2)."""

    def __init__(self, in1_features: int, in2_features: int, out_features: int,
                 bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.in1_features, self.in2_features = in1_features, in2_features
        self.out_features = out_features
        self.weight = Parameter(_empty(out_features, in1_features, in2_features, device=device,
                                       dtype=dtype))
        if bias:
            self.bias = Parameter(_empty(out_features, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        from ...autograd.grad_mode import no_grad
        bound = 1.0 / math.sqrt(self.weight.shape[1])
        with no_grad():
            self.weight.uniform_(-bound, bound)
            if self.bias is not None:
                self.bias.uniform_(-bound, bound)

    def forward(self, input1, input2):
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in1_features={self.in1_features}, in2_features={self.in2_features}, " \
               f"out_features={self.out_features}, bias={self.bias is not None}"
