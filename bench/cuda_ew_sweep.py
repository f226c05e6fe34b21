"""Bytes in flight of Ember's contiguous elementwise CUDA kernels: a short sweep (issue 21).

``render_cuda_ew``'s contiguous entry moves one vector of ``ILP`` (4) elements per thread
and iteration, on a grid of ``n / (256 * 4)`` blocks (``cuda_launch.kernel_plan``); on an
H200 that reaches 2.5-2.8 TB/s where PyTorch's clone reaches 3.5 and cudaMemcpy 3.9-4.0.
This sweeps the two knobs — ``UNROLL`` vectors per thread (1, 2, 4: their loads all issued
before any compute) and the grid (the launcher's size rule, or k x the SM count with the
grid-stride loop covering the rest) — on ``x * 2`` (float32 and float16) and ``x + y``
(float32) of 2^26 elements, and prints GB/s beside the copy ceilings, so the integrator can
pick ``render_cuda_ew.UNROLL`` and the grid rule once (the defaults stay until measured).

Run: ``PYTHONPATH=$PWD python3 bench/cuda_ew_sweep.py [--reps 10]`` (~1 minute); without a
GPU it says so and exits 0.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

# NOTE: as bench/cuda.py: this folder must not shadow the `cuda` package CuPy imports
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(
    os.path.abspath(__file__))]

import numpy as np  # noqa: E402

import ember as em  # noqa: E402

N = 1 << 26
UNROLLS = (1, 2, 4)
GRIDS_PER_SM = (None, 1, 2, 4, 8, 16, 32)      # None: the launcher's n / (256 * 4) rule


def _ms(fn, reps):
    import cupy
    for _ in range(2):
        fn()
    cupy.cuda.Device().synchronize()
    out = []
    for _ in range(reps):
        a, b = cupy.cuda.Event(), cupy.cuda.Event()
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(cupy.cuda.get_elapsed_time(a, b))
    return statistics.median(out)


def _kernels(unroll):
    """``x * s`` (float32, float16) and ``x + y`` rendered with ``UNROLL = unroll``."""
    from ember.codegen import render_cuda_ew
    from ember.codegen.cuda_launch import CudaModule
    from ember.codegen.ir import InputSpec, Kernel, Load, OutSpec
    f32, f16 = em.float32, em.float16
    ks = [Kernel([InputSpec(d, (1,))] * 2, OutSpec(d, (1,)), Load(0) * Load(1),
                 name=f"sweep_{tag}_u{unroll}")
          for d, tag in ((f32, "mul_f32"), (f16, "mul_f16"), (f32, "add_f32"))]
    prev, render_cuda_ew.UNROLL = render_cuda_ew.UNROLL, unroll
    try:
        mod = CudaModule(ks, "block", f"sweep_u{unroll}")
    finally:
        render_cuda_ew.UNROLL = prev
    return mod, ks


def _cases(cupy):
    x32 = cupy.random.standard_normal(N, dtype=cupy.float32)
    y32 = cupy.random.standard_normal(N, dtype=cupy.float32)
    x16 = x32.astype(cupy.float16)
    two32, two16 = cupy.asarray(2, cupy.float32), cupy.asarray(2, cupy.float16)
    # (kernel index, inputs, scalar-operand flags, bytes moved)
    return [(0, (x32, two32), 2, 8 * N), (1, (x16, two16), 2, 4 * N), (2, (x32, y32), 0, 12 * N)]


def sweep(reps):
    import cupy
    from ember.codegen.render_cuda_ew import ALIGNED, ILP
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    cases = _cases(cupy)
    rows = []
    for unroll in UNROLLS:
        mod, ks = _kernels(unroll)
        for per_sm in GRIDS_PER_SM:
            res = []
            for idx, ins, flags, nbytes in cases:
                out = cupy.empty(N, ins[0].dtype)
                fn = mod.function(ks[idx].name + "_c")
                blocks = -(-N // (256 * ILP * unroll))
                grid = (min(blocks, 1 << 20) if per_sm is None else min(blocks, per_sm * sms),)
                args = ins + (out, np.int32(flags | ALIGNED), np.int64(N))
                res.append(nbytes / (_ms(lambda: fn(grid, (256,), args), reps) * 1e-3) / 1e9)
            rows.append((unroll, "n/1024" if per_sm is None else f"{per_sm}xSM", res))
    return rows


def ceilings(reps):
    import cupy
    src, dst = cupy.empty(N, cupy.float32), cupy.empty(N, cupy.float32)

    def memcpy():
        cupy.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, 4 * N,
                                      cupy.cuda.runtime.memcpyDeviceToDevice,
                                      cupy.cuda.get_current_stream().ptr)
    out = [("cudaMemcpy D2D", 8 * N / (_ms(memcpy, reps) * 1e-3) / 1e9)]
    try:
        import torch
        if torch.cuda.is_available():
            t = torch.randn(N, device="cuda")
            torch.cuda.synchronize()
            out.append(("torch clone (torch events)", 8 * N / (_torch_ms(torch, t.clone, reps)
                                                              * 1e-3) / 1e9))
            out.append(("torch x*2", 8 * N / (_torch_ms(torch, lambda: t * 2, reps)
                                              * 1e-3) / 1e9))
    except ImportError:
        pass
    return out


def _torch_ms(torch, fn, reps):
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b))
    return statistics.median(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=10)
    args = p.parse_args(argv)
    if not em.cuda.is_available() or em.cuda.get_device_name().startswith("Ember fake"):
        print("bench/cuda_ew_sweep.py: no CUDA GPU here; nothing to measure")
        return 0
    print(f"GPU: {em.cuda.get_device_name()}; n = 2^26; GB/s (medians of {args.reps})")
    for name, gbs in ceilings(args.reps):
        print(f"{name:<28} {gbs:8.0f}")
    print(f"{'unroll':>6} {'grid':>8} {'x*2 f32':>9} {'x*2 f16':>9} {'x+y f32':>9}")
    for unroll, grid, res in sweep(args.reps):
        print(f"{unroll:>6} {grid:>8} " + " ".join(f"{g:9.0f}" for g in res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
