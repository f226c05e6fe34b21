"""A character-level text dataset: ``(x, y)`` windows where ``y`` is ``x`` shifted by one.

Example:
    >>> ds = CharText("hello world", block_size=4)
    >>> x, y = ds[0]
    >>> ds.decode(x), ds.decode(y)
    ('hell', 'ello')
"""
from __future__ import annotations

import os

import numpy as np

from ..data.dataset import Dataset
from ..ops.factories import from_numpy
from ..tensor import Tensor

__all__ = ["CharText"]


class CharText(Dataset):
    """Characters of a text file (or a string) as int64 token ids.

    Args:
        path_or_text: a ``pathlib.Path``/``os.PathLike``, a ``str`` naming an existing
            file, or the text itself.
        block_size: context length; sample ``i`` is ``(ids[i:i+bs], ids[i+1:i+bs+1])``.

    Attributes:
        vocab: the sorted distinct characters; ``stoi``/``itos`` map them to/from ids.
    """

    def __init__(self, path_or_text, block_size: int, encoding: str = "utf-8") -> None:
        if isinstance(path_or_text, os.PathLike) or (
                isinstance(path_or_text, str) and "\n" not in path_or_text
                and len(path_or_text) < 4096 and os.path.isfile(path_or_text)):
            with open(path_or_text, encoding=encoding) as f:
                text = f.read()
        elif isinstance(path_or_text, str):
            text = path_or_text
        else:
            raise TypeError(f"CharText: expected a path or a str, got "
                            f"{type(path_or_text).__name__}")
        if not isinstance(block_size, int) or block_size <= 0:
            raise ValueError(f"CharText: block_size must be a positive int, got {block_size!r}")
        if len(text) < block_size + 1:
            raise ValueError(f"CharText: the text has {len(text)} characters; block_size="
                             f"{block_size} needs at least {block_size + 1}")
        self.text, self.block_size = text, block_size
        self.vocab = sorted(set(text))
        self.stoi = {c: i for i, c in enumerate(self.vocab)}
        self.itos = dict(enumerate(self.vocab))
        self.data = from_numpy(np.array(self.encode(text), dtype=np.int64))

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def encode(self, s: str) -> list[int]:
        """Characters → ids (KeyError names a character outside the vocabulary)."""
        try:
            return [self.stoi[c] for c in s]
        except KeyError as e:
            raise KeyError(f"CharText.encode: character {e.args[0]!r} is not in the "
                           f"vocabulary") from None

    def decode(self, ids) -> str:
        """Ids (list or tensor) → string."""
        if isinstance(ids, Tensor):
            ids = ids.tolist()
        return "".join(self.itos[int(i)] for i in ids)

    def __len__(self) -> int:
        return len(self.data) - self.block_size

    def __getitem__(self, i):
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"CharText: index {i} out of range for {n} windows")
        chunk = self.data[i:i + self.block_size + 1]
        return chunk[:-1], chunk[1:]
