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
