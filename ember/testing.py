"""``ember.testing``: ``assert_close`` (PyTorch's closeness assertion, defaults and
messages) and ``make_tensor`` (random test inputs of any dtype, PyTorch's ranges).

Two tensors are close when ``|actual - expected| <= atol + rtol * |expected|`` elementwise
(NaNs equal only with ``equal_nan=True``), after their shapes, dtypes and devices were
checked to match. Omitted tolerances come from the dtypes (the larger of the two inputs'):

====================  =======  =====
dtype                 rtol     atol
====================  =======  =====
float16               1e-3     1e-5
bfloat16              1.6e-2   1e-5
float32               1.3e-6   1e-5
float64               1e-7     1e-7
integers, bool        0        0
====================  =======  =====

Python numbers count as float64 / int64; sequences and mappings are compared entry by
entry. A failure raises ``AssertionError`` with PyTorch's message shape::

    Tensor-likes are not close!

    Mismatched elements: 1 / 3 (33.3%)
    Greatest absolute difference: 0.5 at index (1,) (up to 1e-05 allowed)
    Greatest relative difference: 0.2 at index (1,) (up to 1.3e-06 allowed)

Example:
    >>> ember.testing.assert_close(ember.tensor([1.0, 2.0]), ember.tensor([1.0, 2.0 + 1e-7]))
"""
from __future__ import annotations

import collections.abc as abc
import numbers

import numpy as np

from . import dtypes as _dt
from .tensor import Tensor

__all__ = ["assert_close", "assert_allclose", "default_tolerances", "make_tensor"]

_PRECISIONS = {"float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5),
               "float32": (1.3e-6, 1e-5), "float64": (1e-7, 1e-7)}


def default_tolerances(*dtypes) -> tuple[float, float]:
    """``(rtol, atol)`` for comparing values of ``dtypes``: the largest of each."""
    pairs = [_PRECISIONS.get(d.name, (0.0, 0.0)) for d in dtypes]
    return max(p[0] for p in pairs), max(p[1] for p in pairs)


def _fail(msg: str, user_msg, path: str):
    if callable(user_msg):
        msg = user_msg(msg)
    elif user_msg is not None:
        msg = user_msg
    if path:
        msg += f"\n\nThe failure occurred for item {path}"
    raise AssertionError(msg)


def assert_close(actual, expected, *, allow_subclasses: bool = True, rtol=None, atol=None,
                 equal_nan: bool = False, check_device: bool = True, check_dtype: bool = True,
                 check_layout: bool = True, check_stride: bool = False, msg=None) -> None:
    """Assert that ``actual`` and ``expected`` are close (``torch.testing.assert_close``).

    Args:
        actual: a tensor, Python number, NumPy array, or a sequence/mapping of them.
        expected: the reference, of the same structure.
        rtol: relative tolerance; with ``atol`` both or neither (defaults: by dtype).
        atol: absolute tolerance.
        equal_nan: whether two NaNs count as equal.
        check_device: the two tensors must be on the same device.
        check_dtype: the two tensors must have the same dtype (else both are promoted).
        check_stride: the two tensors must have the same strides.
        msg: a replacement message, or a callable given the default message.

    Raises:
        AssertionError: the values (or shapes, dtypes, devices, structure) differ.
        ValueError: only one of ``rtol``/``atol`` was given.
    """
    if (rtol is None) != (atol is None):
        raise ValueError(f"Both 'rtol' and 'atol' must be either specified or omitted, "
                         f"but got no {'rtol' if rtol is None else 'atol'}.")
    opts = dict(rtol=rtol, atol=atol, equal_nan=equal_nan, check_device=check_device,
                check_dtype=check_dtype, check_stride=check_stride, msg=msg)
    _compare(actual, expected, "", opts)


def _compare(actual, expected, path: str, opts: dict) -> None:
    if isinstance(actual, abc.Mapping) and isinstance(expected, abc.Mapping):
        if set(actual) != set(expected):
            _fail(f"The keys of the mappings do not match:\nactual: {sorted(map(str, actual))}"
                  f"\nexpected: {sorted(map(str, expected))}", opts["msg"], path)
        for k in actual:
            _compare(actual[k], expected[k], f"{path}[{k!r}]", opts)
        return
    if _is_sequence(actual) and _is_sequence(expected):
        if len(actual) != len(expected):
            _fail(f"The length of the sequences mismatch: {len(actual)} != {len(expected)}",
                  opts["msg"], path)
        for i, (a, e) in enumerate(zip(actual, expected)):
            _compare(a, e, f"{path}[{i}]", opts)
        return
    if isinstance(actual, numbers.Number) and isinstance(expected, numbers.Number):
        _compare_scalars(actual, expected, path, opts)
        return
    a, e = _as_tensor(actual, path, opts), _as_tensor(expected, path, opts)
    _compare_tensors(a, e, path, opts)


