"""A compiled layer norm's backward on a GPU with and without ``fuse_colsum`` (issue 21).

"before": the column sums (dgamma, dbeta) and their operands are kernels of their own
(``fuse_colsum.ENABLED = False``) and dead nodes stay until the pipeline's end (an unread
``expand`` closed a reduction group: ``dx`` took two row kernels and an add); "after" (the
default): the column sums ride in a row kernel over the same rows (here the forward's,
which reads ``x`` and ``dy`` anyway; in a training step's graph the ``dx`` kernel) as
per-block partials plus one launch adding those (``ember/codegen/cuda_rowcols.py``), and
``dx`` is one row kernel.

The function is a GPT block's norm under float16 autocast: ``x`` float32 (the residual
stream), ``dy`` of ``--dtype`` (float16: a matmul's input gradient, cast inside),
``weight``/``bias`` float32; it returns ``(dx, dweight, dbias)`` given ``dy``.

Stand-in mode (default; no GPU): on the CPU stand-in given a GPU's capabilities
(``bench/cuda_gap.py``'s stubs: nothing runs, sizes only), every launch of one compiled
call, forward included, with the bytes of the step's arrays (inputs + outputs; the
partials the "after" kernel writes and its final launch reads are printed apart).

GPU mode (``--gpu``; the integrator's run): GPU time per call of the compiled fwd+bwd
before/after and of PyTorch's ``F.layer_norm`` forward + ``autograd.grad`` (kernels'
device time from ``torch.profiler``, so the compiled call's host time does not count;
medians of ``--rounds`` alternating rounds), and the forward alone of each, so the
backward's share is the difference.

``--gpt`` (GPU): the whole compiled GPT step of ``bench/cuda.py`` before/after, alternating.

Run: ``python bench/cuda_layernorm.py [--n 8192 --d 768 --dtype float16]`` (stand-in) or
``python bench/cuda_layernorm.py --gpu [--dtype float32]`` / ``--gpt``.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys

sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(
    os.path.abspath(__file__))]     # NOTE: see bench/cuda.py (the `cuda` package)
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ["EMBER_GRAPH_CACHE"] = "0"   # NOTE: both ways trace; no graph from the cache


@contextlib.contextmanager
def before():
    """Column sums as kernels of their own (the grouping off), dead nodes removed only at
    the end of the pipeline (an unread expand then split dx in three kernels)."""
    import ember.graph.passes.fuse_cuda  # noqa: F401 - the module, not the pass
    from ember.graph.passes import fuse_colsum
    fc = sys.modules["ember.graph.passes.fuse_cuda"]
    dce = fc.dce
    fuse_colsum.ENABLED, fc.dce = False, (lambda graph: (graph, {}))
    try:
        yield
    finally:
        fuse_colsum.ENABLED, fc.dce = True, dce


def _fns(em, n, d, dtype, forward_only=False):
    """``(fn, args)``: the norm's forward and, unless ``forward_only``, its backward."""
    em.manual_seed(0)
    x = em.randn(n, d, device="cuda").requires_grad_()
    w = (em.randn(d, device="cuda") * 0.1 + 1.0).requires_grad_()
    b = (em.randn(d, device="cuda") * 0.1).requires_grad_()
    dy = em.randn(n, d, device="cuda").to(getattr(em, dtype))

    def f(x, w, b, dy):
        y = em.nn.functional.layer_norm(x, (d,), w, b)
        if forward_only:
            return y
        return em.autograd.grad(y, (x, w, b), dy.float())
    return f, (x, w, b, dy)


