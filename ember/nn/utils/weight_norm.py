"""``ember.nn.utils.weight_norm``: the older, hook-based weight normalisation.

``weight_norm(m)`` replaces ``m.weight`` by parameters ``weight_g`` and ``weight_v`` and a
forward pre-hook recomputing ``m.weight = g * v / ||v||`` (PyTorch's deprecated API; the
parametrization ``ember.nn.utils.parametrizations.weight_norm`` is preferred).
"""
from __future__ import annotations

import warnings

from ..module import Module
from ..parameter import Parameter
from ._reparam_hook import remove_hook, take_hooked_parameter
from .parametrizations import _weight_norm, norm_except_dim

__all__ = ["weight_norm", "remove_weight_norm", "WeightNorm"]


class WeightNorm:
    """The forward pre-hook recomputing ``module.<name>`` from ``<name>_g``, ``<name>_v``."""

    def __init__(self, name: str, dim: int | None) -> None:
        self.name = name
        self.dim = -1 if dim is None else dim

    def compute_weight(self, module: Module):
        return _weight_norm(getattr(module, self.name + "_v"),
                            getattr(module, self.name + "_g"), self.dim)

    @staticmethod
    def apply(module: Module, name: str, dim: int | None) -> "WeightNorm":
        take_hooked_parameter(module, name, WeightNorm, "weight_norm")
        fn = WeightNorm(name, dim)
        weight = module._parameters.pop(name)
        module.register_parameter(name + "_g",
                                  Parameter(norm_except_dim(weight, 2, fn.dim).detach()))
        module.register_parameter(name + "_v", Parameter(weight.detach()))
        setattr(module, name, fn.compute_weight(module))
        module.register_forward_pre_hook(fn)
        return fn

    def remove(self, module: Module) -> None:
        weight = self.compute_weight(module)
        delattr(module, self.name)
        del module._parameters[self.name + "_g"]
        del module._parameters[self.name + "_v"]
        setattr(module, self.name, Parameter(weight.detach()))

    def __call__(self, module: Module, inputs) -> None:
        setattr(module, self.name, self.compute_weight(module))


def weight_norm(module: Module, name: str = "weight", dim: int | None = 0) -> Module:
    """Apply (hook-based) weight normalisation to ``module.<name>``.

    Deprecated like PyTorch's in favour of ``parametrizations.weight_norm``.

    Args:
        module: the module.
        name: the parameter's name.
        dim: the dim whose slices get their own magnitude (``None``: the whole tensor).

    Returns:
        ``module``, with parameters ``<name>_g`` and ``<name>_v``.
    """
    warnings.warn("`ember.nn.utils.weight_norm` is deprecated in favor of "
                  "`ember.nn.utils.parametrizations.weight_norm`.", FutureWarning, stacklevel=2)
    WeightNorm.apply(module, name, dim)
    return module


def remove_weight_norm(module: Module, name: str = "weight") -> Module:
    """Undo ``weight_norm``: ``module.<name>`` is one parameter again.

    Raises:
        ValueError: no weight_norm hook on ``name``.
    """
    return remove_hook(module, name, WeightNorm, "weight_norm")
