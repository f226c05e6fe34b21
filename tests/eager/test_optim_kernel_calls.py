"""The update loops' call path reuses the converted scalars while they repeat: a change
that only flips the sign of a zero scalar must still reach the kernel (same bits as the
NumPy passes)."""
import numpy as np
import pytest

import ember
from ember.codegen import optim_kernels


def _signbits_after(lrs, enabled):
    prev = optim_kernels.set_enabled(enabled)
    try:
        p = ember.nn.Parameter(ember.tensor(np.array([-0.0, -0.0, 2.0], np.float32)))
        opt = ember.optim.SGD([p], lr=lrs[0])
        out = []
        for lr in lrs:
            opt.param_groups[0]["lr"] = lr
            p.grad = ember.tensor(np.array([1.0, 3.0, 1.0], np.float32))
            runs = optim_kernels.stats["runs"]
            opt.step()
            assert (optim_kernels.stats["runs"] > runs) == (
                enabled and optim_kernels.kernels() is not None)
            out.append(np.signbit(p.detach().numpy()).tolist() + p.detach().numpy().tolist())
        return out
    finally:
        optim_kernels.set_enabled(prev)


def test_zero_scalar_sign_change_reaches_the_kernel():
    if optim_kernels.kernels() is None:
        pytest.skip("no C compiler: the NumPy passes run (nothing cached to test)")
    lrs = [0.0, 0.0, -0.0, 0.5, 0.5]
    got = _signbits_after(lrs, True)
    ref = _signbits_after(lrs, False)
    assert got == ref
    assert got[1][0] and not got[2][0]    # -0 + -0 stays -0; -0 + +0 is +0


def test_same_helper():
    same = optim_kernels._same
    assert same((0.0, 1.0), (0.0, 1.0)) and same((1, 2.0), (1.0, 2))
    assert not same((0.0, 1.0), (-0.0, 1.0))
    assert not same((float("nan"),), (float("nan"),))
    assert not same((0.1,), None) and not same((0.1, 0.2), (0.1, 0.3))
