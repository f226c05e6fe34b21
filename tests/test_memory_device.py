"""Allocator statistics, memory limits, device descriptors, streams/events, show_config."""
from __future__ import annotations

import gc
import importlib.util
import io

import pytest

import ember as em


@pytest.fixture
def clean_memory():
    gc.collect()
    em.set_memory_limit(None)
    yield
    em.set_memory_limit(None)


# ---------------------------------------------------------------- memory_stats
def test_memory_stats_keys():
    s = em.memory_stats()
    assert {"current_bytes", "peak_bytes", "num_allocs", "num_frees"} <= set(s)
    assert s == em.memory_stats("cpu") == em.memory_stats(em.device("cpu"))


def test_memory_stats_track_creation_and_free(clean_memory):
    s0 = em.memory_stats()
    t = em.zeros(1000, dtype=em.float64)
    s1 = em.memory_stats()
    assert s1["current_bytes"] == s0["current_bytes"] + 8000
    assert s1["num_allocs"] == s0["num_allocs"] + 1
    assert s1["peak_bytes"] >= s1["current_bytes"]
    v = t.view(10, 100)          # a view allocates nothing
    assert em.memory_stats()["current_bytes"] == s1["current_bytes"]
    del t
    assert em.memory_stats()["current_bytes"] == s1["current_bytes"]   # the view keeps it
    del v
    gc.collect()
    s2 = em.memory_stats()
    assert s2["current_bytes"] == s0["current_bytes"]
    assert s2["num_frees"] >= s0["num_frees"] + 1


def test_intermediates_are_freed(clean_memory):
    x = em.ones(10_000, dtype=em.float32)
    base = em.memory_stats()["current_bytes"]
    y = ((x * 2) + 1).exp()      # two temporaries die along the way
    assert em.memory_stats()["current_bytes"] == base + 40_000
    del y
    gc.collect()
    assert em.memory_stats()["current_bytes"] == base


def test_reset_peak_memory_stats(clean_memory):
    big = em.empty(100_000, dtype=em.float32)
    del big
    gc.collect()
    assert em.memory_stats()["peak_bytes"] >= em.memory_stats()["current_bytes"] + 400_000
    em.reset_peak_memory_stats()
    s = em.memory_stats()
    assert s["peak_bytes"] == s["current_bytes"]
    t = em.empty(1000, dtype=em.int64)
    assert em.memory_stats()["peak_bytes"] == s["current_bytes"] + 8000
    del t


def test_set_memory_limit_raises_memory_error(clean_memory):
    cur = em.memory_stats()["current_bytes"]
    em.set_memory_limit(cur + 10_000)
    small = em.zeros(100, dtype=em.float64)            # 800 bytes: fits
    with pytest.raises(MemoryError) as ei:
        em.zeros(10_000, dtype=em.float64)             # 80 000 bytes: over
    msg = str(ei.value)
    assert "80000 bytes" in msg and "limit" in msg and str(cur + 10_000) in msg
    assert em.memory_stats()["current_bytes"] == cur + 800   # nothing leaked
    em.set_memory_limit(None)
    em.zeros(10_000, dtype=em.float64)
    del small


def test_memory_error_from_an_op(clean_memory):
    x = em.ones(1000, dtype=em.float64)
    em.set_memory_limit(em.memory_stats()["current_bytes"] + 100)
    with pytest.raises(MemoryError, match="out of memory"):
        x * 2
    em.set_memory_limit(None)
    assert (x * 2).sum().item() == 2000


# ---------------------------------------------------------------- devices
def test_device_parsing_and_equality():
    cpu = em.device("cpu")
    assert cpu == em.device("cpu") and cpu == "cpu" and cpu.type == "cpu"
    assert cpu.index is None and str(cpu) == "cpu" and repr(cpu) == "device(type='cpu')"
    c0 = em.device("cuda:0")
    assert c0.type == "cuda" and c0.index == 0 and str(c0) == "cuda:0"
    assert c0 == em.device("cuda", 0) == em.device("cuda") == "cuda:0"
    assert em.device("cuda:1") != c0 and em.device("cuda:1").index == 1
    assert cpu != c0
    assert hash(em.device("cuda")) == hash(c0)
    assert em.device(cpu) is cpu
    assert em.zeros(1).device == cpu


@pytest.mark.parametrize("bad, err", [("tpu", ValueError), ("cuda:x", ValueError),
                                      (3, TypeError)])
def test_device_errors(bad, err):
    with pytest.raises(err):
        em.device(bad)


def test_device_index_given_twice():
    with pytest.raises(ValueError, match="twice"):
        em.device("cuda:0", 1)


def test_device_is_immutable():
    with pytest.raises(AttributeError):
        em.device("cpu").type = "cuda"


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None,
                    reason="CuPy is installed: the CUDA backend may be available")
def test_cuda_tensor_without_cupy_is_a_clear_error():
    with pytest.raises(RuntimeError, match="CuPy"):
        em.zeros(3, device="cuda")
    with pytest.raises(RuntimeError, match="CuPy"):
        em.tensor([1.0], device="cuda:0")


# ---------------------------------------------------------------- streams and events
def test_stream_and_event_are_no_ops_on_cpu():
    s = em.Stream()
    assert s.device == em.device("cpu") and s.query()
    s.synchronize()
    with s:
        t = em.ones(3) * 2
    e = s.record_event()
    assert isinstance(e, em.Event) and e.query()
    e.synchronize()
    s.wait_event(e)
    assert t.tolist() == [2.0, 2.0, 2.0]


def test_event_timing():
    start, end = em.Event(enable_timing=True), em.Event(enable_timing=True)
    with pytest.raises(RuntimeError, match="recorded"):
        start.elapsed_time(end)
    start.record()
    em.ones(100).sum()
    end.record()
    assert end.query() and start.elapsed_time(end) >= 0.0


# ---------------------------------------------------------------- show_config
def test_show_config_prints_blas_info(capsys):
    info = em.show_config()
    out = capsys.readouterr().out
    assert "Ember configuration" in out and "blas" in out and "numpy" in out
    assert info["numpy"] in out


def test_show_config_reports_openblas_coretype(monkeypatch):
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    buf = io.StringIO()
    info = em.show_config(file=buf)
    assert info["OPENBLAS_CORETYPE"] == "Haswell"
    assert "OPENBLAS_CORETYPE=Haswell" in buf.getvalue()
    monkeypatch.delenv("OPENBLAS_CORETYPE")
    buf = io.StringIO()
    em.show_config(file=buf)
    assert "OPENBLAS_CORETYPE=" not in buf.getvalue()
