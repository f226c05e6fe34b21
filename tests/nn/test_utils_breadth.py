"""nn.utils breadth (issue 17, item 4): parametrize, weight/spectral norm, fusion, skip_init,
functional_call, prune — against PyTorch where it is installed."""
import numpy as np
import pytest

import ember as em
from ember.nn.utils import parametrizations as PZ
from ember.nn.utils import parametrize as P

torch = pytest.importorskip("torch")
import torch.nn.utils.prune  # noqa: E402  (a submodule torch does not import itself)


def _e(t):
    return em.tensor(t.detach().numpy().copy())


def _n(t):
    return t.detach().numpy()


def _copy_params(dst, src):
    """Copy torch module ``src``'s state into ember module ``dst`` (same keys)."""
    sd = {k: _e(v) for k, v in src.state_dict().items()}
    dst.load_state_dict(sd)


def _pair_linear(i=4, o=3):
    tl, el = torch.nn.Linear(i, o).double(), em.nn.Linear(i, o, dtype=em.float64)
    _copy_params(el, tl)
    return tl, el


class _Sym(em.nn.Module):
    def forward(self, x):
        return x.triu() + x.triu(1).T


def test_register_parametrization_layout_and_grad():
    m = em.nn.Linear(3, 3)
    P.register_parametrization(m, "weight", _Sym())
    assert type(m).__name__ == "ParametrizedLinear"
    assert P.is_parametrized(m) and P.is_parametrized(m, "weight")
    assert not P.is_parametrized(m, "bias")
    assert list(m.state_dict()) == ["bias", "parametrizations.weight.original"]
    w = m.weight.detach().numpy()
    np.testing.assert_array_equal(w, w.T)
    m(em.randn(2, 3)).sum().backward()
    assert m.parametrizations.weight.original.grad is not None
    P.remove_parametrizations(m, "weight")
    assert type(m) is em.nn.Linear and not P.is_parametrized(m)
    assert list(m.state_dict()) == ["bias", "weight"]   # torch re-registers it last
    np.testing.assert_array_equal(m.weight.detach().numpy(), w)


def test_parametrization_cached_evaluates_once():
    calls = []

    class Count(em.nn.Module):
        def forward(self, x):
            calls.append(1)
            return x * 2

    m = em.nn.Linear(2, 2)
    P.register_parametrization(m, "weight", Count())
    calls.clear()
    with P.cached():
        a, b = m.weight, m.weight
    assert len(calls) == 1 and a is b
    m.weight
    assert len(calls) == 2


def test_register_parametrization_bad_input():
    m = em.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="no parameter or buffer named 'nope'"):
        P.register_parametrization(m, "nope", _Sym())

    class Shrink(em.nn.Module):
        def forward(self, x):
            return x[0]

    with pytest.raises(ValueError, match="shape"):
        P.register_parametrization(m, "weight", Shrink())
    with pytest.raises(ValueError, match="no parametrization"):
        P.remove_parametrizations(m, "weight")


def test_weight_norm_parametrization_matches_torch_training():
    tl, el = _pair_linear()
    torch.nn.utils.parametrizations.weight_norm(tl)
    PZ.weight_norm(el)
    assert list(el.state_dict()) == list(tl.state_dict())
    _train_and_compare(tl, el)


def test_spectral_norm_parametrization_matches_torch_training():
    tl, el = _pair_linear(5, 4)
    torch.nn.utils.parametrizations.spectral_norm(tl)
    PZ.spectral_norm(el)
    assert list(el.state_dict()) == list(tl.state_dict())
    _copy_params(el, tl)   # the power iteration's u, v from torch's buffers
    _train_and_compare(tl, el)
    tl.eval(), el.eval()
    np.testing.assert_allclose(_n(el.weight), _n(tl.weight), rtol=1e-12, atol=1e-12)


