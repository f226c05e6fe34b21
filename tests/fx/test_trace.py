"""ember.fx.symbolic_trace: what is recorded, how it prints, and what cannot be traced."""
import math
import operator

import numpy as np
import pytest

import ember
import ember.fx as fx
import ember.nn.functional as F
from ember import nn


def ops(gm):
    return [(n.op, n.target if isinstance(n.target, str) else n.target.__name__)
            for n in gm.graph.nodes]


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(4, 8), nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4),
                                      nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Linear(4 * 4 * 4, 5)

    def forward(self, x):
        return self.head(ember.flatten(self.features(x), 1))


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        return ember.relu(x + self.bn(self.conv(x)))


def test_mlp_graph_structure_and_outputs():
    m = MLP()
    gm = fx.symbolic_trace(m)
    assert ops(gm) == [("placeholder", "x"), ("call_module", "fc1"),
                       ("call_function", "relu"), ("call_module", "fc2"),
                       ("output", "output")]
    relu = list(gm.graph.nodes)[2]
    assert relu.target is F.relu
    assert [u.name for u in relu.users] == ["fc2"]
    assert relu.all_input_nodes == [list(gm.graph.nodes)[1]]
    x = ember.randn(5, 4)
    np.testing.assert_array_equal(gm(x).detach().numpy(), m(x).detach().numpy())
    assert isinstance(gm, fx.GraphModule) and type(gm).__name__ == "MLP"


def test_patches_are_restored_after_tracing():
    before = (ember.relu, F.relu, nn.Module.__call__, ember.Tensor.__add__)
    fx.symbolic_trace(MLP())
    assert (ember.relu, F.relu, nn.Module.__call__, ember.Tensor.__add__) == before
    with pytest.raises(ZeroDivisionError):
        fx.symbolic_trace(lambda x: x + 1 / 0)
    assert (ember.relu, F.relu, nn.Module.__call__, ember.Tensor.__add__) == before


def test_cnn_sequential_is_traced_through_into_leaves():
    m = CNN().eval()
    gm = fx.symbolic_trace(m)
    mods = [n.target for n in gm.graph.nodes if n.op == "call_module"]
    assert mods == ["features.0", "features.1", "features.2", "features.3", "head"]
    assert 'getattr(self.features, "0")' in gm.code
    x = ember.randn(2, 3, 8, 8)
    np.testing.assert_allclose(gm(x).detach().numpy(), m(x).detach().numpy(), rtol=1e-6, atol=1e-6)


def test_residual_block_prints_like_pytorch():
    gm = fx.symbolic_trace(Residual())
    assert str(gm.graph) == (
        "graph():\n"
        "    %x : [num_users=2] = placeholder[target=x]\n"
        "    %conv : [num_users=1] = call_module[target=conv](args = (%x,), kwargs = {})\n"
        "    %bn : [num_users=1] = call_module[target=bn](args = (%conv,), kwargs = {})\n"
        "    %add : [num_users=1] = call_function[target=operator.add]"
        "(args = (%x, %bn), kwargs = {})\n"
        "    %relu : [num_users=1] = call_function[target=ember.relu]"
        "(args = (%add,), kwargs = {})\n"
        "    return relu")
    assert gm.code.strip() == (
        "def forward(self, x):\n"
        "    conv = self.conv(x)\n"
        "    bn = self.bn(conv);  conv = None\n"
        "    add = x + bn;  x = bn = None\n"
        "    relu = ember.relu(add);  add = None\n"
        "    return relu")


def test_function_with_operators_methods_attributes_and_unpacking():
    def f(x, y):
        a = (x * 2 - y) / 3 @ y.t()
        b, c = a.chunk(2, dim=0)
        n = x.shape[0]
        return -b + c[0] ** 2, ember.cat([b, c], dim=n - 4), math.sqrt(4) + (x > 0).sum()

    gm = fx.symbolic_trace(f)
    targets = [n.target for n in gm.graph.nodes]
    for t in (operator.mul, operator.sub, operator.truediv, operator.matmul, "t", "chunk",
              getattr, operator.getitem, operator.neg, operator.pow, operator.gt, "sum"):
        assert t in targets, t
    assert [n for n in gm.graph.nodes if n.target == "chunk"][0].kwargs == {"dim": 0}
    x, y = ember.randn(4, 4), ember.randn(4, 4)
    for got, want in zip(gm(x, y), f(x, y)):
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6,
                                   atol=1e-6)


def test_reflected_operators_with_parameters_and_constants():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(ember.randn(3))
            self.register_buffer("b", ember.ones(3))

        def forward(self, x):
            return 1 - x * self.w + self.b + ember.tensor([1.0, 2.0, 3.0])

    m = M()
    gm = fx.symbolic_trace(m)
    gets = [n.target for n in gm.graph.nodes if n.op == "get_attr"]
    assert gets == ["w", "b", "_tensor_constant0"]
    assert [n.target for n in gm.graph.nodes if n.op == "call_function"][0] is operator.mul
    assert "_tensor_constant0" not in dict(gm.named_buffers())
    x = ember.randn(3)
    np.testing.assert_allclose(gm(x).detach().numpy(), m(x).detach().numpy(), rtol=1e-6)


