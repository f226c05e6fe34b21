"""Scientific numerics: Ember against NumPy/SciPy and PyTorch in one run (issue 18).

Sections (each a function returning a list of :class:`Case`):

* ``linalg_cases``: ``solve``, ``cholesky``, ``svd``, ``eigh`` at 512² and batched 64×64
  (×256), Ember vs NumPy vs SciPy vs PyTorch, forward; and the backward of ``cholesky``,
  ``solve`` and ``eigh`` against their own forward (target ≤ 3×).
* ``fft_cases``: ``fft`` of 2^20 complex128 values and ``rfft2`` of a 1024² float64
  array, forward vs NumPy/SciPy/PyTorch and backward vs forward.

Every library gets the same float64 inputs; each repetition runs the libraries one after
the other (interleaved, so a noisy neighbour slows all of them alike) and the medians are
reported. By default every library runs single-threaded and the clock is the process's CPU
time (``--clock cpu``), which a loaded shared machine disturbs far less than wall time.
``np/ember`` is NumPy's time over Ember's: ≥ 0.9 is the target (Ember calls the same
LAPACK; its overhead is the dispatch).

Run:
    python bench/numerics.py [--reps 7] [--quick] [--only linalg]
"""
from __future__ import annotations

import argparse
import gc
import statistics
import time
from dataclasses import dataclass, field

import numpy as np

import ember as em


@dataclass
class Case:
    """One measured operation: a callable per library (None where a library has no peer)."""

    name: str
    fns: dict                          # library -> zero-argument callable
    backward: dict = field(default_factory=dict)   # library -> (forward, backward) pair


def _lib_torch():
    try:
        import torch
        return torch
    except ImportError:
        return None


def _spd(rng, shape):
    x = rng.standard_normal(shape)
    return x @ np.swapaxes(x, -1, -2) / shape[-1] + np.eye(shape[-1])


def _linalg_case(name, em_fn, np_fn, sp_fn, torch_fn, *arrays):
    torch = _lib_torch()
    ems = [em.tensor(a) for a in arrays]
    ts = [torch.tensor(a) for a in arrays] if torch is not None else None
    fns = {"ember": lambda: em_fn(*ems), "numpy": lambda: np_fn(*arrays)}
    if sp_fn is not None:
        fns["scipy"] = lambda: sp_fn(*arrays)
    if torch is not None:
        fns["torch"] = lambda: torch_fn(*ts)
    return Case(name, fns)


def _grad_pair(fn, arrays, weights, mod):
    """(forward, backward) callables for ``sum(w * fn(*leaves))`` in Ember or PyTorch."""
    state = {}

    def forward():
        leaves = [mod.tensor(a, requires_grad=True) for a in arrays]
        outs = fn(*leaves)
        outs = outs if isinstance(outs, tuple) else (outs,)
        state["loss"] = sum((o * mod.tensor(w)).sum() for o, w in zip(outs, weights))

    def backward():
        state.pop("loss").backward()
    return forward, backward


def _backward_case(name, em_fn, torch_fn, arrays, out_shapes, rng):
    weights = [rng.standard_normal(s) for s in out_shapes]
    pairs = {"ember": _grad_pair(em_fn, arrays, weights, em)}
    torch = _lib_torch()
    if torch is not None:
        pairs["torch"] = _grad_pair(torch_fn, arrays, weights, torch)
    return Case(name, {}, pairs)


