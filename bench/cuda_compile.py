"""Compile time of a CUDA graph (issue 21): the GPT training step's kernels through NVRTC.

Stand-in mode (default; no GPU, needs NVRTC: ``pip install 'ember[nvrtc]'``): the GPT step
of ``bench/cuda.py`` (pre-LN blocks, fused qkv, causal SDPA, tanh GELU, AdamW, float16
autocast) with ``--layers`` blocks at small sizes (the kernels' text does not depend on
sizes: shapes and strides are launch arguments) is compiled by ``ember.compile`` on the CPU
stand-in given a GPU's capabilities, so ``fuse_cuda`` emits the graph's CUDA kernels.
Prints the graph's census (ops in generated kernels vs the nodes left to CuPy / cuBLAS /
the attention kernels) and NVRTC's seconds, the old way (every kernel of the graph in one
program: PTX, then the same program to a cubin, which is what the driver's JIT adds at
load) against the new one (one program per distinct kernel, cubins on ``--threads``
threads, cold cache, then warm).

GPU mode (``--gpu``; the integrator's run): the full-size GPT step (12 layers, d=768,
T=1024, batch 8) with fresh Ember and CuPy kernel caches (``--warm``: yours): seconds
of each of the first calls of ``ember.compile(step)`` (call 1 eager, call 2 traced + compiled, call 3 the graph's first
run), the kernel-cache counters (NVRTC programs and seconds, cubin / PTX / CuPy-fallback
modules), then the steady step time.

Run: ``python bench/cuda_compile.py [--layers 12] [--before]`` or ``python
bench/cuda_compile.py --gpu``.
"""
from __future__ import annotations

import argparse
import collections
import importlib.util
import os
import sys
import tempfile
import time

sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(
    os.path.abspath(__file__))]     # NOTE: see bench/cuda.py (the `cuda` package)

HERE = os.path.dirname(os.path.abspath(__file__))
#: ops that are views or free on the GPU (no kernel launch).
FREE = {"reshape", "permute", "slice", "expand", "select", "transpose", "squeeze",
        "unsqueeze", "view", "constant", "as_strided", "alias", "detach"}


