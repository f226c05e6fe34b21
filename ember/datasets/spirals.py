"""Synthetic spirals: the seeds' example of data a linear classifier cannot separate.

Class ``k`` is an arm ``r = t, angle = 4 (k + t) + noise`` for ``t`` in [0, 1] (the
CS231n construction the course uses).

Example:
    >>> x, y = make_spirals(50, 3, seed=0)
    >>> tuple(x.shape), tuple(y.shape), sorted(set(y.tolist()))
    ((150, 2), (150,), [0, 1, 2])
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as _dt
from .. import random as _random
from ..ops.factories import from_numpy

__all__ = ["make_spirals"]


def make_spirals(n_per_class: int = 100, n_classes: int = 3, noise: float = 0.2,
                 seed: int = 0):
    """``n_classes`` interleaved spiral arms of ``n_per_class`` 2-D points each.

    Args:
        noise: standard deviation of the angle noise (radians).
        seed: seed of a private ``ember.Generator`` (the global RNG is not touched).

    Returns:
        ``(x, y)``: float32 points ``(n_per_class * n_classes, 2)`` in [-1, 1]² and int64
        labels, class by class.
    """
    if n_per_class <= 0 or n_classes <= 0:
        raise ValueError(f"make_spirals: n_per_class and n_classes must be positive, got "
                         f"{n_per_class}, {n_classes}")
    if noise < 0:
        raise ValueError(f"make_spirals: noise must be >= 0, got {noise}")
    gen = _random.Generator().manual_seed(seed)
    eps = _random.randn(n_classes, n_per_class, generator=gen, dtype=_dt.float64).numpy()
    r = np.linspace(0.0, 1.0, n_per_class)
    xs, ys = [], []
    for k in range(n_classes):
        angle = np.linspace(k * 4.0, (k + 1) * 4.0, n_per_class) + eps[k] * noise
        xs.append(np.stack([r * np.sin(angle), r * np.cos(angle)], axis=1))
        ys.append(np.full(n_per_class, k, dtype=np.int64))
    return from_numpy(np.concatenate(xs).astype(np.float32)), from_numpy(np.concatenate(ys))
