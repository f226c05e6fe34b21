"""nn.Module, Parameter and containers: PyTorch semantics (many small behaviour tests)."""
import copy
from collections import OrderedDict

import numpy as np
import pytest

import ember as em
from ember import nn
from ember.nn.module import register_module_forward_hook


class Affine(nn.Module):
    """A tiny Linear written here so these tests depend only on the Module core."""

    def __init__(self, n_in, n_out, bias=True):
        super().__init__()
        self.weight = nn.Parameter(em.randn(n_out, n_in))
        self.bias = nn.Parameter(em.zeros(n_out)) if bias else None
        self.register_buffer("calls", em.zeros((), dtype=em.int64))
        self.register_buffer("scratch", em.zeros(2), persistent=False)

    def forward(self, x):
        y = x @ self.weight.T
        return y if self.bias is None else y + self.bias

    def extra_repr(self):
        return f"in={self.weight.shape[1]}, out={self.weight.shape[0]}"


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = Affine(3, 4)
        self.act = nn.Module()
        self.fc2 = Affine(4, 2, bias=False)

    def forward(self, x):
        return self.fc2(self.fc1(x).relu())


def test_registration_and_traversal_order():
    m = Net()
    assert [n for n, _ in m.named_parameters()] == ["fc1.weight", "fc1.bias", "fc2.weight"]
    assert [n for n, _ in m.named_buffers()] == ["fc1.calls", "fc1.scratch", "fc2.calls",
                                                 "fc2.scratch"]
    assert [n for n, _ in m.named_children()] == ["fc1", "act", "fc2"]
    assert [n for n, _ in m.named_modules()] == ["", "fc1", "act", "fc2"]
    assert [n for n, _ in m.named_parameters(prefix="net")][0] == "net.fc1.weight"
    assert list(m.parameters(recurse=False)) == []
    assert all(isinstance(p, nn.Parameter) and isinstance(p, em.Tensor) for p in m.parameters())
    assert m.fc2.bias is None and "bias" not in m.fc2._parameters   # plain None attribute


def test_shared_parameters_and_modules_deduplicated():
    m = Net()
    m.fc3 = m.fc1                        # same module twice
    assert len(list(m.parameters())) == 3
    assert [n for n, _ in m.named_modules()] == ["", "fc1", "act", "fc2"]
    assert len(list(m.named_modules(remove_duplicate=False))) == 5
    assert len(list(m.named_parameters(remove_duplicate=False))) == 5
    assert [n for n, _ in m.named_children()] == ["fc1", "act", "fc2"]


def test_setattr_rules():
    m = Affine(2, 2)
    with pytest.raises(TypeError, match="cannot assign 'Tensor' as parameter 'weight'"):
        m.weight = em.zeros(2, 2)
    m.bias = None
    assert m.bias is None and "bias" in m._parameters
    with pytest.raises(TypeError, match="as buffer 'calls'"):
        m.calls = 3
    m.calls = em.ones(())
    assert m.calls.item() == 1.0 and "calls" in m._buffers
    m.plain = 5                           # plain attributes stay plain
    assert m.plain == 5 and "plain" in m.__dict__
    m.plain = nn.Parameter(em.zeros(1))   # re-assigning a Parameter registers it
    assert "plain" in m._parameters and "plain" not in m.__dict__
    del m.plain
    assert "plain" not in m._parameters
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        m.nope