def _is_sequence(x) -> bool:
    return isinstance(x, abc.Sequence) and not isinstance(x, str)


def _as_tensor(x, path: str, opts: dict) -> Tensor:
    if isinstance(x, Tensor):
        return x
    if isinstance(x, np.ndarray):
        from .ops.factories import from_numpy
        return from_numpy(x)
    _fail(f"No comparison pair was able to handle inputs of type {type(x)}.", None, path)


def _compare_scalars(actual, expected, path: str, opts: dict) -> None:
    rtol, atol = opts["rtol"], opts["atol"]
    if rtol is None:
        exact = all(isinstance(v, numbers.Integral) for v in (actual, expected))
        rtol, atol = (0.0, 0.0) if exact else _PRECISIONS["float64"]
    a, e = complex(actual), complex(expected)
    nan = (a != a) and (e != e)
    if (nan and opts["equal_nan"]) or abs(a - e) <= atol + rtol * abs(e):
        return
    abs_diff = abs(actual - expected)
    rel_diff = float("inf") if expected == 0 else abs_diff / abs(expected)
    _fail(_mismatch("Scalars", f"Expected {expected} but got {actual}.", abs_diff, None,
                    atol, rel_diff, None, rtol), opts["msg"], path)


def _compare_tensors(a: Tensor, e: Tensor, path: str, opts: dict) -> None:
    checks = [("shape", a.shape, e.shape)]
    if opts["check_device"]:
        checks.append(("device", a.device, e.device))
    if opts["check_dtype"]:
        checks.append(("dtype", a.dtype, e.dtype))
    if opts["check_stride"]:
        checks.append(("stride()", a.stride(), e.stride()))
    for name, x, y in checks:
        if x != y:
            _fail(f"The values for attribute '{name}' do not match: {x} != {y}.",
                  opts["msg"], path)
    rtol, atol = opts["rtol"], opts["atol"]
    if rtol is None:
        rtol, atol = default_tolerances(a.dtype, e.dtype)
    an, en = _host(a), _host(e)
    if an.dtype != en.dtype:
        common = np.result_type(an.dtype, en.dtype)
        an, en = an.astype(common), en.astype(common)
    matches = _isclose(an, en, rtol, atol, opts["equal_nan"])
    if matches.all():
        return
    if an.ndim == 0:
        _compare_scalars(an.item(), en.item(), path, {**opts, "rtol": rtol, "atol": atol})
        return
    _fail(_tensor_mismatch(an, en, matches, rtol, atol), opts["msg"], path)


def _host(t: Tensor) -> np.ndarray:
    arr = t.detach().numpy()
    if t.dtype == _dt.bfloat16:
        arr = arr.astype(np.float32)
    return arr


def _isclose(a: np.ndarray, e: np.ndarray, rtol: float, atol: float, equal_nan: bool):
    if a.dtype.kind in "biu":
        if rtol == 0 and atol == 0:
            return a == e
        a, e = a.astype(np.float64), e.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        return np.isclose(a, e, rtol=rtol, atol=atol, equal_nan=equal_nan) | (a == e)


def _tensor_mismatch(a: np.ndarray, e: np.ndarray, matches: np.ndarray, rtol, atol) -> str:
    n = matches.size
    bad = n - int(matches.sum())
    extra = f"Mismatched elements: {bad} / {n} ({bad / n:.1%})"
    af, ef, mf = a.ravel(), e.ravel(), matches.ravel()
    if a.dtype.kind in "biu":
        af, ef = af.astype(np.int64), ef.astype(np.int64)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        abs_diff = np.abs(af - ef)
        abs_diff[mf] = 0
        if ef.dtype.kind not in "fc":  # NOTE: PyTorch divides integers in float32
            abs_f, ef = abs_diff.astype(np.float32), ef.astype(np.float32)
        else:
            abs_f = abs_diff
        rel_diff = abs_f / np.abs(ef)
    rel_diff[mf] = 0
    ia, ir = int(np.argmax(abs_diff)), int(np.argmax(rel_diff))
    idx = lambda i: tuple(int(k) for k in np.unravel_index(i, a.shape))  # noqa: E731
    return _mismatch("Tensor-likes", extra, abs_diff[ia].item(), idx(ia), atol,
                     rel_diff[ir].item(), idx(ir), rtol)


