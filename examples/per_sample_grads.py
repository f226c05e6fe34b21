"""Per-sample gradients with ``vmap(grad(...))`` — torch.func's "Per-sample gradients" tutorial.

An MLP (64-512-512-10: the W1 MLP's hidden layers; ``--hidden`` sets their width) or, with
``--model cnn``, the tutorial's small CNN (two 3x3 convolutions, max pooling, two linear
layers) on scikit-learn's 8x8 digits when scikit-learn is installed, else on random pixels.
Per-sample gradients
(one gradient of the loss per example, as differential privacy and influence functions
need them) are computed twice:

* a Python loop over the examples, one ``loss.backward()`` each;
* ``vmap(grad(compute_loss), in_dims=(None, None, 0, 0))``: ``grad`` of the loss of one
  example, with the model called by ``functional_call``, batched over the examples.

It prints the largest absolute difference between the two and their timings.

Run:
    python examples/per_sample_grads.py [--batch 64] [--hidden 512] [--model mlp|cnn]
"""
from __future__ import annotations

import argparse
import importlib.util
import time

import numpy as np

import ember as em
import ember.nn.functional as F
from ember import nn
from ember.func import functional_call, grad, vmap


def load_batch(batch: int, seed: int):
    """``(data, targets)``: ``batch`` digits (flattened, float32) and their labels."""
    if importlib.util.find_spec("sklearn") is not None:
        from ember import datasets
        x, y, _, _ = datasets.load_digits(seed=seed, flatten=True)
        return x[:batch], y[:batch]
    rng = np.random.default_rng(seed)
    return (em.tensor(rng.standard_normal((batch, 64), dtype=np.float32)),
            em.tensor(rng.integers(0, 10, batch)))


def make_model(kind: str, n_in: int, hidden: int, n_classes: int = 10) -> nn.Module:
    """The MLP, or the tutorial's CNN scaled to 8x8 images (1x8x8 -> 32x6x6 -> 64x4x4 ->
    pool 64x2x2 -> ``hidden`` -> classes)."""
    if kind == "cnn":
        return nn.Sequential(nn.Unflatten(1, (1, 8, 8)), nn.Conv2d(1, 32, 3), nn.ReLU(),
                             nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(64 * 2 * 2, hidden), nn.ReLU(),
                             nn.Linear(hidden, n_classes))
    return nn.Sequential(nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                         nn.ReLU(), nn.Linear(hidden, n_classes))


def loop_grads(model, data, targets) -> dict:
    """One backward per example; ``{name: (N, *param.shape)}``."""
    per = {k: [] for k, _ in model.named_parameters()}
    for i in range(len(targets)):
        model.zero_grad()
        F.cross_entropy(model(data[i:i + 1]), targets[i:i + 1]).backward()
        for k, p in model.named_parameters():
            per[k].append(p.grad.clone())
    return {k: em.stack(v) for k, v in per.items()}


def vmap_grads(model, data, targets) -> dict:
    """The tutorial's transform: ``vmap(grad(compute_loss), in_dims=(None, None, 0, 0))``."""
    params = {k: v.detach() for k, v in model.named_parameters()}
    buffers = {k: v.detach() for k, v in model.named_buffers()}

    def compute_loss(params, buffers, sample, target):
        batch, targets = sample.unsqueeze(0), target.unsqueeze(0)
        predictions = functional_call(model, (params, buffers), (batch,))
        return F.cross_entropy(predictions, targets)

    return vmap(grad(compute_loss), in_dims=(None, None, 0, 0))(params, buffers, data,
                                                                 targets)


def _timed(fn, repeat: int):
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return out, best


def main(argv=None) -> dict:
    """Compute per-sample gradients both ways; returns ``{"max_abs_diff", "max_abs_grad",
    "loop_s", "vmap_s", "shapes"}``."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    em.manual_seed(args.seed)
    data, targets = load_batch(args.batch, args.seed)
    model = make_model(args.model, data.shape[1], args.hidden)
    looped, loop_s = _timed(lambda: loop_grads(model, data, targets), args.repeat)
    vmapped, vmap_s = _timed(lambda: vmap_grads(model, data, targets), args.repeat)
    diff = max(float((looped[k] - vmapped[k]).abs().max()) for k in looped)
    scale = max(float(v.abs().max()) for v in looped.values())
    shapes = {k: tuple(v.shape) for k, v in vmapped.items()}
    what = "CNN" if args.model == "cnn" else \
        f"{data.shape[1]}-{args.hidden}-{args.hidden}-10 MLP"
    print(f"per-sample gradients of a {what}, {args.batch} examples")
    for k, s in shapes.items():
        print(f"  {k:10s} {s}")
    print(f"max |loop - vmap(grad)| = {diff:.3g}")
    print(f"loop over examples: {loop_s * 1e3:8.2f} ms")
    print(f"vmap(grad):         {vmap_s * 1e3:8.2f} ms  ({loop_s / vmap_s:.1f}x faster)")
    return {"max_abs_diff": diff, "max_abs_grad": scale, "loop_s": loop_s, "vmap_s": vmap_s,
            "shapes": shapes}


if __name__ == "__main__":
    main()
