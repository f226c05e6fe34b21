"""The ``fake_cuda`` fixtures: the CPU stand-in of a CUDA device for one test.

``fake_cuda`` is the *strict* stand-in (``EMBER_FAKE_CUDA_STRICT=1``): its arrays refuse
what CuPy's refuse (``np.asarray`` of a device array, host arrays mixed into device ops,
``.ctypes``) and it has no host kernels, so device code runs the paths a GPU runs and a
NumPy-only shortcut fails here as it would on a GPU (``ember/device/cuda_strict.py``).
``plain_fake_cuda`` is the plain stand-in (NumPy arrays, Ember's C kernels), for the tests
of that mode itself. Each sets the variables, makes the backend probe again, and on
teardown removes both, so no test outside the ones asking for it sees a ``cuda`` device.
"""
import pytest

from ember.device.base import _backends, reset_cuda_backend


def _stand_in(monkeypatch, count: int, strict: bool):
    reset_cuda_backend()
    monkeypatch.setenv("EMBER_FAKE_CUDA", str(count))
    monkeypatch.setenv("EMBER_FAKE_CUDA_STRICT", "1" if strict else "0")
    from ember.device.base import cuda_backend
    be, why = cuda_backend()
    assert be is not None and be.is_fake and be.runtime.strict == strict, why
    return be


def _gone(monkeypatch):
    monkeypatch.delenv("EMBER_FAKE_CUDA", raising=False)
    monkeypatch.delenv("EMBER_FAKE_CUDA_STRICT", raising=False)
    reset_cuda_backend()
    assert "cuda" not in _backends


@pytest.fixture
def fake_cuda(monkeypatch):
    """The strict stand-in's backend (one device)."""
    yield _stand_in(monkeypatch, 1, True)
    _gone(monkeypatch)


@pytest.fixture
def plain_fake_cuda(monkeypatch):
    """The plain stand-in's backend (``EMBER_FAKE_CUDA=1`` alone: NumPy arrays)."""
    yield _stand_in(monkeypatch, 1, False)
    _gone(monkeypatch)


@pytest.fixture
def fake_cuda2(monkeypatch):
    """The strict stand-in with two devices (``EMBER_FAKE_CUDA=2``)."""
    yield _stand_in(monkeypatch, 2, True)
    _gone(monkeypatch)
