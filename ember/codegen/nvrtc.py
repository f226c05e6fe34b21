"""CUDA C text to PTX with NVRTC (no GPU, no CUDA toolkit: the pip wheels suffice).

NVRTC comes from the ``nvidia-cuda-nvrtc-cu12`` wheel, its Python bindings from
``cuda-bindings`` (``cuda.bindings.nvrtc``, or the older ``cuda.nvrtc``) and the
``cuda_fp16.h``/``cuda_bf16.h`` headers from ``nvidia-cuda-runtime-cu12``; together the
``nvrtc`` extra (``pip install ember[nvrtc]``). NVRTC has no libc headers: the generated
text declares its own fixed-width integer types (``render_cuda``). CI compiles every kind
of generated CUDA kernel through :func:`compile_ptx`, so no kernel text ships that never
went through the compiler; the CUDA backend loads the same text with ``cupy.RawModule``.

Example:
    >>> ptx = compile_ptx('extern "C" __global__ void k(float *x) { x[0] = 1.f; }', "k")
    >>> ".entry k" in ptx
    True
"""
from __future__ import annotations

import functools
import os

__all__ = ["NVRTCError", "NVRTCUnavailable", "available", "compile_ptx", "compile_sass",
           "include_dirs", "version"]


class NVRTCUnavailable(RuntimeError):
    """NVRTC or its bindings are not installed (``pip install ember[nvrtc]``)."""


class NVRTCError(RuntimeError):
    """NVRTC rejected a source; the message holds the kernel's name and NVRTC's log."""


@functools.lru_cache(maxsize=1)
def _bindings():
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        try:
            from cuda import nvrtc   # cuda-python < 12.6
        except ImportError:
            raise NVRTCUnavailable(
                "ember.codegen.nvrtc: the NVRTC bindings are not installed; install the "
                "'nvrtc' extra: pip install 'ember[nvrtc]' (nvidia-cuda-nvrtc-cu12, "
                "cuda-bindings, nvidia-cuda-runtime-cu12)") from None
    try:
        err, major, minor = nvrtc.nvrtcVersion()
    except Exception as e:   # NOTE: the bindings load libnvrtc lazily; a missing .so lands here
        raise NVRTCUnavailable(f"ember.codegen.nvrtc: libnvrtc could not be loaded ({e}); "
                               f"install nvidia-cuda-nvrtc-cu12") from None
    if int(err) != 0:
        raise NVRTCUnavailable(f"ember.codegen.nvrtc: nvrtcVersion failed ({err})")
    return nvrtc, (major, minor)


def available() -> bool:
    """Whether NVRTC and its bindings can be loaded here."""
    try:
        _bindings()
    except NVRTCUnavailable:
        return False
    return True


def version() -> tuple:
    """NVRTC's ``(major, minor)`` version."""
    return _bindings()[1]


@functools.lru_cache(maxsize=1)
def include_dirs() -> tuple:
    """Folders holding ``cuda_fp16.h``/``cuda_bf16.h``: ``$EMBER_CUDA_INCLUDE``, the
    ``nvidia-cuda-runtime-cu12`` wheel's ``include``, ``$CUDA_HOME/include``."""
    cands = [os.environ.get("EMBER_CUDA_INCLUDE", "")]
    try:
        import nvidia.cuda_runtime as rt   # namespace package of the wheel
        cands += [os.path.join(p, "include") for p in rt.__path__]
    except ImportError:
        pass
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            cands.append(os.path.join(os.environ[var], "include"))
    cands.append("/usr/local/cuda/include")
    return tuple(dict.fromkeys(
        c for c in cands if c and os.path.isfile(os.path.join(c, "cuda_fp16.h"))))


def _check(nvrtc, res, what: str, prog=None, name: str = "") -> None:
    err = res[0] if isinstance(res, tuple) else res
    if int(err) == 0:
        return
    log = _log(nvrtc, prog) if prog is not None else ""
    raise NVRTCError(f"NVRTC {what} failed for kernel {name!r}: {err}\n{log}")


def _log(nvrtc, prog) -> str:
    err, n = nvrtc.nvrtcGetProgramLogSize(prog)
    # NOTE: never fewer than 2 bytes: `b" " * 1` is CPython's cached one-byte object, and
    # NVRTC writing its NUL into it turned every b" " of the process into b"\x00"
    buf = b" " * max(n, 2)
    nvrtc.nvrtcGetProgramLog(prog, buf)
    return buf.rstrip(b"\x00 ").decode(errors="replace")


def compile_ptx(source: str, name: str, arch: str = "compute_90",
                options: tuple = ()) -> str:
    """Compile CUDA C ``source`` to PTX with NVRTC.

    Args:
        source: the CUDA C text (``extern "C"`` kernels).
        name: a name for the program (used in error messages and NVRTC's log).
        arch: the virtual architecture (``compute_90`` = H100; PTX JIT-compiles forward).
        options: extra NVRTC options (strings).

    Returns:
        The PTX text.

    Raises:
        NVRTCUnavailable: NVRTC or its bindings are not installed.
        NVRTCError: the source does not compile; the message holds NVRTC's log.
    """
    data, _ = _compile(source, name, f"--gpu-architecture={arch}", options, "PTX")
    return data.rstrip(b"\x00").decode()


def compile_sass(source: str, name: str, arch: str = "sm_90", options: tuple = ()) -> tuple:
    """Compile ``source`` down to machine code (a cubin) for real GPU ``arch``, through
    ptxas, as the driver would JIT its PTX: register allocation, spills and shared memory
    limits are checked here, no GPU needed.

    Returns:
        ``(cubin bytes, log)``; the log has ptxas's resource usage per kernel
        (``Used N registers, ... bytes smem``, spill stores/loads).

    Raises:
        NVRTCUnavailable, NVRTCError: as :func:`compile_ptx` (ptxas errors included).
    """
    return _compile(source, name, f"-arch={arch}", ("--ptxas-options=--verbose",) +
                    tuple(options), "CUBIN")


def _compile(source: str, name: str, arch_opt: str, options: tuple, what: str) -> tuple:
    """``(bytes of the PTX or CUBIN, NVRTC's log)``."""
    nvrtc, _ = _bindings()
    res = nvrtc.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), 0, [], [])
    _check(nvrtc, res, "program creation", name=name)
    prog = res[1]
    try:
        opts = [arch_opt, "--std=c++17", "-default-device",
                "--diag-suppress=177"]   # NOTE: the prelude's unused helpers
        opts += [f"--include-path={d}" for d in include_dirs()] + list(options)
        enc = [o.encode() for o in opts]
        _check(nvrtc, nvrtc.nvrtcCompileProgram(prog, len(enc), enc), "compilation",
               prog, name)
        size_fn = getattr(nvrtc, f"nvrtcGet{what}Size")
        err, size = size_fn(prog)
        _check(nvrtc, err, f"nvrtcGet{what}Size", prog, name)
        buf = b" " * max(size, 2)     # NOTE: a fresh object, never a cached one (see _log)
        _check(nvrtc, getattr(nvrtc, f"nvrtcGet{what}")(prog, buf), f"nvrtcGet{what}", prog,
               name)
        return buf, _log(nvrtc, prog)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
