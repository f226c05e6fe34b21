"""A/B in one process: eager ``F.linear`` as the one-op ``linear`` primitive in every float
dtype (and attention's VJP into the unbind's slots on ``cuda``) against the old routing
(the primitive for float32 only; slots on the CPU only), alternating rounds.

Two workloads (this machine's timing noise between processes is larger than the
difference, so both variants run in one process, alternately):

* ``gpu-host``: the eager GPT step on the CUDA stand-in with launches stubbed
  (``bench/cuda_host.py``'s set-up: 12 layers at tiny dims, float16 autocast, AdamW, layer
  composites compiled as at full size) — the host (Python) time of the step a GPU runs;
* ``cpu-bf16``: ``bench/train.py``'s W1/W2/W3 eager steps under bfloat16 autocast on the
  CPU, one thread (``--workloads``).

Prints each variant's median and minimum milliseconds a step and the dispatches a step.

Run: ``python bench/eager_linear_ab.py [--rounds 20] [--which gpu-host,cpu-bf16]
[--workloads W1,W2,W3]``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(
    os.path.abspath(__file__))]     # NOTE: see bench/cuda.py (the `cuda` package)
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def _variants(em):
    """``{"new": set(), "old": set()}``: functions switching the routing."""
    import ember.nn.functional._layers as L
    from ember.ops import attention as A
    new_dtypes, slots = L._LINEAR_DTYPES, A.unbind_slots

    def old_slots(q, k, v):
        return slots(q, k, v) if q._device.type == "cpu" else None

    def use(name):
        L._LINEAR_DTYPES = new_dtypes if name == "new" else frozenset((em.float32,))
        A.unbind_slots = slots if name == "new" else old_slots
    return use


def _ab(label, step, use, rounds, reps, clock):
    res = {"new": [], "old": []}
    for r in range(rounds):
        for name in ("new", "old") if r % 2 else ("old", "new"):
            use(name)
            step()
            t = clock()
            for _ in range(reps):
                step()
            res[name].append((clock() - t) / reps * 1e3)
    for name in ("old", "new"):
        use(name)
        v = res[name]
        print(f"{label:<18} {name}: {statistics.median(v):8.2f} ms median, {min(v):8.2f} min "
              f"({rounds} rounds)")
    use("new")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--which", default="gpu-host,cpu-bf16")
    p.add_argument("--workloads", default="W1,W2,W3")
    a = p.parse_args(argv)
    which = a.which.split(",")
    if "gpu-host" in which:
        import cuda_host
        cuda_host._setup()
        import numpy as np
        import ember as em
        from cuda_compile import _step
        from ember.codegen import eager_composite
        eager_composite.MIN_ELEMENTS = 0
        step, inputs = _step(em, 12, 64, 1, 16, 1, 128)
        np.seterr(all="ignore")
        for _ in range(6):
            step(*inputs)
        use = _variants(em)
        for name in ("old", "new"):
            use(name)
            print(f"gpu-host {name}: {cuda_host._dispatches(step, inputs)[:60]}")
        _ab("gpu-host GPT", lambda: step(*inputs), use, a.rounds, 3, time.thread_time)
    if "cpu-bf16" in which:
        import numpy as np
        import ember as em
        if HERE not in sys.path:        # NOTE: cuda_host's import drops this folder again
            sys.path.insert(0, HERE)
        import train as tb
        em.set_num_threads(1)
        use = _variants(em)
        for wl_name in (n for n in tb.WORKLOADS if n.split()[0] in a.workloads.split(",")):
            if wl_name == "W1 MLP Adam":
                continue
            wl = tb.WORKLOADS[wl_name]
            em.manual_seed(0)
            model, opt = wl.build(em, **wl.size)
            x, y = wl.data(np.random.default_rng(0), **wl.size)
            x, y = em.tensor(x), em.tensor(y)
            F = em.nn.functional

            def whole():
                opt.zero_grad()
                with em.autocast("cpu", dtype=em.bfloat16):
                    out = model(x)
                    loss = F.cross_entropy(out.reshape(-1, out.shape[-1]).float(),
                                           y.reshape(-1))
                loss.backward()
                opt.step()
            for _ in range(3):
                whole()
            _ab(f"cpu-bf16 {wl_name.split()[0]}", whole, use,
                max(4, a.rounds // (1 if wl_name.startswith("W1") else 2)), 1,
                time.process_time)
    return 0


if __name__ == "__main__":
    sys.exit(main())
