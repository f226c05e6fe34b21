"""Variable-length sequence helpers (``torch.nn.utils.rnn``): padding and packing.

A batch of sequences of different lengths is either *padded* to one ``(T, B, *)`` tensor
(``batch_first``: ``(B, T, *)``) or *packed*: the time steps laid out one after the other,
each holding only the sequences still running, with ``batch_sizes[t]`` rows at step ``t``
(sequences sorted longest first). Everything here is built from Ember ops (slicing,
``cat``, ``stack``, ``index_select``), so gradients flow through padding and packing.

Example:
    >>> a, b = ember.ones(3, 2), ember.zeros(1, 2)
    >>> padded = pad_sequence([a, b], batch_first=True)          # (2, 3, 2)
    >>> packed = pack_padded_sequence(padded, [3, 1], batch_first=True)
    >>> packed.batch_sizes
    tensor([2, 1, 1])
"""
from __future__ import annotations

from typing import NamedTuple

from ... import dtypes as _dt
from ...errors import ShapeError
from ...ops.factories import full, tensor
from ...ops.scatter import index_select
from ...ops.join import cat, stack
from ...tensor import Tensor

__all__ = ["PackedSequence", "pad_sequence", "unpad_sequence", "pack_padded_sequence",
           "pad_packed_sequence", "pack_sequence", "unpack_sequence", "invert_permutation"]


def invert_permutation(permutation: Tensor | None) -> Tensor | None:
    """The inverse of a permutation of ``0 .. n-1`` (None stays None), as
    ``PackedSequence.unsorted_indices`` is of ``sorted_indices``.

    Example:
        >>> invert_permutation(ember.tensor([2, 0, 1]))
        tensor([1, 2, 0])
    """
    if permutation is None:
        return None
    from ...ops.factories import arange, empty_like
    out = empty_like(permutation)
    out[permutation] = arange(permutation.numel(), dtype=permutation.dtype,
                              device=permutation.device)
    return out


class PackedSequence(NamedTuple):
    """Packed time steps: ``data`` (``(sum(lengths), *)``), ``batch_sizes`` (int64, one per
    step), and the permutation that sorted the batch (None when it came sorted)."""
    data: Tensor
    batch_sizes: Tensor
    sorted_indices: Tensor | None = None
    unsorted_indices: Tensor | None = None


def _pad_to(x: Tensor, n: int, value, side: str) -> Tensor:
    """``x`` padded along dim 0 to ``n`` rows of ``value``."""
    if x.shape[0] == n:
        return x
    pad = full((n - x.shape[0],) + tuple(x.shape[1:]), value, dtype=x.dtype, device=x.device)
    return cat([x, pad] if side == "right" else [pad, x], 0)


def pad_sequence(sequences, batch_first: bool = False, padding_value=0.0,
                 padding_side: str = "right") -> Tensor:
    """Stack tensors of shapes ``(L_i, *)`` into ``(T, B, *)`` (``(B, T, *)`` if
    ``batch_first``), padding each to the longest with ``padding_value``.

    Example:
        >>> pad_sequence([ember.tensor([1, 2, 3]), ember.tensor([4])], batch_first=True)
        tensor([[1, 2, 3],
                [4, 0, 0]])
    """
    if padding_side not in ("left", "right"):
        raise ValueError(f"pad_sequence: padding_side must be 'left' or 'right', got "
                         f"{padding_side!r}")
    seqs = list(sequences)
    if not seqs:
        raise ValueError("pad_sequence: received an empty list of sequences")
    trail = tuple(seqs[0].shape[1:])
    for i, s in enumerate(seqs):
        if not isinstance(s, Tensor) or s.ndim == 0 or tuple(s.shape[1:]) != trail:
            got = tuple(s.shape) if isinstance(s, Tensor) else type(s).__name__
            raise ShapeError(f"pad_sequence: every sequence must be a tensor of shape (L, "
                             f"{', '.join(map(str, trail)) or '*'}) with the same trailing "
                             f"dims as sequence 0 {tuple(seqs[0].shape)}; sequence {i} is {got}")
    n = max(s.shape[0] for s in seqs)
    return stack([_pad_to(s, n, padding_value, padding_side) for s in seqs],
                 0 if batch_first else 1)


def unpad_sequence(padded_sequences: Tensor, lengths, batch_first: bool = False) -> list:
    """The inverse of :func:`pad_sequence`: a list of ``(L_i, *)`` tensors."""
    x = padded_sequences if batch_first else padded_sequences.transpose(0, 1)
    return [x[i, :int(n)] for i, n in enumerate(_lengths(lengths, "unpad_sequence"))]