def _train_and_compare(tl, el, steps=4):
    rng = np.random.default_rng(0)
    to = torch.optim.SGD(tl.parameters(), lr=0.1)
    eo = em.optim.SGD(el.parameters(), lr=0.1)
    for _ in range(steps):
        x = rng.standard_normal((6, tl.in_features))
        lt = (tl(torch.tensor(x)) ** 2).mean()
        le = (el(em.tensor(x)) ** 2).mean()
        np.testing.assert_allclose(le.item(), lt.item(), rtol=1e-12)
        to.zero_grad(), eo.zero_grad()
        lt.backward(), le.backward()
        for (k, a), (k2, b) in zip(tl.named_parameters(), el.named_parameters()):
            assert k == k2
            np.testing.assert_allclose(_n(b.grad), _n(a.grad), rtol=1e-10, atol=1e-12)
        to.step(), eo.step()
    for k, v in tl.state_dict().items():
        np.testing.assert_allclose(_n(el.state_dict()[k]), _n(v), rtol=1e-10, atol=1e-12)


def test_spectral_norm_bad_input():
    with pytest.raises(IndexError, match="out of range"):
        PZ.spectral_norm(em.nn.Linear(3, 2), dim=2)
    with pytest.raises(ValueError, match="n_power_iterations"):
        PZ.spectral_norm(em.nn.Linear(3, 2), n_power_iterations=0)
    with pytest.raises(ValueError, match="no parameter or buffer"):
        PZ.spectral_norm(em.nn.Linear(3, 2), name="w")


# ------------------------------------------------------------------ fusion
def _bn_pair(n):
    tb, eb = torch.nn.BatchNorm2d(n).double(), em.nn.BatchNorm2d(n, dtype=em.float64)
    with torch.no_grad():
        tb.running_mean.normal_(), tb.running_var.uniform_(0.5, 2)
        tb.weight.normal_(), tb.bias.normal_()
    _copy_params(eb, tb)
    return tb.eval(), eb.eval()


def test_fuse_conv_bn_eval_matches_torch_and_unfused():
    from ember.nn.utils.fusion import fuse_conv_bn_eval
    tc = torch.nn.Conv2d(3, 4, 3).double().eval()
    ec = em.nn.Conv2d(3, 4, 3, dtype=em.float64).eval()
    _copy_params(ec, tc)
    tb, eb = _bn_pair(4)
    tf = torch.nn.utils.fusion.fuse_conv_bn_eval(tc, tb)
    ef = fuse_conv_bn_eval(ec, eb)
    assert ef is not ec and isinstance(ef.weight, em.nn.Parameter)
    np.testing.assert_allclose(_n(ef.weight), _n(tf.weight), rtol=1e-12)
    np.testing.assert_allclose(_n(ef.bias), _n(tf.bias), rtol=1e-12)
    x = em.randn(2, 3, 6, 6, dtype=em.float64)
    np.testing.assert_allclose(_n(ef(x)), _n(eb(ec(x))), rtol=1e-10, atol=1e-12)
    with pytest.raises(RuntimeError, match="eval"):
        fuse_conv_bn_eval(ec.train(), eb)


def test_fuse_linear_bn_eval_matches_torch():
    from ember.nn.utils.fusion import fuse_linear_bn_eval
    tl, el = _pair_linear(5, 4)
    tb = torch.nn.BatchNorm1d(4).double()
    with torch.no_grad():
        tb.running_mean.normal_(), tb.running_var.uniform_(0.5, 2), tb.weight.normal_()
    eb = em.nn.BatchNorm1d(4, dtype=em.float64)
    _copy_params(eb, tb)
    tl.eval(), el.eval(), tb.eval(), eb.eval()
    tf = torch.nn.utils.fusion.fuse_linear_bn_eval(tl, tb)
    ef = fuse_linear_bn_eval(el, eb)
    np.testing.assert_allclose(_n(ef.weight), _n(tf.weight), rtol=1e-12)
    np.testing.assert_allclose(_n(ef.bias), _n(tf.bias), rtol=1e-12)
    with pytest.raises(ValueError, match="num_features"):
        fuse_linear_bn_eval(el, em.nn.BatchNorm1d(3).eval())


# ------------------------------------------------------------------ skip_init
def test_skip_init_draws_no_random_numbers():
    from ember.nn.utils import skip_init
    em.manual_seed(3)
    a = em.rand(4).numpy()
    em.manual_seed(3)
    m = skip_init(em.nn.Linear, 3, 4)
    assert type(m) is em.nn.Linear and tuple(m.weight.shape) == (4, 3)
    np.testing.assert_array_equal(em.rand(4).numpy(), a)   # nothing drawn in between

    class NoDevice(em.nn.Module):
        def __init__(self, n):
            super().__init__()

    with pytest.raises(RuntimeError, match="'device'"):
        skip_init(NoDevice, 3)


