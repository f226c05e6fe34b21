"""One GPT training step on a GPU, looked at closely (issue 21): PyTorch eager, Ember eager,
Ember compiled (``--mode``: ``default`` or ``reduce-overhead``, CUDA graphs) — step
times (CUDA events), the compiled call's first-call times, its host time (until the call
returns, without waiting for the GPU), the CUDA graph's state, and with ``--profile`` the
compiled step's GPU kernels (torch.profiler: total device time and the biggest kernels).

``bench/cuda.py``'s GPT (d=768, 12 layers, T=1024, batch 8, vocab 50257, AdamW) under
float16 autocast (``--dtype bfloat16`` for bf16).

Run: ``python bench/cuda_step.py [--mode reduce-overhead] [--profile] [--no-torch]``.
Needs CuPy and an NVIDIA GPU (PyTorch with CUDA for the peer and the profile).
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time

sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(
    os.path.abspath(__file__))]     # NOTE: see bench/cuda.py (the `cuda` package)


def _bench_cuda():
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location("bench_cuda", os.path.join(here, "cuda.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", default="default", choices=["default", "reduce-overhead"])
    p.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    p.add_argument("--profile", action="store_true")
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--reps", type=int, default=5)
    a = p.parse_args(argv)
    b = _bench_cuda()
    em = b.em
    if not em.cuda.is_available() or em.cuda.get_device_properties().name.startswith(
            "Ember fake"):
        print("bench/cuda_step.py: needs a CUDA GPU (CuPy); nothing to measure")
        return 0
    torch = None if a.no_torch else b._torch()
    print(f"GPU: {em.cuda.get_device_name()}; {a.dtype} autocast; compile mode {a.mode}")
    if torch is not None:
        step, args = b._gpt_step(torch, getattr(torch, a.dtype))
        ms = b._time(lambda: step(*args), a.reps, torch.cuda.synchronize, warm=4)
        print(f"torch eager {ms:.2f} ms", flush=True)
        del step, args
        torch.cuda.empty_cache()
    step, args = b._gpt_step(em, getattr(em, a.dtype))
    ms = b._time(lambda: step(*args), a.reps, em.cuda.synchronize, warm=5)
    print(f"ember eager {ms:.2f} ms", flush=True)
    del step, args
    em.cuda.empty_cache()
    step, args = b._gpt_step(em, getattr(em, a.dtype))
    c = em.compile(step, mode=a.mode)
    for i in range(5):
        t = time.perf_counter()
        c(*args)
        em.cuda.synchronize()
        print(f"ember compiled call {i + 1}: {time.perf_counter() - t:.2f} s", flush=True)
    ms = b._time(lambda: c(*args), a.reps, em.cuda.synchronize, warm=1)
    print(f"ember compiled {ms:.2f} ms", flush=True)
    em.cuda.synchronize()
    t = time.perf_counter()
    c(*args)
    host = time.perf_counter() - t
    em.cuda.synchronize()
    print(f"compiled host-side call {host * 1e3:.1f} ms", flush=True)
    for e in c._cache.values():
        g = getattr(getattr(e, "program", None), "cuda_graph", None)
        if g is not None:
            print(f"cuda graph: captures {g.captures} replays {g.replays} failed {g.failed}")
    if a.profile and torch is not None:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA,
                                                torch.profiler.ProfilerActivity.CPU]) as prof:
            c(*args)
            em.cuda.synchronize()
        ka = prof.key_averages()
        tot = sum(e.self_device_time_total for e in ka)
        print(f"compiled GPU kernel time total {tot / 1e3:.1f} ms")
        print(ka.table(sort_by="self_cuda_time_total", row_limit=45, max_name_column_width=70))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
