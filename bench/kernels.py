"""Generated kernels (issue 5): W4 GELU-tanh and single-op eager kernels vs NumPy and PyTorch.

W4: ``0.5*x*(1+tanh(0.79788456*(x+0.044715*x**3)))`` on 4,194,304 float32 —

* ``ember.codegen``   one generated C kernel (OpenMP + libmvec ``tanhf``); the backward is one
                      more kernel computing ``dx`` from ``x`` and ``dy``,
* ``numpy``           the expression as written (and its backward formula as written),
* ``torch``           PyTorch eager (backward through autograd), ``torch.compile`` if it works.

The DRAM floor is the bytes a kernel must move (forward: read x, write y; backward: read x
and dy, write dx) over the bandwidth a generated copy kernel (all threads) reaches on a
16 MiB array (``np.copyto``'s one-thread bandwidth is printed too). Then single
ops (exp, tanh, erf, sigmoid, add) on 4M float32: the eager fast-path helper
(``ember.codegen.elementwise_kernel``) vs NumPy / Ember eager vs PyTorch. Round-robin
medians (``bench/train.py``'s ``round_robin``); compile times are reported separately.

Run:
    .venv/bin/python bench/kernels.py [--no-torch-compile] [--quick]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# NOTE: Ember before NumPy: Ember sets OpenBLAS's thread spin (ember/_blas_env.py).
import ember  # noqa: E402
import numpy as np  # noqa: E402
from ember import codegen as cg  # noqa: E402
from train import _import_torch, round_robin  # noqa: E402

N = 4_194_304
A, B = 0.79788456, 0.044715


def gelu_expr(x):
    return 0.5 * x * (1 + cg.call("tanh", A * (x + B * x ** 3)))


def gelu_grad_expr(x, dy):
    t = cg.call("tanh", A * (x + B * x ** 3))
    return dy * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * A * (1 + 3 * B * x * x))


def numpy_fwd(x):
    return 0.5 * x * (1 + np.tanh(A * (x + B * x ** 3)))


def numpy_bwd(x, dy):
    t = np.tanh(A * (x + B * x ** 3))
    return dy * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * A * (1 + 3 * B * x * x))


def w4(torch, x, dy, use_compile: bool, rounds: int):
    spec = [cg.InputSpec(ember.float32, (1,))]
    t0 = time.perf_counter()
    fwd = cg.compile(cg.Kernel(spec, cg.OutSpec(ember.float32, (N,)), gelu_expr(cg.Load(0))))
    bwd = cg.compile(cg.Kernel(spec * 2, cg.OutSpec(ember.float32, (N,)),
                               gelu_grad_expr(cg.Load(0), cg.Load(1))))
    ctime = time.perf_counter() - t0
    err = np.abs(fwd(x) - numpy_fwd(x)).max()
    errb = np.abs(bwd(x, dy) - numpy_bwd(x, dy)).max()
    fsteps = {"ember.codegen": lambda: fwd(x), "numpy": lambda: numpy_fwd(x)}
    bsteps = {"ember.codegen": lambda: (fwd(x), bwd(x, dy)),
              "numpy": lambda: (numpy_fwd(x), numpy_bwd(x, dy))}
    extra = {}
    if torch is not None:
        tx, tdy = torch.from_numpy(x), torch.from_numpy(dy)
        txg = tx.clone().requires_grad_()

        def tf(v):
            return 0.5 * v * (1 + torch.tanh(A * (v + B * v ** 3)))

        def tfb(f):
            def step():
                txg.grad = None
                y = f(txg)
                y.backward(tdy)
                return y
            return step
        fsteps["torch"] = lambda: tf(tx)
        bsteps["torch"] = tfb(tf)
        if use_compile:
            try:
                t0 = time.perf_counter()
                tc = torch.compile(tf)
                tc(tx)
                tfb(tc)()
                extra["torch.compile"] = time.perf_counter() - t0
                fsteps["torch.compile"] = lambda: tc(tx)
                bsteps["torch.compile"] = tfb(tc)
            except Exception as e:  # noqa: BLE001 - report and go on
                print(f"torch.compile failed: {type(e).__name__}: {str(e)[:200]}")
    fres = round_robin(fsteps, rounds=rounds, turn_s=0.3, warmup=3)
    bres = round_robin(bsteps, rounds=rounds, turn_s=0.3, warmup=3)
    return fres, bres, ctime, extra, err, errb


def memcpy_bandwidth(x) -> tuple:
    """Bytes/s of ``np.copyto`` (one thread) and of a generated copy kernel (all threads)."""
    dst = np.empty_like(x)
    copy = cg.elementwise_kernel("clone", [ember.float32], [x.shape])
    out = []
    for f in (lambda: np.copyto(dst, x), lambda: copy(x, out=dst)):
        ts = []
        for _ in range(30):
            t0 = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t0)
        out.append(2 * x.nbytes / float(np.median(ts)))
    return tuple(out)


def single_ops(torch, x, rounds: int):
    xt = ember.tensor(x)
    y = np.random.default_rng(1).standard_normal(N).astype(np.float32)
    cases = {"exp": (np.exp, getattr(torch, "exp", None)),
             "tanh": (np.tanh, getattr(torch, "tanh", None)),
             "erf": (lambda a: ember.erf(xt), getattr(torch, "erf", None)),
             "sigmoid": (lambda a: ember.sigmoid(xt), getattr(torch, "sigmoid", None)),
             "add": (lambda a: a + y, None)}
    rows = []
    for name, (ref, tfn) in cases.items():
        ins = [x, y] if name == "add" else [x]
        fn = cg.elementwise_kernel(name, [ember.float32] * len(ins), [a.shape for a in ins])
        np.testing.assert_allclose(fn(*ins), ref(x) if name != "erf" and name != "sigmoid"
                                   else ref(x).numpy(), rtol=1e-5, atol=1e-6)
        steps = {"codegen": lambda: fn(*ins), "numpy/eager": lambda: ref(x)}
        if torch is not None:
            tx, ty = torch.from_numpy(x), torch.from_numpy(y)
            steps["torch"] = (lambda: tx + ty) if name == "add" else (lambda: tfn(tx))
        rows.append((name, round_robin(steps, rounds=rounds, turn_s=0.2, warmup=3)))
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-torch-compile", action="store_true")
    ap.add_argument("--quick", action="store_true", help="few rounds (smoke run)")
    args = ap.parse_args(argv)
    os.environ.setdefault("EMBER_KERNEL_CACHE", tempfile.mkdtemp(prefix="ember-kernels-"))
    if not cg.available():
        print("no C compiler: generated kernels unavailable")
        return
    torch = _import_torch()
    if torch is not None:
        torch.set_num_threads(os.cpu_count() or 1)
    rounds = 2 if args.quick else 7
    x = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    dy = np.random.default_rng(2).standard_normal(N).astype(np.float32)
    bw1, bw = memcpy_bandwidth(x)
    floor_f, floor_b = 2 * x.nbytes / bw, (2 * x.nbytes + 3 * x.nbytes) / bw
    fres, bres, ctime, extra, err, errb = w4(torch, x, dy, not args.no_torch_compile, rounds)
    cc = cg.find_compiler()
    print(f"compiler: {cc.version.split(' | ')[0]}, flags {' '.join(cc.flags)}, "
          f"target {cc.target}, threads {cg.num_threads()}")
    print(f"copy bandwidth: np.copyto {bw1 / 1e9:.1f} GB/s, generated copy kernel "
          f"{bw / 1e9:.1f} GB/s -> DRAM floor fwd {floor_f * 1e3:.2f} ms, "
          f"fwd+bwd {floor_b * 1e3:.2f} ms")
    print(f"codegen compile (fwd+bwd kernels, cold cache) {ctime:.2f} s; max |err| fwd {err:.2e}"
          f", bwd {errb:.2e}" + "".join(f"; {k} compile {v:.1f} s" for k, v in extra.items()))
    print("\n| W4 GELU-tanh 4M float32 | " + " | ".join(fres) + " | floor |")
    print("|---|" + "---:|" * (len(fres) + 1))
    print("| forward | " + " | ".join(f"{v * 1e3:.2f} ms" for v in fres.values())
          + f" | {floor_f * 1e3:.2f} ms |")
    print("| forward+backward | " + " | ".join(f"{v * 1e3:.2f} ms" for v in bres.values())
          + f" | {floor_b * 1e3:.2f} ms |")
    print("\n| single op, 4M float32 | codegen | numpy / ember eager | torch | codegen speed-up |")
    print("|---|---:|---:|---:|---:|")
    for name, r in single_ops(torch, x, rounds):
        t = f"{r['torch'] * 1e3:.2f} ms" if "torch" in r else "-"
        print(f"| {name} | {r['codegen'] * 1e3:.2f} ms | {r['numpy/eager'] * 1e3:.2f} ms | {t} "
              f"| {r['numpy/eager'] / r['codegen']:.1f}x |")


if __name__ == "__main__":
    main()