def _bench_cuda():
    spec = importlib.util.spec_from_file_location("ember_bench_cuda",
                                                  os.path.join(HERE, "cuda.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _step(em, layers, d, heads, t, batch, vocab):
    """``(step, args)``: one AdamW step of the GPT under float16 autocast."""
    em.manual_seed(0)
    model = _bench_cuda()._gpt_class(em, d=d, n_layers=layers, heads=heads, vocab=vocab,
                                     block=t)().cuda()
    opt = em.optim.AdamW(model.parameters(), lr=3e-4)
    idx = em.randint(0, vocab, (batch, t), device="cuda")
    tgt = em.randint(0, vocab, (batch, t), device="cuda")

    def step(idx, tgt):
        with em.autocast("cuda", dtype=em.float16):
            logits = model(idx)
            loss = em.nn.functional.cross_entropy(logits.view(-1, vocab), tgt.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return step, (idx, tgt)


def census(graph) -> dict:
    """Where a compiled GPU graph's work goes: generated kernels (and how many traced ops
    they hold), cuBLAS products, attention kernels, other launches (CuPy), ops on host
    values (0-d NumPy: a CPU scalar read by a kernel is copied to the GPU there), views."""
    c = collections.Counter()
    other = collections.Counter()
    for n in graph.nodes:
        name = n.op.name
        if name in ("fused", "fused_reduce"):
            c["generated kernels"] += 1
            c["ops in generated kernels"] += len(str(n.params.get("ops", "")).split(","))
        elif name in ("matmul", "linear", "bmm", "addmm"):
            c["cuBLAS"] += 1
        elif name.startswith("sdpa"):
            c["attention kernels"] += 1
        elif name in FREE or getattr(n.op, "view", False):
            c["views (no launch)"] += 1
        elif n.outs and n.outs[0].device.type == "cpu":
            c["host ops (NumPy, 0-d)"] += 1
            other[f"host {name}:{n.outs[0].dtype.name}"] += 1
        else:
            c["other op launches (CuPy or the op's cuda kernel)"] += 1
            other[f"{name}:{n.outs[0].dtype.name if n.outs else ''}"] += 1
    return {"summary": dict(c), "other": other}


def _stand_in(args) -> int:
    os.environ["EMBER_FAKE_CUDA"] = "1"
    os.environ.setdefault("EMBER_GRAPH_CACHE", "0")
    import numpy as np
    import ember as em
    from ember.codegen import cuda_cache, cuda_gemm, nvrtc
    from ember.device.base import cuda_backend
    if not (nvrtc.available() and nvrtc.include_dirs()):
        print("bench/cuda_compile.py: NVRTC or the CUDA headers are missing "
              "(pip install 'ember[nvrtc]'); nothing to measure")
        return 0
    be, _ = cuda_backend()
    be.capabilities = be.capabilities - {"host_kernels"} | {"cuda_kernels"}
    sources = []

    class Stub:                 # NOTE: the traced call is eager; nothing runs the kernels
        def get_function(self, name):
            return lambda grid, block, args, shared_mem=0: None

    def loader(source, name):
        sources.append((source, name))
        return Stub()

    def matmul(xp, x, y, tf32=False, out=None):   # the stand-in has no cuBLAS
        r = np.matmul(x.astype(np.float32), y.astype(np.float32)).astype(x.dtype)
        if out is None:
            return r
        out[...] = r
        return out
    cuda_cache.module_loader, cuda_gemm.matmul = loader, matmul
    step, inputs = _step(em, args.layers, args.d, args.d // 64, args.t, args.batch,
                         args.vocab)
    f = em.compile(step)
    t0 = time.perf_counter()
    with np.errstate(all="ignore"):
        for _ in range(2):          # NOTE: call 1 creates AdamW's state; call 2 traces
            f(*inputs)
    trace_s = time.perf_counter() - t0
    graph = f.graphs()[-1]
    fused = [n.op for n in graph.nodes if n.op.name in ("fused", "fused_reduce")]
    distinct = {op.kernel.name: op for op in fused}
    info = census(graph)
    print(f"GPT {args.layers} layers (d={args.d}, T={args.t}, batch {args.batch}, vocab "
          f"{args.vocab}), stand-in, NVRTC {'.'.join(map(str, nvrtc.version()))} "
          f"({nvrtc.binding()}), {cuda_cache.threads()} compiler threads")
    print(f"two compiled calls (tracing, passes; kernels not compiled): {trace_s:.2f} s")
    print(f"graph: {len(graph.nodes)} nodes; {len(fused)} fused kernels, {len(distinct)} "
          f"distinct (one NVRTC program each)")
    for k, v in sorted(info["summary"].items()):
        print(f"  {k:<28} {v}")
    print("  other launches by op:", ", ".join(f"{k} {v}" for k, v in
                                              info["other"].most_common()))
    _time_nvrtc(args, fused, distinct, sources)
    return 0


def _time_nvrtc(args, fused, distinct, sources) -> None:
    from dataclasses import replace
    from ember.codegen import cuda_cache, nvrtc
    from ember.codegen.render_cuda import render_cuda_many
    from ember.graph.passes.fuse_cuda import strategy
    news = [(op.module.source, op.module.name) for op in distinct.values()]
    attn = [(s, n) for s, n in sources if "ember_flash" in n]
    nth = args.threads or cuda_cache.threads()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["EMBER_KERNEL_CACHE"] = os.path.join(tmp, "k")
        for label, items in (("distinct kernels", news), ("attention modules", attn)):
            for run in ("cold", "warm"):
                cuda_cache._memo.clear()
                before = dict(cuda_cache.stats)
                t0 = time.perf_counter()
                cuda_cache.images(items, "sm_90", "cubin", nthreads=args.threads)
                wall = time.perf_counter() - t0
                cpu = cuda_cache.stats["nvrtc_s"] - before["nvrtc_s"]
                print(f"after: {label} ({len(items)} programs) cubin sm_90, {run} cache: "
                      f"{wall:.2f} s wall, {cpu:.2f} s NVRTC CPU ({nth} threads)")
    if not args.before:
        return
    by: dict = {}
    for i, op in enumerate(fused):
        by.setdefault(strategy(op.kernel), []).append(replace(op.kernel,
                                                              name=f"ember_fused_{i}"))
    for st, ks in by.items():
        src = render_cuda_many(ks, st)
        t0, c0 = time.perf_counter(), time.thread_time()
        nvrtc.compile_ptx(src, f"graph_{st}")
        t_ptx, c_ptx = time.perf_counter() - t0, time.thread_time() - c0
        t0, c0 = time.perf_counter(), time.thread_time()
        nvrtc.compile_cubin(src, f"graph_{st}")
        t_cubin, c_cubin = time.perf_counter() - t0, time.thread_time() - c0
        print(f"before: one program, {len(ks)} kernels ({st}), {len(src) // 1024} KiB: PTX "
              f"{t_ptx:.2f} s wall / {c_ptx:.2f} s CPU (+ the driver's JIT at load, one "
              f"thread), the same to a cubin {t_cubin:.2f} s wall / {c_cubin:.2f} s CPU")


def _gpu(args) -> int:
    if not args.warm:           # NOTE: before CuPy is imported (it reads it once)
        os.environ["EMBER_KERNEL_CACHE"] = tempfile.mkdtemp(prefix="ember-kcache-")
        os.environ["CUPY_CACHE_DIR"] = tempfile.mkdtemp(prefix="cupy-kcache-")
    os.environ.setdefault("EMBER_GRAPH_CACHE", "0")
    import ember as em
    if not em.cuda.is_available() or em.cuda.get_device_properties().name.startswith(
            "Ember fake"):
        print("bench/cuda_compile.py --gpu: no CUDA GPU here; nothing to measure")
        return 0
    from ember.codegen import cuda_cache, nvrtc
    print(f"GPU: {em.cuda.get_device_name()}; caches: "
          f"{'warm (yours)' if args.warm else 'cold (fresh Ember and CuPy folders)'}; "
          f"NVRTC: {_nvrtc_line(nvrtc)}; {cuda_cache.threads()} compiler threads")
    step, inputs = _step(em, args.layers, args.d, args.d // 64, args.t, args.batch,
                         args.vocab)
    f = em.compile(step)
    for i in range(3):
        before = dict(cuda_cache.stats)
        t0 = time.perf_counter()
        f(*inputs)
        em.cuda.synchronize()
        s = time.perf_counter() - t0
        delta = {k: round(cuda_cache.stats[k] - before[k], 2) for k in cuda_cache.stats}
        print(f"GPT {args.layers} layers compiled call {i + 1}: {s:.2f} s  {delta}", flush=True)
    graph = f.graphs()[-1]
    info = census(graph)
    print("graph census:", info["summary"])
    print("  other launches by op:", ", ".join(f"{k} {v}" for k, v in
                                              info["other"].most_common(12)))
    _threads_check(graph)
    ts, host = [], []
    for _ in range(5):
        a, b = em.cuda.Event(enable_timing=True), em.cuda.Event(enable_timing=True)
        a.record()
        t0 = time.perf_counter()
        f(*inputs)
        host.append((time.perf_counter() - t0) * 1e3)
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    # NOTE: host ms close to the step's means the CPU side (the executor's per-node
    # Python, synchronising copies) bounds the step, not the GPU
    print(f"GPT step compiled ms (median of 5): {sorted(ts)[2]:.2f}; host time until "
          f"the call returned: {sorted(host)[2]:.2f} ms")
    return 0


def _threads_check(graph) -> None:
    """The graph's distinct kernels compiled again (fresh memory and disk cache) on one
    thread and on :func:`~ember.codegen.cuda_cache.threads`: NVRTC's parallel speedup."""
    from ember.codegen import cuda_cache
    ops = {n.op.kernel.name: n.op for n in graph.nodes
           if type(n.op).__name__ == "CudaFusedOp"}
    items = [(op.module.source, op.module.name) for op in ops.values()]
    for nth in (1, cuda_cache.threads()):
        cuda_cache._memo.clear()
        os.environ["EMBER_KERNEL_CACHE"] = tempfile.mkdtemp(prefix="ember-kcache-")
        before, t0 = cuda_cache.stats["nvrtc_s"], time.perf_counter()
        try:
            cuda_cache.images(items, cuda_cache.sm(), "cubin", nthreads=nth)
        except Exception as e:      # noqa: BLE001 - no NVRTC here: CuPy compiled them
            print(f"NVRTC check: {type(e).__name__}: {e}")
            return
        print(f"NVRTC: {len(items)} distinct kernels to cubins on {nth} thread(s): "
              f"{time.perf_counter() - t0:.2f} s wall, "
              f"{cuda_cache.stats['nvrtc_s'] - before:.2f} s CPU")


def _nvrtc_line(nvrtc) -> str:
    try:
        return f"{'.'.join(map(str, nvrtc.version()))} via {nvrtc.binding()}, headers " \
               f"{list(nvrtc.include_dirs())}"
    except Exception as e:      # noqa: BLE001 - report it: CuPy's compile takes over
        return f"unavailable ({e})"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu", action="store_true", help="time the first compiled calls on a GPU")
    p.add_argument("--layers", type=int, default=None, help="blocks (2 stand-in, 12 --gpu)")
    p.add_argument("--d", type=int, default=None, help="width (128 stand-in, 768 --gpu)")
    p.add_argument("--t", type=int, default=None, help="sequence (64 stand-in, 1024 --gpu)")
    p.add_argument("--batch", type=int, default=None, help="batch (2 stand-in, 8 --gpu)")
    p.add_argument("--vocab", type=int, default=None, help="(512 stand-in, 50257 --gpu)")
    p.add_argument("--threads", type=int, default=None,
                   help="NVRTC threads (default $EMBER_NVRTC_THREADS or the CPUs)")
    p.add_argument("--warm", action="store_true",
                   help="--gpu: keep your kernel caches (default: fresh Ember/CuPy folders)")
    p.add_argument("--before", action="store_true",
                   help="also time the old one-program-per-graph compile (slow)")
    args = p.parse_args(argv)
    full = dict(layers=12, d=768, t=1024, batch=8, vocab=50257)
    small = dict(layers=2, d=128, t=64, batch=2, vocab=512)
    for k, v in (full if args.gpu else small).items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    return _gpu(args) if args.gpu else _stand_in(args)


if __name__ == "__main__":
    sys.exit(main())
