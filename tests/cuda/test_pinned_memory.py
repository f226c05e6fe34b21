"""Pinned memory, ``non_blocking`` copies and ``record_stream`` on the CPU stand-in.

The stand-in copies synchronously, but the bookkeeping is the real backend's: pinned
flags on storages, an event recorded on the current stream after each asynchronous copy,
and the copy's buffers held until that event completes. Events here are controllable
fakes, so "the GPU has not finished yet" can be tested.
"""
import collections
import gc
import weakref

import numpy as np
import pytest

import ember as em
from ember.device.cuda_copy import in_flight


class _Event:
    """An event the test completes by hand; records the stream it was recorded on."""

    def __init__(self):
        self.done = False
        self.stream = None

    def synchronize(self):
        self.done = True


@pytest.fixture
def events(fake_cuda, monkeypatch):
    made = []

    def new_event(enable_timing, blocking):
        made.append(_Event())
        return made[-1]

    def record(ev, raw_stream):
        ev.stream = raw_stream
    monkeypatch.setattr(fake_cuda.runtime, "new_event", new_event)
    monkeypatch.setattr(fake_cuda.runtime, "record", record)
    return made


def test_pin_memory_marks_the_storage_and_its_views(fake_cuda):
    x = em.arange(6.0).reshape(2, 3)
    p = x.pin_memory()
    assert p is not x and p.is_pinned() and not x.is_pinned()
    assert p[1].is_pinned() and p.t().is_pinned() and p.view(-1).is_pinned()
    assert p.pin_memory() is p and p.tolist() == x.tolist()
    assert not p.clone().is_pinned()
    with pytest.raises(RuntimeError, match="only CPU tensors can be pinned"):
        em.ones(2, device="cuda").pin_memory()


def test_non_blocking_copy_from_pinned_memory_holds_the_buffer_until_done(events, fake_cuda):
    host = em.arange(4.0).pin_memory()
    src = host._data
    y = host.to("cuda", non_blocking=True)
    assert y.device.type == "cuda" and len(events) == 1
    assert in_flight(fake_cuda).holds(src)            # the GPU may still be reading it
    del host
    events[0].done = True
    assert not in_flight(fake_cuda).holds(src) and len(in_flight(fake_cuda)) == 0
    assert y.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]


def test_pageable_or_blocking_copies_are_synchronous(events, fake_cuda):
    em.arange(3.0).to("cuda", non_blocking=True)       # not pinned: synchronous
    em.arange(3.0).pin_memory().to("cuda")               # blocking
    em.arange(3.0).cuda(non_blocking=False)
    assert events == [] and len(in_flight(fake_cuda)) == 0


def test_copies_go_on_the_current_stream(events, fake_cuda):
    side = em.cuda.Stream()
    batch = em.ones(2, 2).pin_memory()
    with em.cuda.stream(side):
        x = batch.to("cuda", non_blocking=True)
    y = batch.to("cuda", non_blocking=True)
    assert events[0].stream is side._raw and events[1].stream is not side._raw
    em.cuda.current_stream().wait_stream(side)
    x.record_stream(em.cuda.current_stream())
    assert (x + y).cpu().tolist() == [[2.0, 2.0], [2.0, 2.0]]


def test_non_blocking_device_to_host_is_pinned_and_holds_the_source(events, fake_cuda):
    d = em.arange(3.0, device="cuda")
    h = d.to("cpu", non_blocking=True)
    assert h.device.type == "cpu" and h.is_pinned()
    assert in_flight(fake_cuda).holds(d._data)
    events[-1].synchronize()
    assert not in_flight(fake_cuda).holds(d._data) and h.tolist() == [0.0, 1.0, 2.0]
    assert not d.cpu().is_pinned()


def test_record_stream_delays_reuse_until_the_stream_is_done(events, fake_cuda):
    s = em.cuda.Stream()
    t = em.ones(1000, device="cuda")
    ref = weakref.ref(t._data)
    t.record_stream(s)
    assert events == []                          # nothing recorded while the tensor lives
    del t
    gc.collect()
    assert ref() is not None and events[0].stream is s._raw
    events[0].done = True
    in_flight(fake_cuda).prune()
    gc.collect()
    assert ref() is None


def test_record_stream_errors(fake_cuda):
    with pytest.raises(RuntimeError, match="record_stream: expected a CUDA tensor, got one on "
                                           "cpu"):
        em.ones(1).record_stream(em.cuda.current_stream())
    with pytest.raises(TypeError, match="expected an ember.cuda.Stream, got str"):
        em.ones(1, device="cuda").record_stream("s")


def test_non_blocking_copy_keeps_autograd(fake_cuda):
    x = em.ones(3, requires_grad=True)
    y = x.to("cuda", non_blocking=True)
    (y * 2).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0, 2.0] and x.grad.device.type == "cpu"


Pair = collections.namedtuple("Pair", "x y")


class _Nested(em.utils.data.Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return {"x": em.full((2,), float(i)), "pair": Pair(em.tensor(i), [em.tensor(-i)]),
                "label": "s"}


@pytest.mark.parametrize("workers", [0, 1])
def test_dataloader_pins_every_tensor_of_nested_batches(fake_cuda, workers):
    loader = em.utils.data.DataLoader(_Nested(), batch_size=2, pin_memory=True,
                                      num_workers=workers)
    for b in loader:
        assert b["x"].is_pinned() and isinstance(b["pair"], Pair)
        assert b["pair"].x.is_pinned() and b["pair"].y[0].is_pinned()
        assert b["label"] == ["s", "s"]
        x = b["x"].to("cuda", non_blocking=True)
        np.testing.assert_array_equal(x.cpu().numpy()[:, 0], b["x"].numpy()[:, 0])


def test_dataloader_pin_memory_device(fake_cuda):
    ds = em.utils.data.TensorDataset(em.arange(4.0))
    (b,) = next(iter(em.utils.data.DataLoader(ds, batch_size=2, pin_memory=True,
                                              pin_memory_device="cuda:0")))
    assert b.is_pinned()
    with pytest.raises(ValueError, match=r"pin_memory_device='cpu' is not a CUDA device; "
                                         r"valid: '' \(default\), 'cuda'"):
        em.utils.data.DataLoader(ds, pin_memory=True, pin_memory_device="cpu")
