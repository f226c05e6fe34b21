"""``ember.nn.utils``: gradient clipping and parameter/vector conversion.

``ember.nn.utils.rnn`` (sequence packing) is a submodule, imported on first use.
"""
from __future__ import annotations

import importlib

from .clip_grad import clip_grad_norm, clip_grad_norm_, clip_grad_value_, \
    clip_grads_with_norm_, get_total_norm
from .convert_parameters import parameters_to_vector, vector_to_parameters

__all__ = ["clip_grad_norm_", "clip_grad_norm", "clip_grad_value_", "clip_grads_with_norm_",
           "get_total_norm", "parameters_to_vector", "vector_to_parameters"]


def __getattr__(name: str):
    # NOTE: lazy (the rnn helpers import the join/scatter ops); any other name, or a
    # failing import, is an AttributeError so that hasattr() never raises.
    if name == "rnn":
        try:
            return importlib.import_module(".rnn", __name__)
        except ImportError as e:
            raise AttributeError(f"module {__name__!r} has no attribute 'rnn' ({e})") from e
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
