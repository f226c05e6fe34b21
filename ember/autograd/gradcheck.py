"""Numerical gradient checks: compare autograd against central differences in float64.

``gradcheck`` checks reverse mode (VJP) and, unless disabled, forward mode (JVP)
column by column against ``(f(x + eps*e_i) - f(x - eps*e_i)) / (2*eps)``.
``gradgradcheck`` applies the same test to the gradient function itself.

Example:
    >>> x = ember.randn(3, dtype=ember.float64, requires_grad=True)
    >>> ember.autograd.gradcheck(lambda x: (x * x.sin()).sum(), (x,))
    True
"""
from __future__ import annotations

import numpy as np

from ..tensor import Tensor
from .grad_mode import enable_grad, no_grad


class GradcheckError(AssertionError):
    """Analytical and numerical derivatives disagree."""


def _as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def _diff_inputs(inputs):
    return [i for i, x in enumerate(inputs) if isinstance(x, Tensor) and x.requires_grad]


def _flat_outputs(fn, inputs):
    outs = _as_tuple(fn(*inputs))
    return [o for o in outs if isinstance(o, Tensor) and o.dtype.is_floating_point]


def numerical_jacobian(fn, inputs, eps=1e-6):
    """List over differentiable inputs of arrays ``J[out_flat, in_flat]`` per output."""
    idx = _diff_inputs(inputs)
    with no_grad():
        outs = _flat_outputs(fn, inputs)
        jac = [[np.zeros((o.numel(), inputs[i].numel())) for i in idx] for o in outs]
        for k, i in enumerate(idx):
            x = inputs[i]
            flat = x._data.reshape(-1) if x._data.flags.c_contiguous else None
            if flat is None:
                raise ValueError("gradcheck: inputs must be contiguous")
            for j in range(flat.size):
                orig = flat[j].item()
                flat[j] = orig + eps
                plus = [o.detach()._data.astype(np.float64).copy() for o in
                        _flat_outputs(fn, inputs)]
                flat[j] = orig - eps
                minus = [o.detach()._data.astype(np.float64).copy() for o in
                         _flat_outputs(fn, inputs)]
                flat[j] = orig
                for m in range(len(outs)):
                    jac[m][k][:, j] = ((plus[m] - minus[m]) / (2 * eps)).reshape(-1)
    return jac


def _analytical_vjp(fn, inputs, create_graph=False):
    from .engine import grad
    from ..ops.factories import zeros_like
    idx = _diff_inputs(inputs)
    outs = _flat_outputs(fn, inputs)
    jac = [[np.zeros((o.numel(), inputs[i].numel())) for i in idx] for o in outs]
    for m, o in enumerate(outs):
        if not o.requires_grad:
            continue
        for r in range(o.numel()):
            g = zeros_like(o)
            g._data.reshape(-1)[r] = 1
            gs = grad([o], [inputs[i] for i in idx], [g], retain_graph=True,
                      allow_unused=True)
            for k, gi in enumerate(gs):
                if gi is not None:
                    jac[m][k][r, :] = gi._data.astype(np.float64).reshape(-1)
    return jac


def _analytical_jvp(fn, inputs):
    from . import forward_ad as fwad
    from ..ops.factories import zeros_like
    idx = _diff_inputs(inputs)
    with no_grad():
        outs = _flat_outputs(fn, inputs)
    jac = [[np.zeros((o.numel(), inputs[i].numel())) for i in idx] for o in outs]
    for k, i in enumerate(idx):
        for c in range(inputs[i].numel()):
            with fwad.dual_level():
                duals = list(inputs)
                t = zeros_like(inputs[i])
                t._data.reshape(-1)[c] = 1
                duals[i] = fwad.make_dual(inputs[i].detach(), t)
                for j in idx:
                    if j != i:
                        duals[j] = inputs[j].detach()
                res = _flat_outputs(fn, duals)
                for m, o in enumerate(res):
                    tan = fwad.unpack_dual(o).tangent
                    if tan is not None:
                        jac[m][k][:, c] = tan._data.astype(np.float64).reshape(-1)
    return jac


def _compare(kind, ana, num, atol, rtol, idx):
    for m, (arow, nrow) in enumerate(zip(ana, num)):
        for k, (a, n) in enumerate(zip(arow, nrow)):
            if not np.allclose(a, n, atol=atol, rtol=rtol):
                err = np.abs(a - n).max()
                raise GradcheckError(
                    f"gradcheck: {kind} Jacobian mismatch for output {m} with respect to input "
                    f"{idx[k]} (max abs error {err:.3g}, atol={atol}, rtol={rtol})\n"
                    f"numerical:\n{n}\nanalytical:\n{a}")


def gradcheck(fn, inputs, *, eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3,
              raise_exception: bool = True, check_forward_ad: bool = True,
              check_backward_ad: bool = True, nondet_tol: float = 0.0) -> bool:
    """Check ``fn``'s VJP (and JVP) against central differences; inputs should be float64."""
    inputs = _as_tuple(inputs)
    idx = _diff_inputs(inputs)
    for i in idx:
        if inputs[i].dtype.name != "float64":
            import warnings
            warnings.warn(f"gradcheck: input {i} is {inputs[i].dtype}, not float64; the check "
                          f"may fail from rounding alone", stacklevel=2)
    try:
        num = numerical_jacobian(fn, inputs, eps)
        if check_backward_ad:
            _compare("reverse-mode", _analytical_vjp(fn, inputs), num, atol, rtol, idx)
        if check_forward_ad:
            _compare("forward-mode", _analytical_jvp(fn, inputs), num, atol, rtol, idx)
    except GradcheckError:
        if raise_exception:
            raise
        return False
    return True


def gradgradcheck(fn, inputs, grad_outputs=None, *, eps: float = 1e-6, atol: float = 1e-5,
                  rtol: float = 1e-3, raise_exception: bool = True,
                  check_fwd_over_rev: bool = False) -> bool:
    """Check second derivatives: gradcheck of ``x -> vjp(fn)(x, v)`` for a fixed random ``v``."""
    from .engine import grad
    from ..ops.factories import tensor
    inputs = _as_tuple(inputs)
    idx = _diff_inputs(inputs)
    outs = _flat_outputs(fn, inputs)
    rng = np.random.default_rng(0)
    if grad_outputs is None:
        grad_outputs = [tensor(rng.standard_normal(o.shape), dtype=o.dtype) for o in outs]
    grad_outputs = list(_as_tuple(grad_outputs)) if not isinstance(grad_outputs, list) \
        else grad_outputs

    def first(*xs):
        # NOTE: numerical_jacobian calls this under no_grad; the first derivative must
        # still be computed, so record the graph here regardless of the caller's mode.
        with enable_grad():
            os_ = _flat_outputs(fn, xs)
            pairs = [(o, g) for o, g in zip(os_, grad_outputs) if o.requires_grad]
            gs = grad([p[0] for p in pairs], [xs[i] for i in idx], [p[1] for p in pairs],
                      create_graph=True, allow_unused=True, materialize_grads=True)
        return tuple(gs)

    return gradcheck(first, inputs, eps=eps, atol=atol, rtol=rtol,
                     raise_exception=raise_exception, check_forward_ad=check_fwd_over_rev)
