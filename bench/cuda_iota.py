"""The GPT cross-entropy backward kernel with and without its int64 iota (issue 21).

``scatter_select`` writes the loss's one-hot as ``where(t == iota, g, 0)``; before
``fuse_index`` the fused backward kernel loaded ``iota = arange(V)`` (int64, a repeated
row) at every element, 8 bytes beside the 2 of the float16 logits it reads and the 2 of
the gradient it writes. Now the column comes from the loop index (``codegen.ir.Index``:
``(base + j) % V``, a remainder by a constant). This times the two kernels as the compiled
graph launches them (``cuda_launch.row_plan``: the ``NAME_r`` entry, targets and row
statistics per row) on the GPT-2 head's (8192, 50257) float16 logits, beside a float16
copy of the logits (the kernel's floor: 2 bytes read and 2 written an element), and prints
the medians (CUDA events) with the bytes an element moves and the effective GB/s.

Run: ``PYTHONPATH=$PWD python3 bench/cuda_iota.py [--reps 20] [--rows 8192]`` (seconds);
without a GPU it says so and exits 0. The compiled step's own kernel: ``bench/cuda.py
--only gpt`` with the profiler (the ``eq,where,...`` fused kernel of the backward).
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

V = 50257


def kernels(rows: int, vocab: int = V):
    """``(with_iota, with_index)``: d(logits) of a mean cross-entropy as the GPU graph's
    backward kernel computes it (``where(t == col, g, 0) - exp(x - lse) * s``, float16
    out), the column read from an int64 row input or computed (:class:`Index`)."""
    from ember.codegen.ir import InputSpec, Kernel, Load, OutSpec, call, index_of
    f16, f32, i64 = em.float16, em.float32, em.int64
    shape = (rows, vocab)

    def body(t, col, g, x, lse, s):
        p = call("exp", call("cast", x, dtype=f32) - lse)
        return call("cast", call("where", call("eq", t, col), g, 0.0) - p * s, dtype=f16)
    per_row = InputSpec(f32, (1, 0))
    specs = [InputSpec(i64, (1, 0)), per_row, InputSpec(f16, (vocab, 1)), per_row, per_row]
    a = Kernel([specs[0], InputSpec(i64, (0, 1))] + specs[1:], OutSpec(f16, shape),
               body(Load(0), Load(1), Load(2), Load(3), Load(4), Load(5)), "ce_bwd_iota")
    b = Kernel(specs, OutSpec(f16, shape),
               body(Load(0), index_of(shape, 1), Load(1), Load(2), Load(3), Load(4)),
               "ce_bwd_index")
    return a, b


def _ms(fn, reps):
    import cupy
    for _ in range(3):
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


def measure(rows: int, reps: int) -> list:
    """``[(label, ms, bytes an element moves)]`` of the copy and the two kernels; checks
    that the two kernels write the same bits."""
    import cupy
    from ember.codegen.cuda_launch import CudaModule, row_plan
    from ember.graph.passes.fuse_index import read_bytes
    a, b = kernels(rows)
    rng = cupy.random.default_rng(0)
    x = rng.standard_normal((rows, V), dtype=cupy.float32).astype(cupy.float16)
    t = cupy.asarray(np.random.default_rng(0).integers(0, V, (rows, 1)), dtype=cupy.int64)
    lse = cupy.log(cupy.exp(x.astype(cupy.float32)).sum(1, keepdims=True))
    g = cupy.full((rows, 1), -1.0 / rows, cupy.float32)
    s = g.copy()
    iota = cupy.arange(V, dtype=cupy.int64).reshape(1, V)
    out = []
    dst = cupy.empty_like(x)
    out.append(("float16 copy of the logits (floor)", _ms(lambda: cupy.copyto(dst, x),
                                                           reps), 4))
    res = []
    for k, ins in ((a, [t, iota, g, x, lse, s]), (b, [t, g, x, lse, s])):
        mod = CudaModule([k], "block", k.name)
        name, grid, block, args, outs = row_plan(k, ins, (rows, V), cupy)
        assert name == k.name + "_r", name
        fn = mod.function(name)
        out.append((f"CE backward, {k.name}", _ms(lambda: fn(grid, block, args), reps),
                    read_bytes(k) + 2))
        res.append(outs[0])
    if not bool((res[0].view(cupy.uint16) == res[1].view(cupy.uint16)).all()):
        raise AssertionError("the iota and Index kernels wrote different bits")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--rows", type=int, default=8192)
    args = p.parse_args(argv)
    if not em.cuda.is_available() or em.cuda.get_device_name().startswith("Ember fake"):
        print("bench/cuda_iota.py: no CUDA GPU here; nothing to measure")
        return 0
    n = args.rows * V
    print(f"GPU: {em.cuda.get_device_name()}; ({args.rows}, {V}) float16 logits; "
          f"medians of {args.reps} (CUDA events)")
    print(f"{'':<40} {'ms':>8} {'B/elt':>6} {'GB/s':>7}")
    for label, ms, per in measure(args.rows, args.reps):
        print(f"{label:<40} {ms:8.3f} {per:6d} {per * n / (ms * 1e-3) / 1e9:7.0f}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
