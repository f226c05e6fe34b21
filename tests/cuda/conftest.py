"""The ``fake_cuda`` fixture: the CPU stand-in of a CUDA device for one test.

It sets ``EMBER_FAKE_CUDA`` and makes the backend probe again, and on teardown removes
both, so no test outside the ones asking for it ever sees a ``cuda`` device.
"""
import pytest

from ember.device.base import _backends, reset_cuda_backend


@pytest.fixture
def fake_cuda(monkeypatch):
    """The stand-in's backend (``EMBER_FAKE_CUDA=1``); ``fake_cuda.devices(n)`` for n."""
    reset_cuda_backend()
    monkeypatch.setenv("EMBER_FAKE_CUDA", "1")
    from ember.device.base import cuda_backend
    be, why = cuda_backend()
    assert be is not None and be.is_fake, why
    yield be
    monkeypatch.delenv("EMBER_FAKE_CUDA", raising=False)
    reset_cuda_backend()
    assert "cuda" not in _backends


@pytest.fixture
def fake_cuda2(monkeypatch):
    """The stand-in with two devices (``EMBER_FAKE_CUDA=2``)."""
    reset_cuda_backend()
    monkeypatch.setenv("EMBER_FAKE_CUDA", "2")
    from ember.device.base import cuda_backend
    be, _ = cuda_backend()
    yield be
    monkeypatch.delenv("EMBER_FAKE_CUDA", raising=False)
    reset_cuda_backend()
