"""Ember on a CUDA GPU beside PyTorch on the same GPU, in one process (issue 21).

Needs CuPy and an NVIDIA GPU (and PyTorch with CUDA for the peer column); without a GPU it
says so and exits 0. Prints, side by side (medians of alternating runs, events timing):

* matmul TFLOP/s in float32 and bfloat16 (n = 4096), Ember vs ``torch.matmul``;
* a GELU's GB/s (Ember eager, Ember compiled) against a device-to-device copy's;
* W1 (MLP 64-256-10, batch 256, AdamW) step time, eager and compiled, vs PyTorch eager;
* W1-W3 of ``bench/train.py`` (MLP 784-512-512-10 SGD, CNN 32x32 SGD, a 4-layer GPT with
  AdamW; float32, their sizes and data) eager and compiled, vs PyTorch eager and
  ``torch.compile`` (``--only workloads``);
* a GPT training step (d=768, 12 layers, 12 heads, T=1024, batch 8, vocab 50257, AdamW,
  bf16 autocast where the backend stores bfloat16, else float16): Ember eager, compiled
  and compiled with ``mode="reduce-overhead"`` (CUDA graphs) vs PyTorch eager,
  ``torch.compile`` and ``torch.compile(mode="reduce-overhead")`` (issue 21's targets:
  compiled <= 1.0x PyTorch eager, <= 1.3x torch.compile); ``--no-gpt`` leaves it out.

Run: ``python bench/cuda.py`` (``--quick``: fewer repetitions).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

# NOTE: run as a script, this file's folder leads sys.path, and this file's name would then
# shadow the `cuda` package (cuda-bindings) that CuPy imports
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(
    os.path.abspath(__file__))]

import ember as em  # noqa: E402


def _time(fn, reps: int, sync, warm: int = 2) -> float:
    """Median milliseconds of ``fn()`` over ``reps`` runs (after ``warm`` warm-ups)."""
    for _ in range(warm):
        fn()
    sync()
    out = []
    for _ in range(reps):
        a, b = em.cuda.Event(enable_timing=True), em.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b))
    return statistics.median(out)


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def matmul_rows(reps, torch):
    n = 4096
    rows = []
    for dt, tdt in ((em.float32, "float32"), (em.bfloat16, "bfloat16")):
        try:        # NOTE: bfloat16 needs CuPy >= 14 + ml_dtypes: report, keep going
            a = em.randn(n, n, device="cuda").to(dt)
            ms = _time(lambda: a @ a, reps, em.cuda.synchronize)
        except Exception as e:     # noqa: BLE001
            print(f"matmul {tdt}: failed: {type(e).__name__}: {e}")
            ms = float("nan")
        peer = None
        if torch is not None:
            ta = torch.randn(n, n, device="cuda", dtype=getattr(torch, tdt))
            peer = _time(lambda: ta @ ta, reps, torch.cuda.synchronize)
        flops = 2 * n ** 3 / 1e12
        rows.append((f"matmul {tdt} n={n} TFLOP/s", flops / (ms / 1e3),
                     None if peer is None else flops / (peer / 1e3)))
    return rows


def gelu_rows(reps, torch):
    """GELU's GB/s against the device's copy bandwidth: ``cudaMemcpy`` device-to-device
    (the ceiling issue 21's 80 % target is read against) and ``clone()`` in each library
    (an elementwise kernel)."""
    import cupy
    n = 1 << 26
    x = em.randn(n, device="cuda")
    gb = 2 * 4 * n / 1e9
    dst = cupy.empty(n, cupy.float32)
    src = x._data

    def memcpy():
        cupy.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, 4 * n,
                                      cupy.cuda.runtime.memcpyDeviceToDevice,
                                      cupy.cuda.get_current_stream().ptr)
    f = em.compile(lambda x: em.nn.functional.gelu(x, approximate="tanh"))
    ceiling = gb / (_time(memcpy, reps, em.cuda.synchronize) / 1e3)
    rows = [("cudaMemcpy D2D GB/s", ceiling, None),
            ("clone GB/s", gb / (_time(lambda: x.clone(), reps, em.cuda.synchronize) / 1e3),
             None),
            ("GELU eager GB/s", gb / (_time(lambda: em.nn.functional.gelu(
                x, approximate="tanh"), reps, em.cuda.synchronize) / 1e3), None),
            ("GELU compiled GB/s", gb / (_time(lambda: f(x), reps, em.cuda.synchronize) / 1e3),
             None)]
    rows.append(("GELU compiled % of memcpy", 100 * rows[3][1] / ceiling, None))
    if torch is not None:
        tx = torch.randn(n, device="cuda")
        ms = _time(lambda: tx.clone(), reps, torch.cuda.synchronize)
        rows[1] = rows[1][:2] + (gb / (ms / 1e3),)
        ms = _time(lambda: torch.nn.functional.gelu(tx, approximate="tanh"), reps,
                   torch.cuda.synchronize)
        rows[2] = rows[2][:2] + (gb / (ms / 1e3),)
    return rows


def bandwidth_rows(reps, torch):
    """GB/s of memory-bound elementwise work (2 x 4 bytes per float32 element): the copy
    ceiling, ``clone``, ``x * 2``, eager and compiled GELU (tanh), Ember vs PyTorch; then
    ``x * 2`` by size with the eager kernels on and off (``cuda_eager.THRESHOLD``'s data)."""
    import cupy
    from ember import config
    n = 1 << 26
    x = em.randn(n, device="cuda")
    gb = 2 * 4 * n / 1e9
    dst, src = cupy.empty(n, cupy.float32), x._data

    def memcpy():
        cupy.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, 4 * n,
                                      cupy.cuda.runtime.memcpyDeviceToDevice,
                                      cupy.cuda.get_current_stream().ptr)
    gelu = em.nn.functional.gelu
    f = em.compile(lambda x: gelu(x, approximate="tanh"))
    cases = [("cudaMemcpy D2D GB/s", memcpy, None),
             ("clone GB/s", lambda: x.clone(), lambda t: t.clone()),
             ("x*2 GB/s", lambda: x * 2, lambda t: t * 2),
             ("GELU eager GB/s", lambda: gelu(x, approximate="tanh"),
              lambda t: torch.nn.functional.gelu(t, approximate="tanh")),
             ("GELU compiled GB/s", lambda: f(x), None)]
    tx = torch.randn(n, device="cuda") if torch is not None else None
    rows = []
    for name, mine, peer in cases:
        ms = _time(mine, reps, em.cuda.synchronize)
        pms = None if peer is None or tx is None else _time(lambda: peer(tx), reps,
                                                           torch.cuda.synchronize)
        rows.append((name, gb / (ms / 1e3), None if pms is None else gb / (pms / 1e3)))
    rows.append(("GELU compiled % of memcpy", 100 * rows[4][1] / rows[0][1], None))
    for p in (16, 18, 20, 22):
        y = em.randn(1 << p, device="cuda")
        on = _time(lambda: y * 2, reps, em.cuda.synchronize)
        config.EAGER_KERNELS = False
        try:
            off = _time(lambda: y * 2, reps, em.cuda.synchronize)
        finally:
            config.EAGER_KERNELS = True
        rows.append((f"x*2 n=2^{p} us kernel|cupy", on * 1e3, off * 1e3))
    return rows


def w1_rows(reps, torch):
    em.manual_seed(0)
    m = em.nn.Sequential(em.nn.Linear(64, 256), em.nn.GELU(), em.nn.Linear(256, 10)).cuda()
    opt = em.optim.AdamW(m.parameters(), lr=1e-3)
    x, y = em.randn(256, 64, device="cuda"), em.randint(0, 10, (256,), device="cuda")

    def step(x, y):
        loss = em.nn.functional.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss
    comp = em.compile(step)
    rows = [("W1 step eager ms", _time(lambda: step(x, y), reps, em.cuda.synchronize), None),
            ("W1 step compiled ms", _time(lambda: comp(x, y), reps, em.cuda.synchronize),
             None)]
    if torch is not None:
        tm = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(),
                                 torch.nn.Linear(256, 10)).cuda()
        topt = torch.optim.AdamW(tm.parameters(), lr=1e-3)
        tx, ty = torch.randn(256, 64, device="cuda"), torch.randint(0, 10, (256,), device="cuda")

        def tstep():
            loss = torch.nn.functional.cross_entropy(tm(tx), ty)
            loss.backward()
            topt.step()
            topt.zero_grad()
        rows[0] = rows[0][:2] + (_time(tstep, reps, torch.cuda.synchronize),)
    return rows