def stand_in(args) -> int:
    import cuda_gap
    rec = cuda_gap.Recorder()
    cuda_gap._setup(rec)
    import numpy as np
    import ember as em
    from ember.codegen import cuda_rowcols
    print(f"layer norm fwd+bwd, ({args.n}, {args.d}), x float32, dy {args.dtype}, stand-in "
          "(MB = the step's inputs + outputs)")
    for label, ctx in (("before", before), ("after", contextlib.nullcontext)):
        with ctx():
            f, inputs = _fns(em, args.n, args.d, args.dtype)
            fn = em.compile(f)
            with np.errstate(all="ignore"):
                for _ in range(2):
                    fn(*inputs)
            _tot, rows = cuda_gap.measure(fn, inputs, rec)
        launches = sum(k for _c, _n, k, _b in rows)
        mb = sum(b for *_x, b in rows) / 1e6
        print(f"{label:<7} launches {launches:>3}  MB {mb:8.1f}")
        for cat, name, k, b in rows:
            print(f"    {cat:<26} {name[:44]:<44} {k:>2} {b / 1e6:8.1f} MB")
        if label == "after":
            blocks = min(-(-args.n // 8), cuda_rowcols.COL_BLOCKS)   # warp: 8 rows a block
            part = blocks * 2 * args.d * 4
            print(f"    + partials (<= {blocks} blocks x 2 sums x {args.d} float32), written "
                  f"and read once: {2 * part / 1e6:.1f} MB")
    return 0


def _gpu_ms(fn, em, torch, reps):
    """Device milliseconds of ``fn()``'s kernels (torch.profiler; CuPy's launches too)."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    em.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        em.cuda.synchronize()
    total = launches = 0
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        if t:
            total += t
            launches += e.count
    return total / 1e3 / reps, launches / reps


def gpu(args) -> int:
    import ember as em
    if not em.cuda.is_available() or os.environ.get("EMBER_FAKE_CUDA"):
        print("no CUDA GPU: nothing to measure")
        return 0
    import torch
    fns = {}
    for label, ctx in (("ember before", before), ("ember after", contextlib.nullcontext)):
        for fwd in (False, True):
            with ctx():
                f, inputs = _fns(em, args.n, args.d, args.dtype, fwd)
                fn = em.compile(f)
                for _ in range(3):
                    fn(*inputs)
                fns[(label, fwd)] = (lambda fn=fn, a=inputs: fn(*a))
    x = torch.randn(args.n, args.d, device="cuda", requires_grad=True)
    w = torch.ones(args.d, device="cuda", requires_grad=True)
    b = torch.zeros(args.d, device="cuda", requires_grad=True)
    dy = torch.randn(args.n, args.d, device="cuda").to(getattr(torch, args.dtype))

    def t_fwd():
        return torch.nn.functional.layer_norm(x, (args.d,), w, b)

    def t_both():
        return torch.autograd.grad(t_fwd(), (x, w, b), dy.float())
    fns[("torch", False)], fns[("torch", True)] = t_both, t_fwd
    times: dict = {k: [] for k in fns}
    for _ in range(args.rounds):
        for k, fn in fns.items():
            times[k].append(_gpu_ms(fn, em, torch, args.reps))
    print(f"layer norm ({args.n}, {args.d}), x float32, dy {args.dtype}: GPU kernel time "
          f"per call (torch.profiler), medians of {args.rounds} alternating rounds")
    for label in ("ember before", "ember after", "torch"):
        both = statistics.median(t for t, _ in times[(label, False)])
        fwd = statistics.median(t for t, _ in times[(label, True)])
        nb = times[(label, False)][0][1] - times[(label, True)][0][1]
        print(f"  {label:<13} fwd+bwd {both * 1e3:8.1f} us  fwd {fwd * 1e3:8.1f} us  "
              f"bwd {1e3 * (both - fwd):8.1f} us  bwd launches {nb:5.1f}")
    return 0


def gpt(args) -> int:
    """The full GPT step (``bench/cuda.py``'s: 12 layers, d=768, T=1024, batch 8, AdamW,
    float16 autocast), compiled before/after, timed alternately (medians)."""
    import ember as em
    if not em.cuda.is_available() or os.environ.get("EMBER_FAKE_CUDA"):
        print("no CUDA GPU: nothing to measure")
        return 0
    from cuda_compile import _bench_cuda
    bc = _bench_cuda()
    fns = {}
    for label, ctx in (("before", before), ("after", contextlib.nullcontext)):
        with ctx():
            step, inputs = bc._gpt_step(em, em.float16)
            fns[label] = (em.compile(step), inputs)
            for _ in range(5):              # NOTE: eager, trace, compile, first runs
                fns[label][0](*inputs)
            em.cuda.synchronize()
    times: dict = {k: [] for k in fns}
    for _ in range(args.rounds):
        for label, (fn, inputs) in fns.items():
            times[label].append(bc._time(lambda: fn(*inputs), args.reps, em.cuda.synchronize,
                                         warm=1))
    print(f"GPT step (float16 autocast, AdamW, compiled), median ms, {args.rounds} "
          "alternating rounds:")
    for label, ts in times.items():
        print(f"  {label:<7} {statistics.median(ts):8.2f} ms   rounds: "
              + ", ".join(f"{t:.2f}" for t in ts))
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu", action="store_true", help="time on a GPU (else: stand-in bytes)")
    p.add_argument("--gpt", action="store_true", help="GPU: the whole GPT step before/after")
    p.add_argument("--n", type=int, default=8192, help="rows (batch x tokens)")
    p.add_argument("--d", type=int, default=768)
    p.add_argument("--dtype", default="float16", choices=["float16", "float32"],
                   help="dy's dtype")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    if args.gpt:
        return gpt(args)
    return gpu(args) if args.gpu else stand_in(args)


if __name__ == "__main__":
    sys.exit(main())
