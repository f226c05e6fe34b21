"""Training scripts that run eagerly (and under ``torch.compile``) run under ``ember.compile``.

Issue 14, items 4 and 5: a compiled function that calls ``backward()`` on a non-leaf it
returns, ``optimizer.zero_grad()`` after ``optimizer.step()``, manual parameter updates
(``p.data.add_``, ``p -= lr * p.grad`` under ``no_grad``, ``p.grad = None``,
``p.grad.zero_()``), and ``ember.compile(model)`` returning an ``nn.Module``
(``OptimizedModule``) like PyTorch. Compiled results are compared with eager ones over
several calls: bitwise with ``EXACT_PASSES``, tightly with the default pipeline.
"""
import copy
import warnings

import numpy as np
import pytest

import ember as em
import ember.nn.functional as F
from ember import nn
from ember.graph.optimized_module import OptimizedModule
from ember.graph.passes import EXACT_PASSES


def _eq(a, b, msg=""):
    np.testing.assert_array_equal(np.asarray(a.detach().numpy()), b.detach().numpy(), msg)


def _net(seed=0):
    em.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))


def _data(n=6, seed=1):
    em.manual_seed(seed)
    return em.randn(n, 5), em.randn(n, 3)


def _no_warnings(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # a graph break or eager fallback fails
        return fn(*args)


# ----------------------------------------------------------------- item 4
def test_compiled_function_may_backward_the_non_leaf_it_returns():
    def f(x):
        y = (x * x).sum()
        y.backward()
        return y

    cf = em.compile(f, passes=EXACT_PASSES)
    xe = em.tensor([1.0, 2.0, 3.0], requires_grad=True)
    xc = em.tensor([1.0, 2.0, 3.0], requires_grad=True)
    for k in range(1, 5):
        ye, yc = f(xe), _no_warnings(cf, xc)
        assert float(yc) == float(ye) == 14.0
        _eq(xc.grad, xe.grad, f"call {k}")
        np.testing.assert_array_equal(xc.grad.numpy(), [2.0 * k, 4.0 * k, 6.0 * k])
    assert len(cf.graphs()) == 2      # x.grad None, then x.grad present: one retrace


def test_compiled_backward_fills_the_grad_of_the_tensor_passed_at_each_call():
    def f(x):
        y = (x * x * x).sum()
        y.backward()
        return y

    cf = em.compile(f)
    a = em.tensor([1.0, 2.0], requires_grad=True)
    for _ in range(3):
        cf(a)                                  # captured with a, then compiled
    b = em.tensor([3.0, -1.0], requires_grad=True)
    cf(b)                                      # b.grad None: the first signature's graph
    np.testing.assert_allclose(b.grad.numpy(), [27.0, 3.0])
    cf(b)                                      # b.grad present: the accumulating graph
    np.testing.assert_allclose(b.grad.numpy(), [54.0, 6.0])
    np.testing.assert_allclose(a.grad.numpy(), [9.0, 36.0])    # a untouched by b's calls


_W = em.tensor([1.0, 2.0, 3.0], requires_grad=True)     # a global leaf, for the test below


def test_backward_accumulates_into_global_and_closure_leaves():
    v = em.tensor([0.5, -1.0], requires_grad=True)

    def f(x):
        y = (_W * _W * x).sum() + (v * v * v).sum()
        y.backward()
        return y

    cf = em.compile(f, passes=EXACT_PASSES)
    x = em.ones(3)
    for k in range(1, 5):
        assert float(_no_warnings(cf, x)) == 14.0 - 0.875
        np.testing.assert_array_equal(_W.grad.numpy(), [2.0 * k, 4.0 * k, 6.0 * k])
        np.testing.assert_array_equal(v.grad.numpy(), [0.75 * k, 3.0 * k])
    _W.grad = None


# ----------------------------------------------------------------- item 5: steps
def _train(step, compiled, steps=5, passes=EXACT_PASSES, **kw):
    model = _net()
    opt = kw.pop("opt", em.optim.SGD)(model.parameters(), lr=0.05, **kw)
    x, y = _data()
    f = step(model, opt)
    if compiled:
        f = em.compile(f, passes=passes)
    losses = [float(f(x, y)) for _ in range(steps)]
    return losses, model, f


def _same_training(step, **kw):
    le, me, _ = _train(step, False, **kw)
    lc, mc, f = _train(step, True, **kw)
    assert lc == le
    for (name, p), q in zip(mc.named_parameters(), me.parameters()):
        _eq(p, q, name)
        assert (p.grad is None) == (q.grad is None), name
        if p.grad is not None:
            _eq(p.grad, q.grad, name + ".grad")
    assert f.graphs(), f.explain()
    return f


def _zero_grad_after_step(model, opt):
    def step(x, y):
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return step


@pytest.mark.parametrize("opt", [em.optim.SGD, em.optim.Adam])
def test_zero_grad_after_step(opt):
    kw = {"momentum": 0.9} if opt is em.optim.SGD else {}
    f = _same_training(_zero_grad_after_step, opt=opt, **kw)
    assert not f.explain().breaks


def test_zero_grad_after_step_default_passes():
    le, me, _ = _train(_zero_grad_after_step, False)
    lc, mc, _ = _train(_zero_grad_after_step, True, passes=None)
    np.testing.assert_allclose(lc, le, rtol=1e-6)
    for p, q in zip(mc.parameters(), me.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5,
                                   atol=1e-7)


def _data_add(model, opt):
    def step(x, y):
        loss = F.mse_loss(model(x), y)
        loss.backward()
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-0.05)
            p.grad = None
        return loss
    return step


