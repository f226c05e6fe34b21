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
    return [o for o in outs if isinstance(o, Tensor) and o.dtype.is_inexact]


# NOTE: complex values are checked as PyTorch does, as pairs of reals: a complex input gives
# two Jacobian columns per element (perturb the real part, then the imaginary part) and a
# complex output two rows (real part, imaginary part), interleaved. Reverse mode reads row
# (re u_r) from the gradient of cotangent 1 at r and row (im u_r) from cotangent 1j; with
# PyTorch's convention grad = dL/dRe + i dL/dIm, so the gradient's real and imaginary parts
# are the row's (re, im) columns.
def _dirs(t) -> tuple:
    return (1, 1j) if t.dtype.is_complex else (1,)


def _width(t) -> int:
    return t.numel() * len(_dirs(t))


def _real_vec(a) -> np.ndarray:
    """A host array as float64, complex values as interleaved (real, imag) pairs."""
    a = np.asarray(a)
    if a.dtype.kind == "c":
        return np.stack([a.real, a.imag], -1).astype(np.float64).reshape(-1)
    return a.astype(np.float64).reshape(-1)


def numerical_jacobian(fn, inputs, eps=1e-6):
    """List over outputs of lists over differentiable inputs of arrays ``J[out, in]``
    (complex inputs/outputs as interleaved real and imaginary parts)."""
    idx = _diff_inputs(inputs)
    with no_grad():
        outs = _flat_outputs(fn, inputs)
        jac = [[np.zeros((_width(o), _width(inputs[i]))) for i in idx] for o in outs]
        for k, i in enumerate(idx):
            x = inputs[i]
            data = x._data
            # NOTE: a strided input (a transpose, channels-last) is perturbed in place
            # through its own strides, element by element in row-major order
            flat = data.reshape(-1) if data.flags.c_contiguous else data
            dirs = _dirs(x)
            for j in range(data.size):
                at = j if flat is not data else np.unravel_index(j, data.shape)
                orig = flat[at].item()
                for p, d in enumerate(dirs):
                    flat[at] = orig + eps * d
                    plus = [_real_vec(o.detach()._data) for o in _flat_outputs(fn, inputs)]
                    flat[at] = orig - eps * d
                    minus = [_real_vec(o.detach()._data) for o in _flat_outputs(fn, inputs)]
                    flat[at] = orig
                    for m in range(len(outs)):
                        jac[m][k][:, j * len(dirs) + p] = (plus[m] - minus[m]) / (2 * eps)
    return jac


def _analytical_vjp(fn, inputs, create_graph=False):
    from .engine import grad
    from ..ops.factories import zeros_like
    from .._torch_globals import contiguous_format
    idx = _diff_inputs(inputs)
    outs = _flat_outputs(fn, inputs)
    jac = [[np.zeros((_width(o), _width(inputs[i]))) for i in idx] for o in outs]
    for m, o in enumerate(outs):
        if not o.requires_grad:
            continue
        dirs = _dirs(o)
        for r in range(o.numel()):
            for p, d in enumerate(dirs):
                g = zeros_like(o, memory_format=contiguous_format)  # NOTE: written flat
                g._data.reshape(-1)[r] = d
                gs = grad([o], [inputs[i] for i in idx], [g], retain_graph=True,
                          allow_unused=True)
                for k, gi in enumerate(gs):
                    if gi is not None:
                        jac[m][k][r * len(dirs) + p, :] = _real_vec(gi._data)
    return jac


def _analytical_jvp(fn, inputs):
    from . import forward_ad as fwad
    from ..ops.factories import zeros_like
    from .._torch_globals import contiguous_format
    idx = _diff_inputs(inputs)
    with no_grad():
        outs = _flat_outputs(fn, inputs)
    jac = [[np.zeros((_width(o), _width(inputs[i]))) for i in idx] for o in outs]
    for k, i in enumerate(idx):
        dirs = _dirs(inputs[i])
        for c in range(inputs[i].numel()):
            for p, d in enumerate(dirs):
                with fwad.dual_level():
                    duals = list(inputs)
                    t = zeros_like(inputs[i], memory_format=contiguous_format)
                    t._data.reshape(-1)[c] = d
                    duals[i] = fwad.make_dual(inputs[i].detach(), t)
                    for j in idx:
                        if j != i:
                            duals[j] = inputs[j].detach()
                    res = _flat_outputs(fn, duals)
                    for m, o in enumerate(res):
                        tan = fwad.unpack_dual(o).tangent
                        if tan is not None:
                            jac[m][k][:, c * len(dirs) + p] = _real_vec(tan._data)
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
    """Check ``fn``'s VJP (and JVP) against central differences; inputs should be float64
    or complex128 (complex values are checked as real and imaginary parts, as PyTorch's
    gradcheck does)."""
    inputs = _as_tuple(inputs)
    idx = _diff_inputs(inputs)
    for i in idx:
        if inputs[i].dtype.name not in ("float64", "complex128"):
            import warnings
            warnings.warn(f"gradcheck: input {i} is {inputs[i].dtype}, not float64 or "
                          f"complex128; the check "
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
        grad_outputs = [tensor(rng.standard_normal(o.shape) + (
            1j * rng.standard_normal(o.shape) if o.dtype.is_complex else 0), dtype=o.dtype)
            for o in outs]
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
