"""GraphModule as an nn.Module: parameters, state, eager and ember.compile."""
import copy

import numpy as np

import ember
import ember.fx as fx
from ember import nn


def arr(t):
    return t.detach().numpy()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.drop = nn.Dropout(0.5)
        self.fc = nn.Linear(4, 3)
        self.scale = nn.Parameter(ember.ones(3) * 0.5)

    def forward(self, x):
        h = ember.relu(self.bn(self.conv(x)))
        h = self.drop(h.mean(dim=(2, 3)))
        return self.fc(h) * self.scale


def grads(m):
    return {n: arr(p.grad) for n, p in m.named_parameters()}


def run_step(m, x):
    for p in m.parameters():
        p.grad = None
    out = m(x)
    (out ** 2).sum().backward()
    return arr(out), grads(m)


def test_graph_module_is_a_module_with_the_roots_state():
    m = Net()
    gm = fx.symbolic_trace(m)
    assert set(gm.state_dict()) == set(m.state_dict())
    assert {n for n, _ in gm.named_parameters()} == {n for n, _ in m.named_parameters()}
    assert gm.conv.weight is m.conv.weight            # shared, like PyTorch's copy_attr
    assert "bn.running_mean" in dict(gm.named_buffers())
    gm.eval()
    assert not gm.drop.training and not gm.training
    gm2 = gm.to(ember.float64)
    assert gm2.fc.weight.dtype == ember.float64
    assert "class Net(ember.nn.Module):" in gm.print_readable(print_output=False)


def test_eager_and_compiled_match_the_original_outputs_and_gradients():
    ember.manual_seed(0)
    m = Net().eval()                  # no dropout randomness, running-stat BatchNorm
    x = ember.randn(2, 2, 5, 5)
    want_out, want_g = run_step(m, x)
    gm = fx.symbolic_trace(m)
    got_out, got_g = run_step(gm, x)
    np.testing.assert_allclose(got_out, want_out, rtol=1e-6, atol=1e-7)
    for k in want_g:
        np.testing.assert_allclose(got_g[k], want_g[k], rtol=1e-5, atol=1e-7)
    compiled = ember.compile(gm)
    for _ in range(2):
        c_out, _ = run_step(compiled, x)
        c_g = grads(gm)                               # the compiled module's parameters
        np.testing.assert_allclose(c_out, want_out, rtol=1e-5, atol=1e-6)
        for k in want_g:
            np.testing.assert_allclose(c_g[k], want_g[k], rtol=1e-4, atol=1e-6)
    report = str(compiled.explain())
    assert "1 graph(s) captured" in report and "0 graph break(s)" in report


def test_train_mode_batch_norm_updates_running_stats_through_the_graph_module():
    ember.manual_seed(0)
    m = Net()
    gm = fx.symbolic_trace(m)
    gm.drop.p = 0.0
    before = arr(m.bn.running_mean).copy()
    gm(ember.randn(4, 2, 5, 5) + 3)
    assert not np.allclose(arr(m.bn.running_mean), before)   # the same buffer object


def test_recompile_after_editing_and_deepcopy():
    m = Net().eval()
    gm = fx.symbolic_trace(m)
    x = ember.randn(1, 2, 4, 4)
    base = arr(gm(x))
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target is ember.relu:
            n.target = ember.sigmoid
    old_code = gm.code
    gm.recompile()
    assert gm.code != old_code and "ember.sigmoid" in gm.code
    assert not np.allclose(arr(gm(x)), base)
    sig_out = arr(gm(x))
    gm_copy = copy.deepcopy(gm)
    assert gm_copy.conv.weight is not gm.conv.weight
    np.testing.assert_allclose(arr(gm_copy(x)), arr(gm(x)), rtol=1e-6)
    assert type(gm_copy) is not type(gm)              # each instance has its own class
    gm_copy.graph.erase_node([n for n in gm_copy.graph.nodes if n.op == "output"][0])
    gm_copy.graph.output(list(gm_copy.graph.nodes)[0])
    assert gm_copy.graph.eliminate_dead_code()
    gm_copy.recompile()
    assert gm_copy.code.strip() == "def forward(self, x):\n    return x"
    np.testing.assert_array_equal(arr(gm_copy(x)), arr(x))
    np.testing.assert_array_equal(arr(gm(x)), sig_out)   # gm still runs its own code
    assert "sigmoid" in gm.code and "sigmoid" not in gm_copy.code


def test_graph_module_from_a_dict_root():
    g = fx.Graph()
    x = g.placeholder("x")
    w = g.get_attr("p.w")
    g.output(g.call_function(ember.matmul, (x, w)))
    w_val = nn.Parameter(ember.eye(3) * 2)
    gm = fx.GraphModule({"p.w": w_val}, g)
    assert dict(gm.named_parameters())["p.w"] is w_val
    np.testing.assert_array_equal(arr(gm(ember.ones(1, 3))), [[2.0, 2.0, 2.0]])
