"""Deferred initialisation on the ``meta`` device: Ember vs PyTorch, medians of alternating runs.

    .venv/bin/python bench/meta_device.py            # ~1 min
    .venv/bin/python bench/meta_device.py --quick    # a small model, a smoke run

The same GPT-shaped stack in both frameworks (token embedding, ``layers`` pre-norm blocks
of LayerNorm, a fused-QKV Linear, an output Linear and a 4x MLP with GELU, a vocabulary
head): its parameters' construction on ``meta`` (no memory, no init), a forward + backward
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
from _common import alternated_medians  # noqa: E402


def model(T, vocab: int, d: int, layers: int):
    nn = T.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
            B, L, _ = x.shape
            q, k, v = (t.view(B, L, 16, d // 16).transpose(1, 2) for t in (q, k, v))
            a = T.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(B, L, d))
            return x + self.out(T.nn.functional.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.head = nn.Linear(d, vocab, bias=False)

        def forward(self, idx):
            x = self.emb(idx)
            for b in self.blocks:
                x = b(x)
            return self.head(x)
    return GPT


def cases(vocab, d, layers, batch, seq):
    import torch

    import ember
    out = []
    for name, T in (("ember", ember), ("torch", torch)):
        GPT = model(T, vocab, d, layers)

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
