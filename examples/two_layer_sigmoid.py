"""The seed-000 two-layer sigmoid network, worked by hand, now by Ember's autograd.

The network and its numbers are the course's worked example (SPEC "Golden examples")::

    v = W1ᵀx + b1,  h = σ(v),  z = W2ᵀh + b2,  ŷ = σ(z),  L = ½ Σ (y − ŷ)²

``W1`` is (inputs × hidden) and ``W2`` is (hidden × outputs), as on the slides, so
``W1ᵀx`` is ``x @ W1``. One ``loss.backward()`` gives every ∂L/∂W; one
``ember.optim.SGD`` step with ``lr=1`` gives the updated weights.

Run:
    python examples/two_layer_sigmoid.py [--lr 1.0]
"""
from __future__ import annotations

import argparse

import ember as em
from ember import nn, optim

X = [0.02, 0.04, 0.01]
Y = [0.9, 0.5]
W1 = [[0.25, 0.15, 0.30], [0.25, 0.20, 0.35], [0.10, 0.25, 0.15]]
B1 = [0.4, 0.4, 0.4]
W2 = [[0.40, 0.25], [0.35, 0.30], [0.01, 0.35]]
B2 = [0.7, 0.7]


class TwoLayerSigmoid(nn.Module):
    """σ(W2ᵀ σ(W1ᵀx + b1) + b2) with the slides' weights (float64)."""

    def __init__(self):
        super().__init__()
        f64 = dict(dtype=em.float64)
        self.W1 = nn.Parameter(em.tensor(W1, **f64))
        self.b1 = nn.Parameter(em.tensor(B1, **f64))
        self.W2 = nn.Parameter(em.tensor(W2, **f64))
        self.b2 = nn.Parameter(em.tensor(B2, **f64))

    def forward(self, x):
        h = em.sigmoid(x @ self.W1 + self.b1)      # v = W1ᵀx + b1, h = σ(v)
        return em.sigmoid(h @ self.W2 + self.b2)   # z = W2ᵀh + b2, ŷ = σ(z)


def main(argv=None) -> dict:
    """Forward, backward and one SGD step; returns the golden numbers as floats.

    Keys: ``y_hat`` (list of 2), ``loss``, ``grad_W2_10`` (∂L/∂W2[1,0]) and
    ``W2_10_after`` (W2[1,0] after the step).
    """
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lr", type=float, default=1.0)
    args = p.parse_args(argv)

    model = TwoLayerSigmoid()
    opt = optim.SGD(model.parameters(), lr=args.lr)
    x = em.tensor(X, dtype=em.float64)
    y = em.tensor(Y, dtype=em.float64)

    y_hat = model(x)
    loss = 0.5 * ((y - y_hat) ** 2).sum()
    opt.zero_grad()
    loss.backward()
    grad = model.W2.grad[1, 0].item()
    opt.step()
    after = model.W2[1, 0].item()

    print(f"ŷ = [{y_hat[0].item():.4f}, {y_hat[1].item():.4f}]       (slides: [0.7609, 0.7760])")
    print(f"L = {loss.item():.4f}                 (slides: 0.0478)")
    print(f"∂L/∂W2[1,0] = {grad:.4f}       (slides: -0.0152)")
    print(f"∂L/∂W2 =\n{model.W2.grad}")
    print(f"∂L/∂W1 =\n{model.W1.grad}")
    print(f"after SGD(lr={args.lr:g}): W2[1,0] = {after:.4f}   (slides: 0.3652)")
    return {"y_hat": y_hat.tolist(), "loss": loss.item(), "grad_W2_10": grad,
            "W2_10_after": after}


if __name__ == "__main__":
    main()
