"""``torch.version``: Ember's version and the toolkits it was built against.

Ember is pure Python over NumPy/SciPy (CuPy at run time for ``cuda`` devices), built against
no CUDA/ROCm toolkit, so ``cuda``/``hip``/``xpu`` are None as in a CPU-only PyTorch build;
``ember.cuda.is_available()`` answers whether a GPU can be used.
"""
from . import __version__  # noqa: F401

cuda = None
hip = None
xpu = None
git_version = "unknown"
debug = False
