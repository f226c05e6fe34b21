"""Small datasets shipped with Ember (for examples and tests; no downloads).

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

__all__ = ["load_house_prices"]


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
