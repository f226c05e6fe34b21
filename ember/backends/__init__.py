"""``ember.backends``: PyTorch's backend switches (``torch.backends``).

``cudnn``, ``cuda`` and ``mps`` hold settable flags that programs written for PyTorch set
(``ember.backends.cudnn.benchmark = True``); Ember has no such backend, so they change
nothing. ``cpu.get_cpu_capability()`` reports the SIMD level of this CPU; ``opt_einsum``'s
flags choose ``einsum``'s contraction order.
"""
from . import cpu, cuda, cudnn, mps, opt_einsum  # noqa: F401

__all__ = ["cpu", "cuda", "cudnn", "mps", "opt_einsum"]
