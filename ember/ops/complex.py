"""Complex numbers: real/imag views, conj, abs, angle, polar, view_as_real/view_as_complex.

Autograd follows PyTorch's convention: for a real loss ``L`` of a complex ``z`` the gradient
is the conjugate Wirtinger derivative ``dL/dRe(z) + i dL/dIm(z)``; a holomorphic op's VJP
multiplies by the conjugate of its derivative (``g * conj(f'(z))``, see :func:`cj`) and its
JVP by the derivative itself. Where a real input meets a complex gradient the engine keeps
the real part (PyTorch's ``handle_r_to_c``).

Example:
    >>> z = ember.tensor([3 + 4j], requires_grad=True)
    >>> z.abs().sum().backward()
    >>> z.grad                      # z / |z|
    tensor([0.6000+0.8000j])
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes as _dt
from ..errors import DTypeError, ShapeError, describe
from ..tensor import Tensor
from . import dispatch
from .dispatch import autocast_entry
from .registry import defop

__all__ = ["real", "imag", "conj", "conj_physical", "resolve_conj", "is_conj", "angle",
           "polar", "view_as_real", "view_as_complex", "complex", "sgn", "isreal"]

_apply = dispatch.apply
_NOPARAMS: dict = {}


def cj(v):
    """``conj(v)`` for a tensor or Python number; real values come back unchanged (so real
    programs pay one attribute test in the VJPs that call this)."""
    if v.__class__ is Tensor or isinstance(v, Tensor):
        return _apply(conj_p, (v,), _NOPARAMS) if v._dtype.is_complex else v
    if isinstance(v, (_dt.builtins_complex, np.complexfloating)):
        return v.conjugate()
    return v


def _no_order(name: str, dt) -> DTypeError:
    return DTypeError(
        f"{name}: not implemented for complex dtype "
        f"{_dt.as_dtype(dt).name if dt is not None else 'complex'} (complex numbers "
        f"have no order; PyTorch refuses it too); valid dtypes: bool, integer and "
        f"floating; use .real or .abs() first")


def real_only(name: str, kernel):
    """``kernel`` that refuses complex arrays as PyTorch does (comparisons, max/min, clamp,
    floor, relu...: complex numbers have no order)."""
    def checked(xp, *arrays, **params):
        # NOTE: one dtype read per array (a NumPy complex scalar has a dtype too); no
        # **params on the kernel call when there are none: this wrapper is on relu's and
        # the comparisons' eager hot path
        for a in arrays:
            dt = getattr(a, "dtype", None)
            if dt is None:
                if isinstance(a, _dt.builtins_complex):
                    raise _no_order(name, None)
            elif dt.kind == "c":
                raise _no_order(name, dt)
        return kernel(xp, *arrays, **params) if params else kernel(xp, *arrays)
    checked.__name__ = getattr(kernel, "__name__", name)
    return checked


# ------------------------------------------------------------------ rules
def _real_rule(x, **_):
    return None, x._dtype.to_real()


def _complex_rule(x, **_):
    return None, x._dtype.to_complex()


def _pair_rule(re, im):
    if not isinstance(re, Tensor) or not isinstance(im, Tensor):
        raise TypeError(f"complex(): expected both real and imag to be tensors, got "
                        f"{describe((re, im))}")
    if re._dtype is not im._dtype or re._dtype not in (_dt.float32, _dt.float64):
        raise DTypeError(f"complex(): expected real and imag to have the same floating dtype "
                         f"(float32 or float64), got {describe((re, im))}")
    return None, re._dtype.to_complex()


def _as_complex_check(x):
    d = x._data
    if x._dtype not in (_dt.float32, _dt.float64):
        raise DTypeError(f"view_as_complex: expected a float32 or float64 tensor, got "
                         f"{describe((x,))}")
    if d.ndim == 0 or d.shape[-1] != 2:
        raise ShapeError(f"view_as_complex: tensor must have a last dimension of size 2, got "
                         f"shape {tuple(d.shape)}")
    if d.size == 0:
        return
    st = x.stride()
    if st[-1] != 1:
        raise ShapeError(f"view_as_complex: tensor must have a last dimension with stride 1, "
                         f"got strides {st}")
    if any(s % 2 for s, n in zip(st[:-1], d.shape[:-1]) if n > 1) or \
            x.storage_offset() % 2:
        raise ShapeError(f"view_as_complex: tensor must have a storage offset and all strides "
                         f"but the last divisible by 2, got offset {x.storage_offset()} and "
                         f"strides {x.stride()}")


def _as_real_check(x):
    if not x._dtype.is_complex:
        raise DTypeError(f"view_as_real is only supported for complex tensors, got "
                         f"{describe((x,))}")


def _complex_kernel(xp, re, im):
    out = xp.empty(np.broadcast_shapes(re.shape, im.shape),
                   np.result_type(re.dtype, np.complex64))
    out.real, out.imag = re, im
    return out


# ------------------------------------------------------------------ primitives
conj_p = defop(
    "conj", nin=1, elementwise=True, save=None, kernel=lambda xp, x: xp.conj(x),
    vjp=lambda g, out, x: (cj(g),), jvp="linear")
real_p = defop(
    "real", nin=1, view=True, save=None, dtype=_real_rule, kernel=lambda xp, x: x.real,
    batch="elementwise",
    shape=lambda s: s, vjp=lambda g, out, x: (g.to(x.dtype),), jvp="linear")
imag_p = defop(
    "imag", nin=1, view=True, save=None, dtype=_real_rule, kernel=lambda xp, x: x.imag,
    batch="elementwise",
    shape=lambda s: s, vjp=lambda g, out, x: (g.to(x.dtype) * 1j,), jvp="linear")
view_as_real_p = defop(
    "view_as_real", nin=1, view=True, save=None, dtype=_real_rule, check=_as_real_check,
    batch="front",
    kernel=lambda xp, x: x[..., None].view(x.real.dtype), shape=lambda s: (*s, 2),
    vjp=lambda g, out, x: (_apply(complex_p, (g[..., 0], g[..., 1]), _NOPARAMS),),
    jvp="linear")
view_as_complex_p = defop(
    "view_as_complex", nin=1, view=True, save=None, dtype=_complex_rule,
    batch="front",
    check=_as_complex_check, shape=lambda s: s[:-1],
    kernel=lambda xp, x: xp.ascontiguousarray(x).view(np.result_type(x.dtype, np.complex64))[
        ..., 0] if x.size == 0 else x.view(np.result_type(x.dtype, np.complex64))[..., 0],
    vjp=lambda g, out, x: (_apply(view_as_real_p, (g,), _NOPARAMS),),
    jvp=lambda t, out, x: _apply(complex_p, (t[0][..., 0], t[0][..., 1]), _NOPARAMS))
complex_p = defop(
    "complex", nin=2, elementwise=True, save=None, dtype=_pair_rule, kernel=_complex_kernel,
    vjp=(lambda g, out, re, im: real(g), lambda g, out, re, im: imag(g)),
    jvp=lambda t, out, re, im: _apply(complex_p, tuple(
        ti if ti is not None else x.detach() * 0 for ti, x in zip(t, (re, im))), _NOPARAMS))


def _abs_vjp(g, out, x):
    # NOTE: PyTorch's abs_backward: g * sgn(z), with sgn(0) = 0.
    return (g * _sgn_from(x, out),)


def _abs_jvp(t, out, x):
    return real(cj(_sgn_from(x, out)) * t[0])


def _sgn_from(x, out):
    from .select import where
    zero = out == 0   # NOTE: sgn(0) = 0 with zero gradient there, as PyTorch
    return where(zero, 0.0, x / where(zero, 1.0, out))


# NOTE: its own primitive (not abs's dtype rule) so real abs keeps the dispatcher's
# "promote" fast path and the fusion code generator's real-only expression.
complex_abs_p = defop(
    "complex_abs", nin=1, elementwise=True, save="both", dtype=_real_rule,
    kernel=lambda xp, x: xp.abs(x), vjp=_abs_vjp, jvp=_abs_jvp)


# ------------------------------------------------------------------ public functions
def real(input):
    """The real part: a view sharing ``input``'s storage (``torch.real``); a real tensor
    is returned as is.

    Example:
        >>> ember.real(ember.tensor([1 + 2j]))      # tensor([1.])
    """
    if not input._dtype.is_complex:
        return input
    return _apply(real_p, (input,), _NOPARAMS)


def imag(input):
    """The imaginary part: a writable view (``torch.imag``); refused for real tensors.

    Example:
        >>> ember.imag(ember.tensor([1 + 2j]))      # tensor([2.])
    """
    if not input._dtype.is_complex:
        raise DTypeError(f"imag is not implemented for tensors with non-complex dtypes "
                         f"(got {input._dtype.name})")
    return _apply(imag_p, (input,), _NOPARAMS)


def conj(input):
    """The complex conjugate (``torch.conj``); a real tensor is returned as is.

    Ember has no lazy conjugation bit: a complex result is a new tensor (``is_conj()`` is
    always False, ``resolve_conj`` the identity).

    Example:
        >>> ember.conj(ember.tensor([1 + 2j]))      # tensor([1.-2.j])
    """
    return cj(input)


def conj_physical(input):
    """``conj`` materialised (``torch.conj_physical``); Ember's ``conj`` already is."""
    return cj(input)


