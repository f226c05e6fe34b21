"""Launches and bytes of a compiled training step with dropout on the GPU: the draws fused
into the kernels that read them (Philox leaf, ``graph/passes/fuse_philox.py``) vs each
draw its own kernel writing the mask (``EMBER_PHILOX_FUSE=0``'s path) — issue 21.

The step: a transformer MLP block with GPT-2's two dropouts, ``y = x + drop(fc2(drop(
gelu(fc1(x)))))``, loss ``mean(y**2)``, backward and AdamW, compiled as one graph. Counted
on the CPU stand-in given a GPU's ``cuda_kernels`` (``bench/cuda_gap.py``'s recorder: CUDA
modules are stubs that record each launch and run nothing; bytes = inputs + outputs of
each launch, the same measure on both sides, a pre-broadcast host scalar one element;
host steps, which launch nothing, left out).

``--model``: the same block as a compiled module (a forward and a backward graph, loss,
backward and AdamW eager), the forward saving each dropout's (seed, offset) for the
backward to draw again (``philox.redraw_saved``) vs saving the mask
(``EMBER_PHILOX_REDRAW=0``): launches, MB moved, and the MB the forward saves (held
until the backward).

Run: ``python bench/cuda_philox_fuse.py [--tokens 2048 --d 768 --p 0.1] [--model]`` (~1
min on 2 cores); ``--json`` prints the numbers as JSON. On a GPU the same comparison times it:
``tests/cuda/test_gpu_philox_fuse.py`` (bitwise) and this file's ``--gpu`` (ms a step).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess as _sp
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


#: executor steps the recorder lists that launch nothing (host steps: NumPy).
HOST_STEPS = ("philox_key", "philox_words")


def _step(em, tokens: int, d: int, p: float, device: str = "cuda"):
    nn, F = em.nn, em.nn.functional
    em.manual_seed(0)
    fc1, fc2 = nn.Linear(d, 4 * d).to(device), nn.Linear(4 * d, d).to(device)
    params = list(fc1.parameters()) + list(fc2.parameters())
    opt = em.optim.AdamW(params, lr=1e-3)
    x = em.randn(tokens, d).to(device)

    def step(x):
        h = F.dropout(F.gelu(fc1(x)), p)
        y = x + F.dropout(fc2(h), p)
        loss = y.square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return step, (x,)


def _model_step(em, tokens: int, d: int, p: float, device: str = "cuda"):
    """The block as a compiled module: ``(step, args, the compiled module)``."""
    nn, F = em.nn, em.nn.functional
    em.manual_seed(0)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            return x + F.dropout(self.fc2(F.dropout(F.gelu(self.fc1(x)), p)), p)
    block = Block().to(device)
    opt = em.optim.AdamW(block.parameters(), lr=1e-3)
    cm = em.compile(block)
    x = em.randn(tokens, d).to(device)

    def step(x):
        loss = cm(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return step, (x,), cm


def _saved_bytes(cm) -> int:
    """Bytes the compiled module's forward graph saves for its backward graph."""
    from ember.graph.compile import CompiledFunction
    fn = next(v for v in list(vars(cm).values()) + list(cm.__dict__.get("_modules", {})
                                                        .values())
              if isinstance(v, CompiledFunction))
    e = [e for e in fn._cache.values() if e.program is not None and e.joint is not None][-1]
    return sum(v.numel() * v.dtype.itemsize for v in e.program.graph.outputs[e.joint.n_fwd:])


