"""Bytes and time of a compiled GPT step's GELU, LayerNorm and cross-entropy kernels, with
the GPU recompute policy (issue 21) and without it.

"before": what ``fuse_cuda`` did until this change (``recompute.CPU``'s policy on the GPU,
no ``lse_rows``); "after": the default (``recompute.CUDA``: tanh/exp/div chains recomputed
in the backward kernels, lone readers take the chain; ``lse_rows``: the loss's
log-softmax kept as per-row log-sum-exp, the backward reads the logits).

Stand-in mode (default; no GPU): the GPT step of ``bench/cuda.py`` on the CPU stand-in given
a GPU's capabilities (``bench/cuda_gap.py``'s stubs: nothing runs, sizes only); prints, per
kernel kind, launches and the MB each reads and writes (inputs + outputs), and how many
full-size values it writes / reads, before and after.

GPU mode (``--gpu``; the integrator's run): the full-size GPT step (12 layers, d=768,
T=1024, batch 8, AdamW, float16 autocast), compiled once each way (two models, same
seed), timed alternately (``--rounds`` rounds of ``--reps`` steps; medians of each);
``--profile`` adds each way's GPU time per kernel kind from ``torch.profiler`` (one step).

Run: ``python bench/cuda_recompute.py [--layers 1 --t 1024 --batch 8]`` or
``python bench/cuda_recompute.py --gpu [--profile]``.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import gc
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
    """``fuse_cuda`` as it was: the CPU's recompute policy, no ``lse_rows``."""
    import ember.graph.passes.fuse_cuda  # noqa: F401 - the module, not the pass
    fc = sys.modules["ember.graph.passes.fuse_cuda"]
    rc = sys.modules["ember.graph.passes.recompute"]
    saved = rc.CUDA, fc.lse_rows
    rc.CUDA, fc.lse_rows = rc.CPU, (lambda graph, device="cuda": (graph, 0))
    try:
        yield
    finally:
        rc.CUDA, fc.lse_rows = saved


def kind(ops: str) -> str | None:
    """The kernel kind of a fused node's ops (None: not one of the three)."""
    o = ops.split(",")
    if "tanh_backward" in o:
        return "GELU backward"
    if "tanh" in o:
        return "GELU forward"
    if "log_softmax" in o or ("amax" in o and "log" in o):
        return "cross-entropy forward"
    if "exp" in o and "eq" in o:
        return "cross-entropy backward"
    if "sqrt" in o and "sum" in o and "neg" not in o:
        return "LayerNorm forward"
    if "neg" in o and "sum" in o:
        return "LayerNorm backward"
    if len(o) <= 3 and "mul" in o and "sum" not in o:
        return "small elementwise (g * xhat)"
    return None


def byte_rows(graph) -> dict:
    """``{kind: [launches, read B, written B, full-size outputs, full-size inputs]}``."""
    def nb(v):
        return v.numel() * v.dtype.itemsize if hasattr(v, "numel") else 0
    rows = collections.defaultdict(lambda: [0, 0, 0, 0, 0])
    for n in graph.nodes:
        k = kind(n.op.ops) if n.op.name in ("fused", "fused_reduce") else None
        if k is None:
            continue
        ins = [x for x in n.inputs if hasattr(x, "numel")]
        big = max(v.numel() for v in list(n.outs) + ins)
        if big < 1 << 14:               # NOTE: AdamW's 0-d step-count chains
            continue
        r = rows[k]
        r[0] += 1
        r[1] += sum(nb(x) for x in ins)
        r[2] += sum(nb(o) for o in n.outs)
        r[3] += sum(1 for o in n.outs if o.numel() * 8 > big)
        r[4] += sum(1 for x in ins if x.numel() * 8 > big)
    return rows


