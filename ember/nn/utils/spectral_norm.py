"""``ember.nn.utils.spectral_norm``: the older, hook-based spectral normalisation.

``spectral_norm(m)`` moves ``m.weight`` to ``weight_orig``, keeps the power iteration's
vectors as buffers ``weight_u``/``weight_v`` and recomputes ``m.weight = W / sigma`` in a
forward pre-hook (one power-iteration step per training-mode forward), like PyTorch's.
"""
from __future__ import annotations

from ...autograd.grad_mode import no_grad
from .. import functional as F
from ..module import Module
from ..parameter import Parameter
from ._reparam_hook import remove_hook, take_hooked_parameter

__all__ = ["spectral_norm", "remove_spectral_norm", "SpectralNorm"]


class SpectralNorm:
    """The forward pre-hook recomputing ``module.<name>`` from ``<name>_orig``."""

    def __init__(self, name: str = "weight", n_power_iterations: int = 1, dim: int = 0,
                 eps: float = 1e-12) -> None:
        if n_power_iterations <= 0:
            raise ValueError(f"spectral_norm: n_power_iterations must be positive, got "
                             f"{n_power_iterations}")
        self.name, self.dim = name, dim
        self.n_power_iterations, self.eps = n_power_iterations, eps

    def reshape_weight_to_matrix(self, weight):
        if self.dim != 0:
            weight = weight.permute(self.dim, *[d for d in range(weight.ndim) if d != self.dim])
        return weight.reshape(weight.shape[0], -1)

    def compute_weight(self, module: Module, do_power_iteration: bool):
        weight = getattr(module, self.name + "_orig")
        u, v = getattr(module, self.name + "_u"), getattr(module, self.name + "_v")
        mat = self.reshape_weight_to_matrix(weight)
        if do_power_iteration:
            # NOTE: in place (the buffers persist), then cloned for this forward's backward
            with no_grad():
                for _ in range(self.n_power_iterations):
                    v.copy_(F.normalize(mat.T.mv(u), dim=0, eps=self.eps))
                    u.copy_(F.normalize(mat.mv(v), dim=0, eps=self.eps))
            u, v = u.clone(), v.clone()
        return weight / u.dot(mat.mv(v))

    def remove(self, module: Module) -> None:
        with no_grad():
            weight = self.compute_weight(module, do_power_iteration=False)
        for suffix in ("", "_u", "_v", "_orig"):
            delattr(module, self.name + suffix)
        module.register_parameter(self.name, Parameter(weight.detach()))

    def __call__(self, module: Module, inputs) -> None:
        setattr(module, self.name, self.compute_weight(module, module.training))

    @staticmethod
    def apply(module: Module, name: str, n_power_iterations: int, dim: int,
              eps: float) -> "SpectralNorm":
        weight = take_hooked_parameter(module, name, SpectralNorm, "spectral_norm")
        fn = SpectralNorm(name, n_power_iterations, dim, eps)
        with no_grad():
            h, w = fn.reshape_weight_to_matrix(weight).shape
            u = F.normalize(weight.new_empty(h).normal_(0, 1), dim=0, eps=eps)
            v = F.normalize(weight.new_empty(w).normal_(0, 1), dim=0, eps=eps)
        delattr(module, name)
        module.register_parameter(name + "_orig", weight)
        setattr(module, name, weight.detach())
        module.register_buffer(name + "_u", u)
        module.register_buffer(name + "_v", v)
        module.register_forward_pre_hook(fn)
        return fn


def spectral_norm(module: Module, name: str = "weight", n_power_iterations: int = 1,
                  eps: float = 1e-12, dim: int | None = None) -> Module:
    """Apply (hook-based) spectral normalisation to ``module.<name>``.

    Args:
        module: the module.
        name: the parameter's name.
        n_power_iterations: power-iteration steps per training-mode forward.
        eps: the normalisations' epsilon.
        dim: the output dim (default 0, 1 for ``ConvTranspose*``).

    Returns:
        ``module``, with ``<name>_orig`` and buffers ``<name>_u``, ``<name>_v``.
    """
    if dim is None:
        dim = 1 if type(module).__name__.startswith("ConvTranspose") else 0
    SpectralNorm.apply(module, name, n_power_iterations, dim, eps)
    return module


def remove_spectral_norm(module: Module, name: str = "weight") -> Module:
    """Undo ``spectral_norm``: ``module.<name>`` is one parameter again.

    Raises:
        ValueError: no spectral_norm hook on ``name``.
    """
    return remove_hook(module, name, SpectralNorm, "spectral_norm")
