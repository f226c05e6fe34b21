"""Ops and kernels of a small GPT training step under autocast, with and without the eager
composites' compiled form (issue 21: "composites that do not step aside").

The model is ``bench/cuda.py``'s GPT (pre-LayerNorm, fused qkv, causal SDPA, tanh GELU,
AdamW), scaled down (``--layers 2 --t 64 --batch 8``; ``--d``/``--vocab`` chosen so a CPU
step takes ~0.1 s). One step is profiled with ``ember.profiler``; an event is counted as a
*primitive* (a registry op the dispatcher ran eagerly: one pass over memory, a kernel on a
GPU; *view* if it is a view op), a *compiled op* (a fused kernel or graph op of an eager
composite's compiled program, reported by the executor) or a *backward node* (an autograd
node's VJP, which runs its own primitives or kernels). ``--before`` runs the composites op by op under autocast (what they
did before: ``eager_composite.set_enabled(False)`` — every composite call of this step is
inside the autocast region, where they used to step aside).

Run: ``python bench/amp_gpt_ops.py [--device cpu|cuda] [--before] [--time N] [--torch]``
(``--device cuda --emu``: the emulated GPU, tiny shapes; on a real GPU ``--device cuda``
counts the same events, ``--time`` then measures CPU time, not the GPU's).
"""
from __future__ import annotations

import argparse
import collections
import importlib.util
import os
import statistics
import sys
import time

sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(
    os.path.abspath(__file__))]

import ember as em  # noqa: E402
from ember.codegen import eager_composite  # noqa: E402
from ember.ops.registry import REGISTRY  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "bench_cuda_gpt", os.path.join(os.path.dirname(os.path.abspath(__file__)), "cuda.py"))
_cuda = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_cuda)


def gpt_step(lib, dev, dtype, d, layers, heads, t, batch, vocab):
    """``step()`` of one AdamW step of the scaled-down GPT under autocast(``dtype``), in
    ``lib`` (ember, or torch as the peer)."""
    lib.manual_seed(0)
    model = _cuda._gpt_class(lib, d=d, n_layers=layers, heads=heads, vocab=vocab,
                             block=t)().to(dev)
    opt = lib.optim.AdamW(model.parameters(), lr=3e-4)
    idx = lib.randint(0, vocab, (batch, t), device=dev)
    tgt = lib.randint(0, vocab, (batch, t), device=dev)

    def step():
        with lib.autocast(dev, dtype=dtype):
            logits = model(idx)
            loss = lib.nn.functional.cross_entropy(logits.view(-1, vocab), tgt.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return step


def classify(name: str) -> str:
    """primitive (view: no pass over memory), backward node, or compiled graph op (what a
    compiled program's executor reports: fused kernels, GEMM/column-sum graph ops)."""
    op = REGISTRY.get(name)
    if op is not None:
        return "view" if op.view else "primitive"
    if name.endswith("Backward"):
        return "backward node"
    return "compiled op"


def count(step):
    with em.profiler.profile() as prof:
        step()
    kinds = collections.Counter()
    names = collections.Counter()
    for e in prof.key_averages():
        k = classify(e.key)
        kinds[k] += e.count
        names[(k, e.key)] += e.count
    return kinds, names


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default=None, help="default: bfloat16 on cpu, float16 on cuda")
    p.add_argument("--d", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--t", type=int, default=64)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--before", action="store_true", help="composites op by op under autocast")
    p.add_argument("--time", type=int, default=0, help="time this many steps (CPU clock)")
    p.add_argument("--names", action="store_true", help="print every event name and count")
    p.add_argument("--torch", action="store_true", help="time PyTorch's step instead")
    p.add_argument("--emu", action="store_true",
                   help="device cuda = the stand-in with a GPU's kernels, their CUDA text run "
                   "by tests/cuda/_cuda_emu.py (slow: use a tiny config)")
    p.add_argument("--threads", type=int, default=1,
                   help="threads of each library (default 1: CPU time = work per step)")
    a = p.parse_args(argv)
    em.set_num_threads(a.threads)
    dtype_name = a.dtype or ("bfloat16" if a.device == "cpu" else "float16")
    shape = (a.d, a.layers, a.heads, a.t, a.batch, a.vocab)
    if a.torch:
        import torch
        torch.set_num_threads(a.threads)
        step = gpt_step(torch, a.device, getattr(torch, dtype_name), *shape)
        _timed("torch", step, max(a.time, 1))
        return 0
    if a.emu:
        _emulated_gpu()
    dtype = getattr(em, dtype_name)
    eager_composite.set_enabled(not a.before)
    step = gpt_step(em, a.device, dtype, *shape)
    for _ in range(eager_composite.WARMUP + 2):     # keys compiled, optimizer state made
        step()
    kinds, names = count(step)
    label = "before" if a.before else "after"
    print(f"{label}: {a.device} {dtype.name} autocast, d={a.d} layers={a.layers} T={a.t} "
          f"batch={a.batch} vocab={a.vocab}: " +
          ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
    if a.names:
        for (k, n), c in sorted(names.items(), key=lambda kv: (kv[0][0], -kv[1])):
            print(f"  {k:<16} {n:<40} {c}")
    if a.time:
        _timed(label, step, a.time)
    return 0


def _emulated_gpu():
    """``cuda`` = the stand-in given a GPU's ``cuda_kernels``, CUDA modules compiled by g++
    under the emulator's shim (``tests/cuda/test_cuda_fusion_emu.py``'s ``emu_gpu``)."""
    import tempfile
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "tests", "cuda"))
    import _cuda_emu
    from ember.codegen import cuda_attention, cuda_cache
    from ember.device.base import cuda_backend, reset_cuda_backend
    os.environ["EMBER_FAKE_CUDA"] = "1"
    reset_cuda_backend()
    be, why = cuda_backend()
    if be is None or not _cuda_emu.available():
        raise SystemExit(f"--emu: no stand-in or no emulator ({why})")
    be.capabilities = be.capabilities - {"host_kernels"} | {"cuda_kernels"}
    tmp = tempfile.mkdtemp(prefix="ember_emu_")
    cuda_cache.module_loader = lambda src, name: _cuda_emu.EmuModule(
        src, tmp, None if "ember_flash_" in src else 2)
    cuda_attention._modules = {}
    from ember.codegen import cuda_gemm
    cuda_gemm.supported = lambda *a, **k: False    # no cuBLAS here: the stand-in's matmul
    # NOTE: the emulator runs a thread per CUDA thread: tiny shapes, so every composite call
    # takes its compiled form regardless of size
    eager_composite.MIN_ELEMENTS = 0


def _timed(label, step, n):
    for _ in range(2):
        step()
    ts = []
    for _ in range(n):
        t0 = time.process_time()
        step()
        ts.append((time.process_time() - t0) * 1e3)
    print(f"{label}: step CPU time median {statistics.median(ts):.2f} ms "
          f"(min {min(ts):.2f}, {n} steps)")


if __name__ == "__main__":
    sys.exit(main())