def test_assign_before_init_and_init_args():
    class Bad(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(em.zeros(1))

    with pytest.raises(AttributeError, match="before Module.__init__"):
        Bad()
    with pytest.raises(TypeError):
        nn.Module(3)
    with pytest.raises(NotImplementedError, match="missing the required \"forward\""):
        nn.Module()(1)


def test_register_errors():
    m = Affine(2, 2)
    with pytest.raises(KeyError, match="contain"):
        m.register_buffer("a.b", em.zeros(1))
    with pytest.raises(KeyError, match="empty string"):
        m.register_parameter("", None)
    with pytest.raises(TypeError, match="should be a string"):
        m.register_buffer(1, em.zeros(1))
    with pytest.raises(KeyError, match="attribute 'forward' already exists"):
        m.register_buffer("forward", em.zeros(1))
    with pytest.raises(TypeError, match="ember.Tensor or None required"):
        m.register_buffer("x", [1])
    with pytest.raises(TypeError, match="Parameter or None required"):
        m.register_parameter("x", em.zeros(1))
    with pytest.raises(TypeError, match="is not a Module subclass"):
        m.add_module("x", 3)
    m.register_module("sub", nn.Module())
    assert m.sub is m.get_submodule("sub")


def test_get_submodule_parameter_buffer():
    m = Net()
    assert m.get_submodule("") is m
    assert m.get_submodule("fc1") is m.fc1
    assert m.get_parameter("fc1.bias") is m.fc1.bias
    assert m.get_buffer("fc2.calls") is m.fc2.calls
    with pytest.raises(AttributeError, match="has no attribute `zz`"):
        m.get_submodule("fc1.zz")
    with pytest.raises(AttributeError, match="is not an nn.Parameter"):
        m.get_parameter("fc1.calls")
    with pytest.raises(AttributeError, match="is not a buffer"):
        m.get_buffer("fc1.weight")
    m.set_submodule("act", Affine(1, 1))
    assert isinstance(m.act, Affine)


def test_train_eval_calls_children_train():
    seen = []

    class Child(nn.Module):
        def train(self, mode=True):
            seen.append(mode)
            return super().train(mode)

    m = nn.Module()
    m.c = Child()
    assert m.training and m.c.training
    assert m.eval() is m
    assert not m.training and not m.c.training and seen == [False]
    m.train()
    assert m.c.training and seen == [False, True]
    with pytest.raises(ValueError, match="boolean"):
        m.train(1)


def test_zero_grad_and_requires_grad_():
    m = Affine(3, 2)
    m(em.randn(4, 3)).sum().backward()
    g = m.weight.grad
    m.zero_grad(set_to_none=False)
    assert m.weight.grad is g and float(g.abs().sum()) == 0.0
    m.zero_grad()
    assert m.weight.grad is None and m.bias.grad is None
    assert m.requires_grad_(False) is m
    assert not any(p.requires_grad for p in m.parameters())


def test_apply_order():
    m = Net()
    order = []
    assert m.apply(lambda mod: order.append(type(mod).__name__)) is m
    assert order == ["Affine", "Module", "Affine", "Net"]


def test_to_dtype_keeps_parameter_objects_and_skips_ints():
    m = Affine(3, 2)
    w = m.weight
    m(em.randn(1, 3)).sum().backward()
    assert m.double() is m
    assert m.weight is w and w.dtype == em.float64 and w.requires_grad
    assert w.grad.dtype == em.float64
    assert m.calls.dtype == em.int64 and m.scratch.dtype == em.float64
    m.to(em.float32)
    assert w.dtype == em.float32
    m.half()
    assert w.dtype == em.float16
    m.to("cpu", dtype=em.float32)
    assert w.dtype == em.float32 and w.device == em.device("cpu")
    m.to(em.zeros(1, dtype=em.float64))
    assert w.dtype == em.float64
    with pytest.raises(TypeError, match="only accepts floating point"):
        m.to(em.int32)
    assert m.cpu() is m and m.float() is m
    m.type(em.float64)
    assert m.calls.dtype == em.float64


def test_state_dict_keys_values_and_sharing():
    m = Net()
    sd = m.state_dict()
    assert list(sd) == ["fc1.weight", "fc1.bias", "fc1.calls", "fc2.weight", "fc2.calls"]
    assert isinstance(sd, OrderedDict)
    assert not sd["fc1.weight"].requires_grad and not isinstance(sd["fc1.weight"], nn.Parameter)
    with em.no_grad():
        m.fc1.weight.add_(1.0)
    np.testing.assert_array_equal(sd["fc1.weight"].numpy(), m.fc1.weight.detach().numpy())
    kv = m.state_dict(keep_vars=True)
    assert kv["fc1.weight"] is m.fc1.weight
    assert list(m.fc1.state_dict(prefix="x."))[0] == "x.weight"


def test_load_state_dict_round_trip():
    a, b = Net(), Net()
    res = b.load_state_dict(a.state_dict())
    assert res.missing_keys == [] and res.unexpected_keys == []
    assert repr(res) == "<All keys matched successfully>"
    for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy())
    w = b.fc1.weight
    with em.no_grad():
        a.fc1.weight.mul_(3.0)
    b.load_state_dict(a.state_dict())
    assert b.fc1.weight is w   # copied in place, same Parameter


