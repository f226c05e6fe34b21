"""``torch.nn.modules.utils``' tuple helpers, which PyTorch layers and user code import
(``from torch.nn.modules.utils import _pair``).

Example:
    >>> _pair(3), _pair((1, 2)), _triple(2)
    ((3, 3), (1, 2), (2, 2, 2))
"""
from __future__ import annotations

import collections.abc
import itertools

__all__ = ["consume_prefix_in_state_dict_if_present"]


def _ntuple(n: int, name: str = "parse"):
    """A function turning a scalar into an ``n``-tuple (an iterable is returned as a tuple)."""
    def parse(x):
        if isinstance(x, collections.abc.Iterable) and not isinstance(x, str):
            return tuple(x)
        return tuple(itertools.repeat(x, n))
    parse.__name__ = name
    return parse


_single = _ntuple(1, "_single")
_pair = _ntuple(2, "_pair")
_triple = _ntuple(3, "_triple")
_quadruple = _ntuple(4, "_quadruple")


def _reverse_repeat_tuple(t, n: int) -> tuple:
    """Reverse ``t`` and repeat each element ``n`` times (``F.pad`` order from conv padding)."""
    return tuple(x for x in reversed(t) for _ in range(n))


def consume_prefix_in_state_dict_if_present(state_dict, prefix: str) -> None:
    """Strip ``prefix`` from the keys of ``state_dict`` in place, e.g. ``"module."`` from a
    checkpoint of a ``DistributedDataParallel`` model, and from its ``_metadata`` (where
    ``prefix`` without its dot becomes the root, ``""``). Renamed keys move to the end,
    as in PyTorch.

    Example:
        >>> sd = {"module.weight": ember.ones(1), "step": 3}
        >>> consume_prefix_in_state_dict_if_present(sd, "module.")
        >>> list(sd)
        ['step', 'weight']
    """
    for key in [k for k in state_dict if k.startswith(prefix)]:
        state_dict[key[len(prefix):]] = state_dict.pop(key)
    metadata = getattr(state_dict, "_metadata", None)
    if metadata is not None:
        for key in list(metadata):
            if not key:              # NOTE: the root's metadata: "" does not start with prefix
                continue
            if key == prefix.replace(".", ""):
                metadata[""] = metadata.pop(key)
            elif key.startswith(prefix):
                metadata[key[len(prefix):]] = metadata.pop(key)
