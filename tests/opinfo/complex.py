"""OpInfos for complex tensors: the complex primitives (conj, real, imag, complex_abs,
view_as_real, view_as_complex, complex) and the holomorphic elementwise ops, matmul and sum
in complex64/complex128.

Gradients are checked in complex128 as pairs of reals (``gradcheck`` perturbs the real and
the imaginary part of each element), so they test PyTorch's convention: the gradient of a
real loss is ``dL/dRe + i dL/dIm``. Domains avoid the branch cut of log/sqrt (negative
real axis) and the zeros of ``|z|``; the references are NumPy's complex ufuncs.
"""
import numpy as np

import ember as em

from .core import OpInfo, Sample, binary_samples, rand, unary_samples

_C = ("complex64", "complex128")
_CX = dict(dtypes=_C, grad_dtype="complex128",
           atol={"complex64": 1e-5, "complex128": 1e-10},
           rtol={"complex64": 1e-4, "complex128": 1e-8})


def _right_half(rng, dtype):
    """Values with real part in [0.5, 2]: away from 0 and from the negative real axis."""
    out = unary_samples(-2, 2)(rng, dtype)
    for s in out:
        a = s.args[0]
        s.args = (np.asarray(np.abs(a.real) % 1.5 + 0.5 + 1j * a.imag).astype(dtype),)
    return out


def _pairs(rng, dtype):
    """(..., 2) real tensors for view_as_complex."""
    shapes = [((4, 2), False), ((3, 5, 2), False), ((0, 2), False), ((3, 2), True),
              ((2, 2, 2), True)]
    return [Sample((rand(rng, s, dtype),), grad=g, name=str(s)) for s, g in shapes]


def _complex_samples(rng, dtype):
    pairs = [((4, 5), (4, 5)), ((4, 1), (1, 5)), ((0, 3), (3,)), ((), (3,))]
    grad_pairs = [((2, 3), (2, 3)), ((2, 1), (3,))]
    return ([Sample((rand(rng, a, dtype), rand(rng, b, dtype)), grad=False, name=f"{a}x{b}")
             for a, b in pairs] +
            [Sample((rand(rng, a, dtype), rand(rng, b, dtype)), name=f"grad{a}x{b}")
             for a, b in grad_pairs])


def _mm_samples(rng, dtype):
    cases = [((3, 4), (4, 2), True), ((2, 3, 4), (4, 5), True), ((4,), (4, 3), False),
             ((0, 4), (4, 2), False)]
    return [Sample((rand(rng, a, dtype), rand(rng, b, dtype)), grad=g, name=f"{a}@{b}")
            for a, b, g in cases]


def _to_complex(re, im):
    dt = np.result_type(re.dtype, np.complex64)
    return (re + 1j * im).astype(dt)


OPINFOS = [
    OpInfo("conj", em.conj, np.conj, unary_samples(), ("conj",), **_CX),
    OpInfo("real", lambda x: x.real, np.real, unary_samples(), ("real",), **_CX),
    OpInfo("imag", lambda x: x.imag, np.imag, unary_samples(), ("imag",), **_CX),
    OpInfo("abs_complex", em.abs, np.abs, _right_half, ("complex_abs",), **_CX),
    OpInfo("angle_complex", em.angle, np.angle, _right_half, ("atan2", "real", "imag"),
           **_CX),
    OpInfo("view_as_real", em.view_as_real, lambda a: np.stack([a.real, a.imag], -1),
           unary_samples(), ("view_as_real",), **_CX),
    OpInfo("view_as_complex", em.view_as_complex,
           lambda a: a.view(np.result_type(a.dtype, np.complex64))[..., 0], _pairs,
           ("view_as_complex",), noncontig=False),
    OpInfo("complex", em.complex, _to_complex, _complex_samples, ("complex",)),
    OpInfo("exp_complex", em.exp, np.exp, unary_samples(-1, 1), ("exp",), **_CX),
    OpInfo("log_complex", em.log, np.log, _right_half, ("log",), **_CX),
    OpInfo("sqrt_complex", em.sqrt, np.sqrt, _right_half, ("sqrt",), **_CX),
    OpInfo("sin_complex", em.sin, np.sin, unary_samples(-1, 1), ("sin",), **_CX),
    OpInfo("tanh_complex", em.tanh, np.tanh, unary_samples(-1, 1), ("tanh",), **_CX),
    OpInfo("sigmoid_complex", em.sigmoid, lambda a: 1 / (1 + np.exp(-a)),
           unary_samples(-1, 1), ("sigmoid",), **_CX),
    OpInfo("mul_complex", em.mul, np.multiply, binary_samples(scalars=(2.5, 1 - 2j)),
           ("mul",), **_CX),
    OpInfo("div_complex", em.div, np.divide, binary_samples(0.5, 2, scalars=(2.5, 1 - 2j)),
           ("div",), **_CX),
    OpInfo("pow_complex", em.pow, np.power, binary_samples(0.5, 2, -1, 1, scalars=(2, 0.5j)),
           ("pow",), **_CX),
    OpInfo("matmul_complex", em.matmul, np.matmul, _mm_samples, ("matmul",), **_CX),
    OpInfo("sum_complex", lambda x: x.sum(-1), lambda a: a.sum(-1), unary_samples(),
           ("sum",), **_CX),
]
