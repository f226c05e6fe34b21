"""Every optimizer (and its foreach/fused/capturable variants, LBFGS's line search) with an
LR schedule on the strict ``cuda`` stand-in: four steps leave the CPU's parameters (state
on the device, no host shortcut: ``ember/device/cuda_strict.py``). Plus the schedulers and
helpers that read device values: ``ReduceLROnPlateau`` given a cuda metric, SWA's
``AveragedModel``."""
import numpy as np
import pytest

import ember as em

O = em.optim
OPTS = {
    "SGD": lambda ps: O.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-2),
    "SGD-foreach": lambda ps: O.SGD(ps, lr=0.1, momentum=0.9, foreach=True),
    "Adam-amsgrad": lambda ps: O.Adam(ps, lr=1e-2, amsgrad=True),
    "Adam-foreach": lambda ps: O.Adam(ps, lr=1e-2, foreach=True),
    "Adam-fused": lambda ps: O.Adam(ps, lr=1e-2, fused=True),
    "AdamW": lambda ps: O.AdamW(ps, lr=1e-2),
    "AdamW-capturable": lambda ps: O.AdamW(ps, lr=1e-2, capturable=True),
    "Adamax": lambda ps: O.Adamax(ps, lr=1e-2),
    "NAdam": lambda ps: O.NAdam(ps, lr=1e-2, decoupled_weight_decay=True, weight_decay=0.1),
    "RAdam": lambda ps: O.RAdam(ps, lr=1e-2),
    "Adagrad": lambda ps: O.Adagrad(ps, lr=1e-1),
    "Adadelta": lambda ps: O.Adadelta(ps),
    "RMSprop": lambda ps: O.RMSprop(ps, lr=1e-2, centered=True, momentum=0.5),
    "Rprop": lambda ps: O.Rprop(ps, lr=1e-2),
    "ASGD": lambda ps: O.ASGD(ps, lr=1e-2),
    "LBFGS": lambda ps: O.LBFGS(ps, line_search_fn="strong_wolfe"),
}


def _train(dev, make):
    em.manual_seed(0)
    m = em.nn.Sequential(em.nn.Linear(4, 8), em.nn.Tanh(), em.nn.Linear(8, 2)).to(dev)
    opt = make(list(m.parameters()))
    sched = None if isinstance(opt, O.LBFGS) else O.lr_scheduler.OneCycleLR(
        opt, max_lr=0.05, total_steps=10, cycle_momentum=False)
    x = em.linspace(-1, 1, 24).reshape(6, 4).to(dev)

    def closure():
        opt.zero_grad()
        loss = m(x).square().mean()
        loss.backward()
        return loss
    for _ in range(4):
        opt.step(closure)
        if sched is not None:
            sched.step()
    em.nn.utils.clip_grad_norm_(m.parameters(), 0.1)
    state = [(k, v) for s in opt.state.values() for k, v in s.items()
             if isinstance(v, em.Tensor)]
    return [p.detach().cpu().numpy() for p in m.parameters()], state


@pytest.mark.parametrize("name", sorted(OPTS))
def test_optimizer_steps_on_the_device_match_cpu(fake_cuda, name):
    want, _ = _train("cpu", OPTS[name])
    got, state = _train("cuda", OPTS[name])
    # NOTE: step counts (and NAdam's mu_product) stay CPU scalars unless capturable/fused,
    # as in PyTorch
    assert state and all(v.device.type == "cuda" for k, v in state
                         if k not in ("step", "mu_product")), \
        [(k, v.device) for k, v in state]
    steps = {v.device.type for k, v in state if k == "step"}
    assert steps <= ({"cuda"} if "capturable" in name else {"cpu"}), steps
    for a, b in zip(want, got):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)


def test_plateau_scheduler_and_swa_take_device_values(fake_cuda):
    m = em.nn.Linear(2, 2).cuda()
    opt = O.SGD(m.parameters(), lr=0.1)
    s = O.lr_scheduler.ReduceLROnPlateau(opt, patience=0)
    for v in (1.0, 2.0, 3.0):                    # worse twice: lr 0.1 -> 0.01 -> 0.001
        s.step(em.tensor(v, device="cuda"))
    assert opt.param_groups[0]["lr"] == pytest.approx(1e-3)
    swa = O.swa_utils.AveragedModel(m)
    swa.update_parameters(m)
    assert all(p.device.type == "cuda" for p in swa.parameters())
    np.testing.assert_array_equal(swa.module.weight.detach().cpu().numpy(),
                                  m.weight.detach().cpu().numpy())


def test_capturable_step_counts_stay_on_the_device_through_a_state_dict(fake_cuda):
    w = em.nn.Parameter(em.ones(3, device="cuda"))
    opt = O.AdamW([w], lr=1e-2, capturable=True)
    w.grad = em.ones(3, device="cuda")
    opt.step()
    sd = opt.state_dict()
    sd["state"][0]["step"] = sd["state"][0]["step"].cpu()      # as saved from another run
    again = O.AdamW([w], lr=1e-2, capturable=True)
    again.load_state_dict(sd)
    plain = O.AdamW([w], lr=1e-2)
    sd["param_groups"][0]["capturable"] = False     # (the saved groups' flag is loaded)
    plain.load_state_dict(sd)
    assert again.state[w]["step"].device.type == "cuda"
    assert plain.state[w]["step"].device.type == "cpu"
    assert float(again.state[w]["step"]) == float(plain.state[w]["step"]) == 1.0
