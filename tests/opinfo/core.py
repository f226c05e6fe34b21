"""OpInfo: one test-table entry per public op; the generated tests read these.

An entry names the Ember callable, a NumPy reference, a sample generator and the
registry primitives it exercises. ``tests/test_ops_generated.py`` turns every entry
into forward-vs-NumPy checks (float32/float64, broadcasting, non-contiguous views,
zero-size dims), VJP and JVP checks against central differences in float64, the
inner-product identity <t, vjp(c)> == <jvp(t), c>, and second-order checks.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np


@dataclass
class Sample:
    """Positional args (NumPy arrays become tensors; anything else passes through)."""

    args: tuple
    kwargs: dict = field(default_factory=dict)
    grad: bool = True          # small enough and smooth enough for gradcheck
    name: str = ""


@dataclass
class OpInfo:
    name: str
    fn: Callable                       # ember callable taking tensors / scalars
    ref: Callable                      # NumPy reference taking arrays / scalars
    samples: Callable                  # (rng, np_dtype) -> list[Sample]
    primitives: tuple = ()             # registry op names this entry exercises
    dtypes: tuple = ("float32", "float64")
    grad: bool = True                  # differentiable: run VJP/JVP checks
    gradgrad: bool = True              # run second-order check
    jvp: bool = True                   # run forward-mode check
    noncontig: bool = True             # also run on non-contiguous views
    atol: dict = field(default_factory=lambda: {"float32": 1e-5, "float64": 1e-10})
    rtol: dict = field(default_factory=lambda: {"float32": 1e-4, "float64": 1e-8})
    grad_dtype: str = "float64"        # dtype of the gradient samples (complex128 for complex)
    grad_atol: float = 1e-5
    grad_rtol: float = 1e-3
    exact_dtype: bool = True           # output dtype must equal the reference's (mapped)
    out_index: int | None = None       # for tuple outputs: which one to check (None: all)

    def __repr__(self) -> str:
        return self.name


def to_tensors(args, make=lambda a: a, device="cpu", requires_grad=False) -> list:
    """A sample's arguments with each NumPy array as a tensor on ``device`` (``make``
    applied to a copy first; floating and complex ones requiring grad when asked)."""
    import ember as em
    out = []
    for a in args:
        if isinstance(a, np.ndarray):
            t = em.from_numpy(make(a.copy()))
            if device != "cpu":
                t = t.to(device)
            if requires_grad and t.dtype.is_inexact:
                t.requires_grad_(True)
            out.append(t)
        else:
            out.append(a)
    return out


def rand(rng, shape, dtype, lo=-2.0, hi=2.0):
    """Uniform values in [lo, hi) of ``dtype`` (ints: integers in that range)."""
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return np.asarray(rng.random(shape) < 0.5)
    if dt.kind in "iu":
        return rng.integers(int(lo), int(hi) + 1, size=shape).astype(dt)
    if dt.kind == "c":   # real and imaginary parts each uniform in [lo, hi)
        return np.asarray(rng.uniform(lo, hi, size=shape) + 1j * rng.uniform(lo, hi, size=shape)
                          ).astype(dt)
    return rng.uniform(lo, hi, size=shape).astype(dt)


def noncontiguous(a: np.ndarray) -> np.ndarray:
    """Same values, but a non-contiguous strided view (every other element of a bigger array)."""
    if a.ndim == 0 or a.size == 0:
        return a
    big = np.zeros(a.shape[:-1] + (a.shape[-1] * 2,), dtype=a.dtype)
    v = big[..., ::2]
    v[...] = a
    return v


def unary_samples(lo=-2.0, hi=2.0, grad_shapes=((3,), (2, 3)), shapes=((5, 7), (4,), (),
                  (2, 3, 4), (0, 3))):
    """Sample generator for elementwise unary ops over a value domain."""
    def gen(rng, dtype):
        out = [Sample((rand(rng, s, dtype, lo, hi),), grad=False, name=str(s)) for s in shapes]
        out += [Sample((rand(rng, s, dtype, lo, hi),), name=f"grad{s}") for s in grad_shapes]
        return out
    return gen


def binary_samples(lo=-2.0, hi=2.0, lo2=None, hi2=None, scalars=(2.5, -3)):
    """Sample generator for elementwise binary ops: same shapes, broadcasting, scalars."""
    lo2 = lo if lo2 is None else lo2
    hi2 = hi if hi2 is None else hi2
    pairs = [((4, 5), (4, 5)), ((4, 1), (1, 5)), ((3, 4, 5), (5,)), ((), (3,)), ((0, 3), (3,)),
             ((2, 1, 3), (4, 1))]
    grad_pairs = [((2, 3), (2, 3)), ((2, 1), (3,)), ((), (2,))]

    def gen(rng, dtype):
        out = [Sample((rand(rng, a, dtype, lo, hi), rand(rng, b, dtype, lo2, hi2)), grad=False,
                      name=f"{a}x{b}") for a, b in pairs]
        out += [Sample((rand(rng, a, dtype, lo, hi), rand(rng, b, dtype, lo2, hi2)),
                       name=f"grad{a}x{b}") for a, b in grad_pairs]
        for s in scalars:
            out.append(Sample((rand(rng, (2, 3), dtype, lo, hi), s), name=f"scalar{s}"))
        return out
    return gen
