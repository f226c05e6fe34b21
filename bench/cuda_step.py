"""One GPT training step on a GPU, looked at closely (issue 21): PyTorch eager, Ember eager,
Ember compiled (``--mode``: ``default`` or ``reduce-overhead``, CUDA graphs) — step
times (CUDA events), the compiled call's first-call times, its host time (until the call
returns, without waiting for the GPU), the CUDA graph's state, and with ``--profile`` the
compiled step's GPU kernels (torch.profiler: total device time and the biggest kernels),
then each generated kernel's bytes beside its time: the arrays a launch is given (inputs +
outputs, each array once: an upper bound on its DRAM traffic, ``bench/cuda_gap.py``'s
measure), GB/s and the percentage of this GPU's cudaMemcpy bandwidth — which kernels are
far from the copy rate.

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
        try:
            _bandwidth_table(c, args, ka, em)
        except Exception as e:      # noqa: BLE001 - a report; the figures above stand
            print(f"kernel bandwidth table failed: {type(e).__name__}: {e}")
    return 0


def _launch_bytes(c, args) -> dict:
    """``{kernel name: [launches, bytes]}`` of one call of compiled ``c``: every launch of a
    generated module (``cuda_cache._KeptFunction``) with the bytes of the distinct arrays
    among its arguments."""
    import cupy
    from ember.codegen import cuda_cache
    seen: dict = {}
    real = cuda_cache._KeptFunction.__call__

    def counting(self, grid, block, kargs, *rest, **kw):
        ptrs, n = set(), 0
        for a in kargs:
            if isinstance(a, cupy.ndarray) and a.data.ptr not in ptrs:
                ptrs.add(a.data.ptr)
                n += a.nbytes
        row = seen.setdefault(self.name, [0, 0])
        row[0] += 1
        row[1] += n
        return real(self, grid, block, kargs, *rest, **kw)
    cuda_cache._KeptFunction.__call__ = counting
    try:
        c(*args)
    finally:
        cuda_cache._KeptFunction.__call__ = real
    return seen


def _memcpy_gbs(cupy, nbytes=1 << 30) -> float:
    """Device-to-device cudaMemcpy GB/s (read + write) over ``nbytes``."""
    a, b = cupy.empty(nbytes, cupy.uint8), cupy.empty(nbytes, cupy.uint8)
    s = cupy.cuda.get_current_stream()
    e0, e1 = cupy.cuda.Event(), cupy.cuda.Event()
    for _ in range(2):
        b.data.copy_from_device_async(a.data, nbytes, s)
    e0.record()
    for _ in range(5):
        b.data.copy_from_device_async(a.data, nbytes, s)
    e1.record()
    e1.synchronize()
    return 2 * nbytes * 5 / (cupy.cuda.get_elapsed_time(e0, e1) * 1e-3) / 1e9


def _bandwidth_table(c, args, ka, em, rows=30) -> None:
    """The biggest generated kernels by device time with their bytes, GB/s and % of
    cudaMemcpy (``ka``: torch.profiler's key averages of one call of ``c``)."""
    import cupy
    seen = _launch_bytes(c, args)
    em.cuda.synchronize()
    copy = _memcpy_gbs(cupy)
    times = {e.key: (e.count, e.self_device_time_total) for e in ka}
    out = []
    for name, (n, nbytes) in seen.items():
        cnt, us = times.get(name, (0, 0.0))
        if us > 0:
            out.append((us, name, n, cnt, nbytes))
    out.sort(reverse=True)
    print(f"generated kernels by device time (cudaMemcpy {copy:.0f} GB/s; bytes: arrays "
          f"given, each once — an upper bound):")
    print(f"{'kernel':<48} {'launches':>8} {'ms':>8} {'MB':>9} {'GB/s':>7} {'%copy':>6}")
    for us, name, n, cnt, nbytes in out[:rows]:
        gbs = nbytes / (us * 1e-6) / 1e9
        print(f"{name[:48]:<48} {n:>4}/{cnt:<3} {us / 1e3:>8.3f} {nbytes / 1e6:>9.1f} "
              f"{gbs:>7.0f} {100 * gbs / copy:>6.1f}")
    tot_us = sum(r[0] for r in out)
    tot_b = sum(r[4] for r in out)
    print(f"all {len(out)} generated kernels: {tot_us / 1e3:.2f} ms, {tot_b / 1e6:.0f} MB, "
          f"{tot_b / max(tot_us, 1e-9) / 1e3:.0f} GB/s")


if __name__ == "__main__":
    raise SystemExit(main())
