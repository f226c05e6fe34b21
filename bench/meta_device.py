"""Deferred initialisation on the ``meta`` device: Ember vs PyTorch, medians of alternating runs.

    .venv/bin/python bench/meta_device.py            # ~1 min
    .venv/bin/python bench/meta_device.py --quick    # a small model, a smoke run

The same GPT in both frameworks (``bench/cuda.py``'s: token and position embeddings,
``layers`` pre-norm blocks with a fused-QKV Linear, causal SDPA and a 4x tanh-GELU MLP, a
vocabulary head): its parameters' construction on ``meta`` (no memory, no init), a forward + backward
of a (2, 1024) batch on ``meta`` (shapes only), and, for scale, the same construction on
the CPU with real memory and initialisation. Python-heap peaks come from ``tracemalloc``
(PyTorch's C++ allocations are invisible to it; on meta neither framework allocates data).
"""
from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))   # NOTE: the smoke test loads us by path
from _common import alternated_medians, load_bench  # noqa: E402


def cases(vocab, d, layers, batch, seq):
    import torch

    import ember
    out = []
    gpt_class = load_bench("cuda")._gpt_class     # the GPT bench/cuda.py times on a GPU
    for name, T in (("ember", ember), ("torch", torch)):
        GPT = gpt_class(T, d=d, n_layers=layers, heads=max(d // 64, 1), vocab=vocab, block=seq)

        def build(T=T, GPT=GPT):
            with T.device("meta"):
                return GPT()

        def step(T=T, build=build):
            m = build()
            idx = T.randint(0, vocab, (batch, seq), device="meta")
            logits = m(idx)
            assert tuple(logits.shape) == (batch, seq, vocab) and logits.is_meta
            T.nn.functional.cross_entropy(logits.view(-1, vocab), idx.view(-1)).backward()
            return m

        def real(GPT=GPT):
            return GPT()
        out.append((name, build, step, real))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    import torch
    torch.set_num_threads(2)
    vocab, d, layers, batch, seq, reps = ((512, 64, 2, 2, 32, 3) if args.quick else
                                         (50257, 1024, 24, 2, 1024, 5))
    cs = cases(vocab, d, layers, batch, seq)
    n = sum(p.numel() for p in cs[0][1]().parameters())
    print(f"GPT stack: vocab {vocab}, d {d}, {layers} layers: {n / 1e6:.1f} M parameters "
          f"({n * 4 / 2**30:.2f} GiB float32)\n")
    rows = []
    for what, k in (("build on meta", 1), ("build + fwd/bwd on meta", 2)):
        (te, tt) = alternated_medians([cs[0][k], cs[1][k]], reps)
        rows.append((what, te, tt))
    (te, tt) = alternated_medians([cs[0][3], cs[1][3]], 1 if not args.quick else 2)
    rows.append(("build on the CPU (real init)", te, tt))
    print(f"{'':32s} {'ember':>10s} {'torch':>10s} {'ember/torch':>12s}")
    for what, te, tt in rows:
        print(f"{what:32s} {te * 1e3:8.1f}ms {tt * 1e3:8.1f}ms {te / tt:11.2f}x")
    tracemalloc.start()
    t0 = time.perf_counter()
    cs[0][2]()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(f"\nember build + fwd/bwd on meta: Python heap peak {peak / 2**20:.1f} MiB "
          f"({time.perf_counter() - t0:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
