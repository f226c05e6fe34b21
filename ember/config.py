"""Configuration report (``ember.show_config``) and debug flags read in one place."""
from __future__ import annotations

import os

DEBUG = int(os.environ.get("EMBER_DEBUG", "0") or 0)

#: eager mode may run large transcendental ops as generated C kernels (see
#: ``ember/codegen/eager.py``); ``EMBER_EAGER_KERNELS=0`` keeps every op on NumPy.
EAGER_KERNELS = os.environ.get("EMBER_EAGER_KERNELS", "1").strip().lower() not in (
    "0", "false", "no", "off")
#: elements an op runs in NumPy per process before its eager kernel is built. Default 0: an
#: op's path depends on its op, dtype and size alone, so a run resumed from a checkpoint
#: computes the same bits as the uninterrupted run. A positive value amortises the compiler
#: probe and first compile for short scripts at the price of that determinism.
EAGER_KERNELS_WARMUP = int(os.environ.get("EMBER_EAGER_KERNELS_WARMUP", "0") or 0)


def set_eager_kernels(enabled: bool) -> bool:
    """Turn eager mode's generated-kernel fast path on or off; returns the previous setting.

    Off, every eager op runs its NumPy kernel (NumPy's exact bits).

    Example:
        >>> prev = ember.config.set_eager_kernels(False)
    """
    global EAGER_KERNELS
    prev, EAGER_KERNELS = EAGER_KERNELS, bool(enabled)
    return prev


def blas_info() -> dict:
    """BLAS vendor, version, core type and threads as NumPy reports them."""
    import numpy as np
    info = {"numpy": np.__version__}
    try:
        cfg = np.show_config(mode="dicts")
        blas = cfg.get("Build Dependencies", {}).get("blas", {})
        info["blas"] = blas.get("name", "?")
        info["blas_version"] = blas.get("version", "?")
        info["blas_config"] = blas.get("openblas configuration", "")
    except Exception as e:  # noqa: BLE001 - reporting only
        info["blas"] = f"unknown ({e})"
    try:
        from threadpoolctl import threadpool_info
        for p in threadpool_info():
            if p.get("user_api") == "blas":
                info["blas_threads"] = p.get("num_threads")
                info["blas_core_type"] = p.get("architecture")
    except ImportError:
        pass
    for var in ("OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                "MKL_NUM_THREADS"):
        info[var] = os.environ.get(var)
    from ._blas_env import STATUS
    info["OPENBLAS_THREAD_TIMEOUT"] = STATUS
    from ._contention import status as adaptive_status
    info["adaptive_blas_threads"] = adaptive_status()
    info["cpu_count"] = os.cpu_count()
    from .device import cpu
    info["host_malloc"] = cpu.HOST_MALLOC_POLICY
    return info


def show_config(file=None) -> dict:
    """Print (and return) the array library, BLAS vendor, core type and thread counts."""
    info = blas_info()
    lines = ["Ember configuration:"] + [f"  {k}: {v}" for k, v in info.items()]
    if info.get("OPENBLAS_CORETYPE"):
        lines.append(f"  NOTE: OPENBLAS_CORETYPE={info['OPENBLAS_CORETYPE']} is set by the "
                     f"environment and selects OpenBLAS kernels; Ember does not override it.")
    print("\n".join(lines), file=file)
    return info
