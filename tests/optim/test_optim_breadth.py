"""Optimizers of issue 17 item 5 (LBFGS, RAdam, Rprop, ASGD, Adafactor, swa_utils) against
PyTorch's trajectories (float64), state-dict round trips and hyper-parameter errors."""
import numpy as np
import pytest

import ember
from ember import optim

torch = pytest.importorskip("torch")


def _rosenbrock(x):
    return (1 - x[0]) ** 2 + 100 * (x[1] - x[0] ** 2) ** 2


def _lbfgs_path(lib, line_search, steps=6, **kw):
    x = lib.tensor([-1.5, 2.0], dtype=lib.float64, requires_grad=True)
    opt = lib.optim.LBFGS([x], line_search_fn=line_search, history_size=5, max_iter=4, **kw)
    path = []

    def closure():
        opt.zero_grad()
        loss = _rosenbrock(x)
        loss.backward()
        return loss
    for _ in range(steps):
        opt.step(closure)
        path.append(x.detach().numpy().copy())
    state = opt.state[x]
    return np.array(path), state["func_evals"], state["n_iter"]


@pytest.mark.parametrize("line_search", [None, "strong_wolfe"])
def test_lbfgs_matches_torch_on_rosenbrock(line_search):
    lr = 1 if line_search else 0.1
    ours, evals, iters = _lbfgs_path(ember, line_search, lr=lr)
    ref, ref_evals, ref_iters = _lbfgs_path(torch, line_search, lr=lr)
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-10)
    assert (evals, iters) == (ref_evals, ref_iters)


def test_lbfgs_converges_with_strong_wolfe():
    ours, _, _ = _lbfgs_path(ember, "strong_wolfe", steps=15)
    np.testing.assert_allclose(ours[-1], [1.0, 1.0], atol=1e-4)


def test_lbfgs_bad_arguments():
    x = ember.zeros(2, requires_grad=True)
    with pytest.raises(ValueError, match="line_search_fn"):
        optim.LBFGS([x], line_search_fn="armijo")
    with pytest.raises(ValueError, match="learning rate"):
        optim.LBFGS([x], lr=-1)
    with pytest.raises(ValueError, match="parameter groups"):
        optim.LBFGS([{"params": [x]}, {"params": [ember.zeros(1, requires_grad=True)]}])
    with pytest.raises(TypeError, match="closure"):
        optim.LBFGS([x]).step()


_RNG = np.random.default_rng(0)
_X, _Y = _RNG.standard_normal((8, 3)), _RNG.standard_normal((8, 4))
_W0, _B0 = _RNG.standard_normal((3, 4)), _RNG.standard_normal(4)


def _trajectory(lib, name, kw, steps=20, groups=False):
    """Params after each of ``steps`` steps of ``lib.optim.<name>(**kw)`` on a small
    least-squares problem with a tanh (float64)."""
    w = lib.tensor(_W0.copy(), dtype=lib.float64, requires_grad=True)
    b = lib.tensor(_B0.copy(), dtype=lib.float64, requires_grad=True)
    x, y = lib.tensor(_X, dtype=lib.float64), lib.tensor(_Y, dtype=lib.float64)
    params = [{"params": [w]}, {"params": [b], "lr": 0.02}] if groups else [w, b]
    opt = getattr(lib.optim, name)(params, **kw)
    out = []
    for _ in range(steps):
        opt.zero_grad()
        loss = ((lib.tanh(x @ w) + b - y) ** 2).mean()
        loss.backward()
        opt.step()
        out.append(np.concatenate([w.detach().numpy().ravel(), b.detach().numpy()]))
    return np.array(out), opt


_CASES = [
    ("RAdam", dict(lr=0.05)),
    ("RAdam", dict(lr=0.05, weight_decay=0.1, betas=(0.8, 0.9))),
    ("RAdam", dict(lr=0.05, weight_decay=0.1, decoupled_weight_decay=True, maximize=False)),
    ("RAdam", dict(lr=0.05, foreach=False, capturable=False, differentiable=False)),
    ("Rprop", dict(lr=0.01)),
    ("Rprop", dict(lr=0.05, etas=(0.3, 1.5), step_sizes=(1e-3, 0.1), maximize=True)),
    ("ASGD", dict(lr=0.05)),
    ("ASGD", dict(lr=0.05, t0=5, lambd=1e-2, alpha=0.5, weight_decay=0.1)),
    ("Adafactor", dict(lr=0.05)),
    ("Adafactor", dict(lr=0.05, beta2_decay=-0.5, eps=(1e-20, 1e-2), d=1.5,
                       weight_decay=0.1)),
]