#: bench/train.py's workloads timed on the GPU (``workload_rows``).
WORKLOADS = ("W1 MLP SGD", "W2 CNN SGD", "W3 GPT AdamW")


def _workload_step(lib, name):
    """``step()`` of ``bench/train.py``'s workload ``name`` built in ``lib`` on ``cuda``
    (model and data moved there; ``Module.cuda`` keeps the optimizer's parameters)."""
    import numpy as np
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.append(here)        # NOTE: appended: the `cuda` package name (above)
    from train import WORKLOADS as ALL, make_step
    wl = ALL[name]
    lib.manual_seed(0)
    model, opt = wl.build(lib, **wl.size)
    model.cuda()
    x, y = wl.data(np.random.default_rng(0), **wl.size)
    return make_step(lib, model, opt, lib.tensor(x).cuda(), lib.tensor(y).cuda())


def workload_rows(reps, torch):
    """W1-W3 (``WORKLOADS``) eager beside PyTorch eager, compiled beside torch.compile."""
    rows = []
    for name in WORKLOADS:
        for label, mine, theirs in (("eager", lambda f: f, lambda f: f),
                                    ("compiled", em.compile,
                                     lambda f: torch.compile(f))):
            try:
                fn = mine(_workload_step(em, name))
                ms = _time(fn, reps, em.cuda.synchronize, warm=5)
            except Exception as e:     # noqa: BLE001 - report, keep benchmarking
                print(f"{name} {label}: failed: {type(e).__name__}: {e}")
                ms = float("nan")
            peer = None
            if torch is not None:
                try:
                    tfn = theirs(_workload_step(torch, name))
                    peer = _time(tfn, reps, torch.cuda.synchronize, warm=5)
                except Exception as e:     # noqa: BLE001 - no Triton etc.
                    print(f"torch {name} {label}: failed: {type(e).__name__}: {e}")
            rows.append((f"{name} {label} ms", ms, peer))
    return rows


