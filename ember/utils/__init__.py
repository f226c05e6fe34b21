"""PyTorch-style utility namespace: ``ember.utils.checkpoint`` (``torch.utils.checkpoint``)."""
from . import checkpoint  # noqa: F401