def test_load_state_dict_strict_errors_message():
    m = Net()
    sd = m.state_dict()
    del sd["fc1.bias"]
    sd["fc1.extra"] = em.zeros(1)
    sd["fc9.weight"] = em.zeros(1)
    with pytest.raises(RuntimeError) as ei:
        m.load_state_dict(sd)
    assert str(ei.value) == (
        'Error(s) in loading state_dict for Net:\n\tMissing key(s) in state_dict: '
        '"fc1.bias". \n\tUnexpected key(s) in state_dict: "fc9.weight", "fc1.extra". ')
    res = m.load_state_dict(sd, strict=False)
    assert res == (["fc1.bias"], ["fc9.weight", "fc1.extra"])
    assert res.missing_keys == ["fc1.bias"]
    assert "missing_keys=['fc1.bias']" in repr(res)


def test_load_state_dict_size_mismatch_and_types():
    m = Net()
    sd = m.state_dict()
    sd["fc2.weight"] = em.zeros(3, 3)
    with pytest.raises(RuntimeError, match=r"size mismatch for fc2.weight: copying a param "
                       r"with shape ember.Size\(\[3, 3\]\) from checkpoint, the shape in "
                       r"current model is ember.Size\(\[2, 4\]\)."):
        m.load_state_dict(sd, strict=False)
    sd = m.state_dict()
    sd["fc1.bias"] = [0.0] * 4
    with pytest.raises(RuntimeError, match='While copying the parameter named "fc1.bias"'):
        m.load_state_dict(sd)
    with pytest.raises(TypeError, match="dict-like"):
        m.load_state_dict([1, 2])


def test_load_state_dict_assign_and_casting():
    m = Affine(2, 2)
    sd = {k: v.double() for k, v in m.state_dict().items()}
    m.load_state_dict(sd)
    assert m.weight.dtype == em.float32          # copy_ casts to the model's dtype
    m.load_state_dict(sd, assign=True)
    assert isinstance(m.weight, nn.Parameter) and m.weight.dtype == em.float64
    assert m.weight.requires_grad
    assert m.calls.dtype == em.float64


def test_extra_state_round_trip():
    class WithExtra(nn.Module):
        def __init__(self):
            super().__init__()
            self.note = "a"

        def get_extra_state(self):
            return {"note": self.note}

        def set_extra_state(self, state):
            self.note = state["note"]

    a, b = WithExtra(), WithExtra()
    a.note = "z"
    assert list(a.state_dict()) == ["_extra_state"]
    b.load_state_dict(a.state_dict())
    assert b.note == "z"


def test_forward_hooks():
    m = Affine(2, 2)
    calls = []
    h1 = m.register_forward_pre_hook(lambda mod, args: (args[0] * 0,))
    h2 = m.register_forward_hook(lambda mod, args, out: out + 1)
    h3 = m.register_forward_hook(lambda mod, args, out: calls.append("first"), prepend=True)
    out = m(em.ones(1, 2))
    np.testing.assert_allclose(out.detach().numpy(), np.ones((1, 2)))
    assert calls == ["first"]
    for h in (h1, h2, h3):
        h.remove()
    with m.register_forward_pre_hook(lambda mod, args, kw: ((args[0] * 2,), kw),
                                     with_kwargs=True):
        with m.register_forward_hook(lambda mod, args, kw, out: out * 0, with_kwargs=True):
            assert float(m(em.ones(1, 2)).abs().sum()) == 0.0
    assert not m._forward_hooks and not m._forward_pre_hooks
    assert not m._forward_hooks_with_kwargs


