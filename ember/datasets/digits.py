"""scikit-learn's handwritten digits (1797 8x8 images, 10 classes), split 80/20 by a seed.

scikit-learn is optional (``pip install ember[examples]``); the data ships inside it, so
nothing is downloaded.

Example:
    >>> x_train, y_train, x_test, y_test = load_digits()      # doctest: +SKIP
    >>> tuple(x_train.shape), tuple(x_test.shape)              # doctest: +SKIP
    ((1438, 1, 8, 8), (359, 1, 8, 8))
"""
from __future__ import annotations

import numpy as np

from .. import random as _random
from ..data.dataset import Dataset
from ..ops.factories import from_numpy

__all__ = ["load_digits", "Digits"]


def _sklearn_digits():
    try:
        from sklearn.datasets import load_digits as sk_load
    except ImportError:
        raise ImportError("ember.datasets.load_digits needs scikit-learn (it ships the "
                          "digits data): pip install 'ember[examples]' (or pip install "
                          "scikit-learn)") from None
    d = sk_load()
    return d.images.astype(np.float32), d.target.astype(np.int64)


def load_digits(seed: int = 0, test_fraction: float = 0.2, flatten: bool = False):
    """The digits as tensors, shuffled by ``seed`` and split into train/test.

    Pixels are scaled from 0..16 to [0, 1] (float32); labels are int64.

    Args:
        seed: seed of the split permutation (an ``ember.Generator``; the global RNG is
            not touched).
        test_fraction: share of the samples held out (``round(n * test_fraction)``).
        flatten: images as ``(N, 64)`` rows instead of ``(N, 1, 8, 8)``.

    Returns:
        ``(x_train, y_train, x_test, y_test)``.
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"load_digits: test_fraction must be in (0, 1), got {test_fraction}")
    images, target = _sklearn_digits()
    images = images / np.float32(16.0)
    x = images.reshape(len(images), -1) if flatten else images[:, None, :, :]
    gen = _random.Generator().manual_seed(seed)
    perm = _random.randperm(len(x), generator=gen).numpy()
    n_test = int(round(len(x) * test_fraction))
    test, train = perm[:n_test], perm[n_test:]
    t = lambda a: from_numpy(np.ascontiguousarray(a))  # noqa: E731
    return t(x[train]), t(target[train]), t(x[test]), t(target[test])


class Digits(Dataset):
    """The train (or test) part of :func:`load_digits` as a Dataset of ``(image, label)``.

    ``image`` is a ``(1, 8, 8)`` float32 tensor (``(64,)`` with ``flatten=True``) passed
    through ``transform`` when given.

    Example:
        >>> ds = Digits(train=False)                     # doctest: +SKIP
        >>> len(ds)                                      # doctest: +SKIP
        359
    """

    classes = list(range(10))

    def __init__(self, train: bool = True, seed: int = 0, test_fraction: float = 0.2,
                 flatten: bool = False, transform=None, target_transform=None) -> None:
        x_tr, y_tr, x_te, y_te = load_digits(seed, test_fraction, flatten)
        self.data, self.targets = (x_tr, y_tr) if train else (x_te, y_te)
        self.transform, self.target_transform = transform, target_transform

    def __len__(self) -> int:
        return self.data.shape[0]

    def __getitem__(self, i):
        x, y = self.data[i], self.targets[i]
        if self.transform is not None:
            x = self.transform(x)
        if self.target_transform is not None:
            y = self.target_transform(y)
        return x, y
