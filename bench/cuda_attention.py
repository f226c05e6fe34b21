"""Flash-attention forward on a CUDA GPU: Ember's tensor-core kernel, its scalar kernel and
``torch.nn.functional.scaled_dot_product_attention``, side by side (issue 21).

Times the forward kernel alone (CuPy arrays straight into ``cuda_attention.forward``:
no dispatch, no autograd) on the GPT step's shape (batch 8, 12 heads, T 1024, head dim 64),
causal, float16, and a few neighbours; medians of CUDA-event timings over alternating
rounds (every column in turn), after warm-ups (the first call compiles the kernel).
Columns: ``mma`` Ember's default; ``mma-old`` the tensor-core kernel with every key tile
through the masked code (``cuda_attention_mma_c.FULL_TILES`` off: the kernel before the
full-tile path); ``mma-r32`` 128-row blocks, 32 rows a warp (``ROWS = 32``; head dims up
to 64); ``mma-<pipeline>`` each K/V pipeline (not with ``--quick``); ``scalar`` the FMA
kernel (not with ``--quick``); ``torch``. TFLOP/s counts ``4 B H Tq Tk D`` flops, halved
when causal (what is computed), the same count for every column. Also prints the largest
difference of Ember's output from torch's (float32 view) per row, over Ember's columns,
and which variants' outputs have the default's very bits (expected: all of them).
Without CuPy and a GPU it says so and exits 0.

Run: ``python bench/cuda_attention.py`` (``--reps N``, ``--rounds N``, ``--quick``: the
GPT shape, 3 rounds, the columns mma, mma-old, mma-r32 and torch).
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys

# NOTE: run as a script, this folder leads sys.path and bench/cuda.py would shadow the
# `cuda` package (cuda-bindings) that CuPy imports
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(
    os.path.abspath(__file__))]

#: (batch, heads, Tq, Tk, head dim, causal, dtype) rows; the first is the GPT step's.
SHAPES = [(8, 12, 1024, 1024, 64, True, "float16"),
          (8, 12, 1024, 1024, 64, False, "float16"),
          (8, 12, 1024, 1024, 64, True, "bfloat16"),
          (4, 16, 2048, 2048, 64, True, "float16"),
          (8, 12, 1024, 1024, 128, True, "float16"),
          (8, 12, 1024, 1024, 32, True, "float16")]


def _mean_ms(fn, reps: int, cupy) -> float:
    a, b = cupy.cuda.Event(), cupy.cuda.Event()
    a.record()
    for _ in range(reps):
        fn()
    b.record()
    b.synchronize()
    return cupy.cuda.get_elapsed_time(a, b) / reps


def _variants(q, k, v, scale, causal, cupy, quick: bool) -> dict:
    """``{label: run}``: the tensor-core kernel's variants (module docstring) that fit these
    head dims, each launched from its own module."""
    from ember.codegen import cuda_attention as ca, cuda_attention_mma_c as mc
    from ember.codegen.cuda_cache import load_module
    from ember.codegen.cuda_mma import MMA
    d, dv = q.shape[-1], v.shape[-1]
    cfgs = {"mma-old": (None, mc.ROWS, False)}          # (pipeline, rows, full tiles)
    if max(d, dv) <= 64:
        cfgs["mma-r32"] = (None, 32, True)
    if not quick:
        cfgs.update({f"mma-{pipe}": (pipe, mc.ROWS, True) for pipe in mc.PIPELINES
                     if pipe != "cp.async" or max(d, dv) <= 64})
    fns = {}
    for label, (pipe, rows, full) in cfgs.items():
        mod = load_module(mc.render(ca.HEAD, MMA, q.dtype.name, d, dv, pipe, rows, full),
                          f"ember_flash_fwd_{label.replace('.', '_').replace('-', '_')}")

        def run(mod=mod, rows=rows, full=full):
            ca.MMA_FORWARD = True
            old = mc.ROWS, mc.FULL_TILES
            mc.ROWS, mc.FULL_TILES = rows, full         # NOTE: the grid and entry name
            try:
                name, grid, block, args, o, _ = ca.forward_plan(q, k, v, scale, causal, cupy)
            finally:
                mc.ROWS, mc.FULL_TILES = old
            mod.get_function(name)(grid, block, args)
            return o
        fns[label] = run
    return fns


def _row(shape, reps, rounds, cupy, torch, quick=False):
    from ember.codegen import cuda_attention as ca
    b, h, tq, tk, d, causal, dtype = shape
    rng = cupy.random.default_rng(0)
    cdt = {"float16": cupy.float16}.get(dtype)
    if cdt is None:                 # NOTE: CuPy has no bfloat16: torch makes the arrays
        if torch is None:
            return None
        mk = [torch.randn(b, h, t, d, device="cuda", dtype=torch.bfloat16)
              for t in (tq, tk, tk)]
        try:
            arrs = [cupy.from_dlpack(x) for x in mk]
        except Exception:       # NOTE: this CuPy has no bfloat16
            return None
        if arrs[0].dtype.name != "bfloat16":
            return None
    else:
        arrs = [rng.standard_normal((b, h, t, d), dtype=cupy.float32).astype(cdt)
                for t in (tq, tk, tk)]
        mk = [torch.from_dlpack(x) for x in arrs] if torch is not None else None
    q, k, v = arrs
    scale = 1 / math.sqrt(d)
    fns = {}
    for label, flag in (("mma", True), ("scalar", False))[:1 if quick else 2]:
        def run(flag=flag):
            ca.MMA_FORWARD = flag
            return ca.forward(cupy, q, k, v, scale, causal)
        fns[label] = run
    fns.update(_variants(q, k, v, scale, causal, cupy, quick))
    if torch is not None:
        F = torch.nn.functional
        fns["torch"] = lambda: F.scaled_dot_product_attention(*mk, is_causal=causal)
    outs = {name: fn() for name, fn in fns.items()}           # warm-up: compiles, loads
    cupy.cuda.Device().synchronize()
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(_mean_ms(fn, reps, cupy))
    ca.MMA_FORWARD = True
    flops = 4 * b * h * tq * tk * d / (2 if causal else 1)
    res = {name: statistics.median(t) for name, t in times.items()}
    diff = {}
    if "torch" in outs:
        ref = cupy.from_dlpack(outs["torch"]).astype(cupy.float32)
        for name in (n for n in outs if n != "torch"):
            diff[name] = float(cupy.abs(outs[name].astype(cupy.float32) - ref).max())
    # NOTE: the variants run the default's operations per row: the same bits expected
    bits = outs["mma"].view(cupy.uint16)
    same = [n for n in outs if n.startswith("mma-") and
            bool((outs[n].view(cupy.uint16) == bits).all())]
    return res, flops, diff, same


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=20, help="kernel calls per timing")
    p.add_argument("--rounds", type=int, default=5, help="alternating rounds (median)")
    p.add_argument("--quick", action="store_true", help="the GPT shape only, 3 rounds")
    args = p.parse_args(argv)
    try:
        import cupy
        cupy.cuda.runtime.getDeviceCount()
    except Exception as e:      # NOTE: no CuPy, no driver or no device: say so, exit 0
        print(f"no CUDA GPU/CuPy: {e}")
        return 0
    try:
        import torch
        torch = torch if torch.cuda.is_available() else None
    except ImportError:
        torch = None
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"{name}; forward only, ms (TFLOP/s); medians of {args.rounds} alternating rounds "
          f"of {args.reps} calls")
    cols = ("mma", "mma-old", "mma-r32") + (
        () if args.quick else ("mma-none", "mma-regs", "mma-cp.async", "scalar")) + ("torch",)
    print("mma: Ember's default (cuda_attention.forward); mma-old: every key tile masked (the "
          "kernel before the full-tile path); mma-r32: 128-row blocks; mma-<pipeline>: that "
          "K/V pipeline; scalar: the FMA kernel")
    print(f"{'B H Tq Tk D causal dtype':34} " + " ".join(f"{c:>16}" for c in cols) +
          "  mma/torch  max|ember-torch|")
    shapes = SHAPES[:1] if args.quick else SHAPES
    for shape in shapes:
        r = _row(shape, args.reps, 3 if args.quick else args.rounds, cupy, torch, args.quick)
        label = " ".join(str(x) for x in shape)
        if r is None:
            print(f"{label:34} (no bfloat16 arrays here)")
            continue
        res, flops, diff, same = r
        cells = [f"{res[n]:7.3f} ({flops / res[n] / 1e9:5.1f})" if n in res else "-"
                 for n in cols]
        ratio = f"{res['mma'] / res['torch']:.2f}x" if "torch" in res else "-"
        print(f"{label:34} " + " ".join(f"{c:>16}" for c in cells) +
              f"  {ratio:>9}  {max(diff.values(), default=float('nan')):.2e}")
        print(f"{'':34} O bitwise equal to mma's: {' '.join(same) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
