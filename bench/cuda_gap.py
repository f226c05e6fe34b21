"""Kernel launches and bytes of one eager vs one compiled GPT step on the GPU (issue 21).

Why is ``em.compile(step)`` slower than the eager step on the GPU? Without a GPU this
counts, on the CPU stand-in given a GPU's ``cuda_kernels`` (``EMBER_FAKE_CUDA=1``, as
``bench/cuda_compile.py``: CUDA modules are stubs that record each launch and run
nothing, so values are garbage; only sizes matter), every launch of one eager step and one
compiled step of ``bench/cuda.py``'s GPT (float16 autocast, AdamW), with the bytes each
touches (inputs + outputs, from the arrays' sizes: an upper bound on DRAM traffic, the same
measure on both sides), grouped by path: generated fused kernel, eager composite /
optimizer kernel, attention, GEMM, CuPy elementwise, CuPy reduction, cast, copy.

Run: ``python bench/cuda_gap.py [--layers 2 --d 768 --t 256 --batch 2 --vocab 50257]``
(~2 min on 2 cores at these sizes; ``--names N`` lists the N biggest rows;
``CGAP_DETAIL=1`` prints each fused step's and each outside launch's shapes and dtypes).
"""
from __future__ import annotations

import argparse
import collections
import os
import sys

sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(
    os.path.abspath(__file__))]     # NOTE: see bench/cuda.py (the `cuda` package)
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

GEMM = {"matmul", "linear", "bmm", "addmm", "mm", "baddbmm", "gemm"}
CAST = {"convert", "to_dtype", "astype", "cast", "_to_copy", "type_as"}
REDUCE = {"sum", "mean", "amax", "amin", "max", "min", "prod", "logsumexp", "var",
          "argmax", "norm", "colsum"}


def _nbytes(a) -> int:
    n = getattr(a, "nbytes", None)
    if n is not None and getattr(a, "ndim", 0) > 0:
        return int(n)
    d = getattr(a, "_data", None)
    return _nbytes(d) if d is not None else 0


def _flat(x):
    if isinstance(x, (list, tuple)):
        for y in x:
            yield from _flat(y)
    else:
        yield x


class Recorder:
    """The dispatcher's / executor's profiler hook and the module loader's stub in one:
    a primitive or executor step is one event; the stub launches inside it are its
    kernels; launches outside any event (AdamW's kernel, ...) are events of their own."""

    def __init__(self):
        self.rows = []          # (category, name, launches, bytes)
        self.depth = 0
        self.inner = []         # launches seen inside the current event

    # ---------------------------------------------------------------- loader stub
    def launch(self, name, args, writes=None):
        b = sum(_nbytes(a) for a in args)
        for i, a in enumerate(args):    # NOTE: nothing runs: zeros keep later index ops
            if getattr(a, "ndim", 0) and getattr(a, "flags", None) is not None \
                    and a.flags.writeable and (writes is None or i < len(writes) and
                                               writes[i]):      # in bounds (outputs only)
                a[...] = 0
        if os.environ.get("CGAP_DETAIL") and not self.depth:
            print("DETAIL launch", name, [(a.shape, str(a.dtype)) if hasattr(a, "shape")
                                          else type(a).__name__ for a in args])
        if self.depth:
            self.inner.append((name, b))
        else:
            self.rows.append(("0-d scalar kernels" if b < 64 else _kcat(name, None), name, 1,
                              b))

    # ---------------------------------------------------------------- profiler hooks
    def op(self, op, inputs, params):
        from ember.autograd.grad_mode import state
        from ember.ops.dispatch import apply as _apply
        saved, self.inner, self.depth = self.inner, [], self.depth + 1
        state.profiler = None
        try:
            out = _apply(op, inputs, params)
        finally:
            state.profiler = self
            self.depth -= 1
        inner, self.inner = self.inner, saved
        if getattr(op, "view", False) and not inner:
            return out
        b = sum(_nbytes(x) for x in _flat(list(inputs))) + sum(_nbytes(x)
                                                               for x in _flat(out))
        self._event(op.name, inner, b)
        return out

    def call(self, name, cat, fn, *args):
        if cat != "kernel":
            return fn(*args)
        s, vals = args[0], args[1]
        ins = [vals[i] for i in s.args]
        saved, self.inner, self.depth = self.inner, [], self.depth + 1
        try:
            out = fn(*args)
        finally:
            self.depth -= 1
        inner, self.inner = self.inner, saved
        if s.casts is not None:
            for a, c in zip(ins, s.casts):
                if c is not None and a is not None and a.dtype != c:
                    self.rows.append(("cast (executor, CuPy)", f"{name}:cast", 1,
                                      a.nbytes + a.size * _itemsize(c)))
        outs = [vals[o] for o in s.outs]
        if not inner and len(ins) == 1 and len(outs) == 1 and outs[0] is not None and \
                _shares(ins[0], outs[0]):
            return out          # a view step (reshape, permute, slice): no launch
        b = sum(_nbytes(a) for a in ins) + sum(_nbytes(o) for o in outs)
        if os.environ.get("CGAP_DETAIL") and inner:
            print("DETAIL", name, inner[0][0], [(getattr(a, "shape", None),
                  str(getattr(a, "dtype", ""))) for a in ins],
                  [(getattr(o, "shape", None), str(getattr(o, "dtype", ""))) for o in outs])
        self._event(getattr(s.kernel, "op_name", None) or name, inner, b)
        return out

    def _event(self, name, inner, b):
        if inner and b == 0 or inner and all(kb < 64 for _k, kb in inner):
            self.rows.append(("0-d scalar kernels", inner[0][0], len(inner), b))
            return
        if inner:       # NOTE: the event's arrays, not the launch's (plans repeat them)
            self.rows.append((_kcat(inner[0][0], name), inner[0][0], len(inner), b))
            return
        self.rows.append((_opcat(name), name, 1, b))


