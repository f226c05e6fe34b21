"""Function transforms (issue 20): ``vmap`` compositions vs torch.func and jax.vmap.

Three workloads, each timed round-robin in one process (``bench/train.py``'s
``round_robin``: the libraries take turns, medians reported):

* **per-sample gradients** of the W1 MLP (784-512-512-10, ReLU, cross-entropy, batch 128):
  ``vmap(grad(loss_of_one_example), in_dims=(None, 0, 0))`` with ``functional_call`` vs
  one ordinary batched backward of the same batch (Ember's, and torch's for reference) vs
  ``torch.func.vmap(torch.func.grad(...))`` vs ``jax.jit(jax.vmap(jax.grad(...)))``.
  Targets: ≤ 3× Ember's batched backward, ≤ 1.0× torch.func.
* **jacrev** of a 512→512 MLP (512-512-512, tanh) at one input: ``ember.func.jacrev`` (one
  batched VJP over the identity basis) vs Ember's previous row loop (one backward per
  output element, kept below as :func:`jacrev_rowloop`) vs ``torch.func.jacrev`` vs
  ``jax.jit(jax.jacrev(...))``. Target: ≥ 10× faster than the row loop.
* **ensemble forward** of 8 W1 MLPs on one batch of 128: ``vmap(functional_call, in_dims=
  (0, 0, None))`` over ``stack_module_state``'s weights vs the same FLOPs written as one
  batched matmul chain (``x @ W1ᵀ + b1`` with (8, 784, 512) weights, ReLU, ...) vs
  ``torch.func.vmap`` vs ``jax.jit(jax.vmap(...))``. Target: ≤ 1.2× the matmul chain.

Every variant's result is checked against Ember's loop/reference before timing.

Run:
    .venv/bin/python bench/func.py            # everything
    .venv/bin/python bench/func.py --quick    # tiny sizes, a few rounds (smoke test)
    .venv/bin/python bench/func.py --no-jax --no-torch
    .venv/bin/python bench/func.py --cpu-time  # 1 thread each, process CPU time (busy box)
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# NOTE: Ember before NumPy: Ember sets OpenBLAS's thread spin (ember/_blas_env.py).
import ember  # noqa: E402
import numpy as np  # noqa: E402
from train import _import_torch, round_robin  # noqa: E402

from ember import func  # noqa: E402

SIZES = {"full": dict(mlp=(784, 512, 512, 10), batch=128, jac=512, models=8),
         "quick": dict(mlp=(12, 8, 8, 3), batch=4, jac=16, models=3)}


def _import_jax():
    try:
        import jax
        jax.config.update("jax_enable_x64", False)
        return jax
    except Exception:  # noqa: BLE001 - jax is optional
        return None


def mlp(lib, sizes, act="relu"):
    nn = lib.nn
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU() if act == "relu" else nn.Tanh())
    return nn.Sequential(*layers)


def state_of(model) -> dict:
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def load(lib, model, state):
    model.load_state_dict({k: lib.tensor(v) for k, v in state.items()})
    return model


def _close(name, got, want, rtol=1e-3, atol=1e-5):
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or not np.allclose(got, want, rtol=rtol, atol=atol):
        err = np.abs(got - want).max() if got.shape == want.shape else "shapes differ"
        raise SystemExit(f"{name}: result disagrees with Ember's reference (max err {err}, "
                         f"shapes {got.shape} vs {want.shape})")


# ------------------------------------------------------------------ per-sample gradients
def per_sample_variants(sz, torch, jax, rng):
    """{name: zero-arg step} for per-sample gradients; checks each against a loop."""
    ember.manual_seed(0)
    model = mlp(ember, sz["mlp"])
    state = state_of(model)
    x = rng.standard_normal((sz["batch"], sz["mlp"][0]), dtype=np.float32)
    y = rng.integers(0, sz["mlp"][-1], sz["batch"])
    ex, ey = ember.tensor(x), ember.tensor(y)
    F = ember.nn.functional
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss_one(p, xi, yi):
        return F.cross_entropy(func.functional_call(model, p, (xi.unsqueeze(0),)),
                               yi.unsqueeze(0))

    psg = func.vmap(func.grad(loss_one), in_dims=(None, 0, 0))

    def batched_backward():
        model.zero_grad()
        F.cross_entropy(model(ex), ey).backward()
        return model[0].weight.grad

    steps = {"ember vmap(grad)": lambda: psg(params, ex, ey),
             "ember batched backward": batched_backward}
    want = psg(params, ex, ey)["0.weight"].numpy()
    ref = [func.grad(loss_one)(params, ex[i], ey[i])["0.weight"].numpy() for i in range(2)]
    _close("ember vmap(grad) vs a loop", want[:2], np.stack(ref))
    if torch is not None:
        tm = load(torch, mlp(torch, sz["mlp"]), state)
        tp = {k: v.detach() for k, v in tm.named_parameters()}
        tx, ty = torch.tensor(x), torch.tensor(y)
        tF = torch.nn.functional

        def tloss(p, xi, yi):
            return tF.cross_entropy(torch.func.functional_call(tm, p, (xi.unsqueeze(0),)),
                                    yi.unsqueeze(0))

        tpsg = torch.func.vmap(torch.func.grad(tloss), in_dims=(None, 0, 0))
        _close("torch.func", tpsg(tp, tx, ty)["0.weight"].numpy(), want)

        def tbatched():
            tm.zero_grad()
            tF.cross_entropy(tm(tx), ty).backward()
            return tm[0].weight.grad

        steps["torch.func vmap(grad)"] = lambda: tpsg(tp, tx, ty)
        steps["torch batched backward"] = tbatched
    if jax is not None:
        steps["jax.jit(vmap(grad))"] = _jax_per_sample(jax, state, sz, x, y, want)
    return steps


def _jax_layers(jnp, state, n):
    return [(jnp.asarray(state[f"{2 * i}.weight"].T), jnp.asarray(state[f"{2 * i}.bias"]))
            for i in range(n)]


def _jax_mlp(jax, layers, x, act):
    for i, (w, b) in enumerate(layers):
        x = x @ w + b
        if i < len(layers) - 1:
            x = act(x)
    return x


def _jax_per_sample(jax, state, sz, x, y, want):
    jnp = jax.numpy
    layers = _jax_layers(jnp, state, len(sz["mlp"]) - 1)

    def loss(p, xi, yi):
        logits = _jax_mlp(jax, p, xi, jax.nn.relu)
        return -jax.nn.log_softmax(logits)[yi]

    f = jax.jit(jax.vmap(jax.grad(loss), in_axes=(None, 0, 0)))
    jx, jy = jnp.asarray(x), jnp.asarray(y)
    _close("jax", np.asarray(f(layers, jx, jy)[0][0]).transpose(0, 2, 1), want)
    return lambda: f(layers, jx, jy)[0][0].block_until_ready()


# ------------------------------------------------------------------ jacrev
def jacrev_rowloop(f, x):
    """Ember's previous ``jacrev``: one backward per output element (the comparison)."""
    x = x.detach().requires_grad_()
    out = f(x)
    flat = out.reshape(-1)
    rows = []
    for r in range(flat.numel()):
        e = ember.zeros_like(flat)
        e[r] = 1.0
        (g,) = ember.autograd.grad([flat], [x], [e], retain_graph=True)
        rows.append(g)
    return ember.stack(rows).reshape(tuple(out.shape) + tuple(x.shape))