@pytest.mark.parametrize("name,kw", _CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(_CASES)])
def test_trajectory_matches_torch(name, kw):
    ours, _ = _trajectory(ember, name, kw)
    ref, _ = _trajectory(torch, name, kw)
    np.testing.assert_allclose(ours, ref, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("name,kw", _CASES[::2], ids=[n for n, _ in _CASES[::2]])
def test_trajectory_with_groups_matches_torch(name, kw):
    ours, _ = _trajectory(ember, name, kw, steps=8, groups=True)
    ref, _ = _trajectory(torch, name, kw, steps=8, groups=True)
    np.testing.assert_allclose(ours, ref, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("name,kw", _CASES[::2], ids=[n for n, _ in _CASES[::2]])
def test_state_dict_round_trip_resumes_exactly(name, kw):
    full, _ = _trajectory(ember, name, kw, steps=12)
    _, opt = _trajectory(ember, name, kw, steps=6)
    sd = opt.state_dict()
    w = ember.tensor(full[5, :12].reshape(3, 4), dtype=ember.float64, requires_grad=True)
    b = ember.tensor(full[5, 12:], dtype=ember.float64, requires_grad=True)
    opt2 = getattr(optim, name)([w, b], **kw)
    opt2.load_state_dict(sd)
    x, y = ember.tensor(_X, dtype=ember.float64), ember.tensor(_Y, dtype=ember.float64)
    for i in range(6, 12):
        opt2.zero_grad()
        ((ember.tanh(x @ w) + b - y) ** 2).mean().backward()
        opt2.step()
        got = np.concatenate([w.detach().numpy().ravel(), b.detach().numpy()])
        np.testing.assert_array_equal(got, full[i])


@pytest.mark.parametrize("name,kw,match", [
    ("RAdam", dict(lr=-1e-3), "learning rate"),
    ("RAdam", dict(betas=(1.0, 0.9)), "beta parameter at index 0"),
    ("RAdam", dict(eps=-1), "epsilon"),
    ("RAdam", dict(weight_decay=-1), "weight_decay"),
    ("Rprop", dict(etas=(1.5, 1.2)), "eta values"),
    ("Rprop", dict(lr=-1), "learning rate"),
    ("ASGD", dict(weight_decay=-0.1), "weight_decay"),
    ("Adafactor", dict(beta2_decay=0.5), "beta2_decay"),
    ("Adafactor", dict(eps=(None, -1.0)), "epsilon2"),
    ("Adafactor", dict(d=0.5), "Clipping threshold d"),
    ("Adafactor", dict(lr=-1.0), "Learning rate"),
])
def test_bad_hyper_parameters_raise_like_torch(name, kw, match):
    with pytest.raises(ValueError, match=match):
        getattr(optim, name)([ember.zeros(2, requires_grad=True)], **kw)
    with pytest.raises(ValueError, match=match):
        getattr(torch.optim, name)([torch.zeros(2, requires_grad=True)], **kw)


def test_asgd_load_rejects_bad_scalar_state():
    _, opt = _trajectory(ember, "ASGD", dict(lr=0.05), steps=2)
    sd = opt.state_dict()
    sd["state"][0]["eta"] = ember.ones(3)
    opt2 = optim.ASGD([ember.zeros(3, 4, dtype=ember.float64, requires_grad=True),
                       ember.zeros(4, dtype=ember.float64, requires_grad=True)])
    with pytest.raises(TypeError, match="eta"):
        opt2.load_state_dict(sd)


# ---------------------------------------------------------------- swa_utils
def _net(lib, seed):
    rng = np.random.default_rng(seed)
    net = lib.nn.Sequential(lib.nn.Linear(3, 4), lib.nn.BatchNorm1d(4), lib.nn.ReLU(),
                            lib.nn.Linear(4, 2)).double()
    with lib.no_grad():
        for p in net.parameters():
            p.copy_(lib.tensor(rng.standard_normal(tuple(p.shape)), dtype=lib.float64))
        for name, buf in net.named_buffers():
            if buf.is_floating_point():
                buf.copy_(lib.tensor(rng.random(tuple(buf.shape)) + 0.5, dtype=lib.float64))
    return net


def _averaged(lib, kind, use_buffers=False, updates=5):
    swa = lib.optim.swa_utils
    kw = {"swa": {}, "ema": dict(multi_avg_fn=swa.get_ema_multi_avg_fn(0.9)),
          "ema_fn": dict(avg_fn=swa.get_ema_avg_fn(0.8)),
          "swa_fn": dict(avg_fn=swa.get_swa_avg_fn())}[kind]
    avg = swa.AveragedModel(_net(lib, 0), use_buffers=use_buffers, **kw)
    for i in range(updates):
        avg.update_parameters(_net(lib, i + 1))
    return {k: v.detach().numpy() for k, v in avg.state_dict().items()}


@pytest.mark.parametrize("kind", ["swa", "ema", "ema_fn", "swa_fn"])
@pytest.mark.parametrize("use_buffers", [False, True])
def test_averaged_model_matches_torch(kind, use_buffers):
    ours, ref = _averaged(ember, kind, use_buffers), _averaged(torch, kind, use_buffers)
    assert sorted(ours) == sorted(ref)
    for k in ref:
        np.testing.assert_allclose(ours[k], ref[k], rtol=1e-14, atol=1e-15, err_msg=k)


def test_ema_decay_out_of_range_raises():
    for make in (optim.swa_utils.get_ema_multi_avg_fn, optim.swa_utils.get_ema_avg_fn):
        with pytest.raises(ValueError, match="decay"):
            make(1.5)


def test_update_bn_matches_torch():
    rng = np.random.default_rng(3)
    batches = [rng.standard_normal((5, 3)) for _ in range(4)]
    stats = []
    for lib in (ember, torch):
        net = _net(lib, 0)
        net.eval()
        loader = [(lib.tensor(b, dtype=lib.float64), 0) for b in batches]
        lib.optim.swa_utils.update_bn(loader, net)
        bn = net[1]
        assert not net.training and bn.momentum == 0.1
        stats.append((bn.running_mean.numpy(), bn.running_var.numpy()))
    np.testing.assert_allclose(stats[0][0], stats[1][0], rtol=1e-13)
    np.testing.assert_allclose(stats[0][1], stats[1][1], rtol=1e-13)


@pytest.mark.parametrize("strategy,epochs", [("cos", 3), ("linear", 4), ("cos", 0)])
def test_swalr_matches_torch(strategy, epochs):
    lrs = []
    for lib in (ember, torch):
        p = lib.zeros(2, requires_grad=True)
        opt = lib.optim.SGD([{"params": [p]}, {"params": [lib.zeros(1, requires_grad=True)],
                                              "lr": 0.3}], lr=0.5)
        sched = lib.optim.swa_utils.SWALR(opt, swa_lr=[0.05, 0.01], anneal_epochs=epochs,
                                          anneal_strategy=strategy)
        seq = [sched.get_last_lr()]
        for _ in range(6):
            opt.step()
            sched.step()
            seq.append(sched.get_last_lr())
        lrs.append(seq)
    np.testing.assert_allclose(lrs[0], lrs[1], rtol=1e-15)


def test_swalr_bad_arguments_and_state_round_trip():
    opt = optim.SGD([ember.zeros(2, requires_grad=True)], lr=0.5)
    with pytest.raises(ValueError, match="anneal_strategy"):
        optim.swa_utils.SWALR(opt, swa_lr=0.1, anneal_strategy="exp")
    with pytest.raises(ValueError, match="anneal_epochs"):
        optim.swa_utils.SWALR(opt, swa_lr=0.1, anneal_epochs=-1)
    sched = optim.swa_utils.SWALR(opt, swa_lr=0.1, anneal_strategy="linear")
    sd = sched.state_dict()
    assert "anneal_func" not in sd
    other = optim.swa_utils.SWALR(opt, swa_lr=0.1)
    other.load_state_dict(sd)
    assert other.anneal_func(0.25) == 0.25


# ---------------------------------------------------------------- CyclicLR
def _cyclic(lib, opt_name, steps=25, **kw):
    p = lib.zeros(2, requires_grad=True)
    q = lib.zeros(1, requires_grad=True)
    extra = dict(momentum=0.9) if opt_name == "SGD" else {}
    opt = getattr(lib.optim, opt_name)([{"params": [p]}, {"params": [q]}], lr=0.1, **extra)
    sched = lib.optim.lr_scheduler.CyclicLR(opt, **kw)
    seq = []
    for _ in range(steps):
        opt.step()
        sched.step()
        g = opt.param_groups
        seq.append([g[0]["lr"], g[1]["lr"]]
                   + [x.get("momentum", x.get("betas", (None,))[0]) for x in g])
    return seq, sched


@pytest.mark.parametrize("opt_name,kw", [
    ("SGD", dict(base_lr=0.01, max_lr=0.1, step_size_up=4)),
    ("SGD", dict(base_lr=[0.01, 0.02], max_lr=[0.1, 0.3], step_size_up=3, step_size_down=5,
                 mode="triangular2", base_momentum=0.7, max_momentum=0.95)),
    ("Adam", dict(base_lr=0.001, max_lr=0.01, step_size_up=5, mode="exp_range",
                  gamma=0.97)),
    ("Adam", dict(base_lr=0.001, max_lr=0.01, step_size_up=2, cycle_momentum=False,
                  scale_fn=lambda x: 0.5 ** x, scale_mode="iterations")),
])
def test_cyclic_lr_matches_torch(opt_name, kw):
    ours, _ = _cyclic(ember, opt_name, **kw)
    ref, _ = _cyclic(torch, opt_name, **kw)
    np.testing.assert_allclose(np.array(ours, dtype=float), np.array(ref, dtype=float),
                               rtol=1e-15, atol=0)


def test_cyclic_lr_state_round_trip_and_errors():
    kw = dict(base_lr=0.01, max_lr=0.1, step_size_up=3, mode="triangular2")
    full, _ = _cyclic(ember, "SGD", steps=12, **kw)
    _, sched = _cyclic(ember, "SGD", steps=5, **kw)
    sd = sched.state_dict()
    p = ember.zeros(2, requires_grad=True)
    opt = optim.SGD([{"params": [p]}, {"params": [ember.zeros(1, requires_grad=True)]}],
                    lr=0.1, momentum=0.9)
    other = optim.lr_scheduler.CyclicLR(opt, base_lr=0.5, max_lr=0.9, step_size_up=7)
    other.load_state_dict(sd)
    for i in range(5, 12):
        opt.step()
        other.step()
        assert [g["lr"] for g in opt.param_groups] == full[i][:2]
    with pytest.raises(ValueError, match="mode is invalid"):
        optim.lr_scheduler.CyclicLR(opt, 0.01, 0.1, mode="sine")
    with pytest.raises(ValueError, match="momentum"):
        optim.lr_scheduler.CyclicLR(optim.Adagrad([p]), 0.01, 0.1)
    with pytest.raises(ValueError, match="step_size_up"):
        optim.lr_scheduler.CyclicLR(opt, 0.01, 0.1, step_size_up=0)


# ---------------------------------------------------------------- implementation flags
_ALL = ["SGD", "Adam", "AdamW", "Adamax", "NAdam", "RMSprop", "Adagrad", "Adadelta", "RAdam",
        "Rprop", "ASGD", "Adafactor", "LBFGS"]


@pytest.mark.parametrize("name", _ALL + ["Muon"])
def test_signature_matches_torch(name):
    import inspect
    ours = inspect.signature(getattr(optim, name).__init__).parameters
    ref = inspect.signature(getattr(torch.optim, name).__init__).parameters
    assert [k for k in ref if k not in ours] == []
    for k, p in ref.items():
        assert ours[k].kind == p.kind, k
        if k != "params":
            assert ours[k].default == p.default, k


@pytest.mark.parametrize("name", [n for n in _ALL if n != "LBFGS"])
def test_foreach_fused_capturable_accepted_and_same_result(name):
    import inspect
    keys = inspect.signature(getattr(optim, name).__init__).parameters
    flags = {k: v for k, v in dict(foreach=True, capturable=True, fused=True).items()
             if k in keys}
    if "fused" in flags:
        flags["foreach"] = False
    base, _ = _trajectory(ember, name, {}, steps=4)
    flagged, opt = _trajectory(ember, name, flags, steps=4)
    if opt._fused_capable and flags.get("fused"):
        # NOTE: fused=True runs the compiled update (ember/optim/_fused.py), whose kernels
        # contract a*b+c into FMAs: the loop's values to float64 rounding, as PyTorch's
        # fused kernels are to its for-loop; foreach/capturable alone stay bit-identical.
        np.testing.assert_allclose(flagged, base, rtol=1e-14, atol=1e-15)
        loop, _ = _trajectory(ember, name, dict(flags, fused=None), steps=4)
        np.testing.assert_array_equal(loop, base)
    else:
        np.testing.assert_array_equal(flagged, base)
    assert all(opt.param_groups[0][k] == v for k, v in flags.items())


def test_fused_with_foreach_and_differentiable_refused():
    p = [ember.zeros(2, requires_grad=True)]
    with pytest.raises(RuntimeError, match="cannot be `True` together"):
        optim.Adam(p, fused=True, foreach=True)
    with pytest.raises(RuntimeError, match="differentiable=True is not supported"):
        optim.SGD(p, lr=0.1, differentiable=True)


def test_lbfgs_state_dict_round_trip_resumes_exactly():
    def run(steps, resume_from=None):
        x = ember.tensor([-1.5, 2.0], dtype=ember.float64, requires_grad=True)
        opt = optim.LBFGS([x], lr=1, history_size=3, max_iter=3,
                          line_search_fn="strong_wolfe")
        if resume_from is not None:
            xs, sd = resume_from
            with ember.no_grad():
                x.copy_(xs)
            opt.load_state_dict(sd)

        def closure():
            opt.zero_grad()
            loss = _rosenbrock(x)
            loss.backward()
            return loss
        path = []
        for _ in range(steps):
            opt.step(closure)
            path.append(x.detach().numpy().copy())
        return path, x, opt
    full, _, _ = run(6)
    first, x, opt = run(3)
    import copy
    sd = copy.deepcopy(opt.state_dict())
    rest, _, _ = run(3, resume_from=(x.detach().clone(), sd))
    np.testing.assert_array_equal(np.array(first + rest), np.array(full))


@pytest.mark.parametrize("name", ["RAdam", "Rprop", "ASGD", "Adafactor"])
def test_compiled_step_matches_eager(name):
    """A step under ``ember.compile`` (replayed graph, or eager after a graph break) takes
    the same path as eager; Rprop's etaplus must not be rounded to float32 in the graph."""
    import warnings
    out = []
    for compiled in (False, True):
        w = ember.tensor(_W0.copy(), dtype=ember.float64, requires_grad=True)
        x, y = ember.tensor(_X, dtype=ember.float64), ember.tensor(_Y, dtype=ember.float64)
        opt = getattr(optim, name)([w], lr=0.05)

        def step():
            opt.zero_grad()
            ((x @ w - y) ** 2).mean().backward()
            opt.step()
        f = ember.compile(step) if compiled else step
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(8):
                f()
        out.append(w.detach().numpy().copy())
    np.testing.assert_allclose(out[1], out[0], rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("key,index", [("row_var", 0), ("col_var", 0), ("variance", 1)])
def test_adafactor_load_rejects_missing_or_misshapen_factors(key, index):
    _, opt = _trajectory(ember, "Adafactor", dict(lr=0.05), steps=2)
    fresh = [ember.zeros(3, 4, dtype=ember.float64, requires_grad=True),
             ember.zeros(4, dtype=ember.float64, requires_grad=True)]
    sd = opt.state_dict()
    del sd["state"][index][key]
    with pytest.raises(ValueError, match=key):
        optim.Adafactor(fresh).load_state_dict(sd)
    sd = opt.state_dict()
    sd["state"][index][key] = ember.zeros(2, 2, dtype=ember.float64)
    with pytest.raises(ValueError, match=f"{key}.*shape"):
        optim.Adafactor(fresh).load_state_dict(sd)


# ---------------------------------------------------------------- Muon
def _muon_updates(lib, steps=8, **kw):
    rng = np.random.default_rng(1)
    w0, x0, y0 = rng.standard_normal((6, 4)), rng.standard_normal((8, 6)), \
        rng.standard_normal((8, 4))
    w = lib.tensor(w0, dtype=lib.float64, requires_grad=True)
    x, y = lib.tensor(x0, dtype=lib.float64), lib.tensor(y0, dtype=lib.float64)
    opt = lib.optim.Muon([w], **kw)
    path = [w0]
    for _ in range(steps):
        opt.zero_grad()
        ((x @ w - y) ** 2).mean().backward()
        opt.step()
        path.append(w.detach().numpy().copy())
    return np.diff(np.array(path), axis=0)


def _ns_float64(lib, grad, coefficients, steps, eps):
    """PyTorch's Newton-Schulz iteration without its bfloat16 cast (exact comparisons)."""
    a, b, c = coefficients
    x = grad.clone()
    tall = grad.shape[0] > grad.shape[1]
    if tall:
        x = x.T
    x = x / x.norm().clamp(min=eps)
    for _ in range(steps):
        gram = x @ x.T
        x = lib.addmm(x, lib.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.T if tall else x


@pytest.mark.parametrize("kw", [
    dict(lr=0.02),
    dict(lr=0.02, nesterov=False, momentum=0.8, weight_decay=0.0),
    dict(lr=0.02, adjust_lr_fn="match_rms_adamw", ns_steps=3),
])
def test_muon_trajectory_matches_torch_with_float64_orthogonalisation(kw, monkeypatch):
    """Everything but the bfloat16 rounding: both libraries' Newton-Schulz step is swapped
    for the same float64 iteration, so the trajectories must agree to float64 accuracy."""
    import functools
    import ember.optim.muon as ember_muon
    import torch.optim._muon as torch_muon
    monkeypatch.setattr(ember_muon, "_zeropower_via_newtonschulz",
                        functools.partial(_ns_float64, ember))
    monkeypatch.setattr(torch_muon, "_zeropower_via_newtonschulz",
                        functools.partial(_ns_float64, torch))
    ours, ref = _muon_updates(ember, **kw), _muon_updates(torch, **kw)
    np.testing.assert_allclose(ours, ref, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("shape", [(6, 4), (4, 6)])
def test_muon_newton_schulz_matches_torch_in_bfloat16(shape):
    """The bfloat16 iteration itself: Ember's bfloat16 addmm may round differently from
    PyTorch's by one bfloat16 ulp (2**-8 relative) per product, which five iterations
    amplify (coefficients up to 4.8) to several ulps of the O(1) entries."""
    from ember.optim.muon import _zeropower_via_newtonschulz as ours_ns
    from torch.optim._muon import _zeropower_via_newtonschulz as torch_ns
    g = np.random.default_rng(2).standard_normal(shape)
    coef = (3.4445, -4.7750, 2.0315)
    ours = ours_ns(ember.tensor(g), coef, 5, 1e-7)
    ref = torch_ns(torch.tensor(g), coef, 5, 1e-7)
    assert ours.dtype == ember.bfloat16 and tuple(ours.shape) == shape
    np.testing.assert_allclose(ours.to(ember.float64).numpy(), ref.double().numpy(),
                               rtol=0, atol=16 * 2.0 ** -8)


def test_muon_bad_arguments():
    w = ember.zeros(3, 2, requires_grad=True)
    with pytest.raises(ValueError, match="2D parameters"):
        optim.Muon([ember.zeros(3, requires_grad=True)])
    with pytest.raises(ValueError, match="Adjust learning rate function"):
        optim.Muon([w], adjust_lr_fn="sqrt")
    with pytest.raises(ValueError, match="momentum"):
        optim.Muon([w], momentum=-0.5)
    with pytest.raises(ValueError, match="Learning rate"):
        optim.Muon([w], lr=-1.0)