def linalg_cases(quick=False):
    """Forward and backward cases of the LAPACK-backed ops."""
    import scipy.linalg as sl
    torch = _lib_torch()
    TL = torch.linalg if torch is not None else None
    LA = em.linalg
    rng = np.random.default_rng(0)
    big, (bat, small) = (64, (8, 16)) if quick else (512, (256, 64))
    shapes = [((big, big), f"{big}²"), ((bat, small, small), f"{bat}×{small}²")]
    cases, back = [], []
    for shape, label in shapes:
        A = rng.standard_normal(shape) + np.sqrt(shape[-1]) * np.eye(shape[-1])
        B = rng.standard_normal(shape[:-1] + (1,))
        S = _spd(rng, shape)
        batched = len(shape) == 3
        cases += [
            _linalg_case(f"solve {label}", LA.solve, np.linalg.solve,
                         None if batched else
                         (lambda a, b: sl.solve(a, b, check_finite=False)),
                         lambda a, b: TL.solve(a, b), A, B),
            _linalg_case(f"cholesky {label}", LA.cholesky, np.linalg.cholesky,
                         None if batched else
                         (lambda a: sl.cholesky(a, lower=True, check_finite=False)),
                         lambda a: TL.cholesky(a), S),
            _linalg_case(f"svd {label}", lambda a: LA.svd(a, full_matrices=False),
                         lambda a: np.linalg.svd(a, full_matrices=False),
                         None if batched else
                         (lambda a: sl.svd(a, full_matrices=False, check_finite=False)),
                         lambda a: TL.svd(a, full_matrices=False), A),
            _linalg_case(f"eigh {label}", LA.eigh, np.linalg.eigh,
                         None if batched else (lambda a: sl.eigh(a, check_finite=False)),
                         lambda a: TL.eigh(a), S),
        ]
        n = shape[-1]
        back += [
            _backward_case(f"cholesky {label}", LA.cholesky, TL and TL.cholesky, [S], [shape],
                           rng),
            _backward_case(f"solve {label}", LA.solve, TL and TL.solve, [A, B],
                           [B.shape], rng),
            _backward_case(f"eigh {label}", lambda a: tuple(LA.eigh(a)),
                           TL and (lambda a: tuple(TL.eigh(a))), [S],
                           [shape[:-1], shape[:-2] + (n, n)], rng),
        ]
    return cases, back


