"""FFT throughput (issue 18): ``ember.fft`` vs NumPy, SciPy and PyTorch in one run.

Two workloads (single precision, PyTorch's default dtypes):

* **fft 1-D**: ``fft`` of a 2^20-point complex64 signal.
* **rfft2 2-D**: ``rfft2`` of a 1024x1024 float32 image.

Ember runs SciPy's pocketfft on Ember's thread count (``ember.get_num_threads()``); SciPy is
timed with the same ``workers=`` and with one worker, NumPy's pocketfft (one thread) is the
target's reference (Ember >= 0.9x NumPy's speed), PyTorch runs its own FFT (MKL or
pocketfft) on its default threads. The libraries take turns (``bench/train.py``'s
``round_robin``), medians reported, and every result is checked against NumPy first.

Run:
    .venv/bin/python bench/numerics_fft.py            # full sizes
    .venv/bin/python bench/numerics_fft.py --quick    # tiny sizes (smoke test)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# NOTE: Ember before NumPy: Ember sets OpenBLAS's thread spin (ember/_blas_env.py).
import ember  # noqa: E402
import numpy as np  # noqa: E402
import scipy.fft  # noqa: E402
from train import _import_torch, round_robin  # noqa: E402

SIZES = {"full": dict(n1=1 << 20, n2=1024), "quick": dict(n1=1 << 10, n2=32)}


def workloads(sizes):
    """{name: (numpy input, ember fn, numpy fn, scipy fn(workers), torch fn)}."""
    rng = np.random.default_rng(0)
    n1, n2 = sizes["n1"], sizes["n2"]
    sig = (rng.standard_normal(n1) + 1j * rng.standard_normal(n1)).astype(np.complex64)
    img = rng.standard_normal((n2, n2)).astype(np.float32)
    return {
        f"fft 1-D complex64 ({n1})": (sig, ember.fft.fft, np.fft.fft,
                                      lambda a, w: scipy.fft.fft(a, workers=w),
                                      lambda t, a: t.fft.fft(a)),
        f"rfft2 2-D float32 ({n2}x{n2})": (img, ember.fft.rfft2, np.fft.rfft2,
                                           lambda a, w: scipy.fft.rfft2(a, workers=w),
                                           lambda t, a: t.fft.rfft2(a)),
    }


def steps_for(data, efn, nfn, sfn, tfn, torch, threads):
    x = ember.from_numpy(data)
    ref = nfn(data)
    steps = {"ember": lambda: efn(x), "numpy": lambda: nfn(data),
             f"scipy w={threads}": lambda: sfn(data, threads), "scipy w=1": lambda: sfn(data, 1)}
    if torch is not None:
        tx = torch.from_numpy(data)
        steps["torch"] = lambda: tfn(torch, tx)
    for name, step in steps.items():   # NOTE: every library must compute the same transform
        got = step()
        got = got.numpy() if hasattr(got, "numpy") else got
        scale = float(np.abs(ref).max())
        if not np.allclose(got, ref, atol=1e-4 * scale, rtol=1e-4):
            raise SystemExit(f"{name} disagrees with NumPy")
    return steps


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes, few rounds")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--rounds", type=int, default=None)
    args = ap.parse_args(argv)
    torch = None if args.no_torch else _import_torch()
    sizes = SIZES["quick" if args.quick else "full"]
    rounds = args.rounds or (2 if args.quick else 7)
    threads = ember.get_num_threads()
    print(f"ember threads={threads}; torch threads="
          f"{torch.get_num_threads() if torch is not None else '-'}; medians of {rounds} "
          f"round-robin turns (ms)")
    for name, (data, efn, nfn, sfn, tfn) in workloads(sizes).items():
        steps = steps_for(data, efn, nfn, sfn, tfn, torch, threads)
        med = round_robin(steps, rounds, 0.02 if args.quick else 0.3, 1 if args.quick else 3)
        base = med["numpy"]
        cells = "  ".join(f"{k} {v * 1e3:8.3f}" for k, v in med.items())
        print(f"{name}: {cells}")
        print(f"    speed vs NumPy (higher is faster): " + "  ".join(
            f"{k} {base / v:5.2f}x" for k, v in med.items()))


if __name__ == "__main__":
    main()
