"""Eager fast path (issue 5): each float elementwise op, NumPy vs generated kernel vs torch.

For every unary/binary primitive with a C template and a float result, and sizes from 1K
to 4M elements in float32 and float64, three ways to compute one eager op (fresh output
each call, contiguous inputs, round-robin medians in one process):

* ``numpy``    the op's registry kernel — what eager Ember runs without the fast path,
* ``kernel``   ``ember.codegen.eager.run`` — the fast path as the dispatcher calls it
               (layout, ctypes call and all; warm-up off, kernel compiled beforehand),
* ``torch``    PyTorch eager (2 threads), for reference.

Then the threshold rule: an op gets the fast path in a dtype from the smallest measured
size at which the kernel is at least ``--gain`` (1.25x) faster than NumPy *and* stays so
at every larger size; the suggested ``THRESHOLDS`` table is printed at the end (that is
how the one in ``ember/codegen/eager.py`` was chosen). Also: the dispatcher's per-op
overhead on small tensors (``a + b``, ``exp``) with the fast path on and off.

Run:
    .venv/bin/python bench/eager_kernels.py [--quick] [--ops exp,tanh] [--no-torch]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# NOTE: Ember before NumPy: Ember sets OpenBLAS's thread spin (ember/_blas_env.py).
import ember  # noqa: E402
import numpy as np  # noqa: E402
from ember import config  # noqa: E402
from ember.codegen import eager as ek  # noqa: E402
from ember.ops.registry import REGISTRY  # noqa: E402
from eager import compare  # noqa: E402 - bench/eager.py's round-robin timer

SIZES = (1 << 10, 1 << 12, 1 << 14, 1 << 15, 1 << 16, 1 << 18, 1 << 20, 1 << 22)
QUICK = (1 << 12, 1 << 15, 1 << 16, 1 << 18, 1 << 22)
UNARY = ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "sin", "cos", "tan",
         "asin", "acos", "atan", "sinh", "cosh", "tanh", "sigmoid", "erf", "erfc", "erfinv",
         "abs", "neg", "relu", "floor", "round", "clamp", "nan_to_num")
BINARY = ("add", "mul", "div", "maximum", "pow", "atan2", "hypot", "fmod", "remainder")
PARAMS = {"clamp": {"min": -0.5, "max": 0.5}, "round": {"decimals": 0},
          "nan_to_num": {"nan": 0.0, "posinf": None, "neginf": None}}
TORCH = {"neg": "neg", "relu": "relu", "erf": "special.erf", "erfc": "special.erfc",
         "erfinv": "special.erfinv", "sigmoid": "sigmoid", "abs": "abs",
         "remainder": "remainder", "clamp": "clamp", "round": "round",
         "nan_to_num": "nan_to_num"}


def _inputs(op, n, d, rng):
    """Inputs inside each op's domain (log > 0, asin in (-1, 1), pow base > 0...)."""
    if op in ("log", "log2", "log10", "sqrt"):
        x = rng.uniform(0.01, 10, n)
    elif op in ("asin", "acos", "erfinv", "log1p"):
        x = rng.uniform(-0.99, 0.99, n)
    else:
        x = rng.standard_normal(n) * 2
    if op in BINARY:
        y = rng.uniform(0.5, 2, n) if op in ("pow", "fmod", "remainder") else \
            rng.standard_normal(n)
        return [np.abs(x).astype(d) if op == "pow" else x.astype(d), y.astype(d)]
    return [x.astype(d)]


def _torch_fn(torch, op, ts, params):
    name = TORCH.get(op, op)
    fn = torch
    for part in name.split("."):
        fn = getattr(fn, part)
    if op == "clamp":
        return lambda: fn(*ts, min=params["min"], max=params["max"])
    if op == "round":
        return lambda: fn(*ts)
    return lambda: fn(*ts)