def print_bytes(label, rows) -> None:
    print(f"-- {label}")
    print(f"  {'kernel':<30}{'launches':>9}{'read MB':>10}{'write MB':>10}"
          f"{'full outs':>10}{'full ins':>9}")
    for k, (n, i, o, fo, fi) in sorted(rows.items()):
        print(f"  {k:<30}{n:>9}{i / 1e6:>10.1f}{o / 1e6:>10.1f}{fo:>10}{fi:>9}")
    print(f"  {'total':<30}{'':>9}{sum(r[1] for r in rows.values()) / 1e6:>10.1f}"
          f"{sum(r[2] for r in rows.values()) / 1e6:>10.1f}")


def stand_in(args) -> int:
    import cuda_gap
    rec = cuda_gap.Recorder()
    cuda_gap._setup(rec)
    import numpy as np

    import ember as em
    from cuda_compile import _step
    print(f"GPT {args.layers} layer(s), d=768, T={args.t}, batch {args.batch}, vocab "
          f"{args.vocab}, float16 autocast, AdamW; stand-in (sizes only)")
    for label, ctx in (("before", before), ("after", contextlib.nullcontext)):
        with ctx():
            step, inputs = _step(em, args.layers, 768, 12, args.t, args.batch, args.vocab)
            c = em.compile(step)
            with np.errstate(all="ignore"):
                for _ in range(2):          # NOTE: call 1 creates AdamW's state; 2 traces
                    c(*inputs)
        print_bytes(label, byte_rows(c.graphs()[-1]))
        del step, inputs, c                 # NOTE: one model's arrays at a time
        gc.collect()
    return 0


def gpu(args) -> int:
    import ember as em
    from cuda_compile import _bench_cuda
    bc = _bench_cuda()
    dtype = getattr(em, args.dtype)
    fns = {}
    for label, ctx in (("before", before), ("after", contextlib.nullcontext)):
        with ctx():
            step, inputs = bc._gpt_step(em, dtype)
            fns[label] = (em.compile(step), inputs)
            for _ in range(5):              # NOTE: eager, trace, compile, first runs
                fns[label][0](*inputs)
            em.cuda.synchronize()
        print_bytes(label, byte_rows(fns[label][0].graphs()[-1]))
    times = collections.defaultdict(list)
    for _ in range(args.rounds):
        for label, (fn, inputs) in fns.items():
            times[label].append(bc._time(lambda: fn(*inputs), args.reps, em.cuda.synchronize,
                                         warm=1))
    print(f"GPT step ({args.dtype} autocast, AdamW, compiled), median ms of {args.reps} "
          f"steps, {args.rounds} alternating rounds:")
    for label, ts in times.items():
        print(f"  {label:<7} {statistics.median(ts):8.2f} ms   rounds: "
              + ", ".join(f"{t:.2f}" for t in ts))
    if args.profile:
        for label, (fn, inputs) in fns.items():
            profile(label, fn, inputs, em)
    return 0


def profile(label, fn, inputs, em) -> None:
    """GPU time per kernel kind of one step (torch.profiler sees CuPy's launches too)."""
    import torch
    from torch.profiler import ProfilerActivity
    graph = fn.graphs()[-1]
    kinds = {n.op.kernel.name: kind(n.op.ops) for n in graph.nodes
             if n.op.name in ("fused", "fused_reduce")}
    with torch.profiler.profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(*inputs)
        em.cuda.synchronize()
    per = collections.Counter()
    for e in prof.key_averages():
        base = e.key[:-2] if e.key.endswith("_c") or e.key.endswith("_r") else e.key
        k = kinds.get(base) or kinds.get(e.key)
        total = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        per[k or "other"] += total / 1e3
    print(f"-- {label}: GPU ms per kernel kind (one step)")
    for k, ms in sorted(per.items(), key=lambda kv: -kv[1]):
        print(f"  {k:<30}{ms:9.2f}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu", action="store_true", help="time on a GPU (else: stand-in bytes)")
    p.add_argument("--layers", type=int, default=1, help="stand-in: GPT blocks")
    p.add_argument("--t", type=int, default=1024)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--profile", action="store_true", help="GPU: per-kernel-kind times")
    args = p.parse_args(argv)
    return gpu(args) if args.gpu else stand_in(args)


if __name__ == "__main__":
    sys.exit(main())
