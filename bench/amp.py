"""Mixed precision (issue 16): float16/bfloat16 kernels and autocast training steps.

Three tables, one process:

1. **matmul GFLOP/s** at 512² and 2048²: Ember float32 / float16 / bfloat16 (``x @ y`` on
   tensors: bfloat16 on the AMX tiles where the CPU and Linux allow them,
   ``ember/codegen/lowp_gemm.py``; otherwise, and for float16, two operands converted to
   float32 at memory speed, one float32 BLAS call, the result rounded once;
   ``EMBER_LOWP_GEMM=off`` forces the latter) beside PyTorch CPU in the same dtypes when
   installed. Target:
   float16/bfloat16 >= 0.8x Ember's float32 (ratios of medians, and of the best times:
   the one less disturbed when other jobs share the machine).
2. **conversion GB/s** (bytes read + written) of ``.float()`` / ``.half()`` /
   ``.bfloat16()`` on 4M elements against ``np.copyto`` of the float32 array (memcpy) and
   NumPy's ``astype`` (what Ember ran before).
3. **W1-W3 training steps** (bench/train.py's models and data), eager and through
   ``ember.compile``: float32, bf16 under ``ember.autocast``, fp16 under autocast +
   ``GradScaler`` (compiled: the scaler's step/update eager, or ``fp16-whole``: inside the
   one graph, its skip a ``where``): median step time, activation memory (the allocator's peak during one
   step above the bytes alive before it) and the loss after ``--steps`` steps; PyTorch
   CPU eager float32 and bf16 autocast beside it when installed (no ``torch.compile``).

Medians of interleaved repeats (the machine is shared: rerun before quoting).

Run:
    .venv/bin/python bench/amp.py [--quick] [--no-torch] [--no-train] [--no-kernels]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# NOTE: Ember before NumPy: Ember sets OpenBLAS's thread spin (ember/_blas_env.py).
import ember  # noqa: E402
import numpy as np  # noqa: E402

DTYPES = ("float32", "float16", "bfloat16")


def _torch(enabled: bool):
    if not enabled:
        return None
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(ember.get_num_threads() if hasattr(ember, "get_num_threads")
                          else 2)
    return torch


def _median(fns: dict, repeats: int, best: bool = False) -> dict:
    """Median (``best``: also the minimum) seconds of each function, called round-robin
    ``repeats`` times after one warm-up call each."""
    times = {k: [] for k in fns}
    for f in fns.values():
        f()
    for _ in range(repeats):
        for k, f in fns.items():
            t = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    return (med, {k: min(v) for k, v in times.items()}) if best else med


def bench_matmul(sizes, repeats, torch) -> None:
    print("\n## matmul GFLOP/s (x @ y, n x n; load average %.2f %.2f %.2f)" % os.getloadavg())
    print(f"{'n':>6} " + " ".join(f"{'ember ' + d:>15}" for d in DTYPES) +
          ("  " + " ".join(f"{'torch ' + d:>15}" for d in DTYPES) if torch else "") +
          f"  {'f16/f32':>8} {'bf16/f32':>8}  (best of: {'f16/f32':>7} {'bf16/f32':>8})")
    rng = np.random.default_rng(0)
    for n in sizes:
        a = rng.standard_normal((n, n)).astype(np.float32)
        b = rng.standard_normal((n, n)).astype(np.float32)
        fns = {}
        for d in DTYPES:
            x, y = ember.tensor(a).to(getattr(ember, d)), ember.tensor(b).to(getattr(ember, d))
            fns["ember " + d] = (lambda x=x, y=y: x @ y)
            if torch:
                tx = torch.from_numpy(a).to(getattr(torch, d))
                ty = torch.from_numpy(b).to(getattr(torch, d))
                fns["torch " + d] = (lambda x=tx, y=ty: x @ y)
        med, low = _median(fns, repeats if n <= 1024 else max(3, repeats // 4), best=True)
        gf = {k: 2 * n ** 3 / v / 1e9 for k, v in med.items()}
        bf = {k: low["ember float32"] / low["ember " + d] for k, d in
              (("f16", "float16"), ("bf16", "bfloat16"))}
        row = " ".join(f"{gf['ember ' + d]:15.1f}" for d in DTYPES)
        if torch:
            row += "  " + " ".join(f"{gf['torch ' + d]:15.1f}" for d in DTYPES)
        f32 = gf["ember float32"]
        print(f"{n:>6} {row}  {gf['ember float16'] / f32:8.2f} {gf['ember bfloat16'] / f32:8.2f}"
              f"  {'':10}{bf['f16']:7.2f} {bf['bf16']:8.2f}")


def bench_convert(n, repeats) -> None:
    print(f"\n## conversion GB/s ({n} elements, bytes read + written)")
    rng = np.random.default_rng(0)
    a = rng.standard_normal(n).astype(np.float32)
    f32 = ember.tensor(a)
    dst = np.empty_like(a)
    rows = {"memcpy float32 (np.copyto)": (lambda: np.copyto(dst, a), 8 * n)}
    for d, short in (("float16", "half"), ("bfloat16", "bfloat16")):
        low = f32.to(getattr(ember, d))
        lnp = low.numpy()
        rows[f"ember .{short}()  f32 -> {d}"] = (getattr(f32, short), 6 * n)
        rows[f"ember .float()  {d} -> f32"] = (low.float, 6 * n)
        rows[f"numpy astype    f32 -> {d}"] = (lambda d=d: a.astype(getattr(ember, d).np),
                                               6 * n)
        rows[f"numpy astype    {d} -> f32"] = (lambda x=lnp: x.astype(np.float32), 6 * n)
    med = _median({k: v[0] for k, v in rows.items()}, repeats)
    for k, (_, nbytes) in rows.items():
        print(f"{k:34s} {nbytes / med[k] / 1e9:7.1f} GB/s  ({med[k] * 1e3:.2f} ms)")


def _amp_step(lib, wl, mode, steps, tiny, compiled=False):
    """(median step seconds, activation bytes, final loss) of ``wl`` in ``lib`` under
    ``mode`` ("fp32", "bf16" autocast, "fp16" autocast + GradScaler, "fp16-whole" the
    same); ``compiled``: the step (fp16: forward + scaled backward, the scaler's
    step/update eager; fp16-whole: all of it, one graph) through ``ember.compile``. Activation bytes: Ember's allocator peak above the bytes alive
    before one step (None for PyTorch)."""
    size = dict(wl.tiny if tiny else wl.size)
    lib.manual_seed(0)
    model, opt = wl.build(lib, **size)
    x, y = wl.data(np.random.default_rng(0), **size)
    x, y = lib.tensor(x), lib.tensor(y)
    F = lib.nn.functional
    dt = {"bf16": lib.bfloat16, "fp16": lib.float16, "fp16-whole": lib.float16}.get(mode)
    scaler = lib.amp.GradScaler("cpu") if mode.startswith("fp16") else None

    def fwd_bwd():
        opt.zero_grad()
        with lib.autocast("cpu", dtype=dt or lib.bfloat16, enabled=dt is not None):
            out = model(x)
            loss = F.cross_entropy(out.reshape(-1, out.shape[-1]).float(), y.reshape(-1))
        (scaler.scale(loss) if scaler is not None else loss).backward()
        return loss

    def whole():
        loss = fwd_bwd()
        opt.step()
        return loss

    def scaled():
        loss = fwd_bwd()
        scaler.step(opt)
        scaler.update()
        return loss

    if scaler is None:
        step = ember.compile(whole) if compiled else whole
    elif mode == "fp16-whole":
        step = ember.compile(scaled) if compiled else scaled
    else:
        inner = ember.compile(fwd_bwd) if compiled else fwd_bwd

        def step():
            loss = inner()
            scaler.step(opt)
            scaler.update()
            return loss

    times, loss, act = [], None, None
    for i in range(steps):
        if lib is ember and i == steps // 2:
            ember.reset_peak_memory_stats()
            base = ember.memory_stats()["current_bytes"]
        t = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - t)
        if lib is ember and i == steps // 2:
            act = ember.memory_stats()["peak_bytes"] - base
    return statistics.median(times[2:] or times), act, float(loss.item())


def _cell(fn) -> str:
    try:
        s, act, loss = fn()
    except Exception as e:                   # report, keep benchmarking the rest
        return f"error: {type(e).__name__}: {str(e)[:60]}"
    mem = f"{act / 2 ** 20:7.2f} MiB" if act is not None else " " * 11
    return f"{s * 1e3:8.1f} ms {mem} {loss:7.4f}"


def bench_train(steps, torch, tiny=False) -> None:
    import train as tb                       # bench/train.py: the same W1-W3 as elsewhere
    print(f"\n## W1-W3 training steps: median step, activation peak, loss after {steps} "
          f"steps")
    for name in ("W1 MLP SGD", "W2 CNN SGD", "W3 GPT AdamW"):
        wl = tb.WORKLOADS[name]
        for compiled in (False, True):
            for m in ("fp32", "bf16", "fp16") + (("fp16-whole",) if compiled else ()):
                label = f"ember {'compiled' if compiled else 'eager   '} {m}"
                print(f"{name:14s} {label:24s} "
                      f"{_cell(lambda: _amp_step(ember, wl, m, steps, tiny, compiled))}",
                      flush=True)
        if torch:
            for m in ("fp32", "bf16"):
                print(f"{name:14s} {'torch eager    ' + m:24s} "
                      f"{_cell(lambda: _amp_step(torch, wl, m, steps, tiny))}", flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="smoke run: small sizes, few repeats")
    p.add_argument("--no-torch", action="store_true", help="leave PyTorch out")
    p.add_argument("--no-train", action="store_true", help="kernels only (tables 1-2)")
    p.add_argument("--no-kernels", action="store_true", help="training steps only (table 3)")
    p.add_argument("--steps", type=int, default=50, help="training steps per configuration")
    args = p.parse_args(argv)
    torch = _torch(not args.no_torch)
    ember.show_config() if hasattr(ember, "show_config") and not args.quick else None
    if args.no_kernels:
        pass
    elif args.quick:
        bench_matmul((64,), 3, torch)
        bench_convert(1 << 16, 3)
    else:
        bench_matmul((512, 2048), 100, torch)     # 512²: ~1 ms a call; 2048²: 25 repeats
        bench_convert(1 << 22, 20)
    if not args.no_train:
        bench_train(3 if args.quick else args.steps, torch, tiny=args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
