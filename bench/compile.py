"""Compiled training steps: Ember eager vs ``ember.compile`` vs PyTorch eager and torch.compile.

The W1-W3 workloads of ``bench/train.py`` (same models, data, weights and optimizers), each
step written once — zero_grad, forward, cross-entropy, backward, optimizer step — and run:

* ``ember``          eager Ember,
* ``ember.compile``  the same function captured whole by ``ember.compile`` (forward,
                     backward and update in one graph),
* ``torch``          PyTorch eager, and ``torch.compile`` (inductor) when it works here.

Timing is round-robin (see ``bench/train.py``); compile times (first call, including the
traced eager run) are reported separately. Losses of all variants must agree.

Run:
    .venv/bin/python bench/compile.py                   # everything (torch.compile: minutes)
    .venv/bin/python bench/compile.py --no-torch-compile
    .venv/bin/python bench/compile.py --quick           # smoke run
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import ember  # noqa: E402
from train import WORKLOADS, _import_torch, numpy_state, round_robin  # noqa: E402


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


def variants(wl, torch, use_torch_compile: bool, tiny=False) -> tuple[dict, dict]:
    """{name: zero-arg step} and {name: compile seconds} for every variant of ``wl``."""
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
    return steps, compile_s


def check_losses(name, steps) -> None:
    """Every variant, two steps in, gives the same third loss as eager Ember."""
    for k, f in steps.items():
        if not k.endswith("compile"):
            f(), f()            # the compiled variants ran their two steps while compiling
    got = {k: float(f()) for k, f in steps.items()}
    for k, v in got.items():
        tol = 1e-6 if k.startswith("ember") else 1e-4
        if not abs(v - got["ember"]) <= tol * abs(got["ember"]):
            raise SystemExit(f"{name}: third-step loss of {k} is {v!r}, eager Ember's is "
                             f"{got['ember']!r} (rtol {tol})")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke run (times not meaningful)")
    ap.add_argument("--only", default="", help="run workloads whose name contains this")
    ap.add_argument("--no-torch-compile", action="store_true", help="skip torch.compile")
    args = ap.parse_args(argv)
    torch = _import_torch()
    rounds, turn_s, warmup = (2, 0.02, 1) if args.quick else (11, 0.3, 3)
    info = ember.show_config()
    if torch is not None:
        if isinstance(info.get("blas_threads"), int):
            torch.set_num_threads(info["blas_threads"])
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    cols = ["ember", "ember.compile", "torch", "torch.compile"]
    print(f"\n{'workload':<14}" + "".join(f"{c:>15}" for c in cols) +
          f"{'compiled/eager':>16}{'compiled/torch':>16}")
    compile_rows = []
    for name, wl in WORKLOADS.items():
        if args.only.lower() not in name.lower():
            continue
        steps, compile_s = variants(wl, torch, not args.no_torch_compile and not args.quick,
                                    tiny=args.quick)
        explain = steps.pop("_explain")
        check_losses(name, steps)
        times = round_robin(steps, rounds, turn_s, warmup)
        row = f"{name:<14}" + "".join(
            f"{times[c] * 1e3:>12.2f} ms" if c in times else f"{'-':>15}" for c in cols)
        r1 = times["ember.compile"] / times["ember"]
        r2 = f"{times['ember.compile'] / times['torch']:>15.2f}x" if "torch" in times else \
            f"{'-':>16}"
        print(row + f"{r1:>15.2f}x" + r2)
        log = explain()
        cap = log.captures[-1]
        totals = ", ".join(f"{p['pass']}: " + (", ".join(f"{k} {v}" for k, v in
                                                          p["changed"].items()) or "-")
                           for p in cap.passes)
        compile_rows.append(f"{name:<14} ember.compile {compile_s['ember.compile']:.2f} s "
                            f"(2 traced calls), {cap.nodes_traced} nodes traced -> "
                            f"{cap.nodes_after} after passes [{totals}]" +
                            (f"; torch.compile {compile_s['torch.compile']:.1f} s"
                             if "torch.compile" in compile_s else ""))
        sys.stdout.flush()
    print("\ncompile times and graph sizes:")
    for r in compile_rows:
        print("  " + r)
    print("\nratios are step-time ratios: < 1 means the compiled step is faster")
    return 0


if __name__ == "__main__":
    sys.exit(main())
