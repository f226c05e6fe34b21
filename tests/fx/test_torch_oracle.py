"""The same program traced by torch.fx and ember.fx gives the same Nodes.

NOTE: ``torch.nn.functional`` calls are recorded by ``__torch_function__`` with the defaults
PyTorch passes on (``relu(x, inplace=False)``); Ember records the call as written, so the
program here uses ``lib.relu``."""
import operator

import pytest

import ember
import ember.fx as efx

torch = pytest.importorskip("torch")
import torch.fx as tfx  # noqa: E402


def build(lib, nn):
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.bn = nn.BatchNorm2d(4)
            self.layers = nn.Sequential(nn.ReLU(), nn.Dropout(0.1))
            self.fc = nn.Linear(4, 2)
            self.w = nn.Parameter(lib.ones(2))

        def forward(self, x, y=None):
            h = self.layers(self.bn(self.conv(x)))
            h = lib.relu(h + x.sum(dim=1, keepdim=True)) * 2
            a, b = h.chunk(2, dim=1)
            v = lib.cat([a, b], dim=1).mean(dim=(2, 3))
            n = x.shape[0]
            out = self.fc(v) * self.w - 1 / (n + v[:, :2])
            return lib.sigmoid(out.view(-1)), -out[0]
    return Block()


def signature(gm):
    out = []
    for n in gm.graph.nodes:
        t = n.target
        if callable(t):
            mod = "operator" if getattr(operator, t.__name__, None) is t else \
                "builtins" if t is getattr else "lib"
            t = f"{mod}.{t.__name__}"
        out.append((n.op, n.name, t, len(n.args), tuple(n.kwargs), len(n.users)))
    return out


def test_same_node_sequence_as_torch_fx():
    t_gm = tfx.symbolic_trace(build(torch, torch.nn))
    e_gm = efx.symbolic_trace(build(ember, ember.nn))
    assert signature(e_gm) == signature(t_gm)
    assert str(e_gm.graph).replace("ember.", "torch.") == str(t_gm.graph)
    assert e_gm.code.replace("ember.", "torch.") == t_gm.code
