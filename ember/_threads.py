"""``ember.set_num_threads`` / ``get_num_threads``: the threads of BLAS and Ember's kernels.

Ember's CPU work runs in two thread pools: NumPy's BLAS (OpenBLAS or MKL: matmul,
convolution GEMMs) and Ember's own pool for generated kernels (``ember/codegen/pool.py``).
``set_num_threads(n)`` sets both, like ``torch.set_num_threads`` sets ATen's intra-op pool.
The BLAS library is found among the shared objects this process has loaded (NumPy's wheels
bundle a prefixed OpenBLAS, ``scipy_openblas_set_num_threads64_``) and called through
ctypes — no ``threadpoolctl`` needed. Where no known BLAS is found, only Ember's pool
changes and :func:`blas_threading` is empty. While other processes keep the CPUs busy,
BLAS gets fewer threads than asked (:mod:`ember._contention`; ``EMBER_ADAPTIVE_THREADS=0``
turns that off).

Example:
    >>> ember.set_num_threads(1)
    >>> ember.get_num_threads()
    1
"""
from __future__ import annotations

import ctypes
import os

#: (setter, getter) symbol pairs of the BLAS builds NumPy ships or links, tried in order.
_SYMBOLS = [
    ("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
    ("scipy_openblas_set_num_threads", "scipy_openblas_get_num_threads"),
    ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
    ("openblas_set_num_threads", "openblas_get_num_threads"),
    ("MKL_Set_Num_Threads", "MKL_Get_Max_Threads"),
]
_MARKERS = ("openblas", "mkl_rt", "libblas")
_blas: dict = {}
_interop = {"n": None}


def _loaded_libraries() -> list[str]:
    """Paths of the BLAS-looking shared objects mapped into this process."""
    paths = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rsplit(None, 1)[-1] if "/" in line else ""
                name = os.path.basename(path).lower()
                if path not in paths and any(m in name for m in _MARKERS) and ".so" in name:
                    paths.append(path)
    except OSError:
        pass
    return paths


def _thread_calls(path: str):
    """``(set, get)`` thread calls of the BLAS library at ``path``, or None (cached)."""
    if path not in _blas:
        _blas[path] = None
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            return None
        for set_name, get_name in _SYMBOLS:
            if hasattr(lib, set_name) and hasattr(lib, get_name):
                setter, getter = getattr(lib, set_name), getattr(lib, get_name)
                setter.argtypes, setter.restype = [ctypes.c_int], None
                getter.argtypes, getter.restype = [], ctypes.c_int
                _blas[path] = (setter, getter)
                break
    return _blas[path]


def _find_blas() -> dict:
    """``{library path: (set, get)}`` for every loaded BLAS with known thread calls.

    NumPy and SciPy each bundle their own OpenBLAS; both are set.
    """
    import numpy  # noqa: F401 - NumPy's import loads its BLAS
    found = {}
    for path in _loaded_libraries():
        fns = _thread_calls(path)
        if fns is not None:
            found[path] = fns
    return found


def blas_threading() -> dict:
    """``{library path: threads}`` for each BLAS library ``set_num_threads`` controls."""
    return {path: int(get()) for path, (_, get) in _find_blas().items()}


def set_num_threads(n: int) -> None:
    """Use ``n`` threads for intra-op work: BLAS calls and Ember's generated kernels.

    Args:
        n: a positive number of threads.

    Raises:
        ValueError: ``n`` is not a positive integer.
    """
    if isinstance(n, bool) or not isinstance(n, int) and not hasattr(n, "__index__"):
        raise TypeError(f"set_num_threads(): expected an int, got {type(n).__name__}")
    n = int(n)
    if n <= 0:
        raise ValueError(f"set_num_threads(): number of threads must be positive, got {n}")
    from .codegen.runtime import set_num_threads as set_kernel_threads
    from . import _contention
    set_kernel_threads(n)
    _contention.set_asked(n)    # BLAS: n, or fewer while other processes hold the CPUs


def get_num_threads() -> int:
    """Threads used for intra-op work (Ember's kernel pool; BLAS is set to the same, or to
    fewer while other processes keep the CPUs busy: :mod:`ember._contention`)."""
    from .codegen.runtime import num_threads
    return num_threads()


def set_num_interop_threads(n: int) -> None:
    """Record the inter-op thread count (Ember runs ops one at a time: nothing uses it)."""
    if int(n) <= 0:
        raise ValueError(f"set_num_interop_threads(): number of threads must be positive, "
                         f"got {n}")
    _interop["n"] = int(n)


def get_num_interop_threads() -> int:
    """The inter-op thread count set by :func:`set_num_interop_threads` (default 1)."""
    return _interop["n"] or 1


def _start_contention_policy() -> None:
    from . import _contention
    _contention.start()


_start_contention_policy()
