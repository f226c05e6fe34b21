"""``ember.nn.utils``: gradient clipping, parameter/vector conversion, normalisations.

The hook-based ``weight_norm``/``spectral_norm`` (and their ``remove_*``) live here;
``rnn`` (sequence packing), ``parametrize``, ``parametrizations``, ``fusion``, ``stateless``,
``prune`` and ``init`` are submodules imported on first use, as are the names taken from
them (``fuse_conv_bn_eval``, ``skip_init``...).
"""
from __future__ import annotations

import importlib

from .clip_grad import clip_grad_norm, clip_grad_norm_, clip_grad_value_, \
    clip_grads_with_norm_, get_total_norm
from .convert_parameters import parameters_to_vector, vector_to_parameters
# NOTE: eager, like torch's: a lazy name would be shadowed by its submodule (same name)
# once anything imports ember.nn.utils.weight_norm / .spectral_norm directly
from .spectral_norm import remove_spectral_norm, spectral_norm
from .weight_norm import remove_weight_norm, weight_norm

__all__ = ["clip_grad_norm_", "clip_grad_norm", "clip_grad_value_", "clip_grads_with_norm_",
           "get_total_norm", "parameters_to_vector", "vector_to_parameters"]


_SUBMODULES = ("rnn", "parametrize", "parametrizations", "fusion", "stateless", "prune",
               "init", "memory_format")
_LAZY = {"fuse_conv_bn_eval": "fusion", "fuse_conv_bn_weights": "fusion",
         "fuse_linear_bn_eval": "fusion", "fuse_linear_bn_weights": "fusion",
         "skip_init": "init", "convert_conv2d_weight_memory_format": "memory_format",
         "convert_conv3d_weight_memory_format": "memory_format"}
__all__ += ["weight_norm", "remove_weight_norm", "spectral_norm", "remove_spectral_norm",
            *_LAZY]


def __getattr__(name: str):
    # NOTE: lazy (the submodules import the layers, which import this package); any other
    # name, or a failing import, is an AttributeError so that hasattr() never raises.
    if name not in _SUBMODULES and name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        mod = importlib.import_module(f".{_LAZY.get(name, name)}", __name__)
    except ImportError as e:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r} ({e})") from e
    if name in _SUBMODULES:
        return mod
    src = _LAZY[name]
    globals().update({n: getattr(mod, n) for n, m in _LAZY.items() if m == src})
    return globals()[name]
