"""Generated float32 erf (``ember_erf_f32`` in ember/codegen/prelude.py), evaluated in float32.

Checked against a float64 reference (SciPy's erf, else Python's ``math.erf``) rounded
nowhere: the error is measured in float32 ulps at the exact value. The function uses only
explicit ``fmaf`` and exact steps, so its bits must not depend on the CPU, the vector
width or whether the CPU has FMA; that is tested by building the same kernel for several
targets. Failures name the worst input.
"""
import dataclasses
import math
import platform

import numpy as np
import pytest

from ember import dtypes as dt
from ember.codegen import available, toolchain
from ember.codegen.ir import InputSpec, Kernel, Load, OutSpec, call
from ember.codegen.runtime import CompiledKernel

pytestmark = pytest.mark.skipif(not available(), reason="no C compiler: no generated kernels")

#: the bound prelude.py documents (measured 1.291 ulp at x = 1.0101278 over every float32
#: in [1e-30, 4.25)); the op tests allow 2.
BOUND = 1.30


def _ref(x):
    x = np.asarray(x, np.float64)
    try:
        from scipy import special
        return special.erf(x)
    except ImportError:
        return np.vectorize(math.erf, otypes=[np.float64])(x)


def _ulp_error(got, ref):
    """|got - ref| in float32 ulps at ref (below a power of two: the finer spacing)."""
    r = np.abs(ref).astype(np.float32)
    below = np.nextafter(r, np.zeros_like(r)).astype(np.float64)
    ulp = np.where(np.abs(ref) < r, r.astype(np.float64) - below,
                   np.spacing(r).astype(np.float64))
    return np.abs(got.astype(np.float64) - ref) / np.maximum(ulp, 2.0 ** -149)


def _every(lo, hi, step=1):
    a, b = np.array([lo, hi], np.float32).view(np.int32)
    return np.arange(a, b, step, dtype=np.int32).view(np.float32)


def _sweep():
    """Every finite positive float32 bit pattern with a stride (subnormals included), every
    float32 around the branch point (|x| = 1) and the clamp (3.92), and both signs."""
    pos = np.concatenate([np.arange(0, 0x7F800000, 1021, dtype=np.int32).view(np.float32),
                          _every(0.9, 1.1), _every(1.9, 2.0, 3), _every(3.85, 4.0)])
    return np.concatenate([pos, -pos[::5]])


def _kernel(n, cc):
    k = Kernel([InputSpec(dt.float32, (1,))], OutSpec(dt.float32, (n,)),
               call("erf", Load(0)), name="ember_test_erf_f32")
    return CompiledKernel(k, cc)


def _assert_within(got, x, bound):
    err = _ulp_error(got, _ref(x))
    i = int(np.argmax(err))
    assert err[i] <= bound, (f"float32 erf: {int((err > bound).sum())} of {err.size} beyond "
                             f"{bound} ulp; worst x={x[i]!r}: got {got[i]!r}, want "
                             f"{_ref(x[i])!r} ({err[i]:.3f} ulp)")


def test_generated_erf_f32_within_bound_on_a_dense_sweep(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_KERNEL_CACHE", str(tmp_path))
    x = _sweep()
    _assert_within(_kernel(x.size, toolchain.find_compiler())(x), x, BOUND)


def test_generated_erf_f32_special_values(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_KERNEL_CACHE", str(tmp_path))
    tiny = np.float32(np.finfo(np.float32).smallest_subnormal)
    big = np.finfo(np.float32).max
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, tiny, -tiny, 1e-38, big, -big,
                  3.92, 3.9199998, 4.0, 1.0, -1.0], np.float32)
    y = _kernel(x.size, toolchain.find_compiler())(x)
    assert y[0] == 0 and math.copysign(1, y[0]) == 1
    assert y[1] == 0 and math.copysign(1, y[1]) == -1
    assert y[2] == 1 and y[3] == -1
    assert np.isnan(y[4]) and np.isnan(y[5])
    assert y[6] == tiny and y[7] == -tiny             # 2/sqrt(pi) * tiny rounds to tiny
    assert y[9] == 1 and y[10] == -1 and y[13] == 1
    fin = ~np.isnan(x)
    _assert_within(y[fin], x[fin], BOUND)


def _variants():
    """The default compiler and, for GCC on x86-64, the same built without FMA, for plain
    x86-64 (SSE2) and with 512-bit vectors: every one must give the default's bits."""
    cc = toolchain.find_compiler()
    if cc is None or "gcc" not in cc.version.lower() or platform.machine() != "x86_64":
        return []
    base = tuple(f for f in cc.flags if not f.startswith("-march="))
    return [pytest.param(dataclasses.replace(cc, flags=cc.flags + extra), id=name)
            for name, extra in (("no-fma", ("-mno-fma",)), ("prefer-512",
                                ("-mprefer-vector-width=512",)))] + [
        pytest.param(dataclasses.replace(cc, flags=base + ("-march=x86-64",)), id="x86-64")]


@pytest.mark.parametrize("cc", _variants())
def test_generated_erf_f32_same_bits_on_every_target(cc, tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_KERNEL_CACHE", str(tmp_path))
    x = np.concatenate([_every(0.0, 4.25, 97), -_every(1e-40, 4.25, 389),
                        np.array([np.inf, -np.inf, np.nan, -0.0], np.float32)])
    want = _kernel(x.size, toolchain.find_compiler())(x)
    got = _kernel(x.size, cc)(x)
    diff = np.nonzero(got.view(np.int32) != want.view(np.int32))[0]
    assert diff.size == 0, (f"{cc.flags}: {diff.size} values differ from the default build, "
                            f"first x={x[diff[0]]!r}: {got[diff[0]]!r} vs {want[diff[0]]!r}")