def test_global_forward_hook():
    seen = []
    m = Net()
    with register_module_forward_hook(lambda mod, args, out: seen.append(type(mod).__name__)):
        m(em.randn(1, 3))
    assert seen == ["Affine", "Affine", "Net"]
    m(em.randn(1, 3))
    assert len(seen) == 3


def test_full_backward_hook():
    class Scale(nn.Module):
        def forward(self, x, y):
            return 2 * x + 3 * y

    m = Scale()
    got = {}

    def hook(mod, gin, gout):
        got["in"], got["out"] = gin, gout
        return (gin[0] * 10, gin[1])

    m.register_full_backward_hook(hook)
    m.register_full_backward_pre_hook(lambda mod, gout: (gout[0] * 2,))
    x = em.ones(3, requires_grad=True)
    y = em.ones(3, requires_grad=True)
    m(x, y).sum().backward()
    np.testing.assert_allclose(got["out"][0].numpy(), 2 * np.ones(3))
    np.testing.assert_allclose(got["in"][0].numpy(), 4 * np.ones(3))
    np.testing.assert_allclose(got["in"][1].numpy(), 6 * np.ones(3))
    np.testing.assert_allclose(x.grad.numpy(), 40 * np.ones(3))
    np.testing.assert_allclose(y.grad.numpy(), 6 * np.ones(3))


def test_full_backward_hook_inputs_without_grad():
    m = Affine(2, 2)
    got = []
    m.register_full_backward_hook(lambda mod, gin, gout: got.append((gin, gout)))
    m(em.ones(1, 2)).sum().backward()
    assert len(got) == 1 and got[0][0] == (None,) and got[0][1][0].shape == (1, 2)


def test_repr_nested_and_extra_repr():
    m = Net()
    assert repr(m) == ("Net(\n  (fc1): Affine(in=3, out=4)\n  (act): Module()\n"
                       "  (fc2): Affine(in=4, out=2)\n)")
    outer = nn.Module()
    outer.inner = m
    assert repr(outer).splitlines()[2] == "    (fc1): Affine(in=3, out=4)"
    assert repr(nn.Module()) == "Module()"
    assert "fc1" in dir(m) and "weight" in dir(m.fc1) and "calls" in dir(m.fc1)


def test_parameter_semantics():
    t = em.randn(2, 3)
    p = nn.Parameter(t)
    assert p.requires_grad and p.is_leaf and isinstance(p, em.Tensor)
    with em.no_grad():
        p.add_(1.0)
    np.testing.assert_array_equal(t.numpy(), p.detach().numpy())   # shares memory
    assert type(p * 2) is em.Tensor and type(p[0]) is em.Tensor
    assert type(p.detach()) is em.Tensor
    assert not nn.Parameter(t, requires_grad=False).requires_grad
    assert str(p).startswith("Parameter containing:\ntensor(")
    assert repr(p) == str(p) and repr(p).endswith("requires_grad=True)")
    assert nn.Parameter().shape == (0,)
    with pytest.raises(RuntimeError, match="floating point"):
        nn.Parameter(em.zeros(2, dtype=em.int64))
    with pytest.raises(TypeError):
        nn.Parameter([1.0])


def test_buffer_marker():
    m = nn.Module()
    m.a = nn.Buffer(em.zeros(2))
    m.b = nn.Buffer(em.ones(1), persistent=False)
    assert list(m.state_dict()) == ["a"]
    assert [n for n, _ in m.named_buffers()] == ["a", "b"]
    assert type(m.a) is em.Tensor