def _itemsize(dtype) -> int:
    import numpy as np
    return np.dtype(dtype).itemsize


def _shares(a, b) -> bool:
    import numpy as np
    try:
        return bool(np.shares_memory(a, b))
    except TypeError:
        return False


def _kcat(kname, opname):
    if kname == "cublas_gemm":
        return "GEMM"

    if "flash" in kname or "attn" in kname:
        return "attention"
    if "adam" in kname or "optim" in kname:
        return "optimizer kernel"
    if "eager" in kname:
        return "eager generated elementwise"
    if "colsum" in kname or "reduce" in kname:
        return "generated reduction"
    return "generated fused kernel" if opname is None or opname.startswith("fused") \
        else f"generated ({opname})"


def _opcat(name):
    base = name.split(":")[0].split("_")[0] if not name.startswith("fused") else "fused"
    if name in GEMM or base in GEMM or "gemm" in name or "matmul" in name:
        return "GEMM"
    if name.startswith("sdpa"):
        return "attention"
    if name in CAST or "cast" in name or "convert" in name:
        return "cast (CuPy)"
    if name in REDUCE or base in REDUCE or "sum" in name:
        return "reduction (CuPy)"
    if name in ("copy", "clone", "contiguous", "copy_", "cat", "stack", "pad", "scatter",
                "index_put", "gather", "embedding", "index_select", "take"):
        return "copy/gather (CuPy)"
    if name.startswith("fused"):
        return "fused (no launch recorded)"
    return "elementwise (CuPy)"


def _writes(source: str, name: str):
    """Per parameter of kernel ``name`` in ``source``: whether the kernel may write it (a
    non-const pointer), or None when its signature is not found (then every writeable
    array argument counts as written)."""
    import re
    m = re.search(r'__global__ void ' + re.escape(name) + r'\(([^)]*)\)', source)
    if m is None:
        return None
    return tuple("*" in p and "const" not in p for p in m.group(1).split(","))


