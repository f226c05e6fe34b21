"""PyTorch-style utility namespace: ``ember.utils.checkpoint`` (``torch.utils.checkpoint``),
``ember.utils.data`` (``torch.utils.data``, the same objects as :mod:`ember.data`) and
``ember.utils.dlpack`` (``torch.utils.dlpack``)."""
from . import checkpoint  # noqa: F401
from . import data  # noqa: F401
from . import dlpack  # noqa: F401
