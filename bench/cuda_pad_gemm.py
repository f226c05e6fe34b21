"""The LM head's padded-GEMM copies per compiled GPT step, with and without ``pad_gemm``.

An odd vocabulary (GPT-2's 50257) makes the LM head's float16 GEMMs run on padded buffers
(``ember/codegen/cuda_gemm.py``). Without the ``pad_gemm`` pass a step copies the weight
twice and the (N, V) logits gradient twice into padded buffers and the logits once out of
one; with it the weight once, the rest read or written in place (``cuda_pitch``'s
``NAME_rp`` entry). This counts, per compiled step, the copies (``cuda_gemm._copy``:
pitched ``cudaMemcpy2DAsync`` on a GPU), the bytes they write and the zero fills of pads,
for both pipelines; on a GPU it also times the step (CUDA events, medians of alternating
runs).

Without a GPU it runs the CPU stand-in (``bench/cuda_host.py``'s: generated kernels and
cuBLAS recorded, not run; copies real): the counts and bytes are a GPU's, no times.
Default: the GPT step's LM head at full size (d=768, T=1024, batch 8, vocab 50257) with
one layer (the layers add no padded GEMM).

Run: ``python bench/cuda_pad_gemm.py [--layers 1 --d 768 --t 1024 --batch 8 --vocab 50257
--reps 10 --pad-min-flops F]`` (on a GPU ``--layers 12`` for the full step).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(
    os.path.abspath(__file__))]     # NOTE: see bench/cuda.py (the `cuda` package)
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def _gpu() -> bool:
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:       # noqa: BLE001 - no CuPy, no driver, no device
        return False


def _counters():
    """Wrap ``cuda_gemm``'s copy and pad makers; returns the tally dict."""
    from ember.codegen import cuda_gemm as cg
    tally = {"copies": 0, "bytes": 0, "fills": 0}
    copy, padded, empty, zero = cg._copy, cg._padded, cg.padded_empty, cg.zero_padded

    def counted_copy(dst, src):
        tally["copies"] += 1
        tally["bytes"] += dst.nbytes
        copy(dst, src)

    def counted_padded(a, rows, cols, xp):
        out = padded(a, rows, cols, xp)
        tally["fills"] += (rows > a.shape[-2]) + (cols > a.shape[-1])
        return out

    def counted_empty(shape, dtype, xp):
        tally["fills"] += 1
        return empty(shape, dtype, xp)
    def counted_zero(a, xp, rows=False):
        tally["fills"] += bool(rows and a.shape[0] % 8)     # (columns: padded_empty's)
        return zero(a, xp, rows)
    cg._copy, cg._padded, cg.padded_empty = counted_copy, counted_padded, counted_empty
    cg.zero_padded = counted_zero
    return tally


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=1)
    p.add_argument("--d", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--t", type=int, default=1024)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--pad-min-flops", type=float, default=None,
                   help="cuda_gemm.PAD_MIN_FLOPS (small sizes that pad: 1)")
    a = p.parse_args(argv)
    gpu = _gpu()
    if not gpu:
        import cuda_host
        cuda_host._setup()
    import numpy as np
    import ember as em
    from ember.graph.passes import DEFAULT_PASSES
    from cuda_compile import _step
    tally = _counters()
    if a.pad_min_flops is not None:
        from ember.codegen import cuda_gemm
        cuda_gemm.PAD_MIN_FLOPS = a.pad_min_flops
    without = [q for q in DEFAULT_PASSES if q != "pad_gemm"]
    where = "GPU" if gpu else "CPU stand-in (no times)"
    print(f"GPT {a.layers} layers d={a.d} T={a.t} batch={a.batch} vocab={a.vocab}, float16 "
          f"autocast, AdamW, compiled; {where}")
    fns = {}
    for label, passes in (("without pad_gemm", without), ("with pad_gemm", DEFAULT_PASSES)):
        step, inputs = _step(em, a.layers, a.d, a.heads, a.t, a.batch, a.vocab)
        fns[label] = (em.compile(step, passes=passes), inputs)
        with np.errstate(all="ignore"):
            for _ in range(3):
                fns[label][0](*inputs)
            for k in tally:
                tally[k] = 0
            fns[label][0](*inputs)
        print(f"  {label:<17} copies {tally['copies']}  bytes written "
              f"{tally['bytes'] / 1e6:9.1f} MB  pad fills {tally['fills']}", flush=True)
    if gpu:
        times = {k: [] for k in fns}
        for _ in range(a.reps):
            for label, (fn, inputs) in fns.items():
                s, e = em.cuda.Event(enable_timing=True), em.cuda.Event(enable_timing=True)
                s.record()
                fn(*inputs)
                e.record()
                e.synchronize()
                times[label].append(s.elapsed_time(e))
        for label, t in times.items():
            print(f"  {label:<17} step {statistics.median(t):8.2f} ms (median of {a.reps}, "
                  "alternating)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
