"""Gaussian-process regression on synthetic 1-D data, hyperparameters learnt by gradient.

A GP with an RBF kernel ``k(x, x') = s² exp(-(x - x')² / (2 l²))`` and Gaussian noise σ²:
with ``K = k(X, X) + σ² I = L Lᵀ`` (Cholesky), the negative log marginal likelihood is

    NLML = ½ yᵀ K⁻¹ y + ½ log det K + n/2 log 2π,   yᵀ K⁻¹ y = |L⁻¹ y|²,

computed with ``ember.linalg.cholesky`` and ``solve_triangular`` (log det K from the
Cholesky diagonal, checked against ``ember.linalg.slogdet``). The log-lengthscale, log-signal
and log-noise are leaf tensors that Adam moves down the NLML's gradient — autograd runs
through the Cholesky factorization and the triangular solves. The posterior mean at test
points is ``k(X*, X) K⁻¹ y``.

Run:
    python examples/gaussian_process.py [--n 60] [--steps 150]
"""
from __future__ import annotations

import argparse
import math
import time

import numpy as np

import ember as em
import ember.linalg as LA


def make_data(n, seed=0, noise=0.1):
    """y = sin(3x) + 0.5 x + noise on x in [-2, 2]; test points on a grid."""
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(-2, 2, n))
    f = lambda t: np.sin(3 * t) + 0.5 * t  # noqa: E731
    y = f(x) + noise * rng.standard_normal(n)
    xt = np.linspace(-2, 2, 200)
    return (em.tensor(x), em.tensor(y), em.tensor(xt), em.tensor(f(xt)))


def rbf(a, b, log_l, log_s):
    """RBF kernel matrix between the 1-D point sets ``a`` and ``b``."""
    d = (a.unsqueeze(-1) - b.unsqueeze(0)) / log_l.exp()
    return (2 * log_s).exp() * (-0.5 * d * d).exp()


def nlml(x, y, params):
    """Negative log marginal likelihood and the Cholesky factor of K."""
    log_l, log_s, log_noise = params
    n = x.shape[0]
    K = rbf(x, x, log_l, log_s) + ((2 * log_noise).exp() + 1e-6) * em.eye(n, dtype=x.dtype)
    L = LA.cholesky(K)
    alpha = LA.solve_triangular(L, y.unsqueeze(-1), upper=False)       # L⁻¹ y
    logdet = 2 * L.diagonal().log().sum()
    return 0.5 * (alpha ** 2).sum() + 0.5 * logdet + 0.5 * n * math.log(2 * math.pi), L, K


def predict(x, y, xt, params, L):
    """Posterior mean k(X*, X) K⁻¹ y, with K⁻¹ y by two triangular solves."""
    Kinv_y = em.cholesky_solve(y.unsqueeze(-1), L)
    return (rbf(xt, x, params[0], params[1]) @ Kinv_y).squeeze(-1)


def hyper(params):
    return {name: float(p.exp()) for name, p in zip(("lengthscale", "signal", "noise"), params)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=60, help="training points")
    ap.add_argument("--steps", type=int, default=150, help="Adam steps")
    ap.add_argument("--lr", type=float, default=0.05)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    x, y, xt, ft = make_data(args.n)
    # a deliberately poor start: long lengthscale, large noise. (Shape (1,), not 0-d:
    # Ember's fused Adam step does not take 0-d parameters yet.)
    params = [em.tensor([math.log(v)], dtype=em.float64, requires_grad=True)
              for v in (2.0, 0.5, 0.5)]
    opt = em.optim.Adam(params, lr=args.lr)
    with em.no_grad():
        before, L0, _ = nlml(x, y, params)
        rmse_before = float(((predict(x, y, xt, params, L0) - ft) ** 2).mean().sqrt())
    for step in range(args.steps):
        opt.zero_grad()
        loss, _, _ = nlml(x, y, params)
        loss.backward()
        opt.step()
    with em.no_grad():
        after, L, K = nlml(x, y, params)
        sign, logabsdet = LA.slogdet(K)
        assert float(sign) == 1.0 and abs(float(logabsdet) - float(
            2 * L.diagonal().log().sum())) < 1e-6 * max(1.0, abs(float(logabsdet)))
        rmse = float(((predict(x, y, xt, params, L) - ft) ** 2).mean().sqrt())
    h = hyper(params)
    print(f"GP regression on {args.n} points, {args.steps} Adam steps "
          f"({time.perf_counter() - t0:.2f}s)")
    print(f"learnt hyperparameters: lengthscale {h['lengthscale']:.3f}, signal std "
          f"{h['signal']:.3f}, noise std {h['noise']:.3f} (data noise 0.100)")
    print(f"NLML: {float(before):.2f} -> {float(after):.2f}")
    print(f"test RMSE vs the true function: {rmse_before:.3f} -> {rmse:.3f}")
    return {"nlml_before": float(before), "nlml_after": float(after), "rmse": rmse,
            "rmse_before": rmse_before, **h}


if __name__ == "__main__":
    main()