# ------------------------------------------------------------------ functional_call
def test_functional_call_swaps_and_restores():
    from ember.nn.utils.stateless import functional_call
    m = em.nn.Linear(3, 2, dtype=em.float64)
    w = em.randn(2, 3, dtype=em.float64, requires_grad=True)
    x = em.randn(4, 3, dtype=em.float64)
    old = m.weight
    out = functional_call(m, {"weight": w}, (x,))
    np.testing.assert_allclose(_n(out), _n(x @ w.T + m.bias), rtol=1e-12)
    assert m.weight is old
    out.sum().backward()
    np.testing.assert_allclose(_n(w.grad), np.tile(x.numpy().sum(0), (2, 1)), rtol=1e-12)
    assert old.grad is None
    with pytest.raises(RuntimeError, match="missing keys \\['bias'\\]"):
        functional_call(m, {"weight": w}, x, strict=True)
    with pytest.raises(AttributeError, match="'nope'"):
        functional_call(m, {"nope": w}, x)
    assert m.weight is old


def test_functional_call_tied_weights():
    from ember.nn.utils.stateless import functional_call
    m = em.nn.Sequential(em.nn.Linear(2, 2, bias=False), em.nn.Linear(2, 2, bias=False))
    m[1].weight = m[0].weight
    w = em.eye(2) * 2
    out = functional_call(m, {"0.weight": w}, em.ones(1, 2))
    np.testing.assert_allclose(out.numpy(), [[4.0, 4.0]])
    assert m[1].weight is m[0].weight


# ------------------------------------------------------------------ older hooks
def test_old_weight_norm_hook_matches_torch_training():
    from ember.nn.utils import remove_weight_norm, weight_norm
    tl, el = _pair_linear()
    with pytest.warns(FutureWarning):
        torch.nn.utils.weight_norm(tl)
    with pytest.warns(FutureWarning):
        weight_norm(el)
    assert list(el.state_dict()) == list(tl.state_dict())
    _train_and_compare(tl, el)
    torch.nn.utils.remove_weight_norm(tl)
    remove_weight_norm(el)
    assert list(el.state_dict()) == list(tl.state_dict())
    np.testing.assert_allclose(_n(el.weight), _n(tl.weight), rtol=1e-12)
    with pytest.raises(ValueError, match="not found"):
        remove_weight_norm(el)


def test_old_spectral_norm_hook_matches_torch_training():
    from ember.nn.utils import remove_spectral_norm, spectral_norm
    tl, el = _pair_linear(5, 4)
    torch.nn.utils.spectral_norm(tl)
    spectral_norm(el)
    assert list(el.state_dict()) == list(tl.state_dict())
    _copy_params(el, tl)   # the power iteration's u, v from torch's buffers
    _train_and_compare(tl, el)
    tl.eval(), el.eval()
    x = np.ones((1, 5))
    np.testing.assert_allclose(_n(el(em.tensor(x))), _n(tl(torch.tensor(x))), rtol=1e-12)
    torch.nn.utils.remove_spectral_norm(tl)
    remove_spectral_norm(el)
    assert list(el.state_dict()) == list(tl.state_dict())
    np.testing.assert_allclose(_n(el.weight), _n(tl.weight), rtol=1e-12)
    with pytest.raises(RuntimeError, match="two spectral_norm"):
        spectral_norm(spectral_norm(em.nn.Linear(2, 2)))


# ------------------------------------------------------------------ prune
def test_l1_unstructured_matches_torch_twice_and_remove():
    from ember.nn.utils import prune
    tl, el = _pair_linear(5, 4)
    for amount in (0.3, 4):
        torch.nn.utils.prune.l1_unstructured(tl, "weight", amount=amount)
        prune.l1_unstructured(el, "weight", amount=amount)
        assert list(el.state_dict()) == list(tl.state_dict())
        np.testing.assert_array_equal(_n(el.weight_mask), _n(tl.weight_mask))
    assert prune.is_pruned(el) and isinstance(el._forward_pre_hooks[
        next(iter(el._forward_pre_hooks))], prune.PruningContainer)
    x = np.ones((2, 5))
    lt, le = tl(torch.tensor(x)).sum(), el(em.tensor(x)).sum()
    lt.backward(), le.backward()
    np.testing.assert_allclose(_n(el.weight_orig.grad), _n(tl.weight_orig.grad), rtol=1e-12)
    torch.nn.utils.prune.remove(tl, "weight")
    prune.remove(el, "weight")
    assert list(el.state_dict()) == list(tl.state_dict()) and not prune.is_pruned(el)
    np.testing.assert_array_equal(_n(el.weight), _n(tl.weight))
    with pytest.raises(ValueError, match="has to be pruned"):
        prune.remove(el, "weight")


