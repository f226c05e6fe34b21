"""The attention kernels' C build (:mod:`ember.codegen.attention_x86_c`): with GCC the
intrinsics come from a small shim instead of ``<immintrin.h>`` (a shorter compiler run);
the kernels must be bitwise those built with the header."""
from __future__ import annotations

import ctypes
import os
import subprocess
import tempfile

import numpy as np
import pytest

from ember.codegen import attention_kernels as ak
from ember.codegen import pool
from ember.codegen.toolchain import find_compiler

needs_cc = pytest.mark.skipif(not ak.available(), reason="no C compiler: the fallback "
                              "test in test_sdpa_op.py covers this machine")


def _call(fn, arrays, outs, scale, causal, plus_zero=False):
    g, views, oviews = ak._geometry(arrays, outs, causal, plus_zero)
    err, sc = ctypes.c_int(0), ctypes.c_double(scale)
    ptrs = [a.ctypes.data for a in views + oviews] + [ctypes.addressof(sc),
                                                      ctypes.addressof(err)]
    fn((ctypes.c_void_p * len(ptrs))(*ptrs), g.ctypes.data, 1)
    assert err.value == 0


def _cases(rng, dtype):
    """(q, k, v, dO, causal): a GPT's permuted qkv views, odd sizes, and scores far past
    exp's range with NaN/Inf entries (the float32 exp's clamps and NaN path)."""
    for b, t, h, d, causal, wild in ((2, 64, 4, 32, True, False), (3, 37, 2, 24, False, False),
                                     (2, 40, 3, 32, True, True), (1, 13, 2, 8, True, True)):
        qkv = rng.standard_normal((b, t, 3, h, d)).astype(dtype)
        q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
        if wild:
            qkv[:, :, 0] *= 40
            qkv[:, :5, 1] *= 60
            qkv[0, 3, 0, 1, 1] = np.nan
            qkv[-1, 7, 1, 0, 2] = np.inf
            qkv[0, 9, 2, 1, 0] = -np.inf
        yield q, k, v, rng.standard_normal(q.shape).astype(dtype), causal


def _run_all(libs):
    rng = np.random.default_rng(7)
    results = []
    for dtype, sfx in ((np.float32, "f32"), (np.float64, "f64")):
        for q, k, v, go, causal in _cases(rng, dtype):
            o = np.empty((q.shape[0], q.shape[2], q.shape[1], v.shape[3]), dtype)
            o = o.transpose(0, 2, 1, 3)
            _call(libs["fwd"][f"sdpa_{sfx}"], (q, k, v), (o,), 0.3, causal)
            grads = tuple(np.empty(x.shape, dtype) for x in (q, k, v))
            _call(libs["bwd"][f"sdpa_grad_{sfx}"], (go, q, k, v), grads, 0.3, causal, True)
            results.append((o.copy(),) + grads)
    return results


@needs_cc
def test_shim_kernels_are_bitwise_the_header_kernels():
    cc = find_compiler()
    libs = {"shim": {}, "header": {}}
    for part, op in (("fwd", "sdpa"), ("bwd", "sdpa_grad")):
        src = ak.source(cc.mvec, None, part)
        names = [f"{op}_f32", f"{op}_f64"]
        # with the header included first the shim stands down (_IMMINTRIN_H_INCLUDED)
        for kind, text in (("shim", src), ("header", "#include <immintrin.h>\n" + src)):
            if kind == "header" and "immintrin" not in _preprocessed(cc, text):
                pytest.skip("not an x86 compiler: no <immintrin.h> to compare with")
            libs[kind][part] = pool.load_kernels(text, names)[1]
    shim, header = _run_all(libs["shim"]), _run_all(libs["header"])
    assert len(shim) == 8
    for a, b in zip(shim, header):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x.view(f"u{x.itemsize}"), y.view(f"u{y.itemsize}"))


def _preprocessed(cc, text: str) -> str:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "a.c")
        with open(path, "w") as f:
            f.write(text)
        flags = [f for f in cc.flags if f != "-shared"]
        r = subprocess.run(list(cc.command) + flags + ["-E", "-dM", path], capture_output=True,
                           text=True, check=False)
        r2 = subprocess.run(list(cc.command) + flags + ["-E", path], capture_output=True,
                            text=True, check=False)
    assert r.returncode == 0 and r2.returncode == 0, r.stderr + r2.stderr
    return r.stdout + r2.stdout


@needs_cc
def test_gcc_builds_the_attention_kernels_without_immintrin():
    """GCC 10+ on an AVX target uses the shim: no <immintrin.h> in the translation unit
    (parsing it was ~0.12 s of each attention library's compiler run)."""
    cc = find_compiler()
    macros = _preprocessed(cc, "int x;\n")
    if "__AVX__" not in macros or "__clang__" in macros or "__GNUC__ " not in macros:
        pytest.skip("the shim is for GCC on AVX targets")
    gnuc = int(macros.split("#define __GNUC__ ")[1].split()[0])
    if gnuc < 10:
        pytest.skip("GCC < 10 has no __has_builtin: the header is included")
    for part in ("fwd", "bwd"):
        text = _preprocessed(cc, ak.source(cc.mvec, ("f32",), part))
        assert "#define EMBER_X86_SHIM 1" in text
        assert "immintrin.h" not in text
