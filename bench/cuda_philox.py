"""Compiled dropout on a GPU: the mask drawn on the host and copied vs Philox on the device.

Times a compiled ``F.dropout(x, 0.1)`` on a GPT-2-small activation (8 x 1024 x 768
float32, 6.3M elements) per call, with the default pipeline (``philox``: the mask made
by the Philox4x32-10 kernel, ``ember/codegen/cuda_philox.py``) and without that pass (a
PCG64 draw on the host and a host-to-device copy of the sample, as before), in the
default mode and under ``mode="reduce-overhead"`` (with the pass the program is captured
as a CUDA graph), the Philox kernel alone (CUDA events), and PyTorch's CUDA dropout when
this PyTorch has CUDA (a peer). Medians of ``--reps`` calls, each synchronised.

Run: ``PYTHONPATH=$PWD python3 bench/cuda_philox.py [--reps 20] [--numel 6291456]``;
without a GPU it says so and exits 0.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

# NOTE: as bench/cuda.py: this folder must not shadow the `cuda` package CuPy imports
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(
    os.path.abspath(__file__))]

import numpy as np  # noqa: E402

import ember as em  # noqa: E402


def _wall_ms(fn, reps, sync):
    for _ in range(3):
        fn()
    sync()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        out.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(out)


def _kernel_ms(numel, reps):
    import cupy
    from ember.codegen import cuda_philox
    key = cupy.asarray(np.array([1, 0], np.uint64).view(np.int64))
    out = cupy.empty(numel, cupy.float32)
    cuda_philox.launch(cupy, key, "bernoulli", (numel,), (0.9,), out)
    cupy.cuda.Device().synchronize()
    ts = []
    for _ in range(reps):
        a, b = cupy.cuda.Event(), cupy.cuda.Event()
        a.record()
        cuda_philox.launch(cupy, key, "bernoulli", (numel,), (0.9,), out)
        b.record()
        b.synchronize()
        ts.append(cupy.cuda.get_elapsed_time(a, b))
    return statistics.median(ts)


def measure(numel: int, reps: int) -> list:
    """``[(label, ms)]``: compiled dropout per call in each configuration."""
    from ember.graph.passes import DEFAULT_PASSES
    F = em.nn.functional
    sync = em.cuda.synchronize
    x = em.randn(numel, device="cuda")
    rows = []
    without = [p for p in DEFAULT_PASSES if p != "philox"]
    for label, passes, mode in (("host draw + copy (no philox pass)", without, None),
                                ("device Philox (default)", None, None),
                                ("host draw + copy, reduce-overhead", without,
                                 "reduce-overhead"),
                                ("device Philox, reduce-overhead", None, "reduce-overhead")):
        fn = em.compile(lambda x: F.dropout(x, 0.1), passes=passes, mode=mode)
        rows.append((f"ember compiled: {label}", _wall_ms(lambda: fn(x), reps, sync)))
    rows.append(("Philox bernoulli kernel alone (CUDA events)", _kernel_ms(numel, reps)))
    try:
        import torch
        if torch.cuda.is_available():
            tx = torch.randn(numel, device="cuda")
            rows.append(("PyTorch eager F.dropout (peer)", _wall_ms(
                lambda: torch.nn.functional.dropout(tx, 0.1), reps, torch.cuda.synchronize)))
    except ImportError:
        pass
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--numel", type=int, default=8 * 1024 * 768)
    args = p.parse_args(argv)
    if not em.cuda.is_available() or em.cuda.get_device_name().startswith("Ember fake"):
        print("bench/cuda_philox.py: no CUDA GPU here; nothing to measure")
        return 0
    print(f"GPU: {em.cuda.get_device_name()}; dropout(p=0.1) of {args.numel} float32; "
          f"medians of {args.reps} calls (wall, synchronised)")
    for label, ms in measure(args.numel, args.reps):
        print(f"{label:<56} {ms:8.3f} ms", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
