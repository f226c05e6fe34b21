"""``ember.backends.cpu``: the CPU's SIMD capability (``torch.backends.cpu``).

Example:
    >>> ember.backends.cpu.get_cpu_capability() in ("DEFAULT", "AVX2", "AVX512")
    True
"""
from __future__ import annotations

import platform

#: AVX-512 subsets PyTorch requires before it dispatches to its AVX512 kernels.
_AVX512 = {"avx512f", "avx512bw", "avx512vl", "avx512dq"}
#: what its AVX2 kernels require.
_AVX2 = {"avx2", "fma"}


def capability_from_flags(flags) -> str:
    """"AVX512", "AVX2" or "DEFAULT" for a set of ``/proc/cpuinfo`` x86 flags."""
    flags = set(flags)
    if _AVX512 <= flags:
        return "AVX512"
    if _AVX2 <= flags:
        return "AVX2"
    return "DEFAULT"


def _cpu_flags(path: str = "/proc/cpuinfo") -> set:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def get_cpu_capability() -> str:
    """The SIMD level of this CPU as PyTorch names it: "AVX512", "AVX2" or "DEFAULT".

    Read from the CPU flags in ``/proc/cpuinfo`` (x86-64 Linux); other machines report
    "DEFAULT".
    """
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return "DEFAULT"
    return capability_from_flags(_cpu_flags())
