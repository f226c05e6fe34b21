"""Eager-mode benchmark: Ember vs NumPy vs PyTorch (when importable), in one process.

Measures (median of repeated timings, seconds per call):
  a) ``a + b`` on 1-element and 1000-element float32 tensors (per-op overhead),
  b) a 100-op autograd chain on a 100-element tensor, forward + backward,
  c) one MLP training step (batch 128, 784-512-512-10, ReLU, softmax cross-entropy, SGD),
  d) float32 matmul GFLOP/s at 2048² and 4096²,
  e) DataLoader over a TensorDataset ((4096, 20) float32 + int64 labels), batch 64, shuffled:
     time per sample.

Ratios are ember time / other time (> 1 means Ember is slower).

Run:
    .venv/bin/python bench/eager.py
"""
from __future__ import annotations

import statistics
import sys
import time
import timeit

# NOTE: Ember before NumPy: Ember sets OpenBLAS's thread spin (ember/_blas_env.py).
import ember as em
import numpy as np  # noqa: E402

try:
    import torch
except Exception:  # noqa: BLE001 - torch is optional (pip install -e '.[bench]')
    torch = None


def _loops(t, min_time, repeat) -> int:
    number = 1
    while min_time > 0:
        elapsed = t.timeit(number)
        if elapsed >= min_time / repeat or number >= 1 << 20:
            break
        number *= 2 if elapsed == 0 else max(2, int(min_time / repeat / elapsed) + 1)
    return number


def compare(fns: dict, min_time=0.2, repeat=7) -> dict:
    """Median seconds per call of each function, measured round-robin.

    The implementations take turns (one batch of loops each, ``repeat`` rounds), so a
    noisy neighbour or a frequency change hits them all alike instead of whichever ran
    first. The short sleep between turns lets the previous library's worker threads
    stop spin-waiting, which would otherwise steal the cores from the next one.
    """
    timers = {}
    for k, fn in fns.items():
        fn()  # warm up
        t = timeit.Timer(fn)
        timers[k] = (t, _loops(t, min_time, repeat))
    samples = {k: [] for k in fns}
    for _ in range(repeat):
        for k, (t, number) in timers.items():
            time.sleep(0.05)  # let the other library's spinning BLAS/OpenMP threads park
            samples[k].append(t.timeit(number) / number)
    return {k: statistics.median(v) for k, v in samples.items()}


# ------------------------------------------------------------------------ a) per-op add
def add_cases(n):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    ea, eb = em.tensor(a), em.tensor(b)
    out = {"ember": lambda: ea + eb, "numpy": lambda: a + b}
    if torch is not None:
        ta, tb = torch.from_numpy(a.copy()), torch.from_numpy(b.copy())
        out["torch"] = lambda: ta + tb
    return out


# ------------------------------------------------------------------------ b) autograd chain
CHAIN = 100


def chain(lib):
    """The same 100-op chain for any library with PyTorch's API (ember or torch)."""
    c = lib.full((100,), 0.5)
    x = lib.linspace(-1, 1, 100, requires_grad=True)

    def step():
        y = x
        for i in range(CHAIN):
            k = i % 4
            y = y * c if k == 0 else y + 0.1 if k == 1 else y.tanh() if k == 2 else y * 1.5
        y.sum().backward()
        x.grad = None
    return step


def chain_numpy():
    c = np.full(100, 0.5, np.float32)
    x = np.linspace(-1, 1, 100, dtype=np.float32)

    def step():  # forward keeping what backward needs, then the chain rule by hand
        y, tape = x, []
        for i in range(CHAIN):
            k = i % 4
            if k == 2:
                y = np.tanh(y)
                tape.append(1 - y * y)
            elif k == 1:
                y = y + np.float32(0.1)
                tape.append(None)
            else:
                tape.append(c if k == 0 else np.float32(1.5))
                y = y * tape[-1]
        g = np.ones_like(y)
        for d in reversed(tape):
            if d is not None:
                g = g * d
        return g
    return step


# ------------------------------------------------------------------------ c) MLP train step
SIZES, BATCH, LR = (784, 512, 512, 10), 128, 0.01


def mlp_data():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, SIZES[0]), dtype=np.float32)
    y = rng.integers(0, SIZES[-1], BATCH)
    onehot = np.eye(SIZES[-1], dtype=np.float32)[y]
    ws = [(rng.standard_normal((i, o), dtype=np.float32) * np.float32((2 / i) ** 0.5),
           np.zeros(o, np.float32)) for i, o in zip(SIZES[:-1], SIZES[1:])]
    return x, onehot, ws


def mlp(lib):
    """The MLP step with raw tensors, for any library with PyTorch's API (ember or torch)."""
    x, onehot, ws = mlp_data()
    x, onehot = lib.from_numpy(x), lib.from_numpy(onehot)
    params = [(lib.tensor(w, requires_grad=True), lib.tensor(b, requires_grad=True))
              for w, b in ws]

    def step():
        h = x
        for i, (w, b) in enumerate(params):
            h = h @ w + b
            if i < len(params) - 1:
                h = h.relu()
        loss = -(lib.log_softmax(h, dim=1) * onehot).sum() / BATCH
        loss.backward()
        with lib.no_grad():
            for w, b in params:
                w.sub_(w.grad, alpha=LR)
                b.sub_(b.grad, alpha=LR)
                w.grad = b.grad = None
        return loss
    return step


