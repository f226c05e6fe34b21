"""ember.fx.Graph and Node built and edited by hand."""
import operator

import numpy as np
import pytest

import ember
import ember.fx as fx
from ember import nn


def build():
    g = fx.Graph()
    x = g.placeholder("x")
    y = g.placeholder("y", default_value=2.0)
    a = g.call_function(ember.add, (x, y))
    r = g.call_method("relu", (a,))
    g.output(r)
    return g, x, y, a, r


def test_hand_built_graph_runs_and_prints():
    g, *_ = build()
    gm = fx.GraphModule(nn.Module(), g)
    assert "def forward(self, x, y = 2.0):" in gm.code
    x = ember.tensor([-3.0, 1.0])
    np.testing.assert_array_equal(gm(x).numpy(), [0.0, 3.0])
    np.testing.assert_array_equal(gm(x, 5.0).numpy(), [2.0, 6.0])
    assert str(g).splitlines()[2] == "    %y : [num_users=1] = placeholder[target=y](default=2.0)"
    assert g.python_code("self").globals["ember"] is ember


def test_node_users_args_and_replace():
    g, x, y, a, r = build()
    assert list(a.users) == [r] and a.all_input_nodes == [x, y]
    with g.inserting_before(r):
        m = g.call_function(ember.mul, (x, y))
    assert [n.name for n in g.nodes] == ["x", "y", "add", "mul", "relu", "output"]
    changed = a.replace_all_uses_with(m)
    assert changed == [r] and r.args == (m,) and not a.users
    g.erase_node(a)
    assert [n.name for n in g.nodes] == ["x", "y", "mul", "relu", "output"]
    r.replace_input_with(m, x)
    assert r.args == (x,) and not m.users
    assert g.eliminate_dead_code()
    assert [n.op for n in g.nodes] == ["placeholder", "placeholder", "call_method", "output"]
    g.lint()


def test_erase_node_with_users_is_an_error():
    g, x, y, a, r = build()
    with pytest.raises(RuntimeError, match="still had 1 users"):
        g.erase_node(a)


def test_inserting_after_keeps_creation_order_and_prepend_append_move():
    g, x, y, a, r = build()
    with g.inserting_after(a):
        n1 = g.call_function(operator.neg, (a,))
        n2 = g.call_function(operator.abs, (n1,))
    assert [n.name for n in g.nodes] == ["x", "y", "add", "neg", "abs_1", "relu", "output"]
    r.prepend(n2)                        # already right before r: a no-op move
    a.append(n2)                         # n2 now before its input n1: lint must fail
    assert [n.name for n in g.nodes][2:5] == ["add", "abs_1", "neg"]
    with pytest.raises(RuntimeError, match="used before it has been defined"):
        g.lint()
    n1.append(n2)
    g.lint()


def test_lint_checks_targets_of_the_owning_module():
    g = fx.Graph()
    x = g.placeholder("x")
    g.output(g.call_module("fc", (x,)))
    with pytest.raises(RuntimeError, match="not provided in root"):
        fx.GraphModule({}, g)
    gm = fx.GraphModule({"fc": nn.Linear(2, 2)}, g)
    gm.graph.lint()
    with gm.graph.inserting_before(list(gm.graph.nodes)[-1]):
        gm.graph.create_node("get_attr", "missing.weight")
    with pytest.raises(RuntimeError, match="nonexistent attribute missing"):
        gm.graph.lint()


def test_iteration_survives_erasing_the_current_node():
    g = fx.Graph()
    x = g.placeholder("x")
    for _ in range(3):
        g.call_function(ember.neg, (x,))
    g.output(x)
    for n in g.nodes:
        if n.op == "call_function":
            g.erase_node(n)
    assert [n.op for n in g.nodes] == ["placeholder", "output"]
    assert len(g.nodes) == 2


def test_names_are_unique_and_valid_python():
    g = fx.Graph()
    x = g.placeholder("x")
    names = [g.call_function(ember.sum, (x,)).name for _ in range(2)]
    names.append(g.get_attr("layers.0.weight").name)
    names.append(g.call_module("Block", (x,)).name)
    assert names == ["sum_1", "sum_2", "layers_0_weight", "block"]


def test_print_tabular_has_pytorchs_columns(capsys):
    g, *_ = build()
    g.print_tabular()
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["opcode", "name", "target", "args", "kwargs"]
    assert out[4].split()[:3] == ["call_function", "add", "ember.add"]
    assert out[-1].split()[:3] == ["output", "output", "output"]


def test_format_node_and_in_place_methods_survive_dce():
    g = fx.Graph()
    x = g.placeholder("x")
    g.call_method("add_", (x, 1))
    g.call_method("add", (x, 1))
    g.output(x)
    assert g.eliminate_dead_code()
    assert [n.target for n in g.nodes] == ["x", "add_", "output"]
    n = list(g.nodes)[1]
    assert n.format_node() == ("%add_ : [num_users=0] = call_method[target=add_]"
                               "(args = (%x, 1), kwargs = {})")


def test_graph_built_from_proxies():
    g = fx.Graph()
    x = fx.Proxy(g.placeholder("x"))
    with fx.recording_functions():
        y = ember.relu(x) * 2 + x.sum()
    assert not hasattr(ember.relu, "__fx_original__")          # restored after the block
    g.output(y.node)
    gm = fx.GraphModule(nn.Module(), g)
    assert [n.target for n in g.nodes][1:4] == [ember.relu, operator.mul, "sum"]
    np.testing.assert_array_equal(gm(ember.tensor([-1.0, 2.0])).numpy(), [1.0, 5.0])
