"""The eager-composite wrapper's exit for small calls: the size test comes first (inlined for
positional calls), before any eligibility check or key; the threshold is unchanged."""
import pytest

import ember
import ember.nn.functional as F
from ember.codegen import eager_composite as ec


class _Reached(Exception):
    pass


def _boom(*a, **k):
    raise _Reached


@pytest.fixture
def trap(monkeypatch):
    monkeypatch.setattr(ec, "_key", _boom)
    monkeypatch.setattr(ec, "_eligible", lambda: True)


def test_small_positional_and_keyword_calls_never_build_a_key(trap):
    x = ember.randn(128, 10, requires_grad=True)
    y = ember.randint(0, 10, (128,))
    F.cross_entropy(x, y).backward()
    F.cross_entropy(x, target=y)
    F.relu(ember.randn(128, 512))
    F.relu(input=ember.randn(128, 512))
    F.gelu(ember.randn(8, 8))


def test_threshold_is_inclusive_and_read_at_call_time(trap, monkeypatch):
    monkeypatch.setattr(ec, "MIN_ELEMENTS", 64)
    F.gelu(ember.randn(7, 9))                 # 63 elements: composite
    with pytest.raises(_Reached):
        F.gelu(ember.randn(8, 8))             # 64: the fast path's key
    with pytest.raises(_Reached):
        F.gelu(input=ember.randn(8, 8))
    with pytest.raises(_Reached):             # a large second positional tensor counts too
        F.cross_entropy(ember.randn(1, 10), ember.randn(1, 10).softmax(-1).expand(8, 10))


def test_per_function_min_elements(trap, monkeypatch):
    monkeypatch.setattr(F.relu, "min_elements", 16)
    F.relu(ember.randn(3, 5))
    with pytest.raises(_Reached):
        F.relu(ember.randn(4, 4))
    monkeypatch.setattr(F.relu, "min_elements", None)
    monkeypatch.setattr(ec, "MIN_ELEMENTS", 16)
    with pytest.raises(_Reached):
        F.relu(ember.randn(4, 4))
