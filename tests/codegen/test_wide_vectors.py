"""512-bit loops (``render_c._wide``): which kernels get them, and that bits do not change.

GCC's ``-march`` tuning for AVX-512 CPUs prefers 256-bit vectors; an elementwise loop whose
cost is Ember's own float32 erf/tanh polynomials (GELU) is marked ``EMBER_WIDE_BEGIN`` and
runs 512-bit vectors where GCC targets AVX-512 (elsewhere the macro is empty). The helpers
use explicit ``fmaf`` only, so the marked kernel must give the unmarked kernel's bits:
each is built both ways here and compared bit for bit (on an AVX-512 CPU the two builds
really differ in width; elsewhere they are the same code).
"""
import shutil
import subprocess

import numpy as np
import pytest

from ember import dtypes as dt
from ember.codegen import available, render_c
from ember.codegen.ir import InputSpec, Kernel, Load, OutSpec, call
from ember.codegen.runtime import CompiledKernel, render
from ember.codegen.toolchain import find_compiler

pytestmark = pytest.mark.skipif(not available(), reason="no C compiler: no generated kernels")

_R2 = 0.7071067811865476


def _gelu_erf(x):
    one_erf = 1.0 + call("erf", x * _R2)
    return x * 0.5 * one_erf, one_erf


def _gelu_tanh(x):
    inner = (x + 0.044715 * x * x * x) * 0.7978845608028654
    return x * 0.5 * (1.0 + call("tanh", inner)), None


def _kernel(form, n, d, name, strides=(1,), shape=None):
    out, extra = form(Load(0))
    return Kernel([InputSpec(d, strides)], OutSpec(d, shape or (n,)), out, name=name,
                  extra=() if extra is None else ((d, extra),))


def _inputs(d):
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(4099) * 3, np.linspace(-6, 6, 2001),
                        [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 3.92, -3.92,
                         1.0, -1.0, 1e30, -1e30]])
    return x.astype(d)


def _run(k, x, monkeypatch, wide):
    """Every output of ``k`` on ``x``, built marked (``wide``) or unmarked."""
    with monkeypatch.context() as m:
        if not wide:
            m.setattr(render_c, "_wide", lambda body: False)
        ck = CompiledKernel(k, find_compiler())
        outs = [np.empty(shape, d.np) for shape, d in ck.out_shapes()]
        ck(x, out=outs[0], extra_outs=outs[1:])
        return outs


def _assert_same_bits(wide, narrow, x, what):
    for w, n in zip(wide, narrow):
        u = f"u{w.itemsize}"
        bad = np.nonzero((w.view(u) != n.view(u)).ravel())[0]
        assert bad.size == 0, (f"{what}: {bad.size} values differ between the 512-bit and "
                               f"the default loop, first x={x.ravel()[bad[0]]!r}: "
                               f"{w.ravel()[bad[0]]!r} vs {n.ravel()[bad[0]]!r}")


@pytest.mark.parametrize("form", [_gelu_erf, _gelu_tanh], ids=["erf", "tanh"])
@pytest.mark.parametrize("d", [np.float32, np.float64], ids=["float32", "float64"])
def test_wide_loop_gives_the_narrow_loops_bits(form, d, tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_KERNEL_CACHE", str(tmp_path))
    x = _inputs(d)
    k = _kernel(form, x.size, getattr(dt, np.dtype(d).name), f"ember_wide_{form.__name__}")
    _assert_same_bits(_run(k, x, monkeypatch, True), _run(k, x, monkeypatch, False), x,
                      f"{form.__name__} {np.dtype(d).name}")


def test_row_layout_wide_loop_gives_the_narrow_loops_bits(tmp_path, monkeypatch):
    """The 2-d (row) form of the loop: a transposed, non-contiguous input."""
    monkeypatch.setenv("EMBER_KERNEL_CACHE", str(tmp_path))
    x = _inputs(np.float32)[:6000].reshape(60, 100).T
    k = _kernel(_gelu_erf, None, dt.float32, "ember_wide_rows", strides=(1, 100),
                shape=(100, 60))
    wide = _run(k, x, monkeypatch, True)
    _assert_same_bits(wide, _run(k, x, monkeypatch, False), x, "gelu rows")
    x64 = x.astype(np.float64)
    ref = x64 * 0.5 * (1 + _erf64(x64 * _R2))
    # NOTE: float32 1 + erf(.) is exact to ~1 ulp of 1, so the error scales with |x|
    assert np.all(np.abs(wide[0] - ref) <= 4e-7 * (np.abs(ref) + np.abs(x64)))


def _erf64(x):
    from scipy import special
    return special.erf(x)


def _source(body, d=dt.float32):
    k = Kernel([InputSpec(d, (1,))], OutSpec(d, (8,)), body, name="ember_wide_probe")
    return render(k, (1, ("c",)))[0]


def test_only_ember_polynomial_loops_are_marked():
    assert "EMBER_WIDE_BEGIN" in _source(_gelu_erf(Load(0))[0])
    assert "EMBER_WIDE_BEGIN" in _source(_gelu_tanh(Load(0))[0])
    # NOTE: libm calls may go through libmvec, whose 512-bit variants round differently
    assert "EMBER_WIDE_BEGIN" not in _source(call("exp", Load(0)) * _gelu_erf(Load(0))[0])
    assert "EMBER_WIDE_BEGIN" not in _source(Load(0) * 2.0 + 1.0)
    # float64 erf/tanh are libm's: not marked
    assert "EMBER_WIDE_BEGIN" not in _source(call("erf", Load(0)), dt.float64)


def _targets_avx512(cc) -> bool:
    r = subprocess.run([*cc.command, *cc.flags, "-dM", "-E", "-x", "c", "-"],
                       input="", capture_output=True, text=True)
    return r.returncode == 0 and "__AVX512F__" in r.stdout


def test_marked_loop_really_uses_512_bit_registers(tmp_path, monkeypatch):
    """Where GCC targets AVX-512, the marked GELU library holds zmm instructions (the
    bit-equality tests above would pass vacuously if the pragma changed nothing)."""
    cc = find_compiler()
    if cc is None or "gcc" not in cc.version.lower() or shutil.which("objdump") is None \
            or not _targets_avx512(cc):
        pytest.skip("needs GCC targeting AVX-512 and objdump")
    monkeypatch.setenv("EMBER_KERNEL_CACHE", str(tmp_path))
    x = _inputs(np.float32)
    _run(_kernel(_gelu_erf, x.size, dt.float32, "ember_wide_probe"), x, monkeypatch, True)
    libs = [c.with_suffix(".so") for c in tmp_path.rglob("*.c")
            if "ember_wide_probe" in c.read_text() and c.with_suffix(".so").exists()]
    assert libs, f"no compiled library of the GELU kernel under {tmp_path}"
    asm = subprocess.run(["objdump", "-d", str(libs[0])], capture_output=True, text=True).stdout
    assert "%zmm" in asm, f"{libs[0]}: no 512-bit instruction in the marked GELU loop"