def test_random_unstructured_and_global_unstructured():
    from ember.nn.utils import prune
    m = em.nn.Linear(10, 10)
    prune.random_unstructured(m, "weight", amount=0.25)
    assert int((m.weight_mask == 0).sum().item()) == 25
    assert int((m.weight == 0).sum().item()) >= 25
    tl1, el1 = _pair_linear(4, 3)
    tl2, el2 = _pair_linear(3, 2)
    tp = ((tl1, "weight"), (tl2, "weight"), (tl2, "bias"))
    ep = ((el1, "weight"), (el2, "weight"), (el2, "bias"))
    torch.nn.utils.prune.global_unstructured(tp, torch.nn.utils.prune.L1Unstructured,
                                             amount=0.4)
    prune.global_unstructured(ep, prune.L1Unstructured, amount=0.4)
    for (tm, n), (emod, _) in zip(tp, ep):
        np.testing.assert_array_equal(_n(getattr(emod, n + "_mask")),
                                      _n(getattr(tm, n + "_mask")))
        assert list(emod.state_dict()) == list(tm.state_dict())


def test_prune_bad_amount():
    from ember.nn.utils import prune
    with pytest.raises(ValueError, match="float in the range"):
        prune.l1_unstructured(em.nn.Linear(2, 2), "weight", amount=1.5)
    with pytest.raises(ValueError, match="smaller than the number"):
        prune.l1_unstructured(em.nn.Linear(2, 2), "weight", amount=9)
    m = em.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="smaller than the number"):
        prune.l1_unstructured(m, "weight", amount=9)
    assert sorted(m.state_dict()) == ["bias", "weight"]   # rolled back (as torch)


