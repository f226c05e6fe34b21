"""Flash-attention backward on a CUDA GPU: Ember's tensor-core dk/dv + dq kernels (each
score-chunk width ``SUB``, with and without the cp.async pipeline ``ASYNC``: columns
``mma-s<SUB>[a]``; ``mma-s<SUB>[a]-old``: the default ``SUB``/``ASYNC`` with every tile
through the masked code, ``FULL_TILES`` off: the kernels before the full-tile path), its
scalar kernels and PyTorch's ``scaled_dot_product_attention`` backward, side by side
(issue 21).

Two timings per row, on the GPT step's shape (batch 8, 12 heads, T 1024, head dim 64,
causal, float16) and a few neighbours:

* ``bwd``: the backward alone. Ember: the delta, dk/dv and dq launches from CuPy arrays
  (``cuda_attention.backward_plans`` routed by ``cuda_attention_mma_bwd.route``; O and lse
  made once by the forward kernel); torch: ``torch.autograd.grad`` of a kept graph.
* ``fwd+bwd``: Ember ``cuda_attention.forward(save=True)`` + ``backward`` (the backward
  takes the saved lse); torch ``sdpa(q, k, v).backward(g)``.

Medians of CUDA-event timings over alternating rounds after warm-ups (the first call
compiles). TFLOP/s: the backward counts 2.5x the forward's ``4 B H Tq Tk D`` flops
(FlashAttention-2's convention: 5 products against 2), fwd+bwd 3.5x; halved when causal;
the same count for every column. Also prints the largest difference of each Ember column's
dq/dk/dv from torch's, relative to the largest |gradient|, and whether the ``-old`` column's
gradients have the default's very bits (expected). Without CuPy and a GPU it says so and
exits 0.

Run: ``python bench/cuda_attention_bwd.py`` (``--reps N``, ``--rounds N``, ``--quick``: the
GPT shape only; ``--subs 16 32 64``: the chunk widths to time).
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

#: (batch, heads, T, head dim, causal, dtype) rows; the first is the GPT step's.
SHAPES = [(8, 12, 1024, 64, True, "float16"),
          (8, 12, 1024, 64, False, "float16"),
          (8, 12, 1024, 64, True, "bfloat16"),
          (4, 16, 2048, 64, True, "float16"),
          (8, 12, 1024, 32, True, "float16")]


def _mean_ms(fn, reps: int, cupy) -> float:
    a, b = cupy.cuda.Event(), cupy.cuda.Event()
    a.record()
    for _ in range(reps):
        fn()
    b.record()
    b.synchronize()
    return cupy.cuda.get_elapsed_time(a, b) / reps


def _arrays(shape, cupy, torch):
    """``(cupy q, k, v, g, torch q, k, v, g)`` or None (no bfloat16 arrays here)."""
    b, h, t, d, _, dtype = shape
    if dtype == "bfloat16":         # NOTE: CuPy has no bfloat16: torch makes the arrays
        if torch is None:
            return None
        tt = [torch.randn(b, h, t, d, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
        try:
            cc = [cupy.from_dlpack(x) for x in tt]
        except Exception:       # NOTE: this CuPy has no bfloat16
            return None
        return (*cc, *tt) if cc[0].dtype.name == "bfloat16" else None
    rng = cupy.random.default_rng(0)
    cc = [rng.standard_normal((b, h, t, d), dtype=cupy.float32).astype(cupy.float16)
          for _ in range(4)]
    tt = [torch.from_dlpack(x) for x in cc] if torch is not None else [None] * 4
    return (*cc, *tt)


def _ember_fns(q, k, v, g, scale, causal, subs, cupy) -> dict:
    """``{label: (bwd fn, fwd+bwd fn)}`` for mma-s<SUB>[a] (``a``: cp.async pipeline), the
    default's ``-old`` (every tile masked) and scalar; each returns the flat ``dq | dk |
    dv``."""
    from ember.codegen import cuda_attention as ca
    from ember.codegen import cuda_attention_mma_bwd as mb
    name, grid, block, args, o, lse = ca.forward_plan(q, k, v, scale, causal, cupy)
    ca._launch(ca._fwd_module(name, q.dtype.name, q.shape[-1], v.shape[-1]), name, grid,
               block, args)
    flat = cupy.empty(q.size + k.size + v.size, q.dtype)
    outs = (flat[:q.size].reshape(q.shape), flat[q.size:q.size + k.size].reshape(k.shape),
            flat[q.size + k.size:].reshape(v.shape))
    launches, _ = ca.backward_plans(g, q, k, v, o, lse, scale, causal, cupy, outs)
    mod = ca._module(q.dtype.name, q.shape[-1], v.shape[-1])
    fns = {}
    cfgs = [(f"mma-s{s}{'a' if a else ''}", (s, a, True)) for s in subs for a in (False, True)]
    cfgs.append((f"mma-s{mb.SUB}{'a' if mb.ASYNC else ''}-old", (mb.SUB, mb.ASYNC, False)))
    for label, cfg in cfgs + [("scalar", None)]:
        def setup(cfg=cfg):
            mb.enabled = cfg is not None
            if cfg is not None:
                mb.SUB, mb.ASYNC, mb.FULL_TILES = cfg

        def bwd(setup=setup):
            setup()
            for m, n, gr, bl, a in mb.route(mod, launches, q, k, v, ca._modules):
                ca._launch(m, n, gr, bl, a)
            return flat

        def both(setup=setup):
            setup()
            ca.forward(cupy, q, k, v, scale, causal, save=True)
            return ca.backward(cupy, g, q, k, v, scale, causal)
        fns[label] = (bwd, both)
    return fns


def _torch_fns(tq, tk, tv, tg, causal, torch) -> dict:
    F = torch.nn.functional
    leaves = [x.detach().requires_grad_() for x in (tq, tk, tv)]
    out = F.scaled_dot_product_attention(*leaves, is_causal=causal)

    def bwd():
        return torch.cat([x.ravel() for x in torch.autograd.grad(out, leaves, tg,
                                                                 retain_graph=True)])

    def both():
        o = F.scaled_dot_product_attention(*leaves, is_causal=causal)
        return torch.cat([x.ravel() for x in torch.autograd.grad(o, leaves, tg)])
    return {"torch": (bwd, both)}


def _row(shape, reps, rounds, subs, cupy, torch):
    from ember.codegen import cuda_attention_mma_bwd as mb
    b, h, t, d, causal, _ = shape
    arrs = _arrays(shape, cupy, torch)
    if arrs is None:
        return None
    q, k, v, g, tq, tk, tv, tg = arrs
    scale = 1 / math.sqrt(d)
    old = (mb.enabled, mb.SUB, mb.ASYNC, mb.FULL_TILES)
    try:
        fns = _ember_fns(q, k, v, g, scale, causal, subs, cupy)
        if torch is not None:
            fns.update(_torch_fns(tq, tk, tv, tg, causal, torch))
        grads = {n: cupy.from_dlpack(f[0]()).astype(cupy.float32) if n == "torch"
                 else f[0]().astype(cupy.float32) for n, f in fns.items()}
        for f in fns.values():                                   # warm-up: compiles, loads
            f[1]()
        cupy.cuda.Device().synchronize()
        times = {(n, w): [] for n in fns for w in (0, 1)}
        for _ in range(rounds):
            for n, f in fns.items():
                for w in (0, 1):
                    times[n, w].append(_mean_ms(f[w], reps, cupy))
    finally:
        mb.enabled, mb.SUB, mb.ASYNC, mb.FULL_TILES = old
    fwd_flops = 4 * b * h * t * t * d / (2 if causal else 1)
    res = {key: statistics.median(x) for key, x in times.items()}
    diff = {}
    if "torch" in grads:
        ref = grads["torch"]
        top = float(cupy.abs(ref).max())
        diff = {n: float(cupy.abs(x - ref).max()) / top for n, x in grads.items() if n != "torch"}
    # NOTE: the full-tile path runs the old one's operations: the same bits expected
    same = {n: bool((grads[n] == grads[n[:-4]]).all()) for n in grads
            if n.endswith("-old") and n[:-4] in grads}
    return res, fwd_flops, diff, list(fns), same


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=10, help="calls per timing")
    p.add_argument("--rounds", type=int, default=5, help="alternating rounds (median)")
    p.add_argument("--quick", action="store_true", help="the GPT shape only, 3 rounds")
    p.add_argument("--subs", type=int, nargs="+", default=[16, 32, 64],
                   help="score-chunk widths of the mma kernels to time")
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
    print(f"{name}; ms (TFLOP/s); medians of {args.rounds} alternating rounds of {args.reps} "
          "calls; bwd = delta + dk/dv + dq kernels (torch: autograd.grad of a kept graph)")
    for shape in SHAPES[:1] if args.quick else SHAPES:
        r = _row(shape, args.reps, 3 if args.quick else args.rounds, args.subs, cupy, torch)
        label = "B H T D causal dtype: " + " ".join(str(x) for x in shape)
        if r is None:
            print(f"{label}  (no bfloat16 arrays here)")
            continue
        res, flops, diff, cols, same = r
        print(label)
        for w, (what, mult) in enumerate((("bwd", 2.5), ("fwd+bwd", 3.5))):
            cells = [f"{c}={res[c, w]:.3f} ({mult * flops / res[c, w] / 1e9:.0f})" for c in cols]
            best = min(res[c, w] for c in cols if c.startswith("mma"))
            ratio = f"  best-mma/torch {best / res['torch', w]:.2f}x" if "torch" in cols else ""
            print(f"  {what:8} " + "  ".join(cells) + ratio)
        if diff:
            print("  max|ember-torch|/max|torch| grads: " +
                  "  ".join(f"{n}={x:.1e}" for n, x in diff.items()))
        for n, eq in same.items():
            print(f"  {n} gradients bitwise equal to {n[:-4]}'s: {'yes' if eq else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
