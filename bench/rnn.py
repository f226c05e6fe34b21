"""Recurrent language-model training steps: Ember (fused layers and the per-step composite)
vs PyTorch eager, each library timed in its own process.

Model (same shapes in every library): Embedding(64, 64) -> 2-layer nn.LSTM / nn.GRU /
nn.RNN (hidden 128, batch_first) -> Linear(128, 64), batch 32, 32 steps, cross-entropy,
Adam. Each child builds the model, warms up, times ``--steps`` training steps and prints
the median; the parent runs the children alternately (ember, ember-composite, torch, ...)
``--rounds`` times and reports the medians of the medians.

Libraries: ``ember`` (fused ``lstm_layer``/``gru_layer``/``rnn_layer`` primitives),
``ember-composite`` (``ember.nn.modules._rnn_fused._FUSED = False``: the per-step
composite, the path before the fused primitives), ``torch``.

Run:
    .venv/bin/python bench/rnn.py [--cells lstm gru rnn] [--rounds 3] [--steps 20] [--threads N]
        [--clock wall|cpu]

The machine may be shared: alternate, take medians, and say so with the numbers.
"""
from __future__ import annotations

import argparse
import statistics

from _common import RNN_LM, run_child

_CHILD = r"""
import json, statistics, sys, time
lib_name, cell, steps, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if lib_name.startswith("ember"):
    import ember as lib
    if lib_name == "ember-composite":
        import ember.nn.modules._rnn_fused as _r
        _r._FUSED = False
else:
    import torch as lib
nn, F = lib.nn, lib.nn.functional
if threads:
    lib.set_num_threads(threads)
lib.manual_seed(0)
Cell = {"lstm": nn.LSTM, "gru": nn.GRU, "rnn": nn.RNN}[cell]
""" + RNN_LM + r"""for _ in range(3):
    step()
ts, cs = [], []
for _ in range(steps):
    c0, t0 = time.process_time(), time.perf_counter()
    step()
    ts.append(time.perf_counter() - t0)
    cs.append(time.process_time() - c0)
print(json.dumps({"wall": statistics.median(ts), "cpu": statistics.median(cs)}))
"""

LIBS = ("ember", "ember-composite", "torch")


def _child(lib: str, cell: str, steps: int, threads: int, clock: str) -> float:
    return run_child(_CHILD, [lib, cell, str(steps), str(threads)], f"{lib} {cell}")[clock]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", nargs="+", default=["lstm", "gru", "rnn"],
                    choices=["lstm", "gru", "rnn"])
    ap.add_argument("--libs", nargs="+", default=list(LIBS), choices=list(LIBS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=0,
                    help="set_num_threads(N) in every library (0: each library's default)")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="wall: perf_counter; cpu: process_time (with --threads 1, the work "
                         "per step, robust to other load on a shared machine)")
    a = ap.parse_args()
    print(f"clock: {a.clock}, threads: {a.threads or 'default'}")
    print(f"{'cell':6} " + " ".join(f"{lib + ' ms':>20}" for lib in a.libs) +
          "   ember/torch")
    for cell in a.cells:
        runs = {lib: [] for lib in a.libs}
        for _ in range(a.rounds):
            for lib in a.libs:
                runs[lib].append(_child(lib, cell, a.steps, a.threads, a.clock))
        med = {lib: statistics.median(v) * 1e3 for lib, v in runs.items()}
        ratio = f"{med['ember'] / med['torch']:.2f}x" if {"ember", "torch"} <= med.keys() \
            else "-"
        print(f"{cell:6} " + " ".join(f"{med[lib]:20.2f}" for lib in a.libs) +
              f"   {ratio:>10}")


if __name__ == "__main__":
    main()