def jacrev_variants(sz, torch, jax, rng):
    n = sz["jac"]
    ember.manual_seed(1)
    model = mlp(ember, (n, n, n), act="tanh")
    state = state_of(model)
    x = rng.standard_normal(n, dtype=np.float32)
    ex = ember.tensor(x)
    jr = func.jacrev(model)
    want = jr(ex).detach().numpy()
    _close("jacrev vs row loop", jacrev_rowloop(model, ex).detach().numpy(), want)
    steps = {"ember jacrev (vmap)": lambda: jr(ex),
             "ember row loop (before)": lambda: jacrev_rowloop(model, ex)}
    if torch is not None:
        tm = load(torch, mlp(torch, (n, n, n), act="tanh"), state)
        tx = torch.tensor(x)
        tj = torch.func.jacrev(tm)
        _close("torch.func.jacrev", tj(tx).detach().numpy(), want)
        steps["torch.func.jacrev"] = lambda: tj(tx)
    if jax is not None:
        jnp = jax.numpy
        layers = _jax_layers(jnp, state, 2)
        jf = jax.jit(jax.jacrev(lambda v: _jax_mlp(jax, layers, v, jnp.tanh)))
        jx = jnp.asarray(x)
        _close("jax.jacrev", np.asarray(jf(jx)), want)
        steps["jax.jit(jacrev)"] = lambda: jf(jx).block_until_ready()
    return steps