def resolve_conj(input):
    """``input``: Ember tensors never carry a lazy conjugation bit."""
    return input


def is_conj(input) -> bool:
    """False: Ember tensors carry no lazy conjugation bit (``torch.is_conj``)."""
    return False


def complex_abs(input):
    """``|z|`` of a complex tensor as a real tensor (``abs`` routes complex inputs here)."""
    return _apply(complex_abs_p, (input,), _NOPARAMS)


def angle(input):
    """The argument ``atan2(imag, real)`` (``torch.angle``); for real tensors ``pi`` where
    negative, ``0`` elsewhere, NaN kept. Gradients follow PyTorch (zero for real inputs).

    Example:
        >>> ember.angle(ember.tensor([1j, -1.]))    # tensor([1.5708, 3.1416])
    """
    from .binary import atan2
    from .select import where
    if input._dtype.is_complex:
        re, im = real(input), imag(input)
        zero = (re == 0) & (im == 0)
        # NOTE: PyTorch's gradient at 0 is 0 (atan2's would be nan); values stay atan2's
        # (angle(-0 + 0j) = pi)
        safe = atan2(where(zero, 0.0, im), where(zero, 1.0, re))
        return where(zero, atan2(im, re).detach(), safe)
    x = input if input._dtype.is_floating_point else input.to(_dt.get_default_dtype())
    return where(x < 0, math.pi, where(x.isnan(), x, 0.0 * x))