def _isub_no_grad(model, opt):
    def step(x, y):
        loss = F.mse_loss(model(x), y)
        loss.backward()
        with em.no_grad():
            for p in model.parameters():
                p -= 0.05 * p.grad
        for p in model.parameters():
            p.grad.zero_()
        return loss
    return step


def _grad_zero_first(model, opt):
    def step(x, y):
        for p in model.parameters():
            if p.grad is not None:
                p.grad.zero_()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        with em.no_grad():
            for p in model.parameters():
                p.sub_(p.grad * 0.05)
        return loss.detach()
    return step


def _autograd_grad(model, opt):
    def step(x, y):
        loss = F.mse_loss(model(x), y)
        grads = em.autograd.grad(loss, list(model.parameters()))
        with em.no_grad():
            for p, g in zip(model.parameters(), grads):
                p -= 0.05 * g
        return loss
    return step


@pytest.mark.parametrize("step", [_data_add, _isub_no_grad, _grad_zero_first, _autograd_grad])
def test_manual_parameter_updates(step):
    _same_training(step)


def test_writing_through_data_of_a_leaf_is_allowed_eagerly():
    p = em.tensor([1.0, 2.0, 4.0], requires_grad=True)
    p.data.div_(2)
    p.detach().mul_(em.tensor([1.0, 2.0, 3.0]))
    p.data.zero_()[1:].copy_(em.tensor([5.0, 6.0]))
    np.testing.assert_array_equal(p.detach().numpy(), [0.0, 5.0, 6.0])
    assert p.requires_grad and p.grad_fn is None
    with pytest.raises(RuntimeError, match="view of a leaf Variable"):
        p[0].add_(1)                           # a view that requires grad still may not


# ----------------------------------------------------------------- item 5: the module
def test_compile_of_a_module_is_an_nn_module_wrapping_it():
    model = nn.Sequential(nn.Linear(5, 8), nn.BatchNorm1d(8), nn.Dropout(0.5))
    cm = em.compile(model)
    assert isinstance(cm, OptimizedModule) and isinstance(cm, nn.Module)
    assert cm._orig_mod is model
    assert list(cm.state_dict()) == ["_orig_mod." + k for k in model.state_dict()]
    assert [n for n, _ in cm.named_parameters()] == \
        ["_orig_mod." + n for n, _ in model.named_parameters()]
    assert all(p is q for p, q in zip(cm.parameters(), model.parameters()))
    assert cm.eval() is cm and not model.training and not model[2].training
    assert not cm.training
    cm.train()
    assert model.training and model[1].training and cm.training
    model.eval()
    assert not cm.training
    assert getattr(cm, "0") is model[0]         # submodules reachable through the wrapper
    cm.note = "x"                              # attributes fall through to the original
    assert model.note == "x" and len(cm) == 3
    sd = {k: v.clone() for k, v in cm.state_dict().items()}
    cm.load_state_dict(sd)
    with pytest.raises(TypeError, match="nn.Module"):
        OptimizedModule(lambda x: x, None)


