"""float32 GEMM on the eager workloads' shapes: Ember's own (``ember.codegen.sgemm``) vs
NumPy's OpenBLAS (what ``ops/linalg.py`` otherwise calls) and PyTorch's ``torch.mm``
(MKL/oneDNN) as a peer, one process, reps interleaved, medians.

Each Linear layer ``(m, i) -> (m, o)`` gives the products Ember's eager step runs:
``fwd`` = ``x @ W.T`` (B a transposed view), ``dx`` = ``g @ W``, and the weight gradient,
``dw`` = ``g.T @ x`` (2-D input: W1, W2's fc1) or ``dwT`` = ``x.T @ g`` (3-D input folded: W3; A a
transposed view either way). Ember reads the transposes through strides, as the matmul
kernel receives them.

Clocks: ``--threads 1`` times CPU time of the process (``time.process_time``: robust to
other processes' load); ``--threads 2`` wall time (CPU time would add both threads).
``EMBER_ADAPTIVE_THREADS=0`` so OpenBLAS gets exactly the threads asked.

Run:
    .venv/bin/python bench/gemm.py --threads 1
    .venv/bin/python bench/gemm.py --threads 2 --reps 30
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("EMBER_ADAPTIVE_THREADS", "0")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import ember  # noqa: E402
from ember.codegen import sgemm  # noqa: E402

#: (workload, m, in, out) of each Linear-like product family
LAYERS = [("W1", 128, 784, 512), ("W1", 128, 512, 512), ("W1", 128, 512, 10),
          ("W3", 1024, 128, 384), ("W3", 1024, 128, 128), ("W3", 1024, 128, 512),
          ("W3", 1024, 512, 128), ("W3", 1024, 128, 256), ("LSTM", 1024, 128, 512),
          ("LSTM", 1024, 64, 512), ("W2", 64, 4096, 128)]

#: W2's conv2 (32 -> 64 channels, 3x3, 16x16 output, batch 64) as its eager passes run it
#: (``codegen/conv_kernels_{fwd,bwd}.py``, found by recording ``sgemm.gemm``'s calls in a
#: step): ``(label, A, B, accumulate)`` built by :func:`conv_cases`
CONV = (64, 288, 256)       # Co, C*kh*kw, oh*ow


def cases(layers=LAYERS):
    """``(label, A, B)`` for each layer's fwd, dx and dwT products."""
    rng = np.random.default_rng(0)
    out = []
    for wl, m, i, o in layers:
        x = rng.standard_normal((m, i), dtype=np.float32)
        w = rng.standard_normal((o, i), dtype=np.float32)
        g = rng.standard_normal((m, o), dtype=np.float32)
        out += [(f"{wl} fwd {m}x{i}@{i}x{o}", x, w.T), (f"{wl} dx  {m}x{o}@{o}x{i}", g, w),
                (f"{wl} dw  {o}x{m}@{m}x{i}", g.T, x) if wl in ("W1", "W2") else
                (f"{wl} dwT {i}x{m}@{m}x{o}", x.T, g)]
    return out


def conv_cases():
    """W2 conv2's products: forward ``W2d @ cols`` over a chunk of 7 images, the weight
    gradient's per-image ``dy[i] @ cols[i].T`` accumulated into one (Co, CK) array
    (``beta=1``; OpenBLAS and torch: the product alone) and the input gradient's
    ``W2d.T @ dy`` over a chunk of 3 images."""
    co, ckk, ll = CONV
    rng = np.random.default_rng(1)
    w = rng.standard_normal((co, ckk), dtype=np.float32)
    cols = rng.standard_normal((7, ckk, ll), dtype=np.float32)
    dy = rng.standard_normal((3, co, ll), dtype=np.float32)
    return [(f"W2 conv fwd {co}x{ckk}@7x{ckk}x{ll}", np.broadcast_to(w, (7, co, ckk)), cols,
             False),
            (f"W2 conv dw  {co}x{ll}@{ll}x{ckk} +=", dy[0], cols[0].T, True),
            (f"W2 conv dx  {ckk}x{co}@3x{co}x{ll}", np.broadcast_to(w.T, (3, ckk, co)), dy,
             False)]


