"""``torch.nn.modules.module``: :class:`Module` at PyTorch's path (it lives in
:mod:`ember.nn.module`)."""
from ..module import Module  # noqa: F401

__all__ = ["Module"]
