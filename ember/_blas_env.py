"""How long OpenBLAS's idle worker threads spin: set before NumPy loads OpenBLAS.

After each threaded BLAS call OpenBLAS keeps its workers spinning for
``2**OPENBLAS_THREAD_TIMEOUT`` cycles (default 28: about 0.1 s) before they sleep. In a
training step a GEMM is followed within microseconds by Ember's own kernels (fused
elementwise, attention, im2col) on Ember's worker pool — and on 2 cores the spinning BLAS
workers take those cores away from it: measured on the W3 GPT step, attention backward
kernels ran ~3x slower inside the step than alone. With a 2**16-cycle spin (~20 us: enough
to catch back-to-back GEMMs) the compiled steps got 6-18 % faster (W2 0.93x -> 0.77x, W3
0.95x -> 0.86x PyTorch eager; `bench/compile.py`, 2026-11-24, bench/RESULTS.md).

OpenBLAS reads the variable once, when it is loaded, and has no call to change it later —
so Ember can only set it when it is imported before NumPy. A value already in the
environment is kept (``OPENBLAS_THREAD_TIMEOUT=28`` restores OpenBLAS's default).
``ember.show_config()`` reports which case applies.
"""
from __future__ import annotations

import os
import sys

#: log2 of the cycles OpenBLAS's idle workers spin (OpenBLAS clamps it to [4, 30]).
SPIN_LOG2_CYCLES = 16

if "OPENBLAS_THREAD_TIMEOUT" in os.environ:
    STATUS = f"{os.environ['OPENBLAS_THREAD_TIMEOUT']} (from the environment)"
elif "numpy" in sys.modules:
    STATUS = ("OpenBLAS's default (28): NumPy was imported before Ember; set "
              f"OPENBLAS_THREAD_TIMEOUT={SPIN_LOG2_CYCLES} in the environment (or import "
              "ember first) so BLAS threads leave the cores to Ember's kernels")
else:
    os.environ["OPENBLAS_THREAD_TIMEOUT"] = str(SPIN_LOG2_CYCLES)
    STATUS = f"{SPIN_LOG2_CYCLES} (set by Ember before NumPy loaded)"
