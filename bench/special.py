"""ember.special and CTC loss vs SciPy and PyTorch (CPU), medians of alternating runs.

    .venv/bin/python bench/special.py            # ~20 s

Special functions: 1e6 float64 (and float32) elements, Ember vs calling scipy.special on the
NumPy array directly (Ember's kernel *is* SciPy's, so the ratio is Ember's overhead) vs
torch.special. CTC: forward and forward+backward of a (T=200, N=32, C=30, S=40) batch.
"""
from __future__ import annotations

import numpy as np

import ember as em
import ember.nn.functional as F
import ember.special as S
from _common import alternated_medians


def _median(fns, reps=7):
    """Median seconds of each callable, the callables alternated within each repetition."""
    return alternated_medians(fns, reps)


def special_rows(n=1_000_000):
    import scipy.special as sp
    import torch
    rng = np.random.default_rng(0)
    rows = []
    for name, sp_name, lo, hi in (("i0e", "i0e", -5, 5), ("log_ndtr", "log_ndtr", -10, 5),
                                  ("ndtri", "ndtri", 0.01, 0.99), ("erfcx", "erfcx", -2, 10),
                                  ("entr", "entr", 0.01, 5)):
        for dt in (np.float64, np.float32):
            a = rng.uniform(lo, hi, n).astype(dt)
            e, t = em.from_numpy(a), torch.from_numpy(a)
            ef, sf, tf = getattr(S, name), getattr(sp, sp_name), getattr(torch.special, name)
            te, ts, tt = _median([lambda: ef(e), lambda: sf(a), lambda: tf(t)])
            rows.append((f"{name} {np.dtype(dt).name}", te, ts, tt))
    a, x = rng.uniform(0.5, 5, n), rng.uniform(0.1, 8, n)
    ea, ex, ta, tx = em.tensor(a), em.tensor(x), torch.tensor(a), torch.tensor(x)
    rows.append(("gammainc float64", *_median([lambda: S.gammainc(ea, ex),
                                               lambda: sp.gammainc(a, x),
                                               lambda: torch.special.gammainc(ta, tx)])))
    return rows


def ctc_rows(t_len=200, n=32, c=30, s=40):
    import torch
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((t_len, n, c)).astype(np.float32)
    tg = rng.integers(1, c, (n, s))
    il, tl = np.full(n, t_len), rng.integers(s // 2, s + 1, n)
    xe, xt = em.tensor(logits, requires_grad=True), torch.tensor(logits, requires_grad=True)
    args_e = (em.tensor(tg), em.tensor(il), em.tensor(tl))
    args_t = (torch.tensor(tg), torch.tensor(il), torch.tensor(tl))

    def fwd_e():
        with em.no_grad():
            F.ctc_loss(xe.log_softmax(2), *args_e)

    def fwd_t():
        with torch.no_grad():
            torch.nn.functional.ctc_loss(xt.log_softmax(2), *args_t)

    def both_e():
        F.ctc_loss(xe.log_softmax(2), *args_e).backward()

    def both_t():
        torch.nn.functional.ctc_loss(xt.log_softmax(2), *args_t).backward()
    f = _median([fwd_e, fwd_t], reps=5)
    b = _median([both_e, both_t], reps=5)
    return [("ctc forward", f[0], None, f[1]), ("ctc forward+backward", b[0], None, b[1])]


def main():
    import torch
    torch.set_num_threads(1)
    em.set_num_threads(1)
    print(f"{'case':26s} {'ember ms':>9s} {'scipy ms':>9s} {'torch ms':>9s} "
          f"{'scipy/ember':>11s} {'torch/ember':>11s}")
    for name, te, ts, tt in special_rows() + ctc_rows():
        sc = f"{ts * 1e3:9.2f}" if ts is not None else f"{'-':>9s}"
        ratio = f"{ts / te:11.2f}" if ts is not None else f"{'-':>11s}"
        print(f"{name:26s} {te * 1e3:9.2f} {sc} {tt * 1e3:9.2f} {ratio} {tt / te:11.2f}")


if __name__ == "__main__":
    main()
