"""Composable image transforms on Ember tensors (``torchvision.transforms``' names).

Images are ``(..., C, H, W)`` tensors; :class:`ToTensor` makes them from NumPy ``HWC``
arrays. Random transforms draw from Ember's default generator, so ``ember.manual_seed``
(or, in DataLoader workers, the per-batch seeding) makes them reproducible.

Example:
    >>> t = Compose([ToTensor(), Normalize([0.5], [0.5])])
    >>> t(np.full((2, 2), 255, dtype=np.uint8)).tolist()
    [[[1.0, 1.0], [1.0, 1.0]]]
"""
from __future__ import annotations

import numbers

import numpy as np

from .. import random as _random
from ..ops.factories import from_numpy, tensor
from ..ops.join import flip
from ..ops.pad import pad as _pad
from ..tensor import Tensor

__all__ = ["Compose", "ToTensor", "Normalize", "RandomCrop", "CenterCrop",
           "RandomHorizontalFlip", "RandomVerticalFlip", "Lambda"]


class Compose:
    """Apply ``transforms`` one after another."""

    def __init__(self, transforms) -> None:
        self.transforms = list(transforms)

    def __call__(self, x):
        for t in self.transforms:
            x = t(x)
        return x

    def __repr__(self) -> str:
        body = "".join(f"\n    {t!r}" for t in self.transforms)
        return f"Compose({body}\n)"


class ToTensor:
    """NumPy ``HWC`` (or ``HW``) array → ``CHW`` tensor; ``uint8`` is scaled to float32 in
    [0, 1], other dtypes are kept (like torchvision).

    Example:
        >>> ToTensor()(np.zeros((4, 5, 3), dtype=np.uint8)).shape
        ember.Size([3, 4, 5])
    """

    def __call__(self, pic) -> Tensor:
        if isinstance(pic, Tensor) or not hasattr(pic, "__array_interface__") and \
                not isinstance(pic, np.ndarray):
            raise TypeError(f"ToTensor: pic should be a NumPy array (HWC or HW) or a PIL "
                            f"image, got {type(pic).__name__}")
        arr = np.asarray(pic)
        if arr.ndim not in (2, 3):
            raise ValueError(f"ToTensor: pic should be 2 or 3 dimensional, got shape "
                             f"{arr.shape}")
        if arr.ndim == 2:
            arr = arr[:, :, None]
        chw = np.ascontiguousarray(arr.transpose(2, 0, 1))
        if chw.dtype == np.uint8:
            return from_numpy(chw.astype(np.float32) / np.float32(255))
        return from_numpy(chw)

    def __repr__(self) -> str:
        return "ToTensor()"


class Normalize:
    """``(x - mean[c]) / std[c]`` per channel of a ``(..., C, H, W)`` tensor."""

    def __init__(self, mean, std, inplace: bool = False) -> None:
        self.mean, self.std, self.inplace = list(mean), list(std), inplace
        if any(s == 0 for s in self.std):
            raise ValueError(f"Normalize: std evaluated to zero after conversion: {self.std}")

    def __call__(self, x: Tensor) -> Tensor:
        if not isinstance(x, Tensor) or x.ndim < 3 or not x.dtype.is_floating_point:
            shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"Normalize: expected a floating tensor image of shape "
                             f"(..., C, H, W), got {shape}")
        c = x.shape[-3]
        if len(self.mean) not in (1, c) or len(self.std) not in (1, c):
            raise ValueError(f"Normalize: {len(self.mean)} means and {len(self.std)} stds "
                             f"for an image with {c} channels")
        mean = tensor(self.mean, dtype=x.dtype).reshape(-1, 1, 1)
        std = tensor(self.std, dtype=x.dtype).reshape(-1, 1, 1)
        if self.inplace:
            return x.sub_(mean).div_(std)
        return (x - mean) / std

    def __repr__(self) -> str:
        return f"Normalize(mean={self.mean}, std={self.std})"


def _pair(size, what: str) -> tuple[int, int]:
    if isinstance(size, numbers.Integral):
        return int(size), int(size)
    if len(size) == 1:
        return int(size[0]), int(size[0])
    if len(size) != 2:
        raise ValueError(f"{what}: size should be an int or a (h, w) pair, got {size}")
    return int(size[0]), int(size[1])


