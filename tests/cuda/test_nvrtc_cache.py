"""The PTX disk cache of generated CUDA kernels (``ember/codegen/cuda_cache.py``).

NVRTC compiles a source once per (source, architecture, NVRTC version, options); the PTX
lands in the kernel cache folder beside its checksum and source (mode 0600, the folder
checks of ``cache_fs``), a new process reads it back instead of compiling, a corrupted
entry is rebuilt, and ``ember cache clear`` / eviction count the ``.ptx`` files.
"""
import os

import pytest

from ember.codegen import cache, cache_fs, cuda_cache, nvrtc

pytestmark = pytest.mark.skipif(
    not (nvrtc.available() and nvrtc.include_dirs()),
    reason="NVRTC or the CUDA fp16/bf16 headers are not installed (pip install 'ember[nvrtc]')")

SRC = 'extern "C" __global__ void k_{n}(float *x) {{ x[threadIdx.x] *= {n}.f; }}\n'


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_KERNEL_CACHE", str(tmp_path / "kernels"))
    monkeypatch.setattr(cuda_cache, "_memo", {})
    cache.forget_loaded()
    yield tmp_path / "kernels"
    cache.forget_loaded()


def _entries(folder, ext):
    return sorted(p for p in os.listdir(folder) if p.endswith(ext))


def test_compiled_once_then_read_from_disk(store):
    before = dict(cuda_cache.stats)
    ptx = cuda_cache.ptx(SRC.format(n=3), "k3")
    assert ".entry k_3" in ptx
    assert cuda_cache.stats["compiled"] == before["compiled"] + 1
    (name,) = _entries(store, ".ptx")
    assert os.stat(store / name).st_mode & 0o777 == 0o600
    assert _entries(store, ".sha256") == [name[:-4] + ".sha256"]
    cuda_cache._memo.clear()                         # a new process: no memo
    assert cuda_cache.ptx(SRC.format(n=3), "k3") == ptx
    assert cuda_cache.stats["loaded"] == before["loaded"] + 1
    assert cuda_cache.stats["compiled"] == before["compiled"] + 1
    assert cuda_cache.ptx(SRC.format(n=3), "k3", "compute_80") != ptx   # another arch


def test_a_corrupted_entry_is_rebuilt(store):
    ptx = cuda_cache.ptx(SRC.format(n=5), "k5")
    (name,) = _entries(store, ".ptx")
    with open(store / name, "w") as f:
        f.write("garbage")
    cuda_cache._memo.clear()
    before = cuda_cache.stats["compiled"]
    assert cuda_cache.ptx(SRC.format(n=5), "k5") == ptx
    assert cuda_cache.stats["compiled"] == before + 1


def test_ptx_entries_are_counted_and_removed_with_the_cache(store):
    cuda_cache.ptx(SRC.format(n=7), "k7")
    fd = cache_fs.open_dir(str(store), create=False)
    try:
        entries, _ = cache_fs.scan(fd)
        (key,) = entries
        assert entries[key][0] > 0
        cache_fs.remove_entry(fd, key)
    finally:
        os.close(fd)
    assert _entries(store, ".ptx") == [] and _entries(store, ".sha256") == []
