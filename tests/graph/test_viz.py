"""``ember.viz``: DOT text of IR graphs, files written, rendering with and without dot."""
from __future__ import annotations

import os
import re
import stat

import pytest

import ember as em
from ember import nn
from ember.errors import GraphError
from ember.graph import viz as viz_mod
from ember.graph.ir import Var

NODE = re.compile(r'^\s*(\w+) \[label="((?:[^"\\]|\\.)*)"')
EDGE = re.compile(r'^\s*(\w+) -> (\w+) \[label="((?:[^"\\]|\\.)*)"\];$')


def parse(dot: str):
    """(nodes {id: label}, edges [(src, dst, label)]) of the DOT ``to_dot`` writes."""
    lines = dot.strip().splitlines()
    assert lines[0].startswith("digraph ") and lines[0].endswith("{") and lines[-1] == "}"
    assert dot.count("{") == dot.count("}")
    nodes, edges = {}, []
    for line in lines[1:-1]:
        m = EDGE.match(line)
        if m:
            edges.append(m.groups())
            continue
        m = NODE.match(line)
        if m:
            assert m.group(1) not in nodes, f"node {m.group(1)} declared twice"
            nodes[m.group(1)] = m.group(2)
    for a, b, _ in edges:
        assert a in nodes and b in nodes, f"edge {a} -> {b} names an undeclared node"
    return nodes, edges


def captured(passes=None):
    em.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.5), nn.Linear(8, 2)).train()
    c = em.compile(model, passes=passes)
    with em.no_grad():
        c(em.randn(3, 4))
    return c


@pytest.fixture
def no_dot(monkeypatch):
    monkeypatch.setattr(viz_mod.shutil, "which", lambda name: None)


def test_dot_has_every_node_and_edge():
    c = captured()
    for g in (c.raw_graphs()[-1], c.graph):
        nodes, edges = parse(viz_mod.to_dot(g))
        assert {f"in{k}" for k in range(len(g.inputs))} <= set(nodes)
        assert {f"n{i}" for i in range(len(g.nodes))} <= set(nodes)
        assert {f"out{k}" for k in range(len(g.outputs))} <= set(nodes)
        assert len(nodes) == len(g.inputs) + len(g.nodes) + len(g.outputs)
        n_uses = sum(1 for n in g.nodes for x in n.inputs if x.__class__ is Var)
        assert len(edges) == n_uses + len(g.outputs)
        for i, n in enumerate(g.nodes):
            assert nodes[f"n{i}"].startswith(n.op.name)
            assert n.outs[0].type_str() in nodes[f"n{i}"]
        assert "model.0.weight" in nodes["in1"]


def test_styles_and_escaping():
    c = captured(passes=[])
    dot = viz_mod.to_dot(c.graph, title='a "quoted" title')
    assert 'digraph "a \\"quoted\\" title" {' in dot
    assert "random" in dot and "dashed" in dot             # dropout's draw
    assert dot.count('fillcolor="#dbeafe"') == len(c.graph.inputs)
    # NOTE: edge labels carry the value's type
    nodes, edges = parse(dot)
    assert all(re.search(r"\w+\[[\d, ]*\]", lab) for _, _, lab in edges)


def test_graph_to_dot_file_without_dot(tmp_path, no_dot):
    g = captured().graph
    out = em.viz(g, tmp_path / "g.dot")
    assert out == [str(tmp_path / "g.dot")]
    parse((tmp_path / "g.dot").read_text())
    with pytest.warns(UserWarning, match="dot' is not installed"):
        out = em.viz(g, tmp_path / "h.svg")
    assert out == [str(tmp_path / "h.dot")] and not (tmp_path / "h.svg").exists()


def test_compiled_function_before_and_after(tmp_path, no_dot):
    c = captured()
    out = em.viz(c, tmp_path / "mlp")
    assert out == [str(tmp_path / "mlp.before.dot"), str(tmp_path / "mlp.after.dot")]
    before, _ = parse((tmp_path / "mlp.before.dot").read_text())
    after, _ = parse((tmp_path / "mlp.after.dot").read_text())
    assert "as traced" in (tmp_path / "mlp.before.dot").read_text()
    assert len(before) >= len(after)


def test_renders_with_dot(tmp_path, monkeypatch):
    fake = tmp_path / "dot"
    fake.write_text('#!/bin/sh\n# fake Graphviz: dot -Tfmt src -o out\n'
                    'echo "<svg>$1</svg>" > "$4"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(viz_mod.shutil, "which", lambda name: str(fake))
    g = captured().graph
    out = em.viz(g, tmp_path / "g.png")
    assert out == [str(tmp_path / "g.dot"), str(tmp_path / "g.png")]
    assert (tmp_path / "g.png").read_text().strip() == "<svg>-Tpng</svg>"
    out = em.viz(g, os.fspath(tmp_path / "plain"))
    assert out[-1] == str(tmp_path / "plain.svg")


def test_errors():
    with pytest.raises(TypeError, match="Graph or a compiled function"):
        em.viz(42, "x.dot")
    with pytest.raises(GraphError, match="no captured graph"):
        em.viz(em.compile(lambda t: t + 1), "x.dot")
