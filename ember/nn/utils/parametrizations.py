"""``ember.nn.utils.parametrizations``: ``weight_norm`` and ``spectral_norm`` as parametrizations.

PyTorch's layout and state: ``weight_norm`` keeps ``parametrizations.weight.original0``
(the magnitude ``g``) and ``original1`` (the direction ``v``); ``spectral_norm`` keeps
``parametrizations.weight.original`` and the power iteration's ``_u``/``_v`` buffers
under ``parametrizations.weight.0``.
"""
from __future__ import annotations

from ...autograd.grad_mode import no_grad
from ...tensor import Tensor
from .. import functional as F
from ..module import Module
from . import parametrize

__all__ = ["weight_norm", "spectral_norm", "orthogonal"]


def norm_except_dim(v: Tensor, pow: float = 2, dim: int = 0) -> Tensor:
    """The ``pow``-norm of ``v`` over every dim except ``dim`` (all dims if ``dim == -1``).

    The result keeps ``dim`` and has size 1 elsewhere (0-d when ``dim == -1``), like
    ``torch.norm_except_dim``.
    """
    if dim == -1:
        return v.norm(p=pow)
    if not -v.ndim <= dim < v.ndim:
        raise IndexError(f"norm_except_dim: dim {dim} out of range for a tensor of shape "
                         f"{tuple(v.shape)} (valid: -1 or [0, {v.ndim - 1}])")
    dim %= v.ndim
    others = tuple(d for d in range(v.ndim) if d != dim)
    return v.norm(p=pow, dim=others, keepdim=True) if others else v.abs()


def _weight_norm(v: Tensor, g: Tensor, dim: int = 0) -> Tensor:
    """``v * (g / ||v||)`` with the norm over every dim except ``dim`` (``torch._weight_norm``)."""
    return v * (g / norm_except_dim(v, 2, dim))


class _WeightNorm(Module):
    def __init__(self, dim: int | None = 0) -> None:
        super().__init__()
        self.dim = -1 if dim is None else dim

    def forward(self, weight_g: Tensor, weight_v: Tensor) -> Tensor:
        return _weight_norm(weight_v, weight_g, self.dim)

    def right_inverse(self, weight: Tensor):
        return norm_except_dim(weight, 2, self.dim), weight


def weight_norm(module: Module, name: str = "weight", dim: int | None = 0) -> Module:
    """Reparametrize ``module.<name>`` as ``g * v / ||v||`` (Salimans & Kingma, 2016).

    Args:
        module: the module.
        name: its parameter's name.
        dim: the dim whose slices get their own magnitude (``None``: one for the tensor).

    Returns:
        ``module``, with ``parametrizations.<name>.original0`` (g) and ``original1`` (v).
    """
    parametrize.register_parametrization(module, name, _WeightNorm(dim), unsafe=True)
    return module


