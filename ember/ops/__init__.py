"""Ember's operators: primitives declared in the registry, and composites built on them.

Import order matters only in that ``dispatch`` installs itself into the registry.
"""
from . import registry, dispatch  # noqa: F401
from . import attention  # noqa: F401,E402 - the fused sdpa primitive (nn.functional uses it)
