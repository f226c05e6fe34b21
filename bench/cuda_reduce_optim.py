"""Axis sums and the AdamW step on a GPU: Ember's generated kernels vs CuPy vs PyTorch.

Issue 21's eager GPT step spent ~14 ms in CuPy's axis sums (bias/LayerNorm-weight
gradients: column sums of (8192, 768|3072)) and ~30 ms in AdamW's per-parameter CuPy
passes. Rows (medians of CUDA-event timings, microseconds; each library on the same GPU in
one process):

* ``colsum RxC dtype``: ``x.sum(0)`` — Ember (``codegen/cuda_reduce.py``), CuPy's
  ``sum(axis=0)``, ``torch.sum(0)``; ``rowsum``: ``x.sum(-1)`` the same way;
* ``AdamW step GPT-2 small``: one ``opt.step()`` over the GPT step's 124M float32
  parameters (148 tensors) — Ember's one kernel per parameter (``codegen/cuda_optim.py``),
  Ember's previous CuPy passes (``EMBER_OPTIM_KERNELS=0``'s path), PyTorch's default
  (``foreach``) and ``fused=True``.

Run: ``PYTHONPATH=$PWD python3 bench/cuda_reduce_optim.py [--quick] [--only reduce|adamw]``.
Without a GPU it says so and exits 0.
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


def _time_us(fn, reps: int, torch=None) -> float:
    """Median microseconds of ``fn()`` between two CUDA events (after two warm-ups): CuPy's
    events (Ember's and CuPy's work), or ``torch``'s for PyTorch's."""
    if torch is not None:
        def event():
            return torch.cuda.Event(enable_timing=True)
        sync, elapsed = torch.cuda.synchronize, lambda a, b: a.elapsed_time(b)
    else:
        import cupy
        event, sync = cupy.cuda.Event, cupy.cuda.Device().synchronize
        elapsed = cupy.cuda.get_elapsed_time
    for _ in range(2):
        fn()
    sync()
    out = []
    for _ in range(reps):
        a, b = event(), event()
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(elapsed(a, b) * 1e3)
    return statistics.median(out)


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def reduce_rows(reps, torch):
    rows = []
    cases = [("colsum", 0, (8192, 768)), ("colsum", 0, (8192, 3072)),
             ("rowsum", -1, (8192, 768)), ("rowsum", -1, (4096, 50257))]
    for kind, axis, shape in cases:
        for dt in ("float16", "float32"):
            x = em.randn(*shape, device="cuda").to(getattr(em, dt))
            ca = x._data
            mine = _time_us(lambda: x.sum(axis), reps)
            cp = _time_us(lambda: ca.sum(axis=axis), reps)
            peer = None
            if torch is not None:
                t = torch.randn(shape, device="cuda", dtype=getattr(torch, dt))
                peer = _time_us(lambda: t.sum(axis), reps, torch)
            gbs = ca.nbytes / (mine * 1e-6) / 1e9
            rows.append((f"{kind} {shape[0]}x{shape[1]} {dt} us", mine, cp, peer,
                         f"{gbs:.0f} GB/s"))
    return rows


def _gpt2_shapes(d=768, layers=12, vocab=50257, block=1024):
    per = [(d,), (d,), (3 * d, d), (3 * d,), (d, d), (d,), (d,), (d,), (4 * d, d), (4 * d,),
           (d, 4 * d), (d,)]
    return [(vocab, d), (block, d)] + per * layers + [(d,), (d,)]


def adamw_rows(reps, torch):
    from ember.codegen import optim_kernels
    shapes = _gpt2_shapes()
    rng = np.random.default_rng(0)
    params = [em.nn.Parameter(em.tensor(rng.standard_normal(s).astype(np.float32) * 0.02,
                                        device="cuda")) for s in shapes]
    for p in params:
        p.grad = em.randn(*p.shape, device="cuda") * 1e-3
    opt = em.optim.AdamW(params, lr=1e-4, weight_decay=0.1)
    opt.step()                                   # NOTE: the state exists from here on
    mine = _time_us(opt.step, reps)
    prev = optim_kernels.set_enabled(False)
    try:
        passes = _time_us(opt.step, reps)
    finally:
        optim_kernels.set_enabled(prev)
    peers = [None, None]
    if torch is not None:
        tp = [torch.nn.Parameter(torch.randn(s, device="cuda") * 0.02) for s in shapes]
        for p in tp:
            p.grad = torch.randn_like(p) * 1e-3
        for i, kw in enumerate(({}, {"fused": True})):
            to = torch.optim.AdamW(tp, lr=1e-4, weight_decay=0.1, **kw)
            to.step()
            peers[i] = _time_us(to.step, reps, torch)
    n = sum(int(np.prod(s)) for s in shapes)
    return [(f"AdamW step GPT-2 small ({n / 1e6:.0f}M, {len(shapes)} tensors) us", mine,
             passes, peers[0], "torch fused: " + ("-" if peers[1] is None else
                                                   f"{peers[1]:.1f}"))]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="5 repetitions instead of 20")
    p.add_argument("--only", nargs="+", choices=["reduce", "adamw"])
    args = p.parse_args(argv)
    if not em.cuda.is_available() or em.cuda.get_device_name().startswith("Ember fake"):
        print("bench/cuda_reduce_optim.py: no CUDA GPU here; nothing to measure")
        return 0
    reps = 5 if args.quick else 20
    torch = _torch()
    print(f"GPU: {em.cuda.get_device_name()}; PyTorch: {torch.__version__ if torch else '-'}")
    print(f"{'benchmark':<44} {'ember':>10} {'cupy|passes':>12} {'torch':>10}")
    table = {"reduce": reduce_rows, "adamw": adamw_rows}
    for name in args.only or list(table):
        for label, mine, other, peer, note in table[name](reps, torch):
            peer_s = "-" if peer is None else f"{peer:.1f}"
            print(f"{label:<44} {mine:>10.1f} {other:>12.1f} {peer_s:>10}  {note}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
