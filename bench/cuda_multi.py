"""One multi-launch vs a launch per parameter of a generated AdamW-like kernel (issue 21).

The ``multi_launch`` pass makes a compiled step's per-parameter launches of one fused
kernel one launch of its ``NAME_m`` entry (``ember/codegen/cuda_multi.py``). This times
both on GPT-2 small's 148 parameters (float32, updated in place: the optimizer's case) —
host milliseconds to issue one step's launches (Python: Ember's plan replay, CuPy's launch)
and GPU milliseconds (CUDA events) — so the integrator sees what the pass saves beside
the compiled step's own figure (``EMBER_MULTI_LAUNCH=0 python3 bench/cuda.py --only gpt``
against ``python3 bench/cuda.py --only gpt``).

Then the eager optimizer's step on the same parameters: ``AdamW.step()`` with its
multi-tensor launch (``codegen/cuda_optim.py``'s ``_m`` entry, the default) against one
launch per parameter (``cuda_optim.MANY = False``), beside PyTorch's AdamW ``foreach``
(its CUDA default) and ``fused=True`` on the same GPU when PyTorch has CUDA.

Run: ``PYTHONPATH=$PWD python3 bench/cuda_multi.py [--reps 20]`` (seconds); without a GPU it
says so and exits 0.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

# NOTE: as bench/cuda.py: this folder must not shadow the `cuda` package CuPy imports
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(
    os.path.abspath(__file__))]

import numpy as np  # noqa: E402

import ember as em  # noqa: E402


def _kernel(shape):
    """``m' = .9 m + .1 g; v' = .999 v + .001 g g; p' = p - lr m' / (sqrt(v') + 1e-8)``
    (``lr`` a one-element operand), as one kernel with three outputs."""
    from ember.codegen.ir import Const, InputSpec, Kernel, Load, OutSpec, call
    f32 = em.float32
    st = tuple(int(np.prod(shape[d + 1:])) for d in range(len(shape)))
    p, g, m, v, lr = (Load(i) for i in range(5))
    m2 = m * Const(0.9, f32) + g * Const(0.1, f32)
    v2 = v * Const(0.999, f32) + g * g * Const(0.001, f32)
    p2 = p - lr * m2 / (call("sqrt", v2) + Const(1e-8, f32))
    return Kernel([InputSpec(f32, st)] * 4 + [InputSpec(f32, (0,) * len(shape))],
                  OutSpec(f32, tuple(shape)), p2, "bench_multi_adamw",
                  extra=((f32, m2), (f32, v2)))


def _shapes():
    d, layers = 768, 12
    per = [(d,), (d,), (3 * d, d), (3 * d,), (d, d), (d,), (d,), (d,), (4 * d, d), (4 * d,),
           (d, 4 * d), (d,)]
    return [(50257, d), (1024, d)] + per * layers + [(d,), (d,)]


def _time(fn, reps) -> tuple:
    """Median ``(host ms to issue, GPU ms)`` of ``fn``."""
    import cupy
    for _ in range(3):
        fn()
    cupy.cuda.Device().synchronize()
    host, gpu = [], []
    for _ in range(reps):
        a, b = cupy.cuda.Event(), cupy.cuda.Event()
        a.record()
        t0 = time.perf_counter()
        fn()
        host.append((time.perf_counter() - t0) * 1e3)
        b.record()
        b.synchronize()
        gpu.append(cupy.cuda.get_elapsed_time(a, b))
    return statistics.median(host), statistics.median(gpu)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=20)
    a = p.parse_args(argv)
    if not em.cuda.is_available() or \
            em.cuda.get_device_properties().name.startswith("Ember fake"):
        print("bench/cuda_multi.py: no CUDA GPU here; nothing to measure")
        return 0
    import cupy
    from ember.codegen.cuda_launch import CudaModule
    from ember.graph.passes.fuse_cuda import content_name, renamed
    shapes = _shapes()
    kernels = [_kernel(s) for s in shapes]
    name = content_name(kernels[0])
    kernels = [renamed(k, name) for k in kernels]
    mod = CudaModule(kernels[:1], "block", name, multi=True)
    rng = np.random.default_rng(0)
    lr = cupy.asarray(np.float32(1e-4))
    ins = [[cupy.asarray(rng.standard_normal(s).astype(np.float32)) for _ in range(4)] + [lr]
           for s in shapes]
    metas = [[(s, np.float32)] * 3 for s in shapes]
    outs = [[x[0], x[2], x[3]] for x in ins]        # in place: p, m, v
    singles = [mod.runner(k, m, cupy) for k, m in zip(kernels, metas)]
    multi = mod.multi_runner(kernels, metas, cupy)
    flat_in = [x for r in ins for x in r]
    flat_out = [o for r in outs for o in r]

    def per_launch():
        for f, x, o in zip(singles, ins, outs):
            f(cupy, *x, outs=list(o))

    def one_launch():
        multi(cupy, *flat_in, outs=list(flat_out))
    n = sum(int(np.prod(s)) for s in shapes)
    print(f"GPU: {em.cuda.get_device_name()}; {len(shapes)} parameters, {n / 1e6:.1f} M "
          f"float32 elements; reps {a.reps} (medians)")
    print(f"{'launches':<26} {'host ms':>9} {'GPU ms':>9}")
    for label, fn in (("one per parameter (_c)", per_launch), ("one multi-launch (_m)",
                                                               one_launch)) * 2:
        h, g = _time(fn, a.reps)
        print(f"{label:<26} {h:>9.3f} {g:>9.3f}", flush=True)
    _optimizer_rows(shapes, a.reps)
    return 0


def _optimizer_rows(shapes, reps) -> None:
    """Eager ``AdamW.step()`` over ``shapes``: Ember one launch vs one per parameter,
    PyTorch foreach / fused (same GPU, same process)."""
    from ember.codegen import cuda_optim
    rng = np.random.default_rng(1)
    init = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    ps = [em.nn.Parameter(em.tensor(x, device="cuda")) for x in init]
    for p in ps:
        p.grad = em.randn(*p.shape, device="cuda")
    opt = em.optim.AdamW(ps, lr=1e-4)
    print(f"{'AdamW.step() (eager)':<26} {'host ms':>9} {'GPU ms':>9}")
    for many in (True, False, True, False):
        cuda_optim.MANY = many
        h, g = _time(opt.step, reps)
        label = "Ember, one launch" if many else "Ember, one per parameter"
        print(f"{label:<26} {h:>9.3f} {g:>9.3f}", flush=True)
    cuda_optim.MANY = True
    try:
        import torch
        if not torch.cuda.is_available():
            raise ImportError
    except ImportError:
        print("(PyTorch with CUDA not installed: no torch rows)")
        return
    tp = [torch.nn.Parameter(torch.from_numpy(x).cuda()) for x in init]
    for p in tp:
        p.grad = torch.randn_like(p)
    for label, kw in (("torch foreach", {"foreach": True}), ("torch fused", {"fused": True})):
        topt = torch.optim.AdamW(tp, lr=1e-4, **kw)
        h, g = _time(topt.step, reps)
        print(f"{label:<26} {h:>9.3f} {g:>9.3f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
