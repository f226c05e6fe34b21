"""A random draw from an ``ember.Generator`` created inside a compiled function: eager
seeds a fresh generator at every call (same numbers each time); a graph that drew on from
the trace-time generator would give new numbers, so the draw is a graph break."""
import numpy as np
import pytest

import ember as em
from ember.ops import random_dists as rd


@pytest.mark.parametrize("draw", [
    lambda x, g: em.randn(3, generator=g) + x,                    # a factory (random node)
    lambda x, g: rd._standard_gamma(x.abs() + 1, generator=g),    # a random primitive
], ids=["randn", "standard_gamma"])
def test_local_generator_matches_eager_at_every_call(draw):
    def f(x):
        return draw(x, em.Generator().manual_seed(0))
    x = em.ones(3)
    want = f(x).numpy()
    cf = em.compile(f)
    with pytest.warns(UserWarning, match="graph break"):
        np.testing.assert_array_equal(cf(x).numpy(), want)
    for _ in range(2):
        np.testing.assert_array_equal(cf(x).numpy(), want)
    (brk,) = cf.explain().breaks
    assert "Generator created inside the compiled function" in str(brk)


def test_generator_from_outside_is_still_captured():
    g = em.Generator().manual_seed(0)
    cf = em.compile(lambda x: em.randn(3, generator=g) + x)
    x = em.zeros(3)
    got = [cf(x).numpy() for _ in range(3)]
    g.manual_seed(0)
    want = [em.randn(3, generator=g).numpy() for _ in range(3)]
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    assert not cf.explain().breaks and cf.explain().captures[-1].randoms >= 1