def test_control_flow_on_a_proxy_raises_trace_error():
    def f(x):
        if x.sum() > 0:
            return x
        return -x
    with pytest.raises(fx.TraceError, match="symbolically traced variables cannot be used "
                                            "as inputs to control flow"):
        fx.symbolic_trace(f)


def test_iterating_a_proxy_raises_and_len_names_wrap():
    def f(x):
        return [v for v in x]
    with pytest.raises(fx.TraceError, match="Proxy object cannot be iterated"):
        fx.symbolic_trace(f)
    with pytest.raises(RuntimeError, match="'len' is not supported in symbolic tracing"):
        fx.symbolic_trace(lambda x: x[: len(x)])


def helper_not_traceable(x):
    return x[: len(x) // 2] * 2


fx.wrap("helper_not_traceable")


def test_wrap_keeps_a_function_as_one_call():
    def f(x):
        return helper_not_traceable(x) + 1
    gm = fx.symbolic_trace(f)
    calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    assert calls[0].target is helper_not_traceable and calls[1].target is operator.add
    x = ember.randn(6)
    np.testing.assert_array_equal(gm(x).detach().numpy(), f(x).detach().numpy())
    assert globals()["helper_not_traceable"] is calls[0].target      # restored


def test_tracer_subclass_is_leaf_module_and_concrete_args():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, x, act=True):
            y = self.lin(x)
            return ember.relu(y) if act else y

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = Block()

        def forward(self, x):
            return self.block(x)

    class BlocksAreLeaves(fx.Tracer):
        def is_leaf_module(self, m, qualname):
            return isinstance(m, Block) or super().is_leaf_module(m, qualname)

    graph = BlocksAreLeaves().trace(Outer())
    assert [n.target for n in graph.nodes if n.op == "call_module"] == ["block"]
    gm = fx.symbolic_trace(Outer())
    assert [n.target for n in gm.graph.nodes if n.op == "call_module"] == ["block.lin"]

    gm = fx.symbolic_trace(Block(), concrete_args={"act": False})
    assert not [n for n in gm.graph.nodes if n.op == "call_function"]
    with pytest.raises(fx.TraceError):
        fx.symbolic_trace(Block().forward.__func__)


def test_has_side_effect_keeps_calls_through_dead_code_elimination():
    calls = []

    @fx.has_side_effect
    def log(x):
        calls.append(x)

    g = fx.Graph()
    x = g.placeholder("x")
    g.call_function(log, (x,))
    g.call_function(ember.neg, (x,))
    g.output(x)
    g.eliminate_dead_code()
    assert [n.target for n in g.nodes if n.op == "call_function"] == [log]
    gm = fx.GraphModule(nn.Module(), g)
    gm(ember.ones(1))
    assert len(calls) == 1


def test_varargs_signature_is_a_clear_error():
    with pytest.raises(fx.TraceError, match=r"\*args"):
        fx.symbolic_trace(lambda *xs: xs[0])


def test_tensor_methods_and_setitem_with_proxy_arguments():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("b", ember.arange(4.0))

        def forward(self, x):
            y = self.b.add(x, alpha=2)            # a real tensor's method, a Proxy argument
            y = y.clone()
            y[0] = x[1]
            return ember.Tensor.mul(self.b, y)

    m = M()
    gm = fx.symbolic_trace(m)
    methods = [(n.target, n.args[0].op) for n in gm.graph.nodes if n.op == "call_method"]
    assert methods == [("add", "get_attr"), ("clone", "call_method"), ("mul", "get_attr")]
    sets = [n for n in gm.graph.nodes if n.target is operator.setitem]
    assert len(sets) == 1 and not sets[0].users
    gm.graph.eliminate_dead_code()
    assert [n for n in gm.graph.nodes if n.target is operator.setitem]       # kept: impure
    gm.recompile()
    x = ember.tensor([1.0, 2.0, 3.0, 4.0])
    np.testing.assert_array_equal(gm(x).numpy(), m(x).numpy())
    assert ember.Tensor.add is not None and "add" in vars(ember.Tensor)
    assert getattr(ember.Tensor.add, "__wrapped__", None) is None     # restored


def test_keyword_only_parameters_are_refused():
    def f(x, *, scale):
        return x * scale
    with pytest.raises(fx.TraceError, match="keyword-only"):
        fx.symbolic_trace(f)


def test_math_functions_in_globals_are_autowrapped():
    def f(x):
        return math.sqrt(x) + math.pi

    gm = fx.symbolic_trace(f)
    assert [n.target for n in gm.graph.nodes if n.op == "call_function"][0] is math.sqrt
    assert gm(16.0) == 4.0 + math.pi
    with pytest.raises(TypeError):
        fx.Tracer(autowrap_modules=()).trace(f)      # not wrapped: math.sqrt(Proxy) fails