class _SpectralNorm(Module):
    def __init__(self, weight: Tensor, n_power_iterations: int = 1, dim: int = 0,
                 eps: float = 1e-12) -> None:
        super().__init__()
        ndim = weight.ndim
        if dim >= ndim or dim < -ndim:
            raise IndexError(f"spectral_norm: dim {dim} out of range for a weight of shape "
                             f"{tuple(weight.shape)} (expected in [-{ndim}, {ndim - 1}])")
        if n_power_iterations <= 0:
            raise ValueError(f"spectral_norm: n_power_iterations must be positive, got "
                             f"{n_power_iterations}")
        self.dim = dim % ndim
        self.eps = eps
        if ndim > 1:
            self.n_power_iterations = n_power_iterations
            mat = self._reshape_weight_to_matrix(weight)
            h, w = mat.shape
            with no_grad():
                u = mat.new_empty(h).normal_(0, 1)
                v = mat.new_empty(w).normal_(0, 1)
            self.register_buffer("_u", F.normalize(u, dim=0, eps=eps))
            self.register_buffer("_v", F.normalize(v, dim=0, eps=eps))
            self._power_method(mat, 15)

    def _reshape_weight_to_matrix(self, weight: Tensor) -> Tensor:
        if self.dim != 0:
            weight = weight.permute(self.dim, *(d for d in range(weight.ndim) if d != self.dim))
        return weight.flatten(1)

    def _power_method(self, mat: Tensor, n: int) -> None:
        # NOTE: u and v are updated in place (shared with replicas, as torch) and cloned
        # before use, so a second forward does not invalidate the first one's backward.
        with no_grad():
            for _ in range(n):
                self._u.copy_(F.normalize(mat.mv(self._v), dim=0, eps=self.eps))
                self._v.copy_(F.normalize(mat.T.mv(self._u), dim=0, eps=self.eps))

    def forward(self, weight: Tensor) -> Tensor:
        if weight.ndim == 1:
            return F.normalize(weight, dim=0, eps=self.eps)
        mat = self._reshape_weight_to_matrix(weight)
        if self.training:
            self._power_method(mat, self.n_power_iterations)
        u, v = self._u.clone(), self._v.clone()
        return weight / u.dot(mat.mv(v))

    def right_inverse(self, value: Tensor) -> Tensor:
        return value


def _is_conv_transpose(module: Module) -> bool:
    return parametrize.type_before_parametrizations(module).__name__.startswith("ConvTranspose")


def spectral_norm(module: Module, name: str = "weight", n_power_iterations: int = 1,
                  eps: float = 1e-12, dim: int | None = None) -> Module:
    """Reparametrize ``module.<name>`` as ``W / sigma(W)`` (Miyato et al., 2018).

    ``sigma`` is estimated by power iteration, one step per training-mode access.

    Args:
        module: the module.
        name: its parameter's name.
        n_power_iterations: power-iteration steps per forward in training mode.
        eps: the normalisations' epsilon.
        dim: the output dim (default 0, 1 for ``ConvTranspose*``).

    Returns:
        ``module``.
    """
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"spectral_norm: module {type(module).__name__} has no parameter or "
                         f"buffer named '{name}'")
    if dim is None:
        dim = 1 if _is_conv_transpose(module) else 0
    parametrize.register_parametrization(
        module, name, _SpectralNorm(weight, n_power_iterations, dim, eps))
    return module


def orthogonal(module: Module, name: str = "weight", orthogonal_map: str | None = None, *,
               use_trivialization: bool = True) -> Module:
    """Constrain ``module.<name>`` (a matrix or batch of matrices) to be orthogonal.

    Args:
        module: the module.
        name: its parameter's name.
        orthogonal_map: ``"matrix_exp"`` (default for square matrices) or
            ``"householder"`` (default otherwise); ``"cayley"`` is not supported yet.
        use_trivialization: keep a ``base`` buffer and parametrize around it (PyTorch's
            default; the only mode supported).

    Returns:
        ``module``.

    Raises:
        ValueError: no such tensor, fewer than 2 dims, or an unknown map.
    """
    from ._orthogonal import _MAPS, _Orthogonal
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"orthogonal: module {type(module).__name__} has no parameter or "
                         f"buffer named '{name}'")
    if weight.ndim < 2:
        raise ValueError(f"orthogonal: expected a matrix or batch of matrices, got a tensor "
                         f"of {weight.ndim} dimensions (shape {tuple(weight.shape)})")
    if orthogonal_map is None:
        orthogonal_map = "matrix_exp" if weight.shape[-2] == weight.shape[-1] else "householder"
    if orthogonal_map not in _MAPS:
        raise ValueError(f'orthogonal: orthogonal_map has to be one of "matrix_exp", '
                         f'"cayley", "householder", got {orthogonal_map!r}')
    if not use_trivialization:
        raise NotImplementedError("orthogonal: use_trivialization=False is not supported")
    parametrize.register_parametrization(
        module, name, _Orthogonal(weight, orthogonal_map, use_trivialization=True),
        unsafe=True)
    return module
