"""CUDA C text to PTX with NVRTC (no GPU, no CUDA toolkit: the pip wheels suffice).

NVRTC comes from the ``nvidia-cuda-nvrtc-cu12`` wheel, its Python bindings from
``cuda-bindings`` (``cuda.bindings.nvrtc``, or the older ``cuda.nvrtc``) and the
``cuda_fp16.h``/``cuda_bf16.h`` headers from ``nvidia-cuda-runtime-cu12``; together the
``nvrtc`` extra (``pip install ember[nvrtc]``). Without ``cuda-bindings``, CuPy's own NVRTC
wrapper (``cupy_backends.cuda.libs.nvrtc``) serves, so a GPU machine with CuPy alone takes
the same path (:func:`binding` names the one in use). NVRTC has no libc headers: the
generated text declares its own fixed-width integer types (``render_cuda``). CI compiles
every kind of generated CUDA kernel through :func:`compile_ptx`, so no kernel text ships
that never went through the compiler; the CUDA backend loads the same text as a cubin
(:func:`compile_cubin`: no driver JIT) or PTX (:mod:`.cuda_cache`).

Both bindings release the GIL inside ``nvrtcCompileProgram``, and NVRTC compiles
independent programs concurrently, so :mod:`.cuda_cache` compiles a graph's kernels on a
thread pool.

Example:
    >>> ptx = compile_ptx('extern "C" __global__ void k(float *x) { x[0] = 1.f; }', "k")
    >>> ".entry k" in ptx
    True
"""
from __future__ import annotations

import functools
import os

__all__ = ["NVRTCError", "NVRTCUnavailable", "available", "binding", "compile_cubin",
           "compile_ptx", "compile_sass", "include_dirs", "version"]


class NVRTCUnavailable(RuntimeError):
    """NVRTC or its bindings are not installed (``pip install ember[nvrtc]``)."""


class NVRTCError(RuntimeError):
    """NVRTC rejected a source; the message holds the kernel's name and NVRTC's log."""


@functools.lru_cache(maxsize=1)
def _bindings():
    """``(module with cuda-bindings' nvrtc API, (major, minor))``."""
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        try:
            from cuda import nvrtc   # cuda-python < 12.6
        except ImportError:
            nvrtc = _cupy_nvrtc()
            if nvrtc is None:
                raise NVRTCUnavailable(
                    "ember.codegen.nvrtc: the NVRTC bindings are not installed; install "
                    "the 'nvrtc' extra: pip install 'ember[nvrtc]' (nvidia-cuda-nvrtc-cu12, "
                    "cuda-bindings, nvidia-cuda-runtime-cu12), or CuPy") from None
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


def binding() -> str:
    """Which Python binding of NVRTC is in use (``cuda.bindings.nvrtc``, ``cuda.nvrtc`` or
    CuPy's ``cupy_backends.cuda.libs.nvrtc``)."""
    return _bindings()[0].__name__


def _cupy_nvrtc():
    """CuPy's NVRTC wrapper behind cuda-bindings' call shapes (:mod:`._nvrtc_cupy`), or
    None without CuPy."""
    try:
        from cupy_backends.cuda.libs import nvrtc as cnv
    except ImportError:
        return None
    from ._nvrtc_cupy import CupyNVRTC
    return CupyNVRTC(cnv)


@functools.lru_cache(maxsize=1)
def include_dirs() -> tuple:
    """Folders holding ``cuda_fp16.h``/``cuda_bf16.h``: ``$EMBER_CUDA_INCLUDE``, the
    ``nvidia-cuda-runtime-cu12`` wheel's ``include`` (CUDA 13's ``nvidia/cu13/include``),
    ``$CUDA_HOME/include``."""
    cands = [os.environ.get("EMBER_CUDA_INCLUDE", "")]
    try:
        import nvidia.cuda_runtime as rt   # namespace package of the wheel
        cands += [os.path.join(p, "include") for p in rt.__path__]
    except ImportError:
        pass
    try:                                    # NOTE: CUDA 13's wheels: nvidia/cu13/include
        import nvidia
        cands += [os.path.join(p, sub, "include") for p in nvidia.__path__
                  for sub in ("cu13", "cu12", "cuda_runtime")]
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
    if hasattr(nvrtc, "log"):               # CuPy's wrapper (_nvrtc_cupy): a value
        return nvrtc.log(prog)
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


def compile_cubin(source: str, name: str, arch: str = "sm_90", options: tuple = ()) -> bytes:
    """Compile ``source`` to machine code (a cubin) for real GPU ``arch``: what
    ``cuModuleLoadData`` loads with no JIT step (a PTX module is compiled by the driver,
    one thread, every kernel, at load).

    Raises:
        NVRTCUnavailable, NVRTCError: as :func:`compile_ptx` (ptxas errors included).
    """
    return bytes(_compile(source, name, f"-arch={arch}", tuple(options), "CUBIN")[0])


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
        if hasattr(nvrtc, "output"):        # CuPy's wrapper (_nvrtc_cupy): values
            return nvrtc.output(prog, what), _log(nvrtc, prog)
        size_fn = getattr(nvrtc, f"nvrtcGet{what}Size")
        err, size = size_fn(prog)
        _check(nvrtc, err, f"nvrtcGet{what}Size", prog, name)
        buf = b" " * max(size, 2)     # NOTE: a fresh object, never a cached one (see _log)
        _check(nvrtc, getattr(nvrtc, f"nvrtcGet{what}")(prog, buf), f"nvrtcGet{what}", prog,
               name)
        return buf, _log(nvrtc, prog)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
