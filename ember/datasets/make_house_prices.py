"""Regenerate ``house_prices.csv`` (run once; the CSV is committed and shipped).

A synthetic but realistic housing market (the seeds' house-price regression): each
row is a house with its floor area, bedrooms, age, distance to the city centre and
a price from a known linear formula plus Gaussian noise, so a fitted model can be
compared with the truth.

Usage:
    python -m ember.datasets.make_house_prices
"""
from __future__ import annotations

import csv
import pathlib

import numpy as np

SEED = 20240601
N_ROWS = 400

#: price (thousands) = BIAS + sum(WEIGHTS[f] * feature) + noise
BIAS = 120.0
WEIGHTS = {"area_m2": 2.5, "bedrooms": 15.0, "age_years": -1.0, "distance_km": -4.0}
NOISE_STD = 12.0

HEADER = ["area_m2", "bedrooms", "age_years", "distance_km", "price_k"]


def make(seed: int = SEED, n: int = N_ROWS) -> np.ndarray:
    """The dataset as an ``(n, 5)`` float64 array in :data:`HEADER` order."""
    rng = np.random.default_rng(seed)
    bedrooms = rng.integers(1, 6, n)
    area = np.round(rng.normal(40.0 + 18.0 * bedrooms, 20.0).clip(25, 260), 1)
    age = np.round(rng.gamma(2.0, 10.0, n).clip(0, 80), 1)
    distance = np.round(rng.lognormal(1.5, 0.5, n).clip(0.3, 25), 2)
    x = np.stack([area, bedrooms, age, distance], axis=1)
    w = np.array([WEIGHTS[h] for h in HEADER[:-1]])
    price = np.round(BIAS + x @ w + rng.normal(0.0, NOISE_STD, n), 1)
    return np.column_stack([x, price])


def main() -> None:
    path = pathlib.Path(__file__).with_name("house_prices.csv")
    data = make()
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(HEADER)
        for row in data:
            out.writerow([f"{row[0]:.1f}", f"{int(row[1])}", f"{row[2]:.1f}", f"{row[3]:.2f}",
                          f"{row[4]:.1f}"])
    print(f"wrote {len(data)} rows to {path}")


if __name__ == "__main__":
    main()