# ------------------------------------------------------------------ ensemble forward
def ensemble_variants(sz, torch, jax, rng):
    m = sz["models"]
    ember.manual_seed(2)
    models = [mlp(ember, sz["mlp"]) for _ in range(m)]
    states = [state_of(mm) for mm in models]
    x = rng.standard_normal((sz["batch"], sz["mlp"][0]), dtype=np.float32)
    ex = ember.tensor(x)
    params, buffers = func.stack_module_state(models)
    params = {k: v.detach() for k, v in params.items()}

    def fmodel(p, b, xx):
        return func.functional_call(models[0], (p, b), (xx,))

    ens = func.vmap(fmodel, in_dims=(0, 0, None))
    n_layers = len(sz["mlp"]) - 1
    ws = [params[f"{2 * i}.weight"].mT.contiguous() for i in range(n_layers)]
    bs = [params[f"{2 * i}.bias"].unsqueeze(1) for i in range(n_layers)]

    def chain():
        h = ex
        for i, (w, b) in enumerate(zip(ws, bs)):
            h = ember.baddbmm(b, h.expand(m, *h.shape) if h.ndim == 2 else h, w)
            if i < n_layers - 1:
                h = h.relu()
        return h

    with ember.no_grad():
        want = np.stack([mm(ex).numpy() for mm in models])
        _close("ember vmap ensemble", ens(params, buffers, ex).numpy(), want)
        _close("matmul chain", chain().numpy(), want)
    steps = {"ember vmap ensemble": _no_grad(lambda: ens(params, buffers, ex)),
             "ember bmm chain": _no_grad(chain)}
    if torch is not None:
        tms = [load(torch, mlp(torch, sz["mlp"]), s) for s in states]
        tp, tb = torch.func.stack_module_state(tms)
        tp = {k: v.detach() for k, v in tp.items()}
        tx = torch.tensor(x)
        tens = torch.func.vmap(lambda p, b, xx: torch.func.functional_call(tms[0], (p, b), (xx,)),
                               in_dims=(0, 0, None))
        with torch.no_grad():
            _close("torch.func ensemble", tens(tp, tb, tx).numpy(), want)
        steps["torch.func vmap ensemble"] = lambda: _torch_no_grad(torch, tens, tp, tb, tx)
    if jax is not None:
        jnp = jax.numpy
        stacked = [(jnp.stack([jnp.asarray(s[f"{2 * i}.weight"].T) for s in states]),
                    jnp.stack([jnp.asarray(s[f"{2 * i}.bias"]) for s in states]))
                   for i in range(n_layers)]
        jf = jax.jit(jax.vmap(lambda p, xx: _jax_mlp(jax, p, xx, jax.nn.relu),
                              in_axes=(0, None)))
        jx = jnp.asarray(x)
        _close("jax ensemble", np.asarray(jf(stacked, jx)), want)
        steps["jax.jit(vmap) ensemble"] = lambda: jf(stacked, jx).block_until_ready()
    return steps


def _no_grad(fn):
    def run():
        with ember.no_grad():
            return fn()
    return run


def _torch_no_grad(torch, f, *a):
    with torch.no_grad():
        return f(*a)


