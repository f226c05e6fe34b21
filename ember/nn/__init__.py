"""``ember.nn``: modules, parameters, initialisation, functional ops and losses."""
from . import common_types, functional, grad, init  # noqa: F401
from ._factory_kwargs import factory_kwargs  # noqa: F401
from .module import Module
from .parameter import Buffer, Parameter
from .modules import *  # noqa: F401,F403
from . import parallel, utils  # noqa: F401
# NOTE: after the star import, which brings the submodule modules.attention (MHA) along:
# ember.nn.attention is torch.nn.attention (sdpa_kernel), as in PyTorch
from . import attention  # noqa: F401,E402
