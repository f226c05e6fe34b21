"""Softmax regression: one ``nn.Linear`` layer trained with cross-entropy.

On scikit-learn's 8x8 handwritten digits (64 pixels → 10 classes) when scikit-learn is
installed, otherwise on Ember's synthetic spirals (2-D, 3 classes; a linear model cannot
separate them, so expect ~50% there). Prints the training loss per epoch and the
held-out accuracy.

Run:
    python examples/softmax_regression.py [--epochs 20] [--dataset digits|spirals]
"""
from __future__ import annotations

import argparse
import importlib.util

import ember as em
from ember import nn, optim
from ember.data import DataLoader, TensorDataset
from ember import datasets


def load(name: str, seed: int):
    """``(x_train, y_train, x_test, y_test)`` as flat float32 features and int64 labels."""
    if name == "digits":
        return datasets.load_digits(seed=seed, flatten=True)
    x, y = datasets.make_spirals(n_per_class=200, n_classes=3, seed=seed)
    perm = em.randperm(len(y), generator=em.Generator().manual_seed(seed))
    te, tr = perm[:len(y) // 5], perm[len(y) // 5:]
    return x[tr], y[tr], x[te], y[te]


def default_dataset() -> str:
    """The digits when scikit-learn (which ships them) is installed, else the spirals."""
    return "digits" if importlib.util.find_spec("sklearn") is not None else "spirals"


def accuracy(model: nn.Module, x, y) -> float:
    with em.no_grad():
        return (model(x).argmax(dim=1) == y).float().mean().item()


def main(argv=None) -> dict:
    """Train and evaluate; returns ``{"dataset", "losses" (per epoch), "accuracy"}``."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", choices=["digits", "spirals"], default=None,
                   help="default: digits if scikit-learn is installed, else spirals")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    name = args.dataset or default_dataset()

    em.manual_seed(args.seed)
    x_tr, y_tr, x_te, y_te = load(name, args.seed)
    n_classes = int(y_tr.max()) + 1
    model = nn.Linear(x_tr.shape[1], n_classes)          # logits = x Wᵀ + b
    loss_fn = nn.CrossEntropyLoss()                      # softmax + negative log-likelihood
    opt = optim.SGD(model.parameters(), lr=args.lr)
    loader = DataLoader(TensorDataset(x_tr, y_tr), batch_size=args.batch_size, shuffle=True)
    print(f"softmax regression on {name}: {len(y_tr)} train / {len(y_te)} test, "
          f"{x_tr.shape[1]} features, {n_classes} classes")

    losses = []
    for epoch in range(1, args.epochs + 1):
        total = 0.0
        for xb, yb in loader:
            loss = loss_fn(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(yb)
        losses.append(total / len(y_tr))
        print(f"epoch {epoch:3d}  train loss {losses[-1]:.4f}")

    acc = accuracy(model, x_te, y_te)
    print(f"held-out accuracy: {acc:.3f}")
    return {"dataset": name, "losses": losses, "accuracy": acc}


if __name__ == "__main__":
    main()
