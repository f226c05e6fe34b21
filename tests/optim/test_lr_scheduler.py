"""LR schedulers: PyTorch parity over 30 steps, closed forms, state-dict round trips, errors."""
import json
import math
import warnings

import pytest

import ember as em
from ember import optim
from ember.optim import lr_scheduler as S

LRS = (0.1, 0.05)


def make_opt(kind="SGD", lib=em):
    ps = [lib.zeros(2, requires_grad=True), lib.zeros(3, requires_grad=True)]
    o = optim if lib is em else lib.optim
    groups = [{"params": [ps[0]], "lr": LRS[0]}, {"params": [ps[1]], "lr": LRS[1]}]
    if kind == "SGD":
        return o.SGD(groups, lr=0.1, momentum=0.9)
    return o.Adam(groups, lr=0.1)


def _lambda(e):
    return 0.5 ** (e // 3) + 0.01 * e


# name -> (builder(mod, opt) -> scheduler, optimizer kind)
CASES = {
    "StepLR": lambda m, o: m.StepLR(o, step_size=4, gamma=0.5),
    "MultiStepLR": lambda m, o: m.MultiStepLR(o, milestones=[3, 7, 7, 20], gamma=0.3),
    "ExponentialLR": lambda m, o: m.ExponentialLR(o, gamma=0.9),
    "CosineAnnealingLR": lambda m, o: m.CosineAnnealingLR(o, T_max=10, eta_min=0.001),
    "CosineAnnealingLR-long": lambda m, o: m.CosineAnnealingLR(o, T_max=7),
    "WarmRestarts": lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2,
                                                               eta_min=0.002),
    "WarmRestarts-1": lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=5),
    "LambdaLR": lambda m, o: m.LambdaLR(o, lr_lambda=_lambda),
    "LambdaLR-list": lambda m, o: m.LambdaLR(o, lr_lambda=[_lambda, lambda e: 1 / (e + 1)]),
    "MultiplicativeLR": lambda m, o: m.MultiplicativeLR(o, lr_lambda=lambda e: 0.95),
    "LinearLR": lambda m, o: m.LinearLR(o, start_factor=0.25, end_factor=0.9, total_iters=8),
    "ConstantLR": lambda m, o: m.ConstantLR(o, factor=0.5, total_iters=4),
    "PolynomialLR": lambda m, o: m.PolynomialLR(o, total_iters=12, power=2.0),
    "OneCycleLR": lambda m, o: m.OneCycleLR(o, max_lr=[1.0, 0.5], total_steps=31),
    "OneCycleLR-linear3": lambda m, o: m.OneCycleLR(o, max_lr=0.8, epochs=4, steps_per_epoch=8,
                                                    anneal_strategy="linear", three_phase=True,
                                                    pct_start=0.25, div_factor=10.0,
                                                    final_div_factor=100.0),
    "OneCycleLR-nomom": lambda m, o: m.OneCycleLR(o, max_lr=0.3, total_steps=40,
                                                  cycle_momentum=False),
    "SequentialLR-warmup": lambda m, o: m.SequentialLR(
        o, schedulers=[m.LinearLR(o, start_factor=0.01, total_iters=5),
                       m.CosineAnnealingLR(o, T_max=20, eta_min=0.001)], milestones=[5]),
    "SequentialLR-3": lambda m, o: m.SequentialLR(
        o, schedulers=[m.ConstantLR(o, factor=0.1, total_iters=2),
                       m.ExponentialLR(o, gamma=0.9), m.StepLR(o, step_size=3)],
        milestones=[4, 12]),
    "ChainedScheduler": lambda m, o: m.ChainedScheduler(
        [m.ConstantLR(o, factor=0.1, total_iters=3), m.ExponentialLR(o, gamma=0.9)]),
}
ADAM_CASES = {"OneCycleLR", "OneCycleLR-linear3"}   # also run these with Adam (beta1 cycling)
PARAMS = [(n, "SGD") for n in CASES] + [(n, "Adam") for n in sorted(ADAM_CASES)]


def flat(rows):
    return [x for r in rows for x in r]


def _momentum(opt):
    return [g["betas"][0] if "betas" in g else g["momentum"] for g in opt.param_groups]


def run(lib, name, kind, steps=30):
    o = make_opt(kind, lib)
    mod = S if lib is em else lib.optim.lr_scheduler
    s = CASES[name](mod, o)
    lrs, moms = [s.get_last_lr()], [_momentum(o)]
    for _ in range(steps):
        o.step()
        s.step()
        lrs.append(list(s.get_last_lr()))
        moms.append(_momentum(o))
        assert lrs[-1] == [g["lr"] for g in o.param_groups]
    return lrs, moms, o, s


