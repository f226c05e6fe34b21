"""Issue 19 item 7: ``signature()`` remembers the strings it builds on every compiled call
(tensor descriptions, key names, an optimizer group's hyper-parameters while the group
holds the same immutable values) — the signature itself must not change: same keys, same
text, and every change a freshly formatted signature would show still shows."""
import numpy as np

import ember as em
import ember.nn.functional as F
from ember import nn
from ember.func._tree import tree_flatten
from ember.graph.discover import discover
from ember.graph.signature import signature
from ember.tensor import Tensor


def _reference(flat, spec, r, grad_keys):
    """The signature formatted from scratch (the pre-memo code, kept as the oracle)."""
    def gk(p):
        g = p.grad
        return "None" if g is None else \
            f"{g._dtype.name}[{', '.join(map(str, g._data.shape))}]"
    sig = {"grad_enabled": em.is_grad_enabled(), "structure": repr(spec)}
    for i, x in enumerate(flat):
        if isinstance(x, Tensor):
            sig[f"arg{i}"] = (f"{x._dtype.name}[{', '.join(map(str, x._data.shape))}] "
                              f"{x._device}" + (" requires_grad" if x._requires_grad else ""))
        elif isinstance(x, (bool, int, float, str, type(None))):
            sig[f"arg{i}"] = repr(x)
        else:
            sig[f"arg{i}"] = f"{type(x).__name__}@{id(x):x}"
    if grad_keys:
        for i, x in enumerate(flat):
            if isinstance(x, Tensor) and x._requires_grad and x._grad_fn is None:
                sig[f"arg{i}.grad"] = gk(x)
    for label, m in r.modules:
        sig[f"{label}.training"] = m.training
    for label, p in (r.params if grad_keys else ()):
        sig[f"{label}.grad"] = gk(p)
    for label, opt in r.optimizers:
        for gi, g in enumerate(opt.param_groups):
            hp = tuple((k, v) for k, v in sorted(g.items()) if k not in ("params", "lr"))
            sig[f"{label}.param_groups[{gi}]"] = repr(hp)
            sig[f"{label}.state[{gi}]"] = tuple(len(opt.state.get(p, ())) if p in opt.state
                                                else 0 for p in g["params"])
    return sig


def _setup():
    em.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    opt = em.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)

    def step(x, y, scale):
        opt.zero_grad()
        F.cross_entropy(model(x) * scale, y).backward()
        opt.step()

    x = em.randn(4, 6)
    y = em.tensor(np.array([0, 1, 2, 0]))
    return model, opt, step, x, y


def _both(step, args, grad_keys=True):
    flat, spec = tree_flatten((args, {}))
    r = discover(step, args, {})
    return signature(flat, spec, r, grad_keys), _reference(flat, spec, r, grad_keys), r, flat, spec


def test_same_signature_as_formatted_from_scratch():
    model, opt, step, x, y = _setup()
    for call in range(3):
        got, want, *_ = _both(step, (x, y, 2.0))
        assert got == want and list(got) == list(want)
        step(x, y, 2.0)                      # grads and momentum buffers appear
    got, want, *_ = _both(step, (x, y, 2.0), grad_keys=False)
    assert got == want
    assert any(k.endswith(".grad") and v.startswith("float32[") for k, v in
               _both(step, (x, y, 2.0))[0].items())


def test_changes_still_show():
    """A changed hyper-parameter (a new value object, or a list mutated in place), a
    changed argument shape or dtype, train/eval: each changes the signature."""
    model, opt, step, x, y = _setup()
    base, _, r, flat, spec = _both(step, (x, y, 2.0))
    assert signature(flat, spec, r, True) == base          # remembered, unchanged
    g = opt.param_groups[0]
    g["momentum"] = 0.9
    s1 = signature(flat, spec, r, True)
    assert s1 != base and s1 == _reference(flat, spec, r, True)
    g["lr"] = 0.01                                          # the lr is a graph input
    assert signature(flat, spec, r, True) == s1
    g["betas_like"] = [0.5, 0.25]                           # mutable: never remembered
    s2 = signature(flat, spec, r, True)
    g["betas_like"][0] = 0.75
    s3 = signature(flat, spec, r, True)
    assert s2 != s3 and s3 == _reference(flat, spec, r, True)
    del g["betas_like"]
    assert signature(flat, spec, r, True) == s1
    model.eval()
    assert signature(flat, spec, r, True) != s1
    model.train()
    for other in (em.randn(5, 6), em.randn(4, 6, dtype=em.float64),
                  em.randn(4, 6).requires_grad_()):
        got, want, *_ = _both(step, (other, y, 2.0))
        assert got == want and got["arg0"] != base["arg0"]


def test_equal_devices_printed_differently_keep_their_text():
    """``device('cpu')`` and ``device('cpu:0')`` compare equal but print differently: each
    tensor's description is its own text, as formatted from scratch."""
    from ember.device.base import device
    a, b = em.randn(2, 3), em.randn(2, 3)
    b._device = device("cpu:0")
    for x in (a, b, a):
        flat, spec = tree_flatten(((x,), {}))
        r = discover(lambda t: t, (x,), {})
        assert signature(flat, spec, r, True) == _reference(flat, spec, r, True)
    assert signature(*tree_flatten(((b,), {})), r, True)["arg0"].endswith("cpu:0")