def _gpt_class(lib, d=768, n_layers=12, heads=12, vocab=50257, block=1024):
    """The same GPT (pre-LayerNorm, fused qkv, causal SDPA, tanh GELU) for ``lib`` (ember
    or torch): the two libraries share the nn API, so one definition serves both."""
    nn, F = lib.nn, lib.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, heads, c // heads).permute(
                2, 0, 3, 1, 4).unbind(0)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, c))
            return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(block, d)
            self.blocks = nn.ModuleList([Block() for _ in range(n_layers)])
            self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

        def forward(self, idx):
            x = self.tok(idx) + self.pos(lib.arange(idx.shape[1], device=idx.device))
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.ln(x))
    return GPT


def _gpt_step(lib, dtype, batch=8, t=1024, vocab=50257):
    """``step()`` of one AdamW training step of the GPT under autocast(``dtype``)."""
    lib.manual_seed(0)
    model = _gpt_class(lib)().cuda()
    opt = lib.optim.AdamW(model.parameters(), lr=3e-4)
    idx = lib.randint(0, vocab, (batch, t), device="cuda")
    tgt = lib.randint(0, vocab, (batch, t), device="cuda")

    def step(idx, tgt):
        with lib.autocast("cuda", dtype=dtype):
            logits = model(idx)
            loss = lib.nn.functional.cross_entropy(logits.view(-1, vocab), tgt.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return step, (idx, tgt)


def gpt_rows(reps, torch, compiled=True):
    """The GPT step's rows in bfloat16 where the backend has it (CuPy >= 14 + ml_dtypes),
    and in float16 too when a bfloat16 row failed at run time (reported, not fatal)."""
    reps = max(3, reps // 4)
    from ember.device.base import get_backend
    bf16 = get_backend(em.device("cuda")).has("bfloat16")
    rows = _gpt_dtype_rows("bfloat16" if bf16 else "float16", reps, torch, compiled)
    if bf16 and any(r[1] != r[1] for r in rows):       # NOTE: NaN: a bfloat16 row failed
        print("GPT step: bfloat16 failed; float16 rows follow", flush=True)
        rows += _gpt_dtype_rows("float16", reps, torch, compiled)
    return rows


#: the GPT rows: (label, ember.compile mode or None for eager, torch.compile mode)
GPT_MODES = (("eager", None, None), ("compiled", "default", "default"),
             ("reduce-overhead", "reduce-overhead", "reduce-overhead"))


def _gpt_dtype_rows(name, reps, torch, compiled):
    """Ember's eager, compiled and CUDA-graph (``mode="reduce-overhead"``) GPT steps, each
    beside PyTorch's eager, ``torch.compile`` and ``torch.compile(mode="reduce-overhead")``."""
    rows = []
    for label, mode, _ in GPT_MODES[:len(GPT_MODES) if compiled else 1]:
        try:
            step, args = _gpt_step(em, getattr(em, name))
            fn = step if mode is None else em.compile(step, mode=mode)
            # NOTE: 5 warm-ups: eager composites record on a first call, compile later
            # (and a CUDA graph is captured at the program's third call)
            ms = _time(lambda: fn(*args), reps, em.cuda.synchronize, warm=5)
        except Exception as e:     # noqa: BLE001 - report, keep benchmarking
            print(f"GPT step {name} {label}: failed: {type(e).__name__}: {e}")
            ms = float("nan")
        print(f"  (ember GPT {label}: {ms:.2f} ms)", flush=True)
        rows.append((f"GPT step {name} {label} ms", ms, None))
    if torch is None or all(r[1] != r[1] for r in rows):
        return rows
    for k, (label, _, tmode) in enumerate(GPT_MODES[:len(rows)]):
        try:
            step, args = _gpt_step(torch, getattr(torch, name))
            fn = step if tmode is None else torch.compile(step, mode=tmode)
            ms = _time(lambda: fn(*args), reps, torch.cuda.synchronize, warm=5)
        except Exception as e:     # noqa: BLE001 - no Triton etc.
            print(f"torch GPT step {label} failed: {type(e).__name__}: {e}")
            continue
        rows[k] = rows[k][:2] + (ms,)
        print(f"  (torch GPT {label}: {ms:.2f} ms)", flush=True)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--no-gpt", action="store_true", help="leave out the GPT step")
    p.add_argument("--only", nargs="+", choices=["matmul", "gelu", "bandwidth", "w1",
                                                 "workloads", "gpt", "gpt-eager"],
                   help="these sections only (bandwidth: clone, x*2, GELU vs memcpy and "
                   "PyTorch; gpt-eager: the GPT step eager only)")
    args = p.parse_args(argv)
    if not em.cuda.is_available():
        from ember.device.base import cuda_backend
        print(f"bench/cuda.py: no CUDA GPU here ({cuda_backend()[1]}); nothing to measure")
        return 0
    if em.cuda.get_device_properties().name.startswith("Ember fake"):
        print("bench/cuda.py: EMBER_FAKE_CUDA is a CPU stand-in; timings would mean nothing")
        return 0
    reps = 5 if args.quick else 20
    torch = _torch()
    print(f"GPU: {em.cuda.get_device_name()}; PyTorch peer: "
          f"{torch.__version__ if torch else 'not available'}")
    print(f"{'benchmark':<28} {'ember':>12} {'torch':>12}")
    sections = [matmul_rows, gelu_rows, w1_rows, workload_rows] + (
        [] if args.no_gpt else [gpt_rows])
    if args.only:
        table = {"matmul": matmul_rows, "gelu": gelu_rows, "bandwidth": bandwidth_rows,
                 "w1": w1_rows, "workloads": workload_rows, "gpt": gpt_rows,
                 "gpt-eager": lambda r, t: gpt_rows(r, t, compiled=False)}
        sections = [table[s] for s in args.only]
    for section in sections:
        for name, mine, peer in section(reps, torch):
            print(f"{name:<28} {mine:>12.2f} {'-' if peer is None else f'{peer:.2f}':>12}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
