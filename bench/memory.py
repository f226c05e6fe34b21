"""Gradient checkpointing: activation memory and step time (issue 6, item 8).

Model: ``layers`` x [Linear(width, width) + ReLU], batch ``batch`` (default 64 x 1024, 256),
one forward + backward of ``out.sum()`` per step. Gradients already exist (a warm-up step
made them; later steps accumulate into them in place), so what a step adds on top of the
parameters, their gradients and the input is activation memory (saved values + the
backward's temporaries):

    activation bytes = allocator peak during the step - live bytes before it

Variants (Ember): ``plain``; ``ckpt 8 seg`` = ``checkpoint_sequential(model, 8, x)``;
``ckpt sqrt`` = ``segments=None`` (sqrt of the 2 x layers modules); ``selective`` =
``checkpoint(model, x, policy="save_matmul_conv")``; ``compile`` = ``ember.compile`` of the
same step and ``compile budget`` = ``memory_budget="75%"/"50%"/"25%"`` of its unbudgeted
activation peak (skipped with a note when ``memory_budget=`` does not exist); their
``estimate`` comes from the compiled memory plan. ``estimate`` is ``ember.estimate_memory``'s prediction of the same step,
made before it runs. PyTorch (when installed): plain and ``torch.utils.checkpoint.
checkpoint_sequential`` (non-reentrant) with the same segment counts — step times only
(PyTorch's CPU allocator keeps no statistics).

Timing is round-robin over the variants (median of each), ratios vs Ember plain.
Target (issue 6): >= 4x less activation memory at <= 1.35x step time.

Run:
    .venv/bin/python bench/memory.py              # full size (a few minutes on 2 cores)
    .venv/bin/python bench/memory.py --quick      # smoke run
"""
from __future__ import annotations

import argparse
import inspect
import math
import statistics
import sys
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import ember  # noqa: E402
from train import _import_torch  # noqa: E402


def build(lib, layers, width, seed=0):
    lib.manual_seed(seed)
    mods = []
    for _ in range(layers):
        mods += [lib.nn.Linear(width, width), lib.nn.ReLU()]
    return lib.nn.Sequential(*mods)


def ember_variants(model, layers):
    """name -> f(x) returning the model output, for Ember."""
    return {
        "plain": lambda x: model(x),
        "ckpt 8 seg": lambda x: ember.checkpoint_sequential(model, min(8, 2 * layers), x),
        "ckpt sqrt": lambda x: ember.checkpoint_sequential(model, None, x),
        "selective": lambda x: ember.checkpoint(model, x, policy="save_matmul_conv"),
    }


def torch_variants(torch, model, layers):
    from torch.utils.checkpoint import checkpoint_sequential
    sqrt_n = max(1, round(math.sqrt(2 * layers)))
    return {
        "torch plain": lambda x: model(x),
        "torch ckpt 8 seg": lambda x: checkpoint_sequential(model, min(8, 2 * layers), x,
                                                            use_reentrant=False),
        "torch ckpt sqrt": lambda x: checkpoint_sequential(model, sqrt_n, x,
                                                           use_reentrant=False),
    }


def step_of(fwd, x):
    def step():
        fwd(x).sum().backward()
    return step


def activation_bytes(step) -> int:
    """Allocator peak of one step above what was alive before it."""
    ember.reset_peak_memory_stats()
    base = ember.memory_stats()["current_bytes"]
    step()
    return ember.memory_stats()["peak_bytes"] - base


def estimated_activation_bytes(step) -> int:
    base = ember.memory_stats()["current_bytes"]
    return ember.estimate_memory(step).peak_bytes - base


