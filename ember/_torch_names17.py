"""Top-level PyTorch names that are cheap aliases or thin composites (issue 17's coverage).

``torch.GradScaler``/``OutOfMemoryError``/``dtype``, the sparse products ``spmm``/``dsmm``,
the older norm functions, ATen's ``convolution``/``grid_sampler``/``affine_grid_generator``
entry points (integer mode codes, as ATen spells them), ``empty_permuted``, ``from_file``
and ``init_num_threads``.
"""
from __future__ import annotations

import numpy as np

from .amp import GradScaler  # noqa: F401 - torch.GradScaler is torch.amp.GradScaler
from .dtypes import DType as dtype  # noqa: F401 - isinstance(x, torch.dtype)
from .sparse import mm as spmm  # noqa: F401 - torch.spmm(sparse, dense)
from .sparse import mm as dsmm  # noqa: F401 - torch.dsmm: sparse @ dense -> dense

#: ``torch.OutOfMemoryError``: Ember's allocator limit raises ``MemoryError`` (as
#: ``ember.cuda.OutOfMemoryError``).
OutOfMemoryError = MemoryError

__all__ = ["GradScaler", "dtype", "spmm", "dsmm", "OutOfMemoryError", "frobenius_norm",
           "nuclear_norm", "convolution", "grid_sampler", "grid_sampler_2d",
           "grid_sampler_3d", "affine_grid_generator", "empty_permuted", "from_file",
           "init_num_threads", "is_anomaly_check_nan_enabled", "get_device_module"]


def frobenius_norm(input, dim=(-2, -1), keepdim: bool = False):
    """``sqrt(sum(x**2))`` over ``dim`` (``torch.frobenius_norm``)."""
    from . import linalg
    return linalg.vector_norm(input, 2, dim=dim, keepdim=keepdim)


def nuclear_norm(input, dim=(-2, -1), keepdim: bool = False):
    """Sum of singular values over the matrix dims ``dim`` (``torch.nuclear_norm``)."""
    from . import linalg
    return linalg.matrix_norm(input, "nuc", dim=tuple(dim), keepdim=keepdim)


def convolution(input, weight, bias, stride, padding, dilation, transposed: bool,
                output_padding, groups: int):
    """ATen's ``convolution``: ``F.conv{1,2,3}d`` or ``F.conv_transpose{1,2,3}d`` by the
    weight's rank and ``transposed``."""
    from .nn import functional as F
    n = weight.ndim - 2
    if n not in (1, 2, 3):
        raise ValueError(f"convolution: weight must be 3-D to 5-D, got shape "
                         f"{tuple(weight.shape)}")
    if transposed:
        fn = getattr(F, f"conv_transpose{n}d")
        return fn(input, weight, bias, stride, padding, output_padding, groups, dilation)
    return getattr(F, f"conv{n}d")(input, weight, bias, stride, padding, dilation, groups)


_INTERP = {0: "bilinear", 1: "nearest", 2: "bicubic"}
_PAD = {0: "zeros", 1: "border", 2: "reflection"}


def grid_sampler(input, grid, interpolation_mode: int, padding_mode: int,
                 align_corners: bool):
    """ATen's ``grid_sampler``: ``F.grid_sample`` with integer mode codes
    (interpolation 0 bilinear, 1 nearest, 2 bicubic; padding 0 zeros, 1 border,
    2 reflection)."""
    from .nn import functional as F
    if interpolation_mode not in _INTERP or padding_mode not in _PAD:
        raise ValueError(f"grid_sampler: interpolation_mode must be in {_INTERP} and "
                         f"padding_mode in {_PAD}, got {interpolation_mode}, {padding_mode}")
    return F.grid_sample(input, grid, _INTERP[interpolation_mode], _PAD[padding_mode],
                         align_corners)


grid_sampler_2d = grid_sampler
grid_sampler_3d = grid_sampler


def affine_grid_generator(theta, size, align_corners: bool):
    """ATen's ``affine_grid_generator`` (``F.affine_grid``)."""
    from .nn import functional as F
    return F.affine_grid(theta, list(size), align_corners=align_corners)


def empty_permuted(size, physical_layout, *, dtype=None, layout=None, device=None,
                   requires_grad: bool = False, pin_memory: bool = False):
    """An uninitialised tensor of ``size`` (``torch.empty_permuted``). Ember tensors are
    row-major, so ``physical_layout`` (a permutation, checked) does not change the strides.
    """
    from .ops.factories import empty
    if sorted(physical_layout) != list(range(len(size))):
        raise ValueError(f"empty_permuted: physical_layout must be a permutation of "
                         f"range({len(size)}), got {list(physical_layout)}")
    return empty(tuple(size), dtype=dtype, device=device, requires_grad=requires_grad)


def from_file(filename, shared: bool | None = None, size: int = 0, *, dtype=None,
              device=None, requires_grad: bool = False, pin_memory: bool = False):
    """A 1-D tensor of ``size`` elements mapped from ``filename`` (``torch.from_file``):
    with ``shared`` the file is mapped read-write and in-place writes reach it, else the
    data is a private copy."""
    from .dtypes import get_default_dtype
    from .tensor import from_array
    dt = dtype or get_default_dtype()
    arr = np.memmap(filename, dtype=dt.np, mode="r+" if shared else "c", shape=(int(size),))
    t = from_array(np.asarray(arr) if not shared else arr.view(np.ndarray))
    t.__dict__["_mmap"] = arr                 # NOTE: keeps the mapping open
    return t.requires_grad_(requires_grad) if requires_grad else t


def init_num_threads() -> None:
    """Initialise the current thread's intra-op thread count (``torch.init_num_threads``):
    Ember's BLAS and kernel pool read their count at each call, so nothing to do."""


def is_anomaly_check_nan_enabled() -> bool:
    """Whether anomaly mode also checks for NaN (``detect_anomaly(check_nan=...)``)."""
    from .autograd.grad_mode import state
    return bool(state.anomaly and state.anomaly_check_nan)


def get_device_module(device=None):
    """The device module of ``device`` (``torch.get_device_module``): ``ember.cuda`` or
    ``ember.cpu``; with None, that of the current accelerator (``ember.cpu`` without one).

    Raises:
        RuntimeError: a device type without an Ember module.
    """
    import importlib
    from . import accelerator
    if device is None:
        acc = accelerator.current_accelerator()
        name = acc.type if acc is not None else "cpu"
    else:
        name = device.type if hasattr(device, "type") else str(device).split(":")[0]
    if name not in ("cpu", "cuda"):
        raise RuntimeError(f"get_device_module: device {name!r} has no module in Ember "
                           f"(valid: 'cpu', 'cuda')")
    return importlib.import_module(f"ember.{name}")
