"""ember.distributions vs torch.distributions (CPU, one thread each), medians of alternating runs.

    .venv/bin/python bench/distributions.py            # ~30 s
    .venv/bin/python bench/distributions.py --quick    # tiny sizes, a smoke run

Per case the same parameters in both frameworks, float32, validation off (it reads values
into Python in both). The NumPy column is the floor where one exists: the same draws straight
from NumPy's generator (Ember's samplers are NumPy's PCG64 streams).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

import ember as em
import ember.distributions as D

sys.path.insert(0, str(Path(__file__).resolve().parent))   # NOTE: the smoke test loads us by path
from _common import alternated_medians  # noqa: E402


def _median(fns, reps=5):
    """Median seconds of each callable, the callables alternated within each repetition."""
    return alternated_medians(fns, reps)


def _cases(n):
    import torch
    TD = torch.distributions
    rng = np.random.default_rng(0)
    a = rng.uniform(0.5, 4.0, n).astype(np.float32)
    x = rng.standard_normal(n).astype(np.float32)
    ea, ta = em.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    ex, tx = em.tensor(x), torch.tensor(x)
    np_rng = np.random.default_rng(1)
    eg, tg = D.Gamma(ea, 1.0, validate_args=False), TD.Gamma(ta, 1.0, validate_args=False)
    en = D.Normal(ex, ea, validate_args=False)
    tn = TD.Normal(tx, ta, validate_args=False)
    k = max(n // 100, 1)
    p = rng.dirichlet(np.ones(100), k).astype(np.float32)
    ec = D.Categorical(probs=em.tensor(p), validate_args=False)
    tc = TD.Categorical(probs=torch.tensor(p), validate_args=False)
    q = rng.uniform(0.5, 4.0, n).astype(np.float32)
    eq, tq = D.Gamma(em.tensor(q), 2.0, validate_args=False), TD.Gamma(torch.tensor(q), 2.0,
                                                                     validate_args=False)

    def backward(d):
        return lambda: d.rsample().sum().backward()
    return [
        ("Gamma.sample", lambda: eg.sample(), lambda: tg.sample(),
         lambda: np_rng.standard_gamma(a, dtype=np.float32)),
        ("Gamma.rsample+backward", backward(eg), backward(tg), None),
        ("Normal.rsample+backward", backward(en), backward(tn), None),
        ("Normal.log_prob", lambda: en.log_prob(ex), lambda: tn.log_prob(tx), None),
        ("Gamma.log_prob", lambda: eg.log_prob(ea.detach()), lambda: tg.log_prob(ta.detach()),
         None),
        ("kl(Gamma, Gamma)", lambda: D.kl_divergence(eg, eq), lambda: TD.kl_divergence(tg, tq),
         None),
        (f"Categorical.sample {k}x100", lambda: ec.sample(), lambda: tc.sample(), None),
    ]


def main(argv=None):
    import torch
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--quick", action="store_true", help="n = 1000, 2 repetitions")
    args = p.parse_args(argv)
    n, reps = (1000, 2) if args.quick else (args.n, 5)
    torch.set_num_threads(1)
    em.set_num_threads(1)
    print(f"n = {n}, float32")
    print(f"{'case':28s} {'ember ms':>9s} {'torch ms':>9s} {'numpy ms':>9s} {'torch/ember':>11s}")
    rows = []
    for name, fe, ft, fn in _cases(n):
        fns = [fe, ft] + ([fn] if fn is not None else [])
        t = _median(fns, reps)
        npc = f"{t[2] * 1e3:9.2f}" if fn is not None else f"{'-':>9s}"
        print(f"{name:28s} {t[0] * 1e3:9.2f} {t[1] * 1e3:9.2f} {npc} {t[1] / t[0]:11.2f}")
        rows.append((name, t[0], t[1]))
    return rows


if __name__ == "__main__":
    main()
