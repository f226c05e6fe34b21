"""``torch.nn.modules.module``: :class:`Module` and the global module hooks at PyTorch's
path (they live in :mod:`ember.nn.module` and :mod:`ember.nn._hooks`)."""
from .._hooks import (register_module_forward_hook,  # noqa: F401
                      register_module_forward_pre_hook)
from ..module import Module  # noqa: F401

__all__ = ["Module", "register_module_forward_hook", "register_module_forward_pre_hook"]