@autocast_entry("polar")
def polar(abs, angle):  # noqa: A002 - PyTorch's parameter names
    """``abs * (cos(angle) + i sin(angle))`` (``torch.polar``).

    Example:
        >>> ember.polar(ember.tensor([2.]), ember.tensor([0.]))   # tensor([2.+0.j])
    """
    return complex(abs * angle.cos(), abs * angle.sin())


def view_as_real(input):
    """A real view of shape ``(*input.shape, 2)`` (real, imag) (``torch.view_as_real``)."""
    return _apply(view_as_real_p, (input,), _NOPARAMS)


@autocast_entry("view_as_complex")
def view_as_complex(input):
    """A complex view of a float tensor whose last dim is 2 with stride 1
    (``torch.view_as_complex``)."""
    return _apply(view_as_complex_p, (input,), _NOPARAMS)


def complex(real, imag, *, out=None):  # noqa: A001 - PyTorch name
    """``real + i imag`` from two float tensors of one dtype (``torch.complex``).

    Example:
        >>> ember.complex(ember.tensor([1.]), ember.tensor([2.]))   # tensor([1.+2.j])
    """
    r = _apply(complex_p, (real, imag), _NOPARAMS)
    if out is None:
        return r
    from .inplace import copy_into_out
    return copy_into_out(out, r)


def sgn(input, *, out=None):
    """``z / |z|`` (0 at 0) for complex tensors, ``sign`` for real ones (``torch.sgn``)."""
    if input._dtype.is_complex:
        r = _sgn_from(input, complex_abs(input))
    else:
        r = input.sign()
    if out is None:
        return r
    from .inplace import copy_into_out
    return copy_into_out(out, r)


def isreal(input):
    """True where the imaginary part is 0; everywhere for real tensors (``torch.isreal``)."""
    if input._dtype.is_complex:
        return imag(input) == 0
    from .factories import ones
    return ones(input.shape, dtype=_dt.bool_)


def _set_part(part):
    def setter(self, value):
        part(self).copy_(value)
    return setter


for _name in ("conj", "conj_physical", "resolve_conj", "is_conj", "angle", "sgn", "isreal"):
    setattr(Tensor, _name, globals()[_name])
REAL_PROPERTY = Tensor.real = property(real, _set_part(real))
IMAG_PROPERTY = Tensor.imag = property(imag, _set_part(imag))
Tensor.is_complex = lambda self: self._dtype.is_complex
Tensor.__complex__ = lambda self: _dt.builtins_complex(self.item())