# ------------------------------------------------------------------ packed RNNs
@pytest.mark.parametrize("kind,batch_first", [("LSTM", False), ("GRU", True), ("RNN", False)])
def test_packed_rnn_matches_torch(kind, batch_first):
    from ember.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
    trnn = getattr(torch.nn, kind)(3, 4, num_layers=2, bidirectional=True,
                                   batch_first=batch_first).double()
    ernn = getattr(em.nn, kind)(3, 4, num_layers=2, bidirectional=True,
                                batch_first=batch_first, dtype=em.float64)
    _copy_params(ernn, trnn)
    rng = np.random.default_rng(1)
    lengths = [2, 5, 3]   # unsorted: enforce_sorted=False permutes
    x = rng.standard_normal((3, 5, 3) if batch_first else (5, 3, 3))
    h0 = rng.standard_normal((4, 3, 4))
    tx, ex = torch.tensor(x, requires_grad=True), em.tensor(x, requires_grad=True)
    th = torch.tensor(h0, requires_grad=True)
    eh = em.tensor(h0, requires_grad=True)
    thx = (th, th * 2) if kind == "LSTM" else th
    ehx = (eh, eh * 2) if kind == "LSTM" else eh
    tp = torch.nn.utils.rnn.pack_padded_sequence(tx, lengths, batch_first=batch_first,
                                                 enforce_sorted=False)
    ep = pack_padded_sequence(ex, lengths, batch_first=batch_first, enforce_sorted=False)
    to, thn = trnn(tp, thx)
    eo, ehn = ernn(ep, ehx)
    np.testing.assert_allclose(_n(eo.data), _n(to.data), rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(_n(eo.unsorted_indices), _n(to.unsorted_indices))
    thn, ehn = (thn, ehn) if kind != "LSTM" else (thn[0] + thn[1] * 3, ehn[0] + ehn[1] * 3)
    np.testing.assert_allclose(_n(ehn), _n(thn), rtol=1e-10, atol=1e-12)
    tpad, _ = torch.nn.utils.rnn.pad_packed_sequence(to, batch_first=batch_first)
    epad, _ = pad_packed_sequence(eo, batch_first=batch_first)
    w = rng.standard_normal(tuple(tpad.shape))
    ((tpad * torch.tensor(w)).sum() + (thn ** 2).sum()).backward()
    ((epad * em.tensor(w)).sum() + (ehn ** 2).sum()).backward()
    np.testing.assert_allclose(_n(ex.grad), _n(tx.grad), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(_n(eh.grad), _n(th.grad), rtol=1e-9, atol=1e-12)
    for (k, a), (_, b) in zip(trnn.named_parameters(), ernn.named_parameters()):
        np.testing.assert_allclose(_n(b.grad), _n(a.grad), rtol=1e-9, atol=1e-12, err_msg=k)


def test_remove_weight_norm_parametrization_keeps_a_trainable_parameter():
    tl, el = _pair_linear()
    torch.nn.utils.parametrizations.weight_norm(tl)
    PZ.weight_norm(el)
    P.remove_parametrizations(el, "weight")
    torch.nn.utils.parametrize.remove_parametrizations(tl, "weight")
    assert isinstance(el.weight, em.nn.Parameter) and el.weight.requires_grad
    assert list(el.state_dict()) == list(tl.state_dict())
    np.testing.assert_allclose(_n(el.weight), _n(tl.weight), rtol=1e-12)
    with pytest.raises(ValueError, match="leave_parametrized=False"):
        P.remove_parametrizations(PZ.weight_norm(em.nn.Linear(2, 2)), "weight",
                                  leave_parametrized=False)


def test_parametrized_module_deepcopies():
    import copy
    m = PZ.spectral_norm(em.nn.Linear(3, 2))
    c = copy.deepcopy(m)
    assert type(c) is type(m) and c.parametrizations.weight.original is not \
        m.parametrizations.weight.original
    c.eval(), m.eval()
    np.testing.assert_array_equal(c.weight.detach().numpy(), m.weight.detach().numpy())


def test_nn_utils_names_match_torch():
    import torch.nn.utils as tu
    eu = em.nn.utils
    wanted = [n for n in dir(tu) if not n.startswith("_") and "memory_format" not in n]
    assert [n for n in wanted if not hasattr(eu, n)] == []
    assert callable(eu.weight_norm) and callable(eu.spectral_norm) and callable(eu.skip_init)


# ------------------------------------------------------------------ orthogonal
@pytest.mark.parametrize("shape,orth_map", [((4, 4), "matrix_exp"), ((4, 4), "householder"),
                                            ((5, 3), "matrix_exp"), ((3, 5), "householder")])
def test_orthogonal_matches_torch(shape, orth_map):
    tl, el = _pair_linear(shape[1], shape[0])
    torch.nn.utils.parametrizations.orthogonal(tl, orthogonal_map=orth_map)
    PZ.orthogonal(el, orthogonal_map=orth_map)
    assert list(el.state_dict()) == list(tl.state_dict())
    w = _n(el.weight)
    small = min(shape)
    gram = w @ w.T if shape[0] < shape[1] else w.T @ w
    np.testing.assert_allclose(gram, np.eye(small), atol=1e-12)
    if shape[0] == shape[1]:   # no random completion: the same base as torch's
        np.testing.assert_allclose(w, _n(tl.weight), atol=1e-12)
    with torch.no_grad():   # move off the base point, then compare values and gradients
        tl.parametrizations.weight.original.add_(0.3 * torch.randn(shape, dtype=torch.float64))
    _copy_params(el, tl)
    _train_and_compare(tl, el, steps=2)


def test_orthogonal_bad_input():
    with pytest.raises(ValueError, match="2 dimensions|matrix"):
        PZ.orthogonal(em.nn.Linear(2, 2), name="bias")
    with pytest.raises(ValueError, match="orthogonal_map"):
        PZ.orthogonal(em.nn.Linear(2, 2), orthogonal_map="qr")


def test_weight_norm_name_is_the_function_after_submodule_import():
    import subprocess
    import sys
    code = ("import ember.nn.utils.weight_norm, ember.nn.utils.spectral_norm, ember as em\n"
            "assert callable(em.nn.utils.weight_norm), em.nn.utils.weight_norm\n"
            "assert callable(em.nn.utils.spectral_norm), em.nn.utils.spectral_norm\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
