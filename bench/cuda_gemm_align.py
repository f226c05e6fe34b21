"""An LM head's three float16 GEMMs on a GPU: padded (aligned) vs unpadded cuBLAS vs torch.

GPT-2's vocabulary (50257) is odd, so the logits' leading dim is not a multiple of 8 halves
and cuBLAS runs Turing-era kernels on it. ``ember/codegen/cuda_gemm.py`` runs such GEMMs
on padded buffers (``PAD_MIN_FLOPS``); this script times the three products of the LM head
(x (8192, 768), W (50257, 768)): logits = x @ W.mT, dx = dlogits @ W, dW = dlogits.mT @ x,
each as Ember padded (default), Ember unpadded (``PAD_MIN_FLOPS = inf``: the call before)
and ``torch`` on the same GPU (medians of alternating runs, CUDA events). Also the GPT
step's float16 bias adds ((8192, 2304) and (8192, 3072) + a row): Ember's row entry
(``cuda_eager._row_plan``), the strided entry it replaces, and torch, in GB/s.

Run: ``python bench/cuda_gemm_align.py`` (``--reps N``; ``--vocab``, ``--rows``, ``--d``).
Without a GPU it says there is nothing to measure and exits 0.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(
    os.path.abspath(__file__))]

import ember as em  # noqa: E402


def _time(fn, event, elapsed) -> float:
    """Milliseconds of one ``fn()`` by CUDA events."""
    a, b = event(), event()
    a.record()
    fn()
    b.record()
    b.synchronize()
    return elapsed(a, b)


def _products(xp, rows, vocab, d, dtype):
    rng = xp.random.default_rng(0)
    x = (rng.standard_normal((rows, d), dtype="float32") * 0.5).astype(dtype)
    w = (rng.standard_normal((vocab, d), dtype="float32") * 0.5).astype(dtype)
    dl = (rng.standard_normal((rows, vocab), dtype="float32") * 0.5).astype(dtype)
    return {"logits = x @ W.mT": (x, w.T), "dx = dlogits @ W": (dl, w),
            "dW = dlogits.mT @ x": (dl.T, x)}


def run(reps: int, rows: int, vocab: int, d: int):
    """Rows ``(name, padded ms, unpadded ms, torch ms, flop)``."""
    import cupy
    from ember.codegen import cuda_gemm as cg
    ev, el = cupy.cuda.Event, cupy.cuda.get_elapsed_time
    try:
        import torch
        peer = torch.cuda.is_available()
    except ImportError:
        peer = False
    out = []
    keep = cg.PAD_MIN_FLOPS
    for name, (x, y) in _products(cupy, rows, vocab, d, cupy.float16).items():
        flop = 2 * x.shape[0] * x.shape[1] * y.shape[1]
        tx = ty = None
        if peer:
            tx, ty = torch.as_tensor(x, device="cuda"), torch.as_tensor(y, device="cuda")
        times = {"pad": [], "nopad": [], "torch": []}
        for r in range(reps + 2):
            for kind in times:
                if kind == "torch" and not peer:
                    continue
                cg.PAD_MIN_FLOPS = keep if kind == "pad" else float("inf")
                if kind == "torch":
                    ms = _torch_time(torch, tx, ty)
                else:
                    ms = _time(lambda: cg.matmul(cupy, x, y), ev, el)
                if r >= 2:
                    times[kind].append(ms)
        cg.PAD_MIN_FLOPS = keep
        med = {k: statistics.median(v) if v else None for k, v in times.items()}
        out.append((name, med["pad"], med["nopad"], med["torch"], flop))
    return out


def bias_rows(reps: int):
    """Rows ``(name, row-entry ms, strided-entry ms, torch ms, bytes)`` of the GPT step's
    float16 bias adds (``x @ W.mT + b`` of the qkv and MLP-up Linears, 24 a step)."""
    import numpy as np
    from ember.codegen import cuda_eager
    try:
        import torch
        peer = torch.cuda.is_available()
    except ImportError:
        peer = False
    def ev():                   # Ember's events: its ops run on Ember's current stream
        return em.cuda.Event(enable_timing=True)

    def el(a, b):
        return a.elapsed_time(b)
    keep = cuda_eager._row_plan
    out = []
    for shape in [(8, 1024, 2304), (8, 1024, 3072)]:
        rng = np.random.default_rng(0)
        xh = rng.standard_normal(shape, dtype=np.float32).astype(np.float16)
        bh = rng.standard_normal(shape[-1:], dtype=np.float32).astype(np.float16)
        x, b = em.tensor(xh, device="cuda"), em.tensor(bh, device="cuda")
        if peer:
            tx, tb = torch.tensor(xh, device="cuda"), torch.tensor(bh, device="cuda")
        times = {"row": [], "strided": [], "torch": []}
        for r in range(reps + 2):
            for kind in times:
                if kind == "torch":
                    ms = _torch_time(torch, tx, tb, add=True) if peer else None
                else:
                    cuda_eager._row_plan = keep if kind == "row" else (lambda *a: None)
                    ms = _time(lambda: x + b, ev, el)
                if r >= 2 and ms is not None:
                    times[kind].append(ms)
        cuda_eager._row_plan = keep
        med = {k: statistics.median(v) if v else None for k, v in times.items()}
        out.append((f"bias add {shape}", med["row"], med["strided"], med["torch"],
                    2 * xh.nbytes + bh.nbytes))
    return out


def _torch_time(torch, a, b, add: bool = False) -> float:
    """Milliseconds of one ``a @ b`` in torch by CUDA events."""
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    a + b if add else a @ b
    e.record()
    e.synchronize()
    return s.elapsed_time(e)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--rows", type=int, default=8192)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--d", type=int, default=768)
    args = p.parse_args(argv)
    if not em.cuda.is_available() or em.cuda.get_device_name().startswith("Ember fake"):
        print("bench/cuda_gemm_align.py: no CUDA GPU here; nothing to measure")
        return 0
    print(f"{em.cuda.get_device_name()}; float16, rows {args.rows}, vocab {args.vocab}, "
          f"d {args.d}; medians of {args.reps} alternating runs")
    print(f"{'product':24s} {'padded ms':>10s} {'unpadded ms':>12s} {'torch ms':>9s}   "
          f"TFLOP/s padded / unpadded / torch")
    for name, a, b, t, flop in run(args.reps, args.rows, args.vocab, args.d):
        tf = [f"{flop / (v * 1e9):.0f}" if v else "-" for v in (a, b, t)]
        ts = "-" if t is None else f"{t:.3f}"
        print(f"{name:24s} {a:10.3f} {b:12.3f} {ts:>9s}   {' / '.join(tf)}")
    print(f"{'float16 bias add':24s} {'row ms':>10s} {'strided ms':>12s} {'torch ms':>9s}   "
          f"GB/s row / strided / torch")
    for name, a, b, t, nbytes in bias_rows(args.reps):
        gb = [f"{nbytes / (v * 1e6):.0f}" if v else "-" for v in (a, b, t)]
        ts = "-" if t is None else f"{t:.3f}"
        print(f"{name:24s} {a:10.3f} {b:12.3f} {ts:>9s}   {' / '.join(gb)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
