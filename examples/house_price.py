"""House-price linear regression with raw Ember tensors, autograd and plain SGD.

The seeds' first model: price = X @ w + b, fitted by minibatch stochastic gradient
descent on the small synthetic dataset shipped with Ember (``ember/datasets``).
No ``nn`` module: parameters are leaf tensors with ``requires_grad=True``, the loss is
written with tensor ops, ``loss.backward()`` fills ``.grad`` and the update runs
in place under ``no_grad``.

Run:
    python examples/house_price.py
"""
from __future__ import annotations

import time

import ember as em
from ember.datasets import load_house_prices
from ember.datasets.make_house_prices import BIAS, WEIGHTS

EPOCHS = 200
BATCH = 32
LR = 0.01
PRINT_EVERY = 20


def split(x, y, test_fraction=0.2, seed=0):
    """Shuffle with a seeded Ember generator and cut off a test set."""
    perm = em.randperm(len(x), generator=em.Generator().manual_seed(seed)).numpy()
    n_test = int(len(x) * test_fraction)
    test, train = perm[:n_test], perm[n_test:]
    return x[train], y[train], x[test], y[test]


def main() -> None:
    t0 = time.perf_counter()
    features, price, names = load_house_prices()
    x_tr, y_tr, x_te, y_te = split(features, price)

    # Standardise features with the training set's statistics (the test set never leaks in).
    mu, sigma = x_tr.mean(axis=0), x_tr.std(axis=0)
    X = em.tensor((x_tr - mu) / sigma, dtype=em.float32)
    Y = em.tensor(y_tr, dtype=em.float32)
    X_test = em.tensor((x_te - mu) / sigma, dtype=em.float32)
    Y_test = em.tensor(y_te, dtype=em.float32)

    em.manual_seed(0)
    w = em.zeros(X.shape[1], requires_grad=True)
    b = em.zeros(1, requires_grad=True)
    n = X.shape[0]
    print(f"house prices: {n} train / {X_test.shape[0]} test rows, features {names}")

    for epoch in range(1, EPOCHS + 1):
        perm = em.randperm(n)
        total = 0.0
        for start in range(0, n, BATCH):
            idx = perm[start:start + BATCH]
            xb, yb = X[idx], Y[idx]
            pred = xb @ w + b
            loss = ((pred - yb) ** 2).mean()
            loss.backward()
            with em.no_grad():
                w -= LR * w.grad
                b -= LR * b.grad
            w.grad = None
            b.grad = None
            total += loss.item() * xb.shape[0]
        if epoch == 1 or epoch % PRINT_EVERY == 0:
            print(f"epoch {epoch:4d}  train MSE {total / n:10.2f}")

    # Undo the standardisation: price = b + sum(w_j * (x_j - mu_j) / sigma_j).
    w_raw = w.detach().numpy() / sigma
    b_raw = b.item() - float((w_raw * mu).sum())
    print("\n            learned      true")
    print(f"{'bias':<12}{b_raw:8.2f}  {BIAS:8.2f}")
    for name, lw in zip(names, w_raw):
        print(f"{name:<12}{lw:8.2f}  {WEIGHTS[name]:8.2f}")

    with em.no_grad():
        rmse = (((X_test @ w + b) - Y_test) ** 2).mean().sqrt().item()
    print(f"\ntest RMSE: {rmse:.2f} (thousands; label noise std is 12.0)")
    print(f"done in {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main()