def test_deepcopy_module_is_independent():
    m = Net()
    m.tied = m.fc1                          # shared submodule stays shared in the copy
    m(em.randn(2, 3)).sum().backward()
    c = copy.deepcopy(m)
    assert c.fc1 is c.tied and c.fc1 is not m.fc1
    for (n, p), (_, q) in zip(m.named_parameters(), c.named_parameters()):
        assert type(q) is nn.Parameter and q.requires_grad
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy())
        assert q.grad is None               # like PyTorch: Parameter deepcopy drops .grad
    with em.no_grad():
        c.fc1.weight.zero_()
    assert float(m.fc1.weight.abs().sum()) > 0
    assert c.fc1.calls.dtype == em.int64 and c.fc1.calls is not m.fc1.calls
    y = c(em.randn(2, 3)).sum()
    y.backward()
    assert c.fc1.weight.grad is not None


def test_deepcopy_and_copy_of_tensors():
    x = em.randn(3, requires_grad=True)
    x.sum().backward()
    x.tag = "hello"
    y = copy.deepcopy(x)
    assert y.requires_grad and y.tag == "hello" and y.grad is not x.grad
    np.testing.assert_array_equal(y.grad.numpy(), x.grad.numpy())
    with pytest.raises(RuntimeError, match="graph leaves"):
        copy.deepcopy(x * 2)
    p = nn.Parameter(em.zeros(2))
    s = copy.copy(p)
    assert type(s) is nn.Parameter
    with em.no_grad():
        s.add_(1.0)
    assert float(p.sum()) == 2.0            # shallow copy shares memory


# ---------------------------------------------------------------- containers
def _mods(n):
    return [Affine(1, i + 1) for i in range(n)]


def test_sequential_basics():
    a, b, c = _mods(3)
    s = nn.Sequential(a, b, c)
    assert len(s) == 3 and s[0] is a and s[-1] is c and list(s) == [a, b, c]
    sl = s[1:]
    assert isinstance(sl, nn.Sequential) and list(sl) == [b, c]
    assert [n for n, _ in sl.named_children()] == ["1", "2"]
    with pytest.raises(IndexError, match="index 3 is out of range"):
        s[3]
    del s[0]
    assert [n for n, _ in s.named_children()] == ["0", "1"] and s[0] is b
    s.insert(0, a)
    assert list(s) == [a, b, c]
    s.append(Affine(1, 1)).extend([Affine(1, 1)])
    assert len(s) == 5
    assert isinstance(s.pop(-1), Affine) and len(s) == 4
    s[1] = c
    assert s[1] is c
    named = nn.Sequential(OrderedDict([("first", a), ("second", b)]))
    assert named.first is a and [n for n, _ in named.named_children()] == ["first", "second"]
    assert len(nn.Sequential(a) + nn.Sequential(b)) == 2 and len(nn.Sequential(a) * 3) == 3


def test_sequential_forward():
    s = nn.Sequential(Affine(3, 4), Affine(4, 2))
    x = em.randn(5, 3)
    ref = s[1](s[0](x))
    np.testing.assert_allclose(s(x).detach().numpy(), ref.detach().numpy())


def test_module_list_and_repr_compression():
    ml = nn.ModuleList([nn.Module() for _ in range(3)])
    ml.append(Affine(1, 1))
    assert len(ml) == 4 and isinstance(ml[1:], nn.ModuleList) and len(ml[1:]) == 3
    assert repr(ml) == ("ModuleList(\n  (0-2): 3 x Module()\n  (3): Affine(in=1, out=1)\n)")
    assert repr(nn.ModuleList()) == "ModuleList()"
    ml.insert(0, Affine(2, 2))
    assert isinstance(ml[0], Affine) and len(ml) == 5
    del ml[0]
    assert [n for n, _ in ml.named_children()] == ["0", "1", "2", "3"]
    ml += [nn.Module()]
    assert len(ml) == 5 and len(ml + ml) == 10
    with pytest.raises(TypeError, match="iterable"):
        ml.extend(3)
    m = nn.Module()
    m.layers = nn.ModuleList([Affine(1, 1), Affine(1, 1)])
    assert [n for n, _ in m.named_parameters()][0] == "layers.0.weight"


