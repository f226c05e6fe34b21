"""Host (Python) milliseconds of one compiled GPT training step on the GPU (issue 21).

On an H100 the compiled GPT step (``bench/cuda.py``'s ``_gpt_step``) was host-bound: 55.8
ms of GPU kernels, 78.2 ms of Python launching them. This measures that Python without
a GPU: the CPU stand-in given a GPU's ``cuda_kernels`` (``EMBER_FAKE_CUDA=1``, set up by
``bench/cuda_gap.py``'s ``_setup``: generated kernels' launches are recorded, nothing
runs) runs the same step (float16 autocast, AdamW; ``bench/cuda_compile.py``'s ``_step``)
at tiny sizes where NumPy's work is negligible — 12 layers, d=64, one head, T=16, batch 1,
vocab 128: the graph's structure (and its ~1500 executor steps) is the full-size one's.
cuBLAS is stubbed below :func:`ember.codegen.cuda_gemm.matmul` (``_cublas``): its plan,
padding decisions and output allocation are measured.

Prints the median host milliseconds of one compiled call over ``--reps`` calls (wall
clock, and this thread's CPU time: steadier while other processes load the machine), the
executor steps and recorded launches (generated kernels + cuBLAS calls) per call, and the
eager step's host milliseconds the same way for reference; ``--profile`` adds cProfile's
top 25 functions by own time of ``--reps`` compiled calls.

NOTE: the stand-in understates the GPU's host time: CuPy's per-call overheads
(``cupy.empty``, ``broadcast_to``, ``asarray``: ~2-5 us each, a kernel launch ~5-10 us)
are larger than NumPy's (~0.2-1 us), and device<->host copies of 0-d values are free
here. Compare before/after on the same machine; the absolute figure is a lower bound.

``--dispatches`` prints the registry ops one call dispatches, by name; ``--composites``
compiles the eager layer composites at these tiny sizes, as the full-size eager step runs
them (``eager_composite.MIN_ELEMENTS``).

Run: ``python bench/cuda_host.py [--reps 20] [--profile] [--dispatches] [--composites]
[--layers 12 --d 64 --t 16 --batch 1 --vocab 128]``.
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time

sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(
    os.path.abspath(__file__))]     # NOTE: see bench/cuda.py (the `cuda` package)
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def _setup():
    """The stand-in (``cuda_gap._setup``) with the real ``cuda_gemm.matmul`` kept and only
    its cuBLAS call stubbed; returns the launch recorder."""
    import cuda_gap
    import numpy as np
    from ember.codegen import cuda_gemm
    real = cuda_gemm.matmul
    rec = cuda_gap.Recorder()
    cuda_gap._setup(rec)
    cuda_gemm.matmul = real
    cuda_gemm._cublas = lambda p: rec.launch("cublas_gemm", (p["A"], p["B"]))
    # NOTE: a launch only counts here (cuda_gap's recorder sums bytes and zeroes every
    # output: ~40 us a launch that a GPU does not spend); integer outputs are zeroed
    # (indices a later gather reads), float ones keep whatever xp.empty held
    def launch(name, args, writes=None):
        rec.rows.append(("launch", name, 1, 0))
        for i, a in enumerate(args):    # NOTE: outputs only (a kernel's inputs may be
            if a.__class__ is np.ndarray and a.dtype.kind in "iub" and a.ndim and \
                    a.flags.writeable and (writes is None or i < len(writes) and
                                           writes[i]):      # traced constants)
                a[...] = 0
    rec.launch = launch
    return rec


def _timed(fn, args, reps) -> tuple:
    """``(wall ms, CPU ms of this thread)`` of each of ``reps`` calls."""
    import numpy as np
    wall, cpu = [], []
    with np.errstate(all="ignore"):
        for _ in range(reps):
            t0, c0 = time.perf_counter(), time.thread_time()
            fn(*args)
            cpu.append((time.thread_time() - c0) * 1e3)
            wall.append((time.perf_counter() - t0) * 1e3)
    return wall, cpu


def _counts(fn, args, rec) -> tuple:
    """``(executor steps, launches)`` of one call of ``fn``."""
    import numpy as np
    from ember.graph import executor
    n = [0]
    real = executor._exec

    def counting(*a, **k):
        n[0] += 1
        return real(*a, **k)
    rec.rows.clear()
    executor._exec = counting
    try:
        with np.errstate(all="ignore"):
            fn(*args)
    finally:
        executor._exec = real
    return n[0], sum(r[2] for r in rec.rows)


def _dispatches(fn, args) -> str:
    """The registry ops one call of ``fn`` dispatches, by name (most first)."""
    import collections
    import numpy as np
    from ember.ops import dispatch
    names = collections.Counter()
    real = dispatch.apply

    def counting(op, inputs, params):
        names[op.name] += 1
        return real(op, inputs, params)
    # NOTE: modules bind ``dispatch.apply`` at import (``_apply = dispatch.apply``)
    bound = [(m, k) for m in list(sys.modules.values()) if m is not None and
             getattr(m, "__name__", "").startswith("ember")
             for k, v in list(vars(m).items()) if v is real]
    for m, k in bound:
        setattr(m, k, counting)
    try:
        with np.errstate(all="ignore"):
            fn(*args)
    finally:
        for m, k in bound:
            setattr(m, k, real)
    top = ", ".join(f"{k} {v}" for k, v in names.most_common())
    return f"dispatches {sum(names.values())} a call: {top}"


def _copies(fn) -> str:
    """What a GPU would copy between host and device in one call of compiled ``fn``: CPU
    inputs bound as device arrays, uploads of host values, CPU outputs copied back (each
    of those waits for the GPU) — from the program, since the stand-in copies nothing."""
    from ember.graph.host_steps import host_values
    n = h2d = d2h = 0
    for e in fn._cache.values():
        prog = getattr(e, "program", None)
        if e.eager or prog is None:
            continue
        g = prog.graph
        hv = host_values(g)[0] if prog._hosting else set()
        h2d += sum(1 for v in g.inputs if v.device.type == "cpu" and v.id not in hv)
        h2d += len(prog._uploads.packed) + len(prog._uploads.fresh)
        d2h += sum(1 for v in g.outputs if v.device.type == "cpu" and v.id not in hv)
        n += len(prog._host)
    return f"host steps {n}, host->device copies {h2d}, device->host copies {d2h} a call"


def _replay_host(fn, inputs, reps) -> None:
    """The CPU time of a compiled call less the stand-in's re-run of its recorded steps
    (:class:`ember.graph.cuda_graphs._Recording`), i.e. what a GPU replay keeps."""
    import numpy as np
    from ember.graph import cuda_graphs
    spent = [0.0]
    orig = cuda_graphs._Recording.replay

    def timed(self, xp):
        t = time.thread_time()
        orig(self, xp)
        spent[0] += time.thread_time() - t
    cuda_graphs._Recording.replay = timed
    try:
        with np.errstate(all="ignore"):
            t = time.thread_time()
            for _ in range(reps):
                fn(*inputs)
            total = time.thread_time() - t
    finally:
        cuda_graphs._Recording.replay = orig
    runners = [e.program.cuda_graph for e in fn._cache.values()
               if getattr(getattr(e, "program", None), "cuda_graph", None) is not None]
    state = ", ".join(f"captures {g.captures} replays {g.replays} failed {g.failed}"
                      for g in runners) or "no runner"
    print(f"{'':<9} CUDA graph ({state}): {total / reps * 1e3:.2f} ms CPU a call, of which "
          f"the recorded steps' re-run {spent[0] / reps * 1e3:.2f} ms: a GPU replay keeps "
          f"~{(total - spent[0]) / reps * 1e3:.2f} ms + one graph launch")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--heads", type=int, default=1)
    p.add_argument("--t", type=int, default=16)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--vocab", type=int, default=128)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--no-eager", action="store_true", help="compiled step only")
    p.add_argument("--profile", action="store_true", help="cProfile's top 25 by own time")
    p.add_argument("--profile-eager", action="store_true",
                   help="with --profile: profile the eager step instead of the compiled one")
    p.add_argument("--mode", default=None, choices=["default", "reduce-overhead"],
                   help="ember.compile's mode; reduce-overhead also prints the host time "
                   "a GPU replay keeps (the call without the stand-in's re-run of the "
                   "recorded steps, which a GPU does in one graph launch)")
    p.add_argument("--dispatches", action="store_true",
                   help="also print the registry ops one call dispatches, by name")
    p.add_argument("--composites", action="store_true",
                   help="eager layer composites (layer norm, GELU, loss) compiled at any size "
                   "(eager_composite.MIN_ELEMENTS = 0), as the full-size step runs them")
    a = p.parse_args(argv)
    rec = _setup()
    if a.composites:
        from ember.codegen import eager_composite
        eager_composite.MIN_ELEMENTS = 0
    import numpy as np
    import ember as em
    from cuda_compile import _step
    print(f"GPT {a.layers} layers d={a.d} heads={a.heads} T={a.t} batch={a.batch} "
          f"vocab={a.vocab}, float16 autocast, AdamW; CPU stand-in, launches stubbed")
    for label in ("compiled",) + (() if a.no_eager else ("eager",)):
        step, inputs = _step(em, a.layers, a.d, a.heads, a.t, a.batch, a.vocab)
        fn = em.compile(step, mode=a.mode) if label == "compiled" else step
        with np.errstate(all="ignore"):
            for _ in range(6):      # state made, composites recorded, traced (and captured)
                fn(*inputs)
        steps, launches = _counts(fn, inputs, rec)
        ms, cpu = _timed(fn, inputs, a.reps)
        print(f"{label:<9} host {statistics.median(ms):8.2f} ms/call (median of {a.reps}; "
              f"min {min(ms):.2f}; CPU {statistics.median(cpu):.2f})  executor steps "
              f"{steps:5d}  launches {launches:5d}")
        if label == "compiled":
            print(f"{'':<9} {_copies(fn)}")
        if a.dispatches:
            print(f"{'':<9} {_dispatches(fn, inputs)}")
        if label == "compiled" and a.mode == "reduce-overhead":
            _replay_host(fn, inputs, a.reps)
        if a.profile and (label == "compiled") != a.profile_eager:
            prof = cProfile.Profile()
            with np.errstate(all="ignore"):
                prof.runcall(_timed, fn, inputs, a.reps)
            pstats.Stats(prof).sort_stats(os.environ.get("CUDA_HOST_SORT", "tottime")).print_stats(
                int(os.environ.get("CUDA_HOST_ROWS", "25")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
