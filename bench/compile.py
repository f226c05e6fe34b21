"""Compiled training steps: Ember eager vs ``ember.compile`` vs PyTorch and JAX.

The W1-W3 workloads of ``bench/train.py`` (same models, data, weights and optimizers), each
step written once — zero_grad, forward, cross-entropy, backward, optimizer step — and run:

* ``ember``          eager Ember,
* ``ember.compile``  the same function captured whole by ``ember.compile`` (forward,
                     backward and update in one graph),
* ``torch``          PyTorch eager, and ``torch.compile`` (inductor) when it works here,
* ``jax.jit``        the same model, weights, data and optimizer written in JAX, the whole
                     step under one ``jax.jit`` (``bench/jax_peer.py``), when ``import jax``
                     works (``--no-jax`` leaves it out). It runs on XLA's default CPU threading.

Timing is round-robin (see ``bench/train.py``); compile times (first call, including the
traced eager run) are reported separately. Losses of all variants must agree; a JAX column
whose losses do not match torch's is dropped with an error (it is a reference, not Ember).

W4 (issue 5): GELU-tanh ``0.5*x*(1+tanh(0.79788456*(x+0.044715*x**3)))`` on 4,194,304
float32, written as plain Ember ops and run through ``ember.compile`` (the default
pipeline fuses it into one generated kernel; forward+backward — ``ember.autograd.grad``
inside the compiled function — into one kernel reading x and dy and writing dx), side by
side with NumPy, PyTorch eager, torch.compile and jax.jit (``jax.vjp`` for dx).

Run:
    .venv/bin/python bench/compile.py                   # everything (torch.compile: minutes)
    .venv/bin/python bench/compile.py --no-torch-compile
    .venv/bin/python bench/compile.py --quick           # smoke run
    .venv/bin/python bench/compile.py --only W4         # the GELU kernels only
    .venv/bin/python bench/compile.py --no-jax          # without the JAX peer
    .venv/bin/python bench/compile.py --compile-cache 3  # W3 first compile: cold/warm/cached
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# NOTE: Ember before NumPy: Ember sets OpenBLAS's thread spin (ember/_blas_env.py).
import ember  # noqa: E402
import numpy as np  # noqa: E402
from train import LOSS_RTOL, WORKLOADS, _import_torch, numpy_state, round_robin  # noqa: E402

JAX = "jax.jit"


def _import_jax_peer():
    """``bench/jax_peer.py``, or None when JAX is not importable (it is optional)."""
    try:
        import jax_peer
    except Exception:  # noqa: BLE001 - jax is optional
        return None
    return jax_peer


def build(wl, lib, state=None, seed=0, tiny=False):
    """(model, optimizer, x, y) of ``wl`` in ``lib``, weights from ``state`` when given."""
    size = dict(wl.tiny if tiny else wl.size)
    lib.manual_seed(seed)
    model, opt = wl.build(lib, **size)
    if state is not None:
        model.load_state_dict({k: lib.tensor(v) for k, v in state.items()})
    x, y = wl.data(np.random.default_rng(seed), **size)
    return model, opt, lib.tensor(x), lib.tensor(y)


def train_step(lib, model, opt):
    """The step a PyTorch user writes (the loss is returned detached)."""
    F = lib.nn.functional

    def step(x, y):
        opt.zero_grad()
        out = model(x)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        return loss.detach()
    return step


def variants(wl, torch, use_torch_compile: bool, tiny=False, peer=None) -> tuple[dict, dict]:
    """{name: zero-arg step} and {name: compile seconds} for every variant of ``wl``.

    With ``peer`` (bench/jax_peer.py) ``steps["_jax_first"]`` holds the JAX step's first two
    losses, which ran while it compiled.
    """
    state = None
    steps, compile_s = {}, {}
    if torch is not None:
        tm, to, tx, ty = build(wl, torch, tiny=tiny)
        state = numpy_state(tm)
        ts = train_step(torch, tm, to)
        steps["torch"] = lambda: ts(tx, ty)
    m, o, x, y = build(wl, ember, state, tiny=tiny)
    es = train_step(ember, m, o)
    steps["ember"] = lambda: es(x, y)
    m2, o2, x2, y2 = build(wl, ember, state, tiny=tiny)
    cs = ember.compile(train_step(ember, m2, o2), fullgraph=True)
    t0 = time.perf_counter()
    cs(x2, y2)
    cs(x2, y2)      # the first step creates optimizer state: the steady graph is traced here
    compile_s["ember.compile"] = time.perf_counter() - t0
    steps["ember.compile"] = lambda: cs(x2, y2)
    steps["_explain"] = cs.explain
    if torch is not None and use_torch_compile:
        tm2, to2, tx2, ty2 = build(wl, torch, state, tiny=tiny)
        try:
            tc = torch.compile(train_step(torch, tm2, to2))
            t0 = time.perf_counter()
            tc(tx2, ty2)
            tc(tx2, ty2)
            compile_s["torch.compile"] = time.perf_counter() - t0
            steps["torch.compile"] = lambda: tc(tx2, ty2)
        except Exception as e:  # noqa: BLE001 - inductor needs a working C++ toolchain
            print(f"  torch.compile unavailable: {type(e).__name__}: {str(e)[:120]}")
    if peer is not None:
        try:
            # NOTE: torch's initial weights and optimizer when torch is here, Ember's otherwise
            js, steps["_jax_first"], compile_s[JAX] = peer.train_step(
                wl, dict(wl.tiny if tiny else wl.size), state or numpy_state(m),
                to if torch is not None else o, x.numpy(), y.numpy())
            steps[JAX] = js
        except Exception as e:  # noqa: BLE001 - a reference column, not Ember's result
            print(f"  {JAX} unavailable for {wl.name}: {type(e).__name__}: {str(e)[:120]}")
    return steps, compile_s


def check_losses(name, steps, jax_first=None) -> None:
    """Every variant, two steps in, gives the same third loss as eager Ember.

    The JAX step's first two losses (``jax_first``) must also match torch's (eager Ember's
    without torch) within ``LOSS_RTOL``, as bench/train.py checks Ember: else its column is
    dropped from ``steps`` with an error, since then it would time another computation.
    """
    first = {}
    for k, f in steps.items():
        if not k.endswith(("compile", JAX)):
            first[k] = [float(f()), float(f())]  # compiled variants ran two while compiling
    got = {k: float(f()) for k, f in steps.items()}
    if JAX in steps:
        ours, ref = jax_first + [got[JAX]], first.get("torch", first["ember"]) + [got["ember"]]
        if not all(abs(a - b) <= LOSS_RTOL * abs(b) for a, b in zip(ours, ref)):
            print(f"  error: {name}: {JAX} losses {ours} disagree with {ref} (torch's first "
                  f"two, eager Ember's third; rtol {LOSS_RTOL}): {JAX} column dropped")
            del steps[JAX], got[JAX]
    for k, v in got.items():
        tol = 1e-6 if k.startswith("ember") else LOSS_RTOL
        if not abs(v - got["ember"]) <= tol * abs(got["ember"]):
            raise SystemExit(f"{name}: third-step loss of {k} is {v!r}, eager Ember's is "
                             f"{got['ember']!r} (rtol {tol})")


N4, A4, B4 = 4_194_304, 0.79788456, 0.044715


def gelu(lib, x):
    """W4's GELU-tanh, as a user writes it (any library with torch's API)."""
    return 0.5 * x * (1 + lib.tanh(A4 * (x + B4 * x ** 3)))


def w4(torch, use_torch_compile: bool, quick: bool, peer=None) -> None:
    """GELU forward and forward+backward through ``ember.compile`` vs NumPy, torch and JAX."""
    n = 4096 if quick else N4
    rng = np.random.default_rng(0)
    xa = rng.standard_normal(n, dtype=np.float32)
    dya = rng.standard_normal(n, dtype=np.float32)
    x, dy = ember.tensor(xa), ember.tensor(dya)

    def fwd_bwd(x, dy):
        x = x.detach().requires_grad_(True)
        y = gelu(ember, x)
        (dx,) = ember.autograd.grad(y, [x], dy)
        return y.detach(), dx

    t0 = time.perf_counter()
    cf = ember.compile(lambda x: gelu(ember, x), fullgraph=True)
    cf(x)
    cfb = ember.compile(fwd_bwd, fullgraph=True)
    cfb(x, dy)
    ctime = {"ember.compile": time.perf_counter() - t0}
    yf, (_, dxb) = cf(x), cfb(x, dy)
    ye, dxe = fwd_bwd(x, dy)
    err = float(np.abs(yf.numpy() - ye.numpy()).max())
    errb = float(np.abs(dxb.numpy() - dxe.numpy()).max())
    kernels = [n.op.name for n in cfb.graph.nodes]

    def np_fwd():
        return 0.5 * xa * (1 + np.tanh(A4 * (xa + B4 * xa ** 3)))

    def np_fb():
        t = np.tanh(A4 * (xa + B4 * xa ** 3))
        return 0.5 * xa * (1 + t), dya * (0.5 * (1 + t) + 0.5 * xa * (1 - t * t) * A4 *
                                          (1 + 3 * B4 * xa * xa))
    fsteps = {"ember.compile": lambda: cf(x), "ember": lambda: gelu(ember, x),
              "numpy": np_fwd}
    bsteps = {"ember.compile": lambda: cfb(x, dy), "ember": lambda: fwd_bwd(x, dy),
              "numpy": np_fb}
    if torch is not None:
        tx, tdy = torch.from_numpy(xa), torch.from_numpy(dya)

        def tfb(f):
            def step():
                v = tx.detach().requires_grad_(True)
                y = f(v)
                y.backward(tdy)
                return y, v.grad
            return step
        fsteps["torch"] = lambda: gelu(torch, tx)
        bsteps["torch"] = tfb(lambda v: gelu(torch, v))
        if use_torch_compile:
            try:
                t0 = time.perf_counter()
                tc = torch.compile(lambda v: gelu(torch, v))
                tc(tx)
                tfb(tc)()
                ctime["torch.compile"] = time.perf_counter() - t0
                fsteps["torch.compile"] = lambda: tc(tx)
                bsteps["torch.compile"] = tfb(tc)
            except Exception as e:  # noqa: BLE001 - inductor needs a working C++ toolchain
                print(f"  torch.compile unavailable: {type(e).__name__}: {str(e)[:120]}")
    jerr = ""
    if peer is not None:
        fsteps[JAX], bsteps[JAX], ctime[JAX], yj, dxj = peer.gelu_steps(gelu, xa, dya)
        jerr = (f"; {JAX} max |err| vs eager fwd {np.abs(yj - ye.numpy()).max():.1e}, "
                f"dx {np.abs(dxj - dxe.numpy()).max():.1e}")
    rounds = 2 if quick else 9
    fres = round_robin(fsteps, rounds, 0.3 if not quick else 0.01, 2)
    bres = round_robin(bsteps, rounds, 0.3 if not quick else 0.01, 2)
    print(f"\nW4 GELU-tanh, {n:,} float32 (compiled fwd+bwd graph: {kernels}); max |err| vs "
          f"eager fwd {err:.1e}, dx {errb:.1e}{jerr}; compile "
          + ", ".join(f"{k} {v:.2f} s" for k, v in ctime.items()))
    print("| W4 | " + " | ".join(fres) + " |")
    print("|---|" + "---:|" * len(fres))
    for label, res in (("forward", fres), ("forward+backward", bres)):
        print(f"| {label} | " + " | ".join(f"{res[k] * 1e3:.2f} ms" if k in res else "-"
                                            for k in fres) + " |")
    sys.stdout.flush()


# W3's first compile in a new process, for --compile-cache: the two first calls (the first
# creates the optimizer's state, so the steady graph is traced at the second), wall and CPU.
CACHE_CHILD = """
import json, os, sys, time
root = sys.argv[1]
sys.path[:0] = [os.path.join(root, "bench"), root]
t0 = time.perf_counter()
import ember
from compile import build, train_step
from train import WORKLOADS
m, o, x, y = build(WORKLOADS["W3 GPT AdamW"], ember)
ready = time.perf_counter()
cs = train_step(ember, m, o)
cs = cs if os.environ.get("EMBER_BENCH_EAGER") else ember.compile(cs, fullgraph=True)
import resource
kids = lambda: sum(resource.getrusage(resource.RUSAGE_CHILDREN)[:2])
c0, k0, t1 = time.process_time(), kids(), time.perf_counter()
l1, l2 = float(cs(x, y)), float(cs(x, y))
t2, c1, k1 = time.perf_counter(), time.process_time(), kids()
try:
    from ember.graph import disk_cache
    hits = disk_cache.stats["hits"]