def test_module_dict():
    a, b = _mods(2)
    d = nn.ModuleDict({"a": a})
    d["b"] = b
    d.update([("c", nn.Module())])
    assert list(d) == ["a", "b", "c"] and "a" in d and len(d) == 3
    assert d.pop("c") is not None and list(d.keys()) == ["a", "b"]
    assert [n for n, _ in d.named_parameters()] == ["a.weight", "a.bias", "b.weight",
                                                    "b.bias"]
    with pytest.raises(ValueError, match="length 1; 2 is required"):
        d.update([("x",)])
    d.clear()
    assert len(d) == 0


def test_parameter_list_and_dict():
    pl = nn.ParameterList([em.zeros(2, 3), nn.Parameter(em.ones(1))])
    assert all(isinstance(p, nn.Parameter) for p in pl) and len(pl) == 2
    assert repr(pl) == ("ParameterList(\n    (0): Parameter containing: [ember.float32 of size "
                        "2x3]\n    (1): Parameter containing: [ember.float32 of size 1]\n)")
    assert isinstance(pl[0:1], nn.ParameterList) and len(pl[0:1]) == 1
    pl.append(em.zeros(4))
    assert [n for n, _ in pl.named_parameters()] == ["0", "1", "2"]
    with pytest.raises(RuntimeError, match="should not be called"):
        pl(1)
    pd = nn.ParameterDict({"b": em.zeros(1), "a": em.ones(2)})
    assert list(pd) == ["a", "b"]   # plain dicts are sorted, as PyTorch does
    pd["c"] = nn.Parameter(em.zeros(3))
    assert isinstance(pd["a"], nn.Parameter) and "c" in pd and len(pd) == 3
    assert pd.pop("c").shape == (3,) and list(pd.keys()) == ["a", "b"]
    assert pd.get("zz") is None
    with pytest.raises(TypeError, match="not a string"):
        pd[1]
    assert [n for n, _ in pd.named_parameters()] == ["a", "b"]


def test_container_reprs_match_torch():
    torch = pytest.importorskip("torch")
    e = nn.Sequential(nn.Module(), nn.ModuleList([nn.Module(), nn.Module()]),
                      nn.ModuleDict({"k": nn.Module()}),
                      nn.ParameterList([em.zeros(2, 3)]))
    t = torch.nn.Sequential(torch.nn.Module(),
                            torch.nn.ModuleList([torch.nn.Module(), torch.nn.Module()]),
                            torch.nn.ModuleDict({"k": torch.nn.Module()}),
                            torch.nn.ParameterList([torch.zeros(2, 3)]))
    assert repr(e) == repr(t).replace("torch.", "ember.")
    e2 = nn.ParameterDict({"w": em.zeros(2), "v": em.zeros(1)})
    t2 = torch.nn.ParameterDict({"w": torch.zeros(2), "v": torch.zeros(1)})
    # NOTE: PyTorch prints legacy type names here (FloatTensor); Ember prints the dtype
    assert repr(e2) == repr(t2).replace("torch.FloatTensor", "ember.float32")
    assert list(e2) == list(t2)


def test_state_dict_matches_torch_keys():
    torch = pytest.importorskip("torch")
    e = nn.Sequential(Affine(2, 3), nn.ModuleList([Affine(3, 3)]))
    keys = list(e.state_dict())
    assert keys == ["0.weight", "0.bias", "0.calls", "1.0.weight", "1.0.bias", "1.0.calls"]
    tm = torch.nn.Sequential(torch.nn.Linear(2, 3))
    sd = tm.state_dict()
    del sd["0.bias"]
    with pytest.raises(RuntimeError) as tinfo:
        tm.load_state_dict(sd)
    m = nn.Sequential(Affine(2, 3))
    esd = m.state_dict()
    del esd["0.bias"], esd["0.calls"]
    with pytest.raises(RuntimeError) as einfo:
        m.load_state_dict(esd)
    assert str(einfo.value).replace('", "0.calls', "") == str(tinfo.value)
