"""What ember.profiler's hook costs the dispatcher when no profile records.

A/B in one process: ``dispatch.apply`` as it is, and the same function compiled without
its two profiler lines (its code object swapped in), alternated for ``--rounds`` rounds of
1-element ``a + b``; prints medians and percentiles of ns per add.

Run:
    .venv/bin/python bench/profiler_overhead.py [--rounds 41]
"""
from __future__ import annotations

import argparse
import inspect
import statistics
import timeit

import ember as em
import numpy as np
from ember.ops import dispatch


def _without_hook():
    lines = inspect.getsource(dispatch.apply).splitlines(True)
    i = next(k for k, line in enumerate(lines) if "st.profiler is not None" in line)
    ns = dict(vars(dispatch))
    exec(compile("".join(lines[:i] + lines[i + 2:]), dispatch.__file__, "exec"), ns)
    return ns["apply"].__code__


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=41)
    args = ap.parse_args()
    codes = {"with hook": dispatch.apply.__code__, "without": _without_hook()}
    a, b = em.ones(1), em.ones(1)
    res = {k: [] for k in codes}
    try:
        for _ in range(args.rounds):
            for k, code in codes.items():
                dispatch.apply.__code__ = code
                res[k].append(min(timeit.repeat(lambda: a + b, number=10000, repeat=3))
                              / 10000 * 1e9)
    finally:
        dispatch.apply.__code__ = codes["with hook"]
    for k, v in res.items():
        print(f"{k:10s} median {statistics.median(v):6.0f} ns/add   p10 "
              f"{np.percentile(v, 10):6.0f}   p25 {np.percentile(v, 25):6.0f}")


if __name__ == "__main__":
    main()