def _mismatch(ident, extra, abs_diff, abs_idx, atol, rel_diff, rel_idx, rtol) -> str:
    equality = rtol == 0 and atol == 0
    lines = [f"{ident} are not {'equal' if equality else 'close'}!", "", extra]
    for kind, diff, i, tol in (("absolute", abs_diff, abs_idx, atol),
                               ("relative", rel_diff, rel_idx, rtol)):
        line = (f"{kind.title()} difference: {diff}" if i is None
                else f"Greatest {kind} difference: {diff} at index {i}")
        lines.append(line + ("" if equality else f" (up to {tol} allowed)"))
    return "\n".join(lines)


def assert_allclose(actual, expected, rtol=None, atol=None, equal_nan: bool = True,
                    msg: str = "") -> None:
    """Deprecated PyTorch spelling: :func:`assert_close` without the dtype check."""
    assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=equal_nan,
                 check_dtype=False, msg=msg or None)


def make_tensor(*shape, dtype, device=None, low=None, high=None, requires_grad: bool = False,
                noncontiguous: bool = False, exclude_zero: bool = False, memory_format=None):
    """A random tensor for tests (``torch.testing.make_tensor``): floats uniform in
    ``[low, high)``, integers uniform in ``[low, high)``, bools fair coins, complex numbers
    with both parts uniform; ``low``/``high`` default to -9 and 9, clamped to the dtype's
    range (0 for unsigned). ``exclude_zero`` replaces zeros by 1 (integers) or the dtype's
    smallest normal number; ``noncontiguous`` returns a strided view with those values.
    ``memory_format`` is accepted for PyTorch's signature (Ember tensors have one layout).

    Example:
        >>> t = ember.testing.make_tensor(2, 3, dtype=ember.int64, device="cpu", low=0)
        >>> t.shape, bool(((t >= 0) & (t < 9)).all())
        (ember.Size([2, 3]), True)
    """
    from .ops.factories import zeros
    from .random import rand, randint
    from .dtypes import finfo, iinfo
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    shape = tuple(int(n) for n in shape)
    dt = _dt.as_dtype(dtype)
    for name, v in (("low", low), ("high", high)):
        if v is not None and v != v:
            raise ValueError(f"make_tensor: `{name}` is NaN; expected a number")
    if dt is _dt.bool_:
        t = randint(0, 2, shape, device=device).to(_dt.bool_)
    elif dt.is_floating_point or dt.is_complex:
        real = _dt.float32 if dt.is_complex and dt.itemsize == 8 else \
            _dt.float64 if dt.is_complex else dt
        lo, hi = _bounds(low, high, -9.0, 9.0, finfo(real).min, finfo(real).max)

        def draw():
            return (rand(shape, dtype=_dt.float64, device=device) * (hi - lo) + lo).to(real)
        t = draw() if not dt.is_complex else _complex(draw(), draw())
    else:
        info = iinfo(dt)
        lo, hi = _bounds(low, high, -9 if info.min < 0 else 0, 9, info.min, info.max)
        lo, hi = int(np.ceil(lo)), int(np.ceil(hi))
        t = (randint(lo, hi, shape, device=device) if hi > lo else
             zeros(shape, dtype=_dt.int64, device=device) + lo).to(dt)
    if exclude_zero and dt is not _dt.bool_:
        fill = 1 if not (dt.is_floating_point or dt.is_complex) else \
            finfo(dt if dt.is_floating_point else real).tiny
        t = t.masked_fill(t == 0, fill)
    if noncontiguous and t.numel() > 1:
        wide = zeros(shape[:-1] + (shape[-1] * 2,), dtype=dt, device=device)
        wide[..., ::2] = t
        t = wide[..., ::2]
    if requires_grad:
        t.requires_grad_(True)
    return t


def _bounds(low, high, lo_default, hi_default, lo_min, hi_max):
    lo = lo_default if low is None else low
    hi = hi_default if high is None else high
    lo, hi = max(lo, lo_min), min(hi, hi_max)
    if low is not None and high is not None and low > high:
        raise ValueError(f"make_tensor: `low` must be less than or equal to `high`, but got "
                         f"low={low} and high={high}")
    return lo, hi


def _complex(re, im):
    from .ops.complex import complex as make_complex
    return make_complex(re, im)