def test_compiled_module_names_match_torch_compile():
    torch = pytest.importorskip("torch")      # the oracle: optional
    tm = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU())
    cm = em.compile(nn.Sequential(nn.Linear(5, 8), nn.BatchNorm1d(8), nn.ReLU()))
    tc = torch.compile(tm)                    # wraps only: nothing compiles until called
    assert list(cm.state_dict()) == list(tc.state_dict())
    assert [n for n, _ in cm.named_parameters()] == [n for n, _ in tc.named_parameters()]
    assert [n for n, _ in cm.named_modules()] == [n for n, _ in tc.named_modules()]
    assert cm.eval().training == tc.eval().training == tm.training is False


def _bn_dropout_net():
    em.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Dropout(0.3),
                         nn.Linear(8, 3))


def test_compiled_module_retraces_on_train_eval_like_eager():
    eager, model = _bn_dropout_net(), _bn_dropout_net()
    cm = em.compile(model, passes=EXACT_PASSES)
    x, _ = _data()
    outs = []
    for mode in ("train", "train", "eval", "eval", "train", "eval"):
        getattr(cm, mode)()
        getattr(eager, mode)()
        with em.no_grad():
            em.manual_seed(7)
            a = cm(x)
            em.manual_seed(7)
            b = eager(x)
        _eq(a, b, mode)
        outs.append(a)
        for k, v in model.state_dict().items():          # running stats, batch counter
            _eq(v, eager.state_dict()[k], f"{mode}: {k}")
    assert not np.array_equal(outs[0].numpy(), outs[2].numpy())
    assert len(cm.graphs()) == 2 and cm.explain().recompiles


def test_training_loop_through_the_compiled_module_matches_eager():
    def run(compiled):
        model = _bn_dropout_net()
        net = em.compile(model, passes=EXACT_PASSES) if compiled else model
        opt = em.optim.Adam(net.parameters(), lr=1e-2)
        x, y = _data()
        losses = []
        em.manual_seed(3)
        for _ in range(4):
            net.train()
            loss = F.mse_loss(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss))
        net.eval()
        with em.no_grad():
            losses.append(float(F.mse_loss(net(x), y)))
        return losses, model, net

    le, me, _ = run(False)
    lc, mc, net = run(True)
    assert lc == le
    for k, v in mc.state_dict().items():
        _eq(v, me.state_dict()[k], k)
    assert list(net.state_dict()) == ["_orig_mod." + k for k in me.state_dict()]
    assert len(net.graphs()) == 2                # train and eval


def test_module_compile_in_place():
    eager, model = _net(), _net()
    assert model.compile(passes=EXACT_PASSES) is None
    keys = list(model.state_dict())
    assert keys == list(eager.state_dict())
    for k in range(3):
        x, _ = _data(seed=k)
        a, b = model(x), eager(x)
        _eq(a, b)
        a.sum().backward()
        b.sum().backward()
    for p, q in zip(model.parameters(), eager.parameters()):
        _eq(p.grad, q.grad)
    assert len(model._compiled_call_impl.graphs()) == 1
    twin = copy.deepcopy(model)               # compiles its own copy afresh
    assert twin._compiled_call_impl.fn.__self__ is twin
    x, _ = _data(seed=5)
    _eq(twin(x), model(x))
    twin[0].weight.data.zero_()
    assert not np.array_equal(twin(x).detach().numpy(), model(x).detach().numpy())


def test_compiled_module_deepcopies_and_reports():
    cm = em.compile(_net())
    x, _ = _data()
    with em.no_grad():
        y = cm(x)
    assert "capture #1" in str(cm.explain()) and cm.graphs()
    cm2 = copy.deepcopy(cm)
    assert isinstance(cm2, OptimizedModule) and cm2._orig_mod is not cm._orig_mod
    with em.no_grad():
        np.testing.assert_array_equal(cm2(x).numpy(), y.numpy())


