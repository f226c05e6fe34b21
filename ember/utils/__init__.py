"""PyTorch-style utility namespace: ``ember.utils.checkpoint`` (``torch.utils.checkpoint``) and
``ember.utils.data`` (``torch.utils.data``, the same objects as :mod:`ember.data`)."""
from . import checkpoint  # noqa: F401
from . import data  # noqa: F401