_PAD_MODES = {"constant": "constant", "edge": "replicate", "reflect": "reflect"}


class RandomCrop:
    """Crop a random ``size`` window, after optional ``padding``.

    ``padding``: int (all sides), ``(left/right, top/bottom)`` or ``(left, top, right,
    bottom)``; ``padding_mode``: ``"constant"`` (with ``fill``), ``"edge"``, ``"reflect"``.

    Example:
        >>> RandomCrop(4, padding=2)(ember.zeros(3, 4, 4)).shape
        ember.Size([3, 4, 4])
    """

    def __init__(self, size, padding=None, pad_if_needed: bool = False, fill=0,
                 padding_mode: str = "constant") -> None:
        if padding_mode not in _PAD_MODES:
            raise ValueError(f"RandomCrop: padding_mode should be one of {list(_PAD_MODES)}, "
                             f"got {padding_mode!r}")
        self.size, self.padding, self.pad_if_needed = _pair(size, "RandomCrop"), padding, \
            pad_if_needed
        self.fill, self.padding_mode = fill, padding_mode

    def _pad(self, x: Tensor, left, top, right, bottom) -> Tensor:
        mode = _PAD_MODES[self.padding_mode]
        value = self.fill if mode == "constant" else None
        return _pad(x, (left, right, top, bottom), mode=mode, value=value)

    def __call__(self, x: Tensor) -> Tensor:
        if self.padding is not None:
            p = self.padding
            p = (p,) * 4 if isinstance(p, numbers.Integral) else tuple(p)
            p = p * 2 if len(p) == 2 else p
            if len(p) != 4:
                raise ValueError(f"RandomCrop: padding must be an int or a 2/4-tuple, got "
                                 f"{self.padding}")
            x = self._pad(x, *p)
        th, tw = self.size
        h, w = x.shape[-2], x.shape[-1]
        if self.pad_if_needed and (h < th or w < tw):
            dw, dh = max(tw - w, 0), max(th - h, 0)
            x = self._pad(x, dw, dh, dw, dh)
            h, w = x.shape[-2], x.shape[-1]
        if h < th or w < tw:
            raise ValueError(f"RandomCrop: required crop size {(th, tw)} is larger than the "
                             f"input image size {(h, w)}")
        i = int(_random.randint(0, h - th + 1, (1,)).item())
        j = int(_random.randint(0, w - tw + 1, (1,)).item())
        return x[..., i:i + th, j:j + tw]

    def __repr__(self) -> str:
        return f"RandomCrop(size={self.size}, padding={self.padding})"


class CenterCrop:
    """Crop the central ``size`` window."""

    def __init__(self, size) -> None:
        self.size = _pair(size, "CenterCrop")

    def __call__(self, x: Tensor) -> Tensor:
        (th, tw), h, w = self.size, x.shape[-2], x.shape[-1]
        if h < th or w < tw:
            raise ValueError(f"CenterCrop: crop size {(th, tw)} larger than image {(h, w)}")
        i, j = int(round((h - th) / 2.0)), int(round((w - tw) / 2.0))
        return x[..., i:i + th, j:j + tw]


class RandomHorizontalFlip:
    """Flip the last (width) dim with probability ``p``."""

    _dim = -1

    def __init__(self, p: float = 0.5) -> None:
        self.p = p

    def __call__(self, x: Tensor) -> Tensor:
        if float(_random.rand(1).item()) < self.p:
            return flip(x, [self._dim])
        return x

    def __repr__(self) -> str:
        return f"{type(self).__name__}(p={self.p})"


class RandomVerticalFlip(RandomHorizontalFlip):
    """Flip the height dim with probability ``p``."""

    _dim = -2


class Lambda:
    """Wrap a function as a transform."""

    def __init__(self, lambd) -> None:
        if not callable(lambd):
            raise TypeError(f"Lambda: argument should be callable, got {type(lambd).__name__}")
        self.lambd = lambd

    def __call__(self, x):
        return self.lambd(x)

    def __repr__(self) -> str:
        return "Lambda()"
