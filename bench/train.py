"""Training-step benchmark: Ember vs PyTorch eager, side by side in one process.

Each workload is written ONCE against a library handle ``lib`` (``ember`` or ``torch``): the
models, losses and optimizers below are exactly what a PyTorch user writes, so the same code
builds both versions. PyTorch's initial weights are copied into Ember through ``state_dict``
(NumPy arrays) and both see the same data, so the first two losses must agree (rtol 1e-4)
before anything is timed.

Workloads (issue 3, item 10; targets are Ember step time / PyTorch eager step time):
  W1 MLP  batch 128, 784-512-512-10, ReLU, cross-entropy; SGD and Adam       target <= 0.8x
  W2 CNN  batch 64, 3x32x32, conv32-pool-conv64-pool-fc128-fc10, CE, SGD      target <= 1.2x
  W3 GPT  vocab 256, ctx 64, batch 16, d 128, 4 heads, 4 layers, pre-LN,
          MLP 512 GELU, causal attention, AdamW                               target <= 1.2x

A step is ``zero_grad(); loss = F.cross_entropy(model(x), y); loss.backward(); opt.step()``.
The libraries take turns (round-robin, a 50 ms pause between turns so the other library's
spinning BLAS/OpenMP threads park); each step is timed on its own and the median is reported.

Run:
    .venv/bin/python bench/train.py            # full run (about a minute on 2 cores)
    .venv/bin/python bench/train.py --quick    # smoke run
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

# NOTE: benchmark this checkout's Ember even when it is not pip-installed in the venv.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# NOTE: Ember before NumPy: Ember sets OpenBLAS's thread spin (ember/_blas_env.py).
import ember  # noqa: E402
import numpy as np  # noqa: E402


def _import_torch():
    """PyTorch, or None when it is not installed (``pip install -e '.[bench]'`` adds it)."""
    try:
        import torch
    except Exception:  # noqa: BLE001 - torch is optional
        return None
    return torch

LOSS_RTOL = 1e-4


# ------------------------------------------------------------------------ workloads
@dataclass
class Workload:
    """One benchmark: a model/optimizer builder, its data shapes and the target ratio."""
    name: str
    build: Callable            # build(lib, **size) -> (model, optimizer)
    data: Callable             # data(rng, **size) -> (x, y) NumPy arrays
    target: float
    size: dict = field(default_factory=dict)
    tiny: dict = field(default_factory=dict)


def build_mlp(lib, sizes=(784, 512, 512, 10), optim="sgd", **_):
    nn = lib.nn
    layers = []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers += [nn.Linear(n_in, n_out)] + ([nn.ReLU()] if i < len(sizes) - 2 else [])
    model = nn.Sequential(*layers)
    if optim == "adam":
        return model, lib.optim.Adam(model.parameters(), lr=1e-3)
    return model, lib.optim.SGD(model.parameters(), lr=0.01)


def mlp_data(rng, sizes=(784, 512, 512, 10), batch=128, **_):
    return (rng.standard_normal((batch, sizes[0]), dtype=np.float32),
            rng.integers(0, sizes[-1], batch))


def build_cnn(lib, hw=32, **_):
    nn = lib.nn
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * (hw // 4) ** 2, 128), nn.ReLU(), nn.Linear(128, 10))
    return model, lib.optim.SGD(model.parameters(), lr=0.01)


def cnn_data(rng, hw=32, batch=64, **_):
    return rng.standard_normal((batch, 3, hw, hw), dtype=np.float32), rng.integers(0, 10, batch)


def make_gpt(lib, vocab=256, ctx=64, d_model=128, heads=4, layers=4, d_mlp=512, attn="sdpa"):
    """A pre-LayerNorm GPT (nanoGPT-style), defined once for any library with torch's API.

    ``attn="sdpa"`` projects q, k, v with one Linear and calls
    ``F.scaled_dot_product_attention(..., is_causal=True)``; ``attn="mha"`` uses
    ``nn.MultiheadAttention`` with a causal mask.
    """
    nn, F = lib.nn, lib.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
            if attn == "mha":
                self.attn = nn.MultiheadAttention(d_model, heads, batch_first=True)
                self.register_buffer("mask", lib.ones(ctx, ctx, dtype=lib.bool).triu(1),
                                     persistent=False)
            else:
                self.qkv, self.proj = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
            self.fc, self.out = nn.Linear(d_model, d_mlp), nn.Linear(d_mlp, d_model)

        def attend(self, x):
            B, T, C = x.shape
            if attn == "mha":
                mask = self.mask[:T, :T]
                return self.attn(x, x, x, attn_mask=mask, need_weights=False, is_causal=True)[0]
            q, k, v = self.qkv(x).view(B, T, 3, heads, C // heads).permute(2, 0, 3, 1, 4).unbind(0)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.proj(y.transpose(1, 2).reshape(B, T, C))

        def forward(self, x):
            x = x + self.attend(self.ln1(x))
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d_model), nn.Embedding(ctx, d_model)
            self.blocks = nn.ModuleList([Block() for _ in range(layers)])
            self.ln_f, self.head = nn.LayerNorm(d_model), nn.Linear(d_model, vocab, bias=False)

        def forward(self, idx):
            x = self.tok(idx) + self.pos(lib.arange(idx.shape[1], device=idx.device))
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln_f(x))

    return GPT()


def build_gpt(lib, vocab=256, ctx=64, d_model=128, heads=4, layers=4, d_mlp=512, attn="sdpa",
              **_):
    model = make_gpt(lib, vocab, ctx, d_model, heads, layers, d_mlp, attn)
    return model, lib.optim.AdamW(model.parameters(), lr=3e-4)


def gpt_data(rng, vocab=256, ctx=64, batch=16, **_):
    tokens = rng.integers(0, vocab, (batch, ctx + 1))
    return tokens[:, :-1], tokens[:, 1:]


_TINY_MLP = dict(sizes=(12, 8, 8, 3), batch=4)
_TINY_GPT = dict(vocab=11, ctx=6, batch=2, d_model=8, heads=2, layers=1, d_mlp=16)
WORKLOADS = {
    "W1 MLP SGD": Workload("W1 MLP SGD", build_mlp, mlp_data, 0.8, {"optim": "sgd"},
                           dict(_TINY_MLP, optim="sgd")),
    "W1 MLP Adam": Workload("W1 MLP Adam", build_mlp, mlp_data, 0.8, {"optim": "adam"},
                            dict(_TINY_MLP, optim="adam")),
    "W2 CNN SGD": Workload("W2 CNN SGD", build_cnn, cnn_data, 1.2, {}, dict(hw=8, batch=2)),
    "W3 GPT AdamW": Workload("W3 GPT AdamW", build_gpt, gpt_data, 1.2, {}, _TINY_GPT),
}


# ------------------------------------------------------------------------ one library's step
def make_step(lib, model, opt, x, y) -> Callable:
    """The training step a PyTorch user writes; returns the loss tensor."""
    F = lib.nn.functional

    def step():
        opt.zero_grad()
        out = model(x)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        return loss
    return step


def setup(wl: Workload, lib, tiny=False, state=None, seed=0, **overrides):
    """Build ``wl`` in ``lib`` (``state``: name -> NumPy array to load). Returns (step, model)."""
    size = dict(wl.tiny if tiny else wl.size, **overrides)
    lib.manual_seed(seed)
    model, opt = wl.build(lib, **size)
    if state is not None:
        model.load_state_dict({k: lib.tensor(v) for k, v in state.items()})
    x, y = wl.data(np.random.default_rng(seed), **size)
    return make_step(lib, model, opt, lib.tensor(x), lib.tensor(y)), model


def numpy_state(model) -> dict:
    return {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}


# ------------------------------------------------------------------------ timing
def round_robin(steps: dict, rounds: int, turn_s: float, warmup: int) -> dict:
    """Median seconds per step of each function, the libraries taking turns.

    Every library first runs ``warmup`` steps; then, ``rounds`` times, each runs a batch of
    steps lasting about ``turn_s`` seconds. A noisy neighbour or a clock change thus hits all
    of them alike; the pause before each turn lets the previous library's BLAS/OpenMP worker
    threads stop spin-waiting on the cores.
    """
    per_turn = {}
    for name, step in steps.items():
        t0 = time.perf_counter()
        for _ in range(warmup):
            step()
        per_turn[name] = max(1, round(turn_s * warmup / (time.perf_counter() - t0)))
    samples = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            time.sleep(0.05)
            for _ in range(per_turn[name]):
                t0 = time.perf_counter()
                step()
                samples[name].append(time.perf_counter() - t0)
    return {name: statistics.median(v) for name, v in samples.items()}


def check_losses(wl_name: str, steps: dict, n: int = 2) -> None:
    """The first ``n`` losses of every library must agree (same weights, data and updates)."""
    losses = {name: [step().item() for _ in range(n)] for name, step in steps.items()}
    ref = losses["torch"]
    for i, (a, b) in enumerate(zip(losses["ember"], ref)):
        if not math.isfinite(a) or abs(a - b) > LOSS_RTOL * abs(b):
            raise SystemExit(f"{wl_name}: step {i + 1} losses disagree: ember {a!r} vs "
                             f"torch {b!r} (rtol {LOSS_RTOL})")


# ------------------------------------------------------------------------ report
def _ms(s):
    return f"{s * 1e3:9.2f} ms"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="few steps: a smoke run, its times are not meaningful")
    ap.add_argument("--only", default="", help="run workloads whose name contains this")
    ap.add_argument("--attn", choices=("sdpa", "mha"), default="sdpa",
                    help="W3 attention: F.scaled_dot_product_attention or nn.MultiheadAttention")
    args = ap.parse_args(argv)
    torch = _import_torch()   # NOTE: imported here so that the smoke test stays light
    rounds, turn_s, warmup = (3, 0.05, 2) if args.quick else (15, 0.3, 5)

    info = ember.show_config()
    if torch is None:
        print("torch not importable: Ember times only, no ratios")
    else:
        if isinstance(info.get("blas_threads"), int):   # NOTE: same thread count for both
            torch.set_num_threads(info["blas_threads"])
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"\n{'workload':<16}{'ember':>13}{'torch':>13}{'ember/torch':>13}{'target':>10}")
    for name, wl in WORKLOADS.items():
        if args.only.lower() not in name.lower():
            continue
        extra = {"attn": args.attn} if name.startswith("W3") else {}
        steps = {}
        if torch is not None:
            tstep, tmodel = setup(wl, torch, **extra)
            state = numpy_state(tmodel)
            steps["ember"] = setup(wl, ember, state=state, **extra)[0]
            steps["torch"] = tstep
            check_losses(name, steps)
        else:
            steps["ember"] = setup(wl, ember, **extra)[0]
        times = round_robin(steps, rounds, turn_s, warmup)
        if "torch" in times:
            r = times["ember"] / times["torch"]
            print(f"{name:<16}{_ms(times['ember']):>13}{_ms(times['torch']):>13}"
                  f"{r:>12.2f}x{'<= %.1fx ' % wl.target:>9}{'✔' if r <= wl.target else '✘'}")
        else:
            print(f"{name:<16}{_ms(times['ember']):>13}{'-':>13}{'-':>13}")
        sys.stdout.flush()
    print("\nratios are step-time ratios: < 1 means Ember is faster")
    return 0


if __name__ == "__main__":
    sys.exit(main())
