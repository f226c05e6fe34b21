"""PyTorch-style utility namespace: ``ember.utils.checkpoint`` (``torch.utils.checkpoint``),
``ember.utils.data`` (``torch.utils.data``, the same objects as :mod:`ember.data`),
``ember.utils.dlpack`` (``torch.utils.dlpack``), ``ember.utils.benchmark`` (``Timer``),
``ember.utils.hooks`` and
``ember.utils._pytree`` (``torch.utils._pytree``, which libraries register their classes in)."""
from . import _pytree  # noqa: F401
from . import benchmark  # noqa: F401
from . import checkpoint  # noqa: F401
from . import data  # noqa: F401
from . import dlpack  # noqa: F401
from . import hooks  # noqa: F401