# ------------------------------------------------------------------ timing
def round_robin_cpu(steps: dict, rounds: int, turn_s: float) -> dict:
    """Median *process CPU* seconds per step, the libraries taking turns (``--cpu-time``).

    On a machine others load, a step's wall time counts the time the scheduler gave to
    other processes; its CPU time (all of this process's threads) does not. Meaningful with
    one thread per library, where CPU time is the step's own work.
    """
    per_turn = {}
    for name, step in steps.items():
        t0 = time.process_time()
        step()
        per_turn[name] = max(1, round(turn_s / max(time.process_time() - t0, 1e-6)))
    samples = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            for _ in range(per_turn[name]):
                t0 = time.process_time()
                step()
                samples[name].append(time.process_time() - t0)
    return {name: statistics.median(v) for name, v in samples.items()}


# ------------------------------------------------------------------ report
def report(title, times, pairs):
    """Print one table: median times, then the named ratios against their targets."""
    print(f"\n## {title}")
    print("| variant | median |")
    print("|---|---:|")
    for k, v in times.items():
        print(f"| {k} | {v * 1e3:.3f} ms |")
    for num, den, target, sense in pairs:
        if num in times and den in times:
            r = times[num] / times[den]
            ok = r <= target if sense == "<=" else r >= target
            print(f"{num} / {den}: {r:.2f}x  (target {sense} {target}x "
                  f"{'ok' if ok else 'MISSED'})")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--no-jax", action="store_true")
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--only", choices=["psg", "jacrev", "ensemble"], default=None)
    p.add_argument("--cpu-time", action="store_true",
                   help="one thread per library, time by process CPU time (a shared machine)")
    a = p.parse_args(argv)
    sz = SIZES["quick" if a.quick else "full"]
    torch = None if a.no_torch else _import_torch()
    jax = None if a.no_jax else _import_jax()
    rounds = a.rounds or (2 if a.quick else 7)
    turn = 0.01 if a.quick else 0.3
    if a.cpu_time:
        ember.set_num_threads(1)
    if torch is not None:
        torch.set_num_threads(ember.get_num_threads())
    timer = (lambda steps: round_robin_cpu(steps, rounds, turn)) if a.cpu_time else \
        (lambda steps: round_robin(steps, rounds, turn, 1))
    print(f"bench/func.py: ember {ember.__version__}, threads {ember.get_num_threads()}"
          + (", process CPU time" if a.cpu_time else ", wall time")
          + (f", torch {torch.__version__}" if torch else "")
          + (f", jax {jax.__version__}" if jax else "") + (" (quick)" if a.quick else ""))
    rng = np.random.default_rng(0)
    if a.only in (None, "psg"):
        t = timer(per_sample_variants(sz, torch, jax, rng))
        report(f"per-sample gradients, MLP {sz['mlp']}, batch {sz['batch']}", t,
               [("ember vmap(grad)", "ember batched backward", 3.0, "<="),
                ("ember vmap(grad)", "torch.func vmap(grad)", 1.0, "<="),
                ("torch.func vmap(grad)", "torch batched backward", 3.0, "<=")])
    if a.only in (None, "jacrev"):
        t = timer(jacrev_variants(sz, torch, jax, rng))
        n = sz["jac"]
        report(f"jacrev of a {n}->{n} MLP ({n}-{n}-{n}, tanh)", t,
               [("ember row loop (before)", "ember jacrev (vmap)", 10.0, ">="),
                ("ember jacrev (vmap)", "torch.func.jacrev", 1.0, "<=")])
    if a.only in (None, "ensemble"):
        t = timer(ensemble_variants(sz, torch, jax, rng))
        report(f"ensemble forward, {sz['models']} MLPs {sz['mlp']}, batch {sz['batch']}", t,
               [("ember vmap ensemble", "ember bmm chain", 1.2, "<="),
                ("ember vmap ensemble", "torch.func vmap ensemble", 1.0, "<=")])
    return 0


if __name__ == "__main__":
    sys.exit(main())