def _measure(tokens, d, p, model=False) -> dict:
    sys.path.insert(0, HERE)
    import cuda_gap
    from cuda_gap import Recorder, _setup, measure
    nbytes = cuda_gap._nbytes

    def _nbytes(a) -> int:      # NOTE: a pre-broadcast 0-d host value is one element
        st = getattr(a, "strides", None)
        if st is not None and getattr(a, "ndim", 0) > 0 and not any(st):
            return int(a.itemsize)
        return nbytes(a)
    cuda_gap._nbytes = _nbytes
    rec = Recorder()
    _setup(rec)
    import numpy as np
    import ember as em
    from ember.graph.passes import fuse_philox
    redraw = sys.modules["ember.graph.passes.philox"]
    res = {}
    for label, enabled in ((("redraw", True), ("saved", False)) if model else
                           (("fused", True), ("separate", False))):
        if model:
            redraw.REDRAW = enabled
            fn, args, cm = _model_step(em, tokens, d, p)
        else:
            fuse_philox.ENABLED = enabled
            step, args = _step(em, tokens, d, p)
            fn = em.compile(step)
        with np.errstate(all="ignore"):
            for _ in range(4):
                fn(*args)
        _tot, rows = measure(fn, args, rec)
        rows = [r for r in rows if r[1] not in HOST_STEPS and "no launch" not in r[0]]
        res[label] = {"launches": sum(k for _c, _n, k, _b in rows),
                      "bytes": sum(b for _c, _n, _k, b in rows),
                      "philox_launches": sum(k for _c, n, k, _b in rows
                                             if n.startswith("ember_philox_")),
                      "philox_bytes": sum(b for _c, n, _k, b in rows
                                          if n.startswith("ember_philox_"))}
        if model:
            res[label]["saved_bytes"] = _saved_bytes(cm)
    return res


def census(tokens=2048, d=768, p=0.1, subprocess=False) -> dict:
    """``{"fused": {...}, "separate": {...}}``: launches, bytes, and the draw kernels'
    launches and bytes of one compiled step. ``subprocess``: measure in a new Python
    (the stand-in's setup patches module globals)."""
    if not subprocess:
        return _measure(tokens, d, p)
    env = dict(os.environ, EMBER_GRAPH_CACHE="0")
    out = _sp.run([sys.executable, os.path.abspath(__file__), "--json", "--tokens",
                   str(tokens), "--d", str(d), "--p", str(p)], env=env, check=True,
                  capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _gpu(tokens, d, p, reps=50) -> dict:
    """ms a step on a real GPU (CuPy), fused vs separate, alternated (median of 5)."""
    import statistics
    import time
    import cupy as cp
    import ember as em
    from ember.graph.passes import fuse_philox
    fns = {}
    for label, enabled in (("fused", True), ("separate", False)):
        fuse_philox.ENABLED = enabled
        step, args = _step(em, tokens, d, p)
        fns[label] = (em.compile(step, mode="reduce-overhead"), args)
        for _ in range(5):
            fns[label][0](*args)
    times = {k: [] for k in fns}
    for _ in range(5):
        for label, (fn, args) in fns.items():
            cp.cuda.Device().synchronize()
            t = time.perf_counter()
            for _ in range(reps):
                fn(*args)
            cp.cuda.Device().synchronize()
            times[label].append((time.perf_counter() - t) / reps * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--p", type=float, default=0.1)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--gpu", action="store_true", help="time it on a GPU instead")
    ap.add_argument("--model", action="store_true",
                    help="a compiled module: the draws' keys saved vs their masks")
    a = ap.parse_args(argv)
    if a.gpu:
        ms = _gpu(a.tokens, a.d, a.p)
        print(f"MLP block + 2 dropouts, tokens={a.tokens} d={a.d}, float32, AdamW, "
              f"reduce-overhead: fused {ms['fused']:.3f} ms/step, separate "
              f"{ms['separate']:.3f} ms/step (median of 5 alternated runs)")
        return 0
    res = _measure(a.tokens, a.d, a.p, a.model)
    if a.json:
        print(json.dumps(res))
        return 0
    what = "a compiled module's forward and backward graphs" if a.model else \
        "one compiled step"
    print(f"MLP block + 2 dropouts, tokens={a.tokens} d={a.d}, float32, AdamW, {what} on "
          "the stand-in (bytes = inputs + outputs of each launch)")
    print(f"{'path':<10} {'launches':>9} {'MB':>9} {'draw launches':>14} {'draw MB':>8}"
          + (f" {'saved MB':>9}" if a.model else ""))
    for label, r in res.items():
        print(f"{label:<10} {r['launches']:>9} {r['bytes'] / 1e6:>9.1f} "
              f"{r['philox_launches']:>14} {r['philox_bytes'] / 1e6:>8.1f}"
              + (f" {r['saved_bytes'] / 1e6:>9.2f}" if a.model else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
