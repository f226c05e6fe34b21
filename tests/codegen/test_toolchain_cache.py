"""The toolchain lookup, the no-compiler fallback and the verified disk cache."""
import dataclasses
import os
import warnings

import numpy as np
import pytest

from ember import dtypes as dt
from ember.codegen import (InputSpec, Kernel, Load, NumpyKernel, OutSpec, Reduce, ReduceKernel,
                           available, call, compile, elementwise_kernel, find_compiler)
from ember.codegen import cache, pool, runtime, toolchain

F32 = dt.float32


def _kernel(n=33, op="exp"):
    return Kernel([InputSpec(F32, (1,))], OutSpec(F32, (n,)), call(op, Load(0)) * 2.0)


@pytest.fixture
def no_compiler(monkeypatch):
    monkeypatch.setattr(toolchain, "_candidates", lambda: [])
    monkeypatch.setattr(runtime, "_warned", [False])
    toolchain.find_compiler.cache_clear()
    yield
    monkeypatch.undo()
    toolchain.find_compiler.cache_clear()


def test_no_compiler_falls_back_to_numpy_and_warns_once(no_compiler):
    assert not available() and find_compiler() is None
    x = np.linspace(-3, 3, 33).astype(np.float32)
    with pytest.warns(RuntimeWarning, match="no working C compiler"):
        fn = compile(_kernel())
    assert isinstance(fn, NumpyKernel)
    np.testing.assert_allclose(fn(x), np.exp(x) * 2, rtol=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fn2 = compile(_kernel(op="tanh"))           # warned once already: silent now
        red = compile(ReduceKernel([InputSpec(F32, (11, 1))], (3, 11), 1,
                                   [Reduce("sum", Load(0) * Load(0))], None,
                                   OutSpec(F32, (3,))))
    np.testing.assert_allclose(fn2(x), np.tanh(x) * 2, rtol=1e-6)
    m = x.reshape(3, 11)
    np.testing.assert_allclose(red(m), (m * m).sum(1), rtol=1e-5)
    assert elementwise_kernel("exp", [F32], [(10,)]) is None


def test_compiler_lookup_order(monkeypatch):
    monkeypatch.setenv("CC", "/nonexistent/ember-cc --flag")
    assert toolchain._candidates()[0] == ("/nonexistent/ember-cc", "--flag")
    toolchain.find_compiler.cache_clear()
    try:
        cc = find_compiler()          # $CC does not run: falls through to gcc/clang/cc
        assert cc is None or cc.command[0] != "/nonexistent/ember-cc"
    finally:
        monkeypatch.undo()
        toolchain.find_compiler.cache_clear()


def test_flags_keep_ieee_semantics(cc):
    flags = " ".join(find_compiler().flags)
    for bad in ("-ffast-math", "-ffinite-math-only", "-Ofast", "-funsafe-math"):
        assert bad not in flags
    assert "-march=native" in flags and "-O3" in flags


def test_cache_key_covers_source_compiler_and_flags(cc):
    c = find_compiler()
    k = cache.cache_key("int x;", c)
    assert cache.cache_key("int y;", c) != k
    assert cache.cache_key("int x;", dataclasses.replace(c, flags=c.flags + ("-O2",))) != k
    assert cache.cache_key("int x;", dataclasses.replace(c, version="other 1.0")) != k
    assert cache.cache_key("int x;", dataclasses.replace(c, target="x86_64:other")) != k
    assert cache.cache_key("int x;", c) == k


def test_cache_dir_env(monkeypatch, tmp_path):
    monkeypatch.delenv("EMBER_KERNEL_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == str(tmp_path / "xdg" / "ember" / "kernels")
    monkeypatch.setenv("EMBER_KERNEL_CACHE", str(tmp_path / "mine"))
    assert cache.cache_dir() == str(tmp_path / "mine") and os.path.isdir(tmp_path / "mine")


def _entries(d):
    return sorted(p for p in os.listdir(d) if p.endswith(".so") and not p.startswith("."))


@pytest.mark.parametrize("damage", ["truncate", "garbage", "no_checksum"])
def test_corrupted_cache_entry_is_rebuilt_never_loaded(cc, monkeypatch, tmp_path, damage):
    pool.address()               # NOTE: the pool's library lands in the session's cache
    monkeypatch.setenv("EMBER_KERNEL_CACHE", str(tmp_path))
    x = np.linspace(-2, 2, 33).astype(np.float32)
    compile(_kernel())(x)
    (so,) = _entries(tmp_path)
    path = tmp_path / so
    good = path.read_bytes()
    if damage == "truncate":
        with open(path, "r+b") as f:
            f.truncate(len(good) // 3)
    elif damage == "garbage":
        path.write_bytes(b"\x7fELF" + os.urandom(len(good) - 4))
    else:
        os.unlink(str(path)[:-3] + ".sha256")
    cache.forget_loaded()
    before = dict(cache.stats)
    np.testing.assert_allclose(compile(_kernel())(x), np.exp(x) * 2, rtol=1e-6)
    assert cache.stats["compiled"] == before["compiled"] + 1
    assert cache.stats["rebuilt"] == before["rebuilt"] + 1
    assert _entries(tmp_path) == [so]
    assert cache._verified_bytes(str(path), str(path)[:-3] + ".sha256") is not None
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]   # no temp leftovers


def test_cache_hit_loads_without_compiling(cc, monkeypatch, tmp_path):
    monkeypatch.setenv("EMBER_KERNEL_CACHE", str(tmp_path))
    compile(_kernel(op="sin"))
    cache.forget_loaded()
    before = cache.stats["compiled"]
    x = np.linspace(-2, 2, 33).astype(np.float32)
    np.testing.assert_allclose(compile(_kernel(op="sin"))(x), np.sin(x) * 2, rtol=1e-6)
    assert cache.stats["compiled"] == before
    assert {p.rsplit(".", 1)[1] for p in os.listdir(tmp_path)} == {"so", "sha256", "c"}


def test_bad_arguments_are_clear_errors(cc):
    fn = compile(_kernel())
    with pytest.raises(TypeError, match="must be float32"):
        fn(np.zeros(33))
    with pytest.raises(TypeError, match="takes 1 arrays"):
        fn(np.zeros(33, np.float32), np.zeros(33, np.float32))
    with pytest.raises(ValueError, match="C-contiguous"):
        fn(np.zeros(33, np.float32), out=np.zeros(66, np.float32)[::2])
