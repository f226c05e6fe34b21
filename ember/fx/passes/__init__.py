"""``ember.fx.passes``: ready-made passes over GraphModules."""
from . import shape_prop  # noqa: F401
