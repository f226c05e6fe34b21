"""Small datasets shipped with Ember (for examples and tests; no downloads).

- :func:`load_house_prices`: the synthetic house-price table (NumPy arrays).
- :func:`load_digits` / :class:`Digits`: scikit-learn's 8x8 digits (optional
  ``ember[examples]`` extra), split 80/20 by a seed.
- :func:`make_spirals`: the seeds' non-linearly separable spirals.
- :class:`MNIST`: reads IDX files from a folder you provide (:func:`read_idx`).
- :class:`CharText`: a character-level dataset from any text file.

Example:
    >>> from ember.datasets import load_house_prices
    >>> x, y, names = load_house_prices()
    >>> x.shape, y.shape
    ((400, 4), (400,))
"""
from __future__ import annotations

import csv
import io
from importlib import resources

import numpy as np

from .digits import Digits, load_digits
from .mnist import MNIST, read_idx
from .spirals import make_spirals
from .text import CharText

__all__ = ["load_house_prices", "load_digits", "Digits", "make_spirals", "MNIST", "read_idx",
           "CharText"]


def load_house_prices():
    """The synthetic house-price table as NumPy arrays.

    Returns:
        ``(features, price, feature_names)``: ``features`` is ``(400, 4)`` float64
        (area_m2, bedrooms, age_years, distance_km), ``price`` is ``(400,)`` in
        thousands. The generating formula is in :mod:`ember.datasets.make_house_prices`.
    """
    text = resources.files(__package__).joinpath("house_prices.csv").read_text()
    rows = list(csv.reader(io.StringIO(text)))
    header, body = rows[0], np.array(rows[1:], dtype=np.float64)
    return body[:, :-1], body[:, -1], header[:-1]
