"""Why Kaiming init (seed 002): activation norms through 50 ReLU layers of width 100.

Each layer is ``x <- relu(x Wᵀ)`` with ``W ~ N(0, c/n)`` (``n`` = fan-in = 100). A ReLU
zeroes half of its inputs, so the second moment of the activations is multiplied by
``c / 2`` per layer:

- ``c = 1`` (LeCun/"Xavier" scale): ×½ per layer → the signal **vanishes** (≈ 2⁻²⁵ in norm);
- ``c = 2`` (Kaiming/He, ``nn.init.kaiming_normal_``): ×1 → the norm stays **stable**;
- ``c = 3``: ×1.5 per layer → the signal **explodes** (≈ 1.5²⁵ in norm).

Prints the activation norm every 5th layer for each ``c`` and, with ``--plot PATH`` and
matplotlib installed, plots all layers on a log scale.

Run:
    python examples/kaiming_depth.py [--depth 50] [--width 100] [--plot kaiming.png]
"""
from __future__ import annotations

import argparse
import math

import ember as em
from ember import nn

GAINS = (1.0, 2.0, 3.0)


def deep_relu_net(depth: int, width: int, c: float, generator) -> nn.Sequential:
    """``depth`` × (Linear(width, width, bias=False), ReLU) with weights N(0, c/width)."""
    layers = []
    for _ in range(depth):
        linear = nn.Linear(width, width, bias=False)
        nn.init.normal_(linear.weight, 0.0, math.sqrt(c / width), generator=generator)
        layers += [linear, nn.ReLU()]
    return nn.Sequential(*layers)


def activation_norms(net: nn.Sequential, x) -> list[float]:
    """Mean per-sample L2 norm of ``x`` and of each ReLU's output (length depth + 1)."""
    norms = [x.norm(dim=1).mean().item()]
    with em.no_grad():
        for layer in net:
            x = layer(x)
            if isinstance(layer, nn.ReLU):
                norms.append(x.norm(dim=1).mean().item())
    return norms


def plot(curves: dict, path: str) -> bool:
    """Write the norm-vs-layer curves to ``path``; False if matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install matplotlib)")
        return False
    fig, ax = plt.subplots(figsize=(6, 4))
    for c, norms in curves.items():
        ax.plot(range(len(norms)), norms, label=f"W ~ N(0, {c:g}/n)")
    ax.set_yscale("log")
    ax.set_xlabel("layer")
    ax.set_ylabel("activation norm")
    ax.set_title("Deep ReLU MLP: activation norm per layer")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"plot written to {path}")
    return True


def main(argv=None) -> dict:
    """Run the experiment; returns ``{"ratios": {c: final/input norm}, "norms": {c: [...]}}``.

    ``norms[c]`` lists the mean activation norm of the input and after every layer.
    """
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--depth", type=int, default=50)
    p.add_argument("--width", type=int, default=100)
    p.add_argument("--batch", type=int, default=256, help="number of input vectors")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plot", help="write a PNG of the curves here (needs matplotlib)")
    args = p.parse_args(argv)

    gen = em.Generator().manual_seed(args.seed)
    x = em.randn(args.batch, args.width, generator=gen)
    curves = {c: activation_norms(deep_relu_net(args.depth, args.width, c, gen), x)
              for c in GAINS}

    print(f"{args.depth} ReLU layers of width {args.width}, W ~ N(0, c/n): mean activation "
          f"norm after each layer")
    print("layer " + "".join(f"{f'c={c:g}':>12}" for c in GAINS))
    for layer in range(0, args.depth + 1):
        if layer % 5 == 0 or layer == args.depth:
            print(f"{layer:5d} " + "".join(f"{curves[c][layer]:12.4g}" for c in GAINS))
    ratios = {c: curves[c][-1] / curves[c][0] for c in GAINS}
    verdict = {1.0: "vanishes", 2.0: "stays stable", 3.0: "explodes"}
    for c in GAINS:
        print(f"c={c:g}: final/input norm = {ratios[c]:.3g}  → the signal {verdict[c]}")
    if args.plot:
        plot(curves, args.plot)
    return {"ratios": ratios, "norms": curves}


if __name__ == "__main__":
    main()
