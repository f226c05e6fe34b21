"""The compiler probe is remembered in the kernel cache: a new process skips its build."""
import pytest

from ember.codegen import cache, toolchain


@pytest.fixture
def fresh_probe(monkeypatch, tmp_path):
    if toolchain.find_compiler() is None:
        pytest.skip("no C compiler")
    cache.forget_loaded()
    monkeypatch.setenv("EMBER_KERNEL_CACHE", str(tmp_path))
    toolchain.find_compiler.cache_clear()
    yield tmp_path
    toolchain.find_compiler.cache_clear()
    cache.forget_loaded()


def _count_probes(monkeypatch):
    runs, real = [], toolchain._works

    def counted(cmd, flags):
        runs.append(flags)
        return real(cmd, flags)
    monkeypatch.setattr(toolchain, "_works", counted)
    return runs


def test_probe_runs_once_then_is_read_from_the_cache(fresh_probe, monkeypatch):
    runs = _count_probes(monkeypatch)
    first = toolchain.find_compiler()
    assert len(runs) >= 1
    toolchain.find_compiler.cache_clear()          # as a new process would
    assert toolchain.find_compiler() == first and len(runs) == len(set(map(tuple, runs)))
    n = len(runs)
    toolchain.find_compiler.cache_clear()
    toolchain.find_compiler()
    assert len(runs) == n                         # no probe build the second time


def test_a_damaged_record_probes_again(fresh_probe, monkeypatch):
    toolchain.find_compiler()
    for p in fresh_probe.glob("*.c"):
        p.write_bytes(b"not the mark")
    runs = _count_probes(monkeypatch)
    toolchain.find_compiler.cache_clear()
    assert toolchain.find_compiler() is not None and len(runs) >= 1
