"""``ember.viz``: draw an IR graph with Graphviz (DOT text, and SVG/PNG when ``dot`` exists).

One box per node (op name, short params, output type), edges labelled with the shape and
dtype of the value they carry; graph inputs are blue ovals (labelled with where they come
from: ``arg0``, ``model.0.weight``), constants grey, random draws dashed, graph-only fused
ops orange, outputs green. A :class:`~ember.graph.compile.CompiledFunction` gives two
drawings, before and after its passes::

    >>> ember.viz(ember.compile(model), "mlp.svg")      # after one call
    ['mlp.before.dot', 'mlp.after.dot']                  # + .svg files when dot is installed
"""
from __future__ import annotations

import os
import shutil
import subprocess
import warnings

from ..errors import GraphError
from .ir import CONSTANT, Graph, GraphOp, Var, _fmt_param

__all__ = ["viz", "to_dot"]

#: what ``dot -T`` can render, by file suffix.
RENDERED = (".svg", ".png", ".pdf")
_PARAM_CHARS = 32


def viz(graph, path, *, title: str | None = None) -> list:
    """Write ``graph`` (a :class:`Graph` or a compiled function) as Graphviz files.

    ``path`` ending in ``.svg``/``.png``/``.pdf`` writes the DOT source beside it
    (``g.dot``) and renders that format with Graphviz's ``dot``; any other path writes
    ``<path>.dot`` (and an SVG beside it when ``dot`` is installed). Without ``dot`` only
    the ``.dot`` files are written, with a warning when a rendering was asked for. A
    :class:`~ember.graph.compile.CompiledFunction` writes ``name.before.*`` (as traced)
    and ``name.after.*`` (after its passes) for its most recent capture.

    Returns:
        The paths written, DOT files first.

    Example:
        >>> c = ember.compile(model); c(x)
        >>> ember.viz(c, "model.svg")
    """
    path = os.fspath(path)
    stem, ext = os.path.splitext(path)
    if ext.lower() not in RENDERED + (".dot", ".gv"):
        stem, ext = path, ""
    if isinstance(graph, Graph):
        return _write(graph, stem, ext, title)
    raw, opt = _captured(graph)
    name = title or getattr(graph, "name", "graph")
    return (_write(raw, stem + ".before", ext, f"{name} (as traced)")
            + _write(opt, stem + ".after", ext, f"{name} (after passes)"))


def _captured(compiled):
    if not (hasattr(compiled, "raw_graphs") and hasattr(compiled, "graphs")):
        raise TypeError(f"ember.viz: expected an ember Graph or a compiled function, got "
                        f"{type(compiled).__name__}")
    raw, opt = compiled.raw_graphs(), compiled.graphs()
    if not raw or not opt:
        raise GraphError(f"ember.viz: {getattr(compiled, 'name', 'the function')} has no "
                         f"captured graph yet (call it once first, or see explain())")
    return raw[-1], opt[-1]


def _write(graph: Graph, stem: str, ext: str, title) -> list:
    src = stem + ".dot"
    with open(src, "w", encoding="utf-8") as f:
        f.write(to_dot(graph, title=title))
    written = [src]
    fmt = ext.lower().lstrip(".") if ext.lower() in RENDERED else "svg"
    dot = shutil.which("dot")
    if dot is None:
        if ext.lower() in RENDERED:
            warnings.warn(f"ember.viz: Graphviz 'dot' is not installed; wrote {src} only "
                          f"(render it with: dot -T{fmt} {src} -o {stem}.{fmt})", stacklevel=3)
        return written
    out = f"{stem}.{fmt}"
    subprocess.run([dot, f"-T{fmt}", src, "-o", out], check=True, capture_output=True,
                   timeout=120)
    return written + [out]


# ---------------------------------------------------------------------- DOT text
_STYLE = {
    "input": 'shape=ellipse, style=filled, fillcolor="#dbeafe"',
    "constant": 'shape=box, style="rounded,filled", fillcolor="#e5e7eb"',
    "random": 'shape=box, style="dashed,filled", fillcolor="#fef3c7"',
    "fused": 'shape=box, style="filled", fillcolor="#fed7aa"',
    "op": 'shape=box, style="filled", fillcolor="#ffffff"',
    "output": 'shape=ellipse, style=filled, fillcolor="#bbf7d0"',
}


def to_dot(graph: Graph, title: str | None = None) -> str:
    """The Graphviz DOT source of ``graph`` (see :func:`viz`)."""
    title = title or graph.name
    lines = [f"digraph {_q(title)} {{",
             f"  label={_q(title)}; labelloc=t; rankdir=TB;",
             '  node [fontname="Helvetica", fontsize=10];',
             '  edge [fontname="Helvetica", fontsize=9, color="#555555"];']
    where: dict = {}           # var id -> DOT node id
    for k, v in enumerate(graph.inputs):
        nid = f"in{k}"
        where[v.id] = nid
        lines.append(f"  {nid} [label={_q(_var_label(v))}, {_STYLE['input']}];")
    for i, n in enumerate(graph.nodes):
        nid = f"n{i}"
        for o in n.outs:
            where[o.id] = nid
        lines.append(f"  {nid} [label={_q(_node_label(n))}, {_STYLE[_kind(n)]}];")
    for k, v in enumerate(graph.outputs):
        lines.append(f"  out{k} [label={_q(f'output {k}')}, {_STYLE['output']}];")
    multi = {f"n{i}" for i, n in enumerate(graph.nodes) if len(n.outs) != 1}
    for i, n in enumerate(graph.nodes):
        for x in n.inputs:
            if x.__class__ is Var:
                lines.append(f"  {where[x.id]} -> n{i} [label={_q(_edge(x, where, multi))}];")
    for k, v in enumerate(graph.outputs):
        lines.append(f"  {where[v.id]} -> out{k} [label={_q(_edge(v, where, multi))}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _kind(n) -> str:
    if n.op is CONSTANT:
        return "constant"
    if n.is_random():
        return "random"
    return "fused" if isinstance(n.op, GraphOp) else "op"


def _var_label(v: Var) -> str:
    return f"{v.name or f'%{v.id}'}\n{v.type_str()}"


def _node_label(n) -> str:
    head = n.op.name
    scalars = [_short(_fmt_param(x)) for x in n.inputs if x.__class__ is not Var]
    if scalars:
        head += f"({', '.join(scalars)})"
    lines = [head]
    for k, v in n.params.items():
        if n.op is CONSTANT and k == "value":
            lines.append(_short(_fmt_param(v)))
        elif not callable(v) or isinstance(v, Graph):
            lines.append(f"{k}={_short(_fmt_param(v))}")
    lines.append(", ".join(o.type_str() for o in n.outs))
    return "\n".join(lines)


def _edge(v: Var, where, multi) -> str:
    return f"%{v.id}: {v.type_str()}" if where[v.id] in multi else v.type_str()


def _short(s: str) -> str:
    return s if len(s) <= _PARAM_CHARS else s[:_PARAM_CHARS - 3] + "..."


def _q(s: str) -> str:
    """A DOT double-quoted string (newlines become centred line breaks)."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
