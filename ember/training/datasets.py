"""The datasets ``ember train --dataset`` knows, with what a model needs to size itself."""
from __future__ import annotations

import codecs
import contextlib
import io

import ember as em
from ember.data import Subset, TensorDataset
from ember import datasets as D

from .errors import UsageError


def _zen_of_python() -> str:
    with contextlib.redirect_stdout(io.StringIO()):   # NOTE: its first import prints it
        import this
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
            raise UsageError("--dataset mnist needs --data-root DIR holding the MNIST IDX files")
        tr, te = D.MNIST(cfg.data_root, train=True), D.MNIST(cfg.data_root, train=False)
        info = {"name": "mnist", "features": 784, "channels": 1, "size": 28, "classes": 10}
        return tr, te, info
    if name == "text":
        text = open(cfg.text_file, encoding="utf-8").read() if cfg.text_file \
            else _zen_of_python()
        return _text_parts(text, cfg.block_size)
    raise UsageError(f"unknown dataset {name!r}; choose digits, spirals, mnist or text")


def _text_parts(text: str, block_size: int):
    """Windows of the first 90% of ``text`` to train on, of the last 10% held out.

    One vocabulary and one encoding for both parts (the whole text's), and no held-out
    window reads or predicts a training character.
    """
    full = D.CharText(text, block_size=block_size)
    split = int(len(text) * 0.9)
    if split - block_size < 1 or len(text) - split - block_size < 1:
        raise UsageError(f"--block-size {block_size} needs a text of at least "
                         f"{10 * (block_size + 1)} characters (90% to train on, 10% held "
                         f"out), got {len(text)}")
    tr = Subset(full, range(0, split - block_size))
    te = Subset(full, range(split, len(text) - block_size))
    info = {"name": "text", "vocab": full.vocab_size, "block_size": block_size,
            "dataset": full}
    return tr, te, info
