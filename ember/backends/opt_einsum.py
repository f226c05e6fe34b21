"""``ember.backends.opt_einsum``: ``torch.backends.opt_einsum``'s flags.

``ember.einsum`` contracts through NumPy's ``einsum`` with ``optimize=`` set from these
flags: ``enabled`` (default True) lets NumPy pick a contraction order for three or more
operands, and ``strategy`` names how (``"auto"``/``"greedy"``: NumPy's greedy search;
``"optimal"``: its exhaustive one). The ``opt_einsum`` package itself is not needed.
"""
from __future__ import annotations

import importlib.util

#: whether einsum may reorder a contraction of three or more operands
enabled = True
#: the contraction-order search: "auto", "greedy" or "optimal"
strategy = "auto"


def is_available() -> bool:
    """Whether the ``opt_einsum`` package is installed (Ember does not need it)."""
    return importlib.util.find_spec("opt_einsum") is not None


def get_opt_einsum():
    """The ``opt_einsum`` module if installed, else None."""
    if not is_available():
        return None
    import opt_einsum
    return opt_einsum