def mlp_numpy():
    x, onehot, ws = mlp_data()
    ws = [(w.copy(), b.copy()) for w, b in ws]

    def step():
        acts, h = [x], x
        for i, (w, b) in enumerate(ws):
            h = h @ w + b
            if i < len(ws) - 1:
                h = np.maximum(h, 0)
            acts.append(h)
        z = h - h.max(axis=1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        loss = -(logp * onehot).sum() / BATCH
        g = (np.exp(logp) - onehot) / BATCH  # d loss / d logits
        for i in reversed(range(len(ws))):
            w, b = ws[i]
            gw, gb = acts[i].T @ g, g.sum(axis=0)
            if i > 0:
                g = (g @ w.T) * (acts[i] > 0)
            w -= LR * gw
            b -= LR * gb
        return loss
    return step


# ------------------------------------------------------------------------ d) matmul
def matmul_cases(n):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n),
                                                                               dtype=np.float32)
    ea, eb = em.tensor(a), em.tensor(b)
    out = {"ember": lambda: ea @ eb, "numpy": lambda: a @ b}
    if torch is not None:
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        out["torch"] = lambda: ta @ tb
    return out


# ------------------------------------------------------------------------ e) data loading
LOAD_N, LOAD_BATCH = 4096, 64


def loader_cases():
    """One shuffled epoch of DataLoader(TensorDataset((N, 20) float32, N int64), 64): the
    callables return the epoch; :func:`main` divides by N (seconds per sample)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((LOAD_N, 20), dtype=np.float32)
    y = rng.integers(0, 10, LOAD_N)
    ds = em.data.TensorDataset(em.from_numpy(x), em.from_numpy(y))

    def ember_epoch():
        for _ in em.data.DataLoader(ds, batch_size=LOAD_BATCH, shuffle=True):
            pass

    def numpy_epoch():  # the floor: one fancy-indexing gather per array per batch
        perm = rng.permutation(LOAD_N)
        for i in range(0, LOAD_N, LOAD_BATCH):
            j = perm[i:i + LOAD_BATCH]
            x[j], y[j]
    out = {"ember": ember_epoch, "numpy": numpy_epoch}
    if torch is not None:
        tds = torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y))

        def torch_epoch():
            for _ in torch.utils.data.DataLoader(tds, batch_size=LOAD_BATCH, shuffle=True):
                pass
        out["torch"] = torch_epoch
    return out


# ------------------------------------------------------------------------ report
def fmt_time(s: float) -> str:
    return f"{s * 1e6:9.2f} us" if s < 1e-3 else f"{s * 1e3:9.2f} ms"


def row(name, times, unit=fmt_time):
    cells = [unit(times.get(k)) if k in times else f"{'-':>12}" for k in ("ember", "numpy",
                                                                          "torch")]
    r_np = f"{times['ember'] / times['numpy']:8.2f}x" if "numpy" in times else f"{'-':>9}"
    r_t = f"{times['ember'] / times['torch']:8.2f}x" if "torch" in times else f"{'-':>9}"
    print(f"{name:<34}" + "".join(f"{c:>14}" for c in cells) + f"{r_np:>12}{r_t:>12}")
    sys.stdout.flush()


def main() -> None:
    em.show_config()
    if torch is not None:
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    else:
        print("torch not importable: PyTorch columns are skipped")
    print()
    print(f"{'benchmark':<34}{'ember':>14}{'numpy':>14}{'torch':>14}"
          f"{'ember/numpy':>12}{'ember/torch':>12}")
    for n in (1, 1000):
        row(f"a + b, {n} float32", compare(add_cases(n)))
    chains = {"ember": chain(em), "numpy": chain_numpy()}
    if torch is not None:
        chains["torch"] = chain(torch)
    row(f"{CHAIN}-op chain fwd+bwd (100 elems)", compare(chains))
    mlps = {"ember": mlp(em), "numpy": mlp_numpy()}
    if torch is not None:
        mlps["torch"] = mlp(torch)
    first = {k: float(v.detach() if hasattr(v, "detach") else v)  # same data and weights:
             for k, v in ((k, f()) for k, f in mlps.items())}         # the same loss
    if max(first.values()) - min(first.values()) > 1e-4 * abs(first["numpy"]):
        raise SystemExit(f"MLP step losses disagree: {first}")
    row("MLP train step (b128 784-512-512-10)",
        compare(mlps, min_time=1.0, repeat=9))
    epochs = compare(loader_cases(), min_time=0.5, repeat=7)
    row(f"DataLoader per sample (b{LOAD_BATCH}, shuffle)",
        {k: v / LOAD_N for k, v in epochs.items()})
    for n in (2048, 4096):
        times = compare(matmul_cases(n), min_time=0.5 if n == 2048 else 0.0,
                        repeat=5 if n == 2048 else 3)
        row(f"matmul {n}x{n} float32 (time)", times)
        flops = 2 * n ** 3
        row(f"matmul {n}x{n} float32 (GFLOP/s)", times,
            unit=lambda s, f=flops: f"{f / s / 1e9:9.1f} GF" if s else "-")
    print("\nratios are time ratios: > 1 means Ember is slower")


if __name__ == "__main__":
    main()