def _lengths(lengths, op: str) -> list:
    if isinstance(lengths, Tensor):
        if lengths.ndim != 1:
            raise ShapeError(f"{op}: lengths must be 1-D, got shape {tuple(lengths.shape)}")
        return [int(v) for v in lengths.tolist()]
    return [int(v) for v in lengths]


def pack_padded_sequence(input: Tensor, lengths, batch_first: bool = False,
                         enforce_sorted: bool = True) -> PackedSequence:
    """Pack a padded batch (``(T, B, *)``, or ``(B, T, *)`` if ``batch_first``) whose
    sequence ``b`` has ``lengths[b]`` valid steps.

    With ``enforce_sorted`` the lengths must be decreasing; otherwise the batch is sorted
    here and the permutation kept in the result (``unsorted_indices`` restores it).
    """
    lens = _lengths(lengths, "pack_padded_sequence")
    b_dim = 0 if batch_first else 1
    if input.ndim < 2 or input.shape[b_dim] != len(lens):
        raise ShapeError(f"pack_padded_sequence: expected {len(lens)} sequences (one per "
                         f"length) along dim {b_dim} of the input, got shape "
                         f"{tuple(input.shape)}")
    if any(n <= 0 for n in lens):
        raise ValueError(f"pack_padded_sequence: length of all samples has to be greater than "
                         f"0, but got lengths {lens}")
    if max(lens) > input.shape[1 - b_dim]:
        raise ShapeError(f"pack_padded_sequence: a length of {max(lens)} exceeds the "
                         f"{input.shape[1 - b_dim]} steps of the input of shape "
                         f"{tuple(input.shape)}")
    sorted_idx = unsorted_idx = None
    if enforce_sorted:
        if any(a < b for a, b in zip(lens, lens[1:])):
            raise ValueError(f"pack_padded_sequence: `lengths` array must be sorted in "
                             f"decreasing order when `enforce_sorted` is True, got {lens}; "
                             f"pass enforce_sorted=False to sort here")
    else:
        order = sorted(range(len(lens)), key=lambda i: -lens[i])   # NOTE: stable
        inverse = [0] * len(order)
        for k, i in enumerate(order):
            inverse[i] = k
        sorted_idx, unsorted_idx = tensor(order), tensor(inverse)
        input = index_select(input, b_dim, sorted_idx)
        lens = [lens[i] for i in order]
    steps = input if not batch_first else input.transpose(0, 1)
    sizes = [sum(1 for n in lens if n > t) for t in range(lens[0])]
    data = cat([steps[t, :bs] for t, bs in enumerate(sizes)], 0)
    return PackedSequence(data, tensor(sizes, dtype=_dt.int64), sorted_idx, unsorted_idx)


def pad_packed_sequence(sequence: PackedSequence, batch_first: bool = False,
                        padding_value=0.0, total_length: int | None = None) -> tuple:
    """The inverse of :func:`pack_padded_sequence`: ``(padded, lengths)``, lengths int64.

    ``total_length`` pads the time dim further (it must be at least the longest length).
    """
    data, batch_sizes = sequence.data, [int(v) for v in sequence.batch_sizes.tolist()]
    n_steps, batch = len(batch_sizes), (batch_sizes[0] if batch_sizes else 0)
    if total_length is not None:
        if total_length < n_steps:
            raise ValueError(f"pad_packed_sequence: expected total_length to be at least the "
                             f"length of the longest sequence ({n_steps}), got "
                             f"total_length={total_length}")
    rows, at = [], 0
    for bs in batch_sizes:
        rows.append(_pad_to(data[at:at + bs], batch, padding_value, "right"))
        at += bs
    out = stack(rows, 0)                                              # (T, B, *)
    out = _pad_to(out, total_length or n_steps, padding_value, "right")
    lengths = [sum(1 for bs in batch_sizes if bs > b) for b in range(batch)]
    if sequence.unsorted_indices is not None:
        out = index_select(out, 1, sequence.unsorted_indices)
        lengths = [lengths[i] for i in sequence.unsorted_indices.tolist()]
    if batch_first:
        out = out.transpose(0, 1)
    return out, tensor(lengths, dtype=_dt.int64)


def pack_sequence(sequences, enforce_sorted: bool = True) -> PackedSequence:
    """Pack a list of ``(L_i, *)`` tensors (``pad_sequence`` then ``pack_padded_sequence``)."""
    seqs = list(sequences)
    return pack_padded_sequence(pad_sequence(seqs), [s.shape[0] for s in seqs],
                                enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences: PackedSequence) -> list:
    """The inverse of :func:`pack_sequence`: the list of ``(L_i, *)`` tensors."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
