"""Pinned memory, asynchronous copies and ``record_stream`` on a real GPU (CuPy).

Skips with "no CUDA GPU/CuPy" elsewhere; the same bookkeeping is tested on the stand-in in
``test_pinned_memory.py``. On a GPU machine: ``python -m pytest -q tests/cuda/test_gpu_pinned.py``.
A stream is held busy by a spinning kernel, so "the copy has not run yet" is deterministic.
"""
import os

import numpy as np
import pytest

import ember as em
from ember.device.base import reset_cuda_backend
from ember.device.cuda_copy import in_flight

_SPIN = r"""
extern "C" __global__ void ember_spin(long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) { }
}
"""


@pytest.fixture(scope="module")
def gpu():
    """The real cuda backend (never the stand-in), or a skip saying what is missing."""
    saved = os.environ.pop("EMBER_FAKE_CUDA", None)
    reset_cuda_backend()
    from ember.device.base import cuda_backend
    be, why = cuda_backend()
    if be is None or be.is_fake:
        reset_cuda_backend()
        if saved is not None:
            os.environ["EMBER_FAKE_CUDA"] = saved
        pytest.skip(f"no CUDA GPU/CuPy ({why})")
    yield be
    reset_cuda_backend()
    if saved is not None:
        os.environ["EMBER_FAKE_CUDA"] = saved


def _spin(stream, ms: float = 200.0):
    """Keep ``stream`` busy for about ``ms`` milliseconds (a one-thread clock64 loop)."""
    import cupy
    k = cupy.RawKernel(_SPIN, "ember_spin")
    rate = cupy.cuda.Device().attributes["ClockRate"]      # kHz
    with em.cuda.stream(stream):
        k((1,), (1,), (np.int64(rate * ms),))


def _is_page_locked(arr) -> bool:
    import cupy
    attrs = cupy.cuda.runtime.pointerGetAttributes(arr.ctypes.data)
    return attrs.type == cupy.cuda.runtime.memoryTypeHost


def test_pin_memory_is_page_locked(gpu):
    x = em.arange(1 << 16, dtype=em.float32)
    p = x.pin_memory()
    assert p.is_pinned() and _is_page_locked(p._data) and not _is_page_locked(x._data)
    ds = em.utils.data.TensorDataset(em.arange(8.0))
    (b,) = next(iter(em.utils.data.DataLoader(ds, batch_size=4, pin_memory=True)))
    assert b.is_pinned() and _is_page_locked(b._data)


def test_non_blocking_copy_is_queued_and_holds_its_source(gpu):
    side = em.cuda.Stream()
    host = em.arange(1 << 20, dtype=em.float32).pin_memory()
    src = host._data
    _spin(side)
    with em.cuda.stream(side):
        dev = host.to("cuda", non_blocking=True)
    assert in_flight(gpu).holds(src)            # queued behind the spinning kernel
    del host
    side.synchronize()
    assert not in_flight(gpu).holds(src)
    np.testing.assert_array_equal(dev.cpu().numpy(), np.arange(1 << 20, dtype=np.float32))


def test_pageable_copy_is_synchronous(gpu):
    side = em.cuda.Stream()
    host = em.arange(1 << 16, dtype=em.float32)
    _spin(side, 20)
    with em.cuda.stream(side):
        dev = host.to("cuda", non_blocking=True)
    assert not in_flight(gpu).holds(host._data)
    side.synchronize()
    assert dev.cpu().tolist()[:3] == [0.0, 1.0, 2.0]


def test_non_blocking_device_to_host_is_pinned(gpu):
    side = em.cuda.Stream()
    d = em.arange(1 << 16, dtype=em.float32, device="cuda")
    em.cuda.synchronize()
    _spin(side)
    with em.cuda.stream(side):
        h = d.to("cpu", non_blocking=True)
    assert h.is_pinned() and _is_page_locked(h._data) and in_flight(gpu).holds(d._data)
    side.synchronize()
    assert h.tolist()[:3] == [0.0, 1.0, 2.0] and not in_flight(gpu).holds(d._data)


def test_record_stream_keeps_memory_until_the_stream_is_done(gpu):
    side = em.cuda.Stream()
    t = em.ones(1 << 16, device="cuda")
    arr = t._data
    _spin(side)
    t.record_stream(side)
    assert not in_flight(gpu).holds(arr)       # nothing held while the tensor lives
    del t
    assert in_flight(gpu).holds(arr)           # the side stream may still read it
    side.synchronize()
    assert not in_flight(gpu).holds(arr)


def test_side_stream_prefetch_pattern(gpu):
    side = em.cuda.Stream()
    batches = [em.full((256, 256), float(i)).pin_memory() for i in range(4)]
    total = em.zeros(256, 256, device="cuda")
    for b in batches:
        with em.cuda.stream(side):
            x = b.to("cuda", non_blocking=True)
        em.cuda.current_stream().wait_stream(side)
        x.record_stream(em.cuda.current_stream())
        total = total + x
    assert float(total[0, 0].item()) == 6.0