@pytest.mark.parametrize("name,kind", PARAMS, ids=[f"{n}-{k}" for n, k in PARAMS])
def test_vs_torch(name, kind):
    torch = pytest.importorskip("torch")
    steps = 30 if not name.startswith("OneCycleLR") else \
        {"OneCycleLR": 30, "OneCycleLR-linear3": 31, "OneCycleLR-nomom": 39}[name]
    lrs, moms, o, _ = run(em, name, kind, steps)
    tl, tm, to, _ = run(torch, name, kind, steps)
    assert flat(lrs) == pytest.approx(flat(tl), rel=1e-13, abs=1e-15)
    assert flat(moms) == pytest.approx(flat(tm), rel=1e-13, abs=1e-15)
    for g, tg in zip(o.param_groups, to.param_groups):
        assert g["initial_lr"] == pytest.approx(tg["initial_lr"], rel=1e-15)


def test_closed_forms():
    base = LRS
    lrs = run(em, "StepLR", "SGD")[0]
    assert flat(lrs) == pytest.approx(flat([[b * 0.5 ** (e // 4) for b in base]
                                            for e in range(31)]))
    lrs = run(em, "ExponentialLR", "SGD")[0]
    assert flat(lrs) == pytest.approx(flat([[b * 0.9 ** e for b in base] for e in range(31)]))
    lrs = run(em, "MultiStepLR", "SGD")[0]
    n = [sum(e >= m for m in (3, 7, 7, 20)) for e in range(31)]
    assert flat(lrs) == pytest.approx(flat([[b * 0.3 ** k for b in base] for k in n]))
    lrs = run(em, "CosineAnnealingLR", "SGD", steps=10)[0]
    assert flat(lrs) == pytest.approx(flat([[0.001 + (b - 0.001) * (1 + math.cos(
        math.pi * e / 10)) / 2 for b in base] for e in range(11)]), rel=1e-12)
    lrs = run(em, "LinearLR", "SGD")[0]
    f = [0.25 + (0.9 - 0.25) * min(e, 8) / 8 for e in range(31)]
    assert flat(lrs) == pytest.approx(flat([[b * x for b in base] for x in f]), rel=1e-12)
    lrs = run(em, "SequentialLR-warmup", "SGD", steps=25)[0]
    warm = [[b * (0.01 + 0.99 * e / 5) for b in base] for e in range(5)]
    cos = [[0.001 + (b - 0.001) * (1 + math.cos(math.pi * e / 20)) / 2 for b in base]
           for e in range(21)]
    assert flat(lrs) == pytest.approx(flat(warm + cos), rel=1e-12)


def test_warm_restarts_closed_form_and_fractional_epochs():
    o = make_opt()
    s = S.CosineAnnealingWarmRestarts(o, T_0=4, T_mult=2, eta_min=0.0)
    for epoch, t_cur, t_i in [(0, 0, 4), (2.5, 2.5, 4), (4, 0, 8), (7.25, 3.25, 8),
                              (12, 0, 16), (13, 1, 16)]:
        o.step()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            s.step(epoch)
        assert s.T_cur == pytest.approx(t_cur) and s.T_i == t_i
        assert s.get_last_lr()[0] == pytest.approx(0.1 * (1 + math.cos(math.pi * t_cur / t_i))
                                                   / 2)
    torch = pytest.importorskip("torch")
    to = make_opt("SGD", torch)
    ts = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(to, T_0=4, T_mult=2)
    eo = make_opt()
    es = S.CosineAnnealingWarmRestarts(eo, T_0=4, T_mult=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(25):
            to.step(), eo.step()
            ts.step(i / 3), es.step(i / 3)
            assert es.get_last_lr() == pytest.approx(ts.get_last_lr(), rel=1e-13)


PLATEAU = [1.0, 0.9, 0.8, 0.8, 0.8, 0.79995, 0.8, 0.81, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7, 0.6,
           0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.5, 0.5, 0.5, 0.5, 0.5]
PLATEAU_KW = [dict(patience=2), dict(patience=1, factor=0.5, cooldown=2, min_lr=0.004),
              dict(mode="max", patience=1, threshold=0.01, threshold_mode="abs"),
              dict(patience=0, threshold=0.2, min_lr=[0.01, 0.02], eps=1e-3)]


def _plateau_run(lib, kw):
    o = make_opt("SGD", lib)
    mod = S if lib is em else lib.optim.lr_scheduler
    s = mod.ReduceLROnPlateau(o, **kw)
    out = []
    for v in PLATEAU:
        o.step()
        s.step(v)
        out.append(list(s.get_last_lr()))
    return out, s


@pytest.mark.parametrize("i", range(len(PLATEAU_KW)))
def test_reduce_on_plateau_vs_torch(i):
    ours, s = _plateau_run(em, PLATEAU_KW[i])
    assert ours[-1] != ours[0]    # the sequence does trigger reductions
    torch = pytest.importorskip("torch")
    theirs, ts = _plateau_run(torch, PLATEAU_KW[i])
    assert flat(ours) == pytest.approx(flat(theirs), rel=1e-13)
    assert s.best == ts.best and s.num_bad_epochs == ts.num_bad_epochs


def test_reduce_on_plateau_formula():
    o = make_opt()
    s = S.ReduceLROnPlateau(o, patience=2, factor=0.5)
    lrs = []
    for v in [1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.5]:
        s.step(v)
        lrs.append(s.get_last_lr()[0])
    # 3 epochs without improvement -> halve; improvement resets; 3 more -> halve again
    assert lrs == pytest.approx([0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.05, 0.025])


@pytest.mark.parametrize("name", ["StepLR", "MultiStepLR", "CosineAnnealingLR", "WarmRestarts",
                                  "LambdaLR", "LinearLR", "OneCycleLR", "SequentialLR-warmup",
                                  "ChainedScheduler", "ConstantLR"])
def test_state_dict_round_trip(name):
    full = run(em, name, "SGD", steps=20)[0]
    _, _, o, s = run(em, name, "SGD", steps=9)
    osd = {"param_groups": o.state_dict()["param_groups"]}
    ssd = json.loads(json.dumps(s.state_dict()))   # scheduler state is plain, JSON-safe data
    o2 = make_opt()
    s2 = CASES[name](S, o2)
    o2.load_state_dict({"state": {}, "param_groups": osd["param_groups"]})
    s2.load_state_dict(ssd)
    lrs = [s2.get_last_lr()]
    for _ in range(11):
        o2.step()
        s2.step()
        lrs.append(s2.get_last_lr())
    assert lrs == full[9:]


def test_plateau_state_dict_round_trip():
    o = make_opt()
    s = S.ReduceLROnPlateau(o, patience=1, cooldown=1)
    for v in PLATEAU[:12]:
        s.step(v)
    sd = json.loads(json.dumps(s.state_dict()))
    o2 = make_opt()
    o2.load_state_dict({"state": {}, "param_groups": o.state_dict()["param_groups"]})
    s2 = S.ReduceLROnPlateau(o2)
    s2.load_state_dict(sd)
    for v in PLATEAU[12:]:
        s.step(v)
        s2.step(v)
        assert s.get_last_lr() == s2.get_last_lr()
    assert s2.patience == 1 and s2.best == s.best


def test_base_behaviour_initial_lr_and_resume():
    o = make_opt()
    s = S.StepLR(o, step_size=2)
    assert s.base_lrs == list(LRS) and s.last_epoch == 0
    assert [g["initial_lr"] for g in o.param_groups] == list(LRS)
    with pytest.raises(KeyError, match="initial_lr"):
        S.StepLR(make_opt(), step_size=2, last_epoch=3)
    s2 = S.StepLR(o, step_size=2, last_epoch=3)   # resuming: initial_lr is in the groups
    assert s2.last_epoch == 4
    with pytest.raises(TypeError, match="is not an Optimizer"):
        S.StepLR(object(), step_size=2)


def test_warnings():
    o = make_opt()
    s = S.ExponentialLR(o, gamma=0.5)
    with pytest.warns(UserWarning, match="before `optimizer.step\\(\\)`"):
        s.step()
    with pytest.warns(UserWarning, match="get_last_lr"):
        s.get_lr()
    o2 = make_opt()
    s2 = S.ExponentialLR(o2, gamma=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        o2.step()
        s2.step()

    class Custom(optim.Optimizer):   # a user optimizer overriding step() is seen too
        def __init__(self, params):
            super().__init__(params, dict(lr=0.1))

        def step(self, closure=None):
            return None
    o3 = Custom([em.zeros(1, requires_grad=True)])
    s3 = S.ExponentialLR(o3, gamma=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        o3.step()
        s3.step()
    assert s3.get_last_lr() == [0.05]


def test_errors():
    o = make_opt()
    with pytest.raises(ValueError, match="total_steps OR"):
        S.OneCycleLR(o, max_lr=1.0)
    with pytest.raises(ValueError, match="Tried to step"):
        s = S.OneCycleLR(make_opt(), max_lr=1.0, total_steps=2)
        for _ in range(3):
            s.optimizer.step()
            s.step()
    with pytest.raises(ValueError, match="momentum or beta1"):
        S.OneCycleLR(optim.Adagrad([em.zeros(1, requires_grad=True)]), max_lr=1.0,
                     total_steps=5)
    with pytest.raises(ValueError, match="Factor should be < 1.0"):
        S.ReduceLROnPlateau(o, factor=1.5)
    with pytest.raises(ValueError, match="unknown"):
        S.ReduceLROnPlateau(o, mode="avg")
    with pytest.raises(ValueError, match="number of milestones"):
        S.SequentialLR(o, [S.StepLR(o, 2), S.StepLR(o, 3)], milestones=[])
    with pytest.raises(ValueError, match="ReduceLROnPlateau"):
        S.SequentialLR(o, [S.ReduceLROnPlateau(o), S.StepLR(o, 3)], milestones=[2])
    with pytest.raises(ValueError, match="same optimizer"):
        S.ChainedScheduler([S.StepLR(o, 2), S.StepLR(make_opt(), 2)])
    with pytest.raises(ValueError, match="T_0"):
        S.CosineAnnealingWarmRestarts(o, T_0=0)
    with pytest.raises(ValueError, match="Expected 2 lr_lambdas"):
        S.LambdaLR(o, [lambda e: 1.0])
    with pytest.raises(ValueError, match="Starting multiplicative factor"):
        S.LinearLR(o, start_factor=0)
