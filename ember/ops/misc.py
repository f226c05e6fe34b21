"""Random in-place fills, and the public face of :mod:`ember._repr` (print options).

``Tensor.uniform_``, ``normal_``, ``bernoulli_``, ``random_`` and ``exponential_`` are
what ``nn.init`` and dropout-style code call under ``no_grad``.

They overwrite the tensor's memory with fresh samples (views write through to their
base) and bump its version counter; like PyTorch they refuse leaf tensors that require
grad unless autograd is off.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as _dt
from .._repr import get_printoptions, printoptions, set_printoptions
from ..autograd.grad_mode import state
from ..device import get_backend
from ..errors import DTypeError
from ..random import _for_device, _gen, _normal01, _sampling, _uniform01
from ..tensor import Tensor
from .inplace import check_inplace

__all__ = ["set_printoptions", "get_printoptions", "printoptions"]


def _write(self: Tensor, draw, op: str, inputs=(), into=None) -> Tensor:
    """Fill ``self`` with ``draw(*input arrays)``; under a tracer, a random node + write.
    ``into(out)``, where given, draws the same numbers straight into a C-contiguous float
    CPU array ``out`` (no temporary to allocate, fault in and copy)."""
    check_inplace(self, op)
    if self._device.type == "meta":      # NOTE: nothing to fill, nothing drawn (PyTorch)
        self._storage.version += 1
        return self
    d = self._data
    if (into is not None and not state.modes and self._device.type == "cpu" and
            d.__class__ is np.ndarray and d.flags.c_contiguous and d.flags.writeable):
        into(d)
        self._storage.version += 1
        if state.grad_enabled and self._requires_grad:
            self._grad_fn, self._requires_grad = None, False
        return self
    be = get_backend(self._device)
    draw = _for_device(self._device, draw)   # NOTE: a cuda tensor draws from its device's generator
    arr = draw(*(x._data if x._device.type == "cpu" else get_backend(x._device).to_host(x._data)
                 for x in inputs))
    if not (state.modes and getattr(state.modes[-1], "abstract", False)):  # estimate_memory
        self._data[...] = arr if be.has("host_memory") else be.asarray(arr)
    self._storage.version += 1
    if state.modes and hasattr(state.modes[-1], "random"):
        from ..tensor import _wrap
        r = _wrap(arr, self._dtype, self._device)
        state.modes[-1].random(r, draw, inputs, op)
        state.modes[-1].on_write(self, r)
    if state.grad_enabled and self._requires_grad:  # a non-leaf loses its history (as fill_)
        self._grad_fn, self._requires_grad = None, False
    return self


def _real_view(self: Tensor) -> Tensor:
    from .complex import view_as_real
    return view_as_real(self)


def _need_float(self: Tensor, op: str) -> _dt.DType:
    if not self._dtype.is_floating_point:
        raise DTypeError(f"{op}: expected a floating point tensor, got {self._dtype}")
    return self._dtype


def _affine(x, ct, scale, shift, dt):
    """``x * scale + shift`` computed in ``ct`` and returned in ``dt``: in place on the fresh
    draw (the same roundings as the out-of-place expression, without its copies: half of a
    model's initialisation time went to them)."""
    x = np.asarray(x, dtype=ct)        # NOTE: a 0-d draw comes back as a NumPy scalar
    np.multiply(x, ct.type(scale), out=x)
    np.add(x, ct.type(shift), out=x)
    return x.astype(dt.np, copy=False)


def _into(fill, ct, dt, scale, shift):
    """:func:`_write`'s in-place draw for float32/float64 (None for the half types, whose
    draws go through float32): ``fill(out)`` then ``out * scale + shift`` in place."""
    if ct != dt.np:
        return None

    def into(out):
        fill(out)
        np.multiply(out, ct.type(scale), out=out)
        np.add(out, ct.type(shift), out=out)
    return into


def uniform_(self: Tensor, a: float = 0.0, b: float = 1.0, *, generator=None,
             **kw) -> Tensor:
    """Fill with samples from U[a, b) (``from``/``to`` keywords also accepted).

    Example:
        >>> w = ember.empty(3).uniform_(-1, 1)
    """
    a, b = kw.pop("from", a), kw.pop("to", b)
    if kw:
        raise TypeError(f"uniform_(): unexpected keyword arguments {sorted(kw)}")
    if self._dtype.is_complex:   # NOTE: PyTorch: each part U[a, b), through view_as_real
        _real_view(self).uniform_(a, b, generator=generator)
        return self
    dt = _need_float(self, "uniform_")
    if not a <= b:
        raise ValueError(f"uniform_ expects to return a [from, to) range, but found "
                         f"from={a} > to={b}")
    shape = tuple(self.shape)
    ct = dt.np if dt in (_dt.float32, _dt.float64) else np.dtype(np.float32)
    return _write(self, _sampling(lambda: _affine(_uniform01(_gen(generator), shape, dt), ct,
                                                  b - a, a, dt),
                                  "uniform", generator, a, b - a), "uniform_",
                  into=_into(lambda out: _gen(generator).random(dtype=ct, out=out), ct, dt,
                             b - a, a))


def normal_(self: Tensor, mean: float = 0.0, std: float = 1.0, *, generator=None) -> Tensor:
    """Fill with samples from N(mean, std²).

    Example:
        >>> w = ember.empty(2, 2).normal_(0.0, 0.02)
    """
    if std < 0:
        raise ValueError(f"normal_ expects std >= 0.0, but found std {std}")
    if self._dtype.is_complex:   # NOTE: PyTorch: each part N(mean, std²/2) (E|z-m|² = std²)
        _real_view(self).normal_(mean, std * 0.5 ** 0.5, generator=generator)
        return self
    dt = _need_float(self, "normal_")
    shape = tuple(self.shape)
    ct = dt.np if dt in (_dt.float32, _dt.float64) else np.dtype(np.float32)
    return _write(self, _sampling(lambda: _affine(_normal01(_gen(generator), shape, dt), ct,
                                                  std, mean, dt),
                                  "normal", generator, mean, std), "normal_",
                  into=_into(lambda out: _gen(generator).standard_normal(dtype=ct, out=out),
                             ct, dt, std, mean))


def bernoulli_(self: Tensor, p=0.5, *, generator=None) -> Tensor:
    """Fill with 0/1 samples that are 1 with probability ``p`` (a number or tensor)."""
    shape, odt = tuple(self.shape), self._dtype.np
    if isinstance(p, Tensor):
        if not state.modes and np.any((p._data < 0) | (p._data > 1)):
            raise ValueError("bernoulli_: expects all probabilities p to be in [0, 1]")
        return _write(self, _sampling(lambda pr: (_uniform01(_gen(generator), shape,
                                                             _dt.float64) < pr).astype(odt),
                                      "bernoulli", generator), "bernoulli_", (p.detach(),))
    if np.any((np.asarray(p) < 0) | (np.asarray(p) > 1)):
        raise ValueError("bernoulli_: expects all probabilities p to be in [0, 1]")
    return _write(self, _sampling(lambda: (_uniform01(_gen(generator), shape, _dt.float64) <
                                           p).astype(odt), "bernoulli", generator, p),
                  "bernoulli_")


def random_(self: Tensor, *args, generator=None, **kw) -> Tensor:
    """Fill with integers uniform on [from, to): ``random_()``, ``random_(to)``,
    ``random_(from, to)``; with no bound, [0, 2**mantissa] for floats and [0, max] for ints."""
    args = args + tuple(kw.pop(k) for k in ("from", "to") if k in kw)
    if kw:
        raise TypeError(f"random_(): unexpected keyword arguments {sorted(kw)}")
    dt = self._dtype
    if not args:
        hi = (1 << (np.finfo(dt.np).nmant + 1 if dt is not _dt.bfloat16 else 8)) + 1 \
            if dt.is_floating_point else (2 if dt is _dt.bool_ else int(np.iinfo(dt.np).max) + 1)
        lo = 0
    else:
        lo, hi = (0, args[0]) if len(args) == 1 else args[:2]
    lo, hi = int(lo), int(hi)
    if lo >= hi:
        raise ValueError(f"random_ expects 'from' to be less than 'to', but got from={lo} >= "
                         f"to={hi}")
    shape = tuple(self.shape)
    return _write(self, _sampling(lambda: _gen(generator).integers(lo, hi, shape, dtype=np.int64)
                                  .astype(dt.np), "randint", generator, lo, hi), "random_")


def exponential_(self: Tensor, lambd: float = 1.0, *, generator=None) -> Tensor:
    """Fill with samples from the exponential distribution with rate ``lambd``."""
    dt = _need_float(self, "exponential_")
    if not lambd > 0:
        raise ValueError(f"exponential_ expects lambda > 0.0, but found lambda={lambd}")
    ct = dt.np if dt in (_dt.float32, _dt.float64) else np.dtype(np.float32)
    shape = tuple(self.shape)
    return _write(self, lambda: (_gen(generator).standard_exponential(shape, dtype=ct) /
                                 ct.type(lambd)).astype(dt.np), "exponential_")


Tensor.uniform_ = uniform_
Tensor.normal_ = normal_
Tensor.bernoulli_ = bernoulli_
Tensor.random_ = random_
Tensor.exponential_ = exponential_
