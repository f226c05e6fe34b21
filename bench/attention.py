"""Attention forward and forward+backward: Ember's fused ``sdpa`` vs the composite vs NumPy
vs PyTorch, on the W3 GPT's heads ((16, 4, 64, 32), causal, float32; q, k, v as the
permuted views of one packed projection, like the model makes them).

* ``ember``      ``F.scaled_dot_product_attention(q, k, v, is_causal=True)``: the primitive
                 (C kernels: one pass per head, forward and backward),
* ``composite``  the same call with ``FUSED_SDPA`` off: Ember's old path (matmul,
                 masked_fill, softmax, matmul and their backward rules),
* ``numpy``      the primitive's NumPy kernels called directly (what runs without a
                 compiler),
* ``torch``      ``torch.nn.functional.scaled_dot_product_attention`` (its fused CPU
                 flash attention), 2 threads.

Round-robin medians in one process (``bench/eager.py``'s timer); ratios vs torch.

``--against FILE`` instead times the C kernels' module (``attention_kernels.sdpa`` /
``sdpa_grad`` called directly, 1 then 2 threads) against another version of it (e.g.
``git show REV:ember/codegen/attention_kernels.py > /tmp/ak_old.py``), interleaved in
small turns; it prints medians, minimums and the median of the per-turn ratios.

Run:
    .venv/bin/python bench/attention.py [--shape 16,4,64,32] [--no-torch]
    .venv/bin/python bench/attention.py --against /tmp/ak_old.py
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# NOTE: Ember before NumPy: Ember sets OpenBLAS's thread spin (ember/_blas_env.py).
import ember as em  # noqa: E402
import numpy as np  # noqa: E402
import ember.nn.functional as F  # noqa: E402
from ember.nn.functional import _attention as FA  # noqa: E402
from ember.ops import attention as A  # noqa: E402
from eager import compare  # noqa: E402 - round-robin timer

try:
    import torch
    torch.set_num_threads(2)
except ImportError:      # pragma: no cover
    torch = None


def cases(B, H, T, D, with_torch=True):
    rng = np.random.default_rng(0)
    packed = rng.standard_normal((B, T, 3, H, D)).astype(np.float32)
    scale = 1.0 / np.sqrt(D)
    grad = rng.standard_normal((B, H, T, D)).astype(np.float32)

    def ember_views():
        x = em.tensor(packed, requires_grad=True)
        return x, x.permute(2, 0, 3, 1, 4).unbind(0)

    x, (q, k, v) = ember_views()

    def composite(fn):
        def run():
            FA.FUSED_SDPA = False
            try:
                return fn()
            finally:
                FA.FUSED_SDPA = True
        return run
    g = em.tensor(grad)
    nq, nk, nv = (packed.transpose(2, 0, 3, 1, 4)[i] for i in range(3))

    def e_fwd():
        with em.no_grad():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def e_bwd():
        F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(g)
        x.grad = None

    fwd = {"ember": e_fwd, "composite": composite(e_fwd),
           "numpy": lambda: A._sdpa_np(np, nq, nk, nv, scale, True)}
    bwd = {"ember": e_bwd, "composite": composite(e_bwd),
           "numpy": lambda: (A._sdpa_np(np, nq, nk, nv, scale, True),
                             A._sdpa_grad_np(np, grad, nq, nk, nv, scale, True))}
    if torch is not None and with_torch:
        tx = torch.tensor(packed, requires_grad=True)
        tq, tk, tv = tx.permute(2, 0, 3, 1, 4).unbind(0)
        tg = torch.tensor(grad)

        def t_fwd():
            with torch.no_grad():
                return torch.nn.functional.scaled_dot_product_attention(tq, tk, tv,
                                                                        is_causal=True)

        def t_bwd():
            torch.nn.functional.scaled_dot_product_attention(tq, tk, tv,
                                                             is_causal=True).backward(tg)
            tx.grad = None
        fwd["torch"], bwd["torch"] = t_fwd, t_bwd
    return fwd, bwd


def _ms(x):
    return f"{x * 1e3:.3f}"


def against(path, B, H, T, D, turns=60, calls=8):
    """This checkout's kernels vs the ``attention_kernels.py`` at ``path``, turn by turn."""
    import importlib.util
    import time
    from ember.codegen import attention_kernels as new
    from ember.codegen import runtime
    spec = importlib.util.spec_from_file_location("ember.codegen._ak_against", path)
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)                 # its own C library (another source hash)
    old.kernels(), new.kernels()
    rng = np.random.default_rng(0)
    packed = rng.standard_normal((B, T, 3, H, D)).astype(np.float32)
    q, k, v = (packed.transpose(2, 0, 3, 1, 4)[i] for i in range(3))
    g = rng.standard_normal((B, H, T, D)).astype(np.float32)
    sc = 1.0 / np.sqrt(D)
    print(f"attention_kernels ({B}, {H}, {T}, {D}) causal float32 vs {path}, ms per call")
    for th in (1, 2):
        runtime.set_num_threads(th)
        for op in ("fwd", "bwd"):
            res = {"old": [], "new": []}
            for turn in range(turns):
                order = (("old", old), ("new", new))
                for name, m in order[::1 if turn % 2 else -1]:
                    ts = []
                    for _ in range(calls):
                        t0 = time.perf_counter()
                        if op == "fwd":
                            m.sdpa(q, k, v, sc, True)
                        else:
                            m.sdpa_grad(g, q, k, v, sc, True)
                        ts.append(time.perf_counter() - t0)
                    res[name].append((np.median(ts), min(ts)))
            o, n = np.array(res["old"]), np.array(res["new"])
            print(f"{th} thread{'s' if th > 1 else ' '} {op}: "
                  f"old median {_ms(np.median(o[:, 0]))} min {_ms(o[:, 1].min())} | "
                  f"new median {_ms(np.median(n[:, 0]))} min {_ms(n[:, 1].min())} | new/old: "
                  f"per-turn median {np.median(n[:, 0] / o[:, 0]):.3f}, "
                  f"mins {n[:, 1].min() / o[:, 1].min():.3f}")
    runtime.set_num_threads(None)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="16,4,64,32", help="B,H,T,D")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--quick", action="store_true", help="smoke run (times not meaningful)")
    ap.add_argument("--against", metavar="FILE", help="another attention_kernels.py")
    args = ap.parse_args()
    B, H, T, D = (int(s) for s in args.shape.split(","))
    if args.against:
        return against(args.against, B, H, T, D, **(dict(turns=2, calls=1) if args.quick else {}))
    fwd, bwd = cases(B, H, T, D, not args.no_torch)
    kw = dict(min_time=0.01, repeat=1) if args.quick else {}
    print(f"attention ({B}, {H}, {T}, {D}) causal float32, median ms per call")
    for name, fns in (("fwd", fwd), ("fwd+bwd", bwd)):
        t = compare(fns, **kw)
        base = t.get("torch", t["ember"])
        row = "  ".join(f"{k} {v * 1e3:7.3f} ({v / base:4.2f}x)" for k, v in t.items())
        print(f"{name:8s} {row}")


if __name__ == "__main__":
    main()
