"""Embedding: a lookup table of learned vectors; EmbeddingBag: reduced bags of them."""
from __future__ import annotations

from ...autograd.grad_mode import no_grad
from ...errors import ShapeError
from .. import functional as F
from ..module import Module
from ..parameter import Parameter

__all__ = ['Embedding', 'EmbeddingBag']


class Embedding(Module):
    """A table of ``num_embeddings`` vectors of size ``embedding_dim``, initialised N(0, 1).

    The ``padding_idx`` row starts at zero and never receives a gradient.

    Example:
        >>> emb = ember.nn.Embedding(10, 3, padding_idx=0)
        >>> emb(ember.tensor([[0, 5]])).shape
        ember.Size([1, 2, 3])
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 max_norm: float | None = None, norm_type: float = 2.0,
                 scale_grad_by_freq: bool = False, sparse: bool = False, _weight=None,
                 _freeze: bool = False, device=None, dtype=None):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError("Padding_idx must be within num_embeddings")
            padding_idx %= num_embeddings
        self.padding_idx, self.max_norm, self.norm_type = padding_idx, max_norm, norm_type
        self.scale_grad_by_freq, self.sparse = scale_grad_by_freq, sparse
        self.weight = _table("Embedding", num_embeddings, embedding_dim, _weight, device, dtype,
                             requires_grad=not _freeze)
        if _weight is None:
            self.reset_parameters()

    def reset_parameters(self) -> None:
        with no_grad():
            self.weight.normal_()
            self._fill_padding_idx_with_zero()

    def _fill_padding_idx_with_zero(self) -> None:
        if self.padding_idx is not None:
            with no_grad():
                self.weight[self.padding_idx].fill_(0)

    def forward(self, input):
        return F.embedding(input, self.weight, self.padding_idx, self.max_norm, self.norm_type,
                           self.scale_grad_by_freq, self.sparse)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        if self.max_norm is not None:
            s += f", max_norm={self.max_norm}"
        if self.norm_type != 2:
            s += f", norm_type={self.norm_type}"
        if self.scale_grad_by_freq is not False:
            s += ", scale_grad_by_freq=True"
        if self.sparse is not False:
            s += ", sparse=True"
        return s

    @classmethod
    def from_pretrained(cls, embeddings, freeze: bool = True, padding_idx: int | None = None,
                        max_norm: float | None = None, norm_type: float = 2.0,
                        scale_grad_by_freq: bool = False, sparse: bool = False) -> "Embedding":
        """An Embedding whose table is ``embeddings`` (2-D), frozen unless ``freeze=False``."""
        rows, cols = _table_shape("Embedding", embeddings)
        return cls(rows, cols, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse,
                   _weight=embeddings, _freeze=freeze)


class EmbeddingBag(Module):
    """Sums, means or maxima over bags of embeddings (PyTorch's ``nn.EmbeddingBag``).

    The table is initialised N(0, 1), its ``padding_idx`` row zero; indices equal to
    ``padding_idx`` are left out of their bag. ``forward(input, offsets=None,
    per_sample_weights=None)`` follows ``F.embedding_bag``.

    Example:
        >>> bag = ember.nn.EmbeddingBag(10, 3, mode="sum")
        >>> bag(ember.tensor([1, 2, 4, 5]), ember.tensor([0, 2])).shape
        ember.Size([2, 3])
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, max_norm: float | None = None,
                 norm_type: float = 2.0, scale_grad_by_freq: bool = False, mode: str = "mean",
                 sparse: bool = False, _weight=None, include_last_offset: bool = False,
                 padding_idx: int | None = None, device=None, dtype=None):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq, self.mode, self.sparse = scale_grad_by_freq, mode, sparse
        self.include_last_offset = include_last_offset
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(f"EmbeddingBag: padding_idx must be within num_embeddings "
                                 f"({num_embeddings}), got {padding_idx}")
            padding_idx %= num_embeddings
        self.padding_idx = padding_idx
        self.weight = _table("EmbeddingBag", num_embeddings, embedding_dim, _weight, device,
                             dtype)
        if _weight is None:
            self.reset_parameters()

    reset_parameters = Embedding.reset_parameters
    _fill_padding_idx_with_zero = Embedding._fill_padding_idx_with_zero

    def forward(self, input, offsets=None, per_sample_weights=None):
        return F.embedding_bag(input, self.weight, offsets, self.max_norm, self.norm_type,
                               self.scale_grad_by_freq, self.mode, self.sparse,
                               per_sample_weights, self.include_last_offset, self.padding_idx)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.max_norm is not None:
            s += f", max_norm={self.max_norm}"
        if self.norm_type != 2:
            s += f", norm_type={self.norm_type}"
        if self.scale_grad_by_freq is not False:
            s += ", scale_grad_by_freq=True"
        s += f", mode={self.mode!r}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        return s

    @classmethod
    def from_pretrained(cls, embeddings, freeze: bool = True, max_norm: float | None = None,
                        norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                        mode: str = "mean", sparse: bool = False,
                        include_last_offset: bool = False,
                        padding_idx: int | None = None) -> "EmbeddingBag":
        """An EmbeddingBag whose table is ``embeddings`` (2-D), frozen unless ``freeze=False``."""
        rows, cols = _table_shape("EmbeddingBag", embeddings)
        bag = cls(rows, cols, max_norm, norm_type, scale_grad_by_freq, mode, sparse,
                  _weight=embeddings, include_last_offset=include_last_offset,
                  padding_idx=padding_idx)
        bag.weight.requires_grad = not freeze
        return bag


def _table(owner: str, num_embeddings: int, embedding_dim: int, _weight, device, dtype,
           requires_grad: bool = True) -> Parameter:
    """The table: ``_weight`` (checked to be ``(num_embeddings, embedding_dim)``) or a new,
    uninitialised one (the caller resets it)."""
    if _weight is None:
        from ...ops.factories import empty
        return Parameter(empty(num_embeddings, embedding_dim, device=device, dtype=dtype),
                         requires_grad=requires_grad)
    if tuple(_weight.shape) != (num_embeddings, embedding_dim):
        raise ShapeError(f"{owner}: shape of weight {tuple(_weight.shape)} does not match "
                         f"num_embeddings and embedding_dim ({num_embeddings}, {embedding_dim})")
    return Parameter(_weight, requires_grad=requires_grad)


def _table_shape(owner: str, embeddings) -> tuple:
    """``(rows, cols)`` of a ``from_pretrained`` table, which must be 2-D."""
    if embeddings.ndim != 2:
        raise ShapeError(f"{owner}.from_pretrained: embeddings parameter is expected to be "
                         f"2-dimensional, got shape {tuple(embeddings.shape)}")
    return tuple(embeddings.shape)
