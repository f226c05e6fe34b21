"""The C toolchain: found at first use, flags chosen for the host CPU.

Lookup order: ``$CC`` (may carry arguments, e.g. ``CC="ccache gcc"``), then ``gcc``,
``clang``, ``cc`` on ``PATH``. Flags: ``-O3 -march=native`` with OpenMP's SIMD pragmas (``-fopenmp-simd``), and only
math flags that keep IEEE semantics (NaN/Inf/signed zeros like NumPy):
``-fno-math-errno`` (libm need not set ``errno``, so ``sqrt`` becomes one instruction) and
``-fno-trapping-math`` (no FP traps: lets conditionals vectorise). Never
``-ffast-math``/``-ffinite-math-only``. ``-fwrapv`` makes integer overflow wrap like NumPy.

The CPU that ``-march=native`` resolves to is part of :attr:`Compiler.identity`, so a
cache shared between machines never hands one CPU another's code.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
from dataclasses import dataclass

BASE_FLAGS = ("-O3", "-march=native", "-std=gnu11", "-fPIC", "-shared", "-fno-math-errno",
              "-fno-trapping-math", "-fwrapv", "-fno-strict-aliasing")
# NOTE: SIMD pragmas (and libmvec's `declare simd` variants) only: threads come from
# Ember's own pool (`pool.py`), never from an OpenMP runtime another library may own.
OPENMP_FLAGS = ("-fopenmp-simd",)
LIBS = ("-lm", "-lpthread")

#: libm functions libmvec may vectorise (float names end in ``f``), with their arity.
_MVEC_CANDIDATES = {**{n: 1 for n in (
    "acos", "asin", "atan", "cos", "cosh", "erf", "erfc", "exp", "exp2", "expm1", "log",
    "log10", "log1p", "log2", "sin", "sinh", "tan", "tanh")}, "atan2": 2, "hypot": 2,
    "pow": 2}


class CompileError(RuntimeError):
    """The C compiler rejected a generated kernel (the message holds its stderr)."""


@dataclass(frozen=True)
class Compiler:
    """A usable C compiler: its command, version banner, flags and target CPU."""
    command: tuple
    version: str
    flags: tuple
    target: str
    mvec: tuple = ()          # (name, arity) of libm functions with libmvec SIMD variants

    @property
    def identity(self) -> str:
        """What a cache key must cover besides the source."""
        return "\0".join([" ".join(self.command), self.version, " ".join(self.flags),
                          self.target])

    @property
    def openmp(self) -> bool:
        return "-fopenmp-simd" in self.flags


def _candidates() -> list:
    out = []
    cc = os.environ.get("CC", "").strip()
    if cc:
        out.append(tuple(shlex.split(cc)))
    for name in ("gcc", "clang", "cc"):
        p = shutil.which(name)
        if p:
            out.append((p,))
    return out


def _run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, **kw)


def _version(cmd) -> str | None:
    exe = shutil.which(cmd[-1]) if len(cmd) else None
    if exe is None and not os.path.exists(cmd[-1]):
        return None
    try:
        r = _run(list(cmd) + ["--version"])
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else None


def _target(cmd) -> str:
    """What ``-march=native`` means here (GCC reports it; otherwise the CPU's flags)."""
    try:
        r = _run(list(cmd) + ["-march=native", "-Q", "--help=target"])
        for line in r.stdout.splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0] in ("-march=", "-mtune="):
                return f"{platform.machine()}:{parts[1]}"
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = next((ln for ln in f if ln.startswith("flags")), "")
    except OSError:
        flags = platform.processor()
    return f"{platform.machine()}:{hashlib.sha256(flags.encode()).hexdigest()[:16]}"


def _mvec(version: str) -> tuple:
    """libm functions whose SIMD variants libmvec exports for every x86 ISA level."""
    if platform.machine() not in ("x86_64", "AMD64") or "clang" in version.lower():
        return ()
    path = ctypes.util.find_library("mvec")
    if not path:
        return ()
    try:
        lib = ctypes.CDLL(path)
    except OSError:
        return ()
    found = []
    for base, arity in _MVEC_CANDIDATES.items():
        v = "v" * arity
        for name, widths in ((base + "f", (4, 8, 8, 16)), (base, (2, 4, 4, 8))):
            syms = [f"_ZGV{isa}N{w}{v}_{name}" for isa, w in zip("bcde", widths)]
            if all(hasattr(lib, s) for s in syms):
                found.append((name, arity))
    return tuple(sorted(found))


def _works(cmd, flags) -> bool:
    """Whether ``cmd flags`` builds a shared object (probes OpenMP support)."""
    import tempfile
    with tempfile.TemporaryDirectory(prefix="ember-cc-") as d:
        src = os.path.join(d, "probe.c")
        with open(src, "w", encoding="utf-8") as f:
            f.write("#include <math.h>\n#ifdef _OPENMP\n#include <omp.h>\n#endif\n"
                    "double ember_probe(double x) { return exp(x); }\n")
        try:
            r = _run(list(cmd) + list(flags) + [src, "-o", os.path.join(d, "p.so")]
                     + list(LIBS))
        except (OSError, subprocess.SubprocessError):
            return False
        return r.returncode == 0


def _works_cached(cmd, flags, version: str) -> bool:
    """:func:`_works`, remembered in the kernel cache once it succeeded for this command,
    version banner and flags (a new process skips the probe build, ~50 ms; a different
    compiler or flags probe again). Only success is recorded, in the checked cache folder:
    a record can't make Ember use flags of anyone's choosing, only skip a probe."""
    from . import cache
    key = hashlib.sha256("\0".join([" ".join(cmd), version, " ".join(flags), " ".join(LIBS),
                                     "probe"]).encode()).hexdigest()[:32]
    if cache.probe_known(key):
        return True
    ok = _works(cmd, flags)
    if ok:
        cache.probe_record(key)
    return ok


@functools.lru_cache(maxsize=None)
def find_compiler() -> Compiler | None:
    """The first working C compiler (``$CC``, gcc, clang, cc), or None.

    Example:
        >>> cc = find_compiler(); cc.command if cc else "no compiler"
    """
    for cmd in _candidates():
        version = _version(cmd)
        if version is None:
            continue
        flags = BASE_FLAGS + OPENMP_FLAGS
        if not _works_cached(cmd, flags, version):
            flags = BASE_FLAGS
            if not _works_cached(cmd, flags, version):
                continue
        return Compiler(cmd, version.splitlines()[0] + " | " + hashlib.sha256(
            version.encode()).hexdigest()[:12], flags, _target(cmd), _mvec(version))
    return None


def available() -> bool:
    """True when generated kernels can be compiled here."""
    return find_compiler() is not None


def compile_shared(cc: Compiler, source_path: str, out_path: str) -> None:
    """Compile ``source_path`` into the shared object ``out_path`` (CompileError on failure)."""
    cmd = list(cc.command) + list(cc.flags) + [source_path, "-o", out_path] + list(LIBS)
    try:
        r = _run(cmd)
    except (OSError, subprocess.SubprocessError) as e:
        raise CompileError(f"codegen: running {cmd[0]} failed: {e}") from e
    if r.returncode != 0:
        raise CompileError(f"codegen: {' '.join(cmd)} failed (exit {r.returncode}):\n"
                           f"{r.stderr[-4000:]}")
