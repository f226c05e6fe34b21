"""Graph passes written the way PyTorch's FX tutorials write them."""
import operator

import numpy as np
import pytest

import ember
import ember.fx as fx
from ember import nn
from ember.fx.passes.shape_prop import ShapeProp

from _examples import load_example as _load_example


def arr(t):
    return t.detach().numpy()


def load_example():
    return _load_example("fx_conv_bn_fold")


def test_conv_bn_fold_example(capsys):
    r = load_example().main(["--batch", "2", "--size", "8"])
    assert r["diff"] < 1e-5
    assert r["modules"] == ["conv1", "conv2", "fc"]          # both BatchNorms folded away
    assert sorted(r["submodules"]) == ["conv1", "conv2", "fc"]
    out = capsys.readouterr().out
    assert "max abs difference folded vs original (eval)" in out


def test_conv_bn_fold_changes_the_weights_not_just_the_graph():
    ex = load_example()
    ember.manual_seed(1)
    model = ex.Net()
    for _ in range(2):
        model(ember.randn(4, 3, 8, 8) * 3 + 1)
    model.eval()
    folded = ex.fuse(model)
    assert not np.allclose(arr(folded.conv1.weight), arr(model.conv1.weight))
    # dropping the BatchNorm Nodes without folding gives a different model
    unfolded = fx.symbolic_trace(model)
    for n in unfolded.graph.nodes:
        if n.op == "call_module" and n.target.startswith("bn"):
            n.replace_all_uses_with(n.args[0])
            unfolded.graph.erase_node(n)
    unfolded.recompile()
    x = ember.randn(2, 3, 8, 8)
    with ember.no_grad():
        assert float((unfolded(x) - model(x)).abs().max()) > 1e-2
        assert float((folded(x) - model(x)).abs().max()) < 1e-5


def test_swap_add_for_mul_by_editing_targets():
    def f(x, y):
        return ember.add(x, y) + ember.add(y, 1.0)

    gm = fx.symbolic_trace(f)
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is ember.add:
            node.target = ember.mul
    gm.recompile()
    assert "ember.mul(x, y)" in gm.code and "ember.add" not in gm.code
    x, y = ember.tensor([2.0, 3.0]), ember.tensor([4.0, 5.0])
    np.testing.assert_array_equal(arr(gm(x, y)), [8.0 + 4.0, 15.0 + 5.0])


def test_replace_pattern():
    class M(nn.Module):
        def forward(self, x, w1, w2):
            a = ember.relu(ember.add(x, w1))
            b = ember.relu(ember.add(a, w2))
            return b - ember.add(x, 1.0)          # an add without a relu: not matched

    def pattern(x, w):
        return ember.relu(ember.add(x, w))

    def replacement(x, w):
        return ember.sigmoid(ember.mul(x, w))

    gm = fx.symbolic_trace(M())
    matches = fx.replace_pattern(gm, pattern, replacement)
    assert len(matches) == 2
    assert {m.anchor.target for m in matches} == {ember.relu}
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert targets.count(ember.mul) == 2 and targets.count(ember.sigmoid) == 2
    assert targets.count(ember.add) == 1 and ember.relu not in targets
    gm.graph.lint()
    x, w1, w2 = ember.randn(3), ember.randn(3), ember.randn(3)
    want = ember.sigmoid(ember.sigmoid(x * w1) * w2) - (x + 1.0)
    np.testing.assert_allclose(arr(gm(x, w1, w2)), arr(want), rtol=1e-6)


def test_replace_pattern_skips_a_match_whose_inner_value_is_used_elsewhere():
    def f(x, w):
        a = ember.add(x, w)
        return ember.relu(a) + a

    gm = fx.symbolic_trace(f)
    assert fx.replace_pattern(gm, lambda x, w: ember.relu(ember.add(x, w)),
                              lambda x, w: ember.mul(x, w)) == []


def test_interpreter_runs_and_overrides():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x):
            return ember.sigmoid(self.fc(x)).sum(dim=1)

    m = M()
    gm = fx.symbolic_trace(m)
    x = ember.randn(2, 3)
    np.testing.assert_array_equal(arr(fx.Interpreter(gm).run(x)), arr(m(x)))

    seen = []

    class NegSigmoid(fx.Interpreter):
        def call_function(self, target, args, kwargs):
            if target is ember.sigmoid:
                return ember.neg(*args, **kwargs)
            return super().call_function(target, args, kwargs)

        def call_module(self, target, args, kwargs):
            seen.append(target)
            return super().call_module(target, args, kwargs)

    got = NegSigmoid(gm).run(x)
    np.testing.assert_allclose(arr(got), arr((-m.fc(x)).sum(dim=1)), rtol=1e-6)
    assert seen == ["fc"]
    with pytest.raises(RuntimeError, match="Expected positional argument for parameter x"):
        fx.Interpreter(gm).run()


def test_transformer_returns_a_new_graph_module():
    def f(x):
        return ember.sigmoid(x) + ember.add(x, 2.0)

    class Swap(fx.Transformer):
        def call_function(self, target, args, kwargs):
            if target is ember.sigmoid:
                return ember.neg(*args, **kwargs)          # records, on Proxies
            if target is ember.add:
                target = ember.mul
            return super().call_function(target, args, kwargs)

    gm = fx.symbolic_trace(f)
    new = Swap(gm).transform()
    assert isinstance(new, fx.GraphModule) and new is not gm
    targets = [n.target for n in new.graph.nodes if n.op == "call_function"]
    assert targets == [ember.neg, ember.mul, operator.add]
    x = ember.tensor([1.0, -2.0])
    np.testing.assert_array_equal(arr(new(x)), [-1.0 + 2.0, 2.0 - 4.0])
    np.testing.assert_allclose(arr(gm(x)), arr(f(x)))           # the original is untouched


def test_shape_prop_fills_tensor_meta():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 6)

        def forward(self, x):
            return self.fc(x).view(2, 3, -1).to(ember.float64), x.shape

    gm = fx.symbolic_trace(M())
    ShapeProp(gm).propagate(ember.randn(5, 4))
    meta = {n.name: n.meta.get("tensor_meta") for n in gm.graph.nodes}
    assert meta["x"].shape == (5, 4) and meta["x"].dtype == ember.float32
    assert meta["fc"].shape == (5, 6) and meta["fc"].requires_grad
    assert meta["view"].shape == (2, 3, 5) and meta["view"].stride == (15, 5, 1)
    assert meta["to"].dtype == ember.float64
    assert meta["getattr_1"] is None
    assert [n.meta["type"] for n in gm.graph.nodes if n.name == "getattr_1"][0] is not None
