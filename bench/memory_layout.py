"""Elementwise ops on tensors of different layouts, Ember beside PyTorch (one run).

Rows: a channels-last activation plus a row-major one (the output takes the first
operand's layout, ``ember/ops/layout.py``), the same with the operands swapped, a large
channels-last ``exp`` (generated kernel), ``zeros_like`` of a channels-last tensor, a
small row-major ``a + b`` (the dispatcher's cost for the layout check), ``F.gelu`` of a
channels-last tensor (Ember's compiled composite on the memory-order view), and a
compiled ``(exp(x) * 2).relu()`` of a channels-last / row-major tensor (Ember: one fused
kernel through ``ember.compile``, run in the input's memory order; PyTorch: eager, as
``torch.compile`` on this CPU needs Inductor's C++ toolchain and minutes of compile).

    python bench/memory_layout.py [--reps 30]
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import _common


def _cases(lib, small_reps):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 64, 56, 56)).astype(np.float32)
    y = rng.standard_normal((8, 64, 56, 56)).astype(np.float32)
    cl = lib.tensor(x).to(memory_format=lib.channels_last)
    rm = lib.tensor(y)
    a, b = lib.ones(8, 8), lib.ones(8, 8)

    def small():
        for _ in range(small_reps):
            a + b

    def act(t):
        return (t.exp() * 2).relu()
    comp = lib.compile(act) if lib.__name__ == "ember" else act
    xr = lib.tensor(x)
    return {
        "channels_last + row_major (8x64x56x56)": lambda: cl + rm,
        "row_major + channels_last": lambda: rm + cl,
        "exp(channels_last)": lambda: lib.exp(cl),
        "zeros_like(channels_last)": lambda: lib.zeros_like(cl),
        f"{small_reps} x small a + b (8x8)": small,
        "gelu(channels_last)": lambda: lib.nn.functional.gelu(cl),
        "compiled (exp(x)*2).relu(), x channels_last": lambda: comp(cl),
        "compiled (exp(x)*2).relu(), x row_major": lambda: comp(xr),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args(argv)
    import ember
    try:
        import torch
        torch.set_num_threads(ember.get_num_threads())
    except ImportError:
        torch = None
    small_reps = 1000
    ours = _cases(ember, small_reps)
    theirs = _cases(torch, small_reps) if torch is not None else {}
    print(f"| case | Ember ms | PyTorch ms | ratio |\n|---|---|---|---|")
    for name, f in ours.items():
        g = theirs.get(name)
        if g is None:
            (te,) = _common.alternated_medians([f], args.reps)
            print(f"| {name} | {te * 1e3:.3f} | - | - |")
            continue
        te, tt = _common.alternated_medians([f, g], args.reps)
        print(f"| {name} | {te * 1e3:.3f} | {tt * 1e3:.3f} | {te / tt:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
