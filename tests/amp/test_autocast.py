"""``ember.autocast``: regions, nesting, the weight cast cache, gradients, checkpoint,
compile and custom Functions (issue 16, items 1 and 4)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import ember as em
import ember.nn.functional as F
from ember import nn
from ember.amp import autocast_mode


def _np(t):
    return np.asarray(t.detach().float().numpy())


# ------------------------------------------------------------------ switches and nesting
def test_defaults_and_queries():
    assert em.get_autocast_dtype("cpu") is em.bfloat16
    assert em.get_autocast_dtype("cuda") is em.float16
    assert not em.is_autocast_enabled("cpu")
    with em.autocast("cpu"):
        assert em.is_autocast_enabled("cpu") and not em.is_autocast_enabled("cuda")
        assert em.get_autocast_dtype("cpu") is em.bfloat16
    with em.autocast("cpu", dtype=em.float16):
        assert em.get_autocast_dtype("cpu") is em.float16
        assert (em.ones(2, 2) @ em.ones(2, 2)).dtype is em.float16
    assert em.get_autocast_dtype("cpu") is em.bfloat16
    assert not em.is_autocast_enabled("cpu")
    assert em.amp.autocast is em.autocast


def test_nesting_and_enabled_false_inside():
    a = em.randn(3, 3)
    with em.autocast("cpu"):
        assert (a @ a).dtype is em.bfloat16
        with em.autocast("cpu", enabled=False):
            assert not em.is_autocast_enabled("cpu")
            assert (a @ a).dtype is em.float32
            with em.autocast("cpu", dtype=em.float16):
                assert (a @ a).dtype is em.float16
            assert (a @ a).dtype is em.float32
        assert (a @ a).dtype is em.bfloat16
    assert (a @ a).dtype is em.float32


def test_cuda_region_leaves_cpu_tensors_alone():
    a = em.randn(3, 3)
    with em.autocast("cuda"):
        assert em.is_autocast_enabled("cuda")
        assert (a @ a).dtype is em.float32


def test_region_as_decorator_and_state_restored_after_error():
    @em.autocast("cpu")
    def f(x):
        return x @ x

    assert f(em.ones(2, 2)).dtype is em.bfloat16
    assert not em.is_autocast_enabled("cpu")
    with pytest.raises(ZeroDivisionError):
        with em.autocast("cpu"):
            1 / 0
    assert not em.is_autocast_enabled("cpu")
    assert (em.ones(2, 2) @ em.ones(2, 2)).dtype is em.float32


def test_bad_arguments():
    with pytest.raises(ValueError, match="device_type"):
        em.autocast("tpu")
    with pytest.warns(UserWarning, match="not supported"):
        ctx = em.autocast("cpu", dtype=em.float64)
    with ctx:
        assert not em.is_autocast_enabled("cpu")


def test_float64_and_integer_inputs_are_not_cast():
    d = em.randn(3, 3, dtype=em.float64)
    with em.autocast("cpu"):
        assert (d @ d).dtype is em.float64
        assert F.mse_loss(d, d).dtype is em.float64
        assert em.cat([em.ones(2, dtype=em.int64), em.ones(2, dtype=em.int64)]).dtype is \
            em.int64


def test_set_autocast_enabled_and_dtype():
    try:
        em.set_autocast_dtype("cpu", em.float16)
        em.set_autocast_enabled("cpu", True)
        assert (em.ones(2, 2) @ em.ones(2, 2)).dtype is em.float16
    finally:
        em.set_autocast_enabled("cpu", False)
        em.set_autocast_dtype("cpu", em.bfloat16)
    assert (em.ones(2, 2) @ em.ones(2, 2)).dtype is em.float32


# ------------------------------------------------------------------ weight cast cache
def test_weight_cast_cached_within_region_cleared_on_outermost_exit():
    lin = nn.Linear(4, 4)
    x = em.randn(2, 4)
    with em.autocast("cpu"):
        lin(x)
        cached = dict(autocast_mode._sw.cache)
        assert set(cached) == {id(lin.weight), id(lin.bias)}
        w_bf16 = cached[id(lin.weight)][1]
        with em.autocast("cpu"):
            lin(lin(x).float())
            assert autocast_mode._sw.cache[id(lin.weight)][1] is w_bf16   # no second cast
        assert autocast_mode._sw.cache                    # an inner exit keeps it
    assert not autocast_mode._sw.cache


def test_cache_only_for_float32_leaves_requiring_grad():
    w = em.randn(4, 4)                                   # no grad
    v = em.randn(4, 4, requires_grad=True) * 1.0         # not a leaf
    with em.autocast("cpu"):
        _ = em.randn(2, 4) @ w
        _ = em.randn(2, 4) @ v
        assert not autocast_mode._sw.cache
    with em.autocast("cpu", cache_enabled=False):
        nn.Linear(4, 4)(em.randn(2, 4))
        assert not autocast_mode._sw.cache


def test_cached_weight_gets_the_gradient_of_every_use():
    em.manual_seed(0)
    lin = nn.Linear(4, 4)
    x = em.randn(3, 4)
    with em.autocast("cpu"):
        loss = lin(lin(x)).float().sum()
    loss.backward()
    g_cached = lin.weight.grad.numpy().copy()
    lin.weight.grad = None
    lin.bias.grad = None
    with em.autocast("cpu", cache_enabled=False):
        loss = lin(lin(x)).float().sum()
    loss.backward()
    # NOTE: with the cache both uses' gradients meet in bfloat16 before the one cast's VJP
    # (as in PyTorch); without it each is cast to float32 first: equal to bf16 precision.
    np.testing.assert_allclose(g_cached, lin.weight.grad.numpy(), rtol=2 ** -6, atol=2 ** -6)


# ------------------------------------------------------------------ gradients
def test_backward_runs_in_the_forward_dtypes():
    em.manual_seed(0)
    x = em.randn(5, 4, requires_grad=True)
    w = em.randn(3, 4, requires_grad=True)
    seen = {}
    with em.autocast("cpu"):
        y = F.linear(x, w)
        y.register_hook(lambda g: seen.update(y=g.dtype))
        loss = F.mse_loss(y, em.zeros(5, 3))         # float32 loss of a bfloat16 value
    assert y.dtype is em.bfloat16 and loss.dtype is em.float32
    loss.backward()
    assert seen["y"] is em.bfloat16                  # the grad of the bf16 matmul is bf16
    assert w.grad.dtype is em.float32 and x.grad.dtype is em.float32   # through the casts
    # the reference: the same ops written out in bfloat16 by hand
    xb, wb = x.detach().to(em.bfloat16), w.detach().to(em.bfloat16)
    yb = xb @ wb.mT
    gy = (2.0 / 15.0 * yb.float()).to(em.bfloat16)
    np.testing.assert_array_equal(w.grad.numpy(), (gy.mT @ xb).float().numpy())
    np.testing.assert_array_equal(x.grad.numpy(), (gy @ wb).float().numpy())


def test_backward_inside_region_equals_backward_outside():
    def run(inside):
        em.manual_seed(0)
        net = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 2))
        x = em.randn(6, 4)
        with em.autocast("cpu"):
            loss = F.cross_entropy(net(x), em.tensor([0, 1, 0, 1, 1, 0]))
            if inside:
                loss.backward()
        if not inside:
            loss.backward()
        return [p.grad.numpy() for p in net.parameters()]

    for a, b in zip(run(True), run(False)):
        np.testing.assert_array_equal(a, b)


def _gelu_net(seed=0):
    em.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.Linear(16, 16), nn.GELU(),
                         nn.Linear(16, 3))


def _grads(net):
    return [p.grad.numpy().copy() for p in net.parameters()]


def test_checkpoint_recomputes_under_the_forwards_autocast():
    x, t = em.randn(8, 6), em.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    net = _gelu_net()
    with em.autocast("cpu"):
        F.cross_entropy(net(x), t).backward()
    ref = _grads(net)
    net.zero_grad(set_to_none=True)
    with em.autocast("cpu"):
        h = em.checkpoint(net[:4], x)
        assert h.dtype is em.bfloat16
        loss = F.cross_entropy(net[4](h), t)
    loss.backward()                                   # recompute runs after the region
    for a, b in zip(_grads(net), ref):
        np.testing.assert_array_equal(a, b)


def test_custom_function_custom_fwd_bwd():
    seen = {}

    class Scale(em.autograd.Function):
        @staticmethod
        @em.amp.custom_fwd(device_type="cpu", cast_inputs=em.float32)
        def forward(ctx, x, w):
            seen["fwd"] = (x.dtype, em.is_autocast_enabled("cpu"))
            ctx.save_for_backward(w)
            return x @ w

        @staticmethod
        @em.amp.custom_bwd(device_type="cpu")
        def backward(ctx, g):
            seen["bwd"] = em.is_autocast_enabled("cpu")
            (w,) = ctx.saved_tensors
            return g @ w.mT, None

    class Plain(em.autograd.Function):
        @staticmethod
        @em.amp.custom_fwd(device_type="cpu")
        def forward(ctx, x):
            return x @ x

        @staticmethod
        @em.amp.custom_bwd(device_type="cpu")
        def backward(ctx, g):
            seen["plain_bwd"] = (em.is_autocast_enabled("cpu"), em.get_autocast_dtype("cpu"))
            return g

    x = em.randn(3, 3, requires_grad=True)
    with em.autocast("cpu"):
        y = Scale.apply(x.to(em.bfloat16), em.randn(3, 3))
        z = Plain.apply(x)
    assert seen["fwd"] == (em.float32, False) and y.dtype is em.float32
    assert z.dtype is em.bfloat16
    y.sum().backward()
    z.float().sum().backward()
    assert seen["bwd"] is False                       # forward ran with autocast off
    assert seen["plain_bwd"] == (True, em.bfloat16)   # forward ran under bf16 autocast
    assert not em.is_autocast_enabled("cpu")
    with pytest.raises(ValueError, match="device_type"):
        em.amp.custom_fwd(device_type="gpu")


# ------------------------------------------------------------------ compile
def test_compile_casts_are_graph_nodes_and_signature_holds_autocast():
    w = em.randn(4, 4)

    def f(x):
        return (x @ w).relu()

    cf = em.compile(f)
    x = em.randn(2, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cf(x).dtype is em.float32
        with em.autocast("cpu"):
            yc = cf(x)
            ye = f(x)
        assert cf(x).dtype is em.float32
    assert yc.dtype is em.bfloat16
    np.testing.assert_array_equal(_np(yc), _np(ye))
    assert len(cf.graphs()) == 2
    text = str(cf.graphs()[-1])
    assert "cast(" in text and "bf16[2, 4] = matmul(" in text


def _train_step(net, opt, x, t, ckpt):
    opt.zero_grad()
    with em.autocast("cpu"):
        h = em.checkpoint(net[:4], x) if ckpt else net[:4](x)
        loss = F.cross_entropy(net[4](h), t)
    loss.backward()
    opt.step()
    return loss


@pytest.mark.parametrize("ckpt", [False, True], ids=["plain", "checkpoint"])
def test_compiled_training_step_matches_eager_autocast(ckpt):
    from ember.graph.passes import EXACT_PASSES
    x, t = em.randn(8, 6), em.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    ne, nc = _gelu_net(), _gelu_net()
    oe = em.optim.SGD(ne.parameters(), lr=0.1)
    oc = em.optim.SGD(nc.parameters(), lr=0.1)
    step = em.compile(_train_step, passes=EXACT_PASSES)
    for _ in range(3):
        le = _train_step(ne, oe, x, t, ckpt)
        with warnings.catch_warnings():
            warnings.simplefilter("error")          # no graph break, no eager fallback
            lc = step(nc, oc, x, t, ckpt)
        assert float(lc) == float(le)
        for pe, pc in zip(ne.parameters(), nc.parameters()):
            np.testing.assert_array_equal(pc.grad.numpy(), pe.grad.numpy())
            np.testing.assert_array_equal(pc.detach().numpy(), pe.detach().numpy())


def test_out_variants_are_not_autocast():
    """As in PyTorch, only functional overloads autocast: ``out=`` runs on the inputs as given."""
    a = em.randn(3, 3)
    with em.autocast("cpu"):
        r = em.mm(a, a, out=em.empty(3, 3))
        assert r.dtype is em.float32
        with em.autocast("cpu", enabled=False):
            np.testing.assert_array_equal(r.numpy(), (a @ a).numpy())
        assert em.cat([a, a], out=em.empty(6, 3)).dtype is em.float32
        assert em.matmul(a, a).dtype is em.bfloat16


def test_compiled_step_default_pipeline_close_to_eager_autocast():
    """With fusion (kernels keep float32 inside a fused chain, round once at the store) the
    compiled step agrees with eager autocast to bfloat16 precision."""
    x, t = em.randn(8, 6), em.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    ne, nc = _gelu_net(), _gelu_net()
    step = em.compile(_train_step)
    le = _train_step(ne, em.optim.SGD(ne.parameters(), lr=0.1), x, t, True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lc = step(nc, em.optim.SGD(nc.parameters(), lr=0.1), x, t, True)
    assert abs(float(lc) - float(le)) <= 2 ** -7 * abs(float(le))
    for pe, pc in zip(ne.parameters(), nc.parameters()):
        np.testing.assert_allclose(pc.grad.numpy(), pe.grad.numpy(), rtol=2 ** -5,
                                   atol=2 ** -7 * float(np.abs(pe.grad.numpy()).max()))


_NORMS = {
    "batch_norm": lambda F, x, w, b: F.batch_norm(x, None, None, w, b, training=True),
    "batch_norm_eval": lambda F, x, w, b: F.batch_norm(x, w * 0, w.abs() + 1, w, b),
    "layer_norm": lambda F, x, w, b: F.layer_norm(x, (5,), w[:5], b[:5]),
    "group_norm": lambda F, x, w, b: F.group_norm(x, 2, w, b),
    "instance_norm": lambda F, x, w, b: F.instance_norm(x, weight=w, bias=b),
    "rms_norm": lambda F, x, w, b: F.rms_norm(x, (5,), w[:5]),
}


@pytest.mark.parametrize("low", [em.bfloat16, em.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("name", list(_NORMS))
def test_norms_of_a_low_precision_input_with_float32_parameters(name, low):
    """As PyTorch's kernels: a bf16/fp16 input with float32 weights gives the input's dtype,
    computed in float32 and rounded once (a conv's bf16 output stays bf16 through a
    float32 BatchNorm under autocast)."""
    em.manual_seed(0)
    x = em.randn(4, 6, 5, 5).to(low).requires_grad_()
    w = em.randn(6, requires_grad=True)
    b = em.randn(6, requires_grad=True)
    fn = _NORMS[name]
    y = fn(F, x, w, b)
    assert y.dtype is low
    ref = fn(F, x.detach().float(), w.detach(), b.detach()).to(low)
    if name == "rms_norm":     # as PyTorch: normalised and rounded, then scaled and rounded
        ref = (F.rms_norm(x.detach().float(), (5,)).to(low) * w.detach()[:5]).to(low)
    np.testing.assert_array_equal(_np(y), _np(ref))
    y.float().sum().backward()
    assert x.grad.dtype is low and w.grad.dtype is em.float32
    try:
        import torch
        import torch.nn.functional as TF
    except ImportError:
        return
    tl = getattr(torch, str(low).split(".")[-1])
    tx = torch.tensor(x.detach().float().numpy()).to(tl)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # rms_norm: "Mismatch dtype ... fused implementation"
        ty = fn(TF, tx, torch.tensor(w.detach().numpy()), torch.tensor(b.detach().numpy()))
    assert ty.dtype == tl
    np.testing.assert_allclose(_np(y), ty.float().numpy(), rtol=2 ** -6, atol=2 ** -6)


_RNNS = [("LSTM", {}), ("LSTM", {"num_layers": 2, "bidirectional": True}),
         ("LSTM", {"proj_size": 4}), ("GRU", {}), ("RNN", {"batch_first": True}),
         ("LSTMCell", {}), ("GRUCell", {}), ("RNNCell", {})]
# NOTE: PyTorch's CPU LSTM runs oneDNN's mkldnn_rnn_layer (on the autocast list): all in
# bfloat16, but a projected LSTM's cell state stays float32; GRU and the LSTM/GRU cells run
# ops on no list; RNN and RNNCell run listed matmuls.
_RNN_DTYPES = {"LSTM": ("bfloat16",) * 3, "LSTM-proj": ("bfloat16", "bfloat16", "float32"),
               "GRU": ("float32",) * 2, "RNN": ("bfloat16",) * 2, "LSTMCell": ("float32",) * 2,
               "GRUCell": ("float32",), "RNNCell": ("bfloat16",)}


def _rnn_dtypes(lib, cls, kw):
    lib.manual_seed(0)
    m = getattr(lib.nn, cls)(4, 8, **kw)
    x = lib.randn(3, 2, 4) if not cls.endswith("Cell") else lib.randn(2, 4)
    with lib.autocast("cpu"):
        r = m(x)
    flat = []
    for v in (r if isinstance(r, tuple) else (r,)):
        flat.extend(v if isinstance(v, tuple) else (v,))
    return tuple(str(t.dtype).split(".")[-1] for t in flat), m, flat


@pytest.mark.parametrize("cls,kw", _RNNS, ids=[f"{c}-{'-'.join(k)}" for c, k in _RNNS])
def test_recurrent_layers_under_autocast(cls, kw):
    got, m, flat = _rnn_dtypes(em, cls, kw)
    key = "LSTM-proj" if kw.get("proj_size") else cls
    assert got == _RNN_DTYPES[key]
    sum(t.float().sum() for t in flat).backward()
    assert all(p.grad is not None and p.grad.dtype is em.float32 for p in m.parameters())
    try:
        import torch
    except ImportError:
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # oneDNN: "LSTM with projections is not supported"
        assert got == _rnn_dtypes(torch, cls, kw)[0]


def test_cpu_amp_names_are_pytorchs_deprecated_aliases():
    # torch.cpu.amp.autocast: autocast("cpu") with bfloat16 by default; GradScaler("cpu")
    lin = em.nn.Linear(3, 2)
    x = em.randn(4, 3)
    for kwargs, want in (({}, em.bfloat16), ({"dtype": em.float16}, em.float16),
                         ({"enabled": False}, em.float32)):
        with em.cpu.amp.autocast(**kwargs):
            assert lin(x).dtype == want, kwargs
    s = em.cpu.amp.GradScaler(init_scale=8.0, growth_interval=3)
    assert isinstance(s, em.amp.GradScaler) and s._device == "cpu"
    assert s.get_scale() == 8.0 and s.get_growth_interval() == 3
    assert sorted(em.cpu.amp.__all__) == ["GradScaler", "autocast"]