def compiled_variants(model, x):
    """``ember.compile`` of the same step, unbudgeted and under ``memory_budget`` = 75/50/25 %
    of its own unbudgeted activation peak, or a note saying why there are none."""
    if "memory_budget" not in inspect.signature(ember.compile).parameters:
        return {}, "ember.compile has no memory_budget= yet (issue 6 item 5): rows skipped"

    def fwd_bwd(t):
        model(t).sum().backward()

    out = {}
    for frac in (None, 75, 50, 25):
        try:
            f = ember.compile(fwd_bwd, memory_budget=None if frac is None else f"{frac}%")
            f(x)                                   # capture (runs once)
        except Exception as e:  # noqa: BLE001 - report, don't stop the benchmark
            return out, f"ember.compile(memory_budget={frac}%) failed: {e}"[:300]
        out["compile" if frac is None else f"compile budget {frac}%"] = f
    return out, None
def round_robin(steps: dict, rounds: int) -> dict:
    """Median seconds per step of each variant; the variants take turns (after a warm-up)."""
    for step in steps.values():
        step()
    samples = {k: [] for k in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            time.sleep(0.05)
            t0 = time.perf_counter()
            step()
            samples[name].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in samples.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int)
    ap.add_argument("--width", type=int)
    ap.add_argument("--batch", type=int)
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--quick", action="store_true", help="tiny sizes, one round")
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args(argv)
    size = (8, 32, 16, 1) if args.quick else (64, 1024, 256, 3)
    for k, v in zip(("layers", "width", "batch", "rounds"), size):
        if getattr(args, k) is None:
            setattr(args, k, v)
    L, W, B = args.layers, args.width, args.batch
    model = build(ember, L, W)
    x = ember.randn(B, W)
    steps = {k: step_of(f, x) for k, f in ember_variants(model, L).items()}
    steps["plain"]()                                 # gradients exist from now on
    act = {k: activation_bytes(s) for k, s in steps.items()}
    est = {k: estimated_activation_bytes(s) for k, s in steps.items()}
    comp, note = compiled_variants(model, x)
    for k, f in comp.items():
        act[k] = activation_bytes(lambda f=f: f(x))
        est[k] = ember.estimate_memory(f, x).peak_bytes - ember.memory_stats()["current_bytes"]
    comp = {k: (lambda f=f: f(x)) for k, f in comp.items()}
    steps.update(comp)

    torch = None if args.no_torch else _import_torch()
    if torch is not None:
        tmodel = build(torch, L, W)
        tx = torch.from_numpy(x.numpy().copy())
        for k, f in torch_variants(torch, tmodel, L).items():
            steps[k] = step_of(f, tx)
        steps["torch plain"]()
    times = round_robin(steps, args.rounds)

    params = sum(p.numel() * p.element_size() for p in model.parameters())
    print(f"# Gradient checkpointing: {L} x [Linear({W},{W}) + ReLU], batch {B}, forward + "
          f"backward; params {params / 2**20:.1f} MiB (+ same for grads); "
          f"sqrt(N) over {2 * L} modules = {round(math.sqrt(2 * L))} segments")
    print(f"{'variant':<22} {'act MiB':>9} {'est MiB':>9} {'act vs plain':>13} "
          f"{'step ms':>9} {'time vs plain':>14}")
    p_act, p_t = act["plain"], times["plain"]
    for k in steps:
        a = act.get(k)
        e = est.get(k)
        a_s = f"{a / 2**20:9.2f}" if a is not None else f"{'-':>9}"
        e_s = f"{e / 2**20:9.2f}" if e is not None else f"{'-':>9}"
        r_s = f"{p_act / a:12.2f}x" if a else f"{'-':>13}"
        print(f"{k:<22} {a_s} {e_s} {r_s} {times[k] * 1e3:9.1f} {times[k] / p_t:13.2f}x")
    if note:
        print(f"note: {note}")
    if torch is None and not args.no_torch:
        print("note: PyTorch not installed: torch rows skipped")
    best = max((p_act / act[k], k) for k in ("ckpt 8 seg", "ckpt sqrt"))
    print(f"target: >= 4x less activation memory at <= 1.35x step time; "
          f"{best[1]}: {best[0]:.2f}x less at {times[best[1]] / p_t:.2f}x time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
