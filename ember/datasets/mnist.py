"""An MNIST reader for IDX files in a folder you provide (nothing is downloaded).

Expected files (optionally gzipped, ``.gz``): ``train-images-idx3-ubyte``,
``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte``
(the ``train-images.idx3-ubyte`` spelling is accepted too). Works for Fashion-MNIST and
any IDX files with the same names.

Example:
    >>> ds = MNIST("~/data/mnist", train=False)          # doctest: +SKIP
    >>> x, y = ds[0]; tuple(x.shape)                     # doctest: +SKIP
    (1, 28, 28)
"""
from __future__ import annotations

import gzip
import os

import numpy as np

from ..data.dataset import Dataset
from ..ops.factories import from_numpy

__all__ = ["MNIST", "read_idx"]

_IDX_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4",
              0x0E: ">f8"}


def read_idx(path: str) -> np.ndarray:
    """Read an IDX file (``.gz`` or plain) into a NumPy array (native byte order).

    Raises:
        ValueError: bad magic number, unknown type code, or a size mismatch.
    """
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_TYPES:
        raise ValueError(f"read_idx({str(path)!r}): not an IDX file (magic {raw[:4].hex()})")
    ndim = raw[3]
    if len(raw) < 4 + 4 * ndim:
        raise ValueError(f"read_idx({str(path)!r}): truncated header")
    dims = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    dtype = np.dtype(_IDX_TYPES[raw[2]])
    need = int(np.prod(dims)) * dtype.itemsize
    body = raw[4 + 4 * ndim:]
    if len(body) != need:
        raise ValueError(f"read_idx({str(path)!r}): header promises shape {tuple(dims)} "
                         f"({need} bytes) but the file holds {len(body)} data bytes")
    return np.frombuffer(body, dtype=dtype).reshape(dims).astype(dtype.newbyteorder("="))


def _find(root: str, stem: str) -> str:
    dotted = stem.replace("-idx", ".idx")
    for name in (stem, stem + ".gz", dotted, dotted + ".gz"):
        p = os.path.join(root, name)
        if os.path.isfile(p):
            return p
    raise FileNotFoundError(f"MNIST: {stem}[.gz] not found in {root!r}; put the four IDX "
                            f"files (train-images-idx3-ubyte, train-labels-idx1-ubyte, "
                            f"t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte) there")


class MNIST(Dataset):
    """MNIST from IDX files in ``root``: samples ``(image, label)``.

    Without ``transform`` an image is a ``(1, H, W)`` float32 tensor in [0, 1]; with one,
    ``transform`` gets the ``(H, W)`` uint8 NumPy array (so ``transforms.ToTensor`` fits).
    ``.data`` is the uint8 ``(N, H, W)`` tensor and ``.targets`` the int64 labels.
    """

    classes = [str(i) for i in range(10)]

    def __init__(self, root: str, train: bool = True, transform=None,
                 target_transform=None) -> None:
        root = os.path.expanduser(os.fspath(root))
        prefix = "train" if train else "t10k"
        images = read_idx(_find(root, f"{prefix}-images-idx3-ubyte"))
        labels = read_idx(_find(root, f"{prefix}-labels-idx1-ubyte"))
        if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
            raise ValueError(f"MNIST({root!r}): images {images.shape} and labels "
                             f"{labels.shape} don't match (expected (N, H, W) and (N,))")
        self.root, self.train = root, train
        self.data = from_numpy(np.ascontiguousarray(images, dtype=np.uint8))
        self.targets = from_numpy(labels.astype(np.int64))
        self.transform, self.target_transform = transform, target_transform

    def __len__(self) -> int:
        return self.data.shape[0]

    def __getitem__(self, i):
        img, y = self.data.numpy()[i], self.targets[i]
        if self.transform is not None:
            x = self.transform(img)
        else:
            x = from_numpy((img.astype(np.float32) / np.float32(255))[None])
        if self.target_transform is not None:
            y = self.target_transform(y)
        return x, y