def fft_cases(quick=False):
    """The fft section (issue 18, item 3): ``fft`` of 2^20 complex128 values and ``rfft2`` of
    a 1024² float64 array against ``numpy.fft``, ``scipy.fft`` (``workers`` = the thread
    count, as Ember passes) and ``torch.fft``; backward (of a real view of the spectrum)
    against forward. ``bench/numerics_fft.py`` times the float32/complex64 versions with
    more peers (SciPy with 1 and N workers)."""
    import scipy.fft as sf
    torch = _lib_torch()
    TF = torch.fft if torch is not None else None
    rng = np.random.default_rng(1)
    n1, n2 = (1 << 10, 32) if quick else (1 << 20, 1024)
    sig = rng.standard_normal(n1) + 1j * rng.standard_normal(n1)
    img = rng.standard_normal((n2, n2))
    w = em.get_num_threads()
    cases = [
        _linalg_case(f"fft 1-D 2^{n1.bit_length() - 1} c128", em.fft.fft, np.fft.fft,
                     lambda a: sf.fft(a, workers=w), TF and TF.fft, sig),
        _linalg_case(f"rfft2 {n2}² f64", em.fft.rfft2, np.fft.rfft2,
                     lambda a: sf.rfft2(a, workers=w), TF and TF.rfft2, img),
    ]
    back = [
        _backward_case(f"fft 1-D 2^{n1.bit_length() - 1} c128",
                       lambda a: em.view_as_real(em.fft.fft(a)),
                       TF and (lambda a: torch.view_as_real(TF.fft(a))), [sig], [(n1, 2)],
                       rng),
        _backward_case(f"rfft2 {n2}² f64", lambda a: em.view_as_real(em.fft.rfft2(a)),
                       TF and (lambda a: torch.view_as_real(TF.rfft2(a))), [img],
                       [(n2, n2 // 2 + 1, 2)], rng),
    ]
    return cases, back


SECTIONS = {"linalg": linalg_cases, "fft": fft_cases}


_clock = time.process_time


def _no_gc(fn):
    """Run a timing loop with Python's cyclic GC off (as ``timeit`` does): a collection
    triggered by whichever library allocates last would be charged to it."""
    def run(*args):
        gc.collect()
        gc.disable()
        try:
            return fn(*args)
        finally:
            gc.enable()
    return run


@_no_gc
def _median_times(fns, reps):
    for f in fns.values():          # warm-up (first-call imports, BLAS thread start)
        f()
    times = {k: [] for k in fns}
    keys = list(fns)
    for r in range(reps):
        # NOTE: the order rotates every repetition, so no library always runs first (on a
        # cold cache) or right after the same neighbour.
        for k in keys[r % len(keys):] + keys[:r % len(keys)]:
            t0 = _clock()
            fns[k]()
            times[k].append(_clock() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


@_no_gc
def _median_fb(pairs, reps):
    for fw, bw in pairs.values():
        fw()
        bw()
    times = {k: ([], []) for k in pairs}
    for _ in range(reps):
        for k, (fw, bw) in pairs.items():
            t0 = _clock()
            fw()
            t1 = _clock()
            bw()
            times[k][0].append(t1 - t0)
            times[k][1].append(_clock() - t1)
    return {k: (statistics.median(f), statistics.median(b)) for k, (f, b) in times.items()}


def _ms(t):
    return f"{t * 1e3:9.3f}" if t is not None else f"{'-':>9}"


def report_forward(cases, reps):
    print(f"{'forward (ms, median)':28}{'ember':>9}{'numpy':>9}{'scipy':>9}{'torch':>9}"
          f"{'np/ember':>10}{'torch/ember':>12}")
    rows = []
    for c in cases:
        t = _median_times(c.fns, reps)
        ratio = t["numpy"] / t["ember"]
        tr = t["torch"] / t["ember"] if "torch" in t else None
        print(f"{c.name:28}{_ms(t['ember'])}{_ms(t['numpy'])}{_ms(t.get('scipy'))}"
              f"{_ms(t.get('torch'))}{ratio:10.2f}" + (f"{tr:12.2f}" if tr else ""))
        rows.append((c.name, t, ratio))
    return rows


def report_backward(cases, reps):
    print(f"{'backward vs forward (ms)':28}{'em fwd':>9}{'em bwd':>9}{'bwd/fwd':>9}"
          f"{'pt fwd':>9}{'pt bwd':>9}{'bwd/fwd':>9}")
    rows = []
    for c in cases:
        t = _median_fb(c.backward, reps)
        ef, eb = t["ember"]
        line = f"{c.name:28}{_ms(ef)}{_ms(eb)}{eb / ef:9.2f}"
        if "torch" in t:
            tf, tb = t["torch"]
            line += f"{_ms(tf)}{_ms(tb)}{tb / tf:9.2f}"
        print(line)
        rows.append((c.name, ef, eb))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    ap.add_argument("--only", choices=sorted(SECTIONS), default=None)
    ap.add_argument("--threads", type=int, default=1,
                    help="BLAS/LAPACK threads for every library (default 1: the shared "
                         "2-core machine is oversubscribed otherwise); 0 leaves defaults")
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                    help="process CPU time (default; meaningful single-threaded) or wall time")
    args = ap.parse_args(argv)
    global _clock
    _clock = time.process_time if args.clock == "cpu" else time.perf_counter
    if args.threads:
        em.set_num_threads(args.threads)          # NumPy's OpenBLAS, Ember's pool
        try:    # SciPy ships its own OpenBLAS (2 threads by default): limit every pool
            import scipy.linalg  # noqa: F401 - load SciPy's OpenBLAS before limiting it
            from threadpoolctl import threadpool_limits
            threadpool_limits(args.threads)
        except ImportError:
            print("threadpoolctl not installed: SciPy's OpenBLAS keeps its default threads")
        torch = _lib_torch()
        if torch is not None:
            torch.set_num_threads(args.threads)
    print(f"threads: {em.get_num_threads()}, clock: {args.clock}")
    results = {}
    for name, build in SECTIONS.items():
        if args.only and name != args.only:
            continue
        fwd, bwd = build(args.quick)
        if not fwd and not bwd:
            continue
        print(f"\n== {name} ==")
        results[name] = (report_forward(fwd, args.reps), report_backward(bwd, args.reps))
    return results


if __name__ == "__main__":
    main()
