"""``ember.onnx.export(..., dynamic_axes=...)``: capture at the example sizes and at two
other sizes of each symbolic dimension (n-1 and n-2 when n >= 4, else n+1 and n+3), fit
the shape vectors that change (:mod:`ember.onnx.dynamic`), and convert once more with
those entries computed at run time.
"""
from __future__ import annotations

import numpy as np

from ..tensor import Tensor
from .dynamic import RecordingBuilder, check_same_structure, fit, normalize


def _slot(label: str) -> int:
    return int(label[3:])                 # NOTE: capture() labels tensor arguments "arg<i>"


def _resized(args, members, labels, size: int):
    """``args`` with each (graph input, axis) of ``members`` cycled to ``size``."""
    import ember
    out = list(args)
    for pos, axis in members:
        i = _slot(labels[pos])
        x = out[i]
        idx = ember.tensor(np.arange(size) % x.shape[axis], dtype=ember.int64, device=x.device)
        out[i] = x.index_select(axis, idx)
    return tuple(out)


def _symbols(ins, args, labels) -> tuple[dict, dict]:
    """``({symbol: [(graph input, axis)...]}, {symbol: example size})``."""
    members: dict = {}
    for pos, axes in ins.items():
        for axis, sym in axes.items():
            members.setdefault(sym, []).append((pos, axis))
    sizes = {}
    for sym, mem in members.items():
        got = {int(args[_slot(labels[p])].shape[a]) for p, a in mem}
        if len(got) != 1:
            raise ValueError(f"ember.onnx.export: dynamic dim {sym!r} has different example "
                             f"sizes {sorted(got)} on {mem}")
        sizes[sym] = got.pop()
        if sizes[sym] == 0:
            raise ValueError(f"ember.onnx.export: dynamic dim {sym!r} is 0 in the example; "
                             f"give an example with a nonzero size")
    return members, sizes


def export_dynamic(model, args, input_names, output_names, opset: int, dynamic_axes):
    """The ``onnx.ModelProto`` of ``model(*args)`` with symbolic ``dynamic_axes``."""
    from .exporter import _name, capture, to_onnx
    graph, sources, labels, outputs = capture(model, args)
    in_names = list(input_names or [f"input{i}" for i in range(len(labels))])
    out_names = list(output_names or [f"output{i}" for i in range(len(outputs))])
    if not all(isinstance(a, Tensor) for a in args):
        raise TypeError("ember.onnx.export: dynamic_axes needs every argument to be a tensor")
    ins, outs = normalize(dynamic_axes, in_names, out_names)
    members, sizes = _symbols(ins, args, labels)
    kw = dict(input_names=in_names, output_names=out_names, opset=opset)
    base = RecordingBuilder(opset)
    to_onnx(graph, sources, labels, outputs, builder=base, **kw)
    variants, out_var = {}, {}
    for sym, mem in members.items():
        runs = []
        n = sizes[sym]       # NOTE: smaller sizes where possible (a GPT's T <= block_size)
        for size in ((n - 1, n - 2) if n >= 4 else (n + 1, n + 3)):
            g2, s2, l2, o2 = capture(model, _resized(args, mem, labels, size))
            rb = RecordingBuilder(opset)
            to_onnx(g2, s2, l2, o2, builder=rb, **kw)
            check_same_structure(base, rb, sym)
            runs.append((rb.int_calls, size))
            out_var.setdefault(sym, []).append(([tuple(v.shape) for v in o2], size))
        variants[sym] = runs
    plan = fit(base.int_calls, variants, sizes)
    out_dims = _output_symbols(outputs, out_names, outs, out_var, sizes)
    final = RecordingBuilder(opset, plan=plan, dims={s: m[0] for s, m in members.items()})
    return to_onnx(graph, sources, labels, outputs, builder=final, in_dims=ins,
                   out_dims=out_dims, name=_name(model), **kw)


def _output_symbols(outputs, out_names, outs, out_var, sizes) -> dict:
    """Output axes that change with a symbol: the symbol's name where the axis *is* that
    dimension, else the user's name or ``<output>_dim<axis>``."""
    table = {pos: dict(axes) for pos, axes in outs.items()}
    for i, v in enumerate(outputs):
        for d, n in enumerate(v.shape):
            if d in table.get(i, {}):
                continue
            deps = [s for s, runs in out_var.items() if any(r[0][i][d] != n for r in runs)]
            if not deps:
                continue
            same = len(deps) == 1 and n == sizes[deps[0]] and all(
                r[0][i][d] == m for r, m in ((r, r[1]) for r in out_var[deps[0]]))
            table.setdefault(i, {})[d] = deps[0] if same else f"{out_names[i]}_dim{d}"
    return table
