import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

# NOTE: tests monkeypatch passes' internals, which the graph cache's key can't see: it is
# off here (a user's ~/.cache is never read or written); tests/graph/test_disk_cache*.py
# turn it on over a temporary folder.
os.environ.setdefault("EMBER_GRAPH_CACHE", "0")


import hashlib  # noqa: E402
import pickle  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def _compile_caches(tmp_path_factory):
    """One folder per test run, shared by the xdist workers (their temporary folders'
    common parent), for what the suite compiles many times over: the CUDA emulator's
    libraries (``tests/cuda/_cuda_emu.py``, via ``EMBER_EMU_CACHE``) and NVRTC's PTX and
    cubins (a wrapper of ``ember.codegen.nvrtc._compile``). Kept by content — the source,
    program name, options, target, NVRTC's version and binding — so a hit is what the
    compiler would return again; failures are never kept. Per run, not per machine: each
    run compiles every distinct text once (a test of the compiler path itself, e.g. the
    CuPy binding, compiles under its own key). The suite compiled ~310 NVRTC programs
    (6 min of CPU), a quarter of them again, and ~300 emulator libraries, a third again."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder = root / "compile-cache"
    folder.mkdir(exist_ok=True)
    prev = os.environ.get("EMBER_EMU_CACHE")
    os.environ["EMBER_EMU_CACHE"] = str(folder)
    from ember.codegen import nvrtc
    real = nvrtc._compile

    def compile_(source, name, arch_opt, options, what):
        try:
            key = hashlib.sha256(repr((nvrtc.binding(), nvrtc.version(), nvrtc.include_dirs(),
                                       source, name, arch_opt, tuple(options), what)).encode())
        except Exception:       # NOTE: no NVRTC: the real call raises its own error
            return real(source, name, arch_opt, options, what)
        path = folder / f"nvrtc_{key.hexdigest()[:24]}.pkl"
        try:
            return pickle.loads(path.read_bytes())
        except (OSError, pickle.UnpicklingError, EOFError):
            pass
        out = real(source, name, arch_opt, options, what)
        tmp = path.with_suffix(f".{os.getpid()}")
        tmp.write_bytes(pickle.dumps(out))
        os.replace(tmp, path)
        return out
    nvrtc._compile = compile_
    yield
    nvrtc._compile = real
    if prev is None:
        os.environ.pop("EMBER_EMU_CACHE", None)
    else:
        os.environ["EMBER_EMU_CACHE"] = prev
