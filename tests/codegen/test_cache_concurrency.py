"""The kernel cache builds different entries concurrently and each entry once."""
import threading
import time

import pytest

from ember.codegen import cache, toolchain
from ember.codegen.toolchain import find_compiler


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    if find_compiler() is None:
        pytest.skip("no C compiler")
    cache.forget_loaded()
    monkeypatch.setenv("EMBER_KERNEL_CACHE", str(tmp_path))
    yield
    cache.forget_loaded()


def _slow_compiles(monkeypatch, delay):
    """Patch the compiler run: each sleeps ``delay`` s; returns the [(start, end)] log."""
    log, real = [], toolchain.compile_shared

    def slow(cc, src, out):
        t0 = time.perf_counter()
        time.sleep(delay)
        real(cc, src, out)
        log.append((t0, time.perf_counter()))
    monkeypatch.setattr(cache, "compile_shared", slow)
    return log


def _run_threads(fns):
    out = [None] * len(fns)

    def go(i):
        out[i] = fns[i]()
    ts = [threading.Thread(target=go, args=(i,)) for i in range(len(fns))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    return out


def test_different_entries_compile_concurrently(fresh, monkeypatch):
    log = _slow_compiles(monkeypatch, 0.5)
    cc = find_compiler()
    srcs = [f"int ember_c{i}(void) {{ return {i}; }}\n" for i in range(2)]
    libs = _run_threads([lambda s=s: cache.load(s, cc) for s in srcs])
    assert [lib[f"ember_c{i}"]() for i, lib in enumerate(libs)] == [0, 1]
    (a0, a1), (b0, b1) = sorted(log)
    assert b0 < a1, f"the second build waited for the first: {log}"


def test_one_entry_is_built_once_when_asked_concurrently(fresh, monkeypatch):
    log = _slow_compiles(monkeypatch, 0.3)
    cc = find_compiler()
    src = "int ember_once(void) { return 7; }\n"
    before = cache.stats["compiled"]
    libs = _run_threads([lambda: cache.load(src, cc) for _ in range(3)])
    assert len(log) == 1 and cache.stats["compiled"] == before + 1
    assert all(lib is libs[0] for lib in libs) and libs[0].ember_once() == 7


def test_prefetch_builds_in_the_background_and_load_waits_for_it(fresh, monkeypatch):
    log = _slow_compiles(monkeypatch, 0.4)
    monkeypatch.setattr(cache, "_prefetched", {})
    cc = find_compiler()
    src = "int ember_pre(void) { return 5; }\n"
    before = cache.stats["compiled"]
    t0 = time.perf_counter()
    cache.prefetch([src, lambda c: "int ember_pre2(void) { return 6; }\n"])
    assert time.perf_counter() - t0 < 0.2          # returned at once: the build runs behind
    lib = cache.load(src, cc)                      # waits for the background build
    assert lib.ember_pre() == 5
    deadline = time.time() + 30
    while cache.stats["compiled"] < before + 2 and time.time() < deadline:
        time.sleep(0.05)
    assert cache.stats["compiled"] == before + 2 and len(log) == 2
    assert cache.load("int ember_pre2(void) { return 6; }\n", cc).ember_pre2() == 6
    assert cache.stats["compiled"] == before + 2   # both built once, by the prefetch
    cache.prefetch([src])                          # once per process
    assert cache.stats["compiled"] == before + 2


def test_many_kernels_compile_as_two_concurrent_libraries(fresh, monkeypatch):
    import numpy as np
    from ember import dtypes as dt
    from ember.codegen import InputSpec, Kernel, Load, OutSpec, call, pool, runtime
    pool.address()                                # the worker pool's library: built first
    log = _slow_compiles(monkeypatch, 0.5)
    n = runtime.SPLIT_KERNELS
    ks = [Kernel([InputSpec(dt.float32, (1,))], OutSpec(dt.float32, (7,)),
                 call("exp", Load(0)) * float(i + 2)) for i in range(n)]
    cks = runtime.compile_many(ks)
    assert len(log) == 2
    (a0, a1), (b0, b1) = sorted(log)
    assert b0 < a1, f"the two halves compiled one after the other: {log}"
    assert len({ck.origin[0] for ck in cks}) == 2
    x = np.linspace(-1, 1, 7).astype(np.float32)
    for i, ck in enumerate(cks):
        np.testing.assert_allclose(ck(x), np.exp(x) * (i + 2), rtol=1e-6)


def test_few_large_kernels_compile_as_two_concurrent_libraries(fresh, monkeypatch):
    # the split is by C text too: fewer than SPLIT_KERNELS kernels holding SPLIT_BYTES of
    # text between them are two compiler runs; below SPLIT_BYTES, one
    import numpy as np
    from ember import dtypes as dt
    from ember.codegen import InputSpec, Kernel, Load, OutSpec, call, pool, runtime
    pool.address()
    log = _slow_compiles(monkeypatch, 0.5)

    def kernels(c):
        return [Kernel([InputSpec(dt.float32, (1,))], OutSpec(dt.float32, (7,)),
                       call("exp", Load(0)) * float(i + c)) for i in range(3)]
    monkeypatch.setattr(runtime, "SPLIT_BYTES", 1 << 30)
    runtime.compile_many(kernels(2))
    assert len(log) == 1
    log.clear()
    monkeypatch.setattr(runtime, "SPLIT_BYTES", 1)
    cks = runtime.compile_many(kernels(7))
    assert len(log) == 2 and len({ck.origin[0] for ck in cks}) == 2
    x = np.linspace(-1, 1, 7).astype(np.float32)
    for i, ck in enumerate(cks):
        np.testing.assert_allclose(ck(x), np.exp(x) * (i + 7), rtol=1e-6)