except ImportError:
    hits = None
print(json.dumps({"s": t2 - t1, "cpu": c1 - c0, "cc_cpu": k1 - k0, "import_build": ready - t0,
                  "losses": [l1, l2, float(cs(x, y))], "hits": hits}))
"""


def compile_cache(reps: int, root: str | None = None) -> dict:
    """W3's first compile, each in its own process, the cases alternated; medians.

    ``cold``: empty kernel and graph caches; ``warm kernels``: kernel cache filled, graph
    cache empty (or off); ``graph cache``: both filled by an earlier process, traced
    (``EMBER_GRAPH_CACHE=trace``); ``warm start``: the same caches, no trace; ``eager``: the
    same two calls not compiled (what the steps cost without any compiler). ``root``: the
    Ember checkout to time (default this one). Returns ``{case: (median s, median CPU s of
    the process, median CPU s of its compiler runs)}``.
    """
    import json
    import shutil
    import statistics
    import subprocess
    import tempfile
    root = root or str(Path(__file__).resolve().parents[1])
    tmp = tempfile.mkdtemp(prefix="ember-compile-cache-")
    os.chmod(tmp, 0o700)
    warm = os.path.join(tmp, "warm")

    def child(kernels, graphs, mode="1"):
        env = dict(os.environ, EMBER_KERNEL_CACHE=kernels, EMBER_GRAPH_CACHE_DIR=graphs,
                   EMBER_GRAPH_CACHE=mode.replace("eager", "0"))
        if mode == "eager":
            env["EMBER_BENCH_EAGER"] = "1"
        r = subprocess.run([sys.executable, "-c", CACHE_CHILD, root], capture_output=True,
                           text=True, env=env, cwd=root, timeout=600)
        if r.returncode != 0:
            raise SystemExit(f"compile-cache child failed:\n{r.stderr[-2000:]}")
        return json.loads(r.stdout.strip().splitlines()[-1])
    try:
        child(warm, os.path.join(tmp, "warm-graphs"))       # fills both caches
        out: dict = {"cold": [], "warm kernels": [], "graph cache": [], "warm start": [],
                     "eager": []}
        losses: dict = {}
        for i in range(reps):
            cold = os.path.join(tmp, f"cold{i}")
            graphs = os.path.join(tmp, "warm-graphs")
            runs = {"cold": (cold, os.path.join(cold, "g"), "1"),
                    "warm kernels": (warm, os.path.join(tmp, f"empty{i}"), "1"),
                    "graph cache": (warm, graphs, "trace"),    # keyed by the trace
                    "warm start": (warm, graphs, "1"),         # no trace (warm_start.py)
                    "eager": (warm, os.path.join(tmp, f"none{i}"), "eager")}  # not compiled
            for case, (k, g, mode) in runs.items():
                r = child(k, g, mode)
                if case.startswith(("graph", "warm start")) and not r["hits"]:
                    raise SystemExit("compile-cache: the graph cache missed (Ember's files "
                                     "changed between the runs?); time a quiet checkout")
                out[case].append((r["s"], r["cpu"], r["cc_cpu"]))
                if case != "eager":     # (eager runs its composites' compiled forms)
                    losses.setdefault(case, set()).add(tuple(r["losses"]))
        _check_cache_losses(losses)
        return {k: tuple(statistics.median(x[i] for x in v) for i in range(3))
                for k, v in out.items()}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _check_cache_losses(losses: dict) -> None:
    """Fresh compiles (with or without the trace-keyed graph cache) agree bitwise; a warm
    start's first call too, its later ones (the compiled program where a fresh compile ran
    its traced eager step) to float32 rounding; exits otherwise."""
    fresh = set().union(*(v for k, v in losses.items() if k != "warm start"))
    if len(fresh) != 1:
        raise SystemExit(f"compile-cache: losses differ between fresh compiles: {losses}")
    (ref,) = fresh
    for w in losses.get("warm start", ()):
        if w[0] != ref[0] or not np.allclose(w, ref, rtol=1e-5, atol=0):
            raise SystemExit(f"compile-cache: the warm start's losses {w} vs fresh {ref}")
    print(f"losses: fresh {ref}; warm start bitwise equal: "
          f"{all(w == ref for w in losses.get('warm start', ()))}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke run (times not meaningful)")
    ap.add_argument("--only", default="", help="run workloads whose name contains this")
    ap.add_argument("--no-torch-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--no-jax", action="store_true", help="leave out the jax.jit column")
    ap.add_argument("--compile-cache", type=int, metavar="REPS", default=0,
                    help="only W3's first compile in new processes: cold, warm kernel cache, "
                         "graph cache keyed by the trace, warm start (REPS alternated rounds, "
                         "medians)")
    args = ap.parse_args(argv)
    if args.compile_cache:
        res = compile_cache(args.compile_cache)
        print(f"W3 first compile (2 calls) in a new process, median of {args.compile_cache}:")
        for case, (s, cpu, cc) in res.items():
            print(f"  {case:<13} {s:6.2f} s wall  {cpu:6.2f} s CPU  {cc:6.2f} s compiler CPU")
        return 0
    torch = _import_torch()
    peer = None if args.no_jax else _import_jax_peer()
    rounds, turn_s, warmup = (2, 0.02, 1) if args.quick else (11, 0.3, 3)
    info = ember.show_config()
    if torch is not None:
        if isinstance(info.get("blas_threads"), int):
            torch.set_num_threads(info["blas_threads"])
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(peer.describe() if peer is not None else
          f"jax: {'left out (--no-jax)' if args.no_jax else 'not importable'}, no {JAX} column")
    cols = ["ember", "ember.compile", "torch", "torch.compile"] + ([JAX] if peer else [])
    print(f"\n{'workload':<14}" + "".join(f"{c:>15}" for c in cols) +
          f"{'compiled/eager':>16}{'compiled/torch':>16}" +
          (f"{'compiled/jax':>16}" if peer else ""))
    compile_rows = []
    for name, wl in WORKLOADS.items():
        if args.only.lower() not in name.lower() or args.only.lower() == "w4":
            continue
        steps, compile_s = variants(wl, torch, not args.no_torch_compile and not args.quick,
                                    tiny=args.quick, peer=peer)
        explain = steps.pop("_explain")
        check_losses(name, steps, steps.pop("_jax_first", None))
        times = round_robin(steps, rounds, turn_s, warmup)
        row = f"{name:<14}" + "".join(
            f"{times[c] * 1e3:>12.2f} ms" if c in times else f"{'-':>15}" for c in cols)
        r1 = times["ember.compile"] / times["ember"]
        r2 = f"{times['ember.compile'] / times['torch']:>15.2f}x" if "torch" in times else \
            f"{'-':>16}"
        r3 = f"{times['ember.compile'] / times[JAX]:>15.2f}x" if JAX in times else f"{'-':>16}"
        print(row + f"{r1:>15.2f}x" + r2 + (r3 if peer else ""))
        log = explain()
        cap = log.captures[-1]
        totals = ", ".join(f"{p['pass']}: " + (", ".join(f"{k} {v}" for k, v in
                                                          p["changed"].items()) or "-")
                           for p in cap.passes)
        compile_rows.append(f"{name:<14} ember.compile {compile_s['ember.compile']:.2f} s "
                            f"(2 traced calls), {cap.nodes_traced} nodes traced -> "
                            f"{cap.nodes_after} after passes [{totals}]" +
                            (f"; torch.compile {compile_s['torch.compile']:.1f} s"
                             if "torch.compile" in compile_s else "") +
                            (f"; {JAX} {compile_s[JAX]:.2f} s (2 calls)"
                             if JAX in steps else ""))
        sys.stdout.flush()
    print("\ncompile times and graph sizes:")
    for r in compile_rows:
        print("  " + r)
    print("\nratios are step-time ratios: < 1 means the compiled step is faster")
    if args.only.lower() in "w4 gelu":
        w4(torch, not args.no_torch_compile and not args.quick, args.quick, peer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