def _median_times(fns, reps, clock):
    ts = [[] for _ in fns]
    for _ in range(reps):
        for t, f in zip(ts, fns):
            t0 = clock()
            f()
            t.append(clock() - t0)
    return [statistics.median(t) for t in ts]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=25)
    ap.add_argument("--inner", type=int, default=5, help="calls per timed rep")
    ap.add_argument("--variant", default="auto")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--only", default="", help="labels containing this text")
    args = ap.parse_args(argv)
    ember.set_num_threads(args.threads)
    clock = time.process_time if args.threads == 1 else time.perf_counter
    torch = None
    if not args.no_torch:
        try:
            import torch
            torch.set_num_threads(args.threads)
        except ImportError:
            torch = None
    n = args.inner
    print(f"threads {args.threads}, clock {'cpu' if args.threads == 1 else 'wall'}, "
          f"median of {args.reps} reps x {n} calls, variant {args.variant}")
    print(f"{'shape':34} {'ember':>9} {'openblas':>9} {'torch':>9} {'e/ob':>6} {'e/torch':>7}")
    for label, a, b, acc in [c + (False,) for c in cases()] + conv_cases():
        if args.only not in label:
            continue
        c = np.zeros(np.matmul(a, b).shape, np.float32) if acc else None
        fns = [lambda: [sgemm.gemm(a, b, c, beta=1.0, variant=args.variant,
                                   nthreads=args.threads) for _ in range(n)],
               lambda: [np.matmul(a, b) for _ in range(n)]]
        if torch is not None:
            ta, tb = torch.from_numpy(np.array(a)), torch.from_numpy(b)
            mm = torch.mm if a.ndim == 2 else torch.bmm
            fns.append(lambda: [mm(ta, tb) for _ in range(n)])
        for f in fns:
            f()
        t = [v / n * 1e6 for v in _median_times(fns, args.reps, clock)]
        tt = t[2] if len(t) > 2 else float("nan")
        print(f"{label:34} {t[0]:9.1f} {t[1]:9.1f} {tt:9.1f} {t[0] / t[1]:6.2f} "
              f"{t[0] / tt:7.2f}", flush=True)
    _conv_dw_sum(args, clock, torch)
    return 0


def _conv_dw_sum(args, clock, torch):
    """W2 conv2's whole weight gradient over the batch (64 images): ``sgemm.gemm_sum``
    (one call) vs the per-image ``gemm(..., beta=1)`` loop, OpenBLAS's batched product
    and sum (the conv pass's fallback) and ``torch.bmm`` + ``sum``."""
    if args.only and args.only not in "W2 conv dw":
        return
    co, ckk, ll = CONV
    rng = np.random.default_rng(2)
    dy = rng.standard_normal((64, co, ll), dtype=np.float32)
    cols = rng.standard_normal((64, ckk, ll), dtype=np.float32)
    colt, res = cols.transpose(0, 2, 1), np.empty((co, ckk), np.float32)

    def loop():
        sgemm.gemm(dy[0], colt[0], res, nthreads=args.threads)
        for i in range(1, 64):
            sgemm.gemm(dy[i], colt[i], res, beta=1.0, nthreads=args.threads)
    fns = [lambda: sgemm.gemm_sum(dy, colt, res, nthreads=args.threads), loop,
           lambda: np.sum(np.matmul(dy, colt), axis=0, out=res)]
    if torch is not None:
        tdy, tct = torch.from_numpy(dy), torch.from_numpy(colt)
        fns.append(lambda: torch.bmm(tdy, tct).sum(0))
    for f in fns:
        f()
    t = [v * 1e3 for v in _median_times(fns, max(3, args.reps // 3), clock)]
    tt = t[3] if len(t) > 3 else float("nan")
    print(f"W2 conv dw, 64 images summed (ms): gemm_sum {t[0]:.2f}, per-image loop "
          f"{t[1]:.2f}, OpenBLAS matmul+sum {t[2]:.2f}, torch bmm+sum {tt:.2f}")


if __name__ == "__main__":
    raise SystemExit(main())
