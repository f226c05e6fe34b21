"""The datasets ``ember train --dataset`` knows, with what a model needs to size itself."""
from __future__ import annotations

import codecs

import ember as em
from ember.data import TensorDataset
from ember import datasets as D


def _zen_of_python() -> str:
    import this  # noqa: F401 - ships with every Python; prints once, so silence it
    return codecs.decode(this.s, "rot13")


def load_dataset(cfg):
    """``(train_dataset, held_out_dataset, info)`` for ``cfg.dataset``."""
    name = cfg.dataset
    if name == "digits":
        xtr, ytr, xte, yte = D.load_digits(seed=cfg.seed)
        info = {"name": "digits", "features": 64, "channels": 1, "size": 8, "classes": 10}
        return TensorDataset(xtr, ytr), TensorDataset(xte, yte), info
    if name == "spirals":
        x, y = D.make_spirals(n_per_class=300, n_classes=3, noise=0.2, seed=cfg.seed)
        perm = em.randperm(len(y), generator=em.Generator().manual_seed(cfg.seed))
        n_test = len(y) // 5
        te, tr = perm[:n_test], perm[n_test:]
        info = {"name": "spirals", "features": x.shape[1], "classes": 3}
        return TensorDataset(x[tr], y[tr]), TensorDataset(x[te], y[te]), info
    if name == "mnist":
        if not cfg.data_root:
            raise ValueError("--dataset mnist needs --data-root DIR holding the MNIST IDX files")
        tr, te = D.MNIST(cfg.data_root, train=True), D.MNIST(cfg.data_root, train=False)
        info = {"name": "mnist", "features": 784, "channels": 1, "size": 28, "classes": 10}
        return tr, te, info
    if name == "text":
        text = open(cfg.text_file, encoding="utf-8").read() if cfg.text_file \
            else _zen_of_python()
        split = int(len(text) * 0.9)
        tr = D.CharText(text[:split], block_size=cfg.block_size)
        te = D.CharText(text[split - cfg.block_size:], block_size=cfg.block_size)
        te.stoi, te.itos = tr.stoi, tr.itos   # one vocabulary for both parts
        info = {"name": "text", "vocab": tr.vocab_size, "block_size": cfg.block_size,
                "dataset": tr}
        return tr, te, info
    raise ValueError(f"unknown dataset {name!r}; choose digits, spirals, mnist or text")
