"""W2's convolutions alone: Ember's eager conv kernels (implicit GEMM on/off) vs PyTorch.

For each W2 conv (batch 64; conv1 3->32 on 32x32, conv2 32->64 on 16x16, 3x3, padding 1)
times, in one thread and CPU time (``time.process_time``), the kernels the eager
``F.conv2d``'s compiled graphs run: ``conv_fwd`` (output + the columns kept for the
weight gradient; PyTorch keeps the input instead) and ``conv_igrad`` (input gradient), with
:mod:`ember.codegen.conv_igemm` on (``auto``) and off (unfold + GEMM, the previous path),
beside ``torch.nn.functional.conv2d`` and ``torch.nn.grad.conv2d_input``. Rounds
alternate the three; the table holds medians over rounds of per-round medians.

Run:
    .venv/bin/python bench/conv_w2.py --rounds 5
"""
from __future__ import annotations

import argparse
import statistics
import time

import ember  # NOTE: before NumPy (ember/_blas_env.py)
import numpy as np

from ember.codegen import conv_igemm as ci
from ember.codegen import conv_kernels_bwd as kb
from ember.codegen import conv_kernels_fwd as kf

SHAPES = {"conv1": ((64, 3, 32, 32), 32), "conv2": ((64, 32, 16, 16), 64)}
ARGS = ((3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1))


def _t(f, reps):
    f()
    ts = []
    for _ in range(reps):
        t0 = time.process_time()
        f()
        ts.append(time.process_time() - t0)
    return statistics.median(ts)


def _cases(torch):
    rng = np.random.default_rng(0)
    out = {}
    for name, (xs, co) in SHAPES.items():
        x = rng.standard_normal(xs).astype(np.float32)
        w = rng.standard_normal((co, xs[1] * 9)).astype(np.float32)
        b = rng.standard_normal((co, 1, 1)).astype(np.float32)
        dy = rng.standard_normal((xs[0], co, xs[2] * xs[3])).astype(np.float32)
        tx, tw = torch.tensor(x), torch.tensor(w.reshape(co, xs[1], 3, 3))
        tb, tdy = torch.tensor(b.reshape(-1)), torch.tensor(dy.reshape(xs[0], co, *xs[2:]))
        out[name] = {
            "fwd": (lambda x=x, w=w, b=b: kf.forward(x, w, b, *ARGS),
                    lambda tx=tx, tw=tw, tb=tb: torch.nn.functional.conv2d(tx, tw, tb,
                                                                          padding=1)),
            "igrad": (lambda w=w, dy=dy, hw=xs[2:]: kb.input_grad(w.T, dy, hw, *ARGS),
                      lambda tx=tx, tw=tw, tdy=tdy: torch.nn.grad.conv2d_input(
                          tx.shape, tw, tdy, padding=1)),
        }
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=9)
    args = ap.parse_args(argv)
    import torch
    torch.set_num_threads(1)
    ember.set_num_threads(1)
    cases = _cases(torch)
    if ci.variant_for() is None:
        print("conv_igemm does not run here (no AVX-512 or EMBER_CONV_IGEMM=off)")
    res: dict = {}
    for _ in range(args.rounds):
        for name, kinds in cases.items():
            for kind, (ours, theirs) in kinds.items():
                for col, f in (("igemm", ours), ("off", ours), ("torch", theirs)):
                    ci.mode = "off" if col == "off" else "auto"
                    res.setdefault((name, kind, col), []).append(_t(f, args.reps))
    ci.mode = "auto"
    print(f"{'conv':<7}{'pass':<7}{'igemm ms':>10}{'off ms':>10}{'torch ms':>10}"
          f"{'igemm/torch':>13}")
    for name, kinds in cases.items():
        for kind in kinds:
            m = [statistics.median(res[(name, kind, c)]) * 1e3 for c in ("igemm", "off",
                                                                         "torch")]
            print(f"{name:<7}{kind:<7}{m[0]:>10.2f}{m[1]:>10.2f}{m[2]:>10.2f}"
                  f"{m[0] / m[2]:>12.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
