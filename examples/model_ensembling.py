"""Model ensembling with ``vmap`` — torch.func's "Model ensembling" tutorial.

Several MLPs of the same shape (784-128-128-10 on 28x28 inputs) make predictions; instead
of a Python loop over the models, their weights are stacked with ``stack_module_state``
and one model is called with ``functional_call`` under ``vmap`` over the stacked weights:

* a different minibatch for each model: ``vmap(fmodel)(params, buffers, minibatches)``;
* the same minibatch for all: ``vmap(fmodel, in_dims=(0, 0, None))(params, buffers, x)``.

Both are checked against the loop; the largest absolute differences and timings are
printed.

Run:
    python examples/model_ensembling.py [--models 10] [--batch 64]
"""
from __future__ import annotations

import argparse
import copy
import time

import ember as em
from ember import nn
from ember.func import functional_call, stack_module_state, vmap


class SimpleMLP(nn.Module):
    """The tutorial's model: flatten, 784-128-128-10 with ReLU."""

    def __init__(self, hidden: int = 128):
        super().__init__()
        self.fc1 = nn.Linear(784, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, 10)

    def forward(self, x):
        x = x.flatten(1)
        x = self.fc2(self.fc1(x).relu()).relu()
        return self.fc3(x)


def _timed(fn, repeat: int):
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return out, best


def _max_diff(a, b) -> float:
    return float((a - b).abs().max())


def main(argv=None) -> dict:
    """Run both ensembles both ways; returns the differences and timings."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", type=int, default=10)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    em.manual_seed(args.seed)
    data = em.randn(args.models, args.batch, 1, 28, 28)
    models = [SimpleMLP(args.hidden) for _ in range(args.models)]
    minibatches, minibatch = data, data[0]
    params, buffers = stack_module_state(models)
    base = copy.deepcopy(models[0])   # any one of them: functional_call swaps its weights

    def fmodel(params, buffers, x):
        return functional_call(base, (params, buffers), (x,))

    with em.no_grad():
        loop1, loop1_s = _timed(lambda: em.stack([m(x) for m, x in zip(models, minibatches)]),
                                args.repeat)
        vmap1, vmap1_s = _timed(lambda: vmap(fmodel)(params, buffers, minibatches), args.repeat)
        loop2, loop2_s = _timed(lambda: em.stack([m(minibatch) for m in models]), args.repeat)
        vmap2, vmap2_s = _timed(lambda: vmap(fmodel, in_dims=(0, 0, None))(params, buffers,
                                                                           minibatch),
                                args.repeat)
    r = {"diff_minibatches": _max_diff(loop1, vmap1), "same_minibatch": _max_diff(loop2, vmap2),
         "shape": tuple(vmap1.shape), "loop_s": (loop1_s, loop2_s),
         "vmap_s": (vmap1_s, vmap2_s)}
    print(f"{args.models} MLPs (784-{args.hidden}-{args.hidden}-10), minibatch {args.batch}: "
          f"predictions {r['shape']}")
    print(f"different minibatches: max |loop - vmap| = {r['diff_minibatches']:.3g}   "
          f"loop {loop1_s * 1e3:.2f} ms, vmap {vmap1_s * 1e3:.2f} ms")
    print(f"same minibatch:        max |loop - vmap| = {r['same_minibatch']:.3g}   "
          f"loop {loop2_s * 1e3:.2f} ms, vmap {vmap2_s * 1e3:.2f} ms")
    return r


if __name__ == "__main__":
    main()
