"""Optimizer hooks with PyTorch's names and calling conventions: step pre/post hooks (per
optimizer and global, a pre-hook replacing the arguments, once per step even through
``super().step()``), ``state_dict``/``load_state_dict`` pre/post hooks (a returned dict
replaces the result or what is loaded), handles that remove them."""
import pytest

import ember as em
from ember.optim.optimizer import (register_optimizer_step_post_hook,
                                   register_optimizer_step_pre_hook)


def _opt(cls=em.optim.SGD, **kw):
    p = em.nn.Parameter(em.tensor([1.0, 2.0]))
    p.grad = em.tensor([1.0, 1.0])
    return p, cls([p], lr=0.5, **kw)


def test_step_hooks_run_around_the_step_in_order():
    p, opt = _opt()
    calls = []
    h1 = opt.register_step_pre_hook(lambda o, a, k: calls.append(("pre", o is opt,
                                                                  a[0] is opt)))
    opt.register_step_post_hook(lambda o, a, k: calls.append(("post", p.tolist())))
    g = register_optimizer_step_pre_hook(lambda o, a, k: calls.append(("global-pre",)))
    try:
        opt.step()
    finally:
        g.remove()
    assert calls == [("global-pre",), ("pre", True, True), ("post", [0.5, 1.5])]
    h1.remove()
    calls.clear()
    opt.step()
    assert calls == [("post", [0.0, 1.0])]


def test_a_pre_hook_may_replace_the_arguments():
    p, opt = _opt(em.optim.LBFGS)
    seen = []

    def closure():
        seen.append(1)
        opt.zero_grad()
        loss = (p * p).sum()
        loss.backward()
        return loss
    opt.register_step_pre_hook(lambda o, a, k: ((a[0],), {"closure": closure}))
    opt.step(lambda: pytest.fail("the hook's closure should run instead"))
    assert seen
    opt.register_step_pre_hook(lambda o, a, k: "bad")
    with pytest.raises(RuntimeError, match="must return None or a tuple"):
        opt.step(closure)


def test_global_post_hook_and_subclass_super_step_run_once():
    class Logged(em.optim.SGD):
        def step(self, closure=None):
            return super().step(closure)

    p, opt = _opt(Logged)
    n = []
    h = register_optimizer_step_post_hook(lambda o, a, k: n.append(type(o).__name__))
    try:
        opt.step()
    finally:
        h.remove()
    opt.step()
    assert n == ["Logged"]


def test_state_dict_hooks():
    p, opt = _opt(em.optim.Adam)
    opt.step()
    log = []
    opt.register_state_dict_pre_hook(lambda o: log.append("pre"))
    opt.register_state_dict_post_hook(lambda o, sd: {**sd, "extra": 1})
    sd = opt.state_dict()
    assert log == ["pre"] and sd["extra"] == 1

    def lower_lr(o, sd):
        sd = {**sd, "param_groups": [dict(g, lr=0.125) for g in sd["param_groups"]]}
        return sd
    p2, opt2 = _opt(em.optim.Adam)
    opt2.register_load_state_dict_pre_hook(lower_lr)
    opt2.register_load_state_dict_post_hook(lambda o: log.append("loaded"))
    with opt2.register_load_state_dict_post_hook(lambda o: log.append("first"),
                                                 prepend=True):
        opt2.load_state_dict(sd)
    assert opt2.param_groups[0]["lr"] == 0.125 and log == ["pre", "first", "loaded"]
    opt2.load_state_dict(sd)
    assert log == ["pre", "first", "loaded", "loaded"]