def _setup(rec):
    os.environ["EMBER_FAKE_CUDA"] = "1"
    os.environ.setdefault("EMBER_GRAPH_CACHE", "0")
    import numpy as np
    from ember.codegen import cuda_cache, cuda_gemm
    from ember.device.base import cuda_backend
    be, _ = cuda_backend()
    be.capabilities = be.capabilities - {"host_kernels"} | {"cuda_kernels"}

    class Stub:
        def __init__(self, mod, source=""):
            self.mod, self.source = mod, source

        def get_function(self, name):
            w = _writes(self.source, name)
            return lambda grid, block, args, shared_mem=0, **k: rec.launch(name, args, w)

    cuda_cache.module_loader = lambda source, name: Stub(name, source)

    def matmul(xp, x, y, tf32=False, out=None):   # the stand-in has no cuBLAS
        rec.launch("cublas_gemm", (x, y))
        r = np.zeros(np.broadcast_shapes(x.shape[:-2], y.shape[:-2]) + (x.shape[-2], y.shape[-1]),
                     x.dtype)
        if out is None:
            return r
        return out
    cuda_gemm.matmul = matmul


def measure(fn, args, rec):
    import numpy as np
    from ember.autograd.grad_mode import state
    from ember.ops import dispatch
    rec.rows.clear()
    dispatch._profiling += 1
    state.profiler = rec
    try:
        with np.errstate(all="ignore"):
            fn(*args)
    finally:
        state.profiler = None
        dispatch._profiling -= 1
    tot = collections.defaultdict(lambda: [0, 0])
    for cat, _n, k, b in rec.rows:
        tot[cat][0] += k
        tot[cat][1] += b
    return dict(tot), list(rec.rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--d", type=int, default=768)
    p.add_argument("--t", type=int, default=256)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--names", type=int, default=0, help="list the N biggest rows of each")
    a = p.parse_args(argv)
    rec = Recorder()
    _setup(rec)
    import ember as em
    from cuda_compile import _step
    import numpy as np
    res = {}
    for label in ("eager", "compiled"):
        step, inputs = _step(em, a.layers, a.d, a.d // 64, a.t, a.batch, a.vocab)
        fn = em.compile(step) if label == "compiled" else step
        with np.errstate(all="ignore"):
            for _ in range(4):      # state made, eager composites recorded, graph traced
                fn(*inputs)
        res[label] = measure(fn, inputs, rec)
    print(f"GPT {a.layers} layers d={a.d} T={a.t} batch={a.batch} vocab={a.vocab}, float16 "
          "autocast, stand-in (bytes = inputs + outputs of each launch)")
    print(f"{'category':<34} {'eager launches':>14} {'MB':>9} {'compiled launches':>17} "
          f"{'MB':>9}")
    cats = sorted(set(res["eager"][0]) | set(res["compiled"][0]))
    te, tc = [0, 0], [0, 0]
    for c in cats:
        e = res["eager"][0].get(c, [0, 0])
        k = res["compiled"][0].get(c, [0, 0])
        te = [te[0] + e[0], te[1] + e[1]]
        tc = [tc[0] + k[0], tc[1] + k[1]]
        print(f"{c:<34} {e[0]:>14} {e[1] / 1e6:>9.1f} {k[0]:>17} {k[1] / 1e6:>9.1f}")
    print(f"{'total':<34} {te[0]:>14} {te[1] / 1e6:>9.1f} {tc[0]:>17} {tc[1] / 1e6:>9.1f}")
    sys.path.insert(0, HERE)            # NOTE: cuda_compile's import took it off
    from cuda_host import _copies
    print(f"compiled graph: {_copies(fn)} (CPU scalars: step counts, bias corrections, "
          "computed on the host: 'fused (no launch recorded)'); eager's AdamW kernel takes "
          "its scalars by value")
    print("NOTE: in-place launches (eager AdamW: p, g, m, v) count each array once; the "
          "AdamW kernel really moves 28 B/element (read p g m v, write p m v)")
    if a.names:
        for label in ("eager", "compiled"):
            agg = collections.defaultdict(lambda: [0, 0])
            for cat, n, k, b in res[label][1]:
                agg[(cat, n)][0] += k
                agg[(cat, n)][1] += b
            print(f"-- {label}: biggest rows")
            for (cat, n), (k, b) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:a.names]:
                print(f"  {cat:<30} {n[:60]:<60} {k:>5} {b / 1e6:>9.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
