"""Fixtures shared by the eager tests."""
import pytest

import ember.nn.functional as F
from ember.codegen import eager_composite as ec


@pytest.fixture
def every_conv_call_compiled(monkeypatch):
    """Every eager ``F.conv2d`` call runs its compiled form, from the first call, with a
    cache holding only this test's graphs."""
    monkeypatch.setattr(ec, "MIN_ELEMENTS", 0)
    monkeypatch.setattr(ec, "WARMUP", 0)
    F.conv2d._eager_cache.clear()
    prev = ec.set_enabled(True)
    yield
    ec.set_enabled(prev)