def test_forward_backward_step_with_zero_grad_outside_stays_compiled():
    def run(compiled):
        model = _net()
        opt = em.optim.SGD(model.parameters(), lr=0.05)
        x, y = _data()

        def fb(x, y):
            loss = F.mse_loss(model(x), y)
            loss.backward()
            return loss
        f = em.compile(fb, passes=EXACT_PASSES) if compiled else fb
        losses = []
        for _ in range(12):
            opt.zero_grad()                    # grads None at every call: fb creates them
            losses.append(float(_no_warnings(f, x, y)))
            opt.step()
        return losses, model, f

    le, me, _ = run(False)
    lc, mc, f = run(True)
    assert lc == le
    for p, q in zip(mc.parameters(), me.parameters()):
        _eq(p, q)
        _eq(p.grad, q.grad)
    assert len(f.explain().captures) == 1     # not retraced at every call (nor eager)


def test_compiled_step_calling_a_compiled_module_inlines_it():
    def run(compiled):
        model = _net()
        net = em.compile(model, passes=EXACT_PASSES) if compiled else model
        opt = em.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
        sched = em.optim.lr_scheduler.StepLR(opt, 2, 0.5)
        x, y = _data()

        def step(x, y):
            loss = F.mse_loss(net(x), y)
            loss.backward()
            nn.utils.clip_grad_norm_(net.parameters(), 0.5)
            opt.step()
            opt.zero_grad()
            return loss
        f = em.compile(step, passes=EXACT_PASSES) if compiled else step
        losses = []
        for _ in range(6):
            losses.append(float(_no_warnings(f, x, y)))
            sched.step()
        return losses, model

    le, me = run(False)
    lc, mc = run(True)
    assert lc == le
    for p, q in zip(mc.parameters(), me.parameters()):
        _eq(p, q)


def test_char_gpt_script_with_compiled_model_matches_eager():
    """examples/char_gpt.py's loop with ``model = ember.compile(model)`` added (dropout on;
    ``generate`` reached through the wrapper)."""
    from ember.data import DataLoader
    from ember.datasets import CharText
    from ember.training.models import GPT

    def run(compiled):
        em.manual_seed(0)
        data = CharText("Beautiful is better than ugly. Explicit is better than implicit.",
                        block_size=8)
        model = GPT(data.vocab_size, 8, d_model=16, n_heads=2, n_layers=2, dropout=0.1)
        net = em.compile(model, passes=EXACT_PASSES) if compiled else model
        opt = em.optim.AdamW(net.parameters(), lr=3e-3, weight_decay=0.01)
        losses = []
        for x, y in DataLoader(data, batch_size=4, shuffle=True, drop_last=True):
            logits = net(x)
            loss = F.cross_entropy(logits.reshape(-1, data.vocab_size), y.reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            if len(losses) == 6:
                break
        net.eval()
        out = net.generate(em.tensor([data.encode("Beaut")]), 8,
                           generator=em.Generator().manual_seed(0))
        return losses, data.decode(out[0]), model

    le, se, me = run(False)
    lc, sc, mc = run(True)
    assert lc == le and sc == se
    for k, v in mc.state_dict().items():
        _eq(v, me.state_dict()[k], k)


@pytest.mark.parametrize("how", ["defaults", "kwdefaults"])
def test_model_and_optimizer_passed_as_default_arguments(how):
    """``def step(x, y, model=model, opt=opt)``: default arguments are state the compiled
    step reads and writes, like closure cells (they once replayed a stale graph)."""
    def run(compiled):
        em.manual_seed(0)
        model = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 3))
        opt = em.optim.Adam(model.parameters(), lr=0.01)
        if how == "defaults":
            def step(x, y, model=model, opt=opt):
                opt.zero_grad()
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                return loss
        else:
            def step(x, y, *, model=model, opt=opt):
                opt.zero_grad()
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                return loss
        f = em.compile(step) if compiled else step
        g = em.Generator().manual_seed(1)
        x, y = em.randn(8, 12, generator=g), em.randint(0, 3, (8,), generator=g)
        losses = [float(f(x, y)) for _ in range(5)]
        return losses, [p.detach().numpy().copy() for p in model.parameters()]
    (le, pe), (lc, pc) = run(False), run(True)
    np.testing.assert_allclose(lc, le, rtol=1e-6, atol=1e-6)
    for a, b in zip(pc, pe):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