def measure(op, d, sizes, torch, min_time):
    """{size: {"numpy": s, "kernel": s, "torch": s}} for one op and dtype."""
    prim = REGISTRY[op]
    params = dict(PARAMS.get(op, {}))
    kern = prim.kernel_for("cpu")
    rng = np.random.default_rng(0)
    out = {}
    for n in sizes:
        arrays = _inputs(op, n, d, rng)
        want = kern(np, *arrays, **params)
        got = ek.run(prim, arrays, params)
        if got is None:
            raise SystemExit(f"{op} {d}: the fast path did not take it (no compiler?)")
        if not np.allclose(got, want, rtol=1e-4 if d == np.float32 else 1e-10, atol=1e-6,
                           equal_nan=True):
            raise SystemExit(f"{op} {d} n={n}: kernel and NumPy disagree")
        fns = {"numpy": lambda: kern(np, *arrays, **params),
               "kernel": lambda: ek.run(prim, arrays, params)}
        if torch is not None:
            ts = [torch.from_numpy(a) for a in arrays]
            fns["torch"] = _torch_fn(torch, op, ts, params)
        out[n] = compare(fns, min_time=min_time, repeat=5)
    return out


def threshold(times, gain):
    """Smallest size from which kernel beats NumPy by ``gain`` at every larger size."""
    best = None
    for n in sorted(times, reverse=True):
        if times[n]["numpy"] / times[n]["kernel"] >= gain:
            best = n
        else:
            break
    return best


def fmt(s):
    return f"{s * 1e6:8.1f}us" if s < 1e-3 else f"{s * 1e3:8.2f}ms"


def overhead(min_time):
    """Per-op dispatcher time on tiny tensors, fast path on vs off (interleaved)."""
    a = ember.tensor(np.ones(1, np.float32))
    b = ember.tensor(np.ones(1000, np.float32))

    def flip(on, fn):
        def f():
            config.EAGER_KERNELS = on
            return fn()
        return f
    for name, fn in (("a + b, 1 float32", lambda: a + a), ("a + b, 1000 float32", lambda: b + b),
                     ("exp, 1000 float32", lambda: b.exp())):
        t = compare({"on": flip(True, fn), "off": flip(False, fn)}, min_time=min_time,
                    repeat=9)
        print(f"  {name:<24} on {fmt(t['on'])}  off {fmt(t['off'])}  "
              f"on/off {t['on'] / t['off']:.3f}")
    config.EAGER_KERNELS = True


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer sizes, shorter timings")
    ap.add_argument("--ops", default="", help="comma-separated subset of ops")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--gain", type=float, default=1.25)
    args = ap.parse_args()
    torch = None
    if not args.no_torch:
        try:
            import torch
            torch.set_num_threads(2)
        except Exception:  # noqa: BLE001 - torch is optional
            torch = None
    sizes = QUICK if args.quick else SIZES
    min_time = 0.03 if args.quick else 0.08
    ops = [o for o in UNARY + BINARY if not args.ops or o in args.ops.split(",")]
    ek.configure(thresholds={o: 1 for o in ops}, warmup=0)
    ember.show_config()
    from ember.codegen import num_threads
    print(f"generated kernels: {num_threads()} threads; torch: "
          f"{torch.get_num_threads() if torch else '-'} threads\n")
    print("dispatcher overhead, fast path on vs off (default thresholds):")
    ek.configure(reset=True)
    overhead(0.2 if not args.quick else 0.05)
    ek.configure(thresholds={o: 1 for o in ops}, warmup=0)
    print(f"\n{'op':<11}{'dtype':<8}{'n':>9}{'numpy':>11}{'kernel':>11}{'torch':>11}"
          f"{'np/kernel':>10}{'torch/kernel':>13}")
    table = {}
    t0 = time.perf_counter()
    for op in ops:
        row = []
        for d in (np.float32, np.float64):
            times = measure(op, np.dtype(d), sizes, torch, min_time)
            for n, t in times.items():
                tt = t.get("torch")
                print(f"{op:<11}{np.dtype(d).name:<8}{n:>9}{fmt(t['numpy']):>11}"
                      f"{fmt(t['kernel']):>11}{fmt(tt) if tt else '-':>11}"
                      f"{t['numpy'] / t['kernel']:>9.2f}x"
                      f"{tt / t['kernel'] if tt else 0:>12.2f}x")
            row.append(threshold(times, args.gain))
            sys.stdout.flush()
        table[op] = tuple(row)
    print(f"\n(measured in {time.perf_counter() - t0:.0f} s)")
    print(f"suggested THRESHOLDS (kernel >= {args.gain}x NumPy from that size up; "
          f"(float32, float64), None = never):")
    for op, (a, b) in table.items():
        print(f"    {op!r}: ({a}, {b}),")


if __name__ == "__main__":
    main()
