"""The perceptron learning rule (seed 000) on a linearly separable 2-D toy set.

The model is ``H(x) = sign(w·x + b)``. Each epoch visits the points in a random order;
for every misclassified point (``y (w·x + b) <= 0``) the rule steps along the negative
gradient of the perceptron loss ``L = -Σ_{misclassified} y (w·x + b)``::

    w <- w + lr * y * x,    b <- b + lr * y

On separable data the number of mistakes per epoch reaches zero (Novikoff's theorem).

Run:
    python examples/perceptron.py [--n 100] [--epochs 50] [--seed 0]
"""
from __future__ import annotations

import argparse

import ember as em


def make_separable(n: int, margin: float = 0.1, seed: int = 0):
    """``n`` points in [-1, 1]² labelled ±1 by a random line, keeping a gap of ``margin``."""
    gen = em.Generator().manual_seed(seed)
    w_true = em.randn(2, generator=gen, dtype=em.float64)
    w_true = w_true / w_true.norm()
    b_true = 0.2 * em.randn((), generator=gen, dtype=em.float64)
    x = em.rand(4 * n, 2, generator=gen, dtype=em.float64) * 2 - 1
    score = x @ w_true + b_true
    keep = score.abs() > margin               # drop points too close to the true line
    x, score = x[keep][:n], score[keep][:n]
    return x, em.where(score > 0, 1.0, -1.0)


def train_perceptron(x, y, epochs: int = 50, lr: float = 1.0, seed: int = 0,
                     verbose: bool = True):
    """Run the perceptron rule; returns ``(w, b, mistakes_per_epoch)``."""
    gen = em.Generator().manual_seed(seed)
    w = em.zeros(x.shape[1], dtype=x.dtype)
    b = em.zeros((), dtype=x.dtype)
    history = []
    for epoch in range(1, epochs + 1):
        mistakes = 0
        for i in em.randperm(len(x), generator=gen).tolist():
            if (y[i] * (x[i] @ w + b)).item() <= 0:      # misclassified (or on the line)
                w += lr * y[i] * x[i]
                b += lr * y[i]
                mistakes += 1
        history.append(mistakes)
        if verbose:
            print(f"epoch {epoch:3d}  mistakes {mistakes:3d}")
        if mistakes == 0:
            break
    return w, b, history


def main(argv=None) -> list[int]:
    """Train and print mistakes per epoch; returns that list (its last entry is 0)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=100, help="number of points")
    p.add_argument("--epochs", type=int, default=50, help="maximum epochs")
    p.add_argument("--lr", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    x, y = make_separable(args.n, seed=args.seed)
    print(f"perceptron on {len(x)} separable points ({int((y > 0).sum())} positive)")
    w, b, history = train_perceptron(x, y, args.epochs, args.lr, args.seed)
    acc = ((x @ w + b).sign() == y).double().mean().item()
    print(f"w = {w.tolist()}, b = {b.item():.3f}, training accuracy {acc:.3f}")
    if history[-1] != 0:
        print(f"still {history[-1]} mistakes after {args.epochs} epochs (raise --epochs)")
    return history


if __name__ == "__main__":
    main()
